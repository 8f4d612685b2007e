// SPDX-License-Identifier: GPL-2.0

//! MPA startup frames: the Request and Reply of RFC 5044 §7.1.1 and the
//! enhanced connection data of RFC 6581 §9.
//!
//! Layout: 16-octet Key | flags octet (M, C, R, S, G, 3 Res bits) | Rev |
//! PD_Length (BE16) | Private Data. With S=1 the Private Data starts with
//! four octets of enhanced data: A, B and a 14-bit IRD, then C, D and a
//! 14-bit ORD, both big endian.
//!
//! G (our name) is not in the RFCs: it is the first of RFC 5044's four Res bits (RFC
//! 6581 took the one before it for S), which the Linux C siw uses as
//! `MPA_RR_FLAG_GSO_EXP` (`cpu_to_be16(0x0800)` over the flags and Rev
//! octets, so 0x08 in the flags octet): "the sender of this frame accepts
//! FPDUs larger than one MSS". Peers that follow the RFCs send it as 0 and
//! ignore it.

use super::wire::{be16, put};

/// Key of an MPA Request frame ("MPA ID Req Frame").
pub const KEY_REQ: [u8; 16] = *b"MPA ID Req Frame";
/// Key of an MPA Reply frame ("MPA ID Rep Frame").
pub const KEY_REP: [u8; 16] = *b"MPA ID Rep Frame";
/// Length of the Request/Reply header.
pub const HDR_LEN: usize = 20;
/// Largest Private Data, including any enhanced data (RFC 5044 §7.1.1).
pub const MAX_PRIVATE_DATA: usize = 512;
/// Length of the RFC 6581 enhanced data.
pub const ENHANCED_LEN: usize = 4;
/// Largest frame: header plus Private Data.
pub const MAX_FRAME_LEN: usize = HDR_LEN + MAX_PRIVATE_DATA;
/// Largest IRD/ORD value; also the "do not negotiate" value (RFC 6581 §9.1).
pub const IRD_ORD_MAX: u16 = 0x3fff;
/// Revision defined by RFC 5044.
pub const REV_1: u8 = 1;
/// Revision defined by RFC 6581.
pub const REV_2: u8 = 2;

const FLAG_M: u8 = 0x80;
const FLAG_C: u8 = 0x40;
const FLAG_R: u8 = 0x20;
const FLAG_S: u8 = 0x10;
/// The C siw's `MPA_RR_FLAG_GSO_EXP`: the first Res bit after S.
const FLAG_G: u8 = 0x08;
const RES_MASK: u8 = 0x07;
const ENH_HI: u16 = 0x8000;
const ENH_LO: u16 = 0x4000;

/// Which startup frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// Sent by the initiator.
    Request,
    /// Sent by the responder.
    Reply,
}

impl FrameKind {
    /// The Key this kind of frame carries.
    pub const fn key(self) -> &'static [u8; 16] {
        match self {
            Self::Request => &KEY_REQ,
            Self::Reply => &KEY_REP,
        }
    }
}

/// A malformed startup frame: the connection is closed without a Reply
/// and the error reported locally (RFC 5044 §7.1.2, §8 code 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The 16-octet Key is not the one expected. `other_kind` is set when it
    /// is the other frame's Key (initiator/initiator or responder/responder
    /// startup, RFC 5044 §7.1.2 rule 8).
    BadKey {
        /// The Key is the Key of the other frame kind.
        other_kind: bool,
    },
    /// PD_Length is above 512.
    PrivateDataTooLong(u16),
    /// Revision we cannot interoperate with.
    BadRevision(u8),
    /// S=1 but Rev is below 2 or PD_Length below 4.
    BadEnhanced,
    /// Octets arrived after the frame when the peer must wait for ours.
    UnexpectedData,
    /// Private Data given for encoding is too long.
    EncodeTooLong,
}

/// The decoded 20-octet header of a Request or Reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpaHeader {
    /// Request or Reply (from the Key).
    pub kind: FrameKind,
    /// M: the frame's sender wants Markers in what it receives.
    pub markers: bool,
    /// C: the frame's sender prefers CRC.
    pub crc: bool,
    /// R: reject (Reply only; sent 0 and not checked in a Request).
    pub reject: bool,
    /// S: Private Data starts with enhanced data (RFC 6581).
    pub enhanced: bool,
    /// G (non-standard, the C siw's `MPA_RR_FLAG_GSO_EXP`): the frame's
    /// sender accepts FPDUs larger than one MSS.
    pub large_fpdu: bool,
    /// The three remaining Res bits (sent 0, never checked).
    pub res: u8,
    /// Revision.
    pub rev: u8,
    /// Private Data length, enhanced data included.
    pub pd_len: u16,
}

impl MpaHeader {
    /// Decodes a header expected to be of `kind`. Checks the Key and
    /// PD_Length; Rev and Res are left to the caller.
    pub fn parse(b: &[u8], kind: FrameKind) -> Result<Self, FrameError> {
        let key = b
            .get(..16)
            .ok_or(FrameError::BadKey { other_kind: false })?;
        if key != kind.key() {
            let other = match kind {
                FrameKind::Request => FrameKind::Reply,
                FrameKind::Reply => FrameKind::Request,
            };
            return Err(FrameError::BadKey {
                other_kind: key == other.key(),
            });
        }
        let flags = *b.get(16).ok_or(FrameError::BadKey { other_kind: false })?;
        let rev = *b.get(17).ok_or(FrameError::BadKey { other_kind: false })?;
        let pd_len = be16(b, 18).ok_or(FrameError::BadKey { other_kind: false })?;
        if usize::from(pd_len) > MAX_PRIVATE_DATA {
            return Err(FrameError::PrivateDataTooLong(pd_len));
        }
        Ok(Self {
            kind,
            markers: flags & FLAG_M != 0,
            crc: flags & FLAG_C != 0,
            reject: flags & FLAG_R != 0,
            enhanced: flags & FLAG_S != 0,
            large_fpdu: flags & FLAG_G != 0,
            res: flags & RES_MASK,
            rev,
            pd_len,
        })
    }

    /// Encodes the header. Res is sent as given (normally 0); R is cleared
    /// in a Request.
    pub fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        let _ = put(&mut b, 0, self.kind.key());
        let r = self.reject && self.kind == FrameKind::Reply;
        let flags = (if self.markers { FLAG_M } else { 0 })
            | (if self.crc { FLAG_C } else { 0 })
            | (if r { FLAG_R } else { 0 })
            | (if self.enhanced { FLAG_S } else { 0 })
            | (if self.large_fpdu { FLAG_G } else { 0 })
            | (self.res & RES_MASK);
        let _ = put(&mut b, 16, &[flags, self.rev]);
        let _ = put(&mut b, 18, &self.pd_len.to_be_bytes());
        b
    }
}

/// RTR (ready-to-receive) message types of RFC 6581 §9.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtrType {
    /// Zero-length Send (flag B).
    Send,
    /// Zero-length RDMA Write (flag C).
    Write,
    /// Zero-length RDMA Read (flag D).
    Read,
}

/// A set of RTR types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtrSet {
    /// Zero-length Send.
    pub send: bool,
    /// Zero-length RDMA Write.
    pub write: bool,
    /// Zero-length RDMA Read.
    pub read: bool,
}

impl RtrSet {
    /// The empty set.
    pub const NONE: Self = Self {
        send: false,
        write: false,
        read: false,
    };

    /// Whether `t` is in the set.
    pub const fn has(&self, t: RtrType) -> bool {
        match t {
            RtrType::Send => self.send,
            RtrType::Write => self.write,
            RtrType::Read => self.read,
        }
    }

    /// Whether the set is empty.
    pub const fn is_empty(&self) -> bool {
        !(self.send || self.write || self.read)
    }

    /// Intersection.
    pub const fn and(&self, o: &Self) -> Self {
        Self {
            send: self.send && o.send,
            write: self.write && o.write,
            read: self.read && o.read,
        }
    }
}

/// RFC 6581 §9 enhanced connection data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnhancedData {
    /// A: peer-to-peer connection model (RTR needed).
    pub p2p: bool,
    /// IRD (14 bits; 0x3FFF = do not negotiate).
    pub ird: u16,
    /// ORD (14 bits; 0x3FFF = do not negotiate).
    pub ord: u16,
    /// B, C and D: RTR types offered or accepted.
    pub rtr: RtrSet,
}

impl EnhancedData {
    /// Decodes the first four octets of `b`. IRD and ORD are masked to 14
    /// bits; with A=0, B/C/D are ignored (RFC 6581 §9.2).
    pub fn parse(b: &[u8]) -> Option<Self> {
        let w0 = be16(b, 0)?;
        let w1 = be16(b, 2)?;
        let p2p = w0 & ENH_HI != 0;
        Some(Self {
            p2p,
            ird: w0 & IRD_ORD_MAX,
            ord: w1 & IRD_ORD_MAX,
            rtr: if p2p {
                RtrSet {
                    send: w0 & ENH_LO != 0,
                    write: w1 & ENH_HI != 0,
                    read: w1 & ENH_LO != 0,
                }
            } else {
                RtrSet::NONE
            },
        })
    }

    /// Encodes the four octets; B/C/D are sent only with A=1.
    pub fn encode(&self) -> [u8; ENHANCED_LEN] {
        let rtr = if self.p2p { self.rtr } else { RtrSet::NONE };
        let w0 = (if self.p2p { ENH_HI } else { 0 })
            | (if rtr.send { ENH_LO } else { 0 })
            | (self.ird & IRD_ORD_MAX);
        let w1 = (if rtr.write { ENH_HI } else { 0 })
            | (if rtr.read { ENH_LO } else { 0 })
            | (self.ord & IRD_ORD_MAX);
        let mut b = [0u8; ENHANCED_LEN];
        let _ = put(&mut b, 0, &w0.to_be_bytes());
        let _ = put(&mut b, 2, &w1.to_be_bytes());
        b
    }
}

/// An encoded startup frame, ready to send (at most 532 octets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpaFrame {
    buf: [u8; MAX_FRAME_LEN],
    len: u16,
}

impl MpaFrame {
    /// Encodes `hdr` (its `pd_len` and `enhanced` are recomputed), the
    /// enhanced data if given, and the ULP Private Data.
    pub fn build(
        hdr: &MpaHeader,
        enhanced: Option<&EnhancedData>,
        ulp_pd: &[u8],
    ) -> Result<Self, FrameError> {
        let enh_len = if enhanced.is_some() { ENHANCED_LEN } else { 0 };
        let pd_len = ulp_pd
            .len()
            .checked_add(enh_len)
            .filter(|&l| l <= MAX_PRIVATE_DATA)
            .ok_or(FrameError::EncodeTooLong)?;
        let mut h = *hdr;
        h.enhanced = enhanced.is_some();
        h.pd_len = u16::try_from(pd_len).map_err(|_| FrameError::EncodeTooLong)?;
        let mut f = Self {
            buf: [0u8; MAX_FRAME_LEN],
            len: 0,
        };
        put(&mut f.buf, 0, &h.encode()).ok_or(FrameError::EncodeTooLong)?;
        if let Some(e) = enhanced {
            put(&mut f.buf, HDR_LEN, &e.encode()).ok_or(FrameError::EncodeTooLong)?;
        }
        put(&mut f.buf, HDR_LEN + enh_len, ulp_pd).ok_or(FrameError::EncodeTooLong)?;
        f.len = u16::try_from(HDR_LEN + pd_len).map_err(|_| FrameError::EncodeTooLong)?;
        Ok(f)
    }

    /// The frame's octets.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

/// Incremental receiver of one startup frame, fed arbitrary chunks.
///
/// It never consumes octets past the end of the frame: whatever follows
/// belongs to Full Operation.
#[derive(Clone, Copy, Debug)]
pub struct FrameRx {
    kind: FrameKind,
    hdr: [u8; HDR_LEN],
    have: usize,
    header: Option<MpaHeader>,
    pd: [u8; MAX_PRIVATE_DATA],
    pd_have: usize,
}

impl FrameRx {
    /// A receiver expecting a frame of `kind`.
    pub const fn new(kind: FrameKind) -> Self {
        Self {
            kind,
            hdr: [0u8; HDR_LEN],
            have: 0,
            header: None,
            pd: [0u8; MAX_PRIVATE_DATA],
            pd_have: 0,
        }
    }

    /// Feeds octets; returns how many were consumed and whether the frame
    /// is complete. The Key is checked as soon as its 16 octets are in.
    pub fn feed(&mut self, input: &[u8]) -> Result<(usize, bool), FrameError> {
        let mut used = 0usize;
        if self.header.is_none() {
            let want = HDR_LEN.saturating_sub(self.have);
            let n = want.min(input.len());
            put(&mut self.hdr, self.have, input.get(..n).unwrap_or(&[]))
                .ok_or(FrameError::BadKey { other_kind: false })?;
            let before = self.have;
            self.have = self.have.saturating_add(n);
            used = n;
            if before < 16 && self.have >= 16 {
                // Early Key check so a wrong peer is refused without waiting.
                let key = self.hdr.get(..16).unwrap_or(&[]);
                if key != self.kind.key() {
                    return Err(FrameError::BadKey {
                        other_kind: key
                            == match self.kind {
                                FrameKind::Request => &KEY_REP,
                                FrameKind::Reply => &KEY_REQ,
                            },
                    });
                }
            }
            if self.have < HDR_LEN {
                return Ok((used, false));
            }
            self.header = Some(MpaHeader::parse(&self.hdr, self.kind)?);
        }
        let pd_len = self.header.map_or(0, |h| usize::from(h.pd_len));
        let rest = input.get(used..).unwrap_or(&[]);
        let n = pd_len.saturating_sub(self.pd_have).min(rest.len());
        put(&mut self.pd, self.pd_have, rest.get(..n).unwrap_or(&[]))
            .ok_or(FrameError::PrivateDataTooLong(pd_len as u16))?;
        self.pd_have = self.pd_have.saturating_add(n);
        used = used.saturating_add(n);
        Ok((used, self.pd_have == pd_len))
    }

    /// The header, once its 20 octets are in.
    pub const fn header(&self) -> Option<&MpaHeader> {
        self.header.as_ref()
    }

    /// The Private Data received so far (all of it once complete).
    pub fn private_data(&self) -> &[u8] {
        self.pd.get(..self.pd_have).unwrap_or(&[])
    }
}
