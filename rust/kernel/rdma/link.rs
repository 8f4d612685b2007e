// SPDX-License-Identifier: GPL-2.0

//! `rdma link add NAME type TYPE netdev DEV`: registering a link type (`struct rdma_link_ops`).

use crate::{bindings, error::from_result, netdev::NetDevice, prelude::*, types::Opaque};
use core::sync::atomic::{AtomicPtr, Ordering};

/// Creates devices of one link type on request of `rdma link add`.
pub trait LinkHandler: Sync + 'static {
    /// The link type, as given after `type` on the `rdma link add` command line.
    const TYPE: &'static CStr;

    /// The slot through which the C callback, which has no context pointer, finds the
    /// registered handler. Each handler type declares one
    /// `static SLOT: HandlerSlot<Self> = HandlerSlot::new();` and returns it here.
    fn slot() -> &'static HandlerSlot<Self>
    where
        Self: Sized;

    /// Creates and registers a device named `ibdev_name` on `netdev`.
    ///
    /// Called in process context, without RTNL; `netdev` is referenced for the duration.
    fn newlink(&self, ibdev_name: &CStr, netdev: &NetDevice) -> Result;
}

/// Where a registered [`LinkHandler`] is published to its C callback.
pub struct HandlerSlot<T>(AtomicPtr<T>);

impl<T> HandlerSlot<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Self(AtomicPtr::new(core::ptr::null_mut()))
    }
}

impl<T> Default for HandlerSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// A registered `rdma link` type. Unregistered when dropped.
///
/// # Invariants
///
/// While this exists, `ops` is on the RDMA core's link list and `T::slot()` points at `handler`.
#[pin_data(PinnedDrop)]
pub struct Registration<T: LinkHandler> {
    #[pin]
    handler: T,
    #[pin]
    ops: Opaque<bindings::rdma_link_ops>,
    #[pin]
    _pin: core::marker::PhantomPinned,
}

// SAFETY: The registration gives out only `&T`, and `T: Sync`.
unsafe impl<T: LinkHandler> Sync for Registration<T> {}
// SAFETY: See above; `T: 'static`, and the C side does not care which thread drops it.
unsafe impl<T: LinkHandler + Send> Send for Registration<T> {}

impl<T: LinkHandler> Registration<T> {
    /// Registers link type `T::TYPE` served by `handler`.
    pub fn new(handler: impl PinInit<T, Error>) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            handler <- handler,
            ops <- {
                let init = move |slot: *mut Opaque<bindings::rdma_link_ops>| {
                    let ops = Opaque::raw_get(slot);
                    // SAFETY: `ops` is valid for writes. A zeroed `list_head` is fine: the core
                    // initializes it on registration.
                    unsafe {
                        ops.write(core::mem::zeroed());
                        (*ops).type_ = T::TYPE.as_char_ptr();
                        (*ops).newlink = Some(Self::newlink_callback);
                    }
                    // SAFETY: `slot` is the `ops` field of a pinned `Self` whose `handler` is
                    // initialized, so the pointer arithmetic stays inside that allocation.
                    let this = unsafe { crate::container_of!(slot, Self, ops) };
                    // SAFETY: Only the initialized `handler` field is referenced.
                    let handler = unsafe { core::ptr::addr_of!((*this).handler) };
                    T::slot().0.store(handler.cast_mut(), Ordering::Release);
                    // SAFETY: `ops` lives (pinned) until `PinnedDrop` unregisters it.
                    unsafe { bindings::rdma_link_register(ops) };
                    Ok::<(), Error>(())
                };
                // SAFETY: `init` fully initializes the slot and cannot fail.
                unsafe { crate::init::pin_init_from_closure(init) }
            },
            _pin: core::marker::PhantomPinned,
        })
    }

    /// `rdma_link_ops.newlink`: creates a device for `rdma link add NAME type TYPE netdev DEV`
    /// (`nldev_newlink`).
    ///
    /// # Safety
    ///
    /// `ibdev_name` is a NUL-terminated string and `ndev` a net device the caller holds a reference
    /// on, both valid for the call; the caller holds `link_ops_rwsem` for reading, which
    /// `rdma_link_unregister` takes for writing.
    unsafe extern "C" fn newlink_callback(
        ibdev_name: *const crate::ffi::c_char,
        ndev: *mut bindings::net_device,
    ) -> crate::ffi::c_int {
        from_result(|| {
            let handler = T::slot().0.load(Ordering::Acquire);
            if handler.is_null() {
                return Err(ENODEV);
            }
            // SAFETY: The slot is set while the link ops are registered, and the core calls
            // `newlink` only under its link lock, which `rdma_link_unregister` waits for before
            // the slot is cleared and the handler dropped.
            let handler = unsafe { &*handler };
            // SAFETY: The core passes a NUL-terminated name valid for the call.
            let name = unsafe { CStr::from_char_ptr(ibdev_name) };
            // SAFETY: The core holds a reference on `ndev` for the call.
            let netdev = unsafe { NetDevice::from_raw(ndev) };
            handler.newlink(name, netdev)?;
            Ok(0)
        })
    }

    /// The registered handler.
    pub fn handler(&self) -> &T {
        &self.handler
    }
}

#[pinned_drop]
impl<T: LinkHandler> PinnedDrop for Registration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant `ops` is registered; unregistering waits for running
        // `newlink` calls.
        unsafe { bindings::rdma_link_unregister(self.ops.get()) };
        T::slot().0.store(core::ptr::null_mut(), Ordering::Release);
    }
}
