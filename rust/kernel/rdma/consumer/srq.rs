// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues (`ib_create_srq`).
//!
//! An [`Srq`] holds receive work requests that every QP created on it
//! ([`super::cm::CmId::create_qp_on_srq`]) takes its incoming messages into, oldest first. A
//! completion arrives on the receive CQ of the QP that took the work request
//! ([`super::qp::Wc::is_from`] tells which). When a QP fails, the work request it was filling
//! is flushed on its CQ; the others stay queued for the SRQ's other QPs.
//!
//! The SRQ's own events go to an [`SrqHandler`]: [`Srq::arm_limit`] arms the limit ("low
//! watermark") event, which comes once, when fewer than the limit remain queued.
//!
//! As for QPs, every SGE must lie in a buffer attached to the SRQ ([`Srq::attach_buf`]); posting
//! checks that. A QP keeps its SRQ alive, so an SRQ is destroyed (on drop) only after its QPs.

use super::{
    mem::{DmaBuf, Pd},
    qp::{check_sges, post_recv_chain, Attached, PostError, RecvWr, POST_BATCH},
};
use crate::{
    alloc::{flags::GFP_KERNEL, KVec},
    bindings,
    error::{from_err_ptr, to_result, Result},
    new_mutex,
    prelude::*,
    sync::{Arc, ArcBorrow, Mutex},
    types::ForeignOwnable,
};
use core::{ffi::c_void, ptr::NonNull};

/// An asynchronous event of an SRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqEvent {
    /// Fewer work requests than the armed limit remain (`IB_EVENT_SRQ_LIMIT_REACHED`); the
    /// limit is disarmed.
    LimitReached,
    /// The SRQ failed (`IB_EVENT_SRQ_ERR`).
    Error,
    /// Another event (an `enum ib_event_type` value).
    Other(u32),
}

/// Receives the asynchronous events of an [`Srq`].
pub trait SrqHandler: Send + Sync + 'static {
    /// An event of the SRQ. Called in any context (a software provider's receive path runs in
    /// softirq): must not sleep and must not destroy the SRQ.
    fn event(this: ArcBorrow<'_, Self>, event: SrqEvent);
}

/// The sizes and limit of an SRQ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqCaps {
    /// How many work requests it holds.
    pub max_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// The armed limit (0: not armed).
    pub srq_limit: u32,
}

/// The handler of an SRQ: its foreign pointer and the function that releases it.
type HandlerRef = (*const c_void, unsafe fn(*const c_void));

/// Event callback for SRQs made by [`Srq::new::<T>`].
///
/// # Safety
///
/// Called by the provider with a valid event and the SRQ's `srq_context`, an `Arc<T>` foreign
/// pointer.
unsafe extern "C" fn event_callback<T: SrqHandler>(ev: *mut bindings::ib_event, ctx: *mut c_void) {
    // SAFETY: The provider passes a valid event for the duration of the call.
    let kind = unsafe { (*ev).event };
    let event = match kind {
        bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED => SrqEvent::LimitReached,
        bindings::ib_event_type_IB_EVENT_SRQ_ERR => SrqEvent::Error,
        other => SrqEvent::Other(other),
    };
    // SAFETY: `ctx` is the `Arc<T>` owned by the SRQ, released only after the SRQ is destroyed
    // (after which the provider reports no more events).
    let h = unsafe { <Arc<T> as ForeignOwnable>::borrow(ctx) };
    T::event(h, event);
}

/// Releases the handler reference of an SRQ.
///
/// # Safety
///
/// `p` must be the foreign pointer of an `Arc<T>` that is no longer used.
unsafe fn drop_handler<T: SrqHandler>(p: *const c_void) {
    // SAFETY: Guaranteed by the caller.
    drop(unsafe { <Arc<T> as ForeignOwnable>::from_foreign(p) });
}

/// A shared receive queue (`struct ib_srq`) of the basic type.
///
/// # Invariants
///
/// `srq` was created by `ib_create_srq` on `pd` with `srq_context` = `handler`'s foreign
/// pointer (released by its function after the SRQ is destroyed). It is destroyed only in
/// `drop`; QPs created on it hold an `Arc<Srq>`, so none is left then.
#[pin_data(PinnedDrop)]
pub struct Srq {
    srq: NonNull<bindings::ib_srq>,
    pd: Arc<Pd>,
    handler: HandlerRef,
    caps: SrqCaps,
    #[pin]
    attached: Mutex<KVec<Attached>>,
}

// SAFETY: An SRQ is a core handle usable from any thread (the provider serialises posting); the
// handler is `Send + Sync` and the attachments are under a lock.
unsafe impl Send for Srq {}
// SAFETY: See above.
unsafe impl Sync for Srq {}

impl Srq {
    /// Creates an SRQ on `pd` for at least `max_wr` work requests of up to `max_sge` SGEs, whose
    /// events go to `handler`. Fails with `EOPNOTSUPP` if the device has no SRQs.
    pub fn new<T: SrqHandler>(
        pd: &Arc<Pd>,
        max_wr: u32,
        max_sge: u32,
        handler: Arc<T>,
    ) -> Result<Arc<Srq>> {
        let ctx = handler.into_foreign();
        // SAFETY: All-zero is a valid `ib_srq_init_attr` (basic type, no extension).
        let mut attr: bindings::ib_srq_init_attr = unsafe { core::mem::zeroed() };
        attr.event_handler = Some(event_callback::<T>);
        attr.srq_context = ctx.cast_mut();
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge;
        attr.srq_type = bindings::ib_srq_type_IB_SRQT_BASIC;
        // SAFETY: `pd` is valid; `attr` lives for the call; `ctx` stays valid until
        // `drop_handler` runs after the SRQ is destroyed.
        let raw = unsafe { bindings::ib_create_srq(pd.as_raw(), &mut attr) };
        let srq = match from_err_ptr(raw).map(NonNull::new) {
            Ok(Some(srq)) => srq,
            Ok(None) | Err(_) => {
                // SAFETY: The SRQ was not created, so `ctx` is unused.
                unsafe { drop_handler::<T>(ctx) };
                return Err(from_err_ptr(raw).err().unwrap_or(ENOMEM));
            }
        };
        let free: unsafe fn(*const c_void) = drop_handler::<T>;
        let caps = SrqCaps {
            max_wr: attr.attr.max_wr,
            max_sge: attr.attr.max_sge,
            srq_limit: 0,
        };
        // INVARIANT: `srq` was created on `pd` with `ctx`, which `drop_handler::<T>` releases.
        let init = pin_init!(Srq {
            srq,
            pd: pd.clone(),
            handler: (ctx, free),
            caps,
            attached <- new_mutex!(KVec::new(), "Srq::attached"),
        });
        Arc::pin_init(init, GFP_KERNEL).inspect_err(|_| {
            // SAFETY: Nothing else refers to the SRQ created above (no QP uses it yet); then
            // the provider reports no more events, so the handler can go.
            unsafe {
                bindings::ib_destroy_srq_user(srq.as_ptr(), core::ptr::null_mut());
                drop_handler::<T>(ctx);
            }
        })
    }

    /// Returns the raw `ib_srq` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_srq {
        self.srq.as_ptr()
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The sizes the provider granted at creation.
    pub fn caps(&self) -> SrqCaps {
        self.caps
    }

    /// Lets work requests use `buf` (of this SRQ's PD); keeps it alive until the SRQ is
    /// destroyed.
    pub fn attach_buf(&self, buf: &Arc<DmaBuf>) -> Result {
        if !Arc::ptr_eq(buf.pd(), &self.pd) {
            return Err(EINVAL);
        }
        let mut a = self.attached.lock();
        let known = a
            .iter()
            .any(|x| matches!(x, Attached::Buf(b) if Arc::ptr_eq(b, buf)));
        if !known {
            a.push(Attached::Buf(buf.clone()), GFP_KERNEL)?;
        }
        Ok(())
    }

    /// Posts receive work requests, in order (`ib_post_srq_recv`). Must be called in process
    /// context (it takes a mutex to check attachments). On failure, reports the first refused
    /// work request (`ENOMEM` when the SRQ is full).
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let mut base = 0;
        for batch in wrs.chunks(POST_BATCH) {
            {
                let attached = self.attached.lock();
                for (i, wr) in batch.iter().enumerate() {
                    check_sges(&attached, wr.sges).map_err(|error| PostError {
                        index: base + i,
                        error,
                    })?;
                }
            }
            post_recv_chain(batch, |first, bad| {
                // SAFETY: The SRQ is valid; the chain and its SGE arrays live for the call (see
                // `post_recv_chain`); the buffers they name are attached to the SRQ.
                unsafe { bindings::ib_post_srq_recv(self.as_raw(), first, bad) }
            })
            .map_err(|e| PostError {
                index: base + e.index,
                error: e.error,
            })?;
            base += batch.len();
        }
        Ok(())
    }

    /// Arms the limit event: [`SrqEvent::LimitReached`] comes once, when fewer than `limit`
    /// work requests remain queued (0 disarms it). `ib_modify_srq(IB_SRQ_LIMIT)`.
    pub fn arm_limit(&self, limit: u32) -> Result {
        self.modify(
            bindings::ib_srq_attr {
                max_wr: 0,
                max_sge: 0,
                srq_limit: limit,
            },
            bindings::ib_srq_attr_mask_IB_SRQ_LIMIT,
        )
    }

    /// Asks the provider to resize the SRQ to `max_wr` work requests
    /// (`ib_modify_srq(IB_SRQ_MAX_WR)`; many providers, rsiw included, refuse with
    /// `EOPNOTSUPP`).
    pub fn resize(&self, max_wr: u32) -> Result {
        self.modify(
            bindings::ib_srq_attr {
                max_wr,
                max_sge: 0,
                srq_limit: 0,
            },
            bindings::ib_srq_attr_mask_IB_SRQ_MAX_WR,
        )
    }

    fn modify(&self, mut attr: bindings::ib_srq_attr, mask: bindings::ib_srq_attr_mask) -> Result {
        // SAFETY: The SRQ is valid; `attr` lives for the call.
        to_result(unsafe { bindings::ib_modify_srq(self.as_raw(), &mut attr, mask) })
    }

    /// The SRQ's current attributes (`ib_query_srq`).
    pub fn query(&self) -> Result<SrqCaps> {
        let mut attr = bindings::ib_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: 0,
        };
        // SAFETY: The SRQ is valid; `attr` is writable for the call.
        to_result(unsafe { bindings::ib_query_srq(self.as_raw(), &mut attr) })?;
        Ok(SrqCaps {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        })
    }
}

#[pinned_drop]
impl PinnedDrop for Srq {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the SRQ is live and no QP uses it any more.
        let r = unsafe { bindings::ib_destroy_srq_user(self.as_raw(), core::ptr::null_mut()) };
        if r != 0 {
            // The core refused (it would be a bug here): keep the handler, which the SRQ still
            // names, rather than free it under the provider.
            pr_warn!("ib_destroy_srq failed: {}\n", r);
            return;
        }
        let (ctx, free) = self.handler;
        // SAFETY: The SRQ is gone, so the provider no longer reports events with `ctx`.
        unsafe { free(ctx) };
    }
}
