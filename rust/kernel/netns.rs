// SPDX-License-Identifier: GPL-2.0

//! Network namespaces: a counted reference to a `struct net`.
//!
//! C header: [`include/net/net_namespace.h`](srctree/include/net/net_namespace.h).

use crate::{
    bindings,
    netdev::NetDevice,
    types::{ARef, AlwaysRefCounted, Opaque},
};
use core::ptr::NonNull;

/// A network namespace.
///
/// Held as [`ARef<Namespace>`], which owns a `get_net` reference: the namespace is not
/// dismantled while it is held. Kernel sockets do not hold one (they keep only the memory of
/// their namespace), so whoever makes them in a namespace decides how long it may live.
///
/// # Invariants
///
/// The wrapped `struct net` is valid, and alive (its count is non-zero), for the lifetime of
/// every `&Namespace`.
#[repr(transparent)]
pub struct Namespace(Opaque<bindings::net>);

// SAFETY: A `struct net` is shared between all threads by design; a reference may be dropped
// from any of them.
unsafe impl Send for Namespace {}
// SAFETY: The only operations are reference counting, which is atomic.
unsafe impl Sync for Namespace {}

// SAFETY: `get_net`/`put_net` keep the namespace alive; the type invariant guarantees a non-zero
// count to start from.
unsafe impl AlwaysRefCounted for Namespace {
    fn inc_ref(&self) {
        // SAFETY: By the type invariant the namespace is alive, so its count may be raised.
        unsafe { bindings::get_net(self.as_raw()) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference taken by `inc_ref` or one of the constructors.
        unsafe { bindings::put_net(obj.cast::<bindings::net>().as_ptr()) };
    }
}

impl Namespace {
    /// The initial namespace, which lives forever.
    pub fn init() -> &'static Self {
        // SAFETY: `init_net` is a static that is never dismantled; `Namespace` is a transparent
        // wrapper of `struct net`.
        unsafe { &*core::ptr::addr_of!(bindings::init_net).cast::<Self>() }
    }

    /// The calling task's namespace, or `None` while the task exits (it has let go of its
    /// namespaces).
    pub fn current() -> Option<ARef<Self>> {
        // SAFETY: Always safe to call from task context; a non-null result carries a reference.
        let net = NonNull::new(unsafe { bindings::netns_of_current() })?;
        // SAFETY: The helper took the reference that the `ARef` now owns.
        Some(unsafe { ARef::from_raw(net.cast::<Self>()) })
    }

    /// The namespace `dev` is in now, or `None` while that namespace is being dismantled.
    ///
    /// A netdev can move to another namespace at any time: the result is where it was at the
    /// call.
    pub fn of_netdev(dev: &NetDevice) -> Option<ARef<Self>> {
        // SAFETY: `dev` is a valid netdev; a non-null result carries a reference.
        let net = NonNull::new(unsafe { bindings::netns_of_netdev(dev.as_raw()) })?;
        // SAFETY: The helper took the reference that the `ARef` now owns.
        Some(unsafe { ARef::from_raw(net.cast::<Self>()) })
    }

    /// The raw `struct net` pointer.
    pub fn as_raw(&self) -> *mut bindings::net {
        self.0.get()
    }
}
