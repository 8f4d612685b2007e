// SPDX-License-Identifier: GPL-2.0

//! Data regions with guard bytes: `count` slots of `[GUARD][len data bytes][GUARD]` in one
//! DMA-mapped buffer. Guards are filled with [`guard`] and must survive every operation; data is
//! filled with and checked against [`pattern`].

use crate::proto::{guard, pattern, status, GUARD};
use kernel::{
    prelude::*,
    rdma::consumer::{
        mem::{DmaBuf, Pd},
        qp::Sge,
    },
    sync::Arc,
};

/// What a check found wrong: a [`status`] code, the offset in the slot's data (negative-ish
/// guard offsets are reported as buffer offsets) and the byte found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bad {
    pub(crate) code: u64,
    pub(crate) off: usize,
    pub(crate) found: u8,
}

/// A region of guarded slots of `len` bytes.
pub(crate) struct Region {
    pub(crate) buf: Arc<DmaBuf>,
    pub(crate) len: usize,
}

impl Region {
    /// Allocates the region and fills every byte with guard bytes.
    pub(crate) fn new(pd: &Arc<Pd>, len: usize, count: usize) -> Result<Region> {
        let stride = len.checked_add(2 * GUARD).ok_or(EINVAL)?;
        let total = stride.checked_mul(count.max(1)).ok_or(EINVAL)?;
        let buf = DmaBuf::new(pd, total)?;
        buf.fill(0, total, guard)?;
        Ok(Region { buf, len })
    }

    fn stride(&self) -> usize {
        self.len + 2 * GUARD
    }

    /// The buffer offset of slot `i`'s data.
    pub(crate) fn data_off(&self, i: usize) -> usize {
        i * self.stride() + GUARD
    }

    /// Fills slot `i`'s data with `pattern(seed, ..)`, or zeros for seed 0, and its guards.
    pub(crate) fn fill(&self, i: usize, seed: u32) -> Result {
        let base = i * self.stride();
        self.buf.fill(base, GUARD, guard)?;
        let d = base + GUARD;
        if seed == 0 {
            self.buf.fill(d, self.len, |_| 0)?;
        } else {
            self.buf.fill(d, self.len, |o| pattern(seed, o - d))?;
        }
        self.buf.fill(d + self.len, GUARD, guard)
    }

    /// Checks slot `i`: guards intact, and the first `len` data bytes equal `pattern(seed, ..)`
    /// (zeros for seed 0).
    pub(crate) fn check(&self, i: usize, seed: u32, len: usize) -> Result<Option<Bad>> {
        let base = i * self.stride();
        let d = base + GUARD;
        if let Some((off, found)) = self.buf.find_mismatch(base, GUARD, guard)? {
            return Ok(Some(Bad {
                code: status::GUARD,
                off,
                found,
            }));
        }
        if let Some((off, found)) = self.buf.find_mismatch(d + self.len, GUARD, guard)? {
            return Ok(Some(Bad {
                code: status::GUARD,
                off,
                found,
            }));
        }
        let len = len.min(self.len);
        let bad = if seed == 0 {
            self.buf.find_mismatch(d, len, |_| 0)?
        } else {
            self.buf.find_mismatch(d, len, |o| pattern(seed, o - d))?
        };
        Ok(bad.map(|(off, found)| Bad {
            code: status::MISMATCH,
            off: off - d,
            found,
        }))
    }

    /// SGEs for slot `i`'s data, in about `parts` pieces, at most `max` of them.
    pub(crate) fn sges(&self, i: usize, parts: usize, max: usize) -> Result<KVec<Sge>> {
        // More parts than `max` always give more than `max` SGEs.
        let mut parts = parts.clamp(1, max.max(1));
        loop {
            let s = Sge::list(&self.buf, self.data_off(i), self.len, parts)?;
            if s.len() <= max {
                return Ok(s);
            }
            if parts == 1 {
                // Chunk boundaries alone need more SGEs than the device has.
                return Err(EINVAL);
            }
            parts -= 1;
        }
    }
}
