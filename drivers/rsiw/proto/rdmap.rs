// SPDX-License-Identifier: GPL-2.0

//! RDMAP (RFC 5040): the control octet, opcodes, the RDMA Read Request
//! header and the Terminate message.
//!
//! RFC 5040 is not among the project's seed texts; the layouts here follow
//! RFC 5040 §4 as cross-checked against Wireshark's RFC 5040 dissector (see
//! the pcap test) and the seeds checklist (RDMAP-1..22, TRK-32/33).

use super::ddp::{DdpHdr, UNTAGGED_HDR_LEN};
use super::error::{RdmapProtection, TermError};
use super::wire::{be16, be32, be64, put};

/// RDMAP version defined by RFC 5040 (RV).
pub const RDMAP_VERSION: u8 = 1;
/// Length of the RDMA Read Request header that follows the DDP header.
pub const READ_REQ_LEN: usize = 28;
/// Length of the Terminate Control field.
pub const TERM_CTRL_LEN: usize = 4;
/// Longest Terminate message body: control, DDP Segment Length, an
/// untagged DDP header and a Read Request header.
pub const TERM_MAX_LEN: usize = TERM_CTRL_LEN + 2 + UNTAGGED_HDR_LEN + READ_REQ_LEN;
/// Untagged queue of Send messages.
pub const QN_SEND: u32 = 0;
/// Untagged queue of RDMA Read Request messages.
pub const QN_READ_REQUEST: u32 = 1;
/// Untagged queue of Terminate messages.
pub const QN_TERMINATE: u32 = 2;

const RV_SHIFT: u32 = 6;
const OPCODE_MASK: u8 = 0x0f;

/// RDMAP message opcodes (RFC 5040 §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// RDMA Write (tagged).
    Write = 0x0,
    /// RDMA Read Request (untagged, QN 1).
    ReadRequest = 0x1,
    /// RDMA Read Response (tagged).
    ReadResponse = 0x2,
    /// Send (untagged, QN 0).
    Send = 0x3,
    /// Send with Invalidate (untagged, QN 0).
    SendInvalidate = 0x4,
    /// Send with Solicited Event (untagged, QN 0).
    SendSe = 0x5,
    /// Send with Solicited Event and Invalidate (untagged, QN 0).
    SendSeInvalidate = 0x6,
    /// Terminate (untagged, QN 2).
    Terminate = 0x7,
}

impl Opcode {
    /// The opcode for a 4-bit value, `None` for the reserved values.
    pub const fn from_bits(v: u8) -> Option<Self> {
        Some(match v {
            0x0 => Self::Write,
            0x1 => Self::ReadRequest,
            0x2 => Self::ReadResponse,
            0x3 => Self::Send,
            0x4 => Self::SendInvalidate,
            0x5 => Self::SendSe,
            0x6 => Self::SendSeInvalidate,
            0x7 => Self::Terminate,
            _ => return None,
        })
    }

    /// Whether the message uses the tagged buffer model.
    pub const fn is_tagged(self) -> bool {
        matches!(self, Self::Write | Self::ReadResponse)
    }

    /// The untagged queue of the message, `None` for tagged messages.
    pub const fn queue(self) -> Option<u32> {
        match self {
            Self::Write | Self::ReadResponse => None,
            Self::ReadRequest => Some(QN_READ_REQUEST),
            Self::Terminate => Some(QN_TERMINATE),
            Self::Send | Self::SendInvalidate | Self::SendSe | Self::SendSeInvalidate => {
                Some(QN_SEND)
            }
        }
    }

    /// Whether the message carries an Invalidate STag.
    pub const fn invalidates(self) -> bool {
        matches!(self, Self::SendInvalidate | Self::SendSeInvalidate)
    }

    /// Whether the message asks for a solicited event.
    pub const fn solicited(self) -> bool {
        matches!(self, Self::SendSe | Self::SendSeInvalidate)
    }

    /// Length of the RDMAP header that follows the DDP header: 28 for a
    /// Read Request, 4 (the Terminate Control) for a Terminate, else 0.
    pub const fn extra_hdr_len(self) -> usize {
        match self {
            Self::ReadRequest => READ_REQ_LEN,
            Self::Terminate => TERM_CTRL_LEN,
            _ => 0,
        }
    }
}

/// The RDMAP Control octet (DDP RsvdULP\[0:7\]) for `op` at version `rv`:
/// RV in the top two bits, reserved bits zero, opcode in the low nibble.
pub const fn ctrl_octet(rv: u8, op: Opcode) -> u8 {
    ((rv & 0x3) << RV_SHIFT) | (op as u8)
}

/// The RV field of an RDMAP Control octet.
pub const fn ctrl_version(ctrl: u8) -> u8 {
    ctrl >> RV_SHIFT
}

/// The raw opcode nibble of an RDMAP Control octet.
pub const fn ctrl_opcode_bits(ctrl: u8) -> u8 {
    ctrl & OPCODE_MASK
}

/// The RDMA Read Request header (RFC 5040 §4.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadRequest {
    /// Data Sink STag (where the response is written).
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size.
    pub size: u32,
    /// Data Source STag (what is read).
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadRequest {
    /// Decodes the 28-octet header at the start of `b`.
    pub fn parse(b: &[u8]) -> Option<Self> {
        Some(Self {
            sink_stag: be32(b, 0)?,
            sink_to: be64(b, 4)?,
            size: be32(b, 12)?,
            src_stag: be32(b, 16)?,
            src_to: be64(b, 20)?,
        })
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; READ_REQ_LEN] {
        let mut b = [0u8; READ_REQ_LEN];
        // The offsets are constants inside the array, so `put` cannot fail.
        let _ = put(&mut b, 0, &self.sink_stag.to_be_bytes());
        let _ = put(&mut b, 4, &self.sink_to.to_be_bytes());
        let _ = put(&mut b, 12, &self.size.to_be_bytes());
        let _ = put(&mut b, 16, &self.src_stag.to_be_bytes());
        let _ = put(&mut b, 20, &self.src_to.to_be_bytes());
        b
    }

    /// Refuses a Read Request whose Read Response cannot be sent: its last segment would
    /// carry a Tagged Offset plus length past 2^64, which the Data Sink must refuse (RFC 5041
    /// §7.1, check 5). The check is the one every tagged access in rsiw gets.
    ///
    /// The error is RDMAP's remote protection "TO wrap" (0/1/0x04, RFC 5040 §4.8): the Read
    /// Request is an RDMAP message, untagged to DDP, whose DDP "TO wrap" (1/1/0x03) is for
    /// the tagged segments a Data Sink receives. The C siw does not check (its Read Response
    /// Tagged Offsets wrap, for the requester to refuse).
    pub fn check_sink(&self) -> Result<(), TermError> {
        match self.sink_to.checked_add(u64::from(self.size)) {
            Some(_) => Ok(()),
            None => Err(TermError::RdmapProtection(RdmapProtection::ToWrap)),
        }
    }
}

/// The Terminate Control field (RFC 5040 §4.8): Layer (high nibble of the
/// first octet), EType (low nibble), Error Code, then the header control
/// bits M, D, R in the top three bits of the third octet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermControl {
    /// Layer nibble.
    pub layer: u8,
    /// EType nibble.
    pub etype: u8,
    /// Error Code.
    pub code: u8,
    /// M: the DDP Segment Length field is valid.
    pub m: bool,
    /// D: a terminated DDP header is included.
    pub d: bool,
    /// R: a terminated RDMA header is included.
    pub r: bool,
}

const TERM_M: u8 = 0x80;
const TERM_D: u8 = 0x40;
const TERM_R: u8 = 0x20;

impl TermControl {
    /// Control field for an error class, with no headers attached.
    pub const fn for_error(e: TermError) -> Self {
        Self {
            layer: e.layer() as u8,
            etype: e.etype(),
            code: e.code(),
            m: false,
            d: false,
            r: false,
        }
    }

    /// The error class this field names, if the RFCs define it.
    pub const fn error(&self) -> Option<TermError> {
        TermError::from_wire(self.layer, self.etype, self.code)
    }

    /// Encodes the four octets (reserved bits zero).
    pub const fn encode(&self) -> [u8; TERM_CTRL_LEN] {
        [
            ((self.layer & 0xf) << 4) | (self.etype & 0xf),
            self.code,
            (if self.m { TERM_M } else { 0 })
                | (if self.d { TERM_D } else { 0 })
                | (if self.r { TERM_R } else { 0 }),
            0,
        ]
    }

    /// Decodes the four octets as RFC 5040 lays them out. Reserved bits are
    /// ignored.
    pub const fn parse(b: [u8; TERM_CTRL_LEN]) -> Self {
        Self {
            layer: b[0] >> 4,
            etype: b[0] & 0xf,
            code: b[1],
            m: b[2] & TERM_M != 0,
            d: b[2] & TERM_D != 0,
            r: b[2] & TERM_R != 0,
        }
    }

    /// Decodes the four octets as Linux C siw emits them on little-endian
    /// hosts: its bitfield puts Layer in the low nibble, EType in the high
    /// nibble and M/D/R in bits 0/1/2 of the third octet. Use this only to
    /// report a Terminate from such a peer (see [`Self::looks_nibble_swapped`]).
    pub const fn parse_siw_swapped(b: [u8; TERM_CTRL_LEN]) -> Self {
        Self {
            layer: b[0] & 0xf,
            etype: b[0] >> 4,
            code: b[1],
            m: b[2] & 0x01 != 0,
            d: b[2] & 0x02 != 0,
            r: b[2] & 0x04 != 0,
        }
    }

    /// Heuristic: the octets do not name a defined error as RFC 5040 lays
    /// them out but do when read the C siw way.
    pub const fn looks_nibble_swapped(b: [u8; TERM_CTRL_LEN]) -> bool {
        Self::parse(b).error().is_none() && Self::parse_siw_swapped(b).error().is_some()
    }
}

/// A DDP header copied verbatim into a Terminate (14 or 18 octets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawDdpHdr {
    bytes: [u8; UNTAGGED_HDR_LEN],
    len: u8,
}

impl RawDdpHdr {
    /// Copies the DDP header at the start of `ulpdu` (length from its T bit).
    #[inline]
    pub fn from_ulpdu(ulpdu: &[u8]) -> Option<Self> {
        let len = DdpHdr::len_from_ctrl(*ulpdu.first()?);
        let mut bytes = [0u8; UNTAGGED_HDR_LEN];
        put(&mut bytes, 0, ulpdu.get(..len)?)?;
        Some(Self {
            bytes,
            len: u8::try_from(len).ok()?,
        })
    }

    /// The copied octets.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// The decoded header.
    pub fn header(&self) -> Option<DdpHdr> {
        DdpHdr::parse(self.as_bytes()).ok()
    }
}

/// The segment a Terminate reports on: what the header-copy rules may copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offending {
    /// ULPDU length of the offending DDP segment.
    pub segment_len: u16,
    /// Its DDP header, verbatim.
    pub ddp: RawDdpHdr,
    /// Its Read Request header, if the segment was an RDMA Read Request and
    /// the header was received in full.
    pub read_request: Option<[u8; READ_REQ_LEN]>,
}

/// A Terminate message body (everything after the untagged DDP header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terminate {
    /// Terminate Control.
    pub ctrl: TermControl,
    /// DDP Segment Length of the offending segment (sent when D is set;
    /// meaningful when M is set).
    pub segment_len: u16,
    /// Terminated DDP header (present iff D is set).
    pub ddp: Option<RawDdpHdr>,
    /// Terminated RDMA header (present iff R is set).
    pub rdma: Option<[u8; READ_REQ_LEN]>,
}

/// Why a Terminate body could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TermParseError {
    /// Shorter than the control field plus the headers its bits announce.
    Short,
    /// Longer than the headers its bits announce.
    TrailingBytes,
}

impl Terminate {
    /// Builds the Terminate for `err` following the header-copy rules:
    ///
    /// - LLP errors, catastrophic errors, and version or opcode errors (where
    ///   the segment layout is not known) carry no headers;
    /// - every other DDP or RDMAP error on an identified inbound segment
    ///   carries its DDP Segment Length (M=1) and DDP header (D=1);
    /// - if that segment is an RDMA Read Request whose header was received,
    ///   its 28-octet Read Request header is included too (R=1), which is the
    ///   only RDMAP message with an RDMA header beyond DDP's.
    pub fn for_error(err: TermError, offending: Option<&Offending>) -> Self {
        let mut t = Self {
            ctrl: TermControl::for_error(err),
            segment_len: 0,
            ddp: None,
            rdma: None,
        };
        if let Some(o) = offending.filter(|_| err.header_usable()) {
            t.ctrl.m = true;
            t.ctrl.d = true;
            t.segment_len = o.segment_len;
            t.ddp = Some(o.ddp);
            if let Some(rr) = o.read_request {
                t.ctrl.r = true;
                t.rdma = Some(rr);
            }
        }
        t
    }

    /// The encoded body length.
    pub fn encoded_len(&self) -> usize {
        let d = self
            .ddp
            .map_or(0, |h| 2usize.saturating_add(h.as_bytes().len()));
        let r = if self.rdma.is_some() { READ_REQ_LEN } else { 0 };
        TERM_CTRL_LEN.saturating_add(d).saturating_add(r)
    }

    /// Encodes the body into `out` and returns its length. The D and R bits
    /// are derived from which headers are present.
    pub fn encode(&self, out: &mut [u8; TERM_MAX_LEN]) -> usize {
        let mut ctrl = self.ctrl;
        ctrl.d = self.ddp.is_some();
        ctrl.r = self.rdma.is_some();
        let mut n = 0usize;
        // All writes stay within TERM_MAX_LEN by construction.
        let _ = put(out, n, &ctrl.encode());
        n += TERM_CTRL_LEN;
        if let Some(h) = &self.ddp {
            let _ = put(out, n, &self.segment_len.to_be_bytes());
            n += 2;
            let _ = put(out, n, h.as_bytes());
            n += h.as_bytes().len();
        }
        if let Some(r) = &self.rdma {
            let _ = put(out, n, r);
            n += READ_REQ_LEN;
        }
        n
    }

    /// Decodes a Terminate body received from a peer, which ends the stream whatever it holds,
    /// so it is never refused: the Terminate Control is read as RFC 5040 lays it out, or the
    /// C siw way when its bits only make sense so ([`TermControl::looks_nibble_swapped`], or
    /// M/D/R in the low, reserved, bits of the third octet); header copies whose length
    /// disagrees with the bits (C siw sets R on a Send's protection error but copies only the
    /// DDP header) are dropped. Fails only when the control field itself is short.
    pub fn parse_received(b: &[u8]) -> Result<Self, TermParseError> {
        let c: [u8; TERM_CTRL_LEN] = b
            .get(..TERM_CTRL_LEN)
            .and_then(|c| c.try_into().ok())
            .ok_or(TermParseError::Short)?;
        let flags = TERM_M | TERM_D | TERM_R;
        let siw_flags = c[2] & flags == 0 && c[2] & 0x07 != 0;
        if !(siw_flags || TermControl::looks_nibble_swapped(c)) {
            if let Ok(t) = Self::parse(b) {
                return Ok(t);
            }
        }
        let ctrl = if siw_flags || TermControl::looks_nibble_swapped(c) {
            TermControl::parse_siw_swapped(c)
        } else {
            TermControl::parse(c)
        };
        // The same body with the control in RFC layout, to decode its header copies.
        let mut rfc = [0u8; TERM_MAX_LEN];
        let body = b.get(TERM_CTRL_LEN..).unwrap_or(&[]);
        let n = TERM_CTRL_LEN.saturating_add(body.len());
        if put(&mut rfc, 0, &ctrl.encode()).is_some()
            && put(&mut rfc, TERM_CTRL_LEN, body).is_some()
        {
            if let Some(t) = rfc.get(..n).and_then(|v| Self::parse(v).ok()) {
                return Ok(t);
            }
        }
        Ok(Self {
            ctrl,
            segment_len: 0,
            ddp: None,
            rdma: None,
        })
    }

    /// Decodes a Terminate body. Header presence follows the D and R bits;
    /// the length of the terminated DDP header follows its own T bit.
    pub fn parse(b: &[u8]) -> Result<Self, TermParseError> {
        let c = b.get(..TERM_CTRL_LEN).ok_or(TermParseError::Short)?;
        let ctrl = TermControl::parse([
            *c.first().ok_or(TermParseError::Short)?,
            *c.get(1).ok_or(TermParseError::Short)?,
            *c.get(2).ok_or(TermParseError::Short)?,
            *c.get(3).ok_or(TermParseError::Short)?,
        ]);
        let mut off = TERM_CTRL_LEN;
        let mut t = Self {
            ctrl,
            segment_len: 0,
            ddp: None,
            rdma: None,
        };
        if ctrl.d {
            t.segment_len = be16(b, off).ok_or(TermParseError::Short)?;
            off += 2;
            let h = RawDdpHdr::from_ulpdu(b.get(off..).ok_or(TermParseError::Short)?)
                .ok_or(TermParseError::Short)?;
            off += h.as_bytes().len();
            t.ddp = Some(h);
        }
        if ctrl.r {
            let mut r = [0u8; READ_REQ_LEN];
            r.copy_from_slice(
                b.get(off..off + READ_REQ_LEN)
                    .ok_or(TermParseError::Short)?,
            );
            off += READ_REQ_LEN;
            t.rdma = Some(r);
        }
        if b.len() > off {
            return Err(TermParseError::TrailingBytes);
        }
        Ok(t)
    }
}
