// SPDX-License-Identifier: GPL-2.0

//! A workqueue owned by the ULP.
//!
//! 6.12's `kernel::workqueue` only offers the system workqueues, which a module cannot flush
//! before it is unloaded. A ULP that processes completions in work items (queued from a
//! [`super::cq::CqHandler`]) queues them here instead: dropping the [`OwnedQueue`] waits for
//! every queued and running item (`destroy_workqueue` drains the queue first).
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h).

use crate::{bindings, prelude::*, str::CStr, workqueue::Queue};
use core::ptr::NonNull;

/// An allocated workqueue, destroyed (after draining) on drop.
///
/// It must not be dropped from one of its own work items (draining would wait for itself).
///
/// # Invariants
///
/// `wq` was returned by `alloc_workqueue` and is destroyed only in `drop`.
pub struct OwnedQueue {
    wq: NonNull<bindings::workqueue_struct>,
}

// SAFETY: Workqueues are used from any thread.
unsafe impl Send for OwnedQueue {}
// SAFETY: Queueing work is thread-safe.
unsafe impl Sync for OwnedQueue {}

impl OwnedQueue {
    /// Allocates a workqueue called `name` (as `ps` shows its workers). With `unbound` its work
    /// items may run on any CPU.
    pub fn new(name: &'static CStr, unbound: bool) -> Result<Self> {
        let flags = if unbound {
            bindings::wq_flags_WQ_UNBOUND
        } else {
            0
        };
        // SAFETY: The format is "%s" with one C string argument; flags and max_active (0:
        // default) are valid.
        let wq = unsafe {
            bindings::alloc_workqueue(
                crate::c_str!("%s").as_char_ptr(),
                flags,
                0,
                name.as_char_ptr(),
            )
        };
        let wq = NonNull::new(wq).ok_or(ENOMEM)?;
        // INVARIANT: `wq` was just allocated.
        Ok(Self { wq })
    }

    /// Waits until every work item queued so far has run (`flush_workqueue`). Must not be
    /// called from one of this queue's work items.
    pub fn flush(&self) {
        // SAFETY: By the type invariant the workqueue is live.
        unsafe { bindings::__flush_workqueue(self.wq.as_ptr()) };
    }

    /// The queue, to enqueue work items on.
    pub fn queue(&self) -> &Queue {
        // SAFETY: By the type invariant the workqueue is live as long as `self`.
        unsafe { Queue::from_raw(self.wq.as_ptr()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the workqueue is live; this drains it first. Work items
        // hold their own references, so this only waits for them.
        unsafe { bindings::destroy_workqueue(self.wq.as_ptr()) };
    }
}
