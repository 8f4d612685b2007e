// SPDX-License-Identifier: GPL-2.0

//! Driver-specific verbs data exchanged with user space (`struct ib_udata`).

use crate::{bindings, error::Result, prelude::*, uaccess::UserSlice};

/// The driver-private input and output buffers of a user verbs call.
///
/// Kernel callers pass no udata; then there is nothing to read and responses are dropped.
///
/// # Invariants
///
/// `ptr` is null or points at a valid `ib_udata` for the lifetime `'a`.
pub struct UserData<'a> {
    ptr: *mut bindings::ib_udata,
    _p: core::marker::PhantomData<&'a mut bindings::ib_udata>,
}

impl<'a> UserData<'a> {
    /// Wraps a raw udata pointer (which may be null for kernel callers).
    ///
    /// # Safety
    ///
    /// `ptr` must be null or valid for `'a`.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::ib_udata) -> Self {
        // INVARIANT: Guaranteed by the caller.
        Self {
            ptr,
            _p: core::marker::PhantomData,
        }
    }

    /// Whether the call came from user space.
    pub fn is_user(&self) -> bool {
        !self.ptr.is_null()
    }

    /// The user context of the call, or `None` for a kernel caller.
    pub(crate) fn ucontext_raw(&self) -> Option<*mut bindings::ib_ucontext> {
        if self.ptr.is_null() {
            return None;
        }
        // SAFETY: By the type invariant `ptr` is valid; a user call's udata is the `driver_udata`
        // of the uverbs attribute bundle, which names the call's context.
        let uctx = unsafe { bindings::rdma_udata_ucontext(self.ptr) };
        (!uctx.is_null()).then_some(uctx)
    }

    /// Writes the driver's response to user space.
    ///
    /// Fails with `EINVAL` if the user's buffer is shorter than `resp`, and with `EFAULT` if it
    /// cannot be written. Does nothing for kernel callers.
    pub fn respond(&mut self, resp: &[u8]) -> Result {
        if self.ptr.is_null() {
            return Ok(());
        }
        // SAFETY: By the type invariant `ptr` is valid.
        let (outbuf, outlen) = unsafe { ((*self.ptr).outbuf, (*self.ptr).outlen) };
        if outlen < resp.len() {
            return Err(EINVAL);
        }
        // CAST: A user address, as `UserSlice` takes it.
        UserSlice::new(outbuf as usize, resp.len())
            .writer()
            .write_slice(resp)
    }
}
