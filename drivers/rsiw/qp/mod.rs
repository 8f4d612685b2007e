// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: creation limits, the RDMAP state machine as verbs see it, the send and
//! receive queues, and flushing.
//!
//! Work requests posted in RTS wait in the send queue for the transmit path ([`tx`]), which
//! runs them in order (local registration and invalidation included). A work request stays at
//! the head of its queue until it completes, so entering ERROR flushes everything not yet
//! completed, in order, under the same lock as the data path. Posts in ERROR complete at once
//! with `IB_WC_WR_FLUSH_ERR`, after everything queued earlier, which is what `ib_drain_qp`
//! relies on.
//!
//! One lock ([`QpData::inner`]) covers the queues, the connection's protocol state and every
//! access to consumer memory: the receive path places data and the transmit path copies it out
//! while holding it (interrupts off), so once a work request is flushed its buffers are never
//! touched again.
//!
//! A QP created on a shared receive queue ([`crate::srq`]) has no receive queue of its own: the
//! receive path takes a work request from the SRQ when a message starts arriving, under the
//! QP's lock and then the SRQ's (the lock order). That work request then belongs to the QP
//! (it is flushed with it); the SRQ's queued ones are not. Entering ERROR reports
//! `IB_EVENT_QP_LAST_WQE_REACHED` once the receive being filled is flushed, which is what
//! `ib_drain_qp` waits for on such a QP.
//!
//! A user QP's send and receive queues are rings user space writes itself ([`crate::uabi`]): the
//! doorbell and the transmit work copy new send entries into the send queue, the receive path
//! copies receive entries when it needs one, and both are flushed from the rings on ERROR.
//!
//! Lock order, outer first: the transmit outbox ([`QpData::outbox`]) or the connection manager's
//! phase, the socket lock, the QP lock; under it the SRQ's, a CQ's, the STag table's or an MR's
//! lock, or the zero-copy release log. Of these only the log nests in another (an MR's, when the
//! transmit path takes a token while it walks a region). Consumer upcalls wait for the QP lock
//! to be dropped.

#![deny(unsafe_code)]

use crate::{
    cq,
    device::Rsiw,
    mem,
    proto::mpa::RtrType,
    srq::SrqQueue,
    uabi,
    wqe::{
        copy_sges, InlineData, RecvEntry, SendEntry, SendKind, MAX_INLINE, MAX_QP_WR, MAX_SGE,
        MAX_SGE_RD, NO_SGE,
    },
};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

pub(crate) mod link;
mod rx;
mod tx;
use kernel::{
    c_str,
    irqlock::{SpinLockIrq, SpinLockIrqBackend},
    new_mutex, new_spinlock_irq,
    prelude::*,
    rdma::{
        enotconn, eopnotsupp,
        qp::{
            Qp, QpCap, QpEvent, QpInitAttr, QpModify, QpQuery, QpState, QpWork, RecvWr, SendOp,
            SendWr, Sge,
        },
        res::ResDetails,
        srq::{Srq, SrqEvent},
        udata::UserData,
        verbs::{PdId, WcOpcode, WcStatus, WorkCompletion},
    },
    sync::lock::Guard,
    sync::{Arc, Mutex},
};

/// Most QPs per device.
pub(crate) const MAX_QP: u32 = 1 << 16;
/// Most outstanding inbound (IRD) and outbound (ORD) RDMA Reads.
pub(crate) const MAX_IRD_ORD: u32 = 128;

/// An outstanding RDMA Read we sent (outbound read queue, bounded by the ORD).
#[derive(Clone, Copy)]
pub(crate) struct OrqEntry {
    pub(crate) wr_id: u64,
    pub(crate) signaled: bool,
    /// The local sink (the work request's only SGE); its lkey is the sink STag on the wire.
    pub(crate) sink: Sge,
    pub(crate) invalidate_local: bool,
    /// The zero-length Read sent as the peer-to-peer RTR: completes without a work completion.
    pub(crate) rtr: bool,
    /// Bytes of the Read Response placed so far.
    pub(crate) placed: u32,
}

/// An RDMA Read Request the peer sent, waiting for (or in) its response (inbound read queue,
/// bounded by the IRD).
#[derive(Clone)]
pub(crate) struct IrqEntry {
    pub(crate) sink_stag: u32,
    pub(crate) sink_to: u64,
    pub(crate) size: u32,
    pub(crate) src_stag: u32,
    pub(crate) src_to: u64,
    /// The source region, checked when the request arrived (`None` for zero length).
    pub(crate) src: Option<Arc<mem::MrShared>>,
}

/// A QP's state behind [`QpData::inner`], a spinlock that disables interrupts: the queues, the
/// connection and the upcalls owed. Taken by verbs (posts from any context a kernel ULP posts
/// from, its completion handlers included; modify, query, destroy), by the receive path
/// (`data_ready` in softirq with the socket locked, or its work item), by the transmit work item
/// and by the connection manager's work item (attach, detach).
struct QpInner {
    state: QpState,
    access: u32,
    ord: u32,
    ird: u32,
    q: Queues,
    /// The connection and its wire state.
    // INVARIANT: `Some` exactly while `state` is RTS: [`link::attach`] sets both, and the QP
    // leaves RTS only through [`enter_error`], which takes it.
    conn: Option<Conn>,
    /// The receive work item is queued or running ([`rx::receive_or_defer`]).
    rx_scheduled: bool,
    /// Data arrived while it was: it reads again before it ends.
    rx_again: bool,
    owed: Owed,
}

/// A QP's work queues (in [`QpInner`]).
struct Queues {
    sq: crate::ring::Ring<SendEntry>,
    /// Send work requests that are done but wait, in order, for TCP to let go of (or copy)
    /// pages sent by reference before they complete (they still count against the send
    /// queue's size).
    sent: crate::ring::Ring<SentEntry>,
    /// The receive queue (unused, one slot, with an SRQ).
    rq: crate::ring::Ring<RecvEntry>,
    orq: crate::ring::Ring<OrqEntry>,
    irq: crate::ring::Ring<IrqEntry>,
    /// The receive work request a multi-segment Send is being placed into (taken from the
    /// head of `rq`, or from the SRQ; flushed first on ERROR).
    cur_recv: Option<RecvEntry>,
    /// A user QP's positions in its rings: the next send and receive entries to take.
    user_sq_next: u32,
    user_rq_next: u32,
}

/// What completions and state changes under the QP lock owe once it is dropped ([`Locked`]
/// delivers it).
#[derive(Default)]
struct Owed {
    /// Consumer upcalls of completions queued.
    send: cq::Upcalls,
    recv: cq::Upcalls,
    /// An asynchronous event to report.
    event: Option<QpEvent>,
    /// Taking a receive from the SRQ crossed its limit: report `IB_EVENT_SRQ_LIMIT_REACHED`.
    srq_limit: bool,
    /// A session that ended under the lock, dropped once the lock is released: its bounce
    /// buffer may be vmalloc memory, and its zero-copy registration waits for notifications.
    retired: Option<KBox<Session>>,
}

/// A QP's connection: from RTS until the QP leaves it.
struct Conn {
    link: link::Link,
    /// Boxed: every lock round carries what it owes, a retired session among it, on the stack.
    sess: KBox<Session>,
}

/// One round of the data path under the QP lock of a connected QP: the queues, the
/// connection's wire state and the upcalls owed, borrowed apart once (see [`QpInner::round`]).
struct Round<'a> {
    qp: &'a Qp<Rsiw>,
    q: &'a mut Queues,
    link: &'a link::Link,
    sess: &'a mut Session,
    owed: &'a mut Owed,
    ord: u32,
    ird: u32,
}

impl QpInner {
    /// The round of a connected QP (in RTS), or `None`.
    fn round<'a>(&'a mut self, qp: &'a Qp<Rsiw>) -> Option<Round<'a>> {
        let Conn { link, sess } = self.conn.as_mut()?;
        Some(Round {
            qp,
            q: &mut self.q,
            link,
            sess,
            owed: &mut self.owed,
            ord: self.ord,
            ird: self.ird,
        })
    }

    /// The connection's wire state, in RTS.
    fn sess(&self) -> Option<&Session> {
        self.conn.as_ref().map(|c| &*c.sess)
    }

    /// The connection's link, in RTS.
    fn link(&self) -> Option<&link::Link> {
        self.conn.as_ref().map(|c| &c.link)
    }
}

impl Round<'_> {
    /// Ends the send work request at the head of the send queue (successfully, or with
    /// `status`): it completes, if signalled or failed, once the session reached its
    /// [`Session::sent_mark`] of now, and after the work requests before it.
    fn complete_sq_head(&mut self, status: WcStatus) {
        let Some(e) = self.q.sq.pop() else { return };
        let sent = SentEntry {
            wr_id: e.wr_id,
            opcode: e.op.wc_opcode(),
            signaled: e.signaled,
            status,
            wait: self.sess.sent_mark(),
        };
        if let Err(sent) = self.q.sent.push(sent) {
            // Cannot happen: `post_send` keeps both queues within the send queue's size.
            // Complete it at once rather than lose it.
            emit_sent(self.qp, self.owed, sent);
        }
        reap_sent(self.qp, self.q, self.owed, self.sess.released());
    }
}

/// Protocol state of one connection, created when the QP enters RTS.
pub(crate) struct Session {
    pub(crate) tx: tx::TxState,
    pub(crate) rx: rx::RxState,
    /// A Terminate to send; once set, nothing else is sent and nothing more is received.
    pub(crate) term: Option<crate::proto::rdmap::Terminate>,
    /// The Terminate went out (or cannot): the connection is being aborted.
    pub(crate) term_sent: bool,
    /// Zero-copy transmission: the release tracking and its registration (`None` when the
    /// registration could not be made: then everything is sent as copies).
    pub(crate) zc: Option<tx::ZcSession>,
    /// The number of the transmit round being built (from 1).
    pub(crate) tx_round: u64,
    /// Every round up to this one was handed to TCP. Without `zc`, a done work request waits
    /// for the round it ended in: TCP copies its payload during that round's `sendmsg`.
    pub(crate) tx_rounds_sent: u64,
}

impl Session {
    /// Whether a Terminate is queued or went out (either way): the connection is ending, and
    /// nothing more is sent or received on it.
    pub(crate) fn terminating(&self) -> bool {
        self.term.is_some() || self.term_sent
    }

    /// What a send work request that ends now waits for: the zero-copy sends issued so far
    /// (its own last bytes among them), or without zero copy the round being built.
    fn sent_mark(&self) -> u64 {
        match &self.zc {
            Some(z) => z.issued(),
            None => self.tx_round,
        }
    }

    /// How far [`Session::sent_mark`]s are reached: the zero-copy sends released, or the
    /// rounds handed to TCP.
    fn released(&self) -> u64 {
        match &self.zc {
            Some(z) => z.released(),
            None => self.tx_rounds_sent,
        }
    }
}

/// A send work request that is done, waiting to complete.
#[derive(Clone, Copy)]
pub(crate) struct SentEntry {
    wr_id: u64,
    opcode: WcOpcode,
    signaled: bool,
    status: WcStatus,
    /// Completes once every zero-copy send up to this sequence number was released (without
    /// zero copy: once the transmit rounds up to this number were sent).
    wait: u64,
}

/// The QP state locked; on drop, the lock is released first and then the consumer upcalls that
/// completions queued meanwhile call for are delivered, so a consumer's handler never runs
/// under the QP lock (it may post to this QP).
struct Locked<'a> {
    // Fields drop in order: the guard (unlocking) before the upcalls are delivered.
    guard: Guard<'a, QpInner, SpinLockIrqBackend>,
    after: Deliver<'a>,
}

/// Upcalls to deliver once the QP lock is released.
struct Deliver<'a> {
    qp: &'a Qp<Rsiw>,
    owed: Owed,
}

/// Locks `qp`'s state.
fn lock(qp: &Qp<Rsiw>) -> Locked<'_> {
    Locked {
        guard: qp.data().inner.lock(),
        after: Deliver {
            qp,
            owed: Owed::default(),
        },
    }
}

impl core::ops::Deref for Locked<'_> {
    type Target = QpInner;

    fn deref(&self) -> &QpInner {
        &self.guard
    }
}

impl core::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut QpInner {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.after.owed = core::mem::take(&mut self.guard.owed);
    }
}

impl Drop for Deliver<'_> {
    fn drop(&mut self) {
        let owed = &mut self.owed;
        owed.send.deliver(self.qp.send_cq());
        owed.recv.deliver(self.qp.recv_cq());
        if let Some(e) = owed.event.take() {
            self.qp.report_event(e);
        }
        if owed.srq_limit {
            if let Some(srq) = self.qp.srq() {
                srq.report_event(SrqEvent::LimitReached);
            }
        }
    }
}

/// The rings of a user QP, which its context maps.
pub(crate) struct UserQueues {
    sq: uabi::SqRing,
    /// `None` on a QP without receives.
    rq: Option<uabi::RqRing>,
}

/// What a user QP's creation tells libsiw (`struct siw_uresp_create_qp`, less the QP number).
pub(crate) struct UserQpResponse {
    num_sqe: u32,
    num_rqe: u32,
    sq_key: u64,
    rq_key: u64,
}

impl UserQpResponse {
    /// The response for QP number `qpn`.
    pub(crate) fn bytes(&self, qpn: u32) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..4].copy_from_slice(&qpn.to_ne_bytes());
        b[4..8].copy_from_slice(&self.num_sqe.to_ne_bytes());
        b[8..12].copy_from_slice(&self.num_rqe.to_ne_bytes());
        b[16..24].copy_from_slice(&self.sq_key.to_ne_bytes());
        b[24..].copy_from_slice(&self.rq_key.to_ne_bytes());
        b
    }
}

/// Per-QP state.
#[pin_data]
pub(crate) struct QpData {
    cap: QpCap,
    sig_all: bool,
    /// A user QP's rings (`None` for a kernel consumer's QP).
    user: Option<UserQueues>,
    /// The shared receive queue the QP takes its receives from, held for the QP's lifetime.
    srq: Option<Arc<SrqQueue>>,
    #[pin]
    inner: SpinLockIrq<QpInner>,
    /// The transmit path's buffer and the round TCP has not taken all of yet: FPDUs are built
    /// here under `inner`, then sent without it. Only the transmit work item locks it.
    #[pin]
    outbox: Mutex<tx::Outbox>,
    /// Transmits ([`tx::kick`]).
    #[pin]
    tx_work: QpWork<Rsiw>,
    /// Receives bulk data ([`rx::receive_or_defer`]).
    #[pin]
    rx_work: QpWork<Rsiw>,
    /// What the data path counted for `rdma statistic` ([`crate::stats`]).
    pub(crate) counters: crate::stats::Counters,
    /// The QP counter (`rdma statistic qp`) the QP is bound to (0: none), `counters` as they
    /// were when it was bound, and what it counted while bound to counters it left. Written
    /// under the core's lock of the counter and the device's QP table lock; read under either.
    pub(crate) counter_id: AtomicU32,
    pub(crate) counter_base: crate::stats::Counters,
    pub(crate) counted_bound: crate::stats::Counters,
    /// The `iw_cm` id of the attached connection ([`link::Link::cm_id`], as an integer; 0 while
    /// no connection is attached). Written under `inner` when the link comes and goes; read
    /// without it, under the device's QP table lock, to find the QP of an id.
    pub(crate) cm_id: AtomicUsize,
}

/// What `d`'s QP counted while bound to no QP counter: the port's own share of its counts.
/// Called under the device's QP table lock.
pub(crate) fn unbound_counts(d: &QpData) -> crate::stats::Values {
    // While bound, the counts since the base are the counter's.
    let own = if d.counter_id.load(Ordering::Relaxed) != 0 {
        d.counter_base.snapshot()
    } else {
        d.counters.snapshot()
    };
    crate::stats::difference(&own, &d.counted_bound.snapshot())
}

/// TCP took the Terminate of `qp`'s connection (or there was one to send and it could not be
/// built): the link's owner (the connection manager) closes the connection once it is on the
/// wire.
///
/// May be called from any context.
pub(crate) fn link_terminated(qp: &Qp<Rsiw>) {
    if let Some(owner) = link_owner(qp.data()) {
        owner.terminated();
    }
}

/// The data path hit a fatal error and sends no Terminate (it received one, or the socket
/// failed): the link's owner aborts the connection.
///
/// May be called from any context.
pub(crate) fn link_failed(qp: &Qp<Rsiw>) {
    if let Some(owner) = link_owner(qp.data()) {
        owner.failed();
    }
}

/// The owner of `d`'s link, taken out of the QP lock so that it is called without it.
fn link_owner(d: &QpData) -> Option<Arc<dyn link::LinkOwner>> {
    d.inner.lock().link().map(|l| l.owner.clone())
}

/// Validates a create request, fits `attr.cap` to what the QP provides, and builds its data.
/// `srq` is the shared receive queue of a QP created with one.
/// A user QP's creation also returns what to tell libsiw once its number is known.
pub(crate) fn create(
    attr: &mut QpInitAttr,
    srq: Option<&Srq<Rsiw>>,
    udata: &UserData<'_>,
) -> Result<(impl PinInit<QpData, Error>, Option<UserQpResponse>)> {
    if !attr.rc || attr.create_flags != 0 {
        return Err(eopnotsupp());
    }
    let srq = match (attr.has_srq, srq) {
        (true, Some(s)) => Some(crate::srq::queue(s).clone()),
        (false, None) => None,
        _ => return Err(EINVAL),
    };
    let c = &mut attr.cap;
    if srq.is_some() {
        // The receive queue's sizes are the SRQ's; the QP's own are ignored.
        c.max_recv_wr = 0;
        c.max_recv_sge = 0;
    }
    // A user QP's entries have the ABI's room for SGEs and inline data.
    let (max_sge, max_inline) = if attr.user {
        (uabi::MAX_SGE, uabi::MAX_INLINE)
    } else {
        (MAX_SGE, MAX_INLINE)
    };
    if c.max_send_wr == 0
        || c.max_send_wr > MAX_QP_WR
        || c.max_recv_wr > MAX_QP_WR
        || c.max_send_sge > max_sge
        || c.max_recv_sge > max_sge
        || c.max_inline_data > max_inline
    {
        return Err(EINVAL);
    }
    // Report what the QP really honours (C siw leaves the request unchanged).
    c.max_send_sge = max_sge;
    if srq.is_none() {
        c.max_recv_sge = max_sge;
    }
    c.max_inline_data = max_inline;
    let (user, response) = if attr.user {
        // libsiw indexes the rings modulo their sizes; powers of two, as in the C siw.
        // Both are at most `MAX_QP_WR`, a power of two.
        c.max_send_wr = c.max_send_wr.next_power_of_two();
        if c.max_recv_wr != 0 {
            c.max_recv_wr = c.max_recv_wr.next_power_of_two();
        }
        let (sq, sq_key) = uabi::SqRing::new(udata, c.max_send_wr)?;
        let (rq, rq_key) = match c.max_recv_wr {
            0 => (None, 0),
            n => {
                let (r, k) = uabi::RqRing::new(udata, n)?;
                (Some(r), k)
            }
        };
        let response = UserQpResponse {
            num_sqe: c.max_send_wr,
            num_rqe: c.max_recv_wr,
            sq_key,
            rq_key,
        };
        (Some(UserQueues { sq, rq }), Some(response))
    } else {
        (None, None)
    };
    let cap = *c;
    // The queues are allocated here (fallibly); the rest of the state is built in place by the
    // initializer, so that no caller's frame holds a whole `QpInner` (sessions are large) on
    // the way: ULPs create QPs deep in their own call chains.
    let sq = crate::ring::Ring::new(cap.max_send_wr)?;
    let sent = crate::ring::Ring::new(cap.max_send_wr)?;
    let rq = crate::ring::Ring::new(cap.max_recv_wr)?;
    let orq = crate::ring::Ring::new(MAX_IRD_ORD)?;
    let irq = crate::ring::Ring::new(MAX_IRD_ORD)?;
    let sig_all = attr.sig_all;
    let outbox = tx::Outbox::new()?;
    let init = try_pin_init!(QpData {
        cap,
        sig_all,
        user,
        srq,
        inner <- new_spinlock_irq!(
            QpInner {
                // iWARP's one idle state, which verbs call INIT: a new QP reports INIT, as
                // the C siw's do and rdma-core's tests expect of an RNIC.
                state: QpState::Init,
                access: 0,
                ord: MAX_IRD_ORD,
                ird: MAX_IRD_ORD,
                q: Queues {
                    sq,
                    sent,
                    rq,
                    orq,
                    irq,
                    cur_recv: None,
                    user_sq_next: 0,
                    user_rq_next: 0,
                },
                conn: None,
                rx_scheduled: false,
                rx_again: false,
                owed: Owed::default(),
            },
            "rsiw::QpData::inner"
        ),
        outbox <- new_mutex!(outbox, "rsiw::QpData::outbox"),
        tx_work <- kernel::new_qp_work!(tx::run, "rsiw::QpData::tx_work"),
        rx_work <- kernel::new_qp_work!(rx::receive_work, "rsiw::QpData::rx_work"),
        counters: crate::stats::Counters::new(),
        counter_id: AtomicU32::new(0),
        counter_base: crate::stats::Counters::new(),
        counted_bound: crate::stats::Counters::new(),
        cm_id: AtomicUsize::new(0),
    });
    Ok((init, response))
}

fn flush_wc(qp: &Qp<Rsiw>, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::WrFlushErr,
        opcode,
        byte_len: 0,
        qp: qp.handle(),
        invalidated_rkey: None,
    }
}

/// Moves the QP to ERROR and completes everything not yet completed with
/// `IB_WC_WR_FLUSH_ERR`, oldest first: outstanding Reads (posted before anything still in the
/// send queue), then the send queue; the receive being filled, then the receive queue.
///
/// Returns the link of the connection the QP had, for the caller to drop (or hand back to its
/// owner) once the lock is released.
fn enter_error(qp: &Qp<Rsiw>, inner: &mut QpInner) -> Option<link::Link> {
    let was_error = inner.state == QpState::Error;
    inner.state = QpState::Error;
    let conn = inner.conn.take();
    let (q, owed) = (&mut inner.q, &mut inner.owed);
    while let Some(e) = q.orq.pop() {
        if !e.rtr {
            let up = cq::queue(
                qp.send_cq(),
                flush_wc(qp, e.wr_id, WcOpcode::RdmaRead),
                false,
            );
            owed.send.add(up);
        }
    }
    q.irq.clear();
    // Done but unreleased work requests first: they are older than the queued ones.
    while let Some(e) = q.sent.pop() {
        let mut wc = flush_wc(qp, e.wr_id, e.opcode);
        if e.status != WcStatus::Success {
            wc.status = e.status;
        }
        let up = cq::queue(qp.send_cq(), wc, false);
        owed.send.add(up);
    }
    while let Some(e) = q.sq.pop() {
        let up = cq::queue(qp.send_cq(), flush_wc(qp, e.wr_id, e.op.wc_opcode()), false);
        owed.send.add(up);
    }
    // What user space posted that was not taken yet.
    pull_user_sq(qp, QpState::Error, q, owed);
    if let Some(e) = q.cur_recv.take() {
        let up = cq::queue(qp.recv_cq(), flush_wc(qp, e.wr_id, WcOpcode::Recv), false);
        owed.recv.add(up);
    }
    while let Some(e) = q.rq.pop() {
        let up = cq::queue(qp.recv_cq(), flush_wc(qp, e.wr_id, WcOpcode::Recv), false);
        owed.recv.add(up);
    }
    flush_user_rq(qp, q, owed);
    if !was_error && qp.data().srq.is_some() {
        owed.event = Some(QpEvent::LastWqeReached);
    }
    let Conn { link, sess } = conn?;
    // Once in ERROR no session is made before the lock is dropped, so none is pending.
    owed.retired = Some(sess);
    Some(link)
}

/// Applies a consumer's `ib_modify_qp`.
pub(crate) fn modify(qp: &Qp<Rsiw>, m: &QpModify) -> Result {
    if m.unknown_bits != 0 {
        return Err(eopnotsupp());
    }
    if m.max_rd_atomic.is_some_and(|v| v > MAX_IRD_ORD)
        || m.max_dest_rd_atomic.is_some_and(|v| v > MAX_IRD_ORD)
    {
        return Err(EINVAL);
    }
    let mut inner = lock(qp);
    if m.cur_state.is_some_and(|s| s != inner.state) {
        return Err(EINVAL);
    }
    // A connection the ULP closes (SQD: graceful, ERROR: abortive); the connection manager
    // is told once the lock is dropped.
    let mut closed = None;
    if let Some(to) = m.state {
        let from = inner.state;
        let graceful = to == QpState::Sqd;
        match (from, to) {
            (_, QpState::Error) => closed = enter_error(qp, &mut inner).map(|l| (l, graceful)),
            (QpState::Reset | QpState::Init, QpState::Init)
            | (QpState::Init | QpState::Rtr, QpState::Rtr) => {
                inner.state = to;
            }
            (QpState::Error | QpState::Reset | QpState::Init, QpState::Reset) => {
                inner.state = QpState::Reset
            }
            // RTS is reached only through the connection manager; the consumer closes a
            // connected QP with SQD (graceful) or ERROR (abortive). Without a connection, a
            // graceful close is immediate.
            (QpState::Rts, QpState::Sqd) => {
                closed = enter_error(qp, &mut inner).map(|l| (l, graceful))
            }
            _ => return Err(EINVAL),
        }
        if inner.state == QpState::Error {
            // The transmit work drops a round TCP has not taken yet.
            tx::kick(qp);
        }
    }
    if let Some(a) = m.access_flags {
        inner.access = a;
    }
    if let Some(ord) = m.max_rd_atomic {
        inner.ord = ord;
    }
    if let Some(ird) = m.max_dest_rd_atomic {
        inner.ird = ird;
    }
    drop(inner);
    if let Some((l, graceful)) = closed {
        l.owner.ulp_closed(graceful);
    }
    Ok(())
}

/// What `rdma resource show qp -dd` shows of a connected QP: what MPA negotiated, the segment
/// sizes in use and the socket's addresses. Nothing for a QP without a connection.
pub(crate) fn fill_res(qp: &Qp<Rsiw>, d: &mut ResDetails<'_>) -> Result {
    let (n, role, sizes, sock) = {
        let inner = lock(qp);
        let Some(Conn { link, sess }) = inner.conn.as_ref() else {
            return Ok(());
        };
        (
            link.negotiated,
            link.role,
            sess.tx.sizes(),
            link.socket.clone(),
        )
    };
    let rtr = |t: Option<RtrType>| match t {
        None => "none",
        Some(RtrType::Write) => "write",
        Some(RtrType::Read) => "read",
        Some(RtrType::Send) => "send",
    };
    let accepted = [RtrType::Write, RtrType::Read, RtrType::Send]
        .into_iter()
        .find(|t| n.rtr_accept.has(*t));
    d.put_fmt(
        c_str!("role"),
        format_args!(
            "{}",
            match role {
                link::Role::Initiator => "initiator",
                link::Role::Responder => "responder",
            }
        ),
    )?;
    d.put_u32(c_str!("mpa_rev"), n.rev.into())?;
    d.put_u32(c_str!("crc"), n.crc.into())?;
    d.put_u32(c_str!("markers_tx"), n.markers_tx.into())?;
    d.put_u32(c_str!("markers_rx"), n.markers_rx.into())?;
    d.put_fmt(
        c_str!("rtr"),
        format_args!("{}", rtr(n.rtr_send.or(accepted))),
    )?;
    d.put_u32(c_str!("large_fpdu"), n.large_fpdu.into())?;
    d.put_u32(c_str!("ird"), n.ird.into())?;
    d.put_u32(c_str!("ord"), n.ord.into())?;
    let (mss, mulpdu) = sizes;
    d.put_u32(c_str!("mss"), mss)?;
    d.put_u32(c_str!("mulpdu"), mulpdu.into())?;
    if let Ok(a) = sock.local_addr() {
        d.put_fmt(c_str!("laddr"), format_args!("{}", a))?;
    }
    if let Ok(a) = sock.peer_addr() {
        d.put_fmt(c_str!("raddr"), format_args!("{}", a))?;
    }
    Ok(())
}

/// `ib_query_qp`.
pub(crate) fn query(qp: &Qp<Rsiw>) -> QpQuery {
    let d = qp.data();
    let inner = d.inner.lock();
    QpQuery {
        state: inner.state,
        cap: d.cap,
        access_flags: inner.access,
        max_rd_atomic: inner.ord,
        max_dest_rd_atomic: inner.ird,
        sig_all: d.sig_all,
    }
}

/// Tears down a QP about to be destroyed.
pub(crate) fn destroy(qp: &Qp<Rsiw>) {
    if let Some(l) = link::detach(qp) {
        l.owner.ulp_closed(false);
    }
}

/// `ib_post_send` for one work request.
///
/// The queue entry (a few hundred bytes with its SGEs and inline data) is built in its ring
/// slot: ULPs post from deep stacks (NFS writeback, for one), so this frame stays small.
pub(crate) fn post_send(qp: &Qp<Rsiw>, wr: &SendWr<'_, Rsiw>) -> Result {
    let d = qp.data();
    if d.user.is_some() {
        // User space posts into its ring and rings the doorbell with no work request.
        return Err(EINVAL);
    }
    let signaled = wr.flags.signaled || d.sig_all;
    let mut inner = lock(qp);
    let kind = match wr.op {
        SendOp::Send => SendKind::Send,
        SendOp::SendWithInv { rkey } => SendKind::SendWithInv { rkey },
        SendOp::Write { remote_addr, rkey } => SendKind::Write { remote_addr, rkey },
        SendOp::Read {
            remote_addr,
            rkey,
            invalidate_local,
        } => SendKind::Read {
            remote_addr,
            rkey,
            invalidate_local,
        },
        SendOp::RegMr { mr, key, access } => SendKind::RegMr {
            mr: mem::shared_of(mr),
            key,
            access,
            mapping: mr.mapping(),
        },
        SendOp::LocalInv { rkey } => SendKind::LocalInv { rkey },
    };
    let payload = if matches!(kind, SendKind::RegMr { .. } | SendKind::LocalInv { .. }) {
        Payload::None
    } else if wr.flags.inline && !matches!(kind, SendKind::Read { .. }) {
        if mem::sges_len(wr.sges).ok_or(EINVAL)? > MAX_INLINE {
            return Err(EINVAL);
        }
        Payload::Inline
    } else {
        let max_sge = if matches!(kind, SendKind::Read { .. }) {
            MAX_SGE_RD
        } else {
            d.cap.max_send_sge
        };
        if wr.sges.len() > max_sge as usize {
            return Err(EINVAL);
        }
        Payload::Sges
    };
    let opcode = kind.wc_opcode();
    match inner.state {
        QpState::Error => {
            let up = cq::queue(qp.send_cq(), flush_wc(qp, wr.wr_id, opcode), false);
            inner.owed.send.add(up);
            Ok(())
        }
        QpState::Rts => {
            if inner.q.sq.len() + inner.q.sent.len() >= d.cap.max_send_wr as usize {
                return Err(ENOMEM);
            }
            let make = || SendEntry {
                wr_id: wr.wr_id,
                op: kind,
                signaled,
                solicited: wr.flags.solicited,
                fence: wr.flags.fence,
                sges: [NO_SGE; MAX_SGE as usize],
                num_sge: 0,
                inline: None,
            };
            inner.q.sq.push_with(make, |e| payload.fill(e, wr))?;
            tx::kick(qp);
            Ok(())
        }
        _ => Err(enotconn()),
    }
}

/// What a posted send work request carries, checked before it is queued.
#[derive(Clone, Copy)]
enum Payload {
    /// Nothing (a local operation).
    None,
    /// Its SGEs' bytes, copied at post time (at most [`MAX_INLINE`] in all).
    Inline,
    /// Its SGEs (at most the QP's limit).
    Sges,
}

impl Payload {
    /// Completes the queue entry `e` of `wr` in its slot.
    fn fill(self, e: &mut SendEntry, wr: &SendWr<'_, Rsiw>) -> Result {
        match self {
            Payload::None => {}
            Payload::Inline => {
                let data = e.inline.insert(InlineData {
                    len: 0,
                    bytes: [0; MAX_INLINE as usize],
                });
                // CAST: At most `MAX_INLINE` bytes fit.
                data.len = wr.copy_inline(&mut data.bytes)? as u32;
            }
            Payload::Sges => {
                for (d, s) in e.sges.iter_mut().zip(wr.sges) {
                    *d = *s;
                }
                // CAST: Checked against the QP's limit, at most `MAX_SGE`.
                e.num_sge = wr.sges.len() as u8;
            }
        }
        Ok(())
    }
}

/// `ib_post_recv` for one work request.
pub(crate) fn post_recv(qp: &Qp<Rsiw>, wr: &RecvWr<'_>) -> Result {
    let d = qp.data();
    if d.srq.is_some() || d.user.is_some() {
        // Receives go to the SRQ (`ib_post_srq_recv`), or user space writes its ring.
        return Err(EINVAL);
    }
    let (sges, num_sge) = copy_sges(wr.sges, d.cap.max_recv_sge)?;
    let entry = RecvEntry {
        wr_id: wr.wr_id,
        sges,
        num_sge,
    };
    let mut inner = lock(qp);
    match inner.state {
        QpState::Error => {
            let up = cq::queue(qp.recv_cq(), flush_wc(qp, wr.wr_id, WcOpcode::Recv), false);
            inner.owed.recv.add(up);
            Ok(())
        }
        QpState::Init | QpState::Rtr | QpState::Rts => inner.q.rq.push(entry).map_err(|_| ENOMEM),
        _ => Err(EINVAL),
    }
}

/// Takes the receive work request for a message that starts arriving on a QP with an SRQ (from
/// the SRQ, noting a crossed limit for the upcalls), or `None` for a QP without one (its own
/// receive queue is used). The QP lock is held (lock order: QP, then SRQ).
fn take_srq_recv(qp: &Qp<Rsiw>, owed: &mut Owed) -> Option<RecvEntry> {
    let srq = qp.data().srq.as_ref()?;
    let t = srq.take();
    owed.srq_limit |= t.limit_reached;
    if let Some(wr_id) = t.invalid {
        // A user SRQ's entry this QP took but cannot use; the message then finds no receive.
        let mut wc = flush_wc(qp, wr_id, WcOpcode::Recv);
        wc.status = WcStatus::LocQpOpErr;
        owed.recv.add(cq::queue(qp.recv_cq(), wc, false));
    }
    t.entry
}

/// The PD that receive buffers' lkeys belong to: the SRQ's, or the QP's own.
fn recv_pd(qp: &Qp<Rsiw>) -> PdId {
    match &qp.data().srq {
        Some(srq) => srq.pd(),
        None => qp.pd().id(),
    }
}

/// Completes the done work requests whose wait is at most `released` ([`Session::released`];
/// `u64::MAX` without a connection), in order.
fn reap_sent(qp: &Qp<Rsiw>, q: &mut Queues, owed: &mut Owed, released: u64) {
    let mut freed = false;
    while let Some(e) = q.sent.front() {
        if e.wait > released {
            break;
        }
        if let Some(e) = q.sent.pop() {
            emit_sent(qp, owed, e);
            freed = true;
        }
    }
    if freed && user_sq_posted(qp, q) {
        // Entries wait in the user ring for room in the send queue.
        tx::kick(qp);
    }
}

/// [`reap_sent`] with what `inner`'s connection released.
fn reap_released(qp: &Qp<Rsiw>, inner: &mut QpInner) {
    let released = inner.sess().map_or(u64::MAX, |s| s.released());
    reap_sent(qp, &mut inner.q, &mut inner.owed, released);
}

/// The doorbell of a user QP: takes what user space posted into the send queue and starts
/// transmitting (in ERROR: flushes it). Before RTS nothing is taken (`ENOTCONN`, as in the C
/// siw); the entries wait in the ring.
pub(crate) fn doorbell(qp: &Qp<Rsiw>) -> Result {
    if qp.data().user.is_none() {
        return Ok(());
    }
    let mut locked = lock(qp);
    let inner = &mut *locked;
    match inner.state {
        QpState::Rts => {
            let q = &mut inner.q;
            let idle = q.sq.is_empty()
                && q.irq.is_empty()
                && inner.conn.as_ref().is_some_and(|c| c.sess.tx.is_idle());
            pull_user_sq(qp, QpState::Rts, q, &mut inner.owed);
            let direct = idle
                && q.sq.len() == 1
                && q.sq
                    .front()
                    .is_some_and(|e| e.wire_payload() <= DIRECT_TX_MAX);
            drop(locked);
            // Short work on an idle queue goes out in the caller's context, as the C siw
            // sends user work: no hand-over to the work item, whose wake-up would add to the
            // message's latency. Everything else goes to the work item: transmitting bulk
            // here cut perftest's bandwidth at 64 KiB and 1 MiB by half or more, as the
            // poster then waits for TCP instead of posting on.
            match qp.get_ref() {
                Some(r) if direct => tx::run(r),
                _ => tx::kick(qp),
            }
            Ok(())
        }
        QpState::Error => {
            pull_user_sq(qp, inner.state, &mut inner.q, &mut inner.owed);
            Ok(())
        }
        _ => Err(enotconn()),
    }
}

/// The most payload a doorbell transmits in the caller's context (see [`doorbell`]).
const DIRECT_TX_MAX: u64 = 4096;

/// Whether user space posted a send entry not taken yet.
fn user_sq_posted(qp: &Qp<Rsiw>, q: &Queues) -> bool {
    qp.data()
        .user
        .as_ref()
        .is_some_and(|u| u.sq.is_posted(q.user_sq_next))
}

/// Takes a user QP's new send entries, in RTS while the send queue has room; in ERROR all of
/// them, flushed (`state` is the QP's). Bounded by the ring's size per call.
fn pull_user_sq(qp: &Qp<Rsiw>, state: QpState, q: &mut Queues, owed: &mut Owed) {
    let d = qp.data();
    let Some(u) = d.user.as_ref() else { return };
    let flushing = match state {
        QpState::Error => true,
        QpState::Rts => false,
        _ => return,
    };
    for _ in 0..u.sq.size() {
        if !flushing && q.sq.len() + q.sent.len() >= d.cap.max_send_wr as usize {
            return;
        }
        let Some(copy) = u.sq.take(q.user_sq_next) else {
            return;
        };
        q.user_sq_next = q.user_sq_next.wrapping_add(1);
        let e = uabi::parse_sqe(&copy, d.sig_all);
        if flushing {
            let mut wc = flush_wc(qp, e.wr_id, e.op.wc_opcode());
            if matches!(e.op, SendKind::Invalid) {
                wc.status = WcStatus::LocQpOpErr;
            }
            let up = cq::queue(qp.send_cq(), wc, false);
            owed.send.add(up);
        } else if let Err(e) = q.sq.push(e) {
            // Cannot happen: room was checked above. Complete it rather than lose it.
            let mut wc = flush_wc(qp, e.wr_id, e.op.wc_opcode());
            wc.status = WcStatus::LocQpOpErr;
            owed.send.add(cq::queue(qp.send_cq(), wc, false));
        }
    }
}

/// On a user QP with no receive taken (none being filled, none queued), takes the next entry
/// user space posted. An invalid one completes at once with `IB_WC_LOC_QP_OP_ERR` (every older
/// receive has completed), and the message then finds no receive: the connection ends with a
/// Terminate.
fn pull_user_rq(qp: &Qp<Rsiw>, q: &mut Queues, owed: &mut Owed) {
    let Some(rq) = qp.data().user.as_ref().and_then(|u| u.rq.as_ref()) else {
        return;
    };
    if q.cur_recv.is_some() || !q.rq.is_empty() {
        return;
    }
    let Some(copy) = rq.take(q.user_rq_next) else {
        return;
    };
    q.user_rq_next = q.user_rq_next.wrapping_add(1);
    match uabi::parse_rqe(&copy) {
        Some(r) => {
            // The queue was empty, so there is room.
            let _ = q.rq.push(r);
        }
        None => {
            let mut wc = flush_wc(qp, uabi::entry_id(&copy), WcOpcode::Recv);
            wc.status = WcStatus::LocQpOpErr;
            owed.recv.add(cq::queue(qp.recv_cq(), wc, false));
        }
    }
}

/// Flushes what user space posted to a user QP's receive ring and was not taken yet.
fn flush_user_rq(qp: &Qp<Rsiw>, q: &mut Queues, owed: &mut Owed) {
    let Some(rq) = qp.data().user.as_ref().and_then(|u| u.rq.as_ref()) else {
        return;
    };
    for _ in 0..rq.size() {
        let Some(copy) = rq.take(q.user_rq_next) else {
            return;
        };
        q.user_rq_next = q.user_rq_next.wrapping_add(1);
        let mut wc = flush_wc(qp, uabi::entry_id(&copy), WcOpcode::Recv);
        if uabi::parse_rqe(&copy).is_none() {
            wc.status = WcStatus::LocQpOpErr;
        }
        owed.recv.add(cq::queue(qp.recv_cq(), wc, false));
    }
}

/// Queues the completion of a done work request, if it is signalled or failed.
fn emit_sent(qp: &Qp<Rsiw>, owed: &mut Owed, e: SentEntry) {
    if e.signaled || e.status != WcStatus::Success {
        let wc = WorkCompletion {
            wr_id: e.wr_id,
            status: e.status,
            opcode: e.opcode,
            byte_len: 0,
            qp: qp.handle(),
            invalidated_rkey: None,
        };
        owed.send.add(cq::queue(qp.send_cq(), wc, false));
    }
}
