// SPDX-License-Identifier: GPL-2.0

//! rsiw_canary: provokes, on request, each kind of kernel fault the selftest harness must catch,
//! so that `make check` can prove that it fails a test for each, for the right reason.
//!
//! ```text
//! echo leak > /sys/kernel/debug/rsiw_canary/provoke          # kmemleak: an unreferenced object
//! echo warn > provoke                                        # WARNING:, taint W
//! echo sleep-in-atomic > provoke                             # BUG: sleeping function called ...
//! echo abba > provoke                                        # lockdep: circular locking
//! echo overflow > provoke                                    # Rust panic: oops, taint D
//! echo use-after-free > provoke                              # BUG: KFENCE: use-after-free
//! ```
//!
//! Nothing here is for production: the module exists for the harness's own tests
//! (`selftests/canary/`), run in a VM of their own.

#![deny(unsafe_code)]

use kernel::{
    bug::{provoke_use_after_free, warn_on},
    c_str,
    debugfs::{Dir, FileHandler},
    new_mutex, new_spinlock,
    prelude::*,
    sync::{Arc, Mutex},
};

module! {
    type: Canary,
    name: "rsiw_canary",
    author: "rsiw developers",
    description: "Provokes kernel faults for the selftest harness's own tests",
    license: "GPL",
}

/// The module: its debugfs directory.
struct Canary {
    _dir: Dir,
}

impl kernel::Module for Canary {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let mut dir = Dir::new(c_str!("rsiw_canary"), module)?;
        dir.create_file(c_str!("provoke"), 0o200, Arc::new(Provoke, GFP_KERNEL)?)?;
        Ok(Canary { _dir: dir })
    }
}

/// The `provoke` file.
struct Provoke;

impl FileHandler for Provoke {
    fn write(&self, data: &[u8]) -> Result {
        let what = core::str::from_utf8(data).map_err(|_| EINVAL)?.trim();
        match what {
            "leak" => leak(),
            "warn" => {
                warn_on(true);
                Ok(())
            }
            "sleep-in-atomic" => sleep_in_atomic(),
            "abba" => abba(),
            "overflow" => overflow(),
            "use-after-free" => {
                if provoke_use_after_free() {
                    Ok(())
                } else {
                    // Neither KFENCE nor KASAN guarded an object: say so, not silently pass.
                    pr_err!("rsiw_canary: no object guarded by KFENCE or KASAN came up\n");
                    Err(ENODEV)
                }
            }
            _ => Err(EINVAL),
        }
    }
}

/// Allocates an object and drops every reference to it.
fn leak() -> Result {
    let object = KBox::new([0x5au8; 128], GFP_KERNEL)?;
    let _ = KBox::leak(object);
    Ok(())
}

/// Takes a mutex (which may sleep) while holding a spinlock.
fn sleep_in_atomic() -> Result {
    let spin = KBox::pin_init(new_spinlock!((), "rsiw_canary::spin"), GFP_KERNEL)?;
    let mutex = KBox::pin_init(new_mutex!((), "rsiw_canary::mutex"), GFP_KERNEL)?;
    let _spin = spin.lock();
    let _mutex = mutex.lock();
    Ok(())
}

/// Takes two mutexes in one order, then in the other: lockdep sees a possible deadlock although
/// this one thread never waits.
fn abba() -> Result {
    let a: Pin<KBox<Mutex<()>>> = KBox::pin_init(new_mutex!((), "rsiw_canary::a"), GFP_KERNEL)?;
    let b: Pin<KBox<Mutex<()>>> = KBox::pin_init(new_mutex!((), "rsiw_canary::b"), GFP_KERNEL)?;
    {
        let _a = a.lock();
        let _b = b.lock();
    }
    let _b = b.lock();
    let _a = a.lock();
    Ok(())
}

/// Adds past `u32::MAX` with overflow checks on: a Rust panic, which oopses the writing process.
fn overflow() -> Result {
    let n = core::hint::black_box(u32::MAX);
    let sum = core::hint::black_box(n) + 1;
    core::hint::black_box(sum);
    Ok(())
}
