// SPDX-License-Identifier: GPL-2.0

//! CRC32c as MPA uses it (RFC 5044 §4.4, computed the iSCSI way, RFC 3720).
//!
//! Polynomial 0x1EDC6F41 (reflected 0x82F63B78), register preset to all
//! ones, reflected input and output, result inverted. The 32-bit result goes
//! on the wire least-significant octet first ([`to_wire`]).
//!
//! The core never computes a CRC itself: it calls a [`Crc32c`] engine that
//! the caller supplies. The kernel build wraps the kernel's `crc32c()`
//! (which works on the raw register, exactly like [`Crc32c::update`]); the
//! host tests use a crates.io implementation and an independent table
//! implementation that lives in the host crate only.

/// Value of the CRC register before the first octet.
pub const CRC32C_INIT: u32 = 0xFFFF_FFFF;

/// The reflected CRC32c polynomial.
pub const CRC32C_POLY_REFLECTED: u32 = 0x82F6_3B78;

/// A CRC32c engine working on the raw (not inverted) register.
///
/// `update(CRC32C_INIT, data)` followed by [`finish`] gives the standard
/// CRC32c of `data`; `update` over consecutive pieces equals one `update`
/// over their concatenation.
pub trait Crc32c {
    /// Advances the raw register `reg` over `data` and returns the new value.
    fn update(&self, reg: u32, data: &[u8]) -> u32;

    /// Copies `src` into the start of `dst` and advances `reg` over `src`.
    ///
    /// Engines that can fuse the copy and the CRC into one pass over the data
    /// should override this. If `dst` is shorter than `src`, only the CRC is
    /// computed and nothing is copied; callers in this crate never do that.
    fn copy_update(&self, reg: u32, src: &[u8], dst: &mut [u8]) -> u32 {
        if let Some(d) = dst.get_mut(..src.len()) {
            d.copy_from_slice(src);
        }
        self.update(reg, src)
    }
}

impl<T: Crc32c + ?Sized> Crc32c for &T {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        (**self).update(reg, data)
    }

    fn copy_update(&self, reg: u32, src: &[u8], dst: &mut [u8]) -> u32 {
        (**self).copy_update(reg, src, dst)
    }
}

/// Turns a raw register into the CRC32c value (final inversion).
pub const fn finish(reg: u32) -> u32 {
    !reg
}

/// The four octets of a CRC32c value in MPA wire order (LSB first).
pub const fn to_wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The CRC32c value carried by four octets in MPA wire order.
pub const fn from_wire(b: [u8; 4]) -> u32 {
    u32::from_le_bytes(b)
}

/// CRC32c of `data` in one call.
pub fn checksum<C: Crc32c + ?Sized>(engine: &C, data: &[u8]) -> u32 {
    finish(engine.update(CRC32C_INIT, data))
}
