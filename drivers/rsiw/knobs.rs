// SPDX-License-Identifier: GPL-2.0

//! Administrator settings for new connections, as module parameters (`modprobe rsiw crc=N`,
//! `/sys/module/rsiw/parameters/`), and diagnostics in `/sys/kernel/debug/rsiw/mpa`: the same
//! settings, and counters of what connections negotiated and how the data path moved payload
//! (what an administrator needs of those is in the port counters, [`crate::stats`]).
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
    marker::PhantomData,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};
use kernel::{debugfs::FileHandler, module_param::ParamValue, prelude::*};

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

/// Times the transmit path waited for memory that no socket event would report freed.
static TX_MEMORY_WAITS: AtomicU64 = AtomicU64::new(0);

/// Counts a transmit wait for memory.
pub(crate) fn count_tx_memory_wait() {
    TX_MEMORY_WAITS.fetch_add(1, Ordering::Relaxed);
}

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
    apply_one(s, k, v)
}

/// Sets `k` to `v` in `s`.
fn apply_one(s: &mut u32, k: &str, v: &str) -> Result {
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

/// Changes the settings word with `change`, unless the result is inconsistent. Atomic against
/// other changes (module parameters and the debugfs file may be written at once).
fn update(change: impl Fn(&mut u32) -> Result) -> Result {
    let mut err = None;
    let r = SETTINGS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        let mut s = old;
        if let Err(e) = change(&mut s) {
            err = Some(e);
            return None;
        }
        if s & REV1 != 0 && rtr_of(s).is_some() {
            // Peer-to-peer setup needs the revision 2 enhanced frames (RFC 6581).
            err = Some(EINVAL);
            return None;
        }
        Some(s)
    });
    match (r, err) {
        (Ok(_), _) => Ok(()),
        (Err(_), Some(e)) => Err(e),
        (Err(_), None) => Err(EINVAL),
    }
}

/// How a setting's module parameter is typed (for `modinfo`), and whether it takes the
/// spellings of the kernel's boolean parameters.
pub(crate) trait Kind: Sync + 'static {
    const TYPE: &'static str;
    const BOOLEAN: bool;
}

/// A boolean setting.
pub(crate) struct Bool;
/// A setting that is a number.
pub(crate) struct Uint;
/// A setting that is one of some words.
pub(crate) struct Word;

impl Kind for Bool {
    const TYPE: &'static str = "bool";
    const BOOLEAN: bool = true;
}

impl Kind for Uint {
    const TYPE: &'static str = "uint";
    const BOOLEAN: bool = false;
}

impl Kind for Word {
    const TYPE: &'static str = "charp";
    const BOOLEAN: bool = false;
}

/// A setting as a module parameter: `/sys/module/rsiw/parameters/KEY`, `modprobe rsiw KEY=V`.
pub(crate) struct Knob<K: Kind> {
    key: &'static str,
    /// What the value may be, for the log line that refuses another.
    allowed: &'static str,
    _kind: PhantomData<K>,
}

impl<K: Kind> Knob<K> {
    const fn new(key: &'static str, allowed: &'static str) -> Self {
        Self {
            key,
            allowed,
            _kind: PhantomData,
        }
    }

    /// The knob's value in `s`, as `apply_one` takes it (booleans as `Y`/`N`).
    fn value(&self, s: u32) -> &'static str {
        let on = |b: bool| if b { "Y" } else { "N" };
        match self.key {
            "rev" => {
                if s & REV1 != 0 {
                    "1"
                } else {
                    "2"
                }
            }
            "crc" => on(s & NO_CRC == 0),
            "markers" => on(s & MARKERS != 0),
            "large_fpdu" => on(s & NO_LARGE_FPDU == 0),
            "rtr" => rtr_name(rtr_of(s)),
            "zerocopy" => zerocopy_name(s),
            _ => "?",
        }
    }
}

impl<K: Kind> ParamValue for Knob<K> {
    const TYPE: &'static str = K::TYPE;
    const NOARG: bool = K::BOOLEAN;

    /// A boolean also takes `Y`/`N`, `y`/`n`, and nothing for `Y`, the way the kernel's own
    /// boolean parameters do.
    fn set(&self, text: &str) -> Result {
        let v = match (K::BOOLEAN, text) {
            (true, "" | "Y" | "y" | "1") => "1",
            (true, "N" | "n" | "0") => "0",
            _ => text,
        };
        update(|s| apply_one(s, self.key, v)).inspect_err(|_| {
            pr_warn!(
                "parameter {}: '{}' refused: it takes {} (and rtr other than none needs rev 2)\n",
                self.key,
                text.escape_debug(),
                self.allowed
            );
        })
    }

    fn show(&self, f: &mut dyn Write) -> core::fmt::Result {
        f.write_str(self.value(SETTINGS.load(Ordering::Relaxed)))
    }
}

static REV: Knob<Uint> = Knob::new("rev", "1 or 2");
static CRC: Knob<Bool> = Knob::new("crc", "Y or N");
static MARKERS_KNOB: Knob<Bool> = Knob::new("markers", "Y or N");
static RTR: Knob<Word> = Knob::new("rtr", "none, write, read or send");
static LARGE_FPDU: Knob<Bool> = Knob::new("large_fpdu", "Y or N");
static ZEROCOPY: Knob<Word> = Knob::new("zerocopy", "off, auto or on");

kernel::module_param!(
    REV: Knob<Uint>,
    "rev",
    0o644,
    "MPA revision new connections ask for and accept: 1 or 2 (default 2)"
);
kernel::module_param!(
    CRC: Knob<Bool>,
    "crc",
    0o644,
    "Ask for the MPA CRC on new connections (default Y; a peer that asks gets it)"
);
kernel::module_param!(
    MARKERS_KNOB: Knob<Bool>,
    "markers",
    0o644,
    "Ask for MPA Markers on received FPDUs of new connections (default N)"
);
kernel::module_param!(
    RTR: Knob<Word>,
    "rtr",
    0o644,
    "Peer-to-peer ready-to-receive message of new connections: none, write, read or send \
     (default none; needs rev 2)"
);
kernel::module_param!(
    LARGE_FPDU: Knob<Bool>,
    "large_fpdu",
    0o644,
    "Propose and agree to FPDUs larger than one MSS (default Y)"
);
kernel::module_param!(
    ZEROCOPY: Knob<Word>,
    "zerocopy",
    0o644,
    "Send payload by reference: off, auto (not to peers on this host) or on (default auto)"
);

/// A connection timeout in milliseconds, as a module parameter: `connect_timeout_ms` and
/// `mpa_timeout_ms`, read when a connection enters the phase they bound.
pub(crate) struct TimeoutKnob {
    key: &'static str,
    ms: AtomicU32,
}

impl TimeoutKnob {
    /// The range a timeout may take: long enough for a slow peer under load, short enough that
    /// a dead one does not hold an endpoint for long.
    const MIN_MS: u32 = 100;
    const MAX_MS: u32 = 600_000;

    const fn new(key: &'static str, ms: u32) -> Self {
        Self {
            key,
            ms: AtomicU32::new(ms),
        }
    }

    /// The timeout now.
    pub(crate) fn ms(&self) -> u32 {
        self.ms.load(Ordering::Relaxed)
    }
}

impl ParamValue for TimeoutKnob {
    const TYPE: &'static str = "uint";

    fn set(&self, text: &str) -> Result {
        match text.parse::<u32>() {
            Ok(ms) if (Self::MIN_MS..=Self::MAX_MS).contains(&ms) => {
                self.ms.store(ms, Ordering::Relaxed);
                Ok(())
            }
            _ => {
                pr_warn!(
                    "parameter {}: '{}' refused: it takes milliseconds from {} to {}\n",
                    self.key,
                    text.escape_debug(),
                    Self::MIN_MS,
                    Self::MAX_MS
                );
                Err(EINVAL)
            }
        }
    }

    fn show(&self, f: &mut dyn Write) -> core::fmt::Result {
        write!(f, "{}", self.ms())
    }
}

/// How long a TCP connect may take.
pub(crate) static CONNECT_TIMEOUT: TimeoutKnob = TimeoutKnob::new("connect_timeout_ms", 10_000);
/// How long to wait for the peer's MPA Request or Reply once TCP is connected.
pub(crate) static MPA_TIMEOUT: TimeoutKnob = TimeoutKnob::new("mpa_timeout_ms", 10_000);

kernel::module_param!(
    CONNECT_TIMEOUT: TimeoutKnob,
    "connect_timeout_ms",
    0o644,
    "How long an active TCP connect may take, in ms: 100 to 600000 (default 10000)"
);
kernel::module_param!(
    MPA_TIMEOUT: TimeoutKnob,
    "mpa_timeout_ms",
    0o644,
    "How long to wait for the peer's MPA Request or Reply, in ms: 100 to 600000 (default 10000)"
);

/// The debugfs file.
pub(crate) struct MpaFile;

impl FileHandler for MpaFile {
    fn write(&self, data: &[u8]) -> Result {
        let text = core::str::from_utf8(data).map_err(|_| EINVAL)?;
        update(|s| {
            for word in text.split_whitespace() {
                apply(s, word)?;
            }
            Ok(())
        })
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
             rx_payload_bounced={} rx_waits={} tx_memory_waits={}",
            n(&TX_BY_REFERENCE),
            n(&TX_COPIED),
            n(&ZC_SENDS),
            n(&ZC_RELEASED),
            n(&TX_FPDUS),
            n(&TX_FPDUS_OVER_MSS),
            n(&TX_FPDU_MAX),
            n(&RX_DIRECT),
            n(&RX_BOUNCED),
            n(&RX_WAITS),
            n(&TX_MEMORY_WAITS)
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
