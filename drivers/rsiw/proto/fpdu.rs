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

use super::crc::{finish, from_wire, to_wire, Crc32c, CRC32C_INIT};
use super::ddp::{DdpHdr, TaggedHdr, UntaggedHdr, DDP_VERSION, TAGGED_HDR_LEN, UNTAGGED_HDR_LEN};
use super::error::{DdpUntagged, MpaCode, RdmapOperation, TermError};
use super::rdmap::{
    ctrl_octet, ctrl_opcode_bits, ctrl_version, Offending, Opcode, RawDdpHdr, ReadRequest,
    Terminate, QN_READ_REQUEST, QN_SEND, QN_TERMINATE, RDMAP_VERSION, READ_REQ_LEN, TERM_CTRL_LEN,
    TERM_MAX_LEN,
};
use super::wire::{be16, put};

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

/// Misuse of the transmit API or an invalid message description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxError {
    /// MULPDU outside 128..=64768.
    BadMulpdu(u16),
    /// Tagged Offset plus message length exceeds 2^64.
    ToWrap,
    /// Read Requests and Terminates carry no caller payload.
    PayloadNotAllowed,
    /// The payload of the previous piece was not fed before the next piece
    /// was requested (CRC on).
    PayloadNotFed,
    /// More payload fed than the pieces handed out.
    PayloadOverfed,
    /// Internal inconsistency (a bug); the FPDU must not be sent.
    Internal,
}

/// Per-direction transmit state: framing options and the stream offset
/// that places Markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxStream {
    markers: bool,
    crc: bool,
    off: u32,
}

impl TxStream {
    /// State at the start of Full Operation (offset 0 is a Marker position).
    pub const fn new(markers: bool, crc: bool) -> Self {
        Self {
            markers,
            crc,
            off: 0,
        }
    }

    /// Octets laid out so far (mod 2^32).
    pub const fn offset(&self) -> u32 {
        self.off
    }

    /// Whether Markers are inserted.
    pub const fn markers(&self) -> bool {
        self.markers
    }

    /// Whether CRC is generated.
    pub const fn crc(&self) -> bool {
        self.crc
    }
}

/// One RDMAP message to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxOp {
    /// RDMA Write to the peer's `stag` at `to`.
    Write {
        /// Data Sink STag.
        stag: u32,
        /// Data Sink Tagged Offset of the first octet.
        to: u64,
    },
    /// RDMA Read Response into the requester's `stag` at `to`.
    ReadResponse {
        /// Data Sink STag from the Read Request.
        stag: u32,
        /// Data Sink Tagged Offset from the Read Request.
        to: u64,
    },
    /// Send, optionally with Solicited Event and/or Invalidate.
    Send {
        /// MSN on QN 0.
        msn: u32,
        /// Send with Solicited Event.
        solicited: bool,
        /// STag to invalidate at the peer.
        invalidate: Option<u32>,
    },
    /// RDMA Read Request.
    ReadRequest {
        /// MSN on QN 1.
        msn: u32,
        /// The Read Request header.
        req: ReadRequest,
    },
    /// Terminate.
    Terminate {
        /// MSN on QN 2.
        msn: u32,
        /// The Terminate body.
        term: Terminate,
    },
}

impl TxOp {
    /// The RDMAP opcode this message is sent with.
    pub const fn opcode(&self) -> Opcode {
        match self {
            Self::Write { .. } => Opcode::Write,
            Self::ReadResponse { .. } => Opcode::ReadResponse,
            Self::Send {
                solicited,
                invalidate,
                ..
            } => match (*solicited, invalidate.is_some()) {
                (false, false) => Opcode::Send,
                (false, true) => Opcode::SendInvalidate,
                (true, false) => Opcode::SendSe,
                (true, true) => Opcode::SendSeInvalidate,
            },
            Self::ReadRequest { .. } => Opcode::ReadRequest,
            Self::Terminate { .. } => Opcode::Terminate,
        }
    }
}

/// Cuts one message into FPDUs of at most MULPDU octets of ULPDU.
#[derive(Clone, Copy, Debug)]
pub struct Segmenter {
    op: TxOp,
    total: u32,
    done: u32,
    mulpdu: u16,
    hdr_len: u8,
    finished: bool,
}

impl Segmenter {
    /// A segmenter for `op` with `payload_len` octets of caller payload.
    pub fn new(op: TxOp, payload_len: u32, mulpdu: u16) -> Result<Self, TxError> {
        if !(MULPDU_MIN..=MULPDU_MAX).contains(&mulpdu) {
            return Err(TxError::BadMulpdu(mulpdu));
        }
        match op {
            TxOp::ReadRequest { .. } | TxOp::Terminate { .. } if payload_len != 0 => {
                return Err(TxError::PayloadNotAllowed)
            }
            TxOp::Write { to, .. } | TxOp::ReadResponse { to, .. } => {
                to.checked_add(u64::from(payload_len))
                    .ok_or(TxError::ToWrap)?;
            }
            _ => {}
        }
        let ddp = if op.opcode().is_tagged() {
            TAGGED_HDR_LEN
        } else {
            UNTAGGED_HDR_LEN
        };
        let extra = match &op {
            TxOp::ReadRequest { .. } => READ_REQ_LEN,
            TxOp::Terminate { term, .. } => term.encoded_len(),
            _ => 0,
        };
        // At most ULPDU_HDR_MAX (70), below MULPDU_MIN (128).
        let hdr_len = u8::try_from(ddp.saturating_add(extra)).map_err(|_| TxError::Internal)?;
        Ok(Self {
            op,
            total: payload_len,
            done: 0,
            mulpdu,
            hdr_len,
            finished: false,
        })
    }

    /// Length of the ULPDU header (DDP plus RDMAP) of every segment.
    pub const fn hdr_len(&self) -> usize {
        self.hdr_len as usize
    }

    /// Whether every FPDU of the message has been produced.
    pub const fn is_done(&self) -> bool {
        self.finished
    }

    /// Payload octets already assigned to FPDUs.
    pub const fn payload_done(&self) -> u32 {
        self.done
    }

    /// The MULPDU in force.
    pub const fn mulpdu(&self) -> u16 {
        self.mulpdu
    }

    /// Changes the MULPDU for the FPDUs not yet produced (DDP lets every
    /// segment of a message have its own length), e.g. after the MSS
    /// changed. Refuses values outside 128..=64768 and keeps the old one.
    pub fn set_mulpdu(&mut self, mulpdu: u16) -> Result<(), TxError> {
        if !(MULPDU_MIN..=MULPDU_MAX).contains(&mulpdu) {
            return Err(TxError::BadMulpdu(mulpdu));
        }
        self.mulpdu = mulpdu;
        Ok(())
    }

    /// Writes the ULPDU header of the next segment to the start of `out`.
    fn header(&self, last: bool, out: &mut [u8]) -> Option<usize> {
        let rsvd_ulp = ctrl_octet(RDMAP_VERSION, self.op.opcode());
        let untagged = |qn: u32, msn: u32, inval: u32| {
            DdpHdr::Untagged(UntaggedHdr {
                last,
                dv: DDP_VERSION,
                rsvd_ulp,
                rsvd_ulp2: inval,
                qn,
                msn,
                mo: self.done,
            })
        };
        let ddp = match &self.op {
            TxOp::Write { stag, to } | TxOp::ReadResponse { stag, to } => {
                DdpHdr::Tagged(TaggedHdr {
                    last,
                    dv: DDP_VERSION,
                    rsvd_ulp,
                    stag: *stag,
                    to: to.checked_add(u64::from(self.done))?,
                })
            }
            TxOp::Send {
                msn, invalidate, ..
            } => untagged(QN_SEND, *msn, invalidate.unwrap_or(0)),
            TxOp::ReadRequest { msn, .. } => untagged(QN_READ_REQUEST, *msn, 0),
            TxOp::Terminate { msn, .. } => untagged(QN_TERMINATE, *msn, 0),
        };
        let mut n = ddp.encode(out)?;
        match &self.op {
            TxOp::ReadRequest { req, .. } => {
                put(out, n, &req.encode())?;
                n = n.checked_add(READ_REQ_LEN)?;
            }
            TxOp::Terminate { term, .. } => {
                let mut body = [0u8; TERM_MAX_LEN];
                let len = term.encode(&mut body);
                put(out, n, body.get(..len)?)?;
                n = n.checked_add(len)?;
            }
            _ => {}
        }
        Some(n)
    }

    /// Lays out the next FPDU on `stream`, or `None` when the message is
    /// complete. The stream offset advances by the FPDU's full wire length.
    pub fn next_fpdu(&mut self, stream: &mut TxStream) -> Option<FpduTx> {
        if self.finished {
            return None;
        }
        let room = u32::from(self.mulpdu).checked_sub(u32::from(self.hdr_len))?;
        let chunk = self.total.checked_sub(self.done)?.min(room);
        let end = self.done.checked_add(chunk)?;
        let last = end == self.total;
        let ulpdu = u16::try_from(u32::from(self.hdr_len).checked_add(chunk)?).ok()?;
        let mut f = FpduTx::blank(stream, ulpdu, self.done, chunk);
        // The linear head (ULPDU_Length and header) goes right after room
        // for a leading Marker; `layout` then inserts any Markers in place.
        put(&mut f.buf, HEAD_AT, &ulpdu.to_be_bytes())?;
        let hlen = self.header(last, f.buf.get_mut(HEAD_AT + LEN_FIELD..HEAD_CAP)?)?;
        if hlen != self.hdr_len() {
            return None;
        }
        f.layout(stream, LEN_FIELD + hlen)?;
        self.done = end;
        self.finished = last;
        Some(f)
    }
}

/// Where the leading Marker slot, then ULPDU_Length, sits in the head area.
const HEAD_AT: usize = MARKER_LEN;
/// The head area of [`FpduTx`]: a Marker, ULPDU_Length, the header and one
/// more Marker.
const HEAD_CAP: usize = INLINE_MAX;
/// The trailer area: PAD, one Marker, CRC.
const TRAIL_CAP: usize = 3 + MARKER_LEN + CRC_LEN;
const TX_BUF: usize = HEAD_CAP + TRAIL_CAP;

/// Octets an [`FpduTx`] built and holds (its head or its trailer); read
/// them with [`FpduTx::inline`] or [`FpduTx::bytes`]. A plain value: the
/// octets stay valid until the [`FpduTx`] is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineRange {
    start: u8,
    len: u8,
}

impl InlineRange {
    /// Number of octets (at most [`INLINE_MAX`]).
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the range is empty (never the case for a piece).
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One piece of an FPDU, in wire order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxPiece {
    /// Octets held by the [`FpduTx`]: ULPDU_Length and the ULPDU header
    /// (with any Marker that falls in or right after them), or the trailer
    /// (PAD, a Marker if one falls there, CRC).
    Inline(InlineRange),
    /// A Marker that falls inside the payload.
    Marker([u8; MARKER_LEN]),
    /// `len` octets of the message payload starting at `offset` (relative
    /// to the start of the message's payload). Send them from the caller's
    /// buffers and pass them to [`FpduTx::feed_payload`].
    Payload {
        /// Offset in the message payload.
        offset: u32,
        /// Length.
        len: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TxPhase {
    Head,
    Payload,
    Trailer,
    Done,
}

/// One outbound FPDU, produced piece by piece.
///
/// The head (ULPDU_Length, DDP/RDMAP header and the Markers around them) is
/// built once by [`Segmenter::next_fpdu`]; the trailer when it is due.
#[derive(Clone, Copy, Debug)]
pub struct FpduTx {
    buf: [u8; TX_BUF],
    head: InlineRange,
    ulpdu_len: u16,
    pad: u8,
    markers: bool,
    crc_on: bool,
    phase: TxPhase,
    payload_off: u32,
    payload_len: u32,
    emitted: u32,
    fed: u32,
    start: u32,
    len_pos: u32,
    wire: u32,
    wire_len: u32,
    crc: u32,
}

impl FpduTx {
    const fn blank(stream: &TxStream, ulpdu: u16, payload_off: u32, payload_len: u32) -> Self {
        Self {
            buf: [0u8; TX_BUF],
            head: InlineRange { start: 0, len: 0 },
            ulpdu_len: ulpdu,
            // At most 3.
            pad: pad_len(ulpdu) as u8,
            markers: stream.markers,
            crc_on: stream.crc,
            phase: TxPhase::Head,
            payload_off,
            payload_len,
            emitted: 0,
            fed: 0,
            start: stream.off,
            len_pos: stream.off,
            wire: stream.off,
            wire_len: 0,
            crc: CRC32C_INIT,
        }
    }

    /// Places the FPDU on the stream: its wire length (Markers included)
    /// and the head's Markers. `lin` is the length of the linear head at
    /// `HEAD_AT`.
    fn layout(&mut self, stream: &mut TxStream, lin: usize) -> Option<()> {
        let content = u32::from(self.ulpdu_len)
            .checked_add(u32::from(self.pad))?
            .checked_add((LEN_FIELD + CRC_LEN) as u32)?;
        let start = self.start;
        let lin8 = u8::try_from(lin).ok()?;
        if !self.markers {
            self.head = InlineRange {
                start: HEAD_AT as u8,
                len: lin8,
            };
            self.wire = start.wrapping_add(u32::from(lin8));
            self.wire_len = content;
            stream.off = start.wrapping_add(content);
            return Some(());
        }
        // Markers: a Marker precedes every content octet at a multiple of
        // 512 (one at the very end belongs to the next FPDU).
        let mut w = start;
        let mut left = content;
        while left > 0 {
            if w % MARKER_INTERVAL == 0 {
                w = w.wrapping_add(MARKER_LEN as u32);
            }
            let step = left.min(MARKER_INTERVAL - w % MARKER_INTERVAL);
            left -= step;
            w = w.wrapping_add(step);
        }
        self.wire_len = w.wrapping_sub(start);
        stream.off = w;
        // The head is at most 72 octets, so it holds at most one Marker:
        // a leading one, or one inside or right after it.
        let mut at = HEAD_AT;
        let mut len = lin;
        if start % MARKER_INTERVAL == 0 {
            // FPDUPTR 0: the Marker precedes the FPDU.
            put(&mut self.buf, 0, &[0u8; MARKER_LEN])?;
            at = 0;
            len = len.checked_add(MARKER_LEN)?;
            self.len_pos = start.wrapping_add(MARKER_LEN as u32);
        } else {
            let until = MARKER_INTERVAL - start % MARKER_INTERVAL;
            if until <= u32::try_from(lin).ok()? {
                let pos = HEAD_AT.checked_add(usize::try_from(until).ok()?)?;
                let end = HEAD_AT.checked_add(lin)?;
                if pos > end || end.checked_add(MARKER_LEN)? > self.buf.len() {
                    return None;
                }
                self.buf.copy_within(pos..end, pos.checked_add(MARKER_LEN)?);
                let m = self.marker_at(start.wrapping_add(until));
                put(&mut self.buf, pos, &m)?;
                len = len.checked_add(MARKER_LEN)?;
            }
        }
        self.head = InlineRange {
            start: u8::try_from(at).ok()?,
            len: u8::try_from(len).ok()?,
        };
        self.wire = start.wrapping_add(u32::try_from(len).ok()?);
        Some(())
    }

    /// ULPDU length (DDP header plus payload).
    pub const fn ulpdu_len(&self) -> u16 {
        self.ulpdu_len
    }

    /// Total octets on the wire, Markers, PAD and CRC included.
    pub const fn wire_len(&self) -> u32 {
        self.wire_len
    }

    /// Offset of this FPDU's payload in the message payload.
    pub const fn payload_offset(&self) -> u32 {
        self.payload_off
    }

    /// Payload octets in this FPDU.
    pub const fn payload_len(&self) -> u32 {
        self.payload_len
    }

    /// The octets of an [`InlineRange`] this FPDU handed out.
    pub fn inline(&self, r: InlineRange) -> &[u8] {
        let s = usize::from(r.start);
        self.buf
            .get(s..s.saturating_add(usize::from(r.len)))
            .unwrap_or(&[])
    }

    /// The octets to send for `piece`: the inline octets or the Marker, and
    /// nothing for a payload range (those come from the caller's buffers).
    pub fn bytes<'a>(&'a self, piece: &'a TxPiece) -> &'a [u8] {
        match piece {
            TxPiece::Inline(r) => self.inline(*r),
            TxPiece::Marker(m) => m,
            TxPiece::Payload { .. } => &[],
        }
    }

    /// The Marker for stream offset `pos` of this FPDU.
    fn marker_at(&self, pos: u32) -> [u8; MARKER_LEN] {
        let ptr = if pos == self.start {
            0
        } else {
            u16::try_from(pos.wrapping_sub(self.len_pos)).unwrap_or(0)
        };
        let p = ptr.to_be_bytes();
        [0, 0, p[0], p[1]]
    }

    fn crc_over<C: Crc32c + ?Sized>(&mut self, crc: &C, b: &[u8]) {
        if self.crc_on && !b.is_empty() {
            self.crc = crc.update(self.crc, b);
        }
    }

    /// Builds the trailer (PAD, a Marker if one falls there, CRC) and
    /// returns its range.
    fn trailer<C: Crc32c + ?Sized>(&mut self, crc: &C) -> Option<InlineRange> {
        let mut n = HEAD_CAP;
        let mut pad = usize::from(self.pad);
        loop {
            if self.markers && self.wire % MARKER_INTERVAL == 0 {
                let m = self.marker_at(self.wire);
                put(&mut self.buf, n, &m)?;
                n = n.checked_add(MARKER_LEN)?;
                self.wire = self.wire.wrapping_add(MARKER_LEN as u32);
            }
            if pad == 0 {
                break;
            }
            // PAD never crosses a Marker position: it ends on a multiple
            // of four, so a Marker can only follow it.
            let step = if self.markers {
                pad.min((MARKER_INTERVAL - self.wire % MARKER_INTERVAL) as usize)
            } else {
                pad
            };
            put(&mut self.buf, n, [0u8; 3].get(..step)?)?;
            n = n.checked_add(step)?;
            pad -= step;
            self.wire = self.wire.wrapping_add(u32::try_from(step).ok()?);
        }
        if self.crc_on {
            let covered = self.buf.get(HEAD_CAP..n)?;
            if !covered.is_empty() {
                self.crc = crc.update(self.crc, covered);
            }
        }
        let value = if self.crc_on { finish(self.crc) } else { 0 };
        put(&mut self.buf, n, &to_wire(value))?;
        n = n.checked_add(CRC_LEN)?;
        self.wire = self.wire.wrapping_add(CRC_LEN as u32);
        Some(InlineRange {
            start: HEAD_CAP as u8,
            len: u8::try_from(n.checked_sub(HEAD_CAP)?).ok()?,
        })
    }

    /// The next piece, or `None` when the FPDU is complete. After a
    /// [`TxPiece::Payload`], feed its octets with [`Self::feed_payload`]
    /// before asking for the next piece (when CRC is on).
    pub fn next_piece<C: Crc32c + ?Sized>(&mut self, crc: &C) -> Result<Option<TxPiece>, TxError> {
        loop {
            match self.phase {
                TxPhase::Head => {
                    if self.crc_on {
                        let s = usize::from(self.head.start);
                        let e = s.saturating_add(usize::from(self.head.len));
                        let head = self.buf.get(s..e).ok_or(TxError::Internal)?;
                        self.crc = crc.update(self.crc, head);
                    }
                    self.phase = if self.payload_len > 0 {
                        TxPhase::Payload
                    } else {
                        TxPhase::Trailer
                    };
                    return Ok(Some(TxPiece::Inline(self.head)));
                }
                TxPhase::Payload => {
                    if self.crc_on && self.fed != self.emitted {
                        return Err(TxError::PayloadNotFed);
                    }
                    let left = self.payload_len.saturating_sub(self.emitted);
                    if left == 0 {
                        self.phase = TxPhase::Trailer;
                        continue;
                    }
                    let mut len = left;
                    if self.markers {
                        if self.wire % MARKER_INTERVAL == 0 {
                            let m = self.marker_at(self.wire);
                            self.wire = self.wire.wrapping_add(MARKER_LEN as u32);
                            self.crc_over(crc, &m);
                            return Ok(Some(TxPiece::Marker(m)));
                        }
                        len = len.min(MARKER_INTERVAL - self.wire % MARKER_INTERVAL);
                    }
                    let offset = self
                        .payload_off
                        .checked_add(self.emitted)
                        .ok_or(TxError::Internal)?;
                    self.emitted = self.emitted.saturating_add(len);
                    self.wire = self.wire.wrapping_add(len);
                    return Ok(Some(TxPiece::Payload { offset, len }));
                }
                TxPhase::Trailer => {
                    if self.crc_on && self.fed != self.emitted {
                        return Err(TxError::PayloadNotFed);
                    }
                    let r = self.trailer(crc).ok_or(TxError::Internal)?;
                    self.phase = TxPhase::Done;
                    if self.wire.wrapping_sub(self.start) != self.wire_len {
                        return Err(TxError::Internal);
                    }
                    return Ok(Some(TxPiece::Inline(r)));
                }
                TxPhase::Done => return Ok(None),
            }
        }
    }

    /// Feeds payload octets, in order, for the CRC. `data` must be (part
    /// of) the payload range handed out by the last piece.
    pub fn feed_payload<C: Crc32c + ?Sized>(
        &mut self,
        crc: &C,
        data: &[u8],
    ) -> Result<(), TxError> {
        let n = u32::try_from(data.len()).map_err(|_| TxError::PayloadOverfed)?;
        let fed = self.fed.checked_add(n).ok_or(TxError::PayloadOverfed)?;
        if fed > self.emitted {
            return Err(TxError::PayloadOverfed);
        }
        self.crc_over(crc, data);
        self.fed = fed;
        Ok(())
    }

    /// Writes the whole FPDU into `out` using `payload` as the message
    /// payload (for tests, short messages and callers with contiguous
    /// buffers). Returns the number of octets written.
    pub fn write_to<C: Crc32c + ?Sized>(
        &mut self,
        crc: &C,
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<usize, TxError> {
        let mut n = 0usize;
        while let Some(p) = self.next_piece(crc)? {
            let src = match p {
                TxPiece::Payload { offset, len } => {
                    let s = usize::try_from(offset).map_err(|_| TxError::Internal)?;
                    let e = s
                        .checked_add(usize::try_from(len).map_err(|_| TxError::Internal)?)
                        .ok_or(TxError::Internal)?;
                    let src = payload.get(s..e).ok_or(TxError::Internal)?;
                    self.feed_payload(crc, src)?;
                    src
                }
                _ => self.bytes(&p),
            };
            put(out, n, src).ok_or(TxError::Internal)?;
            n = n.checked_add(src.len()).ok_or(TxError::Internal)?;
        }
        Ok(n)
    }
}

/// Longest FPDU [`setup_terminate`] builds: a Terminate without headers,
/// framed with CRC and up to two Markers.
pub const SETUP_TERM_FPDU_MAX: usize = TX_BUF;

/// The Terminate an endpoint sends as its first and only FPDU when the
/// enhanced connection setup fails (RFC 6581 §8, e.g. Terminate 2/0/0x06
/// for insufficient IRD): RDMAP Terminate on untagged queue 2, MSN 1,
/// framed on `stream` as the MPA exchange negotiated. Returns the octets
/// written to `out`.
pub fn setup_terminate<C: Crc32c + ?Sized>(
    stream: &mut TxStream,
    err: TermError,
    crc: &C,
    out: &mut [u8],
) -> Result<usize, TxError> {
    let op = TxOp::Terminate {
        msn: 1,
        term: Terminate::for_error(err, None),
    };
    let mut seg = Segmenter::new(op, 0, MULPDU_MIN)?;
    let mut f = seg.next_fpdu(stream).ok_or(TxError::Internal)?;
    f.write_to(crc, &[], out)
}

/// Receive-side framing options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxConfig {
    /// The peer inserts Markers.
    pub markers: bool,
    /// CRCs are checked.
    pub crc: bool,
    /// Largest ULPDU_Length accepted (RFC 5044 §3 lets a receiver refuse
    /// more than its MULPDU; the default accepts any 16-bit length).
    pub max_ulpdu: u16,
}

impl RxConfig {
    /// Options with the given Markers and CRC settings and no length limit.
    pub const fn new(markers: bool, crc: bool) -> Self {
        Self {
            markers,
            crc,
            max_ulpdu: u16::MAX,
        }
    }
}

/// A received segment's header and what follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// ULPDU_Length of the FPDU.
    pub ulpdu_len: u16,
    /// The DDP header.
    pub hdr: DdpHdr,
    /// The RDMAP opcode.
    pub opcode: Opcode,
    /// Payload octets after the headers.
    pub payload_len: u32,
    /// The Read Request header, for an RDMA Read Request.
    pub read_request: Option<ReadRequest>,
    /// The Terminate body, for a Terminate.
    pub terminate: Option<Terminate>,
    /// The DDP header as received, for Terminate header copies.
    pub raw_ddp: RawDdpHdr,
}

impl SegmentInfo {
    /// What a Terminate about this segment may copy.
    pub fn offending(&self) -> Offending {
        Offending {
            segment_len: self.ulpdu_len,
            ddp: self.raw_ddp,
            read_request: self.read_request.map(|r| r.encode()),
        }
    }
}

/// What [`RxStream::poll`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxEvent {
    /// All input consumed; feed more.
    NeedMore,
    /// A segment's headers are complete and passed the stateless checks
    /// (versions, opcode, QN, header lengths). Validate it against the
    /// stream state ([`super::ddp::DdpRx`], STag lookup) before placing.
    Header(SegmentInfo),
    /// The `len` octets of input following the consumed ones are payload
    /// at `offset` in the segment's payload. Place or discard them with
    /// [`RxStream::copy_payload`] or [`RxStream::consume_payload`]; until
    /// then `poll` reports the same range again.
    Payload {
        /// Octets of payload available in the input.
        len: usize,
        /// Offset in the segment's payload.
        offset: u32,
    },
    /// The FPDU is complete and its CRC (if on) and Markers checked out.
    /// The segment may now be delivered.
    SegmentDone,
}

/// The result of one poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxOutput {
    /// Input octets consumed (framing and headers; never payload).
    pub consumed: usize,
    /// What was found.
    pub event: RxEvent,
}

/// A receive error. After any error other than [`RxError::PayloadMisuse`]
/// the stream delivers nothing more (RFC 5044 §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxError {
    /// CRC mismatch (Terminate 2/0/0x02).
    Crc {
        /// CRC computed over the FPDU.
        computed: u32,
        /// CRC in the FPDU.
        received: u32,
    },
    /// A Marker's FPDUPTR disagrees with ULPDU_Length framing while the CRC
    /// is valid or off (Terminate 2/0/0x03).
    MarkerMismatch {
        /// FPDUPTR the framing implies.
        expected: u16,
        /// FPDUPTR received (low two bits masked).
        found: u16,
    },
    /// Header or length violation, with its Terminate class. It is raised
    /// once the whole FPDU is in and only if its CRC (when on) is valid, so a
    /// header damaged in transit is reported as a CRC error.
    Protocol(TermError),
    /// The caller passed more payload than the last [`RxEvent::Payload`]
    /// granted, or a destination too short. Nothing was changed.
    PayloadMisuse,
}

impl RxError {
    /// The Terminate class to report.
    pub const fn term(&self) -> TermError {
        match self {
            Self::Crc { .. } => TermError::Mpa(MpaCode::Crc),
            Self::MarkerMismatch { .. } => TermError::Mpa(MpaCode::MarkerMismatch),
            Self::Protocol(t) => *t,
            Self::PayloadMisuse => TermError::RdmapCatastrophic,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxState {
    Len,
    HdrCtrl,
    HdrBase,
    HdrExtra,
    Payload,
    Skip,
    Pad,
    Crc,
}

/// Per-direction receive state: an incremental FPDU parser.
#[derive(Clone, Copy, Debug)]
pub struct RxStream {
    cfg: RxConfig,
    off: u32,
    state: RxState,
    fpdu_open: bool,
    len_pos: u32,
    buf: [u8; LEN_FIELD + ULPDU_HDR_MAX],
    have: usize,
    need: usize,
    ulpdu_len: u16,
    payload_len: u32,
    payload_done: u32,
    grant: u32,
    pad_left: usize,
    crc_buf: [u8; CRC_LEN],
    crc_have: usize,
    marker: [u8; MARKER_LEN],
    marker_have: usize,
    marker_expected: u16,
    marker_bad: Option<(u16, u16)>,
    pending: Option<RxError>,
    skip_left: u32,
    crc_upto: usize,
    crc: u32,
    /// The open FPDU's CRC was checked ahead ([`RxStream::accept_lookahead`]).
    verified: bool,
    failed: Option<RxError>,
}

impl RxStream {
    /// State at the start of Full Operation in the receive direction.
    pub const fn new(cfg: RxConfig) -> Self {
        Self {
            cfg,
            off: 0,
            state: RxState::Len,
            fpdu_open: false,
            len_pos: 0,
            buf: [0u8; LEN_FIELD + ULPDU_HDR_MAX],
            have: 0,
            need: LEN_FIELD,
            ulpdu_len: 0,
            payload_len: 0,
            payload_done: 0,
            grant: 0,
            pad_left: 0,
            crc_buf: [0u8; CRC_LEN],
            crc_have: 0,
            marker: [0u8; MARKER_LEN],
            marker_have: 0,
            marker_expected: 0,
            marker_bad: None,
            pending: None,
            skip_left: 0,
            crc_upto: 0,
            crc: CRC32C_INIT,
            verified: false,
            failed: None,
        }
    }

    /// The configuration.
    pub const fn config(&self) -> &RxConfig {
        &self.cfg
    }

    /// Octets consumed since the start of Full Operation (mod 2^32).
    pub const fn offset(&self) -> u32 {
        self.off
    }

    /// Whether the parser sits between FPDUs (no partial FPDU buffered).
    pub const fn at_boundary(&self) -> bool {
        !self.fpdu_open && self.marker_have == 0
    }

    /// The error that stopped the stream, if any.
    pub const fn error(&self) -> Option<RxError> {
        self.failed
    }

    /// What a Terminate may copy about the segment being parsed, once its
    /// DDP header is in (also after a header error).
    pub fn offending(&self) -> Option<Offending> {
        let ulpdu = self.buf.get(LEN_FIELD..self.have)?;
        let ddp = RawDdpHdr::from_ulpdu(ulpdu)?;
        let hl = ddp.as_bytes().len();
        let read_request = match ulpdu.get(1).map(|c| ctrl_opcode_bits(*c)) {
            Some(v) if v == Opcode::ReadRequest as u8 && !ddp.header()?.is_tagged() => {
                ulpdu.get(hl..hl.checked_add(READ_REQ_LEN)?).map(|b| {
                    let mut a = [0u8; READ_REQ_LEN];
                    a.copy_from_slice(b);
                    a
                })
            }
            _ => None,
        };
        Some(Offending {
            segment_len: self.ulpdu_len,
            ddp,
            read_request,
        })
    }

    fn fail(&mut self, e: RxError) -> Result<RxOutput, RxError> {
        self.failed = Some(e);
        Err(e)
    }

    /// A header error: the FPDU's remaining octets are consumed (for the
    /// CRC) without being reported, and the error is raised at the trailer
    /// unless the CRC or a Marker reveals transmission damage instead.
    fn defer(&mut self, e: RxError) {
        let got = self.have.saturating_sub(LEN_FIELD);
        let left = usize::from(self.ulpdu_len).saturating_sub(got);
        self.pending = Some(e);
        self.skip_left = u32::try_from(left).unwrap_or(0);
        self.pad_left = pad_len(self.ulpdu_len);
        self.state = RxState::Skip;
    }

    fn crc_over<C: Crc32c + ?Sized>(&mut self, crc: &C, b: &[u8]) {
        if self.cfg.crc && !self.verified {
            self.crc = crc.update(self.crc, b);
        }
    }

    fn advance(&mut self, n: usize) {
        self.off = self.off.wrapping_add(u32::try_from(n).unwrap_or(0));
    }

    fn limit(&self, rest: usize, want: usize) -> usize {
        rest.min(want).min(until_marker(self.cfg.markers, self.off))
    }

    fn open_fpdu(&mut self, lead_marker: bool) {
        self.fpdu_open = true;
        self.crc = CRC32C_INIT;
        self.verified = false;
        self.len_pos = if lead_marker {
            self.off.wrapping_add(MARKER_LEN as u32)
        } else {
            self.off
        };
    }

    /// Runs the CRC over header octets collected but not yet covered. Header
    /// octets are summed in one call when the header is complete, or
    /// earlier when a Marker or payload octet must follow them in the CRC.
    fn flush_hdr_crc<C: Crc32c + ?Sized>(&mut self, crc: &C) {
        if self.have > self.crc_upto {
            if self.cfg.crc {
                let b = self.buf.get(self.crc_upto..self.have).unwrap_or(&[]);
                self.crc = crc.update(self.crc, b);
            }
            self.crc_upto = self.have;
        }
    }

    /// Collects header octets up to `self.need`; returns the octets used.
    fn collect(&mut self, rest: &[u8]) -> usize {
        let n = self.limit(rest.len(), self.need.saturating_sub(self.have));
        let src = rest.get(..n).unwrap_or(&[]);
        if put(&mut self.buf, self.have, src).is_none() {
            return 0;
        }
        self.have = self.have.saturating_add(n);
        self.advance(n);
        n
    }

    /// Checks the base DDP header and RDMAP control; sets `need` for the
    /// RDMAP header that follows.
    fn check_base(&mut self) -> Result<(), RxError> {
        let ulpdu = self.buf.get(LEN_FIELD..self.have).unwrap_or(&[]);
        let (hdr, _, extra) = Self::validate_base(self.ulpdu_len, ulpdu)?;
        self.need = LEN_FIELD + hdr.encoded_len() + extra;
        Ok(())
    }

    /// The stateless checks of a ULPDU's base DDP header and RDMAP control
    /// (`ulpdu` starts with at least the base header). Returns the header,
    /// the opcode and the length of the RDMAP header that follows.
    fn validate_base(ulpdu_len: u16, ulpdu: &[u8]) -> Result<(DdpHdr, Opcode, usize), RxError> {
        let err = |t| Err(RxError::Protocol(t));
        let Ok(hdr) = DdpHdr::parse(ulpdu) else {
            return err(TermError::DdpCatastrophic);
        };
        if hdr.dv() != DDP_VERSION {
            return err(hdr.version_error());
        }
        if ctrl_version(hdr.rsvd_ulp()) != RDMAP_VERSION {
            return err(TermError::RdmapOperation(RdmapOperation::InvalidVersion));
        }
        let Some(op) = Opcode::from_bits(ctrl_opcode_bits(hdr.rsvd_ulp())) else {
            return err(TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode));
        };
        if op.is_tagged() != hdr.is_tagged() {
            return err(TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode));
        }
        if let DdpHdr::Untagged(u) = hdr {
            if u.qn > QN_TERMINATE {
                return err(TermError::DdpUntagged(DdpUntagged::InvalidQn));
            }
            if op.queue() != Some(u.qn) {
                return err(TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode));
            }
            if matches!(op, Opcode::ReadRequest | Opcode::Terminate) {
                // Single-segment messages with a fixed-size queue buffer.
                if u.mo != 0 {
                    return err(TermError::DdpUntagged(DdpUntagged::InvalidMo));
                }
                if !u.last {
                    return err(TermError::DdpUntagged(DdpUntagged::TooLong));
                }
            }
        }
        let base = hdr.encoded_len();
        let ulpdu_len = usize::from(ulpdu_len);
        let extra = match op {
            Opcode::ReadRequest => {
                if ulpdu_len > base + READ_REQ_LEN {
                    return err(TermError::DdpUntagged(DdpUntagged::TooLong));
                }
                READ_REQ_LEN
            }
            Opcode::Terminate => {
                if ulpdu_len > base + TERM_MAX_LEN {
                    return err(TermError::DdpUntagged(DdpUntagged::TooLong));
                }
                ulpdu_len.saturating_sub(base)
            }
            _ => 0,
        };
        let min_extra = if op == Opcode::Terminate {
            TERM_CTRL_LEN
        } else {
            extra
        };
        if ulpdu_len < base + min_extra {
            return err(TermError::RdmapOperation(
                RdmapOperation::CatastrophicStream,
            ));
        }
        Ok((hdr, op, extra))
    }

    /// The common case in one step: at an FPDU boundary, with a whole
    /// data-carrying segment header (no RDMAP header, no Marker) in
    /// `rest` that passes every check. Anything else returns `None` with
    /// the state untouched, and the octet-wise path takes over (and
    /// reports any error exactly as it would have).
    fn fast_header(&mut self, rest: &[u8]) -> Option<SegmentInfo> {
        let ulpdu_len = be16(rest, 0)?;
        let hl = LEN_FIELD + DdpHdr::len_from_ctrl(*rest.get(LEN_FIELD)?);
        let head = rest.get(..hl)?;
        if hl >= until_marker(self.cfg.markers, self.off)
            || ulpdu_len > self.cfg.max_ulpdu
            || usize::from(ulpdu_len) < hl
        {
            return None;
        }
        let ulpdu = head.get(LEN_FIELD..)?;
        let (hdr, opcode, extra) = Self::validate_base(ulpdu_len, ulpdu).ok()?;
        if extra != 0 || opcode.extra_hdr_len() != 0 {
            return None;
        }
        let raw_ddp = RawDdpHdr::from_ulpdu(ulpdu)?;
        let payload_len = u32::from(ulpdu_len).checked_sub(u32::try_from(ulpdu.len()).ok()?)?;
        put(&mut self.buf, 0, head)?;
        self.open_fpdu(false);
        self.have = hl;
        self.need = hl;
        self.crc_upto = 0;
        self.ulpdu_len = ulpdu_len;
        self.pad_left = pad_len(ulpdu_len);
        self.payload_len = payload_len;
        self.payload_done = 0;
        self.grant = 0;
        self.state = if payload_len > 0 {
            RxState::Payload
        } else {
            RxState::Pad
        };
        self.advance(hl);
        Some(SegmentInfo {
            ulpdu_len,
            hdr,
            opcode,
            payload_len,
            read_request: None,
            terminate: None,
            raw_ddp,
        })
    }

    fn finish_header(&mut self) -> Result<SegmentInfo, RxError> {
        let bad = RxError::Protocol(TermError::RdmapOperation(
            RdmapOperation::CatastrophicStream,
        ));
        let ulpdu = self.buf.get(LEN_FIELD..self.have).ok_or(bad)?;
        let hdr = DdpHdr::parse(ulpdu).map_err(|_| bad)?;
        let raw_ddp = RawDdpHdr::from_ulpdu(ulpdu).ok_or(bad)?;
        let opcode = Opcode::from_bits(ctrl_opcode_bits(hdr.rsvd_ulp())).ok_or(bad)?;
        let rest = ulpdu.get(hdr.encoded_len()..).ok_or(bad)?;
        let read_request = match opcode {
            Opcode::ReadRequest => Some(ReadRequest::parse(rest).ok_or(bad)?),
            _ => None,
        };
        let terminate = match opcode {
            Opcode::Terminate => Some(Terminate::parse_received(rest).map_err(|_| bad)?),
            _ => None,
        };
        let hdr_total = u32::try_from(self.have.saturating_sub(LEN_FIELD)).map_err(|_| bad)?;
        let payload_len = u32::from(self.ulpdu_len)
            .checked_sub(hdr_total)
            .ok_or(bad)?;
        Ok(SegmentInfo {
            ulpdu_len: self.ulpdu_len,
            hdr,
            opcode,
            payload_len,
            read_request,
            terminate,
            raw_ddp,
        })
    }

    /// Parses as much of `input` as possible and reports the next event.
    /// Call again with `input[consumed..]` (after handling payload) until
    /// it reports [`RxEvent::NeedMore`].
    pub fn poll<C: Crc32c + ?Sized>(&mut self, input: &[u8], crc: &C) -> Result<RxOutput, RxError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let mut used = 0usize;
        loop {
            let rest = input.get(used..).unwrap_or(&[]);
            let need_more = Ok(RxOutput {
                consumed: used,
                event: RxEvent::NeedMore,
            });
            if self.marker_have > 0 || marker_due(self.cfg.markers, self.off) {
                if rest.is_empty() {
                    return need_more;
                }
                self.flush_hdr_crc(crc);
                if self.marker_have == 0 {
                    if self.state == RxState::Len && self.have == 0 {
                        self.open_fpdu(true);
                        self.marker_expected = 0;
                    } else {
                        self.marker_expected =
                            u16::try_from(self.off.wrapping_sub(self.len_pos)).unwrap_or(u16::MAX);
                    }
                }
                let n = rest.len().min(MARKER_LEN - self.marker_have);
                let src = rest.get(..n).unwrap_or(&[]);
                if put(&mut self.marker, self.marker_have, src).is_none() {
                    return self.fail(RxError::Protocol(TermError::DdpCatastrophic));
                }
                self.crc_over(crc, src);
                self.marker_have += n;
                self.advance(n);
                used += n;
                if self.marker_have == MARKER_LEN {
                    self.marker_have = 0;
                    let found = be16(&self.marker, 2).unwrap_or(0) & !3;
                    if found != self.marker_expected && self.marker_bad.is_none() {
                        self.marker_bad = Some((self.marker_expected, found));
                    }
                }
                continue;
            }
            match self.state {
                RxState::Len => {
                    if rest.is_empty() {
                        return need_more;
                    }
                    if !self.fpdu_open && self.have == 0 {
                        if let Some(seg) = self.fast_header(rest) {
                            return Ok(RxOutput {
                                consumed: used.saturating_add(self.have),
                                event: RxEvent::Header(seg),
                            });
                        }
                    }
                    if !self.fpdu_open {
                        self.open_fpdu(false);
                    }
                    used += self.collect(rest);
                    if self.have < LEN_FIELD {
                        continue;
                    }
                    self.ulpdu_len = be16(&self.buf, 0).unwrap_or(0);
                    self.pad_left = pad_len(self.ulpdu_len);
                    self.need = LEN_FIELD + 1;
                    self.state = RxState::HdrCtrl;
                    if self.ulpdu_len > self.cfg.max_ulpdu
                        || usize::from(self.ulpdu_len) < TAGGED_HDR_LEN
                    {
                        self.defer(RxError::Protocol(TermError::DdpCatastrophic));
                    }
                }
                RxState::HdrCtrl | RxState::HdrBase | RxState::HdrExtra => {
                    if self.have < self.need {
                        if rest.is_empty() {
                            return need_more;
                        }
                        used += self.collect(rest);
                        continue;
                    }
                    match self.state {
                        RxState::HdrCtrl => {
                            let ctrl = self.buf.get(LEN_FIELD).copied().unwrap_or(0);
                            let base = DdpHdr::len_from_ctrl(ctrl);
                            self.need = LEN_FIELD + base;
                            self.state = RxState::HdrBase;
                            if usize::from(self.ulpdu_len) < base {
                                self.defer(RxError::Protocol(TermError::DdpCatastrophic));
                            }
                        }
                        RxState::HdrBase => {
                            self.state = RxState::HdrExtra;
                            if let Err(e) = self.check_base() {
                                self.defer(e);
                            }
                        }
                        _ => {
                            let seg = match self.finish_header() {
                                Ok(s) => s,
                                Err(e) => {
                                    self.defer(e);
                                    continue;
                                }
                            };
                            self.payload_len = seg.payload_len;
                            self.payload_done = 0;
                            self.grant = 0;
                            self.state = if seg.payload_len > 0 {
                                RxState::Payload
                            } else {
                                RxState::Pad
                            };
                            return Ok(RxOutput {
                                consumed: used,
                                event: RxEvent::Header(seg),
                            });
                        }
                    }
                }
                RxState::Payload => {
                    self.flush_hdr_crc(crc);
                    let left = self.payload_len.saturating_sub(self.payload_done);
                    if left == 0 {
                        self.state = RxState::Pad;
                        continue;
                    }
                    if rest.is_empty() {
                        return need_more;
                    }
                    let len = self.limit(rest.len(), usize::try_from(left).unwrap_or(usize::MAX));
                    self.grant = u32::try_from(len).unwrap_or(0);
                    return Ok(RxOutput {
                        consumed: used,
                        event: RxEvent::Payload {
                            len,
                            offset: self.payload_done,
                        },
                    });
                }
                RxState::Skip => {
                    self.flush_hdr_crc(crc);
                    if self.skip_left == 0 {
                        self.state = RxState::Pad;
                        continue;
                    }
                    if rest.is_empty() {
                        return need_more;
                    }
                    let left = usize::try_from(self.skip_left).unwrap_or(usize::MAX);
                    let n = self.limit(rest.len(), left);
                    self.crc_over(crc, rest.get(..n).unwrap_or(&[]));
                    self.skip_left = self.skip_left.saturating_sub(u32::try_from(n).unwrap_or(0));
                    self.advance(n);
                    used += n;
                }
                RxState::Pad => {
                    self.flush_hdr_crc(crc);
                    if self.pad_left == 0 {
                        self.state = RxState::Crc;
                        continue;
                    }
                    if rest.is_empty() {
                        return need_more;
                    }
                    let n = self.limit(rest.len(), self.pad_left);
                    self.crc_over(crc, rest.get(..n).unwrap_or(&[]));
                    self.pad_left -= n;
                    self.advance(n);
                    used += n;
                }
                RxState::Crc => {
                    self.flush_hdr_crc(crc);
                    if rest.is_empty() {
                        return need_more;
                    }
                    let received = if let (0, Some(b)) = (self.crc_have, rest.first_chunk()) {
                        // The whole CRC is here: read it in place.
                        self.advance(CRC_LEN);
                        used += CRC_LEN;
                        from_wire(*b)
                    } else {
                        let n = rest.len().min(CRC_LEN - self.crc_have);
                        if put(
                            &mut self.crc_buf,
                            self.crc_have,
                            rest.get(..n).unwrap_or(&[]),
                        )
                        .is_none()
                        {
                            return self.fail(RxError::Protocol(TermError::DdpCatastrophic));
                        }
                        self.crc_have += n;
                        self.advance(n);
                        used += n;
                        if self.crc_have < CRC_LEN {
                            continue;
                        }
                        from_wire(self.crc_buf)
                    };
                    let computed = finish(self.crc);
                    if self.cfg.crc && !self.verified && computed != received {
                        return self.fail(RxError::Crc { computed, received });
                    }
                    if let Some((expected, found)) = self.marker_bad {
                        return self.fail(RxError::MarkerMismatch { expected, found });
                    }
                    if let Some(e) = self.pending {
                        return self.fail(e);
                    }
                    self.state = RxState::Len;
                    self.fpdu_open = false;
                    self.have = 0;
                    self.crc_upto = 0;
                    self.need = LEN_FIELD;
                    self.crc_have = 0;
                    self.verified = false;
                    return Ok(RxOutput {
                        consumed: used,
                        event: RxEvent::SegmentDone,
                    });
                }
            }
        }
    }

    /// Octets from here to the end of the open FPDU, CRC included, when its CRC can be
    /// checked before any payload is placed: at the start of a segment's payload, CRC on, no
    /// Markers (which would interleave the octets), not yet checked. The receiver then reads
    /// that many octets ahead, without consuming them, and calls
    /// [`RxStream::accept_lookahead`].
    pub fn lookahead_len(&self) -> Option<usize> {
        if !self.cfg.crc
            || self.cfg.markers
            || self.verified
            || self.state != RxState::Payload
            || self.payload_done != 0
            || self.crc_upto != self.have
        {
            return None;
        }
        let body = usize::try_from(self.payload_len).ok()?;
        body.checked_add(self.pad_left)?.checked_add(CRC_LEN)
    }

    /// The CRC register to continue over the octets read ahead (all but the last
    /// [`CRC_LEN`] of [`RxStream::lookahead_len`]).
    pub const fn lookahead_crc(&self) -> u32 {
        self.crc
    }

    /// Takes the result of a lookahead: `reg` is [`RxStream::lookahead_crc`] continued over the
    /// payload and pad, `trailer` the CRC field that follows them. On a match the FPDU counts
    /// as checked, and its payload is copied without computing the CRC again. On a mismatch
    /// nothing changes: the receiver should discard the payload, and the stream reports
    /// [`RxError::Crc`] at the trailer as usual. Returns whether the CRC matched.
    pub fn accept_lookahead(&mut self, reg: u32, trailer: [u8; CRC_LEN]) -> bool {
        if self.lookahead_len().is_none() || finish(reg) != from_wire(trailer) {
            return false;
        }
        self.verified = true;
        true
    }

    fn take_payload(&mut self, n: usize) -> Result<(), RxError> {
        let n32 = u32::try_from(n).map_err(|_| RxError::PayloadMisuse)?;
        if self.state != RxState::Payload || n32 > self.grant {
            return Err(RxError::PayloadMisuse);
        }
        self.grant -= n32;
        self.payload_done = self.payload_done.saturating_add(n32);
        self.advance(n);
        Ok(())
    }

    /// Copies payload octets `src` (from the start of the range the last
    /// [`RxEvent::Payload`] reported) into `dst` and updates the CRC in the
    /// same pass. `src` may be a prefix of that range.
    pub fn copy_payload<C: Crc32c + ?Sized>(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        crc: &C,
    ) -> Result<(), RxError> {
        if dst.len() < src.len() {
            return Err(RxError::PayloadMisuse);
        }
        self.take_payload(src.len())?;
        if self.cfg.crc && !self.verified {
            self.crc = crc.copy_update(self.crc, src, dst);
        } else if let Some(d) = dst.get_mut(..src.len()) {
            d.copy_from_slice(src);
        }
        Ok(())
    }

    /// Accounts for payload octets `src` the caller placed itself or
    /// discards (CRC only).
    pub fn consume_payload<C: Crc32c + ?Sized>(
        &mut self,
        src: &[u8],
        crc: &C,
    ) -> Result<(), RxError> {
        self.take_payload(src.len())?;
        self.crc_over(crc, src);
        Ok(())
    }
}
