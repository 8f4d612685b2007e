// SPDX-License-Identifier: GPL-2.0

//! The transmit path: RDMAP messages to FPDUs on the connection's TCP socket.
//!
//! Posting only queues work; the QP's transmit work item ([`kick`], on the module's workqueue)
//! does the sending, in process context. Each round of the work item takes the QP lock, builds
//! up to [`BATCH`] bytes of FPDUs into the QP's [`PageBatch`], ends what it finished, drops the
//! lock and hands the batch to TCP with one non-blocking `sendmsg`. When TCP takes only part
//! of it (the peer's window or our send buffer is full), the rest stays in the QP's [`Outbox`]
//! and the work item ends; the socket's `write_space` queues it again, and it sends the rest
//! before it builds anything new. So a slow or stalled peer holds no worker.
//!
//! Headers, trailers and short payloads are copied into the batch's own pages; payload in
//! spliceable pages (not slab memory, at least [`ZC_MIN`] bytes) goes by reference, with the
//! CRC computed from the consumer's memory: no copy on this side at all. TCP then reads those
//! pages until the data is acknowledged, so such a round goes out with a [`ZcToken`] and a work
//! request whose bytes went by reference (or that follows one that did) completes only once
//! TCP released them ([`ZcSession`]). Read Responses go by reference without a token: the peer
//! cannot complete its Read before it received the data.
//!
//! Without zero copy (`zerocopy=off`, or to a peer on this host with `auto`: TCP would copy
//! such pages on delivery anyway) the same payload still goes into the batch by reference, and
//! the round is sent as a plain `sendmsg` ([`SendAs::Copy`]): TCP copies it into its own large
//! page fragments, outside the QP lock, and a work request that ended in the round completes
//! once that `sendmsg` returned. Read Responses are spliced; a round that would need both
//! copies the later kind itself.
//!
//! What goes first: a pending Terminate (then nothing else), the initiator's RTR, Read
//! Responses the peer is owed (oldest first), then the send queue in order. A Read Request
//! waits for a free ORD slot, a fenced work request for every outstanding Read to complete,
//! and a responder that expects an RTR sends nothing until it arrived.
//!
//! FPDU size: every round reads the socket's current MSS (and GSO segment count) again, so
//! FPDUs follow MSS changes, even within a message. Each FPDU fills at most one MSS; with large
//! FPDUs negotiated (the C siw's GSO bit, [`Negotiated::large_fpdu`]) up to one GSO packet,
//! at most 64 KiB ([`tx_budget`]). With Markers the MULPDU leaves room for them.

#![deny(unsafe_code)]

use super::{link_failed, link_terminated, lock, IrqEntry, OrqEntry, QpInner, Queues, Round};
use crate::wqe::{SendKind, MAX_SGE, NO_SGE};
use crate::{
    crc::CountedCrc32c,
    device::Rsiw,
    mem,
    proto::{
        ddp::DdpTx,
        fpdu::{mulpdu, tx_budget, FpduTx, Segmenter, TxOp, TxPiece, TxStream, MULPDU_MAX},
        mpa::RtrType,
        negotiate::Negotiated,
        rdmap::{ReadRequest, Terminate, QN_READ_REQUEST, QN_SEND, QN_TERMINATE},
    },
    stats::{self, Counter, Counters},
};
use kernel::{
    irqlock::SpinLockIrq,
    ksock::{PageBatch, SendAs, SendProgress, TcpSocket, ZcNotify, ZcRegistration, ZcToken},
    new_spinlock_irq,
    prelude::*,
    rdma::{
        qp::{Qp, QpRef},
        verbs::{PdId, WcStatus},
    },
    sync::Arc,
    time::msecs_to_jiffies,
};

/// Bytes of FPDUs built per round before they are sent.
const BATCH: usize = 256 * 1024;
/// Page fragments one FPDU may need at most: its payload (at most [`MULPDU_MAX`] bytes, by
/// reference in pieces of at least [`ZC_MIN`] bytes, each piece in at most two more pages than
/// it fills, or copied) and the copied bytes around and between them.
const FPDU_FRAGS_MAX: usize = 3 * (MULPDU_MAX as usize / ZC_MIN + 2) + 8;
/// Fragments of a round: a batch may end with one whole FPDU more, and then a Terminate.
const BATCH_FRAGS: usize = 2 * BATCH / ZC_MIN + 2 * FPDU_FRAGS_MAX;
/// Fragments of a Terminate FPDU (header, body, Markers, CRC: all copied).
const TERM_FRAGS_MAX: usize = 8;
/// Payload pieces shorter than this are copied: a page reference and a fragment cost more.
const ZC_MIN: usize = 1024;
/// Zero-copy sends in flight per connection; beyond, payload is copied.
const ZC_WINDOW: u64 = 64;

/// The batch of one round, and the zero-copy token of its payload sent by reference.
struct Stage<'a> {
    batch: &'a mut PageBatch,
    token: Option<ZcToken>,
    /// Payload went in by reference for TCP to copy: the batch goes out as [`SendAs::Copy`].
    tcp_copies: bool,
    /// Payload went in by reference to be spliced without a token (Read Responses).
    spliced: bool,
}

impl Stage<'_> {
    fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    fn len(&self) -> usize {
        self.batch.len()
    }

    fn push(&mut self, b: &[u8]) -> Result<(), BuildError> {
        self.batch
            .push_copy(b, GFP_ATOMIC | __GFP_NOWARN)
            .map_err(|_| BuildError::NoMemory)
    }
}

/// Which zero-copy sends of a connection TCP released.
struct ReleaseLog {
    /// The sequence number of the last token made (they start at 1).
    issued: u64,
    /// Every token up to this one was released.
    released: u64,
    /// Bit `i`: token `released + 2 + i` was released (ahead of `released + 1`).
    ahead: u64,
}

impl ReleaseLog {
    /// Records the release of `seq`; returns whether `released` moved.
    fn mark(&mut self, seq: u64) -> bool {
        let Some(d) = seq.checked_sub(self.released + 1) else {
            return false;
        };
        if d >= 64 {
            // Beyond the window: cannot be a token of ours.
            return false;
        }
        self.ahead |= 1 << d;
        let moved = self.ahead & 1 != 0;
        while self.ahead & 1 != 0 {
            self.ahead >>= 1;
            self.released += 1;
        }
        moved
    }
}

/// The release handler of a connection's zero-copy sends.
#[pin_data]
struct ZcTrack {
    /// The QP, to complete the work requests that waited. Dropped with the session (when the
    /// QP leaves RTS, and at the latest when it is destroyed).
    qp: QpRef<Rsiw>,
    /// Interrupts off: TCP reports releases from any context up to softirq, under the
    /// registration's lock ([`ZcNotify::released`]). The transmit work item reads it and takes
    /// tokens under the QP lock (and, walking a region, under that MR's lock too).
    #[pin]
    log: SpinLockIrq<ReleaseLog>,
}

impl ZcNotify for ZcTrack {
    fn released(&self, seq: u64) {
        crate::knobs::count_zc_released();
        if !self.log.lock().mark(seq) {
            return;
        }
        // Atomic context, under the registration's lock: the transmit work completes the work
        // requests that waited, and sends payload that waited for room in the window.
        kick(&self.qp);
    }
}

/// Zero-copy state of a connection (in its session).
pub(crate) struct ZcSession {
    track: Arc<ZcTrack>,
    reg: ZcRegistration,
}

impl ZcSession {
    /// Zero-copy state for a connection of `qp`. Process context.
    pub(crate) fn new(qp: &Qp<Rsiw>) -> Result<Self> {
        let qref = qp.get_ref().ok_or(ENXIO)?;
        let track = Arc::pin_init(
            pin_init!(ZcTrack {
                qp: qref,
                log <- new_spinlock_irq!(
                    ReleaseLog { issued: 0, released: 0, ahead: 0 },
                    "rsiw::ZcTrack::log"
                ),
            }),
            GFP_KERNEL,
        )?;
        let reg = ZcRegistration::new(track.clone(), GFP_KERNEL)?;
        Ok(Self { track, reg })
    }

    /// The sequence number of the last zero-copy send made (0 if none).
    pub(crate) fn issued(&self) -> u64 {
        self.track.log.lock().issued
    }

    /// Every zero-copy send up to this sequence number was released.
    pub(crate) fn released(&self) -> u64 {
        self.track.log.lock().released
    }

    /// A token for the next zero-copy send, unless the window is full or memory short.
    fn token(&self) -> Option<ZcToken> {
        let mut log = self.track.log.lock();
        if log.issued - log.released >= ZC_WINDOW {
            return None;
        }
        let token = self.reg.token(log.issued + 1, GFP_ATOMIC).ok()?;
        log.issued += 1;
        crate::knobs::count_zc_send();
        Some(token)
    }
}

/// What a message in progress draws its payload from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Source {
    /// The work request at the head of the send queue.
    SqHead,
    /// The Read Request at the head of the inbound read queue.
    IrqHead,
    /// The Read Request of the work request at the head of the send queue.
    SqRead,
    /// A message without a work request (RTR, Terminate).
    None,
}

/// A message being cut into FPDUs.
#[derive(Clone, Copy, Debug)]
struct Job {
    source: Source,
    seg: Segmenter,
}

/// Transmit state of one connection.
#[derive(Clone, Copy)]
pub(crate) struct TxState {
    stream: TxStream,
    ddp: DdpTx,
    /// The MULPDU of new FPDUs, from `mss` (and the GSO segment count with `large_fpdu`).
    mulpdu: u16,
    /// The socket's MSS when `mulpdu` was computed.
    mss: u32,
    /// FPDUs may fill a GSO packet, not just one MSS.
    large_fpdu: bool,
    job: Option<Job>,
    /// Initiator: the RTR still to send.
    rtr: Option<RtrType>,
    /// Responder: hold everything but a Terminate until the peer's first FPDU arrived.
    pub(crate) await_rtr: bool,
}

impl TxState {
    /// Whether no message is being sent and no RTR is owed.
    pub(crate) fn is_idle(&self) -> bool {
        self.job.is_none() && self.rtr.is_none()
    }

    /// The socket's MSS new FPDUs are sized for, and their MULPDU.
    pub(crate) fn sizes(&self) -> (u32, u16) {
        (self.mss, self.mulpdu)
    }

    /// The state at the start of Full Operation, FPDUs sized for `mss`; `initiator` if this end
    /// sent the MPA Request.
    pub(crate) fn new(n: &Negotiated, initiator: bool, mss: u32) -> Self {
        let mut tx = Self {
            stream: TxStream::new(n.markers_tx, n.crc),
            ddp: DdpTx::new(),
            mulpdu: 0,
            mss: 0,
            large_fpdu: n.large_fpdu,
            job: None,
            rtr: if initiator { n.rtr_send } else { None },
            await_rtr: !initiator && !n.rtr_accept.is_empty(),
        };
        // No GSO segment count before the first send: one MSS at first.
        tx.resize(mss, 0);
        tx
    }

    /// Sizes the FPDUs still to be built, the message in progress included, for the socket's
    /// current `mss` and `gso_segs`.
    fn resize(&mut self, mss: u32, gso_segs: u16) {
        self.mss = mss;
        self.mulpdu = mulpdu(
            tx_budget(mss, gso_segs, self.large_fpdu),
            self.stream.markers(),
        );
        if let Some(job) = self.job.as_mut() {
            // `mulpdu` is always within the range the segmenter takes.
            let _ = job.seg.set_mulpdu(self.mulpdu);
        }
    }
}

/// Makes sure the transmit work runs (again) for `qp`. Any context, with or without the QP
/// lock; never allocates.
pub(super) fn kick(qp: &Qp<Rsiw>) {
    // The queued item holds a QP reference, so `destroy_qp` waits for it to finish. A QP being
    // destroyed transmits nothing more.
    let _ = qp
        .data()
        .tx_work
        .queue(qp, crate::device::workqueue(qp.device()));
}

/// The transmit path's buffer, and the round TCP has not taken all of yet.
///
/// Behind a mutex ([`QpData::outbox`](super::QpData)) that only the transmit work item ([`run`])
/// takes, in process context. It is held across `sendmsg`, which may sleep for the socket lock,
/// and the QP lock is taken inside it to build each round.
pub(crate) struct Outbox {
    batch: PageBatch,
    pending: Option<Pending>,
}

impl Outbox {
    /// An empty outbox, its batch allocated now so that transmitting never has to.
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            batch: PageBatch::new(BATCH_FRAGS, GFP_KERNEL)?,
            pending: None,
        })
    }
}

/// How a round goes to TCP (see [`SendAs`]).
#[derive(Clone, Copy)]
enum Mode {
    ZeroCopy,
    Copy,
    Splice,
}

/// A round being handed to TCP.
struct Pending {
    sock: Arc<TcpSocket>,
    /// The zero-copy token of its payload sent by reference (with [`Mode::ZeroCopy`]).
    token: Option<ZcToken>,
    mode: Mode,
    /// The round's number: its work requests complete once all of it was taken.
    number: u64,
    /// A Terminate ends it: once TCP took it, the connection closes after it.
    terminates: bool,
}

/// What one round built.
enum Built {
    /// Nothing to send; the work item ended.
    Idle,
    /// Nothing could be built for want of memory: the work item ends and runs again later.
    NoMemory,
    /// Send the staged bytes; then, if `terminates`, end the connection (a Terminate is last).
    Send {
        sock: Arc<TcpSocket>,
        terminates: bool,
    },
}

/// The transmit work item.
pub(super) fn run(qp: QpRef<Rsiw>) {
    let mut guard = qp.data().outbox.lock();
    let Outbox { batch, pending } = &mut *guard;
    // The last round TCP took all of. Its work requests complete under the next round's lock,
    // which follows at once: one lock round fewer per round (a short message has two).
    let mut sent = 0;
    if let Some(p) = pending.take() {
        if !still_connected(&qp, &p.sock) {
            // The connection ended meanwhile (its work requests were flushed).
            batch.clear();
        } else if !send_round(&qp, batch, p, pending, &mut sent) {
            return;
        }
    }
    loop {
        let mut stage = Stage {
            batch,
            token: None,
            tcp_copies: false,
            spliced: false,
        };
        let (built, number) = {
            let mut g = lock(&qp);
            let inner = &mut *g;
            // The round just sent, and zero-copy sends released since the last round, let
            // work requests complete.
            rounds_sent(&qp, inner, sent);
            // What user space posted since (a user QP's ring).
            super::pull_user_sq(&qp, inner.state, &mut inner.q, &mut inner.owed);
            let (built, number) = match inner.round(&qp) {
                Some(mut r) => {
                    let built = fill(&mut r, &mut stage);
                    (built, round_out(r.sess))
                }
                None => (Built::Idle, 0),
            };
            if matches!(built, Built::Idle | Built::NoMemory) {
                // Nothing staged: what ended in this round is done.
                rounds_sent(&qp, inner, number);
            }
            (built, number)
        };
        let (sock, terminates) = match built {
            Built::Send { sock, terminates } => (sock, terminates),
            Built::Idle => return,
            Built::NoMemory => {
                retry_later(&qp);
                return;
            }
        };
        let token = stage.token.take();
        let mode = match (&token, stage.tcp_copies) {
            (Some(_), _) => Mode::ZeroCopy,
            (None, true) => Mode::Copy,
            (None, false) => Mode::Splice,
        };
        if matches!(mode, Mode::Copy) {
            // CAST: `usize` is at most 64 bits wide.
            qp.data()
                .counters
                .add(Counter::TxTcpCopiedBytes, stage.len() as u64);
        }
        let p = Pending {
            sock,
            token,
            mode,
            number,
            terminates,
        };
        if !send_round(&qp, batch, p, pending, &mut sent) {
            return;
        }
    }
}

/// How long the transmit path waits before it tries again after an allocation failed with
/// nothing queued in the socket: no acknowledgement will come to report room, so a timer must.
const MEMORY_RETRY_MS: u32 = 20;

/// Runs the transmit work again once [`MEMORY_RETRY_MS`] have passed (a kick before then finds
/// it waiting and leaves it so).
fn retry_later(qp: &Qp<Rsiw>) {
    crate::knobs::count_tx_memory_wait();
    let _ = qp.data().tx_work.queue_after(
        qp,
        crate::device::workqueue(qp.device()),
        msecs_to_jiffies(MEMORY_RETRY_MS),
    );
}

/// Whether `sock` is still the socket of `qp`'s connection, in RTS.
fn still_connected(qp: &Qp<Rsiw>, sock: &Arc<TcpSocket>) -> bool {
    lock(qp)
        .link()
        .is_some_and(|l| Arc::ptr_eq(&l.socket, sock))
}

/// Hands what is left of round `p` (in `batch`) to TCP without blocking. Returns whether the
/// work item goes on, with `sent` set to the round's number once TCP took all of it (the caller
/// completes its work requests at its next lock); if TCP took only part, `p` waits in `pending`
/// for `write_space`.
fn send_round(
    qp: &Qp<Rsiw>,
    batch: &mut PageBatch,
    p: Pending,
    pending: &mut Option<Pending>,
    sent: &mut u64,
) -> bool {
    let how = match (&p.token, p.mode) {
        (Some(t), Mode::ZeroCopy) => SendAs::ZeroCopy(t),
        (_, Mode::Copy) => SendAs::Copy,
        _ => SendAs::Splice,
    };
    qp.data().counters.inc(Counter::TxBatches);
    match p.sock.send_batch_nowait(batch, how) {
        // Copies are made and spliced pages are never written again: the work requests that
        // ended in this round may complete (those that wait for no token). TCP holds its own
        // references on the token now; released once it freed the skbs.
        Ok(SendProgress::Done) => {
            if p.terminates {
                rounds_sent(qp, &mut lock(qp), p.number);
                link_terminated(qp);
                return false;
            }
            *sent = p.number;
            true
        }
        Ok(SendProgress::Blocked) => {
            *pending = Some(p);
            false
        }
        Ok(SendProgress::NoMemory) => {
            *pending = Some(p);
            retry_later(qp);
            false
        }
        // The work requests stay, to be flushed with the QP.
        Err(e) => {
            pr_debug!("QP {}: send failed: {:?}\n", qp.qpn(), e);
            link_failed(qp);
            false
        }
    }
}

/// Ends the round being built: returns its number. Work requests that end from now on wait
/// for the next round.
fn round_out(sess: &mut super::Session) -> u64 {
    let n = sess.tx_round;
    sess.tx_round += 1;
    n
}

/// Rounds up to `number` were handed to TCP: completes the work requests that waited for them.
fn rounds_sent(qp: &Qp<Rsiw>, inner: &mut QpInner, number: u64) {
    if let Some(c) = inner.conn.as_mut() {
        c.sess.tx_rounds_sent = c.sess.tx_rounds_sent.max(number);
    }
    super::reap_released(qp, inner);
}

/// Why building an FPDU stopped.
enum BuildError {
    /// The consumer's memory could not be read (a local protection error).
    Local,
    /// The peer's read source is no longer accessible.
    Remote(mem::AccessError),
    /// No memory for the batch's pages: send what is staged and try again.
    NoMemory,
}

/// Builds FPDUs into `stage` until a batch is full or nothing is left to send now.
fn fill(r: &mut Round<'_>, stage: &mut Stage<'_>) -> Built {
    let qp = r.qp;
    let sock = r.link.socket.clone();
    r.sess.tx.resize(sock.mss(), sock.gso_segs());
    let send = |terminates| Built::Send {
        sock: sock.clone(),
        terminates,
    };
    loop {
        if r.sess.term_sent {
            return Built::Idle;
        }
        if let Some(term) = r.sess.term.take() {
            r.sess.term_sent = true;
            qp.data()
                .counters
                .inc(stats::terminate_counter(true, term.ctrl.layer));
            // A Terminate ends the stream: drop a half-built batch's successor, keep what is
            // staged (whole FPDUs) and append the Terminate.
            let tx = &mut r.sess.tx;
            if let Some(msn) = tx.ddp.take_msn(QN_TERMINATE) {
                if let Ok(seg) = Segmenter::new(TxOp::Terminate { msn, term }, 0, tx.mulpdu) {
                    let mut job = Job {
                        source: Source::None,
                        seg,
                    };
                    let _ = emit(r, &mut job, stage, usize::MAX, TERM_FRAGS_MAX);
                }
            }
            return send(true);
        }
        if stage.len() >= BATCH {
            return send(false);
        }
        let job = r.sess.tx.job.take().or_else(|| next_job(r));
        let Some(mut job) = job else {
            return if stage.is_empty() {
                Built::Idle
            } else {
                send(false)
            };
        };
        match emit(r, &mut job, stage, BATCH, FPDU_FRAGS_MAX) {
            Ok(true) => job_done(r, job),
            Ok(false) => r.sess.tx.job = Some(job),
            Err(BuildError::NoMemory) => {
                // The FPDU was taken back: send what is staged and build it again next round.
                r.sess.tx.job = Some(job);
                return if stage.is_empty() {
                    Built::NoMemory
                } else {
                    send(false)
                };
            }
            Err(BuildError::Local) => {
                // The work request names memory it may not use: it fails, and the QP with it
                // (the message is cut short on the wire, so the stream cannot go on). Rate
                // limited: a user process can post such work requests.
                kernel::pr_info_ratelimited!(
                    "{}: QP {}: send work request with an invalid local buffer\n",
                    qp.device().name(),
                    qp.qpn()
                );
                if job.source == Source::SqHead {
                    r.complete_sq_head(WcStatus::LocProtErr);
                }
                r.sess.term = Some(Terminate::for_error(
                    crate::proto::error::TermError::RdmapCatastrophic,
                    None,
                ));
            }
            Err(BuildError::Remote(e)) => {
                r.sess.term = Some(Terminate::for_error(e.read_source_error(), None));
            }
        }
    }
}

/// Picks the next message to send, or `None` if there is nothing to send now. Local
/// operations at the head of the send queue run here, in order.
fn next_job(r: &mut Round<'_>) -> Option<Job> {
    let qp = r.qp;
    let tx = &mut r.sess.tx;
    if let Some(t) = tx.rtr.take() {
        let op = match t {
            RtrType::Write => TxOp::Write { stag: 0, to: 0 },
            RtrType::Send => TxOp::Send {
                msn: tx.ddp.take_msn(QN_SEND)?,
                solicited: false,
                invalidate: None,
            },
            RtrType::Read => {
                let rtr = OrqEntry {
                    wr_id: 0,
                    signaled: false,
                    sink: NO_SGE,
                    invalidate_local: false,
                    rtr: true,
                    placed: 0,
                };
                r.q.orq.push(rtr).ok()?;
                TxOp::ReadRequest {
                    msn: tx.ddp.take_msn(QN_READ_REQUEST)?,
                    req: ReadRequest {
                        sink_stag: 0,
                        sink_to: 0,
                        size: 0,
                        src_stag: 0,
                        src_to: 0,
                    },
                }
            }
        };
        let seg = Segmenter::new(op, 0, tx.mulpdu).ok()?;
        return Some(Job {
            source: Source::None,
            seg,
        });
    }
    if tx.await_rtr {
        return None;
    }
    if let Some(e) = r.q.irq.front() {
        let op = TxOp::ReadResponse {
            stag: e.sink_stag,
            to: e.sink_to,
        };
        if let Ok(seg) = Segmenter::new(op, e.size, tx.mulpdu) {
            return Some(Job {
                source: Source::IrqHead,
                seg,
            });
        }
        // The receiver refuses a Read Request whose response cannot be cut into segments
        // (`ReadRequest::check_sink`); should one get here anyway, end the connection: waiting
        // would hold up the send queue behind it for good.
        r.sess.term = Some(Terminate::for_error(
            crate::proto::error::TermError::RdmapCatastrophic,
            None,
        ));
        // The work item runs another round, which sends the Terminate.
        kick(qp);
        return None;
    }
    loop {
        let e = r.q.sq.front()?;
        if e.fence && !r.q.orq.is_empty() {
            return None;
        }
        let len = if let Some(i) = &e.inline {
            i.len
        } else {
            match mem::sges_len(&e.sges[..usize::from(e.num_sge).min(MAX_SGE as usize)]) {
                Some(l) => l,
                None => {
                    r.complete_sq_head(WcStatus::LocLenErr);
                    continue;
                }
            }
        };
        let tx = &mut r.sess.tx;
        let (op, source, len) = match e.op.clone() {
            SendKind::RegMr {
                mr,
                key,
                access,
                mapping,
            } => {
                let st = match mem::register(&mr, key, access, mapping) {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::LocProtErr,
                };
                r.complete_sq_head(st);
                continue;
            }
            SendKind::Invalid => {
                r.complete_sq_head(WcStatus::LocQpOpErr);
                continue;
            }
            SendKind::LocalInv { rkey } => {
                let pd = qp.pd().id();
                let st = match mem::invalidate(qp.device(), pd, rkey) {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::LocProtErr,
                };
                r.complete_sq_head(st);
                continue;
            }
            SendKind::Send => (
                TxOp::Send {
                    msn: tx.ddp.take_msn(QN_SEND)?,
                    solicited: e.solicited,
                    invalidate: None,
                },
                Source::SqHead,
                len,
            ),
            SendKind::SendWithInv { rkey } => (
                TxOp::Send {
                    msn: tx.ddp.take_msn(QN_SEND)?,
                    solicited: e.solicited,
                    invalidate: Some(rkey),
                },
                Source::SqHead,
                len,
            ),
            SendKind::Write { remote_addr, rkey } => (
                TxOp::Write {
                    stag: rkey,
                    to: remote_addr,
                },
                Source::SqHead,
                len,
            ),
            SendKind::Read {
                remote_addr, rkey, ..
            } => {
                if r.q.orq.len() >= r.ord as usize {
                    return None;
                }
                let sink = if e.num_sge == 0 { NO_SGE } else { e.sges[0] };
                (
                    TxOp::ReadRequest {
                        msn: tx.ddp.take_msn(QN_READ_REQUEST)?,
                        req: ReadRequest {
                            sink_stag: sink.lkey,
                            sink_to: sink.addr,
                            size: sink.length,
                            src_stag: rkey,
                            src_to: remote_addr,
                        },
                    },
                    Source::SqRead,
                    0,
                )
            }
        };
        let seg = match Segmenter::new(op, len, tx.mulpdu) {
            Ok(s) => s,
            Err(_) => {
                r.complete_sq_head(WcStatus::LocLenErr);
                continue;
            }
        };
        return Some(Job { source, seg });
    }
}

/// A finished message: complete what it completes.
fn job_done(r: &mut Round<'_>, job: Job) {
    match job.source {
        Source::IrqHead => {
            r.q.irq.pop();
        }
        Source::SqHead => r.complete_sq_head(WcStatus::Success),
        Source::None => {}
        Source::SqRead => {
            // The Read moves to the outbound read queue; it completes when its response has
            // arrived.
            if let Some(e) = r.q.sq.pop() {
                if let SendKind::Read {
                    invalidate_local, ..
                } = e.op
                {
                    let o = OrqEntry {
                        wr_id: e.wr_id,
                        signaled: e.signaled,
                        sink: if e.num_sge == 0 { NO_SGE } else { e.sges[0] },
                        invalidate_local,
                        rtr: false,
                        placed: 0,
                    };
                    // The ORD check before the request was built left room.
                    let _ = r.q.orq.push(o);
                }
            }
        }
    }
}

/// Where the payload of a message comes from.
struct PayloadFrom<'a> {
    qp: &'a Qp<Rsiw>,
    pd: PdId,
    source: Source,
    /// The queues whose head holds it.
    q: &'a Queues,
    /// The session's zero-copy state.
    zc: Option<&'a ZcSession>,
}

/// Emits FPDUs of `job` into `stage` while it holds fewer than `limit` bytes and has room
/// for an FPDU of up to `frags_max` fragments. Returns whether the message is complete.
fn emit(
    r: &mut Round<'_>,
    job: &mut Job,
    stage: &mut Stage<'_>,
    limit: usize,
    frags_max: usize,
) -> Result<bool, BuildError> {
    let qp = r.qp;
    let crc = CountedCrc32c::new(&qp.data().counters, Counter::TxCrcBytes);
    let tx = &mut r.sess.tx;
    let from = PayloadFrom {
        qp,
        pd: qp.pd().id(),
        source: job.source,
        q: r.q,
        zc: r.sess.zc.as_ref(),
    };
    while !job.seg.is_done() {
        if stage.len() >= limit || stage.batch.frags_left() < frags_max {
            return Ok(false);
        }
        let (saved_stream, saved_seg, start) = (tx.stream, job.seg, stage.len());
        let Some(mut f) = job.seg.next_fpdu(&mut tx.stream) else {
            break;
        };
        let res = build_fpdu(&from, &mut f, stage, &crc);
        if let Err(e) = res {
            stage.batch.truncate(start);
            tx.stream = saved_stream;
            job.seg = saved_seg;
            return Err(e);
        }
        crate::knobs::count_fpdu(f.wire_len(), tx.mss);
        qp.data().counters.inc(Counter::TxFpdus);
    }
    Ok(true)
}

/// Appends one FPDU to `stage`, its payload from `from`.
fn build_fpdu(
    from: &PayloadFrom<'_>,
    f: &mut FpduTx,
    stage: &mut Stage<'_>,
    crc: &CountedCrc32c<'_>,
) -> Result<(), BuildError> {
    let internal = |_| BuildError::Local;
    while let Some(p) = f.next_piece(crc).map_err(internal)? {
        match p {
            TxPiece::Payload { offset, len } => add_payload(from, offset, len, f, stage, crc)?,
            _ => stage.push(f.bytes(&p))?,
        }
    }
    Ok(())
}

/// Appends `len` payload bytes at `offset` of the message from its source (by reference where
/// that pays and is allowed), feeding them to the FPDU's CRC.
fn add_payload(
    from: &PayloadFrom<'_>,
    offset: u32,
    len: u32,
    f: &mut FpduTx,
    stage: &mut Stage<'_>,
    crc: &CountedCrc32c<'_>,
) -> Result<(), BuildError> {
    let PayloadFrom {
        qp,
        pd,
        source,
        q,
        zc,
    } = *from;
    // A Read Response's source may be spliced without a token: the peer completes its Read
    // only once it has the data, so the consumer cannot reuse the memory while TCP may still
    // need it (a retransmission then only repeats what the peer has).
    let by_ref = match source {
        Source::IrqHead => ByReference::Plain,
        _ => zc.map_or(ByReference::TcpCopies, ByReference::Token),
    };
    let mut add =
        |r: kernel::rdma::mr::KernelRange| add_range(r, by_ref, f, stage, crc, &qp.data().counters);
    match source {
        Source::SqHead => {
            let e = q.sq.front().ok_or(BuildError::Local)?;
            if let Some(i) = &e.inline {
                let s = offset as usize;
                let b = i.bytes.get(s..s + len as usize).ok_or(BuildError::Local)?;
                f.feed_payload(crc, b).map_err(|_| BuildError::Local)?;
                return stage.push(b);
            }
            let sges = e
                .sges
                .get(..usize::from(e.num_sge))
                .ok_or(BuildError::Local)?;
            mem::walk_sges(
                qp.device(),
                pd,
                sges,
                mem::RIGHTS_LOCAL_READ,
                u64::from(offset),
                u64::from(len),
                |_, r| add(r),
            )
            .map_err(|e| match e {
                mem::MapError::Access(_) => BuildError::Local,
                // What `add_range` failed with (no memory for the batch, say).
                mem::MapError::Copy(e) => e,
            })
        }
        Source::IrqHead => {
            let r: &IrqEntry = q.irq.front().ok_or(BuildError::Local)?;
            let mr = r
                .src
                .as_ref()
                .ok_or(BuildError::Remote(mem::AccessError::InvalidStag))?;
            let at = r
                .src_to
                .checked_add(u64::from(offset))
                .ok_or(BuildError::Remote(mem::AccessError::ToWrap))?;
            mr.access(r.src_stag, pd, mem::RIGHTS_READ, at, u64::from(len), add)
                .map_err(|e| match e {
                    mem::MapError::Access(a) => BuildError::Remote(a),
                    mem::MapError::Copy(e) => e,
                })
        }
        Source::SqRead | Source::None => Err(BuildError::Local),
    }
}

/// How payload may go by reference.
#[derive(Clone, Copy)]
enum ByReference<'a> {
    /// For TCP to copy during `sendmsg` (the work request waits for the round to be sent).
    TcpCopies,
    /// Spliced, with a token of this session (the work request waits for its release).
    Token(&'a ZcSession),
    /// Spliced, without a token.
    Plain,
}

/// Appends one range of payload: by reference if it is long enough, its pages can be spliced
/// and `by_ref` allows it (with a token to spare, if it needs one); else copied.
fn add_range(
    r: kernel::rdma::mr::KernelRange,
    by_ref: ByReference<'_>,
    f: &mut FpduTx,
    stage: &mut Stage<'_>,
    crc: &CountedCrc32c<'_>,
    counters: &Counters,
) -> Result<(), BuildError> {
    r.with_slice(|b| f.feed_payload(crc, b))
        .map_err(|_| BuildError::Local)?;
    if r.len() >= ZC_MIN {
        // A round goes out one way: with a token, as copies or spliced.
        let allowed = match by_ref {
            ByReference::TcpCopies => !stage.spliced,
            ByReference::Plain => !stage.tcp_copies,
            ByReference::Token(zc) => {
                if stage.token.is_none() {
                    stage.token = zc.token();
                }
                stage.token.is_some()
            }
        };
        if allowed {
            match r.push_by_reference(stage.batch) {
                Ok(true) => {
                    stage.tcp_copies |= matches!(by_ref, ByReference::TcpCopies);
                    stage.spliced |= matches!(by_ref, ByReference::Plain);
                    // By reference, also when TCP copies it (that copy counts as
                    // `TxTcpCopiedBytes` when the round is sent): rsiw copied nothing.
                    crate::knobs::count_tx_payload(true, r.len());
                    count_tx_payload(counters, r.len(), true);
                    return Ok(());
                }
                Ok(false) => {}
                Err(_) => return Err(BuildError::NoMemory),
            }
        }
    }
    crate::knobs::count_tx_payload(false, r.len());
    count_tx_payload(counters, r.len(), false);
    r.with_slice(|b| stage.push(b))
}

/// Counts `n` payload octets sent: added to the batch by reference to the consumer's pages if
/// `by_reference`, else copied into the batch's own pages.
fn count_tx_payload(c: &Counters, n: usize, by_reference: bool) {
    // CAST: `usize` is at most 64 bits wide.
    let n = n as u64;
    c.add(Counter::TxPayloadBytes, n);
    c.add(
        if by_reference {
            Counter::TxPayloadByReferenceBytes
        } else {
            Counter::TxPayloadCopiedBytes
        },
        n,
    );
}
