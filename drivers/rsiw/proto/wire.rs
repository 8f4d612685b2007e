// SPDX-License-Identifier: GPL-2.0

//! Big-endian field access on byte slices that never panics.

/// Reads a big-endian `u16` at `off`, or `None` if `b` is too short.
#[inline]
pub(crate) fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([*s.first()?, *s.get(1)?]))
}

/// Reads a big-endian `u32` at `off`, or `None` if `b` is too short.
#[inline]
pub(crate) fn be32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    let mut a = [0u8; 4];
    a.copy_from_slice(s);
    Some(u32::from_be_bytes(a))
}

/// Reads a big-endian `u64` at `off`, or `None` if `b` is too short.
#[inline]
pub(crate) fn be64(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_be_bytes(a))
}

/// Copies `src` into `dst` at `off`; `None` if it does not fit.
#[inline]
pub(crate) fn put(dst: &mut [u8], off: usize, src: &[u8]) -> Option<()> {
    dst.get_mut(off..off.checked_add(src.len())?)?
        .copy_from_slice(src);
    Some(())
}
