// SPDX-License-Identifier: GPL-2.0

//! Port counters: what `rdma statistic show link DEV/PORT` and
//! `/sys/class/infiniband/DEV/ports/PORT/hw_counters/` show.
//!
//! A driver names its counters once ([`Driver::HW_STATS`]) and fills their values on demand
//! ([`Driver::get_hw_stats`]); the core allocates the `struct rdma_hw_stats` that carries them,
//! caches the values for a few milliseconds and serializes the reads.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! [`Driver::HW_STATS`]: super::device::Driver::HW_STATS
//! [`Driver::get_hw_stats`]: super::device::Driver::get_hw_stats

use crate::{bindings, str::CStr};

/// A port counter's name.
///
/// # Invariants
///
/// `name` points to a static NUL-terminated string, `flags` is zero and `priv_` is null.
#[repr(transparent)]
pub struct StatDesc(bindings::rdma_stat_desc);

// SAFETY: A `StatDesc` only points to a static string that nobody writes.
unsafe impl Sync for StatDesc {}

impl StatDesc {
    /// A counter named `name` (as `rdma statistic` prints it), always enabled.
    pub const fn new(name: &'static CStr) -> Self {
        // INVARIANT: `name` is static; no flags, no private data.
        Self(bindings::rdma_stat_desc {
            name: name.as_char_ptr(),
            flags: 0,
            priv_: core::ptr::null(),
        })
    }

    /// The C descriptor array of `descs`, for `rdma_alloc_hw_stats_struct`.
    pub(crate) fn as_raw(descs: &'static [StatDesc]) -> *const bindings::rdma_stat_desc {
        // `StatDesc` is `repr(transparent)` over `rdma_stat_desc`.
        descs.as_ptr().cast()
    }
}
