// SPDX-License-Identifier: GPL-2.0

//! MPA transmit framing: the segmenter and each FPDU's pieces.

use super::super::crc::{finish, to_wire, Crc32c, CRC32C_INIT};
use super::super::ddp::{
    DdpHdr, TaggedHdr, UntaggedHdr, DDP_VERSION, TAGGED_HDR_LEN, UNTAGGED_HDR_LEN,
};
use super::super::error::TermError;
use super::super::rdmap::{
    ctrl_octet, Opcode, ReadRequest, Terminate, QN_READ_REQUEST, QN_SEND, QN_TERMINATE,
    RDMAP_VERSION, READ_REQ_LEN, TERM_MAX_LEN,
};
use super::super::wire::put;
use super::{
    pad_len, CRC_LEN, INLINE_MAX, LEN_FIELD, MARKER_INTERVAL, MARKER_LEN, MULPDU_MAX, MULPDU_MIN,
};

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
    plan: Plan,
    /// The next FPDU, laid out in advance when the one before was handed
    /// out (valid if `ahead_ok` and for the stream position at hand).
    ahead: FpduTx,
    ahead_ok: bool,
}

/// What a [`Segmenter`] cuts and how far it got.
#[derive(Clone, Copy, Debug)]
struct Plan {
    op: TxOp,
    total: u32,
    done: u32,
    mulpdu: u16,
    hdr_len: u8,
    finished: bool,
}

impl Segmenter {
    /// A segmenter for `op` with `payload_len` octets of caller payload.
    #[inline]
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
            plan: Plan {
                op,
                total: payload_len,
                done: 0,
                mulpdu,
                hdr_len,
                finished: false,
            },
            ahead: FpduTx::blank(&TxStream::new(false, false), 0, 0, 0),
            ahead_ok: false,
        })
    }

    /// Length of the ULPDU header (DDP plus RDMAP) of every segment.
    pub const fn hdr_len(&self) -> usize {
        self.plan.hdr_len as usize
    }

    /// Whether every FPDU of the message has been produced.
    pub const fn is_done(&self) -> bool {
        self.plan.finished
    }

    /// Payload octets already assigned to FPDUs.
    pub const fn payload_done(&self) -> u32 {
        self.plan.done
    }

    /// The MULPDU in force.
    pub const fn mulpdu(&self) -> u16 {
        self.plan.mulpdu
    }

    /// Changes the MULPDU for the FPDUs not yet produced (DDP lets every
    /// segment of a message have its own length), e.g. after the MSS
    /// changed. Refuses values outside 128..=64768 and keeps the old one.
    pub fn set_mulpdu(&mut self, mulpdu: u16) -> Result<(), TxError> {
        if !(MULPDU_MIN..=MULPDU_MAX).contains(&mulpdu) {
            return Err(TxError::BadMulpdu(mulpdu));
        }
        self.plan.mulpdu = mulpdu;
        self.ahead_ok = false;
        Ok(())
    }

    /// Lays out the next FPDU on `stream`, or `None` when the message is
    /// complete. The stream offset advances by the FPDU's full wire length.
    #[inline]
    pub fn next_fpdu(&mut self, stream: &mut TxStream) -> Option<FpduTx> {
        if self.plan.finished {
            return None;
        }
        let a = &self.ahead;
        let ready = self.ahead_ok
            && a.start == stream.off
            && a.markers == stream.markers
            && a.crc_on == stream.crc
            && a.payload_off == self.plan.done;
        if !ready {
            self.ahead_ok = false;
            self.plan.lay_out(*stream, &mut self.ahead)?;
        }
        // Except for a message's first FPDU, laid out a whole FPDU ago:
        // its octets are in memory by now, so the move does not wait for
        // recent stores to land (as loads spanning several stores must),
        // which would hold this FPDU's CRC back until the last one's is
        // done.
        let f = self.ahead;
        self.plan.done = f.payload_off.checked_add(f.payload_len())?;
        stream.off = f.start.wrapping_add(f.wire_len);
        self.plan.finished = self.plan.done == self.plan.total;
        self.ahead_ok =
            !self.plan.finished && self.plan.lay_out(*stream, &mut self.ahead).is_some();
        Some(f)
    }
}

impl Plan {
    /// Writes the ULPDU header of the next segment to the start of `out`.
    #[inline]
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

    /// Lays out in `f` the FPDU carrying payload from `self.done`, at the
    /// position of `stream`.
    #[inline]
    fn lay_out(&self, mut stream: TxStream, f: &mut FpduTx) -> Option<()> {
        let room = u32::from(self.mulpdu).checked_sub(u32::from(self.hdr_len))?;
        let chunk = self.total.checked_sub(self.done)?.min(room);
        let end = self.done.checked_add(chunk)?;
        let last = end == self.total;
        let ulpdu = u16::try_from(u32::from(self.hdr_len).checked_add(chunk)?).ok()?;
        *f = FpduTx::blank(&stream, ulpdu, self.done, u16::try_from(chunk).ok()?);
        // The linear head (ULPDU_Length and header) goes right after room
        // for a leading Marker; `layout` then inserts any Markers in place.
        put(&mut f.buf, HEAD_AT, &ulpdu.to_be_bytes())?;
        let hlen = self.header(last, f.buf.get_mut(HEAD_AT + LEN_FIELD..HEAD_CAP)?)?;
        if hlen != usize::from(self.hdr_len) {
            return None;
        }
        f.layout(&mut stream, LEN_FIELD + hlen)
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
    // Payload counts fit 16 bits (at most MULPDU); with no `len_pos` (see
    // `len_pos()`) the value stays within 128 octets, cheap to move.
    payload_len: u16,
    emitted: u16,
    fed: u16,
    payload_off: u32,
    start: u32,
    wire: u32,
    wire_len: u32,
    crc: u32,
}

impl FpduTx {
    const fn blank(stream: &TxStream, ulpdu: u16, payload_off: u32, payload_len: u16) -> Self {
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
            wire: stream.off,
            wire_len: 0,
            crc: CRC32C_INIT,
        }
    }

    /// Places the FPDU on the stream: its wire length (Markers included)
    /// and the head's Markers. `lin` is the length of the linear head at
    /// `HEAD_AT`.
    #[inline]
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
        self.layout_markers(stream, lin, content)
    }

    /// [`Self::layout`] with Markers; `content` is the FPDU's length
    /// without them.
    fn layout_markers(&mut self, stream: &mut TxStream, lin: usize, content: u32) -> Option<()> {
        let start = self.start;
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
        self.payload_len as u32
    }

    /// The octets of an [`InlineRange`] this FPDU handed out.
    #[inline]
    pub fn inline(&self, r: InlineRange) -> &[u8] {
        let s = usize::from(r.start);
        self.buf
            .get(s..s.saturating_add(usize::from(r.len)))
            .unwrap_or(&[])
    }

    /// The octets to send for `piece`: the inline octets or the Marker, and
    /// nothing for a payload range (those come from the caller's buffers).
    #[inline]
    pub fn bytes<'a>(&'a self, piece: &'a TxPiece) -> &'a [u8] {
        match piece {
            TxPiece::Inline(r) => self.inline(*r),
            TxPiece::Marker(m) => m,
            TxPiece::Payload { .. } => &[],
        }
    }

    /// Stream offset of the FPDU's ULPDU_Length: after a leading Marker.
    const fn len_pos(&self) -> u32 {
        if self.markers && self.start % MARKER_INTERVAL == 0 {
            self.start.wrapping_add(MARKER_LEN as u32)
        } else {
            self.start
        }
    }

    /// The Marker for stream offset `pos` of this FPDU.
    fn marker_at(&self, pos: u32) -> [u8; MARKER_LEN] {
        let ptr = if pos == self.start {
            0
        } else {
            u16::try_from(pos.wrapping_sub(self.len_pos())).unwrap_or(0)
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
    #[inline]
    fn trailer<C: Crc32c + ?Sized>(&mut self, crc: &C) -> Option<InlineRange> {
        let mut n = if self.markers {
            self.trailer_markers()?
        } else {
            // One fixed-size write covers any PAD (at most 3 octets).
            put(&mut self.buf, HEAD_CAP, &[0u8; 3])?;
            let pad = usize::from(self.pad);
            self.wire = self.wire.wrapping_add(u32::from(self.pad));
            HEAD_CAP.checked_add(pad)?
        };
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

    /// PAD and any Marker of the trailer with Markers on; returns where the
    /// CRC goes.
    fn trailer_markers(&mut self) -> Option<usize> {
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
        Some(n)
    }

    /// The next piece, or `None` when the FPDU is complete. After a
    /// [`TxPiece::Payload`], feed its octets with [`Self::feed_payload`]
    /// before asking for the next piece (when CRC is on).
    #[inline]
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
                    let left = u32::from(self.payload_len.saturating_sub(self.emitted));
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
                        .checked_add(u32::from(self.emitted))
                        .ok_or(TxError::Internal)?;
                    let len16 = u16::try_from(len).map_err(|_| TxError::Internal)?;
                    self.emitted = self.emitted.saturating_add(len16);
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
    #[inline]
    pub fn feed_payload<C: Crc32c + ?Sized>(
        &mut self,
        crc: &C,
        data: &[u8],
    ) -> Result<(), TxError> {
        let n = u16::try_from(data.len()).map_err(|_| TxError::PayloadOverfed)?;
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
