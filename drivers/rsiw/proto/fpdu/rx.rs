// SPDX-License-Identifier: GPL-2.0

//! MPA receive framing: the resumable stream parser.

use super::super::crc::{finish, from_wire, Crc32c, CRC32C_INIT};
use super::super::ddp::{DdpHdr, DDP_VERSION, TAGGED_HDR_LEN, UNTAGGED_HDR_LEN};
use super::super::error::{DdpUntagged, MpaCode, RdmapOperation, TermError};
use super::super::rdmap::{
    ctrl_opcode_bits, ctrl_version, Offending, Opcode, RawDdpHdr, ReadRequest, Terminate,
    QN_TERMINATE, RDMAP_VERSION, READ_REQ_LEN, TERM_CTRL_LEN, TERM_MAX_LEN,
};
use super::super::wire::{be16, put};
use super::{marker_due, pad_len, until_marker, CRC_LEN, LEN_FIELD, MARKER_LEN, ULPDU_HDR_MAX};

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

/// What [`RxStream::fast_header`] decoded beyond the stream state.
#[derive(Clone, Copy)]
struct FastHeader {
    hdr: DdpHdr,
    opcode: Opcode,
    raw_ddp: RawDdpHdr,
}

/// A step [`RxStream::poll`] took without the octet-wise loop.
enum Direct {
    Header(FastHeader),
    /// Octets of payload available.
    Payload(usize),
    /// The trailer checked out; octets consumed.
    Done(usize),
    /// At an FPDU boundary with no input.
    NeedMore,
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

    #[inline]
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

    #[inline]
    fn advance(&mut self, n: usize) {
        self.off = self.off.wrapping_add(u32::try_from(n).unwrap_or(0));
    }

    #[inline]
    fn limit(&self, rest: usize, want: usize) -> usize {
        rest.min(want).min(until_marker(self.cfg.markers, self.off))
    }

    #[inline]
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
    #[inline(always)]
    fn fast_header(&mut self, rest: &[u8]) -> Option<FastHeader> {
        // A fixed-size head lets the compiler drop the length checks.
        if DdpHdr::len_from_ctrl(*rest.get(LEN_FIELD)?) == TAGGED_HDR_LEN {
            self.fast_header_n::<{ LEN_FIELD + TAGGED_HDR_LEN }>(rest)
        } else {
            self.fast_header_n::<{ LEN_FIELD + UNTAGGED_HDR_LEN }>(rest)
        }
    }

    #[inline(always)]
    fn fast_header_n<const N: usize>(&mut self, rest: &[u8]) -> Option<FastHeader> {
        let head: &[u8; N] = rest.first_chunk()?;
        let head = head.as_slice();
        let hl = head.len();
        let ulpdu_len = be16(head, 0)?;
        if hl >= until_marker(self.cfg.markers, self.off)
            || ulpdu_len > self.cfg.max_ulpdu
            || usize::from(ulpdu_len) < hl
        {
            return None;
        }
        let ulpdu = head.get(LEN_FIELD..)?;
        let hdr = DdpHdr::parse(ulpdu).ok()?;
        let opcode = Self::plain_opcode(&hdr)?;
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
        Some(FastHeader {
            hdr,
            opcode,
            raw_ddp,
        })
    }

    /// The opcode of a header that [`Self::validate_base`] accepts with no
    /// RDMAP header after it (no Read Request, no Terminate), given a
    /// ULPDU at least as long as the header; else `None`.
    #[inline]
    fn plain_opcode(hdr: &DdpHdr) -> Option<Opcode> {
        let op = Opcode::from_bits(ctrl_opcode_bits(hdr.rsvd_ulp()))?;
        let queue_ok = match hdr {
            DdpHdr::Tagged(_) => op.is_tagged(),
            // The Send opcodes' queue; it also bounds QN.
            DdpHdr::Untagged(u) => !op.is_tagged() && op.queue() == Some(u.qn),
        };
        let ok = hdr.dv() == DDP_VERSION
            && ctrl_version(hdr.rsvd_ulp()) == RDMAP_VERSION
            && op.extra_hdr_len() == 0
            && queue_ok;
        ok.then_some(op)
    }

    /// The [`SegmentInfo`] of a header [`Self::fast_header`] took.
    #[inline]
    fn fast_info(&self, h: FastHeader) -> SegmentInfo {
        SegmentInfo {
            ulpdu_len: self.ulpdu_len,
            hdr: h.hdr,
            opcode: h.opcode,
            payload_len: self.payload_len,
            read_request: None,
            terminate: None,
            raw_ddp: h.raw_ddp,
        }
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
    #[inline]
    pub fn poll<C: Crc32c + ?Sized>(&mut self, input: &[u8], crc: &C) -> Result<RxOutput, RxError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if !self.cfg.markers {
            // Each output is built here, in place: no copies of SegmentInfo.
            match self.poll_direct(input, crc) {
                Some(Ok(Direct::Header(h))) => {
                    return Ok(RxOutput {
                        consumed: self.have,
                        event: RxEvent::Header(self.fast_info(h)),
                    })
                }
                Some(Ok(Direct::Payload(len))) => {
                    return Ok(RxOutput {
                        consumed: 0,
                        event: RxEvent::Payload {
                            len,
                            offset: self.payload_done,
                        },
                    })
                }
                Some(Ok(Direct::Done(consumed))) => {
                    return Ok(RxOutput {
                        consumed,
                        event: RxEvent::SegmentDone,
                    })
                }
                Some(Ok(Direct::NeedMore)) => {
                    return Ok(RxOutput {
                        consumed: 0,
                        event: RxEvent::NeedMore,
                    })
                }
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        self.poll_stepwise(input, crc)
    }

    /// The steps of a Marker-less stream whose input holds what the step
    /// needs (a whole header, payload, or PAD and CRC), in one go and with
    /// the same outcome as [`Self::poll_stepwise`]; `None` leaves the rest
    /// to it.
    #[inline]
    fn poll_direct<C: Crc32c + ?Sized>(
        &mut self,
        input: &[u8],
        crc: &C,
    ) -> Option<Result<Direct, RxError>> {
        match self.state {
            RxState::Len if !self.fpdu_open && self.have == 0 => {
                if input.is_empty() {
                    return Some(Ok(Direct::NeedMore));
                }
                return self.fast_header(input).map(|h| Ok(Direct::Header(h)));
            }
            RxState::Payload => {
                self.flush_hdr_crc(crc);
                let left = self.payload_len.saturating_sub(self.payload_done);
                if left != 0 {
                    if input.is_empty() {
                        return None;
                    }
                    let len = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    self.grant = u32::try_from(len).unwrap_or(0);
                    return Some(Ok(Direct::Payload(len)));
                }
            }
            RxState::Pad => self.flush_hdr_crc(crc),
            _ => return None,
        }
        // The payload is in: PAD and CRC, if both are whole in `input`.
        if self.crc_have != 0 || self.pending.is_some() || self.marker_bad.is_some() {
            return None;
        }
        let pad = self.pad_left;
        let end = pad.checked_add(CRC_LEN)?;
        let pad_octets = input.get(..pad)?;
        let received = from_wire(*input.get(pad..)?.first_chunk()?);
        if !pad_octets.is_empty() {
            self.crc_over(crc, pad_octets);
        }
        self.pad_left = 0;
        self.advance(end);
        let computed = finish(self.crc);
        if self.cfg.crc && !self.verified && computed != received {
            self.state = RxState::Crc;
            let e = RxError::Crc { computed, received };
            self.failed = Some(e);
            return Some(Err(e));
        }
        self.end_fpdu();
        Some(Ok(Direct::Done(end)))
    }

    /// Back to an FPDU boundary after a good trailer.
    #[inline]
    fn end_fpdu(&mut self) {
        self.state = RxState::Len;
        self.fpdu_open = false;
        self.have = 0;
        self.crc_upto = 0;
        self.need = LEN_FIELD;
        self.crc_have = 0;
        self.verified = false;
    }

    /// [`Self::poll`] octet by octet where need be: Markers, headers split
    /// over inputs, and every error.
    fn poll_stepwise<C: Crc32c + ?Sized>(
        &mut self,
        input: &[u8],
        crc: &C,
    ) -> Result<RxOutput, RxError> {
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
                        if let Some(h) = self.fast_header(rest) {
                            return Ok(RxOutput {
                                consumed: used.saturating_add(self.have),
                                event: RxEvent::Header(self.fast_info(h)),
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
                    self.end_fpdu();
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

    #[inline]
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
