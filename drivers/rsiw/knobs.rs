// SPDX-License-Identifier: GPL-2.0

//! Administrator settings for new connections, and counters of what connections negotiated,
//! in `/sys/kernel/debug/rsiw/mpa`.
//!
//! Writing `rev=1|2 crc=0|1 markers=0|1 rtr=none|write|read|send large_fpdu=0|1
//! zerocopy=off|auto|on` (any subset, any order) changes how later connections are negotiated
//! and send payload; reading shows the settings and, per
//! outcome, how many connections reached RTS, and (third line) how the transmit path sent
//! payload: by reference or copied, how many zero-copy sends TCP made and released, and how many
//! FPDUs it sent, how many of them were longer than the socket's MSS then, and the longest;
//! then how the receive path placed payload: straight from the socket's buffers, or through the
//! bounce buffer (an FPDU whose CRC could not be checked ahead), and how often it waited for the
//! rest of an FPDU to check its CRC ahead.
//!
//! Scripts find each value by its line and key (`awk 'NR == 2 ...'`), so new keys are only ever
//! appended at the end of a line:
//!
//! ```text
//! rev=2 crc=1 markers=0 rtr=none large_fpdu=1 zerocopy=auto
//! established=N crc=N markers=N rev1=N rtr_write=N rtr_read=N rtr_send=N large_fpdu=N
//! tx_payload_by_reference=N tx_payload_copied=N zc_sends=N zc_released=N tx_fpdus=N tx_fpdus_over_mss=N tx_fpdu_max=N rx_payload_direct=N rx_payload_bounced=N rx_waits=N
//! ```
//!
//! The settings live in one atomic word, so the connection manager reads a consistent set
//! without a lock.

#![deny(unsafe_code)]

use crate::proto::{
    mpa::{RtrSet, RtrType},
    negotiate::{MpaPolicy, Negotiated},
};
use core::{
    fmt::Write,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};
use kernel::{debugfs::FileHandler, prelude::*};

const REV1: u32 = 1 << 0;
const NO_CRC: u32 = 1 << 1;
const MARKERS: u32 = 1 << 2;
const RTR_SHIFT: u32 = 3;
const RTR_MASK: u32 = 3 << RTR_SHIFT;
const NO_LARGE_FPDU: u32 = 1 << 5;
const NO_ZEROCOPY: u32 = 1 << 6;
const ZEROCOPY_LOOPBACK: u32 = 1 << 7;

/// The settings word: all zero is the default (revision 2, CRC, no Markers asked for, no RTR,
/// large FPDUs proposed and agreed to, payload sent by reference where that pays).
static SETTINGS: AtomicU32 = AtomicU32::new(0);

/// Connections that reached RTS, by what they negotiated.
static ESTABLISHED: AtomicU64 = AtomicU64::new(0);
static WITH_CRC: AtomicU64 = AtomicU64::new(0);
static WITH_MARKERS: AtomicU64 = AtomicU64::new(0);
static WITH_REV1: AtomicU64 = AtomicU64::new(0);
static WITH_RTR: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
static WITH_LARGE_FPDU: AtomicU64 = AtomicU64::new(0);

/// Payload bytes sent by reference (zero copy) and copied; zero-copy sends made and released.
static TX_BY_REFERENCE: AtomicU64 = AtomicU64::new(0);
static TX_COPIED: AtomicU64 = AtomicU64::new(0);
static ZC_SENDS: AtomicU64 = AtomicU64::new(0);
static ZC_RELEASED: AtomicU64 = AtomicU64::new(0);

/// FPDUs sent; those longer than the socket's MSS when they were built; the longest (octets on
/// the wire: ULPDU_Length, ULPDU, PAD, Markers and CRC).
static TX_FPDUS: AtomicU64 = AtomicU64::new(0);
static TX_FPDUS_OVER_MSS: AtomicU64 = AtomicU64::new(0);
static TX_FPDU_MAX: AtomicU64 = AtomicU64::new(0);

/// Payload bytes placed straight from the socket's buffers, and through the bounce buffer.
static RX_DIRECT: AtomicU64 = AtomicU64::new(0);
static RX_BOUNCED: AtomicU64 = AtomicU64::new(0);

/// Times the receive path waited for the rest of an FPDU before checking its CRC.
static RX_WAITS: AtomicU64 = AtomicU64::new(0);

/// Counts a wait for the rest of an FPDU.
pub(crate) fn count_rx_wait() {
    RX_WAITS.fetch_add(1, Ordering::Relaxed);
}

/// Counts `n` payload bytes received, placed directly or bounced.
pub(crate) fn count_rx_payload(bounced: bool, n: usize) {
    let c = if bounced { &RX_BOUNCED } else { &RX_DIRECT };
    // CAST: `usize` is at most 64 bits wide.
    c.fetch_add(n as u64, Ordering::Relaxed);
}

/// Counts `n` payload bytes sent, by reference or copied.
pub(crate) fn count_tx_payload(by_reference: bool, n: usize) {
    let c = if by_reference {
        &TX_BY_REFERENCE
    } else {
        &TX_COPIED
    };
    // CAST: `usize` is at most 64 bits wide.
    c.fetch_add(n as u64, Ordering::Relaxed);
}

/// Counts an FPDU of `wire_len` octets built while the socket's MSS was `mss`.
pub(crate) fn count_fpdu(wire_len: u32, mss: u32) {
    TX_FPDUS.fetch_add(1, Ordering::Relaxed);
    if wire_len > mss {
        TX_FPDUS_OVER_MSS.fetch_add(1, Ordering::Relaxed);
    }
    let len = u64::from(wire_len);
    // Mostly not a new maximum: a plain load spares the read-modify-write.
    if len > TX_FPDU_MAX.load(Ordering::Relaxed) {
        TX_FPDU_MAX.fetch_max(len, Ordering::Relaxed);
    }
}

/// Counts a zero-copy send made.
pub(crate) fn count_zc_send() {
    ZC_SENDS.fetch_add(1, Ordering::Relaxed);
}

/// Counts a zero-copy send released.
pub(crate) fn count_zc_released() {
    ZC_RELEASED.fetch_add(1, Ordering::Relaxed);
}

fn rtr_of(settings: u32) -> Option<RtrType> {
    match (settings & RTR_MASK) >> RTR_SHIFT {
        1 => Some(RtrType::Write),
        2 => Some(RtrType::Read),
        3 => Some(RtrType::Send),
        _ => None,
    }
}

fn rtr_name(t: Option<RtrType>) -> &'static str {
    match t {
        None => "none",
        Some(RtrType::Write) => "write",
        Some(RtrType::Read) => "read",
        Some(RtrType::Send) => "send",
    }
}

fn rtr_index(t: RtrType) -> usize {
    match t {
        RtrType::Write => 0,
        RtrType::Read => 1,
        RtrType::Send => 2,
    }
}

/// The MPA policy for a new connection with the ULP's `ird` and `ord`.
pub(crate) fn policy(ird: u16, ord: u16) -> MpaPolicy {
    let s = SETTINGS.load(Ordering::Relaxed);
    let mut p = MpaPolicy {
        ird,
        ord,
        ..MpaPolicy::default()
    };
    if s & REV1 != 0 {
        p.rev = 1;
        p.enhanced = false;
    }
    p.crc = s & NO_CRC == 0;
    p.markers_rx = s & MARKERS != 0;
    p.large_fpdu = s & NO_LARGE_FPDU == 0;
    if let Some(t) = rtr_of(s) {
        // Ask for this RTR as initiator; accept only it as responder.
        p.p2p = true;
        p.rtr = RtrSet {
            send: t == RtrType::Send,
            write: t == RtrType::Write,
            read: t == RtrType::Read,
        };
    }
    p
}

/// Whether a new connection may send payload by reference (zero copy), `loopback` telling
/// whether its peer is on this host; else everything is copied.
///
/// `auto` (the default) leaves loopback connections out, where TCP copies zero-copy data on
/// delivery anyway; `on` includes them (tests use it to exercise zero copy in one VM).
pub(crate) fn zerocopy(loopback: bool) -> bool {
    let s = SETTINGS.load(Ordering::Relaxed);
    s & NO_ZEROCOPY == 0 && (!loopback || s & ZEROCOPY_LOOPBACK != 0)
}

fn zerocopy_name(s: u32) -> &'static str {
    match (s & NO_ZEROCOPY != 0, s & ZEROCOPY_LOOPBACK != 0) {
        (true, _) => "off",
        (false, false) => "auto",
        (false, true) => "on",
    }
}

/// Counts a connection that reached RTS with `n`.
pub(crate) fn count(n: &Negotiated) {
    ESTABLISHED.fetch_add(1, Ordering::Relaxed);
    if n.crc {
        WITH_CRC.fetch_add(1, Ordering::Relaxed);
    }
    if n.markers_tx || n.markers_rx {
        WITH_MARKERS.fetch_add(1, Ordering::Relaxed);
    }
    if n.rev == 1 {
        WITH_REV1.fetch_add(1, Ordering::Relaxed);
    }
    let rtr = n.rtr_send.or(if n.rtr_accept.is_empty() {
        None
    } else {
        [RtrType::Write, RtrType::Read, RtrType::Send]
            .into_iter()
            .find(|t| n.rtr_accept.has(*t))
    });
    if let Some(c) = rtr.and_then(|t| WITH_RTR.get(rtr_index(t))) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    if n.large_fpdu {
        WITH_LARGE_FPDU.fetch_add(1, Ordering::Relaxed);
    }
}

/// Parses one `key=value` setting into `s`.
fn apply(s: &mut u32, word: &str) -> Result {
    let (k, v) = word.split_once('=').ok_or(EINVAL)?;
    let flag = |s: &mut u32, bit: u32, on: bool| {
        if on {
            *s |= bit
        } else {
            *s &= !bit
        }
    };
    let bool_of = |v: &str| match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(EINVAL),
    };
    match k {
        "rev" => match v {
            "1" => flag(s, REV1, true),
            "2" => flag(s, REV1, false),
            _ => return Err(EINVAL),
        },
        "crc" => flag(s, NO_CRC, !bool_of(v)?),
        "markers" => flag(s, MARKERS, bool_of(v)?),
        "large_fpdu" => flag(s, NO_LARGE_FPDU, !bool_of(v)?),
        "zerocopy" => {
            let (off, loopback) = match v {
                "off" => (true, false),
                "auto" => (false, false),
                "on" => (false, true),
                _ => return Err(EINVAL),
            };
            flag(s, NO_ZEROCOPY, off);
            flag(s, ZEROCOPY_LOOPBACK, loopback);
        }
        "rtr" => {
            let code = match v {
                "none" => 0,
                "write" => 1,
                "read" => 2,
                "send" => 3,
                _ => return Err(EINVAL),
            };
            *s = (*s & !RTR_MASK) | code << RTR_SHIFT;
        }
        _ => return Err(EINVAL),
    }
    Ok(())
}

/// The debugfs file.
pub(crate) struct MpaFile;

impl FileHandler for MpaFile {
    fn write(&self, data: &[u8]) -> Result {
        let text = core::str::from_utf8(data).map_err(|_| EINVAL)?;
        let mut s = SETTINGS.load(Ordering::Relaxed);
        for word in text.split_whitespace() {
            apply(&mut s, word)?;
        }
        if s & REV1 != 0 && rtr_of(s).is_some() {
            // Peer-to-peer setup needs the revision 2 enhanced frames (RFC 6581).
            return Err(EINVAL);
        }
        SETTINGS.store(s, Ordering::Relaxed);
        Ok(())
    }

    fn read(&self, out: &mut KVec<u8>) -> Result {
        let s = SETTINGS.load(Ordering::Relaxed);
        let mut t = String(out);
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        writeln!(
            t,
            "rev={} crc={} markers={} rtr={} large_fpdu={} zerocopy={}",
            if s & REV1 != 0 { 1 } else { 2 },
            u8::from(s & NO_CRC == 0),
            u8::from(s & MARKERS != 0),
            rtr_name(rtr_of(s)),
            u8::from(s & NO_LARGE_FPDU == 0),
            zerocopy_name(s)
        )
        .map_err(|_| ENOMEM)?;
        writeln!(
            t,
            "established={} crc={} markers={} rev1={} rtr_write={} rtr_read={} rtr_send={} \
             large_fpdu={}",
            n(&ESTABLISHED),
            n(&WITH_CRC),
            n(&WITH_MARKERS),
            n(&WITH_REV1),
            n(&WITH_RTR[0]),
            n(&WITH_RTR[1]),
            n(&WITH_RTR[2]),
            n(&WITH_LARGE_FPDU)
        )
        .map_err(|_| ENOMEM)?;
        writeln!(
            t,
            "tx_payload_by_reference={} tx_payload_copied={} zc_sends={} zc_released={} \
             tx_fpdus={} tx_fpdus_over_mss={} tx_fpdu_max={} rx_payload_direct={} \
             rx_payload_bounced={} rx_waits={}",
            n(&TX_BY_REFERENCE),
            n(&TX_COPIED),
            n(&ZC_SENDS),
            n(&ZC_RELEASED),
            n(&TX_FPDUS),
            n(&TX_FPDUS_OVER_MSS),
            n(&TX_FPDU_MAX),
            n(&RX_DIRECT),
            n(&RX_BOUNCED),
            n(&RX_WAITS)
        )
        .map_err(|_| ENOMEM)
    }
}

/// `fmt::Write` into a `KVec<u8>`.
struct String<'a>(&'a mut KVec<u8>);

impl Write for String<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| core::fmt::Error)
    }
}
