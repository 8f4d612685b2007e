// SPDX-License-Identifier: GPL-2.0

//! The protocol core's CRC32c engine, backed by the kernel's `crc32c()`.

#![deny(unsafe_code)]

use crate::{
    proto::crc::Crc32c,
    stats::{Counter, Counters},
};

/// CRC32c through the kernel's implementation (SSE4.2 or the fastest the crypto API offers).
#[derive(Clone, Copy, Default)]
pub struct KernelCrc32c;

impl Crc32c for KernelCrc32c {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        kernel::crc32c::update(reg, data)
    }
}

/// [`KernelCrc32c`] that adds the octets it runs over to a counter: the work per payload byte
/// that `make bench` reports.
pub(crate) struct CountedCrc32c<'a> {
    counters: &'a Counters,
    counter: Counter,
}

impl<'a> CountedCrc32c<'a> {
    /// Counts into `counter` of `counters`.
    pub(crate) fn new(counters: &'a Counters, counter: Counter) -> Self {
        Self { counters, counter }
    }
}

impl Crc32c for CountedCrc32c<'_> {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        // CAST: `usize` is at most 64 bits wide.
        self.counters.add(self.counter, data.len() as u64);
        kernel::crc32c::update(reg, data)
    }
}
