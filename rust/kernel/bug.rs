// SPDX-License-Identifier: GPL-2.0

//! Kernel warnings (`WARN()`) for states that only a bug in the kernel reaches, and a
//! use-after-free for the selftest harness's canary.
//!
//! Input from a peer, a user process or a ULP gets an error, never a warning: a warning taints
//! the kernel and, with `panic_on_warn`, stops it.
//!
//! C header: [`include/asm-generic/bug.h`](srctree/include/asm-generic/bug.h)

use crate::{
    bindings,
    ffi::{c_int, c_uint},
};

/// If `cond` holds, logs a kernel warning with a backtrace, naming the caller's file and line, and
/// taints the kernel (`TAINT_WARN`), as C's `WARN_ON()`. Returns `cond`.
#[track_caller]
pub fn warn_on(cond: bool) -> bool {
    if cond {
        let at = core::panic::Location::caller();
        let file = at.file();
        let len = c_int::try_from(file.len()).unwrap_or(c_int::MAX);
        let line: c_uint = at.line();
        // SAFETY: `file` is valid for reads of `len` bytes, and `%.*s` reads no more of it; the
        // helper may be called from any context.
        unsafe { bindings::warn_at(file.as_ptr().cast(), len, line) };
    }
    cond
}

/// Frees a small slab object and reads it, for the selftest harness's canary only: KFENCE or
/// KASAN must report the use-after-free, and the harness must fail the test for it. Neither
/// stops the kernel: the read returns whatever the freed memory holds.
///
/// Waits up to 5 s for an object KFENCE guards (one per `kfence.sample_interval`), and reads
/// nothing and returns `false` if none came up and KASAN is off.
pub fn provoke_use_after_free() -> bool {
    // SAFETY: The helper reads freed memory on purpose, and only memory that KASAN or KFENCE
    // guards: both report the read and let it complete, so nothing of the kernel's is harmed.
    unsafe { bindings::canary_use_after_free() }
}
