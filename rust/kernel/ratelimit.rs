// SPDX-License-Identifier: GPL-2.0

//! Rate limits for log messages (`struct ratelimit_state` and `___ratelimit()`).
//!
//! For messages a remote peer can cause at will, once per connection or per segment: a
//! [`RateLimit`] lets a burst through, drops the rest until its interval ends, and the next
//! message that gets through is preceded by the count of those dropped. The
//! `pr_*_ratelimited!` macros give each call site its own limit, as the C ones do.
//!
//! C header: [`include/linux/ratelimit.h`](srctree/include/linux/ratelimit.h)

use crate::{bindings, ffi::c_int, str::CStr, types::Opaque};
use core::sync::atomic::{AtomicU8, Ordering};

/// `state` is not initialised yet.
const UNINIT: u8 = 0;
/// One caller is initialising `state`.
const INITIALISING: u8 = 1;
/// `state` is initialised.
const READY: u8 = 2;

/// The kernel's default limit, `DEFAULT_RATELIMIT_BURST` (10) events per
/// `DEFAULT_RATELIMIT_INTERVAL` (5 s), for statics: `static LIMIT: RateLimit = RateLimit::new();`.
///
/// # Invariants
///
/// `state` is initialised once `phase` is [`READY`]; before that only the caller that moved
/// `phase` from [`UNINIT`] to [`INITIALISING`] touches it.
pub struct RateLimit {
    state: Opaque<bindings::ratelimit_state>,
    phase: AtomicU8,
}

// SAFETY: Once initialised, the C state is accessed only through `___ratelimit`, which takes its
// lock; the one caller that initialises it does so before `phase` publishes it.
unsafe impl Sync for RateLimit {}

impl RateLimit {
    /// A limit with the kernel's default interval and burst, initialised on first use.
    pub const fn new() -> Self {
        // INVARIANT: `phase` is `UNINIT`.
        Self {
            state: Opaque::uninit(),
            phase: AtomicU8::new(UNINIT),
        }
    }

    /// Whether `state` is initialised; initialises it if no one has begun to.
    fn ready(&self) -> bool {
        if self.phase.load(Ordering::Acquire) == READY {
            return true;
        }
        if let Err(phase) =
            self.phase
                .compare_exchange(UNINIT, INITIALISING, Ordering::Acquire, Ordering::Acquire)
        {
            return phase == READY;
        }
        let interval = c_int::try_from(bindings::DEFAULT_RATELIMIT_INTERVAL).unwrap_or(c_int::MAX);
        let burst = c_int::try_from(bindings::DEFAULT_RATELIMIT_BURST).unwrap_or(c_int::MAX);
        // SAFETY: `state` is valid for writes, and by the invariant no one else touches it until
        // `phase` is `READY`: this caller moved it to `INITIALISING`.
        unsafe { bindings::ratelimit_state_init(self.state.get(), interval, burst) };
        // INVARIANT: `state` was initialised just above.
        self.phase.store(READY, Ordering::Release);
        true
    }

    /// Whether an event may happen now. `who` names the limit in the kernel's
    /// "`who`: N callbacks suppressed" line.
    ///
    /// `'static`: the C state must not move once initialised.
    pub fn allow(&'static self, who: &CStr) -> bool {
        if !self.ready() {
            // Another caller is initialising the state at this moment: let this event through.
            return true;
        }
        // SAFETY: `state` is initialised (`ready()`) and stays at this address for good
        // (`'static`); `___ratelimit` serialises with its lock; `who` is NUL-terminated.
        unsafe { bindings::___ratelimit(self.state.get(), who.as_char_ptr()) != 0 }
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs the printing macro `$print` unless its call site printed too often lately; the count of
/// messages dropped is reported under the caller's module path.
#[doc(hidden)]
#[macro_export]
macro_rules! print_ratelimited (
    ($print:ident, $($arg:tt)+) => ({
        static LIMIT: $crate::ratelimit::RateLimit = $crate::ratelimit::RateLimit::new();
        if LIMIT.allow($crate::c_str!(::core::module_path!())) {
            $crate::$print!($($arg)+);
        }
    })
);

/// Prints a warning-level message, at most a burst per interval from this call site (see
/// [`RateLimit`](crate::ratelimit::RateLimit)): the C `pr_warn_ratelimited`.
#[macro_export]
macro_rules! pr_warn_ratelimited (
    ($($arg:tt)+) => ($crate::print_ratelimited!(pr_warn, $($arg)+))
);

/// Prints an info-level message, at most a burst per interval from this call site (see
/// [`RateLimit`](crate::ratelimit::RateLimit)): the C `pr_info_ratelimited`.
#[macro_export]
macro_rules! pr_info_ratelimited (
    ($($arg:tt)+) => ($crate::print_ratelimited!(pr_info, $($arg)+))
);
