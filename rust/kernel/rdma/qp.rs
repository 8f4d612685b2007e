// SPDX-License-Identifier: GPL-2.0

//! Queue pairs of a provider: creation, references, state changes and work requests.
//!
//! A QP is core-allocated like a PD, but other contexts of the driver (receive softirq, transmit
//! work, connection manager, iw_cm) hold references to it. [`QpRef`] counts those references;
//! `destroy_qp` first lets the driver tear down ([`Driver::destroy_qp`]), then waits until no
//! reference remains before it drops the driver's data and returns, after which the core frees
//! the memory.

use super::{
    device::{Adapter, Device, Driver},
    mr::Mr,
    srq::Srq,
    verbs::{Cq, Pd, QpHandle},
};
use crate::{
    bindings,
    error::{from_result, Result},
    prelude::*,
    rdma::udata::UserData,
    types::Opaque,
};
use crate::{owned_queue::Cpu, str::CStr, sync::LockClassKey, time::Jiffies, workqueue::Queue};
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicPtr, AtomicUsize, Ordering},
};

/// A queue pair of driver `T`.
///
/// # Invariants
///
/// The core allocated `ib` with room for `Self`. Between the driver's `create_qp` and the end of
/// `destroy_qp`, `released` is initialised and `data` is initialised; `data` is dropped only
/// after `refs` reached zero and `released` was completed.
#[repr(C)]
pub struct Qp<T: Driver> {
    ib: Opaque<bindings::ib_qp>,
    refs: AtomicUsize,
    released: Opaque<bindings::completion>,
    data: T::Qp,
}

// SAFETY: QPs are used from every context; the driver data is `Send + Sync`.
unsafe impl<T: Driver> Sync for Qp<T> {}
// SAFETY: See above.
unsafe impl<T: Driver> Send for Qp<T> {}

impl<T: Driver> Qp<T> {
    /// The driver's data.
    pub fn data(&self) -> &T::Qp {
        &self.data
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: `qp_num` is set in `create_qp` before the QP is visible.
        unsafe { (*self.ib.get()).qp_num }
    }

    /// The device the QP belongs to.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: A QP's device is one of driver `T` and outlives the QP.
        unsafe { Device::from_raw((*self.ib.get()).device) }
    }

    /// The QP's protection domain.
    pub fn pd(&self) -> &Pd<T> {
        // SAFETY: The core keeps the PD (a PD of this driver) alive while the QP exists.
        unsafe { &*(*self.ib.get()).pd.cast::<Pd<T>>() }
    }

    /// The send completion queue.
    pub fn send_cq(&self) -> &Cq<T> {
        // SAFETY: The core keeps the CQ alive while the QP exists.
        unsafe { &*(*self.ib.get()).send_cq.cast::<Cq<T>>() }
    }

    /// The receive completion queue.
    pub fn recv_cq(&self) -> &Cq<T> {
        // SAFETY: The core keeps the CQ alive while the QP exists.
        unsafe { &*(*self.ib.get()).recv_cq.cast::<Cq<T>>() }
    }

    /// The shared receive queue the QP takes its receives from, if it was created with one.
    pub fn srq(&self) -> Option<&Srq<T>> {
        // SAFETY: The core sets `srq` before `create_qp` and never changes it.
        let srq = unsafe { (*self.ib.get()).srq };
        if srq.is_null() {
            return None;
        }
        // SAFETY: `create_qp` accepted only an SRQ of this device (so one of driver `T`), and
        // the core keeps it alive (its `usecnt`) until after `destroy_qp` has returned, by when
        // nothing uses the QP any more.
        Some(unsafe { Srq::from_raw(srq) })
    }

    /// Identifies this QP in work completions.
    pub fn handle(&self) -> QpHandle {
        QpHandle(self.ib.get(), self.qpn())
    }

    /// Takes a reference that keeps the QP (and its data) alive.
    ///
    /// Fails once destruction has dropped the last reference.
    pub fn get_ref(&self) -> Option<QpRef<T>> {
        let mut n = self.refs.load(Ordering::Relaxed);
        loop {
            if n == 0 {
                return None;
            }
            match self
                .refs
                .compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                // INVARIANT: The count was non-zero and now accounts for the new reference.
                Ok(_) => return Some(QpRef(NonNull::from(self))),
                Err(cur) => n = cur,
            }
        }
    }

    /// Whether `item` lies within this QP's driver data (and so lives as long as the QP).
    fn data_contains<U>(&self, item: &U) -> bool {
        // CAST: Addresses, only compared.
        let start = core::ptr::from_ref(&self.data) as usize;
        let at = core::ptr::from_ref(item) as usize;
        let (Some(end), Some(item_end)) = (
            start.checked_add(core::mem::size_of::<T::Qp>()),
            at.checked_add(core::mem::size_of::<U>()),
        ) else {
            return false;
        };
        at >= start && item_end <= end
    }

    /// Reports an asynchronous event on this QP to its consumer.
    pub fn report_event(&self, event: QpEvent) {
        let qp = self.ib.get();
        let kind = match event {
            QpEvent::Fatal => bindings::ib_event_type_IB_EVENT_QP_FATAL,
            QpEvent::RequestError => bindings::ib_event_type_IB_EVENT_QP_REQ_ERR,
            QpEvent::AccessError => bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR,
            QpEvent::LastWqeReached => bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
        };
        // SAFETY: `event_handler`/`qp_context` are set by the core before the QP is used.
        unsafe {
            if let Some(handler) = (*qp).event_handler {
                // SAFETY: An all-zero `ib_event` is valid; the used fields are set below.
                let mut ev: bindings::ib_event = core::mem::zeroed();
                ev.device = (*qp).device;
                ev.event = kind;
                ev.element.qp = qp;
                handler(&mut ev, (*qp).qp_context);
            }
        }
    }

    fn put(&self) {
        if self.refs.fetch_sub(1, Ordering::Release) == 1 {
            core::sync::atomic::fence(Ordering::Acquire);
            // SAFETY: `released` is initialised while the QP exists; `destroy_qp` waits for it.
            unsafe { bindings::complete(self.released.get()) };
        }
    }
}

/// An asynchronous QP event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum QpEvent {
    /// A fatal error moved the QP to the error state (`IB_EVENT_QP_FATAL`).
    Fatal,
    /// The peer sent an invalid request (`IB_EVENT_QP_REQ_ERR`).
    RequestError,
    /// The peer violated access rights (`IB_EVENT_QP_ACCESS_ERR`).
    AccessError,
    /// No more receive WQEs will complete on this SRQ-attached QP
    /// (`IB_EVENT_QP_LAST_WQE_REACHED`).
    LastWqeReached,
}

/// A counted reference to a QP, keeping it and its driver data alive.
///
/// # Invariants
///
/// The pointee's `refs` counts this reference.
pub struct QpRef<T: Driver>(NonNull<Qp<T>>);

// SAFETY: The reference only gives out `&Qp<T>`, which is `Sync`.
unsafe impl<T: Driver> Send for QpRef<T> {}
// SAFETY: See above.
unsafe impl<T: Driver> Sync for QpRef<T> {}

impl<T: Driver> core::ops::Deref for QpRef<T> {
    type Target = Qp<T>;

    fn deref(&self) -> &Qp<T> {
        // SAFETY: By the type invariant the QP is alive while this reference exists.
        unsafe { self.0.as_ref() }
    }
}

impl<T: Driver> Clone for QpRef<T> {
    fn clone(&self) -> Self {
        self.refs.fetch_add(1, Ordering::Relaxed);
        // INVARIANT: The count now includes the new reference.
        QpRef(self.0)
    }
}

impl<T: Driver> Drop for QpRef<T> {
    fn drop(&mut self) {
        self.put();
    }
}

/// A work item embedded in a QP's driver data.
///
/// Queueing it takes a [`QpRef`], which its handler receives: `destroy_qp` waits for queued and
/// running items, and queueing never allocates, so it cannot fail for want of memory. An item
/// already queued is not queued twice; one queued while it runs runs once more afterwards (the
/// workqueue never runs one item on two CPUs at once). It can also be queued to run after a
/// delay ([`Self::queue_after`]); a pending timer holds its reference like a queued item.
///
/// # Invariants
///
/// `dwork` was initialised with [`Self::run`] as its function. `qp` is null until the item is
/// first queued, and then the QP whose driver data contains `self`.
#[pin_data]
pub struct QpWork<T: Driver> {
    #[pin]
    dwork: Opaque<bindings::delayed_work>,
    qp: AtomicPtr<Qp<T>>,
    handler: fn(QpRef<T>),
}

// SAFETY: The work item is used from any thread; `qp` is atomic and `handler` a plain function.
unsafe impl<T: Driver> Send for QpWork<T> {}
// SAFETY: See above.
unsafe impl<T: Driver> Sync for QpWork<T> {}

/// What [`QpWork::queue`] did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Queued {
    /// The item was queued.
    Now,
    /// The item was queued already, or its timer is pending (it will run after this call).
    Already,
    /// The QP is being destroyed: nothing was queued.
    QpGone,
}

impl<T: Driver> QpWork<T> {
    /// A work item that runs `handler`, named `name` for lockdep (see [`crate::new_qp_work`]).
    pub fn new(
        handler: fn(QpRef<T>),
        name: &'static CStr,
        key: &'static LockClassKey,
    ) -> impl PinInit<Self> {
        pin_init!(Self {
            dwork <- Opaque::ffi_init(|slot| {
                // SAFETY: `slot` is valid for writes; `run` is the function for this type.
                unsafe {
                    bindings::owned_queue_init_delayed_work(
                        slot,
                        Some(Self::run),
                        name.as_char_ptr(),
                        key.as_ptr(),
                    )
                }
            }),
            // INVARIANT: Not queued yet.
            qp: AtomicPtr::new(core::ptr::null_mut()),
            handler,
        })
    }

    /// Queues the item on `queue` to run for `qp`, whose driver data must contain it (else
    /// nothing is queued and [`Queued::QpGone`] is returned). Any context.
    pub fn queue(&self, qp: &Qp<T>, queue: &Queue) -> Queued {
        self.queue_after(qp, queue, 0)
    }

    /// Like [`Self::queue`], to run once `delay` jiffies have passed. An item queued or
    /// waiting already keeps its time.
    pub fn queue_after(&self, qp: &Qp<T>, queue: &Queue, delay: Jiffies) -> Queued {
        self.queue_on_after(qp, queue, None, delay)
    }

    /// Like [`Self::queue`], for the workers of `cpu` if `queue` is a per-CPU queue (`None`:
    /// the caller's CPU there). On an unbound queue `cpu` only chooses the pool.
    pub fn queue_on(&self, qp: &Qp<T>, queue: &Queue, cpu: Option<Cpu>) -> Queued {
        self.queue_on_after(qp, queue, cpu, 0)
    }

    fn queue_on_after(
        &self,
        qp: &Qp<T>,
        queue: &Queue,
        cpu: Option<Cpu>,
        delay: Jiffies,
    ) -> Queued {
        if !qp.data_contains(self) {
            return Queued::QpGone;
        }
        let Some(r) = qp.get_ref() else {
            return Queued::QpGone;
        };
        // INVARIANT: `self` lies in `qp`'s driver data, checked above; every call stores the
        // same pointer.
        self.qp
            .store(core::ptr::from_ref(qp).cast_mut(), Ordering::Release);
        // CAST: `Queue` is a transparent wrapper of `workqueue_struct`.
        let wq = core::ptr::from_ref(queue)
            .cast::<bindings::workqueue_struct>()
            .cast_mut();
        // CAST: The constant fits the `int` parameter.
        let cpu = cpu.map_or(bindings::wq_misc_consts_WORK_CPU_UNBOUND as _, Cpu::as_raw);
        // SAFETY: `wq` is live (borrowed); `dwork` was initialised for `run` and lives in the QP's
        // data, kept alive by the reference handed over below until `run` is done with it; `cpu`
        // is unbound or was online (`Cpu`'s invariant), as `queue_delayed_work_on` requires.
        let queued = unsafe { bindings::queue_delayed_work_on(cpu, wq, self.dwork.get(), delay) };
        if queued {
            // The queued item owns the reference now; `run` takes it back.
            core::mem::forget(r);
            Queued::Now
        } else {
            Queued::Already
        }
    }

    /// The work function.
    ///
    /// # Safety
    ///
    /// Called by the workqueue for a `dwork` initialised in [`Self::new`] and queued by
    /// [`Self::queue_after`], which handed over a QP reference with it.
    unsafe extern "C" fn run(work: *mut bindings::work_struct) {
        // SAFETY: `work` is the `work` field of the `delayed_work` that is the `dwork` field of
        // a `QpWork<T>` (only `new` sets `run` as the function), alive while its QP is, which
        // the handed-over reference guarantees.
        let this = unsafe {
            let dwork = crate::container_of!(work, bindings::delayed_work, work);
            &*crate::container_of!(dwork, Self, dwork)
        };
        let qp = this.qp.load(Ordering::Acquire);
        // SAFETY: `queue_after` stored the QP (non-null) before queueing, and the reference it
        // handed over is taken back here, once per successful queueing.
        let r = QpRef(unsafe { NonNull::new_unchecked(qp) });
        // `this` is not touched after the handler, which may drop the last reference.
        let handler = this.handler;
        handler(r);
    }
}

/// Creates a [`QpWork`] initialiser for `handler` with a new lock class (named after the
/// source location, or `name`).
#[macro_export]
macro_rules! new_qp_work {
    ($handler:expr $(, $name:literal)?) => {
        $crate::rdma::qp::QpWork::new(
            $handler,
            $crate::optional_name!($($name)?),
            $crate::static_lock_class!(),
        )
    };
}

/// QP states (`enum ib_qp_state`), with RDMAP's names in the docs (RFC 5040 §6).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum QpState {
    /// RESET (RDMAP: Idle).
    Reset,
    /// INIT (RDMAP: Idle).
    Init,
    /// RTR (RDMAP: Idle).
    Rtr,
    /// RTS (RDMAP: RTS).
    Rts,
    /// SQD (RDMAP: Closing).
    Sqd,
    /// SQE.
    Sqe,
    /// ERR (RDMAP: Error; also Terminate).
    Error,
}

impl QpState {
    fn from_raw(s: bindings::ib_qp_state) -> Option<Self> {
        Some(match s {
            bindings::ib_qp_state_IB_QPS_RESET => QpState::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => QpState::Init,
            bindings::ib_qp_state_IB_QPS_RTR => QpState::Rtr,
            bindings::ib_qp_state_IB_QPS_RTS => QpState::Rts,
            bindings::ib_qp_state_IB_QPS_SQD => QpState::Sqd,
            bindings::ib_qp_state_IB_QPS_SQE => QpState::Sqe,
            bindings::ib_qp_state_IB_QPS_ERR => QpState::Error,
            _ => return None,
        })
    }

    fn to_raw(self) -> bindings::ib_qp_state {
        match self {
            QpState::Reset => bindings::ib_qp_state_IB_QPS_RESET,
            QpState::Init => bindings::ib_qp_state_IB_QPS_INIT,
            QpState::Rtr => bindings::ib_qp_state_IB_QPS_RTR,
            QpState::Rts => bindings::ib_qp_state_IB_QPS_RTS,
            QpState::Sqd => bindings::ib_qp_state_IB_QPS_SQD,
            QpState::Sqe => bindings::ib_qp_state_IB_QPS_SQE,
            QpState::Error => bindings::ib_qp_state_IB_QPS_ERR,
        }
    }
}

/// Queue sizes of a QP (`struct ib_qp_cap`).
#[derive(Clone, Copy, Default, Debug)]
#[allow(missing_docs)] // Each field is the `struct ib_qp_cap` field of the same name.
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// What a consumer asks for when creating a QP.
#[derive(Clone, Copy, Debug)]
pub struct QpInitAttr {
    /// Whether it is a reliable-connected QP (the only kind iWARP has).
    pub rc: bool,
    /// Requested sizes; the driver replaces them with what it really provides.
    pub cap: QpCap,
    /// Every send WR is signalled (`IB_SIGNAL_ALL_WR`).
    pub sig_all: bool,
    /// Creation flags (none are supported by software iWARP).
    pub create_flags: u32,
    /// Whether receives come from a shared receive queue.
    pub has_srq: bool,
    /// Whether a user context creates it.
    pub user: bool,
}

/// A requested QP modification (`ib_modify_qp`); only the fields iWARP uses.
#[derive(Clone, Copy, Debug)]
pub struct QpModify {
    /// New state, with `IB_QP_STATE`.
    pub state: Option<QpState>,
    /// The current state the consumer assumes, with `IB_QP_CUR_STATE`.
    pub cur_state: Option<QpState>,
    /// New remote access flags (`IB_ACCESS_REMOTE_*`), with `IB_QP_ACCESS_FLAGS`.
    pub access_flags: Option<u32>,
    /// ORD, with `IB_QP_MAX_QP_RD_ATOMIC`.
    pub max_rd_atomic: Option<u32>,
    /// IRD, with `IB_QP_MAX_DEST_RD_ATOMIC`.
    pub max_dest_rd_atomic: Option<u32>,
    /// Mask bits outside the standard set (rejected by the adapter).
    pub unknown_bits: u32,
}

/// What `query_qp` reports.
#[derive(Clone, Copy, Debug)]
pub struct QpQuery {
    /// Current state.
    pub state: QpState,
    /// Queue sizes.
    pub cap: QpCap,
    /// Remote access flags.
    pub access_flags: u32,
    /// ORD.
    pub max_rd_atomic: u32,
    /// IRD.
    pub max_dest_rd_atomic: u32,
    /// Whether every send WR is signalled.
    pub sig_all: bool,
}

/// A scatter/gather element (`struct ib_sge`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Sge {
    /// Address: a kernel virtual address under a DMA lkey (virtual-DMA device), or an I/O
    /// virtual address inside a memory region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// The operation of a send work request.
pub enum SendOp<'a, T: Driver> {
    /// Send (`IB_WR_SEND`).
    Send,
    /// Send with Invalidate of the peer's `rkey` (`IB_WR_SEND_WITH_INV`).
    SendWithInv {
        /// The peer's STag to invalidate.
        rkey: u32,
    },
    /// RDMA Write (`IB_WR_RDMA_WRITE`).
    Write {
        /// Target address in the peer's region.
        remote_addr: u64,
        /// The peer's STag.
        rkey: u32,
    },
    /// RDMA Read (`IB_WR_RDMA_READ`), or with `invalidate_local` set
    /// `IB_WR_RDMA_READ_WITH_INV` (the local sink STag is invalidated on completion).
    Read {
        /// Source address in the peer's region.
        remote_addr: u64,
        /// The peer's STag.
        rkey: u32,
        /// Invalidate the local sink STag when the read completes.
        invalidate_local: bool,
    },
    /// Fast memory registration (`IB_WR_REG_MR`).
    RegMr {
        /// The region, mapped by `map_mr_sg` before.
        mr: &'a Mr<T>,
        /// The new key (lkey and rkey).
        key: u32,
        /// Access flags (`IB_ACCESS_*`).
        access: u32,
    },
    /// Local invalidate of `rkey` (`IB_WR_LOCAL_INV`).
    LocalInv {
        /// The STag to invalidate.
        rkey: u32,
    },
}

/// Flags of a send work request.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendFlags {
    /// Generate a completion (`IB_SEND_SIGNALED`).
    pub signaled: bool,
    /// Solicited event at the peer (`IB_SEND_SOLICITED`).
    pub solicited: bool,
    /// Copy the data at post time (`IB_SEND_INLINE`).
    pub inline: bool,
    /// Wait for prior RDMA Reads to complete (`IB_SEND_FENCE`).
    pub fence: bool,
}

/// A send work request.
pub struct SendWr<'a, T: Driver> {
    /// The consumer's id, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp<'a, T>,
    /// Flags.
    pub flags: SendFlags,
    /// Gather list.
    pub sges: &'a [Sge],
}

impl<T: Driver> SendWr<'_, T> {
    /// Copies the gather list's bytes into `dst` for an inline send, returning the length.
    ///
    /// Only meaningful with [`SendFlags::inline`], where the consumer guarantees that each SGE
    /// addresses kernel memory valid for the duration of the post call (this is a virtual-DMA
    /// device, so addresses are kernel virtual addresses). Fails with `EINVAL` if the data does
    /// not fit `dst`.
    pub fn copy_inline(&self, dst: &mut [u8]) -> Result<usize> {
        let mut off = 0usize;
        for sge in self.sges {
            // CAST: Widening.
            let len = sge.length as usize;
            let end = off.checked_add(len).ok_or(EINVAL)?;
            let d = dst.get_mut(off..end).ok_or(EINVAL)?;
            if len > 0 {
                // SAFETY: For inline sends the consumer passes kernel virtual addresses of
                // `length` readable bytes, valid during the post call (see above).
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        // CAST: Inline data: the consumer's kernel virtual address.
                        sge.addr as usize as *const u8,
                        d.as_mut_ptr(),
                        len,
                    )
                };
            }
            off = end;
        }
        Ok(off)
    }
}

/// A receive work request.
pub struct RecvWr<'a> {
    /// The consumer's id, returned in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: &'a [Sge],
}

/// # Safety
///
/// `list` must be null with `num == 0`, or point at `num` valid `ib_sge`s for `'a`.
pub(super) unsafe fn sges<'a>(
    list: *const bindings::ib_sge,
    num: crate::ffi::c_int,
) -> Result<&'a [Sge]> {
    let n = usize::try_from(num).map_err(|_| EINVAL)?;
    if n == 0 {
        return Ok(&[]);
    }
    if list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: `Sge` has the layout of `ib_sge`; the caller guarantees `n` valid entries.
    Ok(unsafe { core::slice::from_raw_parts(list.cast::<Sge>(), n) })
}

impl<T: Driver> Adapter<T> {
    /// # Safety
    ///
    /// `wr` must be a valid send work request posted to a QP of a device of driver `T`.
    unsafe fn parse_send_wr<'a>(
        wr: &'a bindings::ib_send_wr,
        dev: *mut bindings::ib_device,
    ) -> Result<SendWr<'a, T>> {
        // CAST: Send flags are positive bits, as are the C enum's below.
        let flags = wr.send_flags as u32;
        let flags = SendFlags {
            signaled: flags & bindings::ib_send_flags_IB_SEND_SIGNALED as u32 != 0,
            solicited: flags & bindings::ib_send_flags_IB_SEND_SOLICITED as u32 != 0,
            inline: flags & bindings::ib_send_flags_IB_SEND_INLINE as u32 != 0,
            fence: flags & bindings::ib_send_flags_IB_SEND_FENCE as u32 != 0,
        };
        let rdma = || {
            // SAFETY: For RDMA opcodes the WR is the first member of an `ib_rdma_wr`.
            let r = unsafe { &*crate::container_of!(wr, bindings::ib_rdma_wr, wr) };
            (r.remote_addr, r.rkey)
        };
        let op = match wr.opcode {
            bindings::ib_wr_opcode_IB_WR_SEND => SendOp::Send,
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV => SendOp::SendWithInv {
                // SAFETY: `invalidate_rkey` is the union member used with SEND_WITH_INV.
                rkey: unsafe { wr.ex.invalidate_rkey },
            },
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE => {
                let (remote_addr, rkey) = rdma();
                SendOp::Write { remote_addr, rkey }
            }
            bindings::ib_wr_opcode_IB_WR_RDMA_READ
            | bindings::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV => {
                let (remote_addr, rkey) = rdma();
                SendOp::Read {
                    remote_addr,
                    rkey,
                    invalidate_local: wr.opcode == bindings::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV,
                }
            }
            bindings::ib_wr_opcode_IB_WR_REG_MR => {
                // SAFETY: For REG_MR the WR is the first member of an `ib_reg_wr`.
                let r = unsafe { &*crate::container_of!(wr, bindings::ib_reg_wr, wr) };
                // SAFETY: The consumer passes a live MR; its device field is immutable.
                if r.mr.is_null() || unsafe { (*r.mr).device } != dev {
                    return Err(EINVAL);
                }
                SendOp::RegMr {
                    // SAFETY: Every MR of a device of driver `T` was allocated as an `Mr<T>`.
                    mr: unsafe { &*r.mr.cast::<Mr<T>>() },
                    key: r.key,
                    // CAST: Access flags are positive bits.
                    access: r.access as u32,
                }
            }
            bindings::ib_wr_opcode_IB_WR_LOCAL_INV => SendOp::LocalInv {
                // SAFETY: `invalidate_rkey` is the union member used with LOCAL_INV.
                rkey: unsafe { wr.ex.invalidate_rkey },
            },
            // Immediate data, atomics, memory windows and flush have no software-iWARP encoding.
            _ => return Err(EINVAL),
        };
        Ok(SendWr {
            // SAFETY: `wr_id` is the union member kernel consumers use for posting (or it
            // aliases `wr_cqe`, which is returned unchanged the same way).
            wr_id: unsafe { wr.__bindgen_anon_1.wr_id },
            op,
            flags,
            // SAFETY: The consumer passes `num_sge` valid SGEs.
            sges: unsafe { sges(wr.sg_list, wr.num_sge)? },
        })
    }

    /// `ib_device_ops.create_qp`: validates the request, initialises the driver's data of a new QP
    /// and reports the capabilities it really has.
    ///
    /// # Safety
    ///
    /// `ibqp` is core-allocated with `size_ib_qp` bytes, not yet visible to anyone else, with
    /// `device` a live device with `T`'s ops and `pd` a live PD of that device; `init` is valid for
    /// reads and writes for the call and `init.srq` is null or a live SRQ; `udata` is null or
    /// valid.
    pub(super) unsafe extern "C" fn create_qp(
        ibqp: *mut bindings::ib_qp,
        init: *mut bindings::ib_qp_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        from_result(|| {
            let qp = ibqp.cast::<Qp<T>>();
            // SAFETY: The core allocated `size_of::<Qp<T>>()` bytes for a QP of a device with our
            // ops and passes a valid `init`; the PD is ours.
            let (pd, init) = unsafe { (&*(*ibqp).pd.cast::<Pd<T>>(), &mut *init) };
            // SAFETY: `udata` is null or valid for the call.
            let mut udata = unsafe { UserData::from_raw(udata) };
            let srq = if init.srq.is_null() {
                None
            } else {
                // SAFETY: The consumer passes a live SRQ; its device field is immutable.
                if unsafe { (*init.srq).device } != unsafe { (*ibqp).device } {
                    return Err(EINVAL);
                }
                // SAFETY: An SRQ of a device with our ops was made by our `create_srq`; the
                // consumer keeps it alive during the call.
                Some(unsafe { Srq::<T>::from_raw(init.srq) })
            };
            let mut attr = QpInitAttr {
                rc: init.qp_type == bindings::ib_qp_type_IB_QPT_RC,
                cap: QpCap {
                    max_send_wr: init.cap.max_send_wr,
                    max_recv_wr: init.cap.max_recv_wr,
                    max_send_sge: init.cap.max_send_sge,
                    max_recv_sge: init.cap.max_recv_sge,
                    max_inline_data: init.cap.max_inline_data,
                },
                sig_all: init.sq_sig_type == bindings::ib_sig_type_IB_SIGNAL_ALL_WR,
                create_flags: init.create_flags,
                has_srq: !init.srq.is_null(),
                user: udata.is_user(),
            };
            let (data, qpn) = T::create_qp(pd, &mut attr, srq, &mut udata)?;
            // SAFETY: The fields are ours, in the never-moving core allocation; nothing else
            // sees the QP yet.
            unsafe {
                (*ibqp).qp_num = qpn;
                core::ptr::addr_of_mut!((*qp).refs).write(AtomicUsize::new(1));
                bindings::init_completion(Opaque::raw_get(core::ptr::addr_of!((*qp).released)));
                data.__pinned_init(core::ptr::addr_of_mut!((*qp).data))?;
            }
            init.cap.max_send_wr = attr.cap.max_send_wr;
            init.cap.max_recv_wr = attr.cap.max_recv_wr;
            init.cap.max_send_sge = attr.cap.max_send_sge;
            init.cap.max_recv_sge = attr.cap.max_recv_sge;
            init.cap.max_inline_data = attr.cap.max_inline_data;
            // SAFETY: The QP's data is initialised.
            if let Err(e) = T::qp_created(unsafe { &*qp }) {
                // SAFETY: Undo the initialisation above; nothing else saw the QP.
                unsafe { core::ptr::drop_in_place(core::ptr::addr_of_mut!((*qp).data)) };
                return Err(e);
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.destroy_qp`: has the driver tear a QP down, waits until no [`QpRef`] remains,
    /// then drops the QP's data; the core frees the memory afterwards.
    ///
    /// # Safety
    ///
    /// `ibqp` is a QP whose `create_qp` succeeded, and this is called once for it, with no other op
    /// on it running or following except `iw_rem_ref` for references the `iw_cm` still holds.
    /// `_udata` is not used.
    pub(super) unsafe extern "C" fn destroy_qp(
        ibqp: *mut bindings::ib_qp,
        _udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        let qp = ibqp.cast::<Qp<T>>();
        // SAFETY: `create_qp` succeeded for this QP.
        let this = unsafe { &*qp };
        T::destroy_qp(this);
        // Drop the creation reference and wait for every other one.
        this.put();
        // SAFETY: `released` is initialised; it is completed when the count reaches zero.
        unsafe { bindings::wait_for_completion(this.released.get()) };
        // SAFETY: No reference remains, so nothing else uses `data`; dropped once, here.
        unsafe { core::ptr::drop_in_place(core::ptr::addr_of_mut!((*qp).data)) };
        0
    }

    /// `ib_device_ops.modify_qp`: applies the attributes `mask` selects (`ib_modify_qp`, uverbs,
    /// the `iw_cm`).
    ///
    /// # Safety
    ///
    /// `ibqp` is a QP of this driver whose `create_qp` succeeded and whose `destroy_qp` has not
    /// started; `attr` is valid for reads for the call; `udata` is null or valid for the call.
    pub(super) unsafe extern "C" fn modify_qp(
        ibqp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        mask: crate::ffi::c_int,
        udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        from_result(|| {
            // SAFETY: `ibqp` is a live QP of ours; `attr` is valid for the call.
            let (qp, attr) = unsafe { (&*ibqp.cast::<Qp<T>>(), &*attr) };
            // SAFETY: `udata` is null or valid for the call.
            let mut udata = unsafe { UserData::from_raw(udata) };
            // CAST: The attribute mask's bits are positive.
            let mask = mask as u32;
            let has = |bit: u32| mask & bit != 0;
            let m = QpModify {
                state: if has(bindings::ib_qp_attr_mask_IB_QP_STATE) {
                    Some(QpState::from_raw(attr.qp_state).ok_or(EINVAL)?)
                } else {
                    None
                },
                cur_state: if has(bindings::ib_qp_attr_mask_IB_QP_CUR_STATE) {
                    Some(QpState::from_raw(attr.cur_qp_state).ok_or(EINVAL)?)
                } else {
                    None
                },
                access_flags: has(bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS)
                    // CAST: Access flags are positive bits.
                    .then_some(attr.qp_access_flags as u32),
                max_rd_atomic: has(bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC)
                    .then_some(u32::from(attr.max_rd_atomic)),
                max_dest_rd_atomic: has(bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC)
                    .then_some(u32::from(attr.max_dest_rd_atomic)),
                unknown_bits: mask & !bindings::ib_qp_attr_mask_IB_QP_ATTR_STANDARD_BITS,
            };
            T::modify_qp(qp, &m, &mut udata)?;
            Ok(0)
        })
    }

    /// `ib_device_ops.query_qp`: reports a QP's attributes (`ib_query_qp`, uverbs, nldev).
    ///
    /// # Safety
    ///
    /// `ibqp` is a QP of this driver whose `create_qp` succeeded and whose `destroy_qp` has not
    /// started; `attr` is valid for writes for the call, `init` null or valid for writes.
    pub(super) unsafe extern "C" fn query_qp(
        ibqp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        _mask: crate::ffi::c_int,
        init: *mut bindings::ib_qp_init_attr,
    ) -> crate::ffi::c_int {
        from_result(|| {
            // SAFETY: `ibqp` is a live QP of ours; `attr` is writable. `init` is null (no caller
            // in the tree passes that, but `ib_query_qp` does not rule it out) or writable.
            let (qp, attr, init) = unsafe { (&*ibqp.cast::<Qp<T>>(), &mut *attr, init.as_mut()) };
            let q = T::query_qp(qp)?;
            let cap = bindings::ib_qp_cap {
                max_send_wr: q.cap.max_send_wr,
                max_recv_wr: q.cap.max_recv_wr,
                max_send_sge: q.cap.max_send_sge,
                max_recv_sge: q.cap.max_recv_sge,
                max_inline_data: q.cap.max_inline_data,
                max_rdma_ctxs: 0,
            };
            attr.qp_state = q.state.to_raw();
            attr.cur_qp_state = q.state.to_raw();
            attr.cap = cap;
            // CAST: Access flags are small positive bits.
            attr.qp_access_flags = q.access_flags as i32;
            attr.max_rd_atomic = q.max_rd_atomic.try_into().unwrap_or(u8::MAX);
            attr.max_dest_rd_atomic = q.max_dest_rd_atomic.try_into().unwrap_or(u8::MAX);
            let Some(init) = init else {
                return Ok(0);
            };
            init.cap = cap;
            init.qp_type = bindings::ib_qp_type_IB_QPT_RC;
            init.sq_sig_type = if q.sig_all {
                bindings::ib_sig_type_IB_SIGNAL_ALL_WR
            } else {
                bindings::ib_sig_type_IB_SIGNAL_REQ_WR
            };
            // SAFETY: The QP's CQs, SRQ and context are set by the core and immutable.
            unsafe {
                init.send_cq = (*ibqp).send_cq;
                init.recv_cq = (*ibqp).recv_cq;
                init.srq = (*ibqp).srq;
                init.qp_context = (*ibqp).qp_context;
                init.event_handler = (*ibqp).event_handler;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.post_send`: posts a chain of send work requests, stopping at the first that
    /// fails, which `bad` then names (`ib_post_send`, uverbs `POST_SEND`).
    ///
    /// # Safety
    ///
    /// `ibqp` is a QP of this driver whose `create_qp` succeeded and whose `destroy_qp` has not
    /// started; `wr` is null or heads a chain of send WRs valid for the call, each inside the
    /// `ib_rdma_wr`/`ib_reg_wr` its opcode calls for, with `num_sge` valid SGEs (addressing kernel
    /// memory if inline) and any MR it names live; `bad` is null or valid for writes.
    pub(super) unsafe extern "C" fn post_send(
        ibqp: *mut bindings::ib_qp,
        mut wr: *const bindings::ib_send_wr,
        bad: *mut *const bindings::ib_send_wr,
    ) -> crate::ffi::c_int {
        // SAFETY: `ibqp` is a live QP of ours.
        let qp = unsafe { &*ibqp.cast::<Qp<T>>() };
        // SAFETY: The device pointer is immutable.
        let dev = unsafe { (*ibqp).device };
        if wr.is_null() {
            return match T::doorbell(qp) {
                Ok(()) => 0,
                Err(e) => e.to_errno(),
            };
        }
        while !wr.is_null() {
            // SAFETY: The consumer passes a valid chain of WRs.
            let raw = unsafe { &*wr };
            // The next WR is read before this one is posted: once posted, it may complete (on
            // another CPU, or at once) and the consumer's completion handler may free it, with
            // its `next` (ksmbd frees a send's message, WR included, when it completes).
            let next = raw.next;
            // SAFETY: `raw` is a send WR for a QP of driver `T`.
            let res = unsafe { Self::parse_send_wr(raw, dev) }.and_then(|w| T::post_send(qp, &w));
            if let Err(e) = res {
                if !bad.is_null() {
                    // SAFETY: `bad` is writable when non-null.
                    unsafe { *bad = wr };
                }
                return e.to_errno();
            }
            wr = next;
        }
        0
    }

    /// `ib_device_ops.post_recv`: posts a chain of receive work requests, stopping at the first
    /// that fails, which `bad` then names (`ib_post_recv`, uverbs `POST_RECV`).
    ///
    /// # Safety
    ///
    /// `ibqp` is a QP of this driver whose `create_qp` succeeded and whose `destroy_qp` has not
    /// started; `wr` is null or heads a chain of receive WRs valid for the call, each with
    /// `num_sge` valid SGEs; `bad` is null or valid for writes.
    pub(super) unsafe extern "C" fn post_recv(
        ibqp: *mut bindings::ib_qp,
        mut wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> crate::ffi::c_int {
        // SAFETY: `ibqp` is a live QP of ours.
        let qp = unsafe { &*ibqp.cast::<Qp<T>>() };
        while !wr.is_null() {
            // SAFETY: The consumer passes a valid chain of WRs.
            let raw = unsafe { &*wr };
            // Read before posting, as in `post_send`: a posted WR may complete and be freed.
            let next = raw.next;
            // SAFETY: The consumer passes `num_sge` valid SGEs.
            let res = unsafe { sges(raw.sg_list, raw.num_sge) }.and_then(|sges| {
                let w = RecvWr {
                    // SAFETY: `wr_id` is the member consumers set (or the aliased `wr_cqe`).
                    wr_id: unsafe { raw.__bindgen_anon_1.wr_id },
                    sges,
                };
                T::post_recv(qp, &w)
            });
            if let Err(e) = res {
                if !bad.is_null() {
                    // SAFETY: `bad` is writable when non-null.
                    unsafe { *bad = wr };
                }
                return e.to_errno();
            }
            wr = next;
        }
        0
    }

    /// `ib_device_ops.iw_get_qp`: finds the QP numbered `qpn` for `iw_cm_connect`/`iw_cm_accept`,
    /// which call it under the id's spinlock (interrupts off) and then, at once and under the same
    /// lock, `iw_add_ref` on what it returned.
    ///
    /// The reference the `iw_cm` keeps is taken here, while the driver's lookup holds the QP (for
    /// rsiw: under its QP table's lock); `iw_add_ref` then has nothing to add. Taking it in
    /// `iw_add_ref` instead, after the lookup let go, could revive a QP whose `destroy_qp` had
    /// already seen its count reach zero: the QP number comes from the ULP (through `rdma_ucm`,
    /// from user space), not from an owner that keeps the QP alive.
    ///
    /// # Safety
    ///
    /// `ibdev` is a live device with `T`'s ops. Every non-null return is followed by exactly one
    /// `iw_add_ref` on it (both `iw_cm` call sites do so), and its reference is dropped with
    /// `iw_rem_ref`.
    pub(super) unsafe extern "C" fn iw_get_qp(
        ibdev: *mut bindings::ib_device,
        qpn: crate::ffi::c_int,
    ) -> *mut bindings::ib_qp {
        let Ok(qpn) = u32::try_from(qpn) else {
            return core::ptr::null_mut();
        };
        // SAFETY: `ibdev` is a device of ours.
        let dev = unsafe { Device::<T>::from_raw(ibdev) };
        T::get_qp(dev, qpn).map_or(core::ptr::null_mut(), |qp| {
            let raw = qp.ib.get();
            // The count keeps this reference for the `iw_cm`, until its `iw_rem_ref`.
            core::mem::forget(qp);
            raw
        })
    }

    /// `ib_device_ops.iw_add_ref`: the `iw_cm`'s reference on the QP `iw_get_qp` just returned,
    /// which `iw_get_qp` already took (see there).
    ///
    /// # Safety
    ///
    /// No requirement: the QP is not used.
    pub(super) unsafe extern "C" fn iw_add_ref(_ibqp: *mut bindings::ib_qp) {}

    /// `ib_device_ops.iw_rem_ref`: drops the reference the `iw_cm` took with `iw_get_qp`.
    ///
    /// # Safety
    ///
    /// `ibqp` is a QP of this driver on which the caller holds a reference from `iw_get_qp`, which
    /// this call consumes.
    pub(super) unsafe extern "C" fn iw_rem_ref(ibqp: *mut bindings::ib_qp) {
        // SAFETY: iw_cm drops a reference it took with `iw_get_qp`.
        let qp = unsafe { &*ibqp.cast::<Qp<T>>() };
        qp.put();
    }
}
