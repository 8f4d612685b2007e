// SPDX-License-Identifier: GPL-2.0

//! Completion queues.
//!
//! Two kinds, both polled by the ULP with [`Cq::poll`]:
//!
//! - [`Cq::new_direct`]: `ib_alloc_cq(IB_POLL_DIRECT)`. Never armed; the ULP polls it when it
//!   likes (the core warns if the provider raises a completion event on it), or waits with
//!   [`Cq::poll_wait`]. Only QPs on direct CQs can be drained ([`super::qp::Qp::drain`]).
//! - [`Cq::new`]: `ib_create_cq` with a completion callback ([`CqHandler`]). The ULP arms it with
//!   [`Cq::req_notify`]; the provider then calls the handler once, in whatever context it
//!   completes work in (for siw: softirq, its TX thread, or the poster's context), so the handler
//!   must not sleep. [`CqWaiter`] is a ready-made handler to sleep on; a ULP that processes
//!   completions in process context queues work from its handler (see
//!   [`super::workqueue::OwnedQueue`]).

use super::{etimedout, qp::Wc, Device};
use crate::{
    alloc::flags::GFP_KERNEL,
    bindings,
    error::{from_err_ptr, Result},
    prelude::*,
    str::CStr,
    sync::{Arc, ArcBorrow},
    types::{ForeignOwnable, Opaque},
};
use core::{
    ffi::c_void,
    ptr::NonNull,
    sync::atomic::{AtomicUsize, Ordering},
};

/// Receives completion events of a [`Cq`] created with [`Cq::new`].
pub trait CqHandler: Send + Sync + 'static {
    /// The CQ was armed and has a new completion (of the armed kind). Called in any context,
    /// possibly with provider locks held: must not sleep and must not poll or destroy the CQ.
    /// `this` can be turned into an `Arc` (e.g. to queue work).
    fn completion_event(this: ArcBorrow<'_, Self>);
}

/// The handler of a CQ: its foreign pointer and the function that releases it.
type HandlerRef = (*const c_void, unsafe fn(*const c_void));

/// A completion queue (`struct ib_cq`).
///
/// # Invariants
///
/// `cq` was created by `__ib_alloc_cq` with `IB_POLL_DIRECT` (when `handler` is `None`) or by
/// `__ib_create_cq` with `cq_context` = `handler`'s foreign pointer (an `Arc` of the handler
/// type, released by `drop_handler` after the CQ is destroyed).
pub struct Cq {
    cq: NonNull<bindings::ib_cq>,
    handler: Option<HandlerRef>,
    entries: u32,
    /// How many live QPs complete work on this CQ.
    users: AtomicUsize,
}

// SAFETY: A CQ is a core handle usable from any thread; the handler is `Send + Sync`.
unsafe impl Send for Cq {}
// SAFETY: Polling and arming are serialised by the provider.
unsafe impl Sync for Cq {}

/// Completion callback for CQs made by [`Cq::new::<T>`].
///
/// # Safety
///
/// Called by the provider with the CQ's `cq_context`, an `Arc<T>` foreign pointer.
unsafe extern "C" fn comp_callback<T: CqHandler>(_cq: *mut bindings::ib_cq, ctx: *mut c_void) {
    // SAFETY: `ctx` is the `Arc<T>` owned by the CQ, released only after the CQ is destroyed
    // (after which the provider makes no more calls).
    let h = unsafe { <Arc<T> as ForeignOwnable>::borrow(ctx) };
    T::completion_event(h);
}

/// Releases the handler reference of a CQ.
///
/// # Safety
///
/// `p` must be the foreign pointer of an `Arc<T>` that is no longer used.
unsafe fn drop_handler<T: CqHandler>(p: *const c_void) {
    // SAFETY: Guaranteed by the caller.
    drop(unsafe { <Arc<T> as ForeignOwnable>::from_foreign(p) });
}

impl Cq {
    /// Allocates a directly polled CQ of at least `entries` entries. `owner` names the ULP in
    /// `rdma resource show`.
    pub fn new_direct(dev: &Device, entries: u32, owner: &'static CStr) -> Result<Arc<Self>> {
        // SAFETY: `dev` is registered; `owner` is a static C string.
        let cq = unsafe {
            bindings::__ib_alloc_cq(
                dev.as_raw(),
                core::ptr::null_mut(),
                entries.try_into()?,
                0,
                bindings::ib_poll_context_IB_POLL_DIRECT,
                owner.as_char_ptr(),
            )
        };
        let cq = NonNull::new(from_err_ptr(cq)?).ok_or(ENOMEM)?;
        let c = Cq {
            cq,
            handler: None,
            entries,
            users: AtomicUsize::new(0),
        };
        // INVARIANT: `cq` is a direct CQ without handler; on error `c` is dropped, freeing it.
        Ok(Arc::new(c, GFP_KERNEL)?)
    }

    /// Creates a CQ of at least `entries` entries whose completion events go to `handler`, on
    /// completion vector `comp_vector` (modulo the device's vectors). `owner` names the ULP.
    pub fn new<T: CqHandler>(
        dev: &Device,
        entries: u32,
        comp_vector: u32,
        handler: Arc<T>,
        owner: &'static CStr,
    ) -> Result<Arc<Self>> {
        // SAFETY: `dev` is registered, so reading its vector count is fine.
        let vectors = unsafe { (*dev.as_raw()).num_comp_vectors }.max(1);
        let attr = bindings::ib_cq_init_attr {
            cqe: entries,
            // CAST: `vectors` is positive (at least 1, see above).
            comp_vector: comp_vector % vectors as u32,
            flags: 0,
        };
        let ctx = handler.into_foreign();
        // SAFETY: `dev` is registered; `attr` is valid for the call; `ctx` stays valid until
        // `drop_handler` runs after the CQ is destroyed.
        let cq = unsafe {
            bindings::__ib_create_cq(
                dev.as_raw(),
                Some(comp_callback::<T>),
                None,
                ctx.cast_mut(),
                &attr,
                owner.as_char_ptr(),
            )
        };
        let cq = match from_err_ptr(cq).map(NonNull::new) {
            Ok(Some(cq)) => cq,
            Ok(None) | Err(_) => {
                // SAFETY: The CQ was not created, so `ctx` is unused.
                unsafe { drop_handler::<T>(ctx) };
                return Err(from_err_ptr(cq).err().unwrap_or(ENOMEM));
            }
        };
        // INVARIANT: `cq` uses `ctx` as its context, released by `drop_handler::<T>`.
        Ok(Arc::new(
            Cq {
                cq,
                handler: Some((ctx, drop_handler::<T>)),
                entries,
                users: AtomicUsize::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// Returns the raw `ib_cq` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_cq {
        self.cq.as_ptr()
    }

    /// The number of entries asked for at creation.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Whether this is a direct CQ ([`Cq::new_direct`]).
    pub fn is_direct(&self) -> bool {
        self.handler.is_none()
    }

    /// How many live QPs complete work on this CQ.
    pub(super) fn users(&self) -> usize {
        self.users.load(Ordering::Relaxed)
    }

    /// A QP that completes work on this CQ was created.
    pub(super) fn add_user(&self) {
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    /// A QP that completed work on this CQ was destroyed.
    pub(super) fn remove_user(&self) {
        self.users.fetch_sub(1, Ordering::Relaxed);
    }

    /// Polls a direct CQ until it has completions, for at most `timeout_ms` (then `ETIMEDOUT`):
    /// direct CQs raise no events, so this looks again every millisecond or so. Call it in
    /// process context (it sleeps). `EINVAL` on a CQ with a completion handler (arm it and wait
    /// for its event instead).
    pub fn poll_wait(&self, wcs: &mut [Wc], timeout_ms: u32) -> Result<usize> {
        if !self.is_direct() {
            return Err(EINVAL);
        }
        let start = crate::time::Ktime::ktime_get();
        loop {
            let n = self.poll(wcs)?;
            if n > 0 || wcs.is_empty() {
                return Ok(n);
            }
            let spent = crate::time::ktime_ms_delta(crate::time::Ktime::ktime_get(), start);
            if spent >= i64::from(timeout_ms) {
                return Err(etimedout());
            }
            // SAFETY: `msleep` only sleeps, which the caller allows (process context).
            unsafe { bindings::msleep(1) };
        }
    }

    /// Polls up to `wcs.len()` completions into `wcs`; returns how many there were.
    pub fn poll(&self, wcs: &mut [Wc]) -> Result<usize> {
        let n: i32 = wcs.len().try_into().unwrap_or(i32::MAX);
        // SAFETY: The CQ is valid; `Wc` is a transparent `ib_wc`, and `wcs` has room for `n`.
        let r = unsafe { bindings::ib_poll_cq(self.as_raw(), n, wcs.as_mut_ptr().cast()) };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        // CAST: `0 <= r <= n`.
        Ok(r as usize)
    }

    /// Arms the CQ for one completion event: the next completion of any kind, or with
    /// `solicited_only` the next solicited receive (or error) completion. Returns `true` if
    /// completions may have arrived before arming (`IB_CQ_REPORT_MISSED_EVENTS`): poll again
    /// before sleeping. Fails with `EINVAL` on a direct CQ.
    pub fn req_notify(&self, solicited_only: bool) -> Result<bool> {
        if self.handler.is_none() {
            return Err(EINVAL);
        }
        let kind = if solicited_only {
            bindings::ib_cq_notify_flags_IB_CQ_SOLICITED
        } else {
            bindings::ib_cq_notify_flags_IB_CQ_NEXT_COMP
        };
        // SAFETY: The CQ is valid and has a completion handler.
        let r = unsafe {
            bindings::ib_req_notify_cq(
                self.as_raw(),
                kind | bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS,
            )
        };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        Ok(r > 0)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        match self.handler {
            None => {
                // SAFETY: By the type invariant this is an `ib_alloc_cq` CQ; QPs using it hold an
                // `Arc<Cq>`, so none is left.
                unsafe { bindings::ib_free_cq(self.as_raw()) };
            }
            Some((ctx, free)) => {
                // SAFETY: By the type invariant this is an `ib_create_cq` CQ no QP uses.
                unsafe { bindings::ib_destroy_cq_user(self.as_raw(), core::ptr::null_mut()) };
                // SAFETY: The CQ is gone, so the provider no longer calls the handler.
                unsafe { free(ctx) };
            }
        }
    }
}

/// A [`CqHandler`] to sleep on: each completion event wakes one [`CqWaiter::wait`].
///
/// Typical loop: poll until empty; [`Cq::req_notify`]; if it reports missed events poll again,
/// else [`CqWaiter::wait`].
///
/// # Invariants
///
/// `done` was initialised with `init_completion`.
#[pin_data]
pub struct CqWaiter {
    #[pin]
    done: Opaque<bindings::completion>,
}

// SAFETY: `struct completion` is designed for use from any context and thread.
unsafe impl Send for CqWaiter {}
// SAFETY: See above.
unsafe impl Sync for CqWaiter {}

impl CqWaiter {
    /// Creates a waiter.
    pub fn new() -> Result<Arc<Self>> {
        let init = pin_init!(CqWaiter {
            // SAFETY: `init_completion` initialises the completion in place.
            done <- Opaque::ffi_init(|p| unsafe { bindings::init_completion(p) }),
        });
        // INVARIANT: `done` is initialised by `init_completion`.
        Arc::pin_init(init, GFP_KERNEL)
    }

    /// Sleeps until a completion event (or one that came since the last wait) or `timeout_ms`
    /// passes (`ETIMEDOUT`), interruptibly (`ERESTARTSYS` on a signal).
    pub fn wait(&self, timeout_ms: u32) -> Result {
        let j = crate::time::msecs_to_jiffies(timeout_ms);
        // SAFETY: By the type invariant `done` is initialised; we are in process context.
        let r = unsafe { bindings::wait_for_completion_interruptible_timeout(self.done.get(), j) };
        if r < 0 {
            // CAST: A negative result is an errno.
            return Err(Error::from_errno(r as i32));
        }
        if r == 0 {
            return Err(etimedout());
        }
        Ok(())
    }
}

impl CqWaiter {
    /// Forgets completion events that nobody waited for (e.g. before arming for a specific
    /// event). Returns how many there were.
    pub fn drain(&self) -> usize {
        let mut n = 0;
        // SAFETY: By the type invariant `done` is initialised; `try_wait_for_completion` does
        // not sleep.
        while unsafe { bindings::try_wait_for_completion(self.done.get()) } {
            n += 1;
        }
        n
    }
}

impl CqHandler for CqWaiter {
    fn completion_event(this: ArcBorrow<'_, Self>) {
        // SAFETY: By the type invariant `done` is initialised; `complete` may be called in any
        // context.
        unsafe { bindings::complete(this.done.get()) };
    }
}
