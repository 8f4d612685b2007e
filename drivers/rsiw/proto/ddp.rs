// SPDX-License-Identifier: GPL-2.0

//! DDP (RFC 5041): tagged and untagged segment headers, receive-side
//! validation state and send-side MSN state.
//!
//! Octet 1 of every DDP header (RsvdULP\[0:7\]) belongs to RDMAP: it carries
//! the RDMAP Control field (see [`super::rdmap`]). For untagged
//! segments RsvdULP\[8:39\] carries RDMAP's Invalidate STag or zero.

use super::error::{DdpTagged, DdpUntagged};
use super::wire::{be32, be64, put};

/// DDP version defined by RFC 5041 (DV).
pub const DDP_VERSION: u8 = 1;
/// Length of a tagged DDP header (RFC 5041 §4.2).
pub const TAGGED_HDR_LEN: usize = 14;
/// Length of an untagged DDP header (RFC 5041 §4.3).
pub const UNTAGGED_HDR_LEN: usize = 18;
/// Number of untagged queues RDMAP uses (QN 0 Send, 1 Read Request,
/// 2 Terminate).
pub const QUEUES: usize = 3;
/// The MSN of the first message on every queue (RFC 5041 §4.3).
pub const INITIAL_MSN: u32 = 1;

const T_FLAG: u8 = 0x80;
const L_FLAG: u8 = 0x40;
const DV_MASK: u8 = 0x03;

/// A tagged DDP header (T=1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaggedHdr {
    /// Last segment of the message (L).
    pub last: bool,
    /// DDP version (DV).
    pub dv: u8,
    /// RsvdULP (the RDMAP Control octet).
    pub rsvd_ulp: u8,
    /// Data Sink STag.
    pub stag: u32,
    /// Tagged Offset of the first payload octet.
    pub to: u64,
}

/// An untagged DDP header (T=0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UntaggedHdr {
    /// Last segment of the message (L).
    pub last: bool,
    /// DDP version (DV).
    pub dv: u8,
    /// RsvdULP\[0:7\] (the RDMAP Control octet).
    pub rsvd_ulp: u8,
    /// RsvdULP\[8:39\] (RDMAP Invalidate STag, or zero).
    pub rsvd_ulp2: u32,
    /// Queue Number.
    pub qn: u32,
    /// Message Sequence Number.
    pub msn: u32,
    /// Message Offset of the first payload octet.
    pub mo: u32,
}

/// A DDP header of either kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdpHdr {
    /// Tagged buffer model.
    Tagged(TaggedHdr),
    /// Untagged buffer model.
    Untagged(UntaggedHdr),
}

/// Why a DDP header could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdpParseError {
    /// Fewer octets than the header needs (the value is the length needed).
    Short(usize),
}

impl DdpHdr {
    /// Header length a segment needs, from its first octet (DDP Control).
    pub const fn len_from_ctrl(ctrl: u8) -> usize {
        if ctrl & T_FLAG != 0 {
            TAGGED_HDR_LEN
        } else {
            UNTAGGED_HDR_LEN
        }
    }

    /// Decodes the header at the start of `b` (a ULPDU). Reserved bits are
    /// not checked and the version is not validated here.
    #[inline]
    pub fn parse(b: &[u8]) -> Result<Self, DdpParseError> {
        let ctrl = *b.first().ok_or(DdpParseError::Short(1))?;
        let need = Self::len_from_ctrl(ctrl);
        if b.len() < need {
            return Err(DdpParseError::Short(need));
        }
        let short = DdpParseError::Short(need);
        let last = ctrl & L_FLAG != 0;
        let dv = ctrl & DV_MASK;
        let rsvd_ulp = *b.get(1).ok_or(short)?;
        if ctrl & T_FLAG != 0 {
            Ok(Self::Tagged(TaggedHdr {
                last,
                dv,
                rsvd_ulp,
                stag: be32(b, 2).ok_or(short)?,
                to: be64(b, 6).ok_or(short)?,
            }))
        } else {
            Ok(Self::Untagged(UntaggedHdr {
                last,
                dv,
                rsvd_ulp,
                rsvd_ulp2: be32(b, 2).ok_or(short)?,
                qn: be32(b, 6).ok_or(short)?,
                msn: be32(b, 10).ok_or(short)?,
                mo: be32(b, 14).ok_or(short)?,
            }))
        }
    }

    /// Encoded length of this header.
    pub const fn encoded_len(&self) -> usize {
        match self {
            Self::Tagged(_) => TAGGED_HDR_LEN,
            Self::Untagged(_) => UNTAGGED_HDR_LEN,
        }
    }

    /// Writes the header to the start of `out` (reserved bits zero) and
    /// returns its length, or `None` if `out` is too short.
    #[inline]
    pub fn encode(&self, out: &mut [u8]) -> Option<usize> {
        let flags = |t: bool, last: bool, dv: u8| {
            (if t { T_FLAG } else { 0 }) | (if last { L_FLAG } else { 0 }) | (dv & DV_MASK)
        };
        match self {
            Self::Tagged(h) => {
                put(out, 0, &[flags(true, h.last, h.dv), h.rsvd_ulp])?;
                put(out, 2, &h.stag.to_be_bytes())?;
                put(out, 6, &h.to.to_be_bytes())?;
                Some(TAGGED_HDR_LEN)
            }
            Self::Untagged(h) => {
                put(out, 0, &[flags(false, h.last, h.dv), h.rsvd_ulp])?;
                put(out, 2, &h.rsvd_ulp2.to_be_bytes())?;
                put(out, 6, &h.qn.to_be_bytes())?;
                put(out, 10, &h.msn.to_be_bytes())?;
                put(out, 14, &h.mo.to_be_bytes())?;
                Some(UNTAGGED_HDR_LEN)
            }
        }
    }

    /// Whether this is a tagged header.
    pub const fn is_tagged(&self) -> bool {
        matches!(self, Self::Tagged(_))
    }

    /// The L flag.
    pub const fn last(&self) -> bool {
        match self {
            Self::Tagged(h) => h.last,
            Self::Untagged(h) => h.last,
        }
    }

    /// The DDP version field.
    pub const fn dv(&self) -> u8 {
        match self {
            Self::Tagged(h) => h.dv,
            Self::Untagged(h) => h.dv,
        }
    }

    /// RsvdULP\[0:7\]: the RDMAP Control octet.
    pub const fn rsvd_ulp(&self) -> u8 {
        match self {
            Self::Tagged(h) => h.rsvd_ulp,
            Self::Untagged(h) => h.rsvd_ulp,
        }
    }

    /// The Terminate class for a DV different from the negotiated one.
    pub const fn version_error(&self) -> super::error::TermError {
        match self {
            Self::Tagged(_) => super::error::TermError::DdpTagged(DdpTagged::InvalidVersion),
            Self::Untagged(_) => super::error::TermError::DdpUntagged(DdpUntagged::InvalidVersion),
        }
    }
}

/// What the driver knows about the tagged buffer an STag names, for
/// [`check_tagged`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagLookup {
    /// No valid STag with this value.
    Invalid,
    /// Valid STag, but not associated with this stream (PD or QP mismatch).
    NotAssociated,
    /// Valid STag whose buffer spans `len` octets starting at tagged offset
    /// `base`.
    Region {
        /// First valid tagged offset.
        base: u64,
        /// Length of the buffer in octets.
        len: u64,
    },
}

/// Validates a tagged segment before placement (RFC 5041 §7.1): STag valid
/// and associated, TO+length does not wrap, and the segment lies inside the
/// buffer. Zero-length segments are not checked (RFC 5041 §5.2).
pub fn check_tagged(
    hdr: &TaggedHdr,
    payload_len: u32,
    lookup: StagLookup,
) -> Result<(), DdpTagged> {
    if payload_len == 0 {
        return Ok(());
    }
    let (base, len) = match lookup {
        StagLookup::Invalid => return Err(DdpTagged::InvalidStag),
        StagLookup::NotAssociated => return Err(DdpTagged::StagNotAssociated),
        StagLookup::Region { base, len } => (base, len),
    };
    let end = hdr
        .to
        .checked_add(u64::from(payload_len))
        .ok_or(DdpTagged::ToWrap)?;
    let limit = base.checked_add(len).ok_or(DdpTagged::BaseBounds)?;
    if hdr.to < base || end > limit {
        return Err(DdpTagged::BaseBounds);
    }
    Ok(())
}

/// Where an accepted untagged segment goes in its receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UntaggedPlacement {
    /// Queue index (0, 1 or 2).
    pub queue: usize,
    /// Offset of the segment's payload in the message (= MO).
    pub offset: u32,
    /// Whether this segment completes the message (L=1).
    pub last: bool,
    /// Total message length, known when `last` is set (MO + length).
    pub message_len: u32,
}

/// Receive-side DDP state of one stream: expected MSN and next MO per queue.
///
/// TCP delivers in order, so a message's segments arrive in order; the
/// state requires MO to continue where the previous segment ended, which
/// RFC 5041 §5.3 has senders do (and C siw requires too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdpRx {
    next_msn: [u32; QUEUES],
    next_mo: [Option<u32>; QUEUES],
}

impl Default for DdpRx {
    fn default() -> Self {
        Self::new()
    }
}

impl DdpRx {
    /// A fresh stream: every queue expects MSN 1, MO 0.
    pub const fn new() -> Self {
        Self {
            next_msn: [INITIAL_MSN; QUEUES],
            next_mo: [None; QUEUES],
        }
    }

    /// The MSN the next message on queue `qn` must carry.
    pub fn expected_msn(&self, qn: u32) -> Option<u32> {
        self.next_msn.get(usize::try_from(qn).ok()?).copied()
    }

    /// Whether a message is partly received on queue `qn`.
    pub fn in_message(&self, qn: u32) -> bool {
        usize::try_from(qn)
            .ok()
            .and_then(|q| self.next_mo.get(q))
            .is_some_and(|m| m.is_some())
    }

    /// Validates an untagged segment (RFC 5041 §7.1) and, if valid, records
    /// it. `buffer_len` is the length of the receive buffer the message's
    /// MSN selects, or `None` if no buffer is available for it. The state is
    /// not changed when an error is returned.
    pub fn check_untagged(
        &mut self,
        hdr: &UntaggedHdr,
        payload_len: u32,
        buffer_len: Option<u32>,
    ) -> Result<UntaggedPlacement, DdpUntagged> {
        let q = usize::try_from(hdr.qn)
            .ok()
            .filter(|&q| q < QUEUES)
            .ok_or(DdpUntagged::InvalidQn)?;
        let expected = *self.next_msn.get(q).ok_or(DdpUntagged::InvalidQn)?;
        let next_mo = *self.next_mo.get(q).ok_or(DdpUntagged::InvalidQn)?;
        if hdr.msn != expected {
            return Err(DdpUntagged::MsnRange);
        }
        let buf = buffer_len.ok_or(DdpUntagged::NoBuffer)?;
        if hdr.mo != next_mo.unwrap_or(0) {
            return Err(DdpUntagged::InvalidMo);
        }
        let end = hdr
            .mo
            .checked_add(payload_len)
            .ok_or(DdpUntagged::TooLong)?;
        if end > buf {
            return Err(DdpUntagged::TooLong);
        }
        if let (Some(m), Some(o)) = (self.next_msn.get_mut(q), self.next_mo.get_mut(q)) {
            if hdr.last {
                *m = m.wrapping_add(1);
                *o = None;
            } else {
                *o = Some(end);
            }
        }
        Ok(UntaggedPlacement {
            queue: q,
            offset: hdr.mo,
            last: hdr.last,
            message_len: end,
        })
    }
}

/// Send-side DDP state of one stream: the next MSN per untagged queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdpTx {
    next_msn: [u32; QUEUES],
}

impl Default for DdpTx {
    fn default() -> Self {
        Self::new()
    }
}

impl DdpTx {
    /// A fresh stream: every queue starts at MSN 1.
    pub const fn new() -> Self {
        Self {
            next_msn: [INITIAL_MSN; QUEUES],
        }
    }

    /// Takes the MSN for a new message on queue `qn` (wrapping after
    /// 0xFFFFFFFF to 0), or `None` for an unknown queue.
    pub fn take_msn(&mut self, qn: u32) -> Option<u32> {
        let m = self.next_msn.get_mut(usize::try_from(qn).ok()?)?;
        let v = *m;
        *m = v.wrapping_add(1);
        Some(v)
    }
}
