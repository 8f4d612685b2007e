// SPDX-License-Identifier: GPL-2.0
//! A table-driven CRC32c for host tests, independent of the crates.io one.

use crate::proto::crc::{Crc32c, CRC32C_POLY_REFLECTED};

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ CRC32C_POLY_REFLECTED
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

static TABLES: [[u32; 256]; 8] = make_tables();

fn tab(n: usize, idx: u32) -> u32 {
    // `idx & 0xff` is always in range; `get` keeps the path panic free.
    TABLES
        .get(n)
        .and_then(|t| t.get((idx & 0xff) as usize))
        .copied()
        .unwrap_or(0)
}

/// Portable slicing-by-8 CRC32c (no hardware support needed).
///
/// A second, independent implementation for the host tests and fuzzers. It
/// is deliberately not part of the core: the kernel uses its own `crc32c()`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SoftCrc32c;

impl Crc32c for SoftCrc32c {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        let mut c = reg;
        let mut chunks = data.chunks_exact(8);
        for ch in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(ch);
            let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ c;
            let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
            c = tab(7, lo)
                ^ tab(6, lo >> 8)
                ^ tab(5, lo >> 16)
                ^ tab(4, lo >> 24)
                ^ tab(3, hi)
                ^ tab(2, hi >> 8)
                ^ tab(1, hi >> 16)
                ^ tab(0, hi >> 24);
        }
        for &b in chunks.remainder() {
            c = (c >> 8) ^ tab(0, c ^ u32::from(b));
        }
        c
    }
}
