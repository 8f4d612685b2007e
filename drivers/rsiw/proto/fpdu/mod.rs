// SPDX-License-Identifier: GPL-2.0

//! MPA Full Operation framing (RFC 5044 §4–§6): FPDUs with ULPDU_Length,
//! PAD, CRC32c and Markers.
//!
//! An FPDU is `ULPDU_Length (BE16) | ULPDU | PAD (0-3) | CRC (4, LSB
//! first)`, with a 4-octet Marker `0000 | FPDUPTR` inserted wherever the
//! stream offset, counted from the first octet of Full Operation in that
//! direction, is a multiple of 512. FPDUPTR is the distance from the FPDU's
//! ULPDU_Length back to the Marker, or 0 for a Marker that falls between two
//! FPDUs (it then belongs to the following FPDU). Markers are covered by the
//! CRC of the FPDU they belong to.
//!
//! Because every FPDU is a multiple of four octets long and Full Operation
//! starts on a Marker boundary, a Marker can only fall before an FPDU,
//! inside its ULPDU (even inside the DDP header), or between PAD and CRC;
//! never between ULPDU_Length and the ULPDU nor inside the CRC. Both the
//! transmitter and the receiver below rely on this.
//!
//! Transmit: [`Segmenter`] cuts one RDMAP message into DDP segments of at
//! most MULPDU octets; each [`FpduTx`] yields [`TxPiece`]s: small byte runs
//! it builds itself (header, Markers, PAD and CRC) and payload ranges that
//! refer to the caller's buffers, so payload pages can be sent without a
//! copy. The caller feeds payload octets back with [`FpduTx::feed_payload`]
//! for the CRC.
//!
//! Receive: [`RxStream::poll`] parses a byte stream fed in arbitrary chunks
//! (down to single octets) and can stop and resume at any octet. It reports
//! each segment's header, then payload ranges, which the caller places with
//! [`RxStream::copy_payload`] (copy and CRC in one pass) or accounts for
//! with [`RxStream::consume_payload`], then the CRC verdict.
//!
//! The transmit half lives in `tx.rs`, the receive half in `rx.rs`; both are
//! re-exported here, so users name everything `fpdu::...`.

mod rx;
mod tx;

pub use rx::*;
pub use tx::*;

use super::ddp::UNTAGGED_HDR_LEN;
use super::rdmap::TERM_MAX_LEN;

/// Marker spacing in the TCP byte stream.
pub const MARKER_INTERVAL: u32 = 512;
/// Marker length.
pub const MARKER_LEN: usize = 4;
/// Length of the ULPDU_Length field.
pub const LEN_FIELD: usize = 2;
/// Length of the CRC field (present even when CRC is off).
pub const CRC_LEN: usize = 4;
/// Smallest MULPDU MPA may report (RFC 5044 §3, §4.5).
pub const MULPDU_MIN: u16 = 128;
/// Largest ULPDU a sender may post (RFC 5044 §3).
pub const MULPDU_MAX: u16 = 64768;
/// Most TCP payload one FPDU may fill with large FPDUs: 64 KiB, a multiple
/// of 8. [`mulpdu`] of it is [`MULPDU_MAX`], so such FPDUs, Markers, PAD and
/// CRC included, stay within 64 KiB and their ULPDU_Length within what any
/// receiver takes (16 bits; the C siw and rsiw place up to 65535 octets).
pub const LARGE_FPDU_MAX: u32 = 64 * 1024;
/// Longest ULPDU header the core builds or collects: an untagged DDP header
/// plus the longest Terminate body.
pub const ULPDU_HDR_MAX: usize = UNTAGGED_HDR_LEN + TERM_MAX_LEN;
/// Capacity of an inline piece: a Marker, ULPDU_Length, the longest header
/// and one more Marker.
pub const INLINE_MAX: usize = MARKER_LEN + LEN_FIELD + ULPDU_HDR_MAX + MARKER_LEN;

/// PAD length for a ULPDU of `ulpdu_len` octets (RFC 5044 §4.1).
pub const fn pad_len(ulpdu_len: u16) -> usize {
    (4 - (LEN_FIELD + ulpdu_len as usize) % 4) % 4
}

/// MULPDU for an effective MSS (RFC 5044 §4.5): EMSS minus the worst-case
/// framing overhead, never below 128 and never above 64768.
pub fn mulpdu(emss: u32, markers: bool) -> u16 {
    let markers_len = if markers {
        emss.div_ceil(MARKER_INTERVAL)
            .saturating_mul(MARKER_LEN as u32)
    } else {
        0
    };
    let overhead = (LEN_FIELD + CRC_LEN) as u32 + emss % 4 + markers_len;
    let v = emss
        .saturating_sub(overhead)
        .clamp(u32::from(MULPDU_MIN), u32::from(MULPDU_MAX));
    u16::try_from(v).unwrap_or(MULPDU_MAX)
}

/// The TCP payload one FPDU may fill (the EMSS for [`mulpdu`]), from the
/// socket's current MSS and GSO segment count: one MSS, or with `large`
/// FPDUs negotiated a whole GSO packet (`mss * gso_segs`), at most
/// [`LARGE_FPDU_MAX`] and rounded down to a multiple of 8 as the C siw does
/// (loopback may report odd sizes); never less than one MSS.
pub fn tx_budget(mss: u32, gso_segs: u16, large: bool) -> u32 {
    if !large {
        return mss;
    }
    let gso = mss.saturating_mul(u32::from(gso_segs)).min(LARGE_FPDU_MAX) & !7;
    gso.max(mss)
}

fn marker_due(markers: bool, off: u32) -> bool {
    markers && off % MARKER_INTERVAL == 0
}

fn until_marker(markers: bool, off: u32) -> usize {
    if markers {
        (MARKER_INTERVAL - off % MARKER_INTERVAL) as usize
    } else {
        usize::MAX
    }
}
