// SPDX-License-Identifier: GPL-2.0

//! The kernel's CRC32c (Castagnoli) implementation, `crc32c()` from `lib/libcrc32c.c`.
//!
//! It picks the fastest available implementation (e.g. SSE4.2 `crc32` instructions) through
//! the crypto API.
//!
//! C header: [`include/linux/crc32c.h`](srctree/include/linux/crc32c.h)

use crate::bindings;

/// Advances the raw (not inverted) CRC32c register `reg` over `data`.
///
/// Start with `!0` and invert the final value to get the standard CRC32c.
pub fn update(mut reg: u32, data: &[u8]) -> u32 {
    // `crc32c()` takes an `unsigned int` length, so feed very large buffers in pieces.
    for chunk in data.chunks(u32::MAX as usize) {
        // SAFETY: `chunk` is valid for reads of `chunk.len()` bytes, which fits in `u32`.
        reg = unsafe { bindings::crc32c(reg, chunk.as_ptr().cast(), chunk.len() as u32) };
    }
    reg
}
