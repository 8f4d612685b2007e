// SPDX-License-Identifier: GPL-2.0

//! The receive path: FPDUs from the socket's buffers, placed straight into consumer memory.
//!
//! [`rx_ready`] runs in the socket's `data_ready` upcall (softirq, socket locked). It walks the
//! queued socket buffers with `tcp_read_sock` and feeds them to the protocol core's
//! [`RxStream`], holding the QP lock. Each segment's header is validated against the
//! connection's state before a single payload octet is placed: tagged segments against the
//! STag table (valid, key, PD, rights, bounds), Read Responses against the outstanding Read,
//! Sends against the receive queue and the DDP sequence numbers. Payload is then copied from
//! the socket buffers into the target pages with the CRC computed in the same pass. A segment
//! takes effect (completion, invalidation, Read Request queued) only after its CRC checked out.
//!
//! Any violation queues a Terminate with the RFC's Layer/EType/Code for the transmit path,
//! reports `IB_EVENT_QP_FATAL` (or `IB_EVENT_QP_ACCESS_ERR`), logs a line naming the device,
//! and stops reading; once the Terminate is out the connection is aborted and the QP flushed.

#![deny(unsafe_code)]

use super::{lock, tx, IrqEntry, QpInner, RecvEntry, MAX_SGE};
use crate::{
    cq,
    crc::KernelCrc32c,
    device::Rsiw,
    mem::{self, AccessError, MapError, MrShared},
    proto::{
        ddp::{DdpHdr, DdpRx},
        error::{DdpTagged, DdpUntagged, RdmapOperation, RdmapProtection, TermError},
        fpdu::{RxConfig, RxEvent, RxStream, SegmentInfo},
        negotiate::{check_first_fpdu, Negotiated},
        rdmap::{Offending, Opcode, Terminate},
    },
};
use kernel::{
    ksock::{Consumed, LockedSock},
    prelude::*,
    rdma::{
        mr::KernelRange,
        qp::{Qp, QpEvent, QpState},
        verbs::{WcOpcode, WcStatus, WorkCompletion},
    },
    sync::Arc,
};

/// Where the payload of the segment being received goes.
enum Target {
    /// Nowhere (no payload, or an RTR).
    Discard,
    /// A tagged buffer of ours (RDMA Write).
    Tagged {
        mr: Arc<MrShared>,
        stag: u32,
        to: u64,
    },
    /// The sink of the outstanding Read at the head of the ORQ, at this offset.
    ReadResponse { base: u32 },
    /// The receive being filled, at this message offset.
    Recv { mo: u32 },
    /// A Read Request to queue once the segment checked out.
    ReadRequest(IrqEntry),
    /// A Terminate from the peer.
    Terminate,
}

/// The segment being received.
struct Current {
    info: SegmentInfo,
    target: Target,
}

/// Receive state of one connection.
pub(crate) struct RxState {
    stream: RxStream,
    ddp: DdpRx,
    negotiated: Negotiated,
    /// No FPDU has arrived yet (the responder checks the first against the RTR it expects).
    first: bool,
    cur: Option<Current>,
}

impl RxState {
    /// The state at the start of Full Operation.
    pub(crate) fn new(n: &Negotiated) -> Self {
        Self {
            stream: RxStream::new(RxConfig::new(n.markers_rx, n.crc)),
            ddp: DdpRx::new(),
            negotiated: *n,
            first: true,
            cur: None,
        }
    }
}

/// The Terminate class for a Read Request whose source the region refuses (RFC 5040 §7:
/// RDMAP remote protection errors).
pub(super) fn read_source_error(e: AccessError) -> TermError {
    TermError::RdmapProtection(match e {
        AccessError::InvalidStag | AccessError::Fault => RdmapProtection::InvalidStag,
        AccessError::WrongPd => RdmapProtection::StagNotAssociated,
        AccessError::Rights => RdmapProtection::AccessRights,
        AccessError::Bounds => RdmapProtection::BaseBounds,
        AccessError::ToWrap => RdmapProtection::ToWrap,
    })
}

/// The Terminate class for a tagged segment the region refuses (RFC 5041 §7.2 tagged buffer
/// errors; a missing right is an RDMAP protection error, RFC 5040 §7.1).
fn tagged_error(e: AccessError) -> TermError {
    match e {
        AccessError::InvalidStag | AccessError::Fault => {
            TermError::DdpTagged(DdpTagged::InvalidStag)
        }
        AccessError::WrongPd => TermError::DdpTagged(DdpTagged::StagNotAssociated),
        AccessError::Bounds => TermError::DdpTagged(DdpTagged::BaseBounds),
        AccessError::ToWrap => TermError::DdpTagged(DdpTagged::ToWrap),
        AccessError::Rights => TermError::RdmapProtection(RdmapProtection::AccessRights),
    }
}

/// A receive error: what to tell the peer.
struct Fail {
    err: TermError,
    offending: Option<Offending>,
}

/// Data arrived on `qp`'s socket: receive it.
///
/// The QP lock is taken per contiguous chunk, never across `tcp_read_sock`, which may
/// transmit (an ACK) and so must not run with interrupts off.
pub(crate) fn rx_ready(qp: &Qp<Rsiw>, sk: &LockedSock) {
    if !receiving(&lock(qp)) {
        return;
    }
    let mut fail = None;
    let mut close = false;
    let _ = sk.read_sock(|skb| {
        let mut used = 0usize;
        let r = skb.for_each_chunk(|chunk| {
            let mut g = lock(qp);
            if !receiving(&g) {
                return Err(EINVAL);
            }
            match process(qp, &mut g, chunk) {
                Ok(Flow::More) => {}
                Ok(Flow::PeerTerminated) => {
                    close = true;
                    return Err(EINVAL);
                }
                Err(f) => {
                    fail = Some(f);
                    return Err(EINVAL);
                }
            }
            used += chunk.len();
            Ok(())
        });
        match r {
            Ok(()) => Consumed::Continue(skb.len()),
            Err(_) => Consumed::Stop(used),
        }
    });
    if let Some(f) = fail {
        terminate(qp, &mut lock(qp), f);
    }
    if close {
        super::link::fatal(qp);
    }
}

/// Whether the connection still takes data (in RTS, no Terminate sent or received).
fn receiving(inner: &QpInner) -> bool {
    inner.state == QpState::Rts
        && inner
            .sess
            .as_ref()
            .is_some_and(|s| s.term.is_none() && !s.term_sent)
}

/// Queues a Terminate for `f` and stops the connection.
fn terminate(qp: &Qp<Rsiw>, inner: &mut QpInner, f: Fail) {
    let e = f.err;
    pr_info!(
        "{}: QP {}: protocol error, sending Terminate layer {} etype {} code {:#04x}\n",
        qp.device().name(),
        qp.qpn(),
        e.layer() as u8,
        e.etype(),
        e.code()
    );
    let access = matches!(e, TermError::RdmapProtection(_) | TermError::DdpTagged(_));
    inner.up_event = Some(if access {
        QpEvent::AccessError
    } else {
        QpEvent::Fatal
    });
    if let Some(s) = inner.sess.as_mut() {
        s.term = Some(Terminate::for_error(e, f.offending.as_ref()));
    }
    tx::kick(qp, inner);
}

/// What processing a chunk led to.
enum Flow {
    /// Go on reading.
    More,
    /// The peer sent a Terminate: stop, close.
    PeerTerminated,
}

/// Feeds one contiguous chunk of the stream through the parser.
fn process(qp: &Qp<Rsiw>, inner: &mut QpInner, chunk: &[u8]) -> Result<Flow, Fail> {
    let crc = KernelCrc32c;
    let mut input = chunk;
    loop {
        let sess = inner.sess.as_mut().ok_or(Fail {
            err: TermError::RdmapCatastrophic,
            offending: None,
        })?;
        let out = sess.rx.stream.poll(input, &crc).map_err(|e| Fail {
            err: e.term(),
            offending: sess.rx.stream.offending(),
        })?;
        input = input.get(out.consumed..).unwrap_or(&[]);
        match out.event {
            RxEvent::NeedMore => return Ok(Flow::More),
            RxEvent::Header(info) => {
                let target = on_header(qp, inner, &info).map_err(|err| Fail {
                    err,
                    offending: Some(info.offending()),
                })?;
                if let Some(s) = inner.sess.as_mut() {
                    s.rx.cur = Some(Current { info, target });
                }
            }
            RxEvent::Payload { len, offset } => {
                let n = len.min(input.len());
                let (src, rest) = input.split_at(n);
                place(qp, inner, src, offset)?;
                input = rest;
            }
            RxEvent::SegmentDone => {
                if on_done(qp, inner)? {
                    return Ok(Flow::PeerTerminated);
                }
            }
        }
    }
}

/// Validates a segment's header against the connection state and picks its target.
fn on_header(qp: &Qp<Rsiw>, inner: &mut QpInner, info: &SegmentInfo) -> Result<Target, TermError> {
    let pd = qp.pd().as_raw() as usize;
    let mut rtr = false;
    {
        let sess = inner.sess.as_mut().ok_or(TermError::RdmapCatastrophic)?;
        if sess.rx.first {
            sess.rx.first = false;
            if sess.tx.await_rtr {
                rtr = check_first_fpdu(&sess.rx.negotiated, info)?.is_some();
                // The RTR arrived: the responder may transmit now.
                sess.tx.await_rtr = false;
                tx::kick(qp, inner);
            }
        }
    }
    let len = info.payload_len;
    match (info.opcode, &info.hdr) {
        (Opcode::Write, DdpHdr::Tagged(h)) => {
            if len == 0 {
                return Ok(Target::Discard);
            }
            let mr = mem::lookup(qp.device(), h.stag)
                .ok_or(TermError::DdpTagged(DdpTagged::InvalidStag))?;
            mr.access(h.stag, pd, mem::RIGHTS_WRITE, h.to, u64::from(len), |_| {
                Ok(())
            })
            .map_err(|e| match e {
                MapError::Access(a) => tagged_error(a),
                MapError::Copy(_) => TermError::DdpCatastrophic,
            })?;
            Ok(Target::Tagged {
                mr,
                stag: h.stag,
                to: h.to,
            })
        }
        (Opcode::ReadResponse, DdpHdr::Tagged(h)) => {
            let o = inner
                .orq
                .front()
                .ok_or(TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode))?;
            if h.stag != o.sink.lkey {
                return Err(TermError::DdpTagged(DdpTagged::InvalidStag));
            }
            let expect_to = o.sink.addr.checked_add(u64::from(o.placed));
            let end = o.placed.checked_add(len);
            if expect_to != Some(h.to) || !end.is_some_and(|e| e <= o.sink.length) {
                return Err(TermError::DdpTagged(DdpTagged::BaseBounds));
            }
            if h.last && end != Some(o.sink.length) {
                // A response shorter than the request.
                return Err(TermError::DdpTagged(DdpTagged::BaseBounds));
            }
            Ok(Target::ReadResponse { base: o.placed })
        }
        (
            Opcode::Send | Opcode::SendSe | Opcode::SendInvalidate | Opcode::SendSeInvalidate,
            DdpHdr::Untagged(h),
        ) => {
            let sess = inner.sess.as_mut().ok_or(TermError::RdmapCatastrophic)?;
            if rtr {
                sess.rx
                    .ddp
                    .check_untagged(h, 0, Some(0))
                    .map_err(TermError::DdpUntagged)?;
                return Ok(Target::Discard);
            }
            let buf = match (&inner.cur_recv, inner.rq.front()) {
                (Some(r), _) | (None, Some(r)) => recv_len(r),
                (None, None) => None,
            };
            let sess = inner.sess.as_mut().ok_or(TermError::RdmapCatastrophic)?;
            let p = sess
                .rx
                .ddp
                .check_untagged(h, len, buf)
                .map_err(TermError::DdpUntagged)?;
            if inner.cur_recv.is_none() {
                inner.cur_recv = inner.rq.pop();
            }
            Ok(Target::Recv { mo: p.offset })
        }
        (Opcode::ReadRequest, DdpHdr::Untagged(h)) => {
            let rr = info.read_request.ok_or(TermError::RdmapCatastrophic)?;
            let room = inner.irq.len() < inner.ird as usize;
            let sess = inner.sess.as_mut().ok_or(TermError::RdmapCatastrophic)?;
            sess.rx
                .ddp
                .check_untagged(h, 0, room.then_some(0))
                .map_err(TermError::DdpUntagged)?;
            let src = if rr.size == 0 {
                None
            } else {
                let mr = mem::lookup(qp.device(), rr.src_stag)
                    .ok_or(TermError::RdmapProtection(RdmapProtection::InvalidStag))?;
                mr.access(
                    rr.src_stag,
                    pd,
                    mem::RIGHTS_READ,
                    rr.src_to,
                    u64::from(rr.size),
                    |_| Ok(()),
                )
                .map_err(|e| match e {
                    MapError::Access(a) => read_source_error(a),
                    MapError::Copy(_) => TermError::RdmapCatastrophic,
                })?;
                Some(mr)
            };
            Ok(Target::ReadRequest(IrqEntry {
                sink_stag: rr.sink_stag,
                sink_to: rr.sink_to,
                size: rr.size,
                src_stag: rr.src_stag,
                src_to: rr.src_to,
                src,
            }))
        }
        (Opcode::Terminate, DdpHdr::Untagged(h)) => {
            let sess = inner.sess.as_mut().ok_or(TermError::RdmapCatastrophic)?;
            sess.rx
                .ddp
                .check_untagged(h, 0, Some(0))
                .map_err(TermError::DdpUntagged)?;
            Ok(Target::Terminate)
        }
        _ => Err(TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode)),
    }
}

/// Total length of a receive work request's buffers.
fn recv_len(r: &RecvEntry) -> Option<u32> {
    mem::sges_len(r.sges.get(..usize::from(r.num_sge).min(MAX_SGE as usize))?)
}

/// Copies `src` into `dst` pieces in order with the parser's CRC, returning an error if a
/// piece cannot take its share.
fn copy_into(stream: &mut RxStream, src: &mut &[u8], dst: KernelRange) -> Result {
    let crc = KernelCrc32c;
    let n = dst.len().min(src.len());
    let (now, rest) = src.split_at(n);
    dst.with_slice_mut(|d| stream.copy_payload(now, d, &crc))
        .map_err(|_| EINVAL)?;
    *src = rest;
    Ok(())
}

/// Places payload octets `src` at `offset` of the current segment's payload.
fn place(qp: &Qp<Rsiw>, inner: &mut QpInner, src: &[u8], offset: u32) -> Result<(), Fail> {
    let crc = KernelCrc32c;
    let pd = qp.pd().as_raw() as usize;
    let recv = inner.cur_recv;
    let sink = inner.orq.front().map(|o| o.sink);
    let sess = inner.sess.as_mut().ok_or(Fail {
        err: TermError::RdmapCatastrophic,
        offending: None,
    })?;
    let rx = &mut sess.rx;
    let Some(cur) = rx.cur.as_ref() else {
        return Err(Fail {
            err: TermError::RdmapCatastrophic,
            offending: None,
        });
    };
    let offending = Some(cur.info.offending());
    let stream = &mut rx.stream;
    let mut rest = src;
    let len = src.len() as u64;
    let res: Result<(), TermError> = 'arm: {
        match &cur.target {
            Target::Tagged { mr, stag, to } => {
                let at = to.checked_add(u64::from(offset)).unwrap_or(u64::MAX);
                mr.access(*stag, pd, mem::RIGHTS_WRITE, at, len, |r| {
                    copy_into(stream, &mut rest, r)
                })
                .map_err(|e| match e {
                    MapError::Access(a) => tagged_error(a),
                    MapError::Copy(_) => TermError::DdpCatastrophic,
                })
            }
            Target::ReadResponse { base } => {
                let Some(sink) = sink else {
                    break 'arm Err(TermError::RdmapCatastrophic);
                };
                let off = u64::from(*base) + u64::from(offset);
                mem::walk_sges(
                    qp.device(),
                    pd,
                    &[sink],
                    mem::RIGHTS_LOCAL_WRITE,
                    off,
                    len,
                    |_, r| copy_into(stream, &mut rest, r),
                )
                .map_err(|_| TermError::DdpCatastrophic)
            }
            Target::Recv { mo } => {
                let Some(r) = recv else {
                    break 'arm Err(TermError::RdmapCatastrophic);
                };
                let Some(sges) = r.sges.get(..usize::from(r.num_sge)) else {
                    break 'arm Err(TermError::RdmapCatastrophic);
                };
                let off = u64::from(*mo) + u64::from(offset);
                mem::walk_sges(
                    qp.device(),
                    pd,
                    sges,
                    mem::RIGHTS_LOCAL_WRITE,
                    off,
                    len,
                    |_, r| copy_into(stream, &mut rest, r),
                )
                .map_err(|_| TermError::DdpCatastrophic)
            }
            _ => stream.consume_payload(src, &crc).map_err(|e| e.term()),
        }
    };
    res.map_err(|err| Fail { err, offending })
}

/// The current segment is complete and its CRC checked out: it takes effect. Returns whether
/// it was the peer's Terminate.
fn on_done(qp: &Qp<Rsiw>, inner: &mut QpInner) -> Result<bool, Fail> {
    let Some(cur) = inner.sess.as_mut().and_then(|s| s.rx.cur.take()) else {
        return Ok(false);
    };
    let offending = Some(cur.info.offending());
    let fail = |err| Fail { err, offending };
    let last = cur.info.hdr.last();
    match cur.target {
        Target::Discard | Target::Tagged { .. } => {}
        Target::ReadResponse { .. } => {
            let Some(o) = inner.orq.front_mut() else {
                return Err(fail(TermError::RdmapCatastrophic));
            };
            o.placed = o.placed.saturating_add(cur.info.payload_len);
            if last {
                let o = inner
                    .orq
                    .pop()
                    .ok_or_else(|| fail(TermError::RdmapCatastrophic))?;
                if !o.rtr {
                    let mut status = WcStatus::Success;
                    if o.invalidate_local {
                        let pd = qp.pd().as_raw() as usize;
                        if mem::invalidate(qp.device(), pd, o.sink.lkey).is_err() {
                            status = WcStatus::LocProtErr;
                        }
                    }
                    if o.signaled || status != WcStatus::Success {
                        let wc = WorkCompletion {
                            wr_id: o.wr_id,
                            status,
                            opcode: WcOpcode::RdmaRead,
                            byte_len: o.placed,
                            qp: qp.handle(),
                            invalidated_rkey: None,
                        };
                        inner.up_send.add(cq::queue(qp.send_cq(), wc, false));
                    }
                }
                // An ORD slot is free, a fence may lift.
                tx::kick(qp, inner);
            }
        }
        Target::Recv { mo } => {
            if last {
                let r = inner
                    .cur_recv
                    .take()
                    .ok_or_else(|| fail(TermError::RdmapCatastrophic))?;
                let mut invalidated = None;
                if cur.info.opcode.invalidates() {
                    let stag = match cur.info.hdr {
                        DdpHdr::Untagged(h) => h.rsvd_ulp2,
                        DdpHdr::Tagged(_) => 0,
                    };
                    let pd = qp.pd().as_raw() as usize;
                    if mem::invalidate(qp.device(), pd, stag).is_err() {
                        // Put the receive back: it is flushed with the QP.
                        inner.cur_recv = Some(r);
                        return Err(fail(TermError::RdmapProtection(
                            RdmapProtection::CannotInvalidate,
                        )));
                    }
                    invalidated = Some(stag);
                }
                let wc = WorkCompletion {
                    wr_id: r.wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: mo.saturating_add(cur.info.payload_len),
                    qp: qp.handle(),
                    invalidated_rkey: invalidated,
                };
                let solicited = cur.info.opcode.solicited();
                inner.up_recv.add(cq::queue(qp.recv_cq(), wc, solicited));
            }
        }
        Target::ReadRequest(entry) => {
            if inner.irq.push(entry).is_err() {
                return Err(fail(TermError::DdpUntagged(DdpUntagged::NoBuffer)));
            }
            tx::kick(qp, inner);
        }
        Target::Terminate => {
            if let Some(t) = cur.info.terminate {
                let c = t.ctrl;
                pr_info!(
                    "{}: QP {}: peer sent Terminate layer {} etype {} code {:#04x}\n",
                    qp.device().name(),
                    qp.qpn(),
                    c.layer,
                    c.etype,
                    c.code
                );
            }
            inner.up_event = Some(QpEvent::Fatal);
            if let Some(s) = inner.sess.as_mut() {
                // Nothing more is sent after a Terminate was received (RFC 5040 §5.3).
                s.term_sent = true;
            }
            return Ok(true);
        }
    }
    Ok(false)
}
