// SPDX-License-Identifier: GPL-2.0

//! RC queue pairs, typed work requests and work completions.
//!
//! A [`Qp`] is created on a CM id ([`super::cm::CmId::create_qp`]) and destroyed with it. Work
//! requests are plain Rust values built with the [`SendWr`] and [`RecvWr`] builders; they are
//! translated into the C structures (`ib_send_wr`, `ib_rdma_wr`, `ib_reg_wr`, `ib_recv_wr`) on
//! the stack for the duration of [`Qp::post_send`] / [`Qp::post_recv`], as providers copy work
//! requests when they are posted. A work request borrows its SGEs, as the C one points at its
//! `sg_list`: it stays a few words long whatever their number, so code that builds many of them
//! keeps small stack frames (a post runs on the caller's stack, down into the provider).
//!
//! Every SGE and `REG_MR` must name a buffer or MR attached to the QP (see [`super::mem`] for
//! why); posting checks that and fails with `EINVAL` for the offending work request.
//!
//! A QP created with a shared receive queue ([`super::srq::Srq`]) takes its receives from it
//! and has no receive queue of its own ([`Qp::post_recv`] fails).

use super::{
    cq::Cq,
    mem::{Access, DmaBuf, FrMr, Pd},
    srq::Srq,
};
use crate::{
    alloc::{flags::GFP_KERNEL, KVec},
    bindings,
    error::{Error, Result},
    new_mutex,
    prelude::*,
    str::CStr,
    sync::{Arc, Mutex},
};
use core::{mem::MaybeUninit, ptr::NonNull};

/// The most SGEs a work request built here can carry: more than the iWARP software providers
/// allow (siw 6, rsiw 8), so that a consumer can also build a request one SGE over such a
/// device's limit, to see it refused.
pub const MAX_SGE: usize = 16;

/// The most work requests handed to the provider in one `ib_post_send`/`ib_post_recv` call;
/// longer lists are posted in batches of this size. With [`MAX_SGE`], it bounds the C SGE
/// arrays a post builds on the stack (`POST_BATCH * MAX_SGE` of 16 octets: 1 KiB).
pub const POST_BATCH: usize = 4;

/// The sizes of a QP's queues, asked for at creation and granted by the provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send-queue work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Largest inline send, in bytes.
    pub max_inline_data: u32,
}

/// What an SGE points into.
#[derive(Clone, Copy)]
enum SgeSrc {
    Buf(*const DmaBuf),
    Mr(*const FrMr),
}

/// A scatter/gather element: a piece of a [`DmaBuf`] (with the PD's local DMA lkey) or of the
/// current mapping of an [`FrMr`] (with its lkey).
#[derive(Clone, Copy)]
pub struct Sge {
    addr: u64,
    len: u32,
    lkey: u32,
    src: SgeSrc,
}

impl Sge {
    /// The SGE for `[offset, offset + len)` of `buf`, which must lie in one chunk of it.
    pub fn from_buf(buf: &DmaBuf, offset: usize, len: usize) -> Result<Sge> {
        let pieces = buf.pieces(offset, len, 1)?;
        match pieces.as_slice() {
            [(addr, len)] => Ok(Sge {
                addr: *addr,
                len: *len,
                lkey: buf.pd().local_dma_lkey(),
                src: SgeSrc::Buf(buf),
            }),
            _ => Err(EINVAL),
        }
    }

    /// The SGEs for `[offset, offset + len)` of `buf`, split into `parts` nearly equal parts and
    /// at chunk boundaries. A zero `len` gives one zero-length SGE.
    pub fn list(buf: &DmaBuf, offset: usize, len: usize, parts: usize) -> Result<KVec<Sge>> {
        let pieces = buf.pieces(offset, len, parts)?;
        let mut out = KVec::with_capacity(pieces.len(), GFP_KERNEL)?;
        for (addr, len) in pieces.iter() {
            out.push(
                Sge {
                    addr: *addr,
                    len: *len,
                    lkey: buf.pd().local_dma_lkey(),
                    src: SgeSrc::Buf(buf),
                },
                GFP_KERNEL,
            )?;
        }
        Ok(out)
    }

    /// The SGE for `[offset, offset + len)` of `mr`'s current mapping, with its lkey (as
    /// iWARP READ sinks need).
    pub fn from_mr(mr: &FrMr, offset: usize, len: usize) -> Result<Sge> {
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        if u64::try_from(end)? > mr.length() {
            return Err(EINVAL);
        }
        Ok(Sge {
            addr: mr
                .iova()
                .checked_add(u64::try_from(offset)?)
                .ok_or(EINVAL)?,
            len: len.try_into()?,
            lkey: mr.lkey(),
            src: SgeSrc::Mr(mr),
        })
    }

    /// The length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the SGE is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Sets the SGEs of a work request that has none yet (`EINVAL` if it has, or beyond
/// [`MAX_SGE`]).
fn set_sges<'a>(list: &mut &'a [Sge], sges: &'a [Sge]) -> Result {
    if !list.is_empty() || sges.len() > MAX_SGE {
        return Err(EINVAL);
    }
    *list = sges;
    Ok(())
}

/// Flags of a send-queue work request (`enum ib_send_flags`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendFlags(i32);

impl SendFlags {
    /// Generate a completion (`IB_SEND_SIGNALED`).
    pub const SIGNALED: SendFlags = SendFlags(bindings::ib_send_flags_IB_SEND_SIGNALED);
    /// Solicit an event at the receiver (`IB_SEND_SOLICITED`).
    pub const SOLICITED: SendFlags = SendFlags(bindings::ib_send_flags_IB_SEND_SOLICITED);
    /// Copy the data at post time (`IB_SEND_INLINE`).
    pub const INLINE: SendFlags = SendFlags(bindings::ib_send_flags_IB_SEND_INLINE);
    /// Wait for earlier RDMA READs first (`IB_SEND_FENCE`).
    pub const FENCE: SendFlags = SendFlags(bindings::ib_send_flags_IB_SEND_FENCE);

    /// Whether all of `other`'s flags are set.
    pub fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// The operation of a [`SendWr`].
#[derive(Clone, Copy)]
enum SendOp<'a> {
    Send,
    SendInv(u32),
    Write { addr: u64, rkey: u32 },
    Read { addr: u64, rkey: u32 },
    ReadInv { addr: u64, rkey: u32, inv: u32 },
    RegMr { mr: &'a FrMr, access: Access },
    LocalInv(u32),
}

/// A send-queue work request.
#[derive(Clone, Copy)]
pub struct SendWr<'a> {
    wr_id: u64,
    op: SendOp<'a>,
    flags: SendFlags,
    sges: &'a [Sge],
}

impl<'a> SendWr<'a> {
    fn new(wr_id: u64, op: SendOp<'a>) -> Self {
        SendWr {
            wr_id,
            op,
            flags: SendFlags::default(),
            sges: &[],
        }
    }

    /// `IB_WR_SEND`: the SGEs' data goes into the peer's next receive buffer.
    pub fn send(wr_id: u64) -> Self {
        Self::new(wr_id, SendOp::Send)
    }

    /// `IB_WR_SEND_WITH_INV`: a send that also invalidates `rkey` at the peer.
    pub fn send_inv(wr_id: u64, rkey: u32) -> Self {
        Self::new(wr_id, SendOp::SendInv(rkey))
    }

    /// `IB_WR_RDMA_WRITE` of the SGEs' data to the peer's `remote_addr` under `rkey`.
    pub fn write(wr_id: u64, remote_addr: u64, rkey: u32) -> Self {
        Self::new(
            wr_id,
            SendOp::Write {
                addr: remote_addr,
                rkey,
            },
        )
    }

    /// `IB_WR_RDMA_READ` from the peer's `remote_addr` under `rkey` into the SGE (iWARP allows
    /// one, and its sink should be an MR with remote write access, see [`Sge::from_mr`]).
    pub fn read(wr_id: u64, remote_addr: u64, rkey: u32) -> Self {
        Self::new(
            wr_id,
            SendOp::Read {
                addr: remote_addr,
                rkey,
            },
        )
    }

    /// `IB_WR_RDMA_READ_WITH_INV`: a read that invalidates the local key `inv` (the sink MR's)
    /// when it completes.
    pub fn read_inv(wr_id: u64, remote_addr: u64, rkey: u32, inv: u32) -> Self {
        Self::new(
            wr_id,
            SendOp::ReadInv {
                addr: remote_addr,
                rkey,
                inv,
            },
        )
    }

    /// `IB_WR_REG_MR`: registers `mr`'s current mapping ([`FrMr::map`]) under its current key
    /// ([`FrMr::rotate_key`]) with `access`.
    pub fn reg_mr(wr_id: u64, mr: &'a FrMr, access: Access) -> Self {
        Self::new(wr_id, SendOp::RegMr { mr, access })
    }

    /// `IB_WR_LOCAL_INV`: invalidates the local key `key`.
    pub fn local_inv(wr_id: u64, key: u32) -> Self {
        Self::new(wr_id, SendOp::LocalInv(key))
    }

    /// Sets the one SGE (`EINVAL` if the request has SGEs already).
    pub fn sge(self, sge: &'a Sge) -> Result<Self> {
        self.sges(core::slice::from_ref(sge))
    }

    /// Sets the SGEs (`EINVAL` if the request has SGEs already, or beyond [`MAX_SGE`]).
    pub fn sges(mut self, sges: &'a [Sge]) -> Result<Self> {
        set_sges(&mut self.sges, sges)?;
        Ok(self)
    }

    /// Adds send flags.
    pub fn flags(mut self, flags: SendFlags) -> Self {
        self.flags = self.flags | flags;
        self
    }

    /// Adds [`SendFlags::SIGNALED`].
    pub fn signaled(self) -> Self {
        self.flags(SendFlags::SIGNALED)
    }

    /// The total length of the SGEs.
    pub fn len(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.len)).sum()
    }

    /// Whether the work request carries no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receive work request.
#[derive(Clone, Copy)]
pub struct RecvWr<'a> {
    wr_id: u64,
    pub(super) sges: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive with no SGEs yet (a zero-length receive until SGEs are added).
    pub fn new(wr_id: u64) -> Self {
        RecvWr { wr_id, sges: &[] }
    }

    /// Sets the one SGE (`EINVAL` if the request has SGEs already).
    pub fn sge(self, sge: &'a Sge) -> Result<Self> {
        self.sges(core::slice::from_ref(sge))
    }

    /// Sets the SGEs (`EINVAL` if the request has SGEs already, or beyond [`MAX_SGE`]).
    pub fn sges(mut self, sges: &'a [Sge]) -> Result<Self> {
        set_sges(&mut self.sges, sges)?;
        Ok(self)
    }
}

/// A failed post: the index (in the list passed) of the first work request the provider or the
/// checks here refused, and why. Work requests before it were posted; it and later ones were
/// not.
#[derive(Clone, Copy, Debug)]
pub struct PostError {
    /// Index of the refused work request.
    pub index: usize,
    /// The error.
    pub error: Error,
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        e.error
    }
}

/// The status of a work completion (`enum ib_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// `IB_WC_SUCCESS`.
    Success,
    /// `IB_WC_WR_FLUSH_ERR`: flushed because the QP went to the error state.
    FlushErr,
    /// `IB_WC_LOC_LEN_ERR`: the receive buffer was too small, or a length was bad.
    LocLenErr,
    /// `IB_WC_LOC_PROT_ERR`: a local key or access check failed.
    LocProtErr,
    /// `IB_WC_REM_ACCESS_ERR`: the peer refused a remote key or address.
    RemAccessErr,
    /// Any other status (`IB_WC_*` value).
    Other(u32),
}

pub use crate::rdma::verbs::WcOpcode;

/// A work completion (`struct ib_wc`).
#[repr(transparent)]
pub struct Wc(bindings::ib_wc);

impl Default for Wc {
    fn default() -> Self {
        // SAFETY: All-zero is a valid `ib_wc` (plain integers, a NULL QP pointer).
        Wc(unsafe { core::mem::zeroed() })
    }
}

impl Wc {
    /// The `wr_id` of the work request this completes.
    pub fn wr_id(&self) -> u64 {
        // SAFETY: CQs here are polled by the consumer, so the union holds `wr_id`.
        unsafe { self.0.__bindgen_anon_1.wr_id }
    }

    /// The status.
    pub fn status(&self) -> WcStatus {
        match self.0.status {
            bindings::ib_wc_status_IB_WC_SUCCESS => WcStatus::Success,
            bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR => WcStatus::FlushErr,
            bindings::ib_wc_status_IB_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
            bindings::ib_wc_status_IB_WC_LOC_PROT_ERR => WcStatus::LocProtErr,
            bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
            s => WcStatus::Other(s),
        }
    }

    /// Whether the status is success.
    pub fn is_ok(&self) -> bool {
        self.status() == WcStatus::Success
    }

    /// The status as the core names it (`ib_wc_status_msg`).
    pub fn status_msg(&self) -> &'static CStr {
        // SAFETY: `ib_wc_status_msg` returns a static string for any value.
        unsafe { CStr::from_char_ptr(bindings::ib_wc_status_msg(self.0.status)) }
    }

    /// The raw `enum ib_wc_status` value.
    pub fn status_raw(&self) -> u32 {
        self.0.status
    }

    /// The operation. Only meaningful for successful completions.
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.0.opcode)
    }

    /// The number of bytes received (receives) or transferred (some providers, READs).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// Whether this completes work of `qp` (an SRQ's receives complete on the QP that took
    /// them).
    pub fn is_from(&self, qp: &Qp) -> bool {
        core::ptr::eq(self.0.qp, qp.as_raw())
    }

    /// The rkey the peer invalidated with `SEND_WITH_INV`, if this receive carried one
    /// (`IB_WC_WITH_INVALIDATE`).
    pub fn invalidated_rkey(&self) -> Option<u32> {
        // CAST: The flag is a small positive bit.
        if self.0.wc_flags & bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32 != 0 {
            // SAFETY: With `IB_WC_WITH_INVALIDATE` the union holds `invalidate_rkey`.
            Some(unsafe { self.0.ex.invalidate_rkey })
        } else {
            None
        }
    }
}

/// Something attached to a QP: kept alive until the QP is destroyed.
pub(super) enum Attached {
    Buf(Arc<DmaBuf>),
    Mr(Arc<FrMr>),
}

/// A reliable-connected queue pair created on a CM id (`rdma_create_qp`).
///
/// # Invariants
///
/// `id` is a live CM id whose `qp` is `qp`, created on `pd` with `send_cq`/`recv_cq`; the QP is
/// destroyed (`rdma_destroy_qp`) only in `drop`, before the id.
#[pin_data(PinnedDrop)]
pub struct Qp {
    id: NonNull<bindings::rdma_cm_id>,
    qp: NonNull<bindings::ib_qp>,
    pd: Arc<Pd>,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    srq: Option<Arc<Srq>>,
    caps: QpCaps,
    #[pin]
    attached: Mutex<KVec<Attached>>,
}

// SAFETY: Posting is serialised by the provider; the attachment list is under a lock.
unsafe impl Send for Qp {}
// SAFETY: See above.
unsafe impl Sync for Qp {}

impl Qp {
    /// Creates the QP of `id`, taking its receives from `srq` if given.
    ///
    /// # Safety
    ///
    /// `id` must be a live CM id without a QP, bound to `pd`'s device, that outlives the
    /// returned QP.
    pub(crate) unsafe fn create(
        id: NonNull<bindings::rdma_cm_id>,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        srq: Option<&Arc<Srq>>,
        caps: QpCaps,
        signal_all: bool,
    ) -> Result<Pin<KBox<Qp>>> {
        if srq.is_some_and(|s| s.pd().device().as_raw() != pd.device().as_raw()) {
            return Err(EINVAL);
        }
        // SAFETY: All-zero is a valid `ib_qp_init_attr` (no handler, no SRQ).
        let mut attr: bindings::ib_qp_init_attr = unsafe { core::mem::zeroed() };
        attr.send_cq = send_cq.as_raw();
        attr.recv_cq = recv_cq.as_raw();
        attr.srq = srq.map_or(core::ptr::null_mut(), |s| s.as_raw());
        attr.cap.max_send_wr = caps.max_send_wr;
        attr.cap.max_recv_wr = caps.max_recv_wr;
        attr.cap.max_send_sge = caps.max_send_sge;
        attr.cap.max_recv_sge = caps.max_recv_sge;
        attr.cap.max_inline_data = caps.max_inline_data;
        attr.sq_sig_type = if signal_all {
            bindings::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            bindings::ib_sig_type_IB_SIGNAL_REQ_WR
        };
        attr.qp_type = bindings::ib_qp_type_IB_QPT_RC;
        // SAFETY: The caller guarantees `id` is live and has no QP; `pd`, the CQs and the SRQ
        // are valid (the SRQ of `pd`'s device).
        crate::error::to_result(unsafe {
            bindings::rdma_create_qp(id.as_ptr(), pd.as_raw(), &mut attr)
        })?;
        // SAFETY: `rdma_create_qp` succeeded, so `id->qp` is the new QP.
        let qp = match NonNull::new(unsafe { (*id.as_ptr()).qp }) {
            Some(qp) => qp,
            None => {
                // SAFETY: Undo the creation of whatever the core made.
                unsafe { bindings::rdma_destroy_qp(id.as_ptr()) };
                return Err(EINVAL);
            }
        };
        let granted = QpCaps {
            max_send_wr: attr.cap.max_send_wr,
            max_recv_wr: attr.cap.max_recv_wr,
            max_send_sge: attr.cap.max_send_sge,
            max_recv_sge: attr.cap.max_recv_sge,
            max_inline_data: attr.cap.max_inline_data,
        };
        // INVARIANT: `id->qp` is `qp`, created just now on `pd` with these CQs and SRQ. If the
        // allocation below fails, `drop` of the partly built value cannot run, so destroy here.
        let init = pin_init!(Qp {
            id,
            qp,
            pd: pd.clone(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            srq: srq.cloned(),
            caps: granted,
            attached <- new_mutex!(KVec::new(), "Qp::attached"),
        });
        let qp = KBox::pin_init(init, GFP_KERNEL).inspect_err(|_| {
            // SAFETY: The QP was created above and nothing else refers to it.
            unsafe { bindings::rdma_destroy_qp(id.as_ptr()) };
        })?;
        send_cq.add_user();
        if !Arc::ptr_eq(send_cq, recv_cq) {
            recv_cq.add_user();
        }
        Ok(qp)
    }

    /// Returns the raw `ib_qp` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_qp {
        self.qp.as_ptr()
    }

    /// The queue sizes the provider granted.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: By the type invariant the QP is valid; `qp_num` is fixed at creation.
        unsafe { (*self.as_raw()).qp_num }
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &Arc<Cq> {
        &self.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &Arc<Cq> {
        &self.recv_cq
    }

    /// The shared receive queue the QP takes its receives from, if any.
    pub fn srq(&self) -> Option<&Arc<Srq>> {
        self.srq.as_ref()
    }

    /// Lets work requests use `buf` (of this QP's PD); keeps it alive until the QP is destroyed.
    pub fn attach_buf(&self, buf: &Arc<DmaBuf>) -> Result {
        self.attach(buf.pd(), Attached::Buf(buf.clone()))
    }

    /// Lets work requests use `mr` (of this QP's PD); keeps it alive until the QP is destroyed.
    pub fn attach_mr(&self, mr: &Arc<FrMr>) -> Result {
        self.attach(mr.pd(), Attached::Mr(mr.clone()))
    }

    fn attach(&self, pd: &Arc<Pd>, item: Attached) -> Result {
        if !Arc::ptr_eq(pd, &self.pd) {
            return Err(EINVAL);
        }
        let mut a = self.attached.lock();
        let known = a.iter().any(|x| match (x, &item) {
            (Attached::Buf(x), Attached::Buf(y)) => Arc::ptr_eq(x, y),
            (Attached::Mr(x), Attached::Mr(y)) => Arc::ptr_eq(x, y),
            _ => false,
        });
        if !known {
            a.push(item, GFP_KERNEL)?;
        }
        Ok(())
    }

    /// Posts send-queue work requests, in order. Must be called in process context (it takes
    /// a mutex to check attachments). On failure, reports the first refused work request.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let mut base = 0;
        for batch in wrs.chunks(POST_BATCH) {
            self.post_send_batch(batch).map_err(|e| PostError {
                index: base + e.index,
                error: e.error,
            })?;
            base += batch.len();
        }
        Ok(())
    }

    fn post_send_batch(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        // One C work request: every kind starts with `ib_send_wr`.
        #[repr(C)]
        union CWr {
            rdma: bindings::ib_rdma_wr,
            reg: bindings::ib_reg_wr,
        }
        let mut cwrs: [MaybeUninit<CWr>; POST_BATCH] =
            [const { MaybeUninit::uninit() }; POST_BATCH];
        let mut csges = [[bindings::ib_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; MAX_SGE]; POST_BATCH];
        {
            let attached = self.attached.lock();
            for (i, wr) in wrs.iter().enumerate() {
                let fail = |error| PostError { index: i, error };
                check_sges(&attached, wr.sges).map_err(fail)?;
                if let SendOp::RegMr { mr, .. } = wr.op {
                    let ok = attached
                        .iter()
                        .any(|a| matches!(a, Attached::Mr(m) if core::ptr::eq(&**m, mr)));
                    if !ok {
                        return Err(fail(EINVAL));
                    }
                }
            }
        }
        let n = wrs.len();
        for (i, wr) in wrs.iter().enumerate() {
            let sg = csges.get_mut(i).ok_or(PostError {
                index: i,
                error: EINVAL,
            })?;
            for (c, s) in sg.iter_mut().zip(wr.sges) {
                *c = bindings::ib_sge {
                    addr: s.addr,
                    length: s.len,
                    lkey: s.lkey,
                };
            }
            // SAFETY: All-zero is a valid `ib_rdma_wr`/`ib_reg_wr` (NULL pointers, zero ints).
            let mut c: CWr = unsafe { core::mem::zeroed() };
            // SAFETY: Writing plain fields of the zeroed union member we then use.
            unsafe {
                let base = &mut c.rdma.wr;
                base.__bindgen_anon_1.wr_id = wr.wr_id;
                base.sg_list = if !wr.sges.is_empty() {
                    sg.as_mut_ptr()
                } else {
                    core::ptr::null_mut()
                };
                // CAST: At most `MAX_SGE` (`set_sges`).
                base.num_sge = wr.sges.len() as i32;
                base.send_flags = wr.flags.0;
                base.opcode = match wr.op {
                    SendOp::Send => bindings::ib_wr_opcode_IB_WR_SEND,
                    SendOp::SendInv(k) => {
                        base.ex.invalidate_rkey = k;
                        bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV
                    }
                    SendOp::Write { .. } => bindings::ib_wr_opcode_IB_WR_RDMA_WRITE,
                    SendOp::Read { .. } => bindings::ib_wr_opcode_IB_WR_RDMA_READ,
                    SendOp::ReadInv { inv, .. } => {
                        base.ex.invalidate_rkey = inv;
                        bindings::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV
                    }
                    SendOp::RegMr { .. } => bindings::ib_wr_opcode_IB_WR_REG_MR,
                    SendOp::LocalInv(k) => {
                        base.ex.invalidate_rkey = k;
                        bindings::ib_wr_opcode_IB_WR_LOCAL_INV
                    }
                };
                match wr.op {
                    SendOp::Write { addr, rkey }
                    | SendOp::Read { addr, rkey }
                    | SendOp::ReadInv { addr, rkey, .. } => {
                        c.rdma.remote_addr = addr;
                        c.rdma.rkey = rkey;
                    }
                    SendOp::RegMr { mr, access } => {
                        c.reg.mr = mr.as_raw();
                        c.reg.key = mr.rkey();
                        // CAST: Access flags are small positive bits.
                        c.reg.access = access.bits() as i32;
                    }
                    _ => {}
                }
            }
            if let Some(slot) = cwrs.get_mut(i) {
                slot.write(c);
            }
        }
        // Chain them.
        let first = cwrs.as_mut_ptr().cast::<CWr>();
        for i in 0..n {
            // SAFETY: Entries `0..n` were initialised above; `i + 1 < n` for the link.
            unsafe {
                let w = first.add(i);
                (*w).rdma.wr.next = if i + 1 < n {
                    core::ptr::addr_of_mut!((*first.add(i + 1)).rdma.wr)
                } else {
                    core::ptr::null_mut()
                };
            }
        }
        if n == 0 {
            return Ok(());
        }
        let mut bad: *const bindings::ib_send_wr = core::ptr::null();
        // SAFETY: The QP is valid; the chain of `n` work requests and their SGE arrays live on
        // this stack frame for the call; the buffers and MRs they name are attached to the QP.
        let r = unsafe {
            bindings::ib_post_send(
                self.as_raw(),
                core::ptr::addr_of!((*first).rdma.wr),
                &mut bad,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let index = (0..n)
            .position(|i| {
                // SAFETY: `i < n`: pointer arithmetic inside the array of `n` initialised entries.
                let wr = unsafe { core::ptr::addr_of!((*first.add(i)).rdma.wr) };
                core::ptr::eq(wr, bad)
            })
            .unwrap_or(0);
        Err(PostError {
            index,
            error: Error::from_errno(r),
        })
    }

    /// Posts receive work requests, in order. Same rules as [`Qp::post_send`].
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let mut base = 0;
        for batch in wrs.chunks(POST_BATCH) {
            self.post_recv_batch(batch).map_err(|e| PostError {
                index: base + e.index,
                error: e.error,
            })?;
            base += batch.len();
        }
        Ok(())
    }

    fn post_recv_batch(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        if wrs.is_empty() {
            return Ok(());
        }
        {
            let attached = self.attached.lock();
            for (i, wr) in wrs.iter().enumerate() {
                check_sges(&attached, wr.sges).map_err(|error| PostError { index: i, error })?;
            }
        }
        post_recv_chain(wrs, |first, bad| {
            // SAFETY: The QP is valid; the chain and its SGE arrays live for the call (see
            // `post_recv_chain`); the buffers they name are attached to the QP.
            unsafe { bindings::ib_post_recv(self.as_raw(), first, bad) }
        })
    }

    /// Drains the QP with the core's `ib_drain_qp`: moves it to the error state and returns when
    /// all its work has completed. With an SRQ, the core waits (up to 60 s) for the provider's
    /// `IB_EVENT_QP_LAST_WQE_REACHED` before it looks at the receive CQ.
    ///
    /// `ib_drain_qp` polls the CQs itself and calls the `ib_cqe` that each completion's
    /// `wr_cqe` names, which the work requests of this API (identified by a `wr_id`) do not
    /// have. So it is only offered where no completion of ours can reach it:
    ///
    /// - both CQs must be direct ([`Cq::new_direct`]; the core would wait forever for a CQ with
    ///   a completion handler) and used by this QP alone (`EINVAL` otherwise);
    /// - the device must be a soft-iWARP one (rsiw or the C siw, `EOPNOTSUPP` otherwise): they
    ///   complete every flushed work request within the `ib_modify_qp` that moves the QP to the
    ///   error state, which this does first, before polling both CQs empty.
    ///
    /// Those completions (the QP's work flushed or finished before the drain) are returned. The
    /// caller must not post to the QP or poll its CQs from another thread meanwhile.
    pub fn drain(&self) -> Result<KVec<Wc>> {
        let direct = |cq: &Cq| cq.is_direct() && cq.users() == 1;
        if !direct(&self.send_cq) || !direct(&self.recv_cq) {
            return Err(EINVAL);
        }
        // SAFETY: The QP and its device are valid; `ops.driver_id` is fixed at registration.
        let driver = unsafe { (*(*self.as_raw()).device).ops.driver_id };
        if driver != bindings::rdma_driver_id_RDMA_DRIVER_SIW {
            return Err(super::eopnotsupp());
        }
        // SAFETY: All-zero is a valid `ib_qp_attr`; only the state is used.
        let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
        attr.qp_state = bindings::ib_qp_state_IB_QPS_ERR;
        // SAFETY: The QP is valid; `attr` lives for the call.
        crate::error::to_result(unsafe {
            bindings::ib_modify_qp(
                self.as_raw(),
                &mut attr,
                // CAST: The mask bit is small and positive.
                bindings::ib_qp_attr_mask_IB_QP_STATE as i32,
            )
        })?;
        let mut done = KVec::new();
        let mut wcs: [Wc; 16] = core::array::from_fn(|_| Wc::default());
        for cq in [&self.send_cq, &self.recv_cq] {
            loop {
                let n = cq.poll(&mut wcs)?;
                for wc in wcs.iter().take(n) {
                    done.push(Wc(wc.0), GFP_KERNEL)?;
                }
                if n == 0 {
                    break;
                }
            }
        }
        // SAFETY: The QP is valid. Its CQs are direct, used by it alone and empty, and the
        // provider flushed all of its work already (see above), so the core's own polling sees
        // only the completions of the work requests it posts itself.
        unsafe { bindings::ib_drain_qp(self.as_raw()) };
        Ok(done)
    }
}

/// Checks that every SGE lies in an attached buffer or the mapping of an attached MR.
pub(super) fn check_sges(attached: &[Attached], sges: &[Sge]) -> Result {
    for s in sges {
        let ok = match s.src {
            SgeSrc::Buf(p) => attached.iter().any(|a| {
                matches!(a, Attached::Buf(b) if core::ptr::eq(&**b, p) && b.contains_dma(s.addr, s.len))
            }),
            SgeSrc::Mr(p) => attached.iter().any(|a| match a {
                Attached::Mr(m) if core::ptr::eq(&**m, p) => {
                    let end = s.addr.checked_add(u64::from(s.len));
                    let mend = m.iova().checked_add(m.length());
                    s.addr >= m.iova() && matches!((end, mend), (Some(e), Some(me)) if e <= me)
                }
                _ => false,
            }),
        };
        if !ok {
            return Err(EINVAL);
        }
    }
    Ok(())
}

/// Builds the C chain of receive work requests `wrs` (at most [`POST_BATCH`]) and their SGE
/// arrays on this stack frame and hands it to `post` (which returns the provider's result and
/// stores the refused work request in its second argument); maps a refused one to its index.
pub(super) fn post_recv_chain(
    wrs: &[RecvWr<'_>],
    post: impl FnOnce(*const bindings::ib_recv_wr, *mut *const bindings::ib_recv_wr) -> i32,
) -> Result<(), PostError> {
    let n = wrs.len();
    if n == 0 {
        return Ok(());
    }
    if n > POST_BATCH {
        return Err(PostError {
            index: POST_BATCH,
            error: EINVAL,
        });
    }
    let mut csges = [[bindings::ib_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; MAX_SGE]; POST_BATCH];
    // SAFETY: All-zero is a valid `ib_recv_wr`.
    let mut cwrs: [bindings::ib_recv_wr; POST_BATCH] = unsafe { core::mem::zeroed() };
    for ((wr, c), sg) in wrs.iter().zip(cwrs.iter_mut()).zip(csges.iter_mut()) {
        for (cs, s) in sg.iter_mut().zip(wr.sges) {
            *cs = bindings::ib_sge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey,
            };
        }
        c.__bindgen_anon_1.wr_id = wr.wr_id;
        c.sg_list = if !wr.sges.is_empty() {
            sg.as_mut_ptr()
        } else {
            core::ptr::null_mut()
        };
        // CAST: At most `MAX_SGE` (`set_sges`).
        c.num_sge = wr.sges.len() as i32;
    }
    let first = cwrs.as_mut_ptr();
    for i in 0..n {
        // SAFETY: `i < n <= POST_BATCH`.
        unsafe {
            (*first.add(i)).next = if i + 1 < n {
                first.add(i + 1)
            } else {
                core::ptr::null_mut()
            };
        }
    }
    let mut bad: *const bindings::ib_recv_wr = core::ptr::null();
    let r = post(first, &mut bad);
    if r == 0 {
        return Ok(());
    }
    let index = (0..n)
        .position(|i| {
            // SAFETY: `i < n`: pointer arithmetic inside the array of `n` entries.
            let wr = unsafe { first.add(i) };
            core::ptr::eq(wr, bad)
        })
        .unwrap_or(0);
    Err(PostError {
        index,
        error: Error::from_errno(r),
    })
}

#[pinned_drop]
impl PinnedDrop for Qp {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the id is live and its QP is ours. This flushes all
        // work; afterwards the attachments (dropped with `self`) are no longer used by the device.
        unsafe { bindings::rdma_destroy_qp(self.id.as_ptr()) };
        self.send_cq.remove_user();
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.remove_user();
        }
    }
}
