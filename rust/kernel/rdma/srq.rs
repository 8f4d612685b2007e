// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues (SRQs) of a provider: creation, limits, events and receive posting.
//!
//! An SRQ is core-allocated like a CQ (`INIT_RDMA_OBJ_SIZE`): [`Srq`] is the core's
//! `struct ib_srq` followed by the driver's data ([`Driver::Srq`]), which
//! [`Driver::create_srq`] initialises in place and which is dropped when the SRQ is destroyed,
//! before the core frees the memory.
//!
//! QPs created with an SRQ take their receive work requests from it. The core counts them
//! (`usecnt`) and refuses to destroy an SRQ a QP still uses, so a QP can reach its SRQ for as
//! long as it exists ([`super::qp::Qp::srq`]).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::{
    device::{Adapter, Device, Driver},
    qp::{sges, RecvWr},
    verbs::Pd,
};
use crate::{bindings, error::from_result, prelude::*, rdma::udata::UserData, types::Opaque};

/// A shared receive queue of driver `T`.
///
/// # Invariants
///
/// The core allocated `ib` with room for `Self`, for a device whose ops are `T`'s; `data` is
/// initialised from the driver's `create_srq` until its `destroy_srq`.
#[repr(C)]
pub struct Srq<T: Driver> {
    ib: Opaque<bindings::ib_srq>,
    data: T::Srq,
}

// SAFETY: SRQs are used from every context (posting, the receive path); the driver data is
// `Send + Sync`.
unsafe impl<T: Driver> Sync for Srq<T> {}
// SAFETY: See above.
unsafe impl<T: Driver> Send for Srq<T> {}

impl<T: Driver> Srq<T> {
    /// The driver's data.
    pub fn data(&self) -> &T::Srq {
        &self.data
    }

    /// The device the SRQ belongs to.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: By the type invariant the SRQ's device is one of driver `T`; it outlives the
        // SRQ.
        unsafe { Device::from_raw((*self.ib.get()).device) }
    }

    /// The SRQ's protection domain (the one its receive buffers' lkeys belong to).
    pub fn pd(&self) -> &Pd<T> {
        // SAFETY: The core sets `pd` before `create_srq`, never changes it, and keeps the PD
        // alive while the SRQ exists; it is a PD of this driver's device.
        unsafe { &*(*self.ib.get()).pd.cast::<Pd<T>>() }
    }

    /// Reports an asynchronous event on this SRQ to its consumer.
    ///
    /// The consumer's handler may do anything a verbs event handler may (e.g. post to the SRQ),
    /// so the driver must call this without holding locks the handler's verbs take.
    pub fn report_event(&self, event: SrqEvent) {
        let srq = self.ib.get();
        let kind = match event {
            SrqEvent::LimitReached => bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED,
            SrqEvent::Error => bindings::ib_event_type_IB_EVENT_SRQ_ERR,
        };
        // SAFETY: `event_handler`/`srq_context` are set by the core before `create_srq` and do
        // not change while the SRQ exists.
        unsafe {
            if let Some(handler) = (*srq).event_handler {
                // SAFETY: An all-zero `ib_event` is valid; the used fields are set below.
                let mut ev: bindings::ib_event = core::mem::zeroed();
                ev.device = (*srq).device;
                ev.event = kind;
                ev.element.srq = srq;
                handler(&mut ev, (*srq).srq_context);
            }
        }
    }

    /// Returns the SRQ of `raw`.
    ///
    /// # Safety
    ///
    /// `raw` must be an SRQ created by [`Driver::create_srq`] of driver `T` (i.e. an SRQ of a
    /// device with `T`'s ops) that stays alive for `'a`.
    pub(crate) unsafe fn from_raw<'a>(raw: *mut bindings::ib_srq) -> &'a Self {
        // SAFETY: `ib` is the first field of the `#[repr(C)]` `Srq<T>` the core allocated.
        unsafe { &*raw.cast::<Self>() }
    }
}

/// An asynchronous SRQ event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SrqEvent {
    /// The number of queued work requests dropped below the armed limit
    /// (`IB_EVENT_SRQ_LIMIT_REACHED`).
    LimitReached,
    /// The SRQ failed (`IB_EVENT_SRQ_ERR`).
    Error,
}

/// What a consumer asks for when creating an SRQ (`struct ib_srq_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct SrqInitAttr {
    /// Requested number of work requests; the driver replaces it with what the SRQ holds.
    pub max_wr: u32,
    /// Requested SGEs per work request; the driver replaces it with what it accepts.
    pub max_sge: u32,
    /// The initial limit (0: not armed).
    pub srq_limit: u32,
    /// Whether it is a basic SRQ (`IB_SRQT_BASIC`), rather than an XRC or tag-matching one.
    pub basic: bool,
    /// Whether a user context creates it.
    pub user: bool,
}

/// The attributes of an SRQ (`struct ib_srq_attr`), as `query_srq` reports them.
#[derive(Clone, Copy, Debug, Default)]
pub struct SrqAttr {
    /// Number of work requests the SRQ holds.
    pub max_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// The armed limit (0: not armed).
    pub srq_limit: u32,
}

/// A requested SRQ modification (`ib_modify_srq`).
#[derive(Clone, Copy, Debug)]
pub struct SrqModify {
    /// New size, with `IB_SRQ_MAX_WR` (a resize).
    pub max_wr: Option<u32>,
    /// New limit, with `IB_SRQ_LIMIT`: arms the limit event, or disarms it with 0.
    pub srq_limit: Option<u32>,
    /// Mask bits outside `IB_SRQ_MAX_WR | IB_SRQ_LIMIT`.
    pub unknown_bits: u32,
}

impl<T: Driver> Adapter<T> {
    /// `ib_device_ops.create_srq`: validates the request, initialises the driver's data of a new
    /// SRQ and reports the sizes it really has (`ib_create_srq_user`).
    ///
    /// # Safety
    ///
    /// `ibsrq` is core-allocated with `size_ib_srq` bytes, not yet visible to anyone else, with
    /// `device` a live device with `T`'s ops and `pd` a live PD of that device; `init` is valid for
    /// reads and writes for the call; `udata` is null or valid for the call.
    pub(super) unsafe extern "C" fn create_srq(
        ibsrq: *mut bindings::ib_srq,
        init: *mut bindings::ib_srq_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        from_result(|| {
            let srq = ibsrq.cast::<Srq<T>>();
            // SAFETY: The core allocated `size_ib_srq == size_of::<Srq<T>>()` bytes for a device
            // with our ops, set its PD (one of ours) and passes a valid `init`.
            let (pd, init) = unsafe { (&*(*ibsrq).pd.cast::<Pd<T>>(), &mut *init) };
            // SAFETY: `udata` is null or valid for the call.
            let mut udata = unsafe { UserData::from_raw(udata) };
            let mut attr = SrqInitAttr {
                max_wr: init.attr.max_wr,
                max_sge: init.attr.max_sge,
                srq_limit: init.attr.srq_limit,
                basic: init.srq_type == bindings::ib_srq_type_IB_SRQT_BASIC,
                user: udata.is_user(),
            };
            let data = T::create_srq(pd, &mut attr, &mut udata)?;
            // SAFETY: `data` is our field of the core-allocated, never-moving object; nothing
            // else sees the SRQ yet.
            unsafe { data.__pinned_init(core::ptr::addr_of_mut!((*srq).data))? };
            // INVARIANT: `data` is initialised from here until `destroy_srq` drops it (the core
            // calls no SRQ op after a failed create, and `destroy_srq` only after a successful
            // one).
            init.attr.max_wr = attr.max_wr;
            init.attr.max_sge = attr.max_sge;
            Ok(0)
        })
    }

    /// `ib_device_ops.destroy_srq`: drops the driver's data of an SRQ; the core frees the memory
    /// afterwards.
    ///
    /// # Safety
    ///
    /// `ibsrq` is an SRQ whose `create_srq` succeeded, and this is called once for it, when no QP
    /// uses it (the core checks `usecnt`) and no other op on it runs or follows.
    pub(super) unsafe extern "C" fn destroy_srq(
        ibsrq: *mut bindings::ib_srq,
        _udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        let srq = ibsrq.cast::<Srq<T>>();
        // SAFETY: `create_srq` succeeded for this SRQ, so `data` is initialised; no QP uses the
        // SRQ any more (the core checked its `usecnt`), so nothing else refers to it. It is
        // dropped exactly once, here; the core frees the memory afterwards.
        unsafe {
            T::destroy_srq(&*srq);
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*srq).data));
        }
        0
    }

    /// `ib_device_ops.modify_srq`: resizes an SRQ or arms its limit (`ib_modify_srq`, uverbs).
    ///
    /// # Safety
    ///
    /// `ibsrq` is an SRQ of this driver whose `create_srq` succeeded and whose `destroy_srq` has
    /// not started; `attr` is valid for reads for the call. `_udata` is not used.
    pub(super) unsafe extern "C" fn modify_srq(
        ibsrq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
        mask: bindings::ib_srq_attr_mask,
        _udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        from_result(|| {
            // SAFETY: `ibsrq` is a live SRQ of ours; `attr` is valid for the call.
            let (srq, attr) = unsafe { (Srq::<T>::from_raw(ibsrq), &*attr) };
            let max_wr_bit = bindings::ib_srq_attr_mask_IB_SRQ_MAX_WR;
            let limit_bit = bindings::ib_srq_attr_mask_IB_SRQ_LIMIT;
            let m = SrqModify {
                max_wr: (mask & max_wr_bit != 0).then_some(attr.max_wr),
                srq_limit: (mask & limit_bit != 0).then_some(attr.srq_limit),
                unknown_bits: mask & !(max_wr_bit | limit_bit),
            };
            T::modify_srq(srq, &m)?;
            Ok(0)
        })
    }

    /// `ib_device_ops.query_srq`: reports an SRQ's attributes (`ib_query_srq`, uverbs).
    ///
    /// # Safety
    ///
    /// `ibsrq` is an SRQ of this driver whose `create_srq` succeeded and whose `destroy_srq` has
    /// not started; `attr` is valid for writes for the call.
    pub(super) unsafe extern "C" fn query_srq(
        ibsrq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
    ) -> crate::ffi::c_int {
        from_result(|| {
            // SAFETY: `ibsrq` is a live SRQ of ours; `attr` is writable for the call.
            let (srq, out) = unsafe { (Srq::<T>::from_raw(ibsrq), &mut *attr) };
            let a = T::query_srq(srq)?;
            out.max_wr = a.max_wr;
            out.max_sge = a.max_sge;
            out.srq_limit = a.srq_limit;
            Ok(0)
        })
    }

    /// `ib_device_ops.post_srq_recv`: posts a chain of receive work requests to an SRQ, stopping at
    /// the first that fails, which `bad` then names (`ib_post_srq_recv`, uverbs).
    ///
    /// # Safety
    ///
    /// `ibsrq` is an SRQ of this driver whose `create_srq` succeeded and whose `destroy_srq` has
    /// not started; `wr` is null or heads a chain of receive WRs valid for the call, each with
    /// `num_sge` valid SGEs; `bad` is null or valid for writes.
    pub(super) unsafe extern "C" fn post_srq_recv(
        ibsrq: *mut bindings::ib_srq,
        mut wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> crate::ffi::c_int {
        // SAFETY: `ibsrq` is a live SRQ of ours.
        let srq = unsafe { Srq::<T>::from_raw(ibsrq) };
        while !wr.is_null() {
            // SAFETY: The consumer passes a valid chain of WRs.
            let raw = unsafe { &*wr };
            // Read before posting: a posted WR may complete and its consumer may free it.
            let next = raw.next;
            // SAFETY: The consumer passes `num_sge` valid SGEs.
            let res = unsafe { sges(raw.sg_list, raw.num_sge) }.and_then(|sges| {
                let w = RecvWr {
                    // SAFETY: `wr_id` is the member consumers set (or the aliased `wr_cqe`).
                    wr_id: unsafe { raw.__bindgen_anon_1.wr_id },
                    sges,
                };
                T::post_srq_recv(srq, &w)
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
}
