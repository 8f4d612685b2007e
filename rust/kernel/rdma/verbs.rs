// SPDX-License-Identifier: GPL-2.0

//! Verbs objects of a provider: protection domains and completion queues.
//!
//! The RDMA core allocates these objects (`INIT_RDMA_OBJ_SIZE`): each is the core's struct
//! followed by the driver's data, which is initialised in place when the object is created
//! and dropped when it is destroyed, before the core frees the memory.

use super::device::{Adapter, Device, Driver};
use crate::{bindings, error::from_result, prelude::*, rdma::udata::UserData, types::Opaque};

/// A protection domain of driver `T`.
///
/// # Invariants
///
/// `ib` was allocated by the core with room for `Self`, and `data` is initialised, from the
/// driver's `alloc_pd` until its `dealloc_pd`.
#[repr(C)]
pub struct Pd<T: Driver> {
    ib: Opaque<bindings::ib_pd>,
    data: T::Pd,
}

impl<T: Driver> Pd<T> {
    /// The driver's data.
    pub fn data(&self) -> &T::Pd {
        &self.data
    }

    /// The device the PD belongs to.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: A PD's device is one of driver `T` and outlives the PD.
        unsafe { Device::from_raw((*self.ib.get()).device) }
    }

    /// Whether the PD belongs to a kernel consumer (rather than a user context).
    pub fn is_kernel(&self) -> bool {
        // SAFETY: `uobject` is set by the core before `alloc_pd` and never changes.
        unsafe { (*self.ib.get()).uobject.is_null() }
    }

    /// The raw `ib_pd`.
    pub fn as_raw(&self) -> *mut bindings::ib_pd {
        self.ib.get()
    }

    /// The PD's identity, for checking that two objects share a PD.
    pub fn id(&self) -> PdId {
        // CAST: The address is only compared, never turned back into a pointer.
        PdId(self.ib.get() as usize)
    }
}

/// The identity of a protection domain: two are equal exactly when they name the same PD
/// (its address while it lives; never dereferenced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PdId(usize);

impl PdId {
    /// The identity of the PD at `pd` (the core's `ib_pd`).
    pub(crate) fn of_raw(pd: *const bindings::ib_pd) -> Self {
        // CAST: As in `Pd::id`.
        PdId(pd as usize)
    }
}

/// Attributes of a new completion queue.
#[derive(Clone, Copy, Debug)]
pub struct CqInitAttr {
    /// Requested number of entries.
    pub cqe: u32,
    /// Completion vector.
    pub comp_vector: u32,
    /// Creation flags (`IB_UVERBS_CQ_FLAGS_*`).
    pub flags: u32,
    /// Whether a user context creates it (through uverbs) rather than a kernel consumer.
    pub user: bool,
}

/// A completion queue of driver `T`.
///
/// # Invariants
///
/// As for [`Pd`]: `data` is initialised between `create_cq` and `destroy_cq`.
#[repr(C)]
pub struct Cq<T: Driver> {
    ib: Opaque<bindings::ib_cq>,
    data: T::Cq,
}

// SAFETY: The core shares CQs across contexts; the driver data is `Send + Sync`.
unsafe impl<T: Driver> Sync for Cq<T> {}
// SAFETY: See above.
unsafe impl<T: Driver> Send for Cq<T> {}

impl<T: Driver> Cq<T> {
    /// The driver's data.
    pub fn data(&self) -> &T::Cq {
        &self.data
    }

    /// The device the CQ belongs to.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: A CQ's device is one of driver `T` and outlives the CQ.
        unsafe { Device::from_raw((*self.ib.get()).device) }
    }

    /// Calls the consumer's completion handler.
    ///
    /// The driver calls this only when the consumer armed the CQ (`req_notify_cq`) and a
    /// matching completion arrived: consumers that poll directly (`IB_POLL_DIRECT`) treat an
    /// unrequested call as a bug.
    pub fn notify_completion(&self) {
        let cq = self.ib.get();
        // SAFETY: `comp_handler` and `cq_context` are set by the core before the CQ is used and
        // do not change while it exists.
        unsafe {
            if let Some(handler) = (*cq).comp_handler {
                handler(cq, (*cq).cq_context);
            }
        }
    }

    /// Reports a CQ error (`IB_EVENT_CQ_ERR`, e.g. an overflow) to the consumer.
    pub fn report_error(&self) {
        let cq = self.ib.get();
        // SAFETY: `event_handler` and `cq_context` are set by the core before the CQ is used.
        unsafe {
            if let Some(handler) = (*cq).event_handler {
                // SAFETY: An all-zero `ib_event` is valid; the used fields are set below.
                let mut ev: bindings::ib_event = core::mem::zeroed();
                ev.device = (*cq).device;
                ev.event = bindings::ib_event_type_IB_EVENT_CQ_ERR;
                ev.element.cq = cq;
                handler(&mut ev, (*cq).cq_context);
            }
        }
    }
}

/// The status of a work completion (`enum ib_wc_status`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[allow(missing_docs)] // Each variant is the `IB_WC_*` status of the same name.
pub enum WcStatus {
    Success,
    LocLenErr,
    LocQpOpErr,
    LocProtErr,
    WrFlushErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RemAbortErr,
    FatalErr,
    GeneralErr,
}

impl WcStatus {
    fn to_raw(self) -> bindings::ib_wc_status {
        match self {
            WcStatus::Success => bindings::ib_wc_status_IB_WC_SUCCESS,
            WcStatus::LocLenErr => bindings::ib_wc_status_IB_WC_LOC_LEN_ERR,
            WcStatus::LocQpOpErr => bindings::ib_wc_status_IB_WC_LOC_QP_OP_ERR,
            WcStatus::LocProtErr => bindings::ib_wc_status_IB_WC_LOC_PROT_ERR,
            WcStatus::WrFlushErr => bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
            WcStatus::LocAccessErr => bindings::ib_wc_status_IB_WC_LOC_ACCESS_ERR,
            WcStatus::RemInvReqErr => bindings::ib_wc_status_IB_WC_REM_INV_REQ_ERR,
            WcStatus::RemAccessErr => bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR,
            WcStatus::RemOpErr => bindings::ib_wc_status_IB_WC_REM_OP_ERR,
            WcStatus::RemAbortErr => bindings::ib_wc_status_IB_WC_REM_ABORT_ERR,
            WcStatus::FatalErr => bindings::ib_wc_status_IB_WC_FATAL_ERR,
            WcStatus::GeneralErr => bindings::ib_wc_status_IB_WC_GENERAL_ERR,
        }
    }
}

/// The operation a work completion reports (`enum ib_wc_opcode`), for providers and consumers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WcOpcode {
    /// A send (any kind).
    Send,
    /// An RDMA Write.
    RdmaWrite,
    /// An RDMA Read (with or without invalidate).
    RdmaRead,
    /// A local invalidate.
    LocalInv,
    /// A memory registration.
    RegMr,
    /// A receive.
    Recv,
    /// Any other opcode (an `IB_WC_*` value).
    Other(u32),
}

impl WcOpcode {
    /// The opcode of a raw `enum ib_wc_opcode` value.
    pub fn from_raw(raw: bindings::ib_wc_opcode) -> Self {
        match raw {
            bindings::ib_wc_opcode_IB_WC_SEND => WcOpcode::Send,
            bindings::ib_wc_opcode_IB_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            bindings::ib_wc_opcode_IB_WC_RDMA_READ => WcOpcode::RdmaRead,
            bindings::ib_wc_opcode_IB_WC_LOCAL_INV => WcOpcode::LocalInv,
            bindings::ib_wc_opcode_IB_WC_REG_MR => WcOpcode::RegMr,
            bindings::ib_wc_opcode_IB_WC_RECV => WcOpcode::Recv,
            other => WcOpcode::Other(other),
        }
    }

    fn to_raw(self) -> bindings::ib_wc_opcode {
        match self {
            WcOpcode::Send => bindings::ib_wc_opcode_IB_WC_SEND,
            WcOpcode::RdmaWrite => bindings::ib_wc_opcode_IB_WC_RDMA_WRITE,
            WcOpcode::RdmaRead => bindings::ib_wc_opcode_IB_WC_RDMA_READ,
            WcOpcode::LocalInv => bindings::ib_wc_opcode_IB_WC_LOCAL_INV,
            WcOpcode::RegMr => bindings::ib_wc_opcode_IB_WC_REG_MR,
            WcOpcode::Recv => bindings::ib_wc_opcode_IB_WC_RECV,
            WcOpcode::Other(raw) => raw,
        }
    }
}

/// Identifies the QP a completion belongs to, for the core (its `ib_qp`, which only the core
/// dereferences) and for user space (its number).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct QpHandle(pub(crate) *mut bindings::ib_qp, pub(crate) u32);

impl QpHandle {
    /// A handle for no QP (e.g. in tests of the CQ alone).
    pub const NONE: QpHandle = QpHandle(core::ptr::null_mut(), 0);

    /// The QP's number.
    pub fn qp_num(&self) -> u32 {
        self.1
    }
}

// SAFETY: The handle is an identifier; the driver never dereferences it.
unsafe impl Send for QpHandle {}
// SAFETY: See above.
unsafe impl Sync for QpHandle {}

/// A work completion, as the driver produces it.
#[derive(Clone, Copy, Debug)]
pub struct WorkCompletion {
    /// The consumer's work request id.
    pub wr_id: u64,
    /// Completion status.
    pub status: WcStatus,
    /// Completed operation.
    pub opcode: WcOpcode,
    /// Bytes transferred (receives and reads).
    pub byte_len: u32,
    /// The QP of the work request.
    pub qp: QpHandle,
    /// For a receive: the rkey a Send with Invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
}

/// Room for work completions, filled by [`Driver::poll_cq`].
pub struct WcArray<'a> {
    slots: &'a mut [bindings::ib_wc],
    used: usize,
}

impl WcArray<'_> {
    /// How many more completions fit.
    pub fn remaining(&self) -> usize {
        self.slots.len() - self.used
    }

    /// Stores `wc`; returns `false` (storing nothing) when full.
    pub fn push(&mut self, wc: &WorkCompletion) -> bool {
        let Some(slot) = self.slots.get_mut(self.used) else {
            return false;
        };
        // SAFETY: An all-zero `ib_wc` is valid; the fields that matter are set below.
        *slot = unsafe { core::mem::zeroed() };
        slot.__bindgen_anon_1.wr_id = wc.wr_id;
        slot.status = wc.status.to_raw();
        slot.opcode = wc.opcode.to_raw();
        slot.byte_len = wc.byte_len;
        slot.qp = wc.qp.0;
        if let Some(rkey) = wc.invalidated_rkey {
            slot.ex.invalidate_rkey = rkey;
            // CAST: The flag is a small positive bit.
            slot.wc_flags |= bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32;
        }
        self.used += 1;
        true
    }
}

/// How a consumer arms a CQ (`req_notify_cq`).
#[derive(Clone, Copy, Debug)]
pub struct NotifyRequest {
    /// Only solicited completions (and errors) trigger the upcall.
    pub solicited_only: bool,
    /// The consumer wants to know whether completions are already queued.
    pub report_missed: bool,
}

impl<T: Driver> Adapter<T> {
    /// `ib_device_ops.alloc_pd`: initialises the driver's data of a new protection domain
    /// (`ib_alloc_pd`, uverbs `ALLOC_PD`).
    ///
    /// # Safety
    ///
    /// `ibpd` is core-allocated with `size_ib_pd` bytes, not yet visible to anyone else, and its
    /// `device` is a live device with `T`'s ops; `udata` is null (kernel) or valid for the call.
    pub(super) unsafe extern "C" fn alloc_pd(
        ibpd: *mut bindings::ib_pd,
        udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        from_result(|| {
            let pd = ibpd.cast::<Pd<T>>();
            // SAFETY: The core allocated `size_ib_pd == size_of::<Pd<T>>()` bytes for a device
            // with our ops, and `udata` is null or valid for the call.
            let (dev, mut udata) = unsafe {
                (
                    Device::<T>::from_raw((*ibpd).device),
                    UserData::from_raw(udata),
                )
            };
            let init = T::alloc_pd(dev, &mut udata)?;
            // SAFETY: `data` is our field of the core-allocated, never-moving object.
            unsafe { init.__pinned_init(core::ptr::addr_of_mut!((*pd).data))? };
            Ok(0)
        })
    }

    /// `ib_device_ops.dealloc_pd`: drops the driver's data of a protection domain
    /// (`ib_dealloc_pd_user`); the core frees the memory afterwards.
    ///
    /// # Safety
    ///
    /// `ibpd` is a PD whose `alloc_pd` succeeded, and this is called once for it, when no QP, SRQ
    /// or MR of the PD remains and no other op on it runs or follows. `_udata` is not used.
    pub(super) unsafe extern "C" fn dealloc_pd(
        ibpd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        let pd = ibpd.cast::<Pd<T>>();
        // SAFETY: `alloc_pd` succeeded for this PD, so `data` is initialised; it is dropped
        // exactly once, here, and the core frees the memory afterwards.
        unsafe {
            T::dealloc_pd(&*pd);
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*pd).data));
        }
        0
    }

    /// `ib_device_ops.create_cq`: initialises the driver's data of a new completion queue.
    ///
    /// # Safety
    ///
    /// `ibcq` is core-allocated with `size_ib_cq` bytes, not yet visible to anyone else, with
    /// `device` a live device with `T`'s ops and `uobject` set (null for a kernel CQ); `attr` is
    /// valid for reads for the call; `attrs` is null for a kernel CQ, or the uverbs call's valid
    /// attribute bundle.
    pub(super) unsafe extern "C" fn create_cq(
        ibcq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        attrs: *mut bindings::uverbs_attr_bundle,
    ) -> crate::ffi::c_int {
        from_result(|| {
            let cq = ibcq.cast::<Cq<T>>();
            // SAFETY: The core allocated `size_of::<Cq<T>>()` bytes for a device with our ops;
            // `attr` is valid for the call.
            let (dev, attr) = unsafe { (Device::<T>::from_raw((*ibcq).device), &*attr) };
            let attr = CqInitAttr {
                cqe: attr.cqe,
                comp_vector: attr.comp_vector,
                flags: attr.flags,
                // SAFETY: The core sets `uobject` before `create_cq` for user CQs.
                user: unsafe { !(*ibcq).uobject.is_null() },
            };
            let udata = if attrs.is_null() {
                core::ptr::null_mut()
            } else {
                // SAFETY: `attrs` is a valid bundle for the call.
                unsafe { bindings::rdma_bundle_udata(attrs) }
            };
            // SAFETY: Null, or the bundle's driver udata, valid for the call.
            let mut udata = unsafe { super::udata::UserData::from_raw(udata) };
            let (init, cqe) = T::create_cq(dev, &attr, &mut udata)?;
            // SAFETY: `data` is our field of the core-allocated, never-moving object.
            unsafe { init.__pinned_init(core::ptr::addr_of_mut!((*cq).data))? };
            // SAFETY: The CQ is not visible to anyone else yet.
            unsafe { (*ibcq).cqe = i32::try_from(cqe).unwrap_or(i32::MAX) };
            Ok(0)
        })
    }

    /// `ib_device_ops.destroy_cq`: drops the driver's data of a completion queue; the core frees
    /// the memory afterwards.
    ///
    /// # Safety
    ///
    /// `ibcq` is a CQ whose `create_cq` succeeded, and this is called once for it, when no QP uses
    /// it (the core checks `usecnt`) and no other op on it runs or follows. `_udata` is not used.
    pub(super) unsafe extern "C" fn destroy_cq(
        ibcq: *mut bindings::ib_cq,
        _udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        let cq = ibcq.cast::<Cq<T>>();
        // SAFETY: `create_cq` succeeded, so `data` is initialised; dropped once, here.
        unsafe {
            T::destroy_cq(&*cq);
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*cq).data));
        }
        0
    }

    /// `ib_device_ops.poll_cq`: moves up to `num_entries` completions into `wc` (`ib_poll_cq`).
    ///
    /// # Safety
    ///
    /// `ibcq` is a CQ of this driver whose `create_cq` succeeded and whose `destroy_cq` has not
    /// started; `wc` is null or valid for writes of `num_entries` entries for the call.
    pub(super) unsafe extern "C" fn poll_cq(
        ibcq: *mut bindings::ib_cq,
        num_entries: crate::ffi::c_int,
        wc: *mut bindings::ib_wc,
    ) -> crate::ffi::c_int {
        let n = usize::try_from(num_entries).unwrap_or(0);
        if n == 0 || wc.is_null() {
            return 0;
        }
        // SAFETY: The consumer passes room for `num_entries` completions.
        let slots = unsafe { core::slice::from_raw_parts_mut(wc, n) };
        let mut out = WcArray { slots, used: 0 };
        // SAFETY: `ibcq` is a live CQ of ours.
        T::poll_cq(unsafe { &*ibcq.cast::<Cq<T>>() }, &mut out);
        out.used as crate::ffi::c_int
    }

    /// `ib_device_ops.req_notify_cq`: arms a CQ for one completion upcall (`ib_req_notify_cq`).
    ///
    /// # Safety
    ///
    /// `ibcq` is a CQ of this driver whose `create_cq` succeeded and whose `destroy_cq` has not
    /// started.
    pub(super) unsafe extern "C" fn req_notify_cq(
        ibcq: *mut bindings::ib_cq,
        flags: bindings::ib_cq_notify_flags,
    ) -> crate::ffi::c_int {
        let req = NotifyRequest {
            solicited_only: flags & bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
                == bindings::ib_cq_notify_flags_IB_CQ_SOLICITED,
            report_missed: flags & bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0,
        };
        // SAFETY: `ibcq` is a live CQ of ours.
        let missed = T::req_notify_cq(unsafe { &*ibcq.cast::<Cq<T>>() }, req);
        crate::ffi::c_int::from(req.report_missed && missed)
    }
}
