// SPDX-License-Identifier: GPL-2.0

//! A spinlock that disables local interrupts while held (`spin_lock_irqsave`).
//!
//! For state shared between process context, softirqs and interrupt-context callers, such as
//! an RDMA completion queue that ULPs poll from any context.

use crate::{
    bindings,
    sync::lock::{Backend, Lock},
};

/// A spinlock taken with `spin_lock_irqsave`. Create it with [`new_spinlock_irq!`].
pub type SpinLockIrq<T> = Lock<T, SpinLockIrqBackend>;

/// Creates a [`SpinLockIrq`] initialiser with the given name and a new lock class.
#[macro_export]
macro_rules! new_spinlock_irq {
    ($inner:expr $(, $name:literal)? $(,)?) => {
        $crate::sync::lock::Lock::<_, $crate::irqlock::SpinLockIrqBackend>::new(
            $inner, $crate::optional_name!($($name)?), $crate::static_lock_class!())
    };
}

/// The lock backend of [`SpinLockIrq`].
pub struct SpinLockIrqBackend;

// SAFETY: The kernel's `spinlock_t` provides mutual exclusion; the saved interrupt flags travel in
// the guard state from `lock` to `unlock`.
unsafe impl Backend for SpinLockIrqBackend {
    type State = bindings::spinlock_t;
    type GuardState = crate::ffi::c_ulong;

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const crate::ffi::c_char,
        key: *mut bindings::lock_class_key,
    ) {
        // SAFETY: The caller guarantees `ptr` is writable and `name`/`key` live forever.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: The caller guarantees the lock was initialised.
        unsafe { bindings::spin_lock_irqsave(ptr) }
    }

    unsafe fn unlock(ptr: *mut Self::State, guard_state: &Self::GuardState) {
        // SAFETY: The caller owns the lock; `guard_state` holds the flags `lock` saved.
        unsafe { bindings::spin_unlock_irqrestore(ptr, *guard_state) }
    }
}
