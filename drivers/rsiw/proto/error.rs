// SPDX-License-Identifier: GPL-2.0

//! Terminate error classes: the Layer/EType/Code triples of RFC 5040 §4.8
//! (RDMAP layer), RFC 5041 §7.2 (DDP layer) and RFC 5044 §8 plus RFC 6581
//! §8 (LLP layer, EType MPA).
//!
//! Every protocol violation the core detects maps to exactly one
//! [`TermError`]; [`TermError::layer`], [`TermError::etype`] and
//! [`TermError::code`] give the values for the Terminate Control field.

/// The Layer nibble of a Terminate message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Layer {
    /// RDMAP (0x0).
    Rdmap = 0,
    /// DDP (0x1).
    Ddp = 1,
    /// The lower layer protocol, here MPA over TCP (0x2).
    Llp = 2,
}

/// RDMAP EType 0x1, Remote Protection Error, codes (RFC 5040 §4.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RdmapProtection {
    /// Invalid STag.
    InvalidStag = 0x00,
    /// Base or bounds violation.
    BaseBounds = 0x01,
    /// Access rights violation.
    AccessRights = 0x02,
    /// STag not associated with RDMAP Stream.
    StagNotAssociated = 0x03,
    /// TO wrap.
    ToWrap = 0x04,
    /// STag cannot be invalidated.
    CannotInvalidate = 0x09,
    /// Unspecified error.
    Unspecified = 0xff,
}

/// RDMAP EType 0x2, Remote Operation Error, codes (RFC 5040 §4.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RdmapOperation {
    /// Invalid RDMAP version.
    InvalidVersion = 0x05,
    /// Unexpected OpCode.
    UnexpectedOpcode = 0x06,
    /// Catastrophic error, localized to RDMAP Stream.
    CatastrophicStream = 0x07,
    /// Catastrophic error, global.
    CatastrophicGlobal = 0x08,
    /// STag cannot be invalidated.
    CannotInvalidate = 0x09,
    /// Unspecified error.
    Unspecified = 0xff,
}

/// DDP EType 0x1, Tagged Buffer Error, codes (RFC 5041 §7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DdpTagged {
    /// Invalid STag.
    InvalidStag = 0x00,
    /// Base or bounds violation.
    BaseBounds = 0x01,
    /// STag not associated with DDP Stream.
    StagNotAssociated = 0x02,
    /// TO wrap.
    ToWrap = 0x03,
    /// Invalid DDP version.
    InvalidVersion = 0x04,
}

/// DDP EType 0x2, Untagged Buffer Error, codes (RFC 5041 §7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DdpUntagged {
    /// Invalid QN.
    InvalidQn = 0x01,
    /// Invalid MSN, no buffer available.
    NoBuffer = 0x02,
    /// Invalid MSN, MSN range is not valid.
    MsnRange = 0x03,
    /// Invalid MO.
    InvalidMo = 0x04,
    /// DDP Message too long for available buffer.
    TooLong = 0x05,
    /// Invalid DDP version.
    InvalidVersion = 0x06,
}

/// LLP EType 0x0 (MPA) codes (RFC 5044 §8, RFC 6581 §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MpaCode {
    /// TCP connection closed, terminated or lost.
    TcpLost = 0x01,
    /// Received MPA CRC does not match the calculated value.
    Crc = 0x02,
    /// FPDU Marker and ULPDU_Length disagree on the FPDU start.
    MarkerMismatch = 0x03,
    /// Invalid MPA Request or Reply frame.
    InvalidReqRep = 0x04,
    /// Local catastrophic error (enhanced connection setup).
    LocalCatastrophic = 0x05,
    /// Insufficient IRD resources (enhanced connection setup).
    InsufficientIrd = 0x06,
    /// No matching RTR option (enhanced connection setup).
    NoMatchingRtr = 0x07,
}

/// One Terminate error class: Layer, EType and Code together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TermError {
    /// RDMAP 0x0/0x0/0x00: local catastrophic error.
    RdmapCatastrophic,
    /// RDMAP 0x0/0x1/code: remote protection error.
    RdmapProtection(RdmapProtection),
    /// RDMAP 0x0/0x2/code: remote operation error.
    RdmapOperation(RdmapOperation),
    /// DDP 0x1/0x0/0x00: local catastrophic error.
    DdpCatastrophic,
    /// DDP 0x1/0x1/code: tagged buffer error.
    DdpTagged(DdpTagged),
    /// DDP 0x1/0x2/code: untagged buffer error.
    DdpUntagged(DdpUntagged),
    /// LLP 0x2/0x0/code: MPA error.
    Mpa(MpaCode),
}

impl TermError {
    /// The Layer nibble.
    pub const fn layer(self) -> Layer {
        match self {
            Self::RdmapCatastrophic | Self::RdmapProtection(_) | Self::RdmapOperation(_) => {
                Layer::Rdmap
            }
            Self::DdpCatastrophic | Self::DdpTagged(_) | Self::DdpUntagged(_) => Layer::Ddp,
            Self::Mpa(_) => Layer::Llp,
        }
    }

    /// The EType nibble.
    pub const fn etype(self) -> u8 {
        match self {
            Self::RdmapCatastrophic | Self::DdpCatastrophic | Self::Mpa(_) => 0,
            Self::RdmapProtection(_) | Self::DdpTagged(_) => 1,
            Self::RdmapOperation(_) | Self::DdpUntagged(_) => 2,
        }
    }

    /// The Error Code octet.
    pub const fn code(self) -> u8 {
        match self {
            Self::RdmapCatastrophic | Self::DdpCatastrophic => 0,
            Self::RdmapProtection(c) => c as u8,
            Self::RdmapOperation(c) => c as u8,
            Self::DdpTagged(c) => c as u8,
            Self::DdpUntagged(c) => c as u8,
            Self::Mpa(c) => c as u8,
        }
    }

    /// Whether the offending segment's layout is trustworthy enough to copy
    /// its headers into the Terminate (false for version, opcode and LLP
    /// errors, where the header cannot be interpreted).
    pub const fn header_usable(self) -> bool {
        !matches!(
            self,
            Self::RdmapCatastrophic
                | Self::DdpCatastrophic
                | Self::Mpa(_)
                | Self::RdmapOperation(RdmapOperation::InvalidVersion)
                | Self::RdmapOperation(RdmapOperation::UnexpectedOpcode)
                | Self::DdpTagged(DdpTagged::InvalidVersion)
                | Self::DdpUntagged(DdpUntagged::InvalidVersion)
        )
    }

    /// The error class for a Layer/EType/Code triple read from the wire, or
    /// `None` if the RFCs define no such triple.
    pub const fn from_wire(layer: u8, etype: u8, code: u8) -> Option<Self> {
        Some(match (layer, etype) {
            (0, 0) if code == 0 => Self::RdmapCatastrophic,
            (0, 1) => Self::RdmapProtection(match code {
                0x00 => RdmapProtection::InvalidStag,
                0x01 => RdmapProtection::BaseBounds,
                0x02 => RdmapProtection::AccessRights,
                0x03 => RdmapProtection::StagNotAssociated,
                0x04 => RdmapProtection::ToWrap,
                0x09 => RdmapProtection::CannotInvalidate,
                0xff => RdmapProtection::Unspecified,
                _ => return None,
            }),
            (0, 2) => Self::RdmapOperation(match code {
                0x05 => RdmapOperation::InvalidVersion,
                0x06 => RdmapOperation::UnexpectedOpcode,
                0x07 => RdmapOperation::CatastrophicStream,
                0x08 => RdmapOperation::CatastrophicGlobal,
                0x09 => RdmapOperation::CannotInvalidate,
                0xff => RdmapOperation::Unspecified,
                _ => return None,
            }),
            (1, 0) if code == 0 => Self::DdpCatastrophic,
            (1, 1) => Self::DdpTagged(match code {
                0x00 => DdpTagged::InvalidStag,
                0x01 => DdpTagged::BaseBounds,
                0x02 => DdpTagged::StagNotAssociated,
                0x03 => DdpTagged::ToWrap,
                0x04 => DdpTagged::InvalidVersion,
                _ => return None,
            }),
            (1, 2) => Self::DdpUntagged(match code {
                0x01 => DdpUntagged::InvalidQn,
                0x02 => DdpUntagged::NoBuffer,
                0x03 => DdpUntagged::MsnRange,
                0x04 => DdpUntagged::InvalidMo,
                0x05 => DdpUntagged::TooLong,
                0x06 => DdpUntagged::InvalidVersion,
                _ => return None,
            }),
            (2, 0) => Self::Mpa(match code {
                0x01 => MpaCode::TcpLost,
                0x02 => MpaCode::Crc,
                0x03 => MpaCode::MarkerMismatch,
                0x04 => MpaCode::InvalidReqRep,
                0x05 => MpaCode::LocalCatastrophic,
                0x06 => MpaCode::InsufficientIrd,
                0x07 => MpaCode::NoMatchingRtr,
                _ => return None,
            }),
            _ => return None,
        })
    }
}
