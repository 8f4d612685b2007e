// SPDX-License-Identifier: GPL-2.0

//! The ULP's wire protocol (control messages carried by SENDs) and data patterns.
//!
//! A control message is [`MSG_LEN`] bytes: the magic `RUL1`, a type byte, three pad bytes and
//! five little-endian `u64` arguments. Client and server run in lock step: the client posts one
//! control receive right before each request, the server posts one control receive for each
//! request before answering it. Data receives are posted before that control receive, so that
//! data SENDs land in them (receive queues are FIFO).

/// Length of a control message.
pub(crate) const MSG_LEN: usize = 48;
/// Bytes of guard before and after every data region.
pub(crate) const GUARD: usize = 64;
/// Private data a client connects with.
pub(crate) const HELLO: &[u8; 8] = b"RSIWULP1";
/// Private data of a client that wants its server connection's PD allocated with
/// `IB_PD_UNSAFE_GLOBAL_RKEY` (see [`Kind::GlobalKey`]); otherwise like [`HELLO`].
pub(crate) const HELLO_GLOBAL_RKEY: &[u8; 8] = b"RSIWULPG";
/// Private data of a connect request the server must reject; the rest is echoed back.
pub(crate) const REJECT_ME: &[u8; 8] = b"REJECTME";
/// Private data of the server's rejection, followed by the echoed bytes.
pub(crate) const REJECTED: &[u8; 8] = b"REJECTED";

const MAGIC: [u8; 4] = *b"RUL1";

/// Control message types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Client: register a target region. `a` length, `b` seed to fill it with (0: zeros),
    /// `c` access (1 remote read, 2 remote write), `d` flags (1 sealed: the region must keep
    /// its content; the server checks it when the target is replaced or the connection ends).
    Target = 1,
    /// Server: the target region. `a` iova, `b` rkey, `c` length.
    TargetIs = 2,
    /// Client: verify the target region. `a` length, `b` seed.
    Verify = 3,
    /// Client: post data receives. `a` length, `b` count, `c` seed (0: do not verify),
    /// `d` SGEs per receive, `e` rkey the data must invalidate (0: none).
    ExpectSend = 4,
    /// Server: data receives are posted.
    Ready = 5,
    /// Server: the result. `a` 0 ok, else an error code; `b`, `c` details.
    Status = 6,
    /// Client: send data to me. `a` length, `b` seed, `c` flags (1 solicited, 2 inline, 4
    /// disconnect once the data and the reply completed), `d` SGEs, `e` rkey to invalidate
    /// with `SEND_WITH_INV` (0: plain SEND).
    SendMe = 7,
    /// Client: invalidate the target MR, rotate its key and register it again.
    Rotate = 8,
    /// Client: the connection PD's global rkey. Answered with [`Kind::TargetIs`]: `a` the
    /// target region's DMA address (0 without a target), `b` the PD's `unsafe_global_rkey`
    /// (0 unless the client connected with [`HELLO_GLOBAL_RKEY`]), `c` the target's length.
    GlobalKey = 9,
    /// Client: nothing to do; answered with [`Kind::Status`] OK at once (a round trip).
    Ping = 10,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Target,
            2 => Kind::TargetIs,
            3 => Kind::Verify,
            4 => Kind::ExpectSend,
            5 => Kind::Ready,
            6 => Kind::Status,
            7 => Kind::SendMe,
            8 => Kind::Rotate,
            9 => Kind::GlobalKey,
            10 => Kind::Ping,
            _ => return None,
        })
    }
}

/// A control message.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Msg {
    pub(crate) kind: Kind,
    pub(crate) args: [u64; 5],
}

/// [`Kind::SendMe`] flag: the server disconnects once its data and its reply completed.
pub(crate) const SEND_ME_THEN_CLOSE: u64 = 4;

/// Status codes in [`Kind::Status`].
pub(crate) mod status {
    /// Success.
    pub(crate) const OK: u64 = 0;
    /// Data mismatch: `b` offset, `c` byte found.
    pub(crate) const MISMATCH: u64 = 1;
    /// Guard bytes overwritten: `b` offset, `c` byte found.
    pub(crate) const GUARD: u64 = 2;
    /// Wrong receive length: `b` expected, `c` received.
    pub(crate) const LENGTH: u64 = 3;
    /// Wrong or missing invalidation: `b` expected rkey, `c` reported (or `u64::MAX`).
    pub(crate) const INVALIDATE: u64 = 4;
    /// A work request failed: `b` errno or WC status, `c` phase.
    pub(crate) const FAILED: u64 = 5;
    /// A request made no sense: `b` type.
    pub(crate) const BAD_REQUEST: u64 = 6;
}

impl Msg {
    /// A message of `kind` with `args`.
    pub(crate) fn new(kind: Kind, args: [u64; 5]) -> Msg {
        Msg { kind, args }
    }

    /// Encodes into `MSG_LEN` bytes.
    pub(crate) fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = self.kind as u8;
        for (i, a) in self.args.iter().enumerate() {
            let at = 8 + 8 * i;
            if let Some(dst) = b.get_mut(at..at + 8) {
                dst.copy_from_slice(&a.to_le_bytes());
            }
        }
        b
    }

    /// Decodes a received message; `None` if it is not one of ours.
    pub(crate) fn decode(b: &[u8]) -> Option<Msg> {
        if b.get(..4)? != MAGIC {
            return None;
        }
        let kind = Kind::from_u8(*b.get(4)?)?;
        let mut args = [0u64; 5];
        for (i, a) in args.iter_mut().enumerate() {
            let at = 8 + 8 * i;
            *a = u64::from_le_bytes(*b.get(at..at + 8)?.first_chunk::<8>()?);
        }
        Some(Msg { kind, args })
    }
}

/// The data byte at offset `off` of a region filled with `seed`: depends on both, so that
/// misplaced, stale or shifted data shows.
pub(crate) fn pattern(seed: u32, off: usize) -> u8 {
    // CAST: Offsets are below 2^32 here (regions are at most a few MiB); wrapping is fine anyway.
    let x = (off as u32).wrapping_mul(0x9e37_79b1) ^ seed.wrapping_mul(0x85eb_ca77);
    let x = x ^ (x >> 15) ^ (x >> 7);
    // CAST: Keep the low byte.
    (x ^ (off as u32 >> 8)) as u8
}

/// The guard byte at buffer offset `off`.
pub(crate) fn guard(off: usize) -> u8 {
    // CAST: Keep the low byte.
    0xa5 ^ (off as u8).rotate_left(3)
}
