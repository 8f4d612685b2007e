// SPDX-License-Identifier: GPL-2.0

//! The protocol core's CRC32c engine, backed by the kernel's `crc32c()`.

#![deny(unsafe_code)]

use crate::proto::crc::Crc32c;

/// CRC32c through the kernel's implementation (SSE4.2 or the fastest the crypto API offers).
#[derive(Clone, Copy, Default)]
pub struct KernelCrc32c;

impl Crc32c for KernelCrc32c {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        kernel::crc32c::update(reg, data)
    }
}
