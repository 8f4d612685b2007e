// SPDX-License-Identifier: GPL-2.0

//! The receive path: FPDUs from the socket's buffers, placed straight into consumer memory.
//!
//! [`receive`] walks the queued socket buffers with `tcp_read_sock` and feeds them to the
//! protocol core's [`RxStream`], holding the QP lock. The socket's `data_ready` upcall
//! (softirq, socket locked) reaches [`receive_or_defer`], which runs it there for short
//! messages and hands bulk data to a work item ([`receive_work`]), queued on another CPU than
//! its own (a per-CPU queue), so that placing data proceeds there while this CPU goes on
//! receiving, or on a loopback route, sending. Each segment's header is validated against the
//! connection's state before a single payload octet is placed: tagged segments against the
//! STag table (valid, key, PD, rights, bounds), Read Responses against the outstanding Read,
//! Sends against the receive queue and the DDP sequence numbers.
//!
//! With CRC on, the FPDU's CRC is then checked before its payload is placed (RFC 5044 §7.1:
//! nothing of a damaged FPDU reaches the ULP's memory): the receiver reads the rest of the
//! FPDU ahead in the socket's queue, without consuming it, and payload is then copied from the
//! socket buffers straight into the target pages (a second pass over the same, cache-hot,
//! bytes). An FPDU not all received yet goes through a per-connection bounce buffer instead:
//! waiting for its rest without consuming would keep TCP's receive window from reopening. A
//! segment takes effect (completion, invalidation, Read Request queued) only after its CRC
//! checked out.
//!
//! Any violation queues a Terminate with the RFC's Layer/EType/Code for the transmit path,
//! reports `IB_EVENT_QP_FATAL` (or `IB_EVENT_QP_ACCESS_ERR`), logs a line naming the device,
//! and stops reading; once TCP took the Terminate the QP is flushed and the connection closes
//! behind it (see [`super::link_terminated`]).

#![deny(unsafe_code)]

use super::{lock, tx, IrqEntry, QpInner, Round};
use crate::wqe::RecvEntry;
use crate::{
    cq,
    crc::CountedCrc32c,
    device::Rsiw,
    mem::{self, AccessError, MapError, MrShared},
    proto::{
        crc::Crc32c,
        ddp::{DdpHdr, DdpRx},
        error::{DdpTagged, DdpUntagged, MpaCode, RdmapOperation, RdmapProtection, TermError},
        fpdu::{RxConfig, RxEvent, RxStream, SegmentInfo, CRC_LEN},
        negotiate::{check_first_fpdu, Negotiated},
        rdmap::{Offending, Opcode, Terminate, QN_TERMINATE},
    },
    stats::{self, Counter, Counters},
};
use kernel::{
    alloc::KVVec,
    ksock::{Consumed, LockedSock, SkbData},
    owned_queue::Cpu,
    prelude::*,
    rdma::{
        mr::KernelRange,
        qp::{Qp, QpEvent, QpRef, Queued, Sge},
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
    ReadResponse { sink: Sge, base: u32 },
    /// The receive being filled (the queues' `cur_recv`), at this message offset.
    Recv { mo: u32 },
    /// A Read Request to queue once the segment checked out.
    ReadRequest(IrqEntry),
    /// A Terminate from the peer.
    Terminate,
}

/// How the current segment's payload is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Not decided yet (no payload octet looked at).
    Undecided,
    /// Straight into the target: its CRC was checked ahead, or CRC is off.
    Direct,
    /// Into the bounce buffer, placed once the CRC checked out.
    Bounce,
    /// Dropped: the CRC is wrong (the stream reports it at the trailer).
    Discard,
}

/// The segment being received.
struct Current {
    info: SegmentInfo,
    target: Target,
    placement: Placement,
}

/// Receive state of one connection.
pub(crate) struct RxState {
    stream: RxStream,
    ddp: DdpRx,
    negotiated: Negotiated,
    /// No FPDU has arrived yet (the responder checks the first against the RTR it expects).
    first: bool,
    cur: Option<Current>,
    /// Payload held until its FPDU's CRC checked out ([`Placement::Bounce`]): room for a
    /// whole ULPDU, allocated with the connection (empty with CRC off, which never bounces).
    bounce: KVVec<u8>,
    /// Octets held in `bounce`.
    bounced: usize,
}

/// The largest payload of one FPDU (ULPDU_Length is 16 bits).
const PAYLOAD_MAX: usize = u16::MAX as usize;

impl RxState {
    /// The state at the start of Full Operation.
    pub(crate) fn new(n: &Negotiated) -> Result<Self> {
        let bounce = if n.crc {
            KVVec::from_elem(0, PAYLOAD_MAX, GFP_KERNEL)?
        } else {
            KVVec::new()
        };
        Ok(Self {
            stream: RxStream::new(RxConfig::new(n.markers_rx, n.crc)),
            ddp: DdpRx::new(),
            negotiated: *n,
            first: true,
            cur: None,
            bounce,
            bounced: 0,
        })
    }
}

/// A receive error: what to tell the peer.
struct Fail {
    err: TermError,
    offending: Option<Offending>,
}

/// Where a chunk sits in the socket's queued data, for reading ahead of it.
struct Ahead<'a, 'b> {
    /// The socket buffer range the chunk belongs to.
    skb: &'a SkbData<'b>,
    /// The chunk's offset in `skb`.
    at: usize,
    /// How many more bytes the peer may send without the receive window opening
    /// ([`LockedSock::receive_window`]).
    window: usize,
}

/// Queued bytes from which `data_ready` hands the receiving to a work item.
///
/// Below, the upcall places the data itself: a short message then costs no scheduling. Bulk
/// data goes to the work item, which runs on another CPU while this one goes on (on a loopback
/// route the upcall runs on the sender's CPU, so placing there serializes sending and
/// receiving).
const RX_DEFER_MIN: usize = 32 * 1024;

/// `data_ready` of `qp`'s socket (softirq or backlog processing, socket locked): places the
/// queued data now, or makes sure the receive work item does.
pub(crate) fn receive_or_defer(qp: &Qp<Rsiw>, sk: &LockedSock) {
    {
        let mut g = lock(qp);
        if g.conn.is_none() {
            // Detached while its connection closes: see `discard`.
            drop(g);
            discard(sk);
            return;
        }
        if g.rx_scheduled {
            // The work item reads again before it ends; reading here would reorder.
            g.rx_again = true;
            return;
        }
        if sk.queued_len() >= RX_DEFER_MIN {
            // The work item holds a QP reference, so `destroy_qp` waits for it to finish. It
            // runs on another CPU than this upcall (spread over them by QP number), which is
            // free to go on sending (on loopback) or receiving for other QPs.
            let queued = qp.data().rx_work.queue_on(
                qp,
                crate::device::receive_workqueue(qp.device()),
                Cpu::other(qp.qpn()),
            );
            if queued != Queued::QpGone {
                g.rx_scheduled = true;
                g.rx_again = false;
                return;
            }
            // The QP is being destroyed: nothing is placed any more anyway.
        }
        if !receiving(&g) {
            return;
        }
    }
    // Checked under the lock just taken: a short message costs one lock round fewer.
    read_queued(qp, sk);
}

/// Reads and drops everything queued on a socket whose QP no longer receives (its link is
/// detached, so nothing else reads it). Left queued, it would close the receive window, and
/// the peer's FIN, which an orderly close waits for, would stay behind it: the close would
/// time out and end with a reset.
pub(crate) fn discard(sk: &LockedSock) {
    sk.set_wakeup_mark(0);
    let _ = sk.read_sock(|skb| Consumed::Continue(skb.len()));
}

/// The receive work item: reads the socket (locked as its owner, in process context) until
/// no more data arrived while it did.
pub(super) fn receive_work(qp: QpRef<Rsiw>) {
    loop {
        let sock = lock(&qp).link().map(|l| l.socket.clone());
        if let Some(sock) = sock {
            sock.with_locked(|sk| receive(&qp, sk));
        }
        let mut g = lock(&qp);
        let again = g.rx_again && g.conn.is_some();
        g.rx_again = false;
        if !again {
            g.rx_scheduled = false;
            return;
        }
    }
}

/// Why the walk over a socket buffer stopped before its end.
enum Stop {
    /// The current segment waits for more of the stream; what was used stays consumed.
    Wait,
    /// The peer's Terminate arrived: the connection closes.
    PeerTerminated,
    /// The segment failed: a Terminate goes out, then the connection closes.
    Fail(Fail),
    /// The buffer could not be read (the walker's own error): it stays queued.
    Unreadable,
}

impl From<Error> for Stop {
    fn from(_: Error) -> Self {
        Stop::Unreadable
    }
}

/// Data arrived on `qp`'s socket: receive it.
///
/// The QP lock is taken per socket buffer, never across `tcp_read_sock`, which may transmit
/// (an ACK) and so must not run with interrupts off. One lock round per buffer rather than per
/// page-sized chunk of it: on bulk transfers the lock (and its lockdep bookkeeping) otherwise
/// costs as much as the copy.
pub(crate) fn receive(qp: &Qp<Rsiw>, sk: &LockedSock) {
    if receiving(&lock(qp)) {
        read_queued(qp, sk);
    }
}

/// [`receive`] once [`receiving`] held.
fn read_queued(qp: &Qp<Rsiw>, sk: &LockedSock) {
    let mut stop = None;
    let mut wakeup_mark = 0;
    // Read once: nothing queued is consumed before a `Flow::Wait` ends the read.
    let window = sk.receive_window() as usize;
    let _ = sk.read_sock(|skb| {
        let mut used = 0usize;
        let mut g = lock(qp);
        let Some(mut round) = g.round(qp).filter(|r| !r.sess.terminating()) else {
            return Consumed::Stop(0);
        };
        let r = skb.for_each_chunk(|chunk| {
            let ahead = Ahead {
                skb,
                at: used,
                window,
            };
            match process(&mut round, chunk, &ahead) {
                Ok(Flow::More) => {}
                Ok(Flow::Wait { at, need }) => {
                    used += at;
                    wakeup_mark = need;
                    return Err(Stop::Wait);
                }
                Ok(Flow::PeerTerminated) => return Err(Stop::PeerTerminated),
                Err(f) => return Err(Stop::Fail(f)),
            }
            used += chunk.len();
            Ok(())
        });
        match r {
            Ok(()) => Consumed::Continue(skb.len()),
            Err(s) => {
                stop = Some(s);
                Consumed::Stop(used)
            }
        }
    });
    // Everything before the waiting FPDU's payload was consumed, so TCP counts the mark from
    // where it starts. Until it is all queued, TCP does not wake this path for each segment
    // and ACKs each one at once: held unread, the FPDU would otherwise shrink the window TCP
    // may advertise, and TCP would delay its ACKs, which slows the peer most while it
    // recovers from a loss.
    sk.set_wakeup_mark(wakeup_mark);
    let close = match stop {
        Some(Stop::PeerTerminated) => true,
        // A Terminate is never answered with one: then the connection closes at once. A QP
        // that left RTS meanwhile is closing already.
        Some(Stop::Fail(f)) => lock(qp)
            .round(qp)
            .is_some_and(|mut r| !terminate(&mut r, f)),
        Some(Stop::Wait | Stop::Unreadable) | None => false,
    };
    if close {
        super::link_failed(qp);
    }
}

/// Whether the connection still takes data (in RTS, no Terminate sent or received).
fn receiving(inner: &QpInner) -> bool {
    inner.sess().is_some_and(|s| !s.terminating())
}

/// Queues a Terminate for `f` and stops the connection. Returns `false` when no Terminate is
/// sent because the offending segment is itself a Terminate (which is never answered with
/// one): the caller then closes the connection at once.
fn terminate(r: &mut Round<'_>, f: Fail) -> bool {
    let qp = r.qp;
    let e = f.err;
    let of_terminate = f
        .offending
        .as_ref()
        .and_then(|o| o.ddp.header())
        .is_some_and(|h| matches!(h, DdpHdr::Untagged(u) if u.qn == QN_TERMINATE));
    if of_terminate {
        kernel::pr_info_ratelimited!(
            "{}: QP {}: malformed Terminate from the peer (layer {} etype {} code {:#04x}), closing\n",
            qp.device().name(),
            qp.qpn(),
            e.layer() as u8,
            e.etype(),
            e.code()
        );
        r.owed.event = Some(QpEvent::Fatal);
        r.sess.term_sent = true;
        return false;
    }
    if e == TermError::Mpa(MpaCode::Crc) {
        qp.data().counters.inc(Counter::RxCrcErrors);
    }
    kernel::pr_info_ratelimited!(
        "{}: QP {}: protocol error, sending Terminate layer {} etype {} code {:#04x}\n",
        qp.device().name(),
        qp.qpn(),
        e.layer() as u8,
        e.etype(),
        e.code()
    );
    let access = matches!(e, TermError::RdmapProtection(_) | TermError::DdpTagged(_));
    r.owed.event = Some(if access {
        QpEvent::AccessError
    } else {
        QpEvent::Fatal
    });
    r.sess.term = Some(Terminate::for_error(e, f.offending.as_ref()));
    tx::kick(qp);
    true
}

/// What processing a chunk led to.
enum Flow {
    /// Go on reading.
    More,
    /// Stop reading after `at` bytes of the chunk: the current FPDU's payload is placed once
    /// all `need` bytes of its rest are queued, which the receive window guarantees can happen.
    Wait { at: usize, need: usize },
    /// The peer sent a Terminate: stop, close.
    PeerTerminated,
}

/// Feeds one contiguous chunk of the stream through the parser.
fn process(r: &mut Round<'_>, chunk: &[u8], ahead: &Ahead<'_, '_>) -> Result<Flow, Fail> {
    let qp = r.qp;
    let crc = CountedCrc32c::new(&qp.data().counters, Counter::RxCrcBytes);
    let mut input = chunk;
    loop {
        let stream = &mut r.sess.rx.stream;
        let out = stream.poll(input, &crc).map_err(|e| Fail {
            err: e.term(),
            offending: stream.offending(),
        })?;
        input = input.get(out.consumed..).unwrap_or(&[]);
        match out.event {
            RxEvent::NeedMore => return Ok(Flow::More),
            RxEvent::Header(info) => {
                let target = on_header(r, &info).map_err(|err| Fail {
                    err,
                    offending: Some(info.offending()),
                })?;
                r.sess.rx.cur = Some(Current {
                    info,
                    target,
                    placement: Placement::Undecided,
                });
            }
            RxEvent::Payload { len, offset } => {
                let at = chunk.len() - input.len();
                if let Decision::Wait { need } =
                    decide(&qp.data().counters, &mut r.sess.rx, ahead, ahead.at + at)
                {
                    return Ok(Flow::Wait { at, need });
                }
                let n = len.min(input.len());
                let (src, rest) = input.split_at(n);
                place(r, src, offset)?;
                input = rest;
            }
            RxEvent::SegmentDone => {
                qp.data().counters.inc(Counter::RxFpdus);
                unbounce(r)?;
                if on_done(r)? {
                    return Ok(Flow::PeerTerminated);
                }
            }
        }
    }
}

/// What [`decide`] asks of the reader.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Decision {
    /// Go on: the segment's placement is decided.
    Go,
    /// Stop before the payload and come back when `need` bytes from its start are queued.
    Wait { need: usize },
}

/// Picks how the current segment's payload is placed, before its first octet is: with CRC on,
/// checks the CRC ahead (`pos` is where the payload starts in `ahead.skb`).
///
/// An FPDU not all queued yet is waited for, unconsumed, when the receive window lets the peer
/// send all of the rest: then its CRC is checked ahead once it is complete, and its payload
/// copied once. Otherwise (a window too small, which waiting would never reopen) it goes
/// through the bounce buffer.
fn decide(counters: &Counters, rx: &mut RxState, ahead: &Ahead<'_, '_>, pos: usize) -> Decision {
    let Some(cur) = rx.cur.as_mut() else {
        return Decision::Go;
    };
    if cur.placement != Placement::Undecided {
        return Decision::Go;
    }
    let places = matches!(
        cur.target,
        Target::Tagged { .. } | Target::ReadResponse { .. } | Target::Recv { .. }
    );
    let Some(n) = rx.stream.lookahead_len().filter(|_| places) else {
        // With CRC on and Markers interleaved, the FPDU cannot be read ahead: hold it back.
        cur.placement = if places && rx.stream.config().crc {
            rx.bounced = 0;
            Placement::Bounce
        } else {
            // Nothing is placed, or CRC is off.
            Placement::Direct
        };
        return Decision::Go;
    };
    let queued = ahead.skb.queued_from(pos);
    if queued < n {
        if n - queued <= ahead.window {
            crate::knobs::count_rx_wait();
            return Decision::Wait { need: n };
        }
        rx.bounced = 0;
        cur.placement = Placement::Bounce;
        return Decision::Go;
    }
    let crc = CountedCrc32c::new(counters, Counter::RxCrcBytes);
    let body = n.saturating_sub(CRC_LEN);
    let mut reg = rx.stream.lookahead_crc();
    let mut trailer = [0u8; CRC_LEN];
    let mut seen = 0usize;
    let queued = ahead.skb.read_ahead(pos, n, |piece| -> Result {
        let in_body = body.saturating_sub(seen).min(piece.len());
        let (b, t) = piece.split_at(in_body);
        if !b.is_empty() {
            reg = crc.update(reg, b);
        }
        let at = (seen + in_body).saturating_sub(body);
        for (slot, byte) in trailer.iter_mut().skip(at).zip(t) {
            *slot = *byte;
        }
        seen += piece.len();
        Ok(())
    });
    cur.placement = match queued {
        Ok(true) if rx.stream.accept_lookahead(reg, trailer) => Placement::Direct,
        Ok(true) => Placement::Discard,
        Ok(false) | Err(_) => {
            rx.bounced = 0;
            Placement::Bounce
        }
    };
    Decision::Go
}

/// Validates a segment's header against the connection state and picks its target.
fn on_header(r: &mut Round<'_>, info: &SegmentInfo) -> Result<Target, TermError> {
    let qp = r.qp;
    let pd = qp.pd().id();
    let mut rtr = false;
    let sess = &mut *r.sess;
    if sess.rx.first {
        sess.rx.first = false;
        if sess.tx.await_rtr {
            rtr = check_first_fpdu(&sess.rx.negotiated, info)?.is_some();
            // The RTR arrived: the responder may transmit now.
            sess.tx.await_rtr = false;
            tx::kick(qp);
        }
    }
    let q = &mut *r.q;
    let ddp = &mut r.sess.rx.ddp;
    let len = info.payload_len;
    match (info.opcode, &info.hdr) {
        (Opcode::Write, DdpHdr::Tagged(h)) => {
            if len == 0 {
                return Ok(Target::Discard);
            }
            let mr = mem::lookup(qp.device(), h.stag)
                .ok_or(TermError::DdpTagged(DdpTagged::InvalidStag))?;
            mr.access(h.stag, pd, mem::RIGHTS_WRITE, h.to, u64::from(len), |_| {
                Ok::<(), core::convert::Infallible>(())
            })
            .map_err(|e| match e {
                MapError::Access(a) => a.tagged_sink_error(),
                MapError::Copy(never) => match never {},
            })?;
            Ok(Target::Tagged {
                mr,
                stag: h.stag,
                to: h.to,
            })
        }
        (Opcode::ReadResponse, DdpHdr::Tagged(h)) => {
            let o = q
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
            Ok(Target::ReadResponse {
                sink: o.sink,
                base: o.placed,
            })
        }
        (
            Opcode::Send | Opcode::SendSe | Opcode::SendInvalidate | Opcode::SendSeInvalidate,
            DdpHdr::Untagged(h),
        ) => {
            if rtr {
                ddp.check_untagged(h, 0, Some(0))
                    .map_err(TermError::DdpUntagged)?;
                return Ok(Target::Discard);
            }
            if info.opcode.invalidates() {
                // The STag to invalidate is checked before any payload is placed.
                mem::can_invalidate(qp.device(), pd, h.rsvd_ulp2)
                    .map_err(|_| TermError::RdmapProtection(RdmapProtection::CannotInvalidate))?;
            }
            if q.cur_recv.is_none() {
                // A new message: on a QP with an SRQ, take its receive now, atomically with
                // respect to the SRQ's other QPs. It is this message's from here on (flushed
                // with the QP if the segment turns out to be invalid).
                q.cur_recv = super::take_srq_recv(qp, r.owed);
                // A user QP's receives are in the ring user space writes.
                super::pull_user_rq(qp, q, r.owed);
            }
            let buf = match (&q.cur_recv, q.rq.front()) {
                (Some(e), _) | (None, Some(e)) => recv_len(e),
                (None, None) => None,
            };
            let p = ddp
                .check_untagged(h, len, buf)
                .map_err(TermError::DdpUntagged)?;
            if q.cur_recv.is_none() {
                q.cur_recv = q.rq.pop();
            }
            Ok(Target::Recv { mo: p.offset })
        }
        (Opcode::ReadRequest, DdpHdr::Untagged(h)) => {
            let rr = info.read_request.ok_or(TermError::RdmapCatastrophic)?;
            let room = q.irq.len() < r.ird as usize;
            ddp.check_untagged(h, 0, room.then_some(0))
                .map_err(TermError::DdpUntagged)?;
            // A Read Response to a wrapping sink could never be sent: refused here, where the
            // Terminate can still copy the request's headers.
            rr.check_sink()?;
            let src = if rr.size == 0 {
                None
            } else {
                let mr = mem::lookup(qp.device(), rr.src_stag)
                    .ok_or(TermError::RdmapProtection(RdmapProtection::InvalidStag))?;
                mr.check_read_source(rr.src_stag, pd, rr.src_to, u64::from(rr.size))
                    .map_err(AccessError::read_source_error)?;
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
            ddp.check_untagged(h, 0, Some(0))
                .map_err(TermError::DdpUntagged)?;
            Ok(Target::Terminate)
        }
        _ => Err(TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode)),
    }
}

/// Counts `n` payload octets of `qp` received, placed through the bounce buffer if `bounced`.
fn count_rx_payload(qp: &Qp<Rsiw>, n: usize, bounced: bool) {
    let c = &qp.data().counters;
    // CAST: `usize` is at most 64 bits wide.
    let n = n as u64;
    c.add(Counter::RxPayloadBytes, n);
    if bounced {
        c.add(Counter::RxPayloadBouncedBytes, n);
    }
}

/// A receive work request's buffers.
fn recv_sges(r: &RecvEntry) -> &[Sge] {
    &r.sges[..usize::from(r.num_sge).min(r.sges.len())]
}

/// Total length of a receive work request's buffers.
fn recv_len(r: &RecvEntry) -> Option<u32> {
    mem::sges_len(recv_sges(r))
}

/// Copies payload octets into the start of one piece of target memory. The target is the
/// consumer's: it is written through [`KernelRange::write`], never borrowed as a slice.
type Copier<'a> = dyn FnMut(&[u8], &KernelRange) -> Result<(), TermError> + 'a;

/// Copies the head of `src` into `dst` with `copy` and advances `src` past it.
fn copy_into(copy: &mut Copier<'_>, src: &mut &[u8], dst: KernelRange) -> Result<(), TermError> {
    let n = dst.len().min(src.len());
    let (now, rest) = src.split_at(n);
    copy(now, &dst)?;
    *src = rest;
    Ok(())
}

/// An internal error: the connection ends with a catastrophic-error Terminate.
fn catastrophic() -> Fail {
    Fail {
        err: TermError::RdmapCatastrophic,
        offending: None,
    }
}

/// Places payload octets `src` at `offset` of the current segment's payload, as its
/// [`Placement`] says.
fn place(r: &mut Round<'_>, src: &[u8], offset: u32) -> Result<(), Fail> {
    let qp = r.qp;
    let crc = CountedCrc32c::new(&qp.data().counters, Counter::RxCrcBytes);
    let RxState {
        stream,
        cur,
        bounce,
        bounced,
        ..
    } = &mut r.sess.rx;
    let cur = cur.as_ref().ok_or_else(catastrophic)?;
    let offending = Some(cur.info.offending());
    let places = matches!(
        cur.target,
        Target::Tagged { .. } | Target::ReadResponse { .. } | Target::Recv { .. }
    );
    let res = match cur.placement {
        _ if !places => stream.consume_payload(src, &crc).map_err(|e| e.term()),
        Placement::Discard => stream.consume_payload(src, &crc).map_err(|e| e.term()),
        Placement::Bounce => {
            crate::knobs::count_rx_payload(true, src.len());
            count_rx_payload(qp, src.len(), true);
            let end = bounced.saturating_add(src.len());
            match bounce.get_mut(*bounced..end) {
                Some(dst) => {
                    *bounced = end;
                    stream.copy_payload(src, dst, &crc).map_err(|e| e.term())
                }
                None => Err(TermError::RdmapCatastrophic),
            }
        }
        Placement::Direct | Placement::Undecided => {
            crate::knobs::count_rx_payload(false, src.len());
            count_rx_payload(qp, src.len(), false);
            // The CRC runs over the wire octets `s`, which only rsiw holds; the copy follows.
            let mut copy = |s: &[u8], d: &KernelRange| {
                stream.consume_payload(s, &crc).map_err(|e| e.term())?;
                d.write(s).map_err(|_| TermError::DdpCatastrophic)
            };
            place_in_target(
                qp,
                &cur.target,
                r.q.cur_recv.as_ref(),
                src,
                offset,
                &mut copy,
            )
        }
    };
    res.map_err(|err| Fail { err, offending })
}

/// At the end of a bounced segment, whose CRC just checked out: places the held payload.
fn unbounce(r: &mut Round<'_>) -> Result<(), Fail> {
    let qp = r.qp;
    let rx = &mut r.sess.rx;
    let Some(cur) = rx.cur.as_ref().filter(|c| c.placement == Placement::Bounce) else {
        return Ok(());
    };
    let mut copy = |s: &[u8], d: &KernelRange| d.write(s).map_err(|_| TermError::DdpCatastrophic);
    let held = rx.bounce.get(..rx.bounced).unwrap_or(&[]);
    let res = place_in_target(qp, &cur.target, r.q.cur_recv.as_ref(), held, 0, &mut copy);
    let offending = Some(cur.info.offending());
    rx.bounced = 0;
    res.map_err(|err| Fail { err, offending })
}

/// The Terminate for a failed placement into our own sink (a Read's or a receive's): the copy's
/// own, or a catastrophic one when the consumer's memory is no longer accessible.
fn local_sink_error(e: MapError<TermError>) -> TermError {
    match e {
        MapError::Copy(e) => e,
        MapError::Access(_) => TermError::DdpCatastrophic,
    }
}

/// Copies `src` to `offset` of the payload of a segment bound for `target`.
fn place_in_target(
    qp: &Qp<Rsiw>,
    target: &Target,
    recv: Option<&RecvEntry>,
    src: &[u8],
    offset: u32,
    copy: &mut Copier<'_>,
) -> Result<(), TermError> {
    let pd = qp.pd().id();
    let mut rest = src;
    let len = src.len() as u64;
    match target {
        Target::Tagged { mr, stag, to } => {
            let at = to.checked_add(u64::from(offset)).unwrap_or(u64::MAX);
            mr.access(*stag, pd, mem::RIGHTS_WRITE, at, len, |r| {
                copy_into(copy, &mut rest, r)
            })
            .map_err(|e| match e {
                MapError::Access(a) => a.tagged_sink_error(),
                MapError::Copy(e) => e,
            })
        }
        Target::ReadResponse { sink, base } => {
            let off = u64::from(*base) + u64::from(offset);
            mem::walk_sges(
                qp.device(),
                pd,
                core::slice::from_ref(sink),
                mem::RIGHTS_LOCAL_WRITE,
                off,
                len,
                |_, r| copy_into(copy, &mut rest, r),
            )
            .map_err(local_sink_error)
        }
        Target::Recv { mo } => {
            // `on_header` took the receive before it chose this target.
            let recv = recv.ok_or(TermError::RdmapCatastrophic)?;
            let off = u64::from(*mo) + u64::from(offset);
            mem::walk_sges(
                qp.device(),
                super::recv_pd(qp),
                recv_sges(recv),
                mem::RIGHTS_LOCAL_WRITE,
                off,
                len,
                |_, r| copy_into(copy, &mut rest, r),
            )
            .map_err(local_sink_error)
        }
        // Nothing of these is placed.
        _ => Ok(()),
    }
}

/// The current segment is complete and its CRC checked out: it takes effect. Returns whether
/// it was the peer's Terminate.
fn on_done(r: &mut Round<'_>) -> Result<bool, Fail> {
    let qp = r.qp;
    let Some(cur) = r.sess.rx.cur.take() else {
        return Ok(false);
    };
    let (q, owed) = (&mut *r.q, &mut *r.owed);
    let offending = Some(cur.info.offending());
    let fail = |err| Fail { err, offending };
    let last = cur.info.hdr.last();
    match cur.target {
        Target::Discard | Target::Tagged { .. } => {}
        Target::ReadResponse { .. } => {
            // `on_header` checked the segment against the head of the ORQ, which only this
            // path removes.
            let Some(o) = q.orq.front_mut() else {
                return Err(fail(TermError::RdmapCatastrophic));
            };
            o.placed = o.placed.saturating_add(cur.info.payload_len);
            let o = *o;
            if last {
                q.orq.pop();
                if !o.rtr {
                    let mut status = WcStatus::Success;
                    if o.invalidate_local {
                        let pd = qp.pd().id();
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
                        owed.send.add(cq::queue(qp.send_cq(), wc, false));
                    }
                }
                // An ORD slot is free, a fence may lift.
                tx::kick(qp);
            }
        }
        Target::Recv { mo } => {
            if last {
                let mut invalidated = None;
                if cur.info.opcode.invalidates() {
                    let stag = match cur.info.hdr {
                        DdpHdr::Untagged(h) => h.rsvd_ulp2,
                        DdpHdr::Tagged(_) => 0,
                    };
                    let pd = qp.pd().id();
                    if mem::invalidate(qp.device(), pd, stag).is_err() {
                        // The receive stays: it is flushed with the QP.
                        return Err(fail(TermError::RdmapProtection(
                            RdmapProtection::CannotInvalidate,
                        )));
                    }
                    invalidated = Some(stag);
                }
                let Some(recv) = q.cur_recv.take() else {
                    return Err(fail(TermError::RdmapCatastrophic));
                };
                let wc = WorkCompletion {
                    wr_id: recv.wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: mo.saturating_add(cur.info.payload_len),
                    qp: qp.handle(),
                    invalidated_rkey: invalidated,
                };
                let solicited = cur.info.opcode.solicited();
                owed.recv.add(cq::queue(qp.recv_cq(), wc, solicited));
            }
        }
        Target::ReadRequest(entry) => {
            if q.irq.push(entry).is_err() {
                return Err(fail(TermError::DdpUntagged(DdpUntagged::NoBuffer)));
            }
            tx::kick(qp);
        }
        Target::Terminate => {
            if let Some(t) = cur.info.terminate {
                let c = t.ctrl;
                qp.data()
                    .counters
                    .inc(stats::terminate_counter(false, c.layer));
                kernel::pr_info_ratelimited!(
                    "{}: QP {}: peer sent Terminate layer {} etype {} code {:#04x}\n",
                    qp.device().name(),
                    qp.qpn(),
                    c.layer,
                    c.etype,
                    c.code
                );
            }
            owed.event = Some(QpEvent::Fatal);
            // Nothing more is sent after a Terminate was received (RFC 5040 §5.3).
            r.sess.term_sent = true;
            return Ok(true);
        }
    }
    Ok(false)
}
