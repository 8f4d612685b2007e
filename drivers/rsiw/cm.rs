// SPDX-License-Identifier: GPL-2.0

//! The iWARP connection manager: MPA connection setup over kernel TCP sockets.
//!
//! Event-driven: no worker waits for a peer. Every connection endpoint ([`Conn`]) and every
//! listener ([`Listener`]) owns a delayed work item on the module's workqueue. Socket upcalls
//! (softirq: they only record what happened), the `iw_cm` operations (`accept`, `reject`) and the
//! QP (a ULP moving it to SQD or ERROR, the data path reporting the end) post event bits and
//! queue the item; the item takes the bits and moves the endpoint's [`Phase`] on, doing only
//! what cannot block: non-blocking TCP connect, accept and receive, MPA frames of a few hundred
//! octets into a fresh send buffer, the hand-off to the QP ([`crate::qp::link`]), the teardown.
//! Each phase that waits for the peer or the ULP has a deadline; the item is queued to run at
//! it, and then ends the phase as a timeout. All `iw_cm` events of a connection are sent from
//! its item, in the order the `iw_cm` accepts, by consuming the tokens of
//! [`kernel::rdma::iwcm`].
//!
//! At RTS the socket's upcalls go to the QP ([`QpEvents`]), so received data and write space
//! reach the data path without the connection manager's lock.
//!
//! Admission: a listener lets at most [`MAX_HANDSHAKES`] connections wait for their MPA Request
//! at once, at most [`MAX_HANDSHAKES_PER_SOURCE`] of them from one address; beyond that a new
//! connection is reset, with a rate-limited log line.
//!
//! Timeouts: the TCP connect ([`crate::knobs::CONNECT_TIMEOUT`]), the MPA Request or Reply
//! ([`crate::knobs::MPA_TIMEOUT`]), both module parameters; the ULP's accept or reject of a
//! request ([`ULP_TIMEOUT_MS`]) and an orderly close ([`CLOSE_TIMEOUT_MS`]).

#![deny(unsafe_code)]

use crate::{
    crc::KernelCrc32c,
    device::{Rsiw, PORT},
    proto::{
        error::TermError,
        fpdu::{self, SETUP_TERM_FPDU_MAX},
        mpa::{MpaFrame, ENHANCED_LEN, IRD_ORD_MAX, MAX_FRAME_LEN, MAX_PRIVATE_DATA},
        negotiate::{Initiator, MpaEvent, MpaFailure, MpaPolicy, MpaStep, Negotiated, Responder},
    },
    qp::{
        self,
        link::{self, Link, LinkOwner, Role},
    },
    stats::Counter,
};
use kernel::{
    irqlock::SpinLockIrq,
    ksock::{
        errno, ConnectStatus, Family, IoSlice, IpAddr, ListenerEvents, LockedSock, RecvFlags,
        SendFlags, Shutdown, Sock, SocketAddr, SocketEvents, TcpListener, TcpSocket, TcpState,
    },
    netns::Namespace,
    new_mutex, new_spinlock_irq,
    owned_queue::{DelayedWork, DelayedWorkItem},
    prelude::*,
    rdma::{
        device::{Device, Driver},
        iwcm::{
            Accepting, CmIdKey, ConnInfo, ConnParam, ConnectInfo, Connected, Connecting, Failed,
            IwCm, ListenId, ListenInfo, PrivateData,
        },
        qp::QpRef,
    },
    sync::{Arc, Mutex},
    time::{msecs_to_jiffies, Ktime, Msecs},
    types::ARef,
};

/// How long a connect request may wait for the ULP's accept or reject.
pub(crate) const ULP_TIMEOUT_MS: Msecs = 30_000;
/// How long an orderly close waits for the peer's FIN before aborting.
pub(crate) const CLOSE_TIMEOUT_MS: Msecs = 5_000;
/// Connections a listener lets wait for their MPA Request at once.
pub(crate) const MAX_HANDSHAKES: usize = 512;
/// Of those, how many may come from one address.
pub(crate) const MAX_HANDSHAKES_PER_SOURCE: usize = 64;

/// Data arrived on the socket.
const EV_DATA: u32 = 1 << 0;
/// The peer closed its half of the stream (FIN).
const EV_PEER_FIN: u32 = 1 << 1;
/// The connection is gone (reset, error, or fully closed).
const EV_CLOSED: u32 = 1 << 2;
/// The ULP accepted or rejected the request ([`ConnState::answer`]).
const EV_ANSWER: u32 = 1 << 3;
/// The ULP closes gracefully (QP to SQD).
const EV_DISCONNECT: u32 = 1 << 4;
/// The ULP or the data path aborts (QP to ERROR, fatal error).
const EV_ABORT: u32 = 1 << 5;
/// The TCP connect completed (or failed: then [`EV_CLOSED`] comes too).
const EV_CONNECTED: u32 = 1 << 6;
/// The data path handed TCP a Terminate: the connection ends after it.
const EV_TERMINATED: u32 = 1 << 7;
/// The peer acknowledged our FIN, and so everything we sent before it.
const EV_FIN_ACKED: u32 = 1 << 8;

/// The ULP's answer to a connect request.
enum Answer {
    Accept {
        token: Accepting<RsiwCm>,
        qp: QpRef<Rsiw>,
        private_data: KVec<u8>,
        ird: u16,
        ord: u16,
    },
    Reject {
        private_data: KVec<u8>,
    },
}

/// What upcalls and operations share with the endpoint's work item, behind [`Conn::state`]: a
/// spinlock that disables interrupts, as events are posted from any context (socket upcalls in
/// softirq, `iw_cm`'s `accept` and `reject`, the data path through [`qp::link_failed`] and
/// [`qp::link_terminated`], a QP's modify or destroy). No other driver lock is taken under it.
struct ConnState {
    /// Posted events not yet taken by the work item.
    events: u32,
    /// The ULP's answer, for a passive endpoint.
    answer: Option<Answer>,
    /// The request is no longer waiting for an answer: a late accept must fail.
    gone: bool,
    /// When the current phase times out (milliseconds of `ktime_get`), if it waits.
    deadline: Option<i64>,
}

/// An active connection's parameters, from `connect` to the connect reply.
struct Active {
    token: Connecting<RsiwCm>,
    info: ConnectInfo,
    qp: QpRef<Rsiw>,
    private_data: KVec<u8>,
    ird: u16,
    ord: u16,
}

/// A passive connection from its accept to the ULP's answer.
struct Passive {
    sock: Arc<TcpSocket>,
    local: SocketAddr,
    remote: SocketAddr,
    /// The listener's id, until the request is reported.
    listen_id: Option<ListenId<RsiwCm>>,
    /// The connection's slot among the listener's handshakes, until its Request is complete.
    slot: Option<HandshakeSlot>,
    /// The Request as received: replayed into a responder with the ULP's IRD/ORD at accept.
    saved: KVec<u8>,
    resp: Responder,
}

/// An established connection.
struct Established {
    qp: QpRef<Rsiw>,
    sock: Arc<TcpSocket>,
    token: Connected<RsiwCm>,
}

/// Where a connection is. Each phase that waits names its timeout ([`Phase::timeout`]).
///
/// Behind [`Conn::phase`], a mutex: the endpoint's work item holds it for a whole step, which
/// may sleep in socket calls, and takes [`Conn::state`], the QP lock (attach, detach) and a
/// listener's handshakes under it. The listener's work item also takes it once, before the
/// endpoint's item first runs ([`start_passive`]).
enum Phase {
    /// Active: nothing done yet.
    Start(Active),
    /// Active: the TCP connect is in progress.
    TcpConnect(Active, Arc<TcpSocket>),
    /// Active: the MPA Request is out, the Reply awaited.
    AwaitReply(Active, Arc<TcpSocket>, Initiator),
    /// Passive: awaiting the MPA Request.
    AwaitRequest(Passive),
    /// Passive: the request was reported, the ULP's accept or reject awaited.
    AwaitAnswer(Passive),
    /// In RTS, until one side closes.
    Connected(Established),
    /// Our FIN is out, the peer's awaited; then the ULP learns the close with this status. The
    /// ULP closed in order (`Ok`), or a Terminate went out ahead of the FIN.
    Closing(Established, Result),
    /// Over.
    Done,
}

impl Phase {
    fn timeout(&self) -> Option<Msecs> {
        match self {
            Phase::Start(_) | Phase::TcpConnect(..) => Some(crate::knobs::CONNECT_TIMEOUT.ms()),
            Phase::AwaitReply(..) | Phase::AwaitRequest(_) => Some(crate::knobs::MPA_TIMEOUT.ms()),
            Phase::AwaitAnswer(_) => Some(ULP_TIMEOUT_MS),
            Phase::Closing(..) => Some(CLOSE_TIMEOUT_MS),
            Phase::Connected(_) | Phase::Done => None,
        }
    }
}

/// A connection endpoint.
///
/// `state` is taken from any context (irq-safe); `phase` by the work item (and once by the
/// listener's, before the endpoint's first run).
#[pin_data]
pub(crate) struct Conn {
    /// Held so that unregistering the device (and unloading the module, which destroys the
    /// workqueue) waits until the endpoint, and so any timer of its work item, is gone.
    dev: ARef<Device<Rsiw>>,
    #[pin]
    state: SpinLockIrq<ConnState>,
    #[pin]
    phase: Mutex<Phase>,
    #[pin]
    work: DelayedWork<Conn>,
}

kernel::impl_has_delayed_work! {
    impl HasDelayedWork for Conn { self.work }
}

impl Conn {
    /// An endpoint in `phase`, whose deadline starts now. Its work item is not queued yet.
    fn new(dev: &Device<Rsiw>, phase: Phase) -> Result<Arc<Self>> {
        let deadline = phase
            .timeout()
            .map(|t| now_ms().saturating_add(i64::from(t)));
        Arc::pin_init(
            pin_init!(Self {
                dev: dev.into(),
                state <- new_spinlock_irq!(
                    ConnState { events: 0, answer: None, gone: false, deadline },
                    "rsiw::cm::Conn::state"
                ),
                phase <- new_mutex!(phase, "rsiw::cm::Conn::phase"),
                work <- kernel::new_delayed_work!("rsiw::cm::Conn::work"),
            }),
            GFP_KERNEL,
        )
    }

    /// Posts `events` and queues the work item to take them now. Any context.
    fn post(this: &Arc<Self>, events: u32) {
        let mut st = this.state.lock();
        st.events |= events;
        // Under the lock, so that the work item's re-arming cannot delay this run.
        DelayedWork::reschedule(this, crate::device::workqueue(&this.dev), 0);
        drop(st);
    }

    /// Whether any of `events` was posted and not taken yet.
    fn posted(&self, events: u32) -> bool {
        self.state.lock().events & events != 0
    }
}

/// An endpoint as the owner of its QP's link: what the data path reports goes to the
/// endpoint's work item as events.
struct EndpointLink(Arc<Conn>);

impl LinkOwner for EndpointLink {
    fn terminated(&self) {
        Conn::post(&self.0, EV_TERMINATED);
    }

    fn failed(&self) {
        Conn::post(&self.0, EV_ABORT);
    }

    fn ulp_closed(&self, graceful: bool) {
        Conn::post(&self.0, if graceful { EV_DISCONNECT } else { EV_ABORT });
    }
}

/// Milliseconds of the monotonic clock.
fn now_ms() -> i64 {
    Ktime::ktime_get().to_ms()
}

impl DelayedWorkItem for Conn {
    fn run(this: Arc<Self>) {
        let mut phase = this.phase.lock();
        let now = now_ms();
        let (events, expired) = {
            let mut st = this.state.lock();
            let ev = core::mem::take(&mut st.events);
            (ev, st.deadline.is_some_and(|d| now >= d))
        };
        let cur = core::mem::replace(&mut *phase, Phase::Done);
        let was = core::mem::discriminant(&cur);
        let next = step(&this, cur, events, expired);
        let wq = crate::device::workqueue(&this.dev);
        let changed = core::mem::discriminant(&next) != was;
        let timeout = next.timeout();
        let done = matches!(next, Phase::Done);
        *phase = next;
        drop(phase);
        let mut st = this.state.lock();
        if changed || expired {
            st.deadline = timeout.map(|t| now.saturating_add(i64::from(t)));
        }
        if st.events != 0 {
            // Posted while this run went on: run again now.
            DelayedWork::reschedule(&this, wq, 0);
        } else if done {
            // A timer still pending would only hold the endpoint.
            DelayedWork::cancel(&this);
        } else if let Some(d) = st.deadline {
            let ms = Msecs::try_from(d.saturating_sub(now).max(0)).unwrap_or(Msecs::MAX);
            DelayedWork::reschedule(&this, wq, msecs_to_jiffies(ms).saturating_add(1));
        }
        drop(st);
    }
}

/// Moves a connection on from `phase` after `events`; `expired`: its deadline passed.
fn step(conn: &Arc<Conn>, phase: Phase, events: u32, expired: bool) -> Phase {
    match phase {
        Phase::Start(a) => start_active(conn, a),
        Phase::TcpConnect(a, sock) => tcp_connected(conn, a, sock, events, expired),
        Phase::AwaitReply(a, sock, init) => await_reply(conn, a, sock, init, expired),
        Phase::AwaitRequest(p) => await_request(conn, p, events, expired),
        Phase::AwaitAnswer(p) => await_answer(conn, p, events, expired),
        Phase::Connected(e) => connected(conn, e, events),
        Phase::Closing(e, status) => closing(e, status, events, expired),
        Phase::Done => Phase::Done,
    }
}

/// The event bits a connection's socket state implies once established.
fn state_events(sock: &TcpSocket) -> u32 {
    match sock.state() {
        TcpState::CloseWait | TcpState::LastAck => EV_PEER_FIN,
        TcpState::FinWait2 => EV_FIN_ACKED,
        TcpState::Close | TcpState::TimeWait => EV_CLOSED,
        _ => 0,
    }
}

/// Posts what a TCP state change means for the endpoint.
fn post_state(conn: &Arc<Conn>, state: TcpState) {
    match state {
        TcpState::Established => Conn::post(conn, EV_CONNECTED),
        TcpState::CloseWait => Conn::post(conn, EV_PEER_FIN),
        TcpState::FinWait2 => Conn::post(conn, EV_FIN_ACKED),
        TcpState::Close | TcpState::TimeWait => Conn::post(conn, EV_CLOSED),
        _ => {}
    }
}

/// The upcall handler of a connection's socket until RTS.
struct ConnEvents(Arc<Conn>);

impl SocketEvents for ConnEvents {
    fn data_ready(&self, _sk: &LockedSock) {
        Conn::post(&self.0, EV_DATA);
    }

    fn state_change(&self, _sk: &Sock, state: TcpState) {
        post_state(&self.0, state);
    }

    fn error_report(&self, _sk: &Sock, err: Option<Error>) {
        if err.is_some() {
            Conn::post(&self.0, EV_CLOSED);
        }
    }
}

/// The upcall handler of a connection's socket in RTS: data and write space go to the QP.
struct QpEvents {
    qp: QpRef<Rsiw>,
    conn: Arc<Conn>,
}

impl SocketEvents for QpEvents {
    fn data_ready(&self, sk: &LockedSock) {
        link::data_arrived(&self.qp, sk);
    }

    fn write_space(&self, _sk: &Sock) {
        link::tx_ready(&self.qp);
    }

    fn state_change(&self, _sk: &Sock, state: TcpState) {
        post_state(&self.conn, state);
    }

    fn error_report(&self, _sk: &Sock, err: Option<Error>) {
        if err.is_some() {
            Conn::post(&self.conn, EV_CLOSED);
        }
    }
}

/// Our IRD or ORD as MPA carries it, from a ULP's value.
fn depth(v: u32) -> u16 {
    u16::try_from(v.min(qp::MAX_IRD_ORD)).unwrap_or(IRD_ORD_MAX)
}

/// An IRD or ORD as an `iw_cm` event carries it.
fn depth_u8(v: u16) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

fn policy(ird: u16, ord: u16) -> MpaPolicy {
    crate::knobs::policy(ird, ord)
}

/// Sends all of `bytes`.
fn send_all(sock: &TcpSocket, mut bytes: &[u8]) -> Result {
    while !bytes.is_empty() {
        let n = sock.send(&[IoSlice::new(bytes)], SendFlags::empty())?;
        bytes = bytes.get(n..).ok_or(EINVAL)?;
    }
    Ok(())
}

/// The MPA negotiation machines, as [`receive_frame`] drives them.
trait Machine {
    fn on_data(&mut self, input: &[u8]) -> MpaStep;
}

impl Machine for Initiator {
    fn on_data(&mut self, input: &[u8]) -> MpaStep {
        Initiator::on_data(self, input)
    }
}

impl Machine for Responder {
    fn on_data(&mut self, input: &[u8]) -> MpaStep {
        Responder::on_data(self, input)
    }
}

/// Feeds what the socket holds to `m`: returns its event once it reports something other than
/// [`MpaEvent::NeedMore`], `None` while it needs octets not received yet. Octets past the frame
/// stay queued; those consumed are appended to `saved`, if given. Never blocks.
fn receive_frame(
    sock: &TcpSocket,
    mut saved: Option<&mut KVec<u8>>,
    m: &mut impl Machine,
) -> Option<MpaEvent> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    loop {
        match sock.recv(&mut buf, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
            Ok(0) => return Some(MpaEvent::Failed(MpaFailure::Close(closed_error()))),
            Ok(n) => {
                let input = buf.get(..n).unwrap_or(&[]);
                let step = m.on_data(input);
                if step.consumed > 0 {
                    // Taken into the same buffer: they are the octets just peeked.
                    let Some(dst) = buf.get_mut(..step.consumed) else {
                        return Some(MpaEvent::Failed(MpaFailure::Close(closed_error())));
                    };
                    // The octets are queued (just peeked), so this cannot block.
                    let taken = sock.recv(dst, RecvFlags::DONTWAIT) == Ok(step.consumed);
                    let kept = match saved.as_deref_mut() {
                        Some(v) => v.extend_from_slice(dst, GFP_KERNEL).is_ok(),
                        None => true,
                    };
                    if !taken || !kept {
                        return Some(MpaEvent::Failed(MpaFailure::Close(closed_error())));
                    }
                }
                if step.event != MpaEvent::NeedMore {
                    return Some(step.event);
                }
                if step.consumed < n {
                    // The machine stopped short of what is queued without an event.
                    return Some(MpaEvent::Failed(MpaFailure::Close(closed_error())));
                }
            }
            Err(e) if e == EAGAIN => return None,
            Err(_) => return Some(MpaEvent::Failed(MpaFailure::Close(closed_error()))),
        }
    }
}

/// The frame error reported when the stream ends during negotiation.
fn closed_error() -> crate::proto::mpa::FrameError {
    crate::proto::mpa::FrameError::UnexpectedData
}

/// Closes `sock` after a failed or refused setup: with a FIN if `graceful`, else just releases
/// it (which resets a connection with unread data).
fn close(sock: Arc<TcpSocket>, graceful: bool) {
    sock.clear_callbacks();
    if graceful {
        let _ = sock.shutdown(Shutdown::Both);
    }
    drop(sock);
}

/// RFC 6581 §8: an initiator that cannot comply with an enhanced Reply says why in a
/// Terminate, its first and only FPDU, framed as the Reply negotiated. Returns whether it
/// went out (then the connection ends with a FIN behind it, not a reset).
fn send_setup_terminate(
    sock: &TcpSocket,
    init: &Initiator,
    err: TermError,
    dev: &Device<Rsiw>,
    remote: &SocketAddr,
) -> bool {
    let Some(mut stream) = init.terminate_stream() else {
        return false;
    };
    let mut buf = [0u8; SETUP_TERM_FPDU_MAX];
    let sent = fpdu::setup_terminate(&mut stream, err, &KernelCrc32c, &mut buf)
        .map_err(|_| EINVAL)
        .and_then(|n| send_all(sock, buf.get(..n).ok_or(EINVAL)?));
    match sent {
        Ok(()) => {
            kernel::pr_info_ratelimited!(
                "{}: sent Terminate layer {} etype {} code {:#04x} to {} (enhanced MPA setup)\n",
                dev.name(),
                err.layer() as u8,
                err.etype(),
                err.code(),
                remote
            );
            true
        }
        Err(e) => {
            kernel::pr_info_ratelimited!(
                "{}: cannot send the setup Terminate to {}: {:?}\n",
                dev.name(),
                remote,
                e
            );
            false
        }
    }
}

/// Private data from a peer as an `iw_cm` event can carry it: at most 255 bytes.
fn event_pd(pd: &[u8]) -> PrivateData<'_> {
    PrivateData::new(pd.get(..pd.len().min(PrivateData::MAX_LEN)).unwrap_or(&[]))
        .unwrap_or(PrivateData::EMPTY)
}

/// Moves the QP to RTS with the connection attached, and gives the socket's upcalls to it.
fn establish(
    conn: &Arc<Conn>,
    qp: &QpRef<Rsiw>,
    sock: &Arc<TcpSocket>,
    negotiated: Negotiated,
    role: Role,
    cm_id: CmIdKey,
) -> Result {
    let handler = Arc::new(
        QpEvents {
            qp: qp.clone(),
            conn: conn.clone(),
        },
        GFP_KERNEL,
    )?;
    let l = Link {
        socket: sock.clone(),
        negotiated,
        role,
        owner: Arc::new(EndpointLink(conn.clone()), GFP_KERNEL)?,
        cm_id,
    };
    link::attach(qp, l)?;
    crate::knobs::count(&negotiated);
    conn.dev.data().counters.inc(Counter::CmEstablished);
    if let Err(e) = sock.set_callbacks(handler) {
        drop(link::detach(qp));
        return Err(e);
    }
    // FPDUs that arrived with or right after the MPA frames are already queued.
    sock.kick_data_ready();
    pr_debug!(
        "rsiw: QP {} in RTS: MPA rev {} crc {} markers tx {} rx {} ird {} ord {} large FPDUs {}\n",
        qp.qpn(),
        negotiated.rev,
        negotiated.crc,
        negotiated.markers_tx,
        negotiated.markers_rx,
        negotiated.ird,
        negotiated.ord,
        negotiated.large_fpdu
    );
    Ok(())
}

/// Ends an established connection: closes the socket, moves the QP to ERROR and sends the
/// close with `status`.
fn finish(e: Established, status: Result) -> Phase {
    let Established { qp, sock, token } = e;
    sock.clear_callbacks();
    drop(link::detach(&qp));
    if status.is_ok() {
        // An orderly close ends with a FIN, not with the reset that releasing a socket with
        // unread data sends: drop what the receive path had not read yet.
        sock.with_locked(link::discard_inbound);
    }
    let _ = sock.shutdown(Shutdown::Both);
    drop(sock);
    pr_debug!("connection of QP {} closed\n", qp.qpn());
    let _ = token.close(status);
    Phase::Done
}

/// An established connection: waits for either side to close.
fn connected(conn: &Arc<Conn>, e: Established, events: u32) -> Phase {
    let ev = events | state_events(&e.sock);
    let hard = ev & (EV_ABORT | EV_CLOSED) != 0;
    if ev & EV_TERMINATED != 0 && !hard {
        // Releasing a socket that holds unread data resets the connection, and a reset drops
        // what TCP has not sent yet: a Terminate queued behind Read Response data that the
        // peer's window holds back would be lost. So the FIN follows the Terminate, and the
        // socket is released once the peer acknowledged that FIN (and with it the Terminate),
        // or after the close timeout. The QP goes to ERROR now.
        drop(link::detach(&e.qp));
        let _ = e.sock.shutdown(Shutdown::Write);
        e.sock.with_locked(link::discard_inbound);
        Phase::Closing(e, Err(errno::econnaborted()))
    } else if ev & EV_PEER_FIN != 0 && !hard {
        // What the peer sent before its FIN is queued ahead of it, and the receive work item
        // may not have read it yet: it is placed (and completes) before the QP leaves RTS.
        e.sock.with_locked(|sk| link::drain_inbound(&e.qp, sk));
        if conn.posted(EV_TERMINATED | EV_ABORT) || link::terminating(&e.qp) {
            // That data ended the connection (a Terminate, either way): that close takes
            // over once it is posted.
            return Phase::Connected(e);
        }
        // The peer closes in order: tell the ULP, and close our half.
        let mut e = e;
        let _ = e.token.disconnect(Ok(()));
        finish(e, Ok(()))
    } else if ev & EV_DISCONNECT != 0 && !hard {
        // The ULP closes in order: send our FIN and give the peer time to answer with its own.
        // What the peer sent before its FIN is dropped, now and as it comes.
        let _ = e.sock.shutdown(Shutdown::Write);
        e.sock.with_locked(link::discard_inbound);
        Phase::Closing(e, Ok(()))
    } else if ev & EV_ABORT != 0 {
        finish(e, Err(errno::econnaborted()))
    } else if ev & EV_CLOSED != 0 {
        finish(e, Err(errno::econnreset()))
    } else {
        Phase::Connected(e)
    }
}

/// Our FIN is out: waits for the peer's; after a Terminate (`status` an error) only for the
/// acknowledgement of ours, which says that the Terminate arrived.
fn closing(e: Established, status: Result, events: u32, expired: bool) -> Phase {
    let ev = events | state_events(&e.sock);
    let over = if status.is_ok() {
        EV_PEER_FIN | EV_CLOSED
    } else {
        EV_FIN_ACKED | EV_CLOSED
    };
    if ev & EV_ABORT != 0 || (expired && ev & over == 0) {
        finish(e, Err(errno::econnreset()))
    } else if ev & over != 0 {
        finish(e, status)
    } else {
        Phase::Closing(e, status)
    }
}

/// Reports a failed active connection (after closing its socket, if any).
fn fail_active(conn: &Arc<Conn>, a: Active, status: Error, pd: PrivateData<'_>) -> Phase {
    conn.dev.data().counters.inc(Counter::CmFailed);
    let _ = a.token.failed(status, pd);
    Phase::Done
}

/// The active side's first step: socket, bind, upcalls, non-blocking TCP connect.
fn start_active(conn: &Arc<Conn>, a: Active) -> Phase {
    let sock = match new_socket(&conn.dev, Family::of(&a.info.remote))
        .and_then(|s| Ok(Arc::new(s, GFP_KERNEL)?))
    {
        Ok(s) => s,
        Err(e) => return fail_active(conn, a, e, PrivateData::EMPTY),
    };
    let setup = bind_active(&sock, &conn.dev, &a.info)
        .and_then(|()| sock.set_callbacks(Arc::new(ConnEvents(conn.clone()), GFP_KERNEL)?))
        .and_then(|()| sock.connect_nonblocking(&a.info.remote));
    match setup {
        Ok(ConnectStatus::Connected) => send_request(conn, a, sock),
        Ok(ConnectStatus::InProgress) => Phase::TcpConnect(a, sock),
        Err(e) => {
            pr_debug!("connect to {} failed: {:?}\n", a.info.remote, e);
            close(sock, false);
            fail_active(conn, a, e, PrivateData::EMPTY)
        }
    }
}

/// Binds an active connection's socket to the port the RDMA CM chose. That port is free in the
/// RDMA CM's own port space only: when a TCP socket still holds it (one in TIME_WAIT of a
/// program that did not set `SO_REUSEADDR`, or a listener the RDMA CM does not know), any free
/// port is taken instead; the connect reply reports the address in use, which the RDMA CM
/// adopts.
fn bind_active(sock: &TcpSocket, dev: &Device<Rsiw>, info: &ConnectInfo) -> Result {
    match bind(sock, dev, &info.local, info.afonly) {
        Err(e) if e == errno::eaddrinuse() && info.local.port() != 0 => {
            let mut any = info.local;
            any.set_port(0);
            pr_debug!(
                "{}: local port {} in use, connecting from another\n",
                dev.name(),
                info.local.port()
            );
            bind(sock, dev, &any, info.afonly)
        }
        r => r,
    }
}

/// The TCP connect is in progress.
fn tcp_connected(
    conn: &Arc<Conn>,
    a: Active,
    sock: Arc<TcpSocket>,
    events: u32,
    expired: bool,
) -> Phase {
    match sock.state() {
        TcpState::Established => return send_request(conn, a, sock),
        TcpState::SynSent if !expired && events & EV_CLOSED == 0 => {
            return Phase::TcpConnect(a, sock)
        }
        _ => {}
    }
    let status = match sock.take_error() {
        Some(e) => e,
        None if expired => errno::etimedout(),
        None => errno::econnrefused(),
    };
    pr_debug!("connect to {} failed: {:?}\n", a.info.remote, status);
    close(sock, false);
    fail_active(conn, a, status, PrivateData::EMPTY)
}

/// TCP is connected: sends the MPA Request.
fn send_request(conn: &Arc<Conn>, a: Active, sock: Arc<TcpSocket>) -> Phase {
    sock.set_nodelay();
    let (init, frame): (Initiator, MpaFrame) =
        match Initiator::new(&policy(a.ird, a.ord), &a.private_data) {
            Ok(x) => x,
            Err(_) => {
                close(sock, true);
                return fail_active(conn, a, EINVAL, PrivateData::EMPTY);
            }
        };
    if let Err(e) = send_all(&sock, frame.as_bytes()) {
        close(sock, false);
        return fail_active(conn, a, e, PrivateData::EMPTY);
    }
    // The Reply may be queued already.
    await_reply(conn, a, sock, init, false)
}

/// The MPA Request is out: takes the Reply.
fn await_reply(
    conn: &Arc<Conn>,
    a: Active,
    sock: Arc<TcpSocket>,
    mut init: Initiator,
    expired: bool,
) -> Phase {
    let ev = match receive_frame(&sock, None, &mut init) {
        Some(ev) => ev,
        None if expired => {
            conn.dev.data().counters.inc(Counter::CmMpaTimeouts);
            init.on_timeout()
        }
        None => return Phase::AwaitReply(a, sock, init),
    };
    let dev = &conn.dev;
    let remote = a.info.remote;
    let n = match ev {
        MpaEvent::Established(n) => n,
        MpaEvent::Rejected(_) => {
            dev.data().counters.inc(Counter::CmRejected);
            pr_debug!("MPA Request to {} rejected\n", remote);
            let _ = a
                .token
                .failed(errno::econnrefused(), event_pd(init.peer_private_data()));
            close(sock, true);
            return Phase::Done;
        }
        MpaEvent::Failed(f) => {
            kernel::pr_info_ratelimited!(
                "{}: MPA negotiation with {} failed: {:?}\n",
                dev.name(),
                remote,
                f
            );
            let status = match f {
                MpaFailure::Timeout => errno::etimedout(),
                // The Reply was well-formed but cannot be complied with: a protocol error
                // (RDMA_CM_EVENT_CONNECT_ERROR), not a rejection by the peer.
                MpaFailure::Terminate(_) => errno::eproto(),
                _ => errno::econnreset(),
            };
            let graceful = match f {
                MpaFailure::Terminate(err) => send_setup_terminate(&sock, &init, err, dev, &remote),
                _ => false,
            };
            close(sock, graceful);
            return fail_active(conn, a, status, PrivateData::EMPTY);
        }
        MpaEvent::NeedMore | MpaEvent::RequestReceived => {
            close(sock, false);
            return fail_active(conn, a, errno::eproto(), PrivateData::EMPTY);
        }
    };
    let local = sock.local_addr().unwrap_or(a.info.local);
    let remote = sock.peer_addr().unwrap_or(remote);
    let Active { token, qp, .. } = a;
    if let Err(e) = establish(conn, &qp, &sock, n, Role::Initiator, token.id().key()) {
        close(sock, false);
        let _ = token.failed(e, PrivateData::EMPTY);
        return Phase::Done;
    }
    let ci = ConnInfo {
        private_data: event_pd(init.peer_private_data()),
        ird: depth_u8(n.ird),
        ord: depth_u8(n.ord),
        local,
        remote,
    };
    match token.connected(&ci) {
        Ok(token) => {
            let e = Established { qp, sock, token };
            // The peer may have closed already.
            connected(conn, e, 0)
        }
        Err(f) => {
            // No memory for the private data: the connection cannot be reported.
            sock.clear_callbacks();
            drop(link::detach(&qp));
            close(sock, false);
            let _ = f.back.failed(ENOMEM, PrivateData::EMPTY);
            Phase::Done
        }
    }
}

/// A passive connection waits for its MPA Request.
fn await_request(conn: &Arc<Conn>, mut p: Passive, events: u32, expired: bool) -> Phase {
    let dev = &conn.dev;
    if events & EV_ABORT != 0 {
        // The listener is gone: the request could not be reported.
        close(p.sock, false);
        return Phase::Done;
    }
    let ev = match receive_frame(&p.sock, Some(&mut p.saved), &mut p.resp) {
        Some(ev) => ev,
        None if expired => {
            dev.data().counters.inc(Counter::CmMpaTimeouts);
            p.resp.on_timeout()
        }
        None => return Phase::AwaitRequest(p),
    };
    // The handshake slot is free again, whatever comes next.
    p.slot = None;
    if ev != MpaEvent::RequestReceived {
        dev.data().counters.inc(Counter::CmFailed);
        kernel::pr_info_ratelimited!(
            "{}: no valid MPA Request from {}: {:?}\n",
            dev.name(),
            p.remote,
            ev
        );
        close(p.sock, false);
        return Phase::Done;
    }
    let (peer_ird, peer_ord) = p
        .resp
        .request_enhanced()
        .map_or((IRD_ORD_MAX, IRD_ORD_MAX), |e| (e.ird, e.ord));
    let cap = depth(qp::MAX_IRD_ORD);
    if p.resp.peer_private_data().len() > PrivateData::MAX_LEN {
        kernel::pr_info_ratelimited!(
            "{}: MPA Request from {} has more private data than iw_cm takes\n",
            dev.name(),
            p.remote
        );
        if let Ok(frame) = p.resp.reject(&[]) {
            let _ = send_all(&p.sock, frame.as_bytes());
        }
        close(p.sock, true);
        return Phase::Done;
    }
    let info = ConnInfo {
        private_data: event_pd(p.resp.peer_private_data()),
        ird: depth_u8(peer_ord.min(cap)),
        ord: depth_u8(peer_ird.min(cap)),
        local: p.local,
        remote: p.remote,
    };
    let Some(listen_id) = p.listen_id.take() else {
        close(p.sock, false);
        return Phase::Done;
    };
    if let Err(f) = listen_id.connect_request(conn.clone(), &info) {
        kernel::pr_info_ratelimited!(
            "{}: connect request from {} dropped: {:?}\n",
            dev.name(),
            p.remote,
            f.error
        );
        close(p.sock, false);
        return Phase::Done;
    }
    Phase::AwaitAnswer(p)
}

/// The request was reported: waits for the ULP's accept or reject.
fn await_answer(conn: &Arc<Conn>, mut p: Passive, events: u32, expired: bool) -> Phase {
    let dev = &conn.dev;
    let answer = {
        let mut st = conn.state.lock();
        let answer = st.answer.take();
        if answer.is_none() && !expired && events & (EV_CLOSED | EV_PEER_FIN) == 0 {
            return Phase::AwaitAnswer(p);
        }
        st.gone = true;
        answer
    };
    let Some(answer) = answer else {
        dev.data().counters.inc(Counter::CmFailed);
        kernel::pr_info_ratelimited!(
            "{}: connect request from {} not answered\n",
            dev.name(),
            p.remote
        );
        close(p.sock, false);
        return Phase::Done;
    };
    let (token, qp, pd, ird, ord) = match answer {
        Answer::Reject { private_data } => {
            dev.data().counters.inc(Counter::CmRejected);
            if let Ok(frame) = p.resp.reject(&private_data) {
                let _ = send_all(&p.sock, frame.as_bytes());
            }
            close(p.sock, true);
            return Phase::Done;
        }
        Answer::Accept {
            token,
            qp,
            private_data,
            ird,
            ord,
        } => (token, qp, private_data, ird, ord),
    };
    let sock = p.sock;
    let mut resp = Responder::new(&policy(ird, ord));
    let replay = resp.on_data(&p.saved);
    let accepted = if replay.event == MpaEvent::RequestReceived {
        resp.accept(&pd)
    } else {
        Err(MpaFailure::Close(closed_error()))
    };
    let (frame, n) = match accepted {
        Ok(x) => x,
        Err(f) => {
            dev.data().counters.inc(Counter::CmFailed);
            kernel::pr_info_ratelimited!(
                "{}: cannot accept MPA Request from {}: {:?}\n",
                dev.name(),
                p.remote,
                f
            );
            close(sock, false);
            // Dropping the token sends the established event and a close.
            drop(token);
            return Phase::Done;
        }
    };
    if let Err(e) = establish(conn, &qp, &sock, n, Role::Responder, token.id().key()) {
        dev.data().counters.inc(Counter::CmFailed);
        kernel::pr_info_ratelimited!(
            "{}: QP {} cannot go to RTS: {:?}\n",
            dev.name(),
            qp.qpn(),
            e
        );
        close(sock, false);
        drop(token);
        return Phase::Done;
    }
    let sent = send_all(&sock, frame.as_bytes());
    match token.established(depth_u8(n.ird), depth_u8(n.ord)) {
        Ok(token) => {
            let e = Established { qp, sock, token };
            connected(conn, e, if sent.is_err() { EV_CLOSED } else { 0 })
        }
        Err(f) => {
            sock.clear_callbacks();
            drop(link::detach(&qp));
            close(sock, false);
            drop(f.back);
            Phase::Done
        }
    }
}

/// A connection of a listener waiting for its MPA Request.
struct Waiting {
    source: IpAddr,
    /// Its endpoint, once made (to abort it when the listener goes).
    conn: Option<Arc<Conn>>,
}

/// A listener's connections waiting for their MPA Request, behind [`Listener::handshakes`]: a
/// spinlock that disables interrupts, as a slot is freed wherever the endpoint holding it is
/// dropped, not only by work items. Taken under the listener's socket mutex and an endpoint's
/// phase; no other lock is taken under it.
struct Handshakes {
    /// One entry per waiting connection; freed entries (`None`) are reused, so there are
    /// never more than [`MAX_HANDSHAKES`], the capacity reserved at creation.
    slots: KVec<Option<Waiting>>,
    /// The entries in use.
    total: usize,
}

/// A connection's entry among its listener's handshakes; freed on drop.
struct HandshakeSlot {
    listener: Arc<Listener>,
    index: usize,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut h = self.listener.handshakes.lock();
        // The endpoint reference dropped here is never the last: the slot lives in the
        // endpoint's own phase.
        if let Some(e) = h.slots.get_mut(self.index) {
            if e.take().is_some() {
                h.total = h.total.saturating_sub(1);
            }
        }
    }
}

/// A listening endpoint.
///
/// `handshakes` is taken from any context (a slot may be freed wherever an endpoint goes);
/// `sock` only by the work item, `create_listen` and `destroy_listen`.
#[pin_data]
pub(crate) struct Listener {
    /// Held so that unregistering the device waits for the listener (see [`Conn::dev`]).
    dev: ARef<Device<Rsiw>>,
    id: ListenId<RsiwCm>,
    /// The listening socket, taken by `destroy_listen`. A mutex, locked in process context by
    /// the work item, `create_listen` and `destroy_listen`: the work item holds it across a round
    /// of accepts (which sleep for the socket lock), taking the handshakes and new endpoints'
    /// phase and state under it, so `destroy_listen` waits for that round.
    #[pin]
    sock: Mutex<Option<TcpListener>>,
    #[pin]
    handshakes: SpinLockIrq<Handshakes>,
    #[pin]
    work: DelayedWork<Listener>,
}

kernel::impl_has_delayed_work! {
    impl HasDelayedWork for Listener { self.work }
}

impl Listener {
    /// Takes a handshake slot for a connection from `source`, unless the listener is full.
    fn admit(this: &Arc<Self>, source: IpAddr) -> Result<HandshakeSlot> {
        let mut h = this.handshakes.lock();
        if h.total >= MAX_HANDSHAKES {
            return Err(EBUSY);
        }
        let from_source = h
            .slots
            .iter()
            .flatten()
            .filter(|w| w.source == source)
            .count();
        if from_source >= MAX_HANDSHAKES_PER_SOURCE {
            return Err(EBUSY);
        }
        let entry = Some(Waiting { source, conn: None });
        let index = match h.slots.iter().position(|e| e.is_none()) {
            Some(i) => {
                if let Some(e) = h.slots.get_mut(i) {
                    *e = entry;
                }
                i
            }
            None => {
                // Every entry in use, fewer than `MAX_HANDSHAKES`: within the reserved
                // capacity, so this does not allocate.
                h.slots.push(entry, GFP_ATOMIC)?;
                h.slots.len() - 1
            }
        };
        h.total += 1;
        Ok(HandshakeSlot {
            listener: this.clone(),
            index,
        })
    }

    /// Records the endpoint of the connection in handshake slot `index`, before its work item
    /// first runs (which is when the slot may go).
    fn attach(this: &Arc<Self>, index: usize, conn: &Arc<Conn>) {
        let mut h = this.handshakes.lock();
        if let Some(Some(w)) = h.slots.get_mut(index) {
            w.conn = Some(conn.clone());
        }
    }

    /// Aborts every connection still waiting for its MPA Request (its request could not be
    /// reported any more). Process context.
    fn abort_handshakes(this: &Arc<Self>) {
        let Ok(mut waiting) = KVec::with_capacity(MAX_HANDSHAKES, GFP_KERNEL) else {
            // They time out instead.
            return;
        };
        {
            let h = this.handshakes.lock();
            for c in h.slots.iter().flatten().filter_map(|w| w.conn.as_ref()) {
                // Within the capacity: does not allocate.
                if waiting.push(c.clone(), GFP_ATOMIC).is_err() {
                    break;
                }
            }
        }
        for c in waiting.iter() {
            Conn::post(c, EV_ABORT);
        }
    }
}

impl DelayedWorkItem for Listener {
    /// Accepts every pending connection and starts its endpoint.
    fn run(this: Arc<Self>) {
        let guard = this.sock.lock();
        let Some(sock) = guard.as_ref() else {
            return;
        };
        loop {
            match sock.accept() {
                Ok(Some(s)) => start_passive(&this, s),
                Ok(None) => break,
                Err(e) => {
                    kernel::pr_warn_ratelimited!("{}: accept failed: {:?}\n", this.dev.name(), e);
                    break;
                }
            }
        }
    }
}

/// Starts the endpoint of an accepted connection, or resets it if the listener is full.
fn start_passive(l: &Arc<Listener>, s: TcpSocket) {
    let dev = &l.dev;
    let (local, remote) = match (s.local_addr(), s.peer_addr()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return,
    };
    let slot = match Listener::admit(l, remote.ip()) {
        Ok(slot) => slot,
        Err(_) => {
            dev.data().counters.inc(Counter::CmHandshakesRefused);
            kernel::pr_info_ratelimited!(
                "{}: too many MPA handshakes in progress: connection from {} reset\n",
                dev.name(),
                remote
            );
            s.set_abortive_close();
            return;
        }
    };
    let Ok(sock) = Arc::new(s, GFP_KERNEL) else {
        return;
    };
    let index = slot.index;
    let p = Passive {
        sock: sock.clone(),
        local,
        remote,
        listen_id: Some(l.id.clone()),
        slot: Some(slot),
        saved: KVec::new(),
        // Our IRD/ORD are the ULP's, known only at accept: the Request is kept and replayed
        // into a responder with the final policy then.
        resp: Responder::new(&policy(depth(qp::MAX_IRD_ORD), depth(qp::MAX_IRD_ORD))),
    };
    let conn = match Conn::new(dev, Phase::AwaitRequest(p)) {
        Ok(c) => c,
        Err(_) => {
            kernel::pr_warn_ratelimited!(
                "{}: out of memory, connection from {} dropped\n",
                dev.name(),
                remote
            );
            sock.set_abortive_close();
            return;
        }
    };
    let installed = Arc::new(ConnEvents(conn.clone()), GFP_KERNEL)
        .map_err(Error::from)
        .and_then(|h| sock.set_callbacks(h));
    if let Err(e) = installed {
        kernel::pr_info_ratelimited!(
            "{}: connection from {} refused: {:?}\n",
            dev.name(),
            remote,
            e
        );
        sock.set_abortive_close();
        drop(sock);
        // Drops the socket (a reset), the handshake slot and the listener's id.
        *conn.phase.lock() = Phase::Done;
        return;
    }
    sock.set_nodelay();
    Listener::attach(l, index, &conn);
    // The Request may be queued already; the first run also arms the MPA timeout.
    Conn::post(&conn, EV_DATA);
}

/// The upcall handler of a listening socket.
struct ListenEvents(Arc<Listener>);

impl ListenerEvents for ListenEvents {
    fn incoming(&self, _sk: &Sock) {
        DelayedWork::reschedule(&self.0, crate::device::workqueue(&self.0.dev), 0);
    }
}

/// rsiw's iw_cm operations.
pub(crate) struct RsiwCm;

/// A TCP socket of `family` in the network namespace of `dev`'s netdev, which may be another
/// than the caller's: the device listens and connects where its netdev is. The socket does not
/// hold that namespace; the device goes away with its netdev, and closes its sockets first.
fn new_socket(dev: &Device<Rsiw>, family: Family) -> Result<TcpSocket> {
    let ns = dev
        .netdev(PORT)
        .and_then(|nd| Namespace::of_netdev(&nd))
        .ok_or(ENODEV)?;
    TcpSocket::new(&ns, family)
}

/// Binds `sock` for `local` on `dev`: a wildcard address binds to the device's netdev.
fn bind(sock: &TcpSocket, dev: &Device<Rsiw>, local: &SocketAddr, afonly: bool) -> Result {
    sock.set_reuseaddr();
    if afonly && local.is_ipv6() {
        sock.set_v6only()?;
    }
    if local.ip().is_unspecified() {
        if let Some(nd) = dev.netdev(PORT) {
            sock.bind_to_ifindex(nd.ifindex())?;
        }
    }
    if !local.ip().is_unspecified() || local.port() != 0 {
        sock.bind(local)?;
    }
    Ok(())
}

/// The QP and a copy of the private data of a `connect` or `accept`.
///
/// The private data must fit in an MPA frame next to the RFC 6581 enhanced data.
fn ulp_args(dev: &Device<Rsiw>, param: &ConnParam<'_>) -> Result<(QpRef<Rsiw>, KVec<u8>)> {
    let qp = Rsiw::get_qp(dev, param.qpn).ok_or(EINVAL)?;
    if param.private_data.len() > MAX_PRIVATE_DATA - ENHANCED_LEN {
        return Err(EINVAL);
    }
    let mut private_data = KVec::new();
    private_data.extend_from_slice(param.private_data, GFP_KERNEL)?;
    Ok((qp, private_data))
}

#[vtable]
impl IwCm for RsiwCm {
    type Driver = Rsiw;
    type Endpoint = Arc<Conn>;
    type Listener = Arc<Listener>;

    fn connect(
        dev: &Device<Rsiw>,
        conn: Connecting<Self>,
        info: &ConnectInfo,
        param: &ConnParam<'_>,
    ) -> Result<(), Failed<Connecting<Self>>> {
        let (qp, private_data) = match ulp_args(dev, param) {
            Ok(x) => x,
            Err(e) => return Err(Failed::new(e, conn)),
        };
        let a = Active {
            token: conn,
            info: *info,
            qp,
            private_data,
            ird: depth(param.ird),
            ord: depth(param.ord),
        };
        // The endpoint owns the token: if it cannot be made, the token is dropped with it and
        // the connect reply reports the failure, so the operation itself succeeded.
        match Conn::new(dev, Phase::Start(a)) {
            Ok(c) => Conn::post(&c, 0),
            Err(_) => pr_warn!("{}: out of memory for a connect\n", dev.name()),
        }
        Ok(())
    }

    fn accept(
        dev: &Device<Rsiw>,
        conn: Accepting<Self>,
        endpoint: Arc<Conn>,
        param: &ConnParam<'_>,
    ) -> Result<(), Failed<Accepting<Self>>> {
        let (qp, private_data) = match ulp_args(dev, param) {
            Ok(x) => x,
            Err(e) => return Err(Failed::new(e, conn)),
        };
        let mut st = endpoint.state.lock();
        if st.gone || st.answer.is_some() {
            return Err(Failed::new(errno::econnreset(), conn));
        }
        st.answer = Some(Answer::Accept {
            token: conn,
            qp,
            private_data,
            ird: depth(param.ird),
            ord: depth(param.ord),
        });
        drop(st);
        Conn::post(&endpoint, EV_ANSWER);
        Ok(())
    }

    fn reject(_dev: &Device<Rsiw>, endpoint: Arc<Conn>, pd: PrivateData<'_>) -> Result {
        let mut private_data = KVec::new();
        private_data.extend_from_slice(pd.as_bytes(), GFP_KERNEL)?;
        let mut st = endpoint.state.lock();
        if st.gone || st.answer.is_some() {
            return Err(errno::econnreset());
        }
        st.answer = Some(Answer::Reject { private_data });
        drop(st);
        Conn::post(&endpoint, EV_ANSWER);
        Ok(())
    }

    fn create_listen(
        dev: &Device<Rsiw>,
        listener: ListenId<Self>,
        info: &ListenInfo,
        backlog: u32,
    ) -> Result<Arc<Listener>> {
        let sock = new_socket(dev, Family::of(&info.local))?;
        bind(&sock, dev, &info.local, info.afonly)?;
        let sock = sock.listen(backlog.max(1))?;
        let mut slots = KVec::new();
        slots.reserve(MAX_HANDSHAKES, GFP_KERNEL)?;
        let l = Arc::pin_init(
            pin_init!(Listener {
                dev: dev.into(),
                id: listener,
                sock <- new_mutex!(None, "rsiw::cm::Listener::sock"),
                handshakes <- new_spinlock_irq!(
                    Handshakes { slots, total: 0 },
                    "rsiw::cm::Listener::handshakes"
                ),
                work <- kernel::new_delayed_work!("rsiw::cm::Listener::work"),
            }),
            GFP_KERNEL,
        )?;
        sock.set_callbacks(Arc::new(ListenEvents(l.clone()), GFP_KERNEL)?)?;
        *l.sock.lock() = Some(sock);
        // Connections that arrived before the upcalls were ours.
        DelayedWork::reschedule(&l, crate::device::workqueue(dev), 0);
        pr_debug!("{} listens on {}\n", dev.name(), info.local);
        Ok(l)
    }

    fn destroy_listen(_dev: &Device<Rsiw>, listener: Arc<Listener>) -> Result {
        // Waits for an accept round in progress; the work item never waits for the `iw_cm`.
        let sock = listener.sock.lock().take();
        if let Some(s) = sock {
            s.clear_callbacks();
            drop(s);
        }
        DelayedWork::cancel_sync(&listener);
        Listener::abort_handshakes(&listener);
        Ok(())
    }
}
