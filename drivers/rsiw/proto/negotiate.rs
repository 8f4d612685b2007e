// SPDX-License-Identifier: GPL-2.0

//! MPA startup negotiation (RFC 5044 §7.1, RFC 6581): the initiator and
//! responder state machines.
//!
//! The driver feeds received octets with `on_data`, reports the startup
//! timer with `on_timeout`, and acts on the returned [`MpaEvent`]. Neither
//! machine consumes octets past the end of the peer's frame; what follows
//! is Full Operation traffic for [`super::fpdu::RxStream`].
//!
//! Decisions, in the RFCs' terms:
//!
//! - CRC: used in both directions if either frame has C=1 (§7.1.1 C).
//! - Markers: per direction; the Request's M binds the responder's
//!   transmitter, the Reply's M the initiator's (§7.1.1 M).
//! - Revision: we send `policy.rev`; the responder answers with the lower
//!   of the two revisions; Rev 0 (RDMAC) and Rev > 2 are refused.
//! - S=1 with Rev 1 is treated as a malformed frame (RFC 6581 §6 requires
//!   Rev 2 for enhanced frames; TRK-20 asks for a documented policy).
//! - IRD/ORD (RFC 6581 §9.1): responder ORD = min(own ORD, initiator IRD),
//!   responder IRD = own IRD (raised to 1 when a Read RTR needs it);
//!   initiator ORD = min(own ORD, responder IRD), and the initiator fails
//!   with Terminate 2/0/0x06 if responder ORD exceeds its IRD. 0x3FFF on
//!   either side means "keep the local value" and is echoed.
//! - RTR (RFC 6581 §9.2): the responder accepts every offered type it
//!   supports, or offers all it supports if none match; the initiator picks
//!   Write, then Read (if the responder's IRD allows), then Send, and fails
//!   with Terminate 2/0/0x07 if none matches.
//! - Large FPDUs (not in the RFCs; the C siw's `MPA_RR_FLAG_GSO_EXP`, see
//!   [`super::mpa`]): the initiator proposes them with G=1 in its Request;
//!   the responder answers G=1 only if the Request had it and its policy
//!   wants them too. Both ends then may send FPDUs up to the TCP GSO size
//!   instead of one MSS ([`super::fpdu::tx_budget`]). A G=1 Reply to a G=0
//!   Request is ignored.

use super::error::{MpaCode, TermError};
use super::fpdu::{SegmentInfo, TxStream};
use super::mpa::{
    EnhancedData, FrameError, FrameKind, FrameRx, MpaFrame, MpaHeader, RtrSet, RtrType,
    ENHANCED_LEN, IRD_ORD_MAX, REV_1, REV_2,
};
use super::rdmap::Opcode;

/// Local MPA policy: what we ask for and what we accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpaPolicy {
    /// Revision to send (1 or 2).
    pub rev: u8,
    /// Our C bit: we want CRC. RFC 5044 §4.4 makes this the default.
    pub crc: bool,
    /// Our M bit: we want the peer to put Markers in what it sends us.
    pub markers_rx: bool,
    /// We can generate Markers if the peer asks (RFC 5044 §4.3 says MUST).
    pub markers_tx_ok: bool,
    /// Use RFC 6581 enhanced frames (needs `rev` 2).
    pub enhanced: bool,
    /// Our IRD (inbound Read Requests we can queue), at most 0x3FFF.
    pub ird: u16,
    /// Our ORD (outbound Read Requests we want outstanding), at most 0x3FFF.
    pub ord: u16,
    /// Initiator only: ask for the peer-to-peer model (an RTR message).
    pub p2p: bool,
    /// RTR types we can send (initiator) or accept (responder).
    pub rtr: RtrSet,
    /// Propose (initiator) or agree to (responder) FPDUs larger than one
    /// MSS, with the non-standard G bit. Off by default.
    pub large_fpdu: bool,
}

impl Default for MpaPolicy {
    fn default() -> Self {
        Self {
            rev: REV_2,
            crc: true,
            markers_rx: false,
            markers_tx_ok: true,
            enhanced: true,
            ird: 16,
            ord: 16,
            p2p: false,
            rtr: RtrSet {
                send: false,
                write: true,
                read: true,
            },
            large_fpdu: false,
        }
    }
}

/// The outcome of a successful negotiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The revision in use.
    pub rev: u8,
    /// Whether RFC 6581 enhanced data was exchanged.
    pub enhanced: bool,
    /// CRC generated and checked in both directions.
    pub crc: bool,
    /// We insert Markers in what we send.
    pub markers_tx: bool,
    /// The peer inserts Markers in what it sends.
    pub markers_rx: bool,
    /// Our IRD for this connection.
    pub ird: u16,
    /// Our ORD for this connection.
    pub ord: u16,
    /// The peer's IRD from its frame (our ORD must not exceed it).
    pub peer_ird: u16,
    /// The peer's ORD from its frame.
    pub peer_ord: u16,
    /// Initiator: the RTR to send as the first FPDU, if any.
    pub rtr_send: Option<RtrType>,
    /// Responder: the RTR types the first inbound FPDU may be; empty when no
    /// RTR is expected (the first FPDU is then ordinary traffic).
    pub rtr_accept: RtrSet,
    /// Both frames had G=1: we may send FPDUs up to the TCP GSO size, not
    /// just one MSS (the peer accepts them).
    pub large_fpdu: bool,
}

/// Why negotiation failed, and what the driver must do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpaFailure {
    /// Malformed or unacceptable frame: close TCP at once, report locally.
    Close(FrameError),
    /// The peer asked for Markers and policy cannot generate them.
    MarkersUnsupported,
    /// The startup timer expired.
    Timeout,
    /// Enhanced setup error: send a Terminate with this class as the first
    /// FPDU, then close (RFC 6581 §8).
    Terminate(TermError),
}

/// What the driver must do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpaEvent {
    /// Nothing yet: feed more octets.
    NeedMore,
    /// Responder: a valid Request arrived; call `accept` or `reject`.
    RequestReceived,
    /// Full Operation may start with these parameters.
    Established(Negotiated),
    /// Initiator: the responder rejected (R=1). MPA is left, TCP stays open
    /// for the ULP to close. The peer's enhanced data, if any, is given.
    Rejected(Option<EnhancedData>),
    /// Negotiation failed.
    Failed(MpaFailure),
}

/// The result of feeding octets: how many were used and the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpaStep {
    /// Octets consumed from the input.
    pub consumed: usize,
    /// What happened.
    pub event: MpaEvent,
}

impl MpaStep {
    const fn new(consumed: usize, event: MpaEvent) -> Self {
        Self { consumed, event }
    }
}

/// Feeds `input` to `rx`: `Ok(consumed)` once the frame is complete,
/// otherwise `Err` with a need-more step or a close failure.
fn feed_frame(rx: &mut FrameRx, input: &[u8]) -> Result<usize, MpaStep> {
    match rx.feed(input) {
        Ok((consumed, true)) => Ok(consumed),
        Ok((consumed, false)) => Err(MpaStep::new(consumed, MpaEvent::NeedMore)),
        Err(e) => Err(MpaStep::new(0, MpaEvent::Failed(MpaFailure::Close(e)))),
    }
}

fn sanitize(p: &MpaPolicy) -> MpaPolicy {
    let mut q = *p;
    q.rev = q.rev.clamp(REV_1, REV_2);
    q.enhanced = q.enhanced && q.rev >= REV_2;
    q.ird = q.ird.min(IRD_ORD_MAX);
    q.ord = q.ord.min(IRD_ORD_MAX);
    q
}

fn check_rev(h: &MpaHeader, max: u8) -> Result<(), FrameError> {
    if h.rev < REV_1 || h.rev > max {
        return Err(FrameError::BadRevision(h.rev));
    }
    if h.enhanced && (h.rev < REV_2 || usize::from(h.pd_len) < ENHANCED_LEN) {
        return Err(FrameError::BadEnhanced);
    }
    Ok(())
}

fn ulp_pd(rx: &FrameRx) -> &[u8] {
    let skip = match rx.header() {
        Some(h) if h.enhanced => ENHANCED_LEN,
        _ => 0,
    };
    rx.private_data().get(skip..).unwrap_or(&[])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IState {
    WaitReply,
    Done,
    Failed(MpaFailure),
}

/// Initiator side: sends the Request, validates the Reply.
#[derive(Clone, Copy, Debug)]
pub struct Initiator {
    policy: MpaPolicy,
    rx: FrameRx,
    state: IState,
}

impl Initiator {
    /// Starts negotiation; returns the machine and the Request to send.
    pub fn new(policy: &MpaPolicy, ulp_pd: &[u8]) -> Result<(Self, MpaFrame), FrameError> {
        let p = sanitize(policy);
        let hdr = MpaHeader {
            kind: FrameKind::Request,
            markers: p.markers_rx,
            crc: p.crc,
            reject: false,
            enhanced: p.enhanced,
            large_fpdu: p.large_fpdu,
            res: 0,
            rev: p.rev,
            pd_len: 0,
        };
        let enh = EnhancedData {
            p2p: p.p2p,
            ird: p.ird,
            ord: p.ord,
            rtr: p.rtr,
        };
        let frame = MpaFrame::build(&hdr, p.enhanced.then_some(&enh), ulp_pd)?;
        Ok((
            Self {
                policy: p,
                rx: FrameRx::new(FrameKind::Reply),
                state: IState::WaitReply,
            },
            frame,
        ))
    }

    /// Feeds octets received while waiting for the Reply.
    pub fn on_data(&mut self, input: &[u8]) -> MpaStep {
        match self.state {
            IState::WaitReply => {}
            IState::Done => return MpaStep::new(0, MpaEvent::NeedMore),
            IState::Failed(f) => return MpaStep::new(0, MpaEvent::Failed(f)),
        }
        let consumed = match feed_frame(&mut self.rx, input) {
            Ok(c) => c,
            Err(step) => {
                if let MpaEvent::Failed(f) = step.event {
                    return self.fail(0, f);
                }
                return step;
            }
        };
        let event = self.evaluate();
        if let MpaEvent::Failed(f) = event {
            return self.fail(consumed, f);
        }
        self.state = IState::Done;
        MpaStep { consumed, event }
    }

    /// After [`MpaFailure::Terminate`]: the stream the Terminate goes out
    /// on, framed as the Reply negotiated (CRC if either side asked for it,
    /// Markers if the Reply did). `None` in any other state.
    pub fn terminate_stream(&self) -> Option<TxStream> {
        let IState::Failed(MpaFailure::Terminate(_)) = self.state else {
            return None;
        };
        let h = self.rx.header()?;
        Some(TxStream::new(h.markers, self.policy.crc || h.crc))
    }

    fn fail(&mut self, consumed: usize, f: MpaFailure) -> MpaStep {
        self.state = IState::Failed(f);
        MpaStep {
            consumed,
            event: MpaEvent::Failed(f),
        }
    }

    fn evaluate(&self) -> MpaEvent {
        let p = &self.policy;
        let Some(h) = self.rx.header().copied() else {
            return MpaEvent::NeedMore;
        };
        if let Err(e) = check_rev(&h, p.rev) {
            return MpaEvent::Failed(MpaFailure::Close(e));
        }
        if h.enhanced && !p.enhanced {
            // The responder must answer an unenhanced Request unenhanced.
            return MpaEvent::Failed(MpaFailure::Close(FrameError::BadEnhanced));
        }
        let enh = if h.enhanced {
            match EnhancedData::parse(self.rx.private_data()) {
                Some(e) => Some(e),
                None => return MpaEvent::Failed(MpaFailure::Close(FrameError::BadEnhanced)),
            }
        } else {
            None
        };
        if h.reject {
            return MpaEvent::Rejected(enh);
        }
        if h.markers && !p.markers_tx_ok {
            return MpaEvent::Failed(MpaFailure::MarkersUnsupported);
        }
        let mut n = Negotiated {
            rev: h.rev,
            enhanced: enh.is_some(),
            crc: p.crc || h.crc,
            markers_tx: h.markers,
            markers_rx: p.markers_rx,
            ird: p.ird,
            ord: p.ord,
            peer_ird: IRD_ORD_MAX,
            peer_ord: IRD_ORD_MAX,
            rtr_send: None,
            rtr_accept: RtrSet::NONE,
            large_fpdu: p.large_fpdu && h.large_fpdu,
        };
        if let Some(e) = enh {
            n.peer_ird = e.ird;
            n.peer_ord = e.ord;
            if e.ird != IRD_ORD_MAX && p.ord != IRD_ORD_MAX {
                n.ord = p.ord.min(e.ird);
            }
            if e.ord != IRD_ORD_MAX && p.ird != IRD_ORD_MAX && e.ord > p.ird {
                return MpaEvent::Failed(MpaFailure::Terminate(TermError::Mpa(
                    MpaCode::InsufficientIrd,
                )));
            }
            if p.p2p {
                let common = if e.p2p {
                    e.rtr.and(&p.rtr)
                } else {
                    RtrSet::NONE
                };
                let read_ok = e.ird >= 1;
                n.rtr_send = if common.write {
                    Some(RtrType::Write)
                } else if common.read && read_ok {
                    Some(RtrType::Read)
                } else if common.send {
                    Some(RtrType::Send)
                } else {
                    return MpaEvent::Failed(MpaFailure::Terminate(TermError::Mpa(
                        MpaCode::NoMatchingRtr,
                    )));
                };
                if n.rtr_send == Some(RtrType::Read) && n.ord == 0 {
                    // A zero-length Read RTR occupies one ORD slot.
                    n.ord = 1;
                }
            }
        }
        MpaEvent::Established(n)
    }

    /// The startup timer expired (RFC 5044 §7.1.2 rule 10).
    pub fn on_timeout(&mut self) -> MpaEvent {
        match self.state {
            IState::WaitReply => {
                self.state = IState::Failed(MpaFailure::Timeout);
                MpaEvent::Failed(MpaFailure::Timeout)
            }
            IState::Done => MpaEvent::NeedMore,
            IState::Failed(f) => MpaEvent::Failed(f),
        }
    }

    /// The Reply's header, once received.
    pub fn reply(&self) -> Option<&MpaHeader> {
        self.rx.header()
    }

    /// The responder's ULP Private Data (without enhanced data).
    pub fn peer_private_data(&self) -> &[u8] {
        ulp_pd(&self.rx)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RState {
    WaitRequest,
    WaitUlp,
    Done,
    Failed(MpaFailure),
}

/// Responder side: validates the Request, answers with a Reply.
#[derive(Clone, Copy, Debug)]
pub struct Responder {
    policy: MpaPolicy,
    rx: FrameRx,
    state: RState,
}

impl Responder {
    /// A responder waiting for a Request.
    pub fn new(policy: &MpaPolicy) -> Self {
        Self {
            policy: sanitize(policy),
            rx: FrameRx::new(FrameKind::Request),
            state: RState::WaitRequest,
        }
    }

    fn fail(&mut self, consumed: usize, f: MpaFailure) -> MpaStep {
        self.state = RState::Failed(f);
        MpaStep {
            consumed,
            event: MpaEvent::Failed(f),
        }
    }

    /// Feeds octets received before the Reply is sent. Octets beyond the
    /// Request are a protocol violation: the initiator must wait for the
    /// Reply (RFC 5044 §7.1.2, TRK-17).
    pub fn on_data(&mut self, input: &[u8]) -> MpaStep {
        match self.state {
            RState::WaitRequest => {}
            RState::WaitUlp => {
                if input.is_empty() {
                    return MpaStep::new(0, MpaEvent::NeedMore);
                }
                return self.fail(0, MpaFailure::Close(FrameError::UnexpectedData));
            }
            RState::Done => return MpaStep::new(0, MpaEvent::NeedMore),
            RState::Failed(f) => return MpaStep::new(0, MpaEvent::Failed(f)),
        }
        let consumed = match feed_frame(&mut self.rx, input) {
            Ok(c) => c,
            Err(step) => {
                if let MpaEvent::Failed(f) = step.event {
                    return self.fail(0, f);
                }
                return step;
            }
        };
        if consumed < input.len() {
            return self.fail(consumed, MpaFailure::Close(FrameError::UnexpectedData));
        }
        let Some(h) = self.rx.header().copied() else {
            return self.fail(consumed, MpaFailure::Close(FrameError::BadEnhanced));
        };
        if let Err(e) = check_rev(&h, REV_2) {
            return self.fail(consumed, MpaFailure::Close(e));
        }
        if h.enhanced && !self.policy.enhanced {
            // A non-enhanced responder closes on S=1 (RFC 6581 §10).
            return self.fail(consumed, MpaFailure::Close(FrameError::BadEnhanced));
        }
        self.state = RState::WaitUlp;
        MpaStep {
            consumed,
            event: MpaEvent::RequestReceived,
        }
    }

    /// The Request's header, once received.
    pub fn request(&self) -> Option<&MpaHeader> {
        self.rx.header()
    }

    /// The initiator's enhanced data, if its Request had S=1.
    pub fn request_enhanced(&self) -> Option<EnhancedData> {
        match self.rx.header() {
            Some(h) if h.enhanced => EnhancedData::parse(self.rx.private_data()),
            _ => None,
        }
    }

    /// The initiator's ULP Private Data (without enhanced data).
    pub fn peer_private_data(&self) -> &[u8] {
        ulp_pd(&self.rx)
    }

    fn reply_header(&self, req: &MpaHeader, reject: bool) -> MpaHeader {
        MpaHeader {
            kind: FrameKind::Reply,
            markers: self.policy.markers_rx,
            crc: self.policy.crc,
            reject,
            enhanced: req.enhanced,
            large_fpdu: !reject && req.large_fpdu && self.policy.large_fpdu,
            res: 0,
            rev: req.rev.min(self.policy.rev),
            pd_len: 0,
        }
    }

    fn reply_enhanced(&self, req: &EnhancedData) -> EnhancedData {
        let p = &self.policy;
        let mut rtr = RtrSet::NONE;
        if req.p2p {
            rtr = req.rtr.and(&p.rtr);
            if rtr.is_empty() {
                rtr = p.rtr;
            }
        }
        let mut ird = if req.ord == IRD_ORD_MAX {
            IRD_ORD_MAX
        } else {
            p.ird
        };
        if rtr.read && ird == 0 {
            ird = 1;
        }
        let ord = if req.ird == IRD_ORD_MAX {
            IRD_ORD_MAX
        } else {
            p.ord.min(req.ird)
        };
        EnhancedData {
            p2p: req.p2p,
            ird,
            ord,
            rtr,
        }
    }

    /// Accepts the Request: returns the Reply to send and the negotiated
    /// parameters. The responder must then receive and validate one FPDU
    /// before sending any (RFC 5044 §7.1.2 rule 4); see [`check_first_fpdu`].
    pub fn accept(&mut self, ulp_pd: &[u8]) -> Result<(MpaFrame, Negotiated), MpaFailure> {
        if self.state != RState::WaitUlp {
            return Err(MpaFailure::Close(FrameError::UnexpectedData));
        }
        let req = *self
            .rx
            .header()
            .ok_or(MpaFailure::Close(FrameError::UnexpectedData))?;
        if req.markers && !self.policy.markers_tx_ok {
            return Err(MpaFailure::MarkersUnsupported);
        }
        let hdr = self.reply_header(&req, false);
        let req_enh = self.request_enhanced();
        if req.enhanced && req_enh.is_none() {
            return Err(MpaFailure::Close(FrameError::BadEnhanced));
        }
        let enh = req_enh.map(|e| self.reply_enhanced(&e));
        if let (Some(r), Some(e)) = (req_enh, enh) {
            if r.p2p && e.rtr.is_empty() {
                // Enhanced responders must support at least one RTR type.
                return Err(MpaFailure::Terminate(TermError::Mpa(
                    MpaCode::NoMatchingRtr,
                )));
            }
        }
        let frame = MpaFrame::build(&hdr, enh.as_ref(), ulp_pd).map_err(MpaFailure::Close)?;
        let p = &self.policy;
        let n = Negotiated {
            rev: hdr.rev,
            enhanced: enh.is_some(),
            crc: req.crc || p.crc,
            markers_tx: req.markers,
            markers_rx: p.markers_rx,
            ird: enh.map_or(p.ird, |e| if e.ird == IRD_ORD_MAX { p.ird } else { e.ird }),
            ord: enh.map_or(p.ord, |e| if e.ord == IRD_ORD_MAX { p.ord } else { e.ord }),
            peer_ird: req_enh.map_or(IRD_ORD_MAX, |e| e.ird),
            peer_ord: req_enh.map_or(IRD_ORD_MAX, |e| e.ord),
            rtr_send: None,
            rtr_accept: enh.map_or(RtrSet::NONE, |e| e.rtr),
            large_fpdu: hdr.large_fpdu,
        };
        self.state = RState::Done;
        Ok((frame, n))
    }

    /// Rejects the Request (R=1). The responder leaves MPA but keeps TCP
    /// open (RFC 5044 §7.1.2 rule 2). In enhanced mode the Reply carries our
    /// IRD/ORD so the initiator can learn what would be acceptable.
    pub fn reject(&mut self, ulp_pd: &[u8]) -> Result<MpaFrame, MpaFailure> {
        if self.state != RState::WaitUlp {
            return Err(MpaFailure::Close(FrameError::UnexpectedData));
        }
        let req = *self
            .rx
            .header()
            .ok_or(MpaFailure::Close(FrameError::UnexpectedData))?;
        let hdr = self.reply_header(&req, true);
        let enh = self.request_enhanced().map(|e| self.reply_enhanced(&e));
        let frame = MpaFrame::build(&hdr, enh.as_ref(), ulp_pd).map_err(MpaFailure::Close)?;
        self.state = RState::Done;
        Ok(frame)
    }

    /// The startup timer expired while waiting for the Request
    /// (responder/responder startup, RFC 5044 §7.1.2 rule 8).
    pub fn on_timeout(&mut self) -> MpaEvent {
        match self.state {
            RState::WaitRequest | RState::WaitUlp => {
                self.state = RState::Failed(MpaFailure::Timeout);
                MpaEvent::Failed(MpaFailure::Timeout)
            }
            RState::Done => MpaEvent::NeedMore,
            RState::Failed(f) => MpaEvent::Failed(f),
        }
    }
}

/// Whether a segment is a valid RTR of type `t`: a zero-length Send, a
/// zero-length RDMA Write, or an RDMA Read Request of size 0, each a single
/// segment (L=1).
pub fn rtr_type_of(seg: &SegmentInfo) -> Option<RtrType> {
    if !seg.hdr.last() || seg.payload_len != 0 {
        return None;
    }
    match seg.opcode {
        Opcode::Send => Some(RtrType::Send),
        Opcode::Write => Some(RtrType::Write),
        Opcode::ReadRequest if seg.read_request.is_some_and(|r| r.size == 0) => Some(RtrType::Read),
        _ => None,
    }
}

/// Responder: checks the first FPDU after an enhanced accept. If an RTR is
/// expected it must be one of `n.rtr_accept`; otherwise the responder sends
/// Terminate 2/0/0x07 (RFC 6581 §9.2). A Terminate from the initiator is let
/// through for the driver to process. Returns the RTR type seen, if any.
pub fn check_first_fpdu(n: &Negotiated, seg: &SegmentInfo) -> Result<Option<RtrType>, TermError> {
    if n.rtr_accept.is_empty() || seg.opcode == Opcode::Terminate {
        return Ok(None);
    }
    match rtr_type_of(seg) {
        Some(t) if n.rtr_accept.has(t) => Ok(Some(t)),
        _ => Err(TermError::Mpa(MpaCode::NoMatchingRtr)),
    }
}
