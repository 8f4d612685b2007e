// SPDX-License-Identifier: GPL-2.0

//! Random numbers from the kernel's CRNG (`get_random_u32()` and friends).
//!
//! Suitable for values a peer must not predict, such as memory keys. Callable in any context
//! but NMI, including under spinlocks with interrupts disabled.
//!
//! C header: [`include/linux/random.h`](srctree/include/linux/random.h)

use crate::bindings;
use core::num::NonZeroU32;

/// A random `u32`.
pub fn get_u32() -> u32 {
    // SAFETY: `get_random_u32` takes no arguments and has no memory-safety preconditions.
    unsafe { bindings::get_random_u32() }
}

/// A uniformly distributed random number in `[0, ceil)`.
pub fn u32_below(ceil: NonZeroU32) -> u32 {
    // `get_random_u32_below()` is an inline that calls this for a `ceil` unknown at build time.
    // SAFETY: No memory-safety preconditions; `ceil` is not zero, as the function's contract asks.
    unsafe { bindings::__get_random_u32_below(ceil.get()) }
}
