// SPDX-License-Identifier: GPL-2.0

//! The iWARP connection manager: MPA connection setup over kernel TCP sockets.
//!
//! Every connection (and every listener) is driven by one work item on the system's
//! long-running workqueue, which runs the whole life of the connection as straight-line code:
//! TCP connect or accept, the MPA exchange (RFC 5044 §7.1, RFC 6581) through the protocol
//! core's [`Initiator`]/[`Responder`], the hand-off to the QP ([`crate::qp::link`]), and the
//! teardown. It sleeps on the endpoint's [`Conn`] wait queue, which the socket upcalls (softirq
//! context: they only record what happened and wake the worker), the `iw_cm` operations
//! (`accept`, `reject`) and the QP (a ULP moving it to SQD or ERROR, or the data path reporting
//! the end of the stream) post events to. All `iw_cm` events of a connection are sent from its
//! worker, in the order the `iw_cm` accepts, by consuming the tokens of
//! [`kernel::rdma::iwcm`].
//!
//! Timeouts: the TCP connect ([`CONNECT_TIMEOUT_MS`]), the MPA Request or Reply
//! ([`MPA_TIMEOUT_MS`]), the ULP's accept or reject of a request ([`ULP_TIMEOUT_MS`]) and an
//! orderly close ([`CLOSE_TIMEOUT_MS`]).

#![deny(unsafe_code)]

use crate::{
    crc::KernelCrc32c,
    device::Rsiw,
    proto::{
        error::TermError,
        fpdu::{self, SETUP_TERM_FPDU_MAX},
        mpa::{MpaFrame, ENHANCED_LEN, IRD_ORD_MAX, MAX_FRAME_LEN, MAX_PRIVATE_DATA},
        negotiate::{Initiator, MpaEvent, MpaFailure, MpaPolicy, MpaStep, Negotiated, Responder},
    },
    qp::{
        self,
        link::{self, Link, Role},
    },
};
use kernel::{
    irqlock::SpinLockIrq,
    ksock::{
        errno, Family, IoSlice, ListenerEvents, LockedSock, RecvFlags, SendFlags, Shutdown, Sock,
        SocketAddr, SocketEvents, TcpListener, TcpSocket, TcpState,
    },
    new_condvar, new_spinlock_irq,
    prelude::*,
    rdma::{
        device::{Device, Driver},
        iwcm::{
            Accepting, ConnInfo, ConnParam, ConnectInfo, Connected, Connecting, Failed, IwCm,
            ListenId, ListenInfo, PrivateData,
        },
        qp::QpRef,
    },
    sync::{Arc, CondVar, CondVarTimeoutResult},
    time::{msecs_to_jiffies, Jiffies, Msecs},
    types::ARef,
    workqueue,
};

/// How long a TCP connect may take.
pub(crate) const CONNECT_TIMEOUT_MS: Msecs = 10_000;
/// How long to wait for the peer's MPA Request or Reply once TCP is connected.
pub(crate) const MPA_TIMEOUT_MS: Msecs = 10_000;
/// How long a connect request may wait for the ULP's accept or reject.
pub(crate) const ULP_TIMEOUT_MS: Msecs = 30_000;
/// How long an orderly close waits for the peer's FIN before aborting.
pub(crate) const CLOSE_TIMEOUT_MS: Msecs = 5_000;

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
/// A listener is being destroyed.
const EV_STOP: u32 = 1 << 6;
/// A listener's worker has released its socket.
const EV_EXITED: u32 = 1 << 7;
/// A connection is waiting on the listener.
const EV_INCOMING: u32 = 1 << 8;

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

struct ConnState {
    /// Posted events not yet taken by the worker.
    events: u32,
    /// The ULP's answer, for a passive endpoint.
    answer: Option<Answer>,
    /// The worker stopped waiting for an answer: a late accept must fail.
    gone: bool,
    /// The QP, once the connection is established (for the data path's upcalls).
    qp: Option<QpRef<Rsiw>>,
}

/// The shared state of a connection or listener endpoint: posted events and a wait queue.
#[pin_data]
pub(crate) struct Conn {
    #[pin]
    state: SpinLockIrq<ConnState>,
    #[pin]
    wake: CondVar,
}

impl Conn {
    fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                state <- new_spinlock_irq!(
                    ConnState { events: 0, answer: None, gone: false, qp: None },
                    "rsiw::cm::Conn::state"
                ),
                wake <- new_condvar!("rsiw::cm::Conn::wake"),
            }),
            GFP_KERNEL,
        )
    }

    /// Posts `events` and wakes the worker. Any context.
    fn post(&self, events: u32) {
        self.state.lock().events |= events;
        self.wake.notify_all();
    }

    /// Waits until one of `mask` is posted, at most `*left` jiffies (`None`: no limit), and
    /// takes those posted. Returns 0 when the time is up.
    fn wait(&self, mask: u32, left: &mut Option<Jiffies>) -> u32 {
        let mut g = self.state.lock();
        loop {
            let hit = g.events & mask;
            if hit != 0 {
                g.events &= !hit;
                return hit;
            }
            let t = match *left {
                Some(0) => return 0,
                Some(t) => t,
                None => Jiffies::MAX,
            };
            match self.wake.wait_interruptible_timeout(&mut g, t) {
                CondVarTimeoutResult::Woken { jiffies } => {
                    if left.is_some() {
                        *left = Some(jiffies)
                    }
                }
                // Workers get no signals; treat one like the end of the time.
                CondVarTimeoutResult::Timeout | CondVarTimeoutResult::Signal { .. } => {
                    if left.is_some() {
                        *left = Some(0)
                    } else {
                        return 0;
                    }
                }
            }
        }
    }

    /// The data path hit a fatal error.
    pub(crate) fn abort(&self) {
        self.post(EV_ABORT);
    }

    /// The ULP moved the QP to SQD (`graceful`) or ERROR; the link is already detached.
    pub(crate) fn ulp_close(&self, graceful: bool) {
        self.post(if graceful { EV_DISCONNECT } else { EV_ABORT });
    }
}

/// The upcall handler of a connection's socket.
struct ConnEvents(Arc<Conn>);

impl ConnEvents {
    fn qp(&self) -> Option<QpRef<Rsiw>> {
        self.0.state.lock().qp.clone()
    }
}

impl SocketEvents for ConnEvents {
    fn data_ready(&self, sk: &LockedSock) {
        match self.qp() {
            Some(qp) => link::rx_ready(&qp, sk),
            None => self.0.post(EV_DATA),
        }
    }

    fn state_change(&self, _sk: &Sock, state: TcpState) {
        match state {
            TcpState::CloseWait => self.0.post(EV_PEER_FIN),
            TcpState::Close | TcpState::TimeWait => self.0.post(EV_CLOSED),
            _ => {}
        }
    }

    fn error_report(&self, _sk: &Sock, err: Option<Error>) {
        if err.is_some() {
            self.0.post(EV_CLOSED);
        }
    }
}

/// The upcall handler of a listening socket.
struct ListenEvents(Arc<Conn>);

impl ListenerEvents for ListenEvents {
    fn incoming(&self, _sk: &Sock) {
        self.0.post(EV_INCOMING);
    }
}

/// A listening endpoint: its worker owns the socket.
pub(crate) struct Listener {
    conn: Arc<Conn>,
}

/// rsiw's iw_cm operations.
pub(crate) struct RsiwCm;

fn jiffies(ms: Msecs) -> Option<Jiffies> {
    Some(msecs_to_jiffies(ms))
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
    fn on_timeout(&mut self) -> MpaEvent;
}

impl Machine for Initiator {
    fn on_data(&mut self, input: &[u8]) -> MpaStep {
        Initiator::on_data(self, input)
    }
    fn on_timeout(&mut self) -> MpaEvent {
        Initiator::on_timeout(self)
    }
}

impl Machine for Responder {
    fn on_data(&mut self, input: &[u8]) -> MpaStep {
        Responder::on_data(self, input)
    }
    fn on_timeout(&mut self) -> MpaEvent {
        Responder::on_timeout(self)
    }
}

/// Feeds what the socket holds to `m` until it reports something other than
/// [`MpaEvent::NeedMore`], or the time is up (`None`). Octets past the frame stay queued.
fn receive_frame(
    sock: &TcpSocket,
    conn: &Conn,
    saved: &mut KVec<u8>,
    m: &mut impl Machine,
) -> MpaEvent {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let mut left = jiffies(MPA_TIMEOUT_MS);
    loop {
        match sock.recv(&mut buf, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
            Ok(0) => return MpaEvent::Failed(MpaFailure::Close(closed_error())),
            Ok(n) => {
                let input = buf.get(..n).unwrap_or(&[]);
                let step = m.on_data(input);
                if step.consumed > 0 {
                    let mut sink = [0u8; MAX_FRAME_LEN];
                    let Some(dst) = sink.get_mut(..step.consumed) else {
                        return MpaEvent::Failed(MpaFailure::Close(closed_error()));
                    };
                    // The octets are queued (just peeked), so this cannot block.
                    if sock.recv(dst, RecvFlags::DONTWAIT) != Ok(step.consumed)
                        || saved.extend_from_slice(dst, GFP_KERNEL).is_err()
                    {
                        return MpaEvent::Failed(MpaFailure::Close(closed_error()));
                    }
                }
                if step.event != MpaEvent::NeedMore {
                    return step.event;
                }
                if step.consumed < n {
                    // The machine stopped short of what is queued without an event.
                    return MpaEvent::Failed(MpaFailure::Close(closed_error()));
                }
            }
            Err(e) if e == EAGAIN => {}
            Err(_) => return MpaEvent::Failed(MpaFailure::Close(closed_error())),
        }
        if conn.wait(EV_DATA | EV_PEER_FIN | EV_CLOSED, &mut left) == 0 {
            return m.on_timeout();
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
            pr_info!(
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
            pr_info!(
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

/// Moves the QP to RTS with the connection attached.
fn establish(
    conn: &Arc<Conn>,
    qp: &QpRef<Rsiw>,
    sock: &Arc<TcpSocket>,
    negotiated: Negotiated,
    role: Role,
) -> Result {
    let l = Link {
        socket: sock.clone(),
        negotiated,
        role,
        conn: conn.clone(),
    };
    link::attach(qp, l)?;
    crate::knobs::count(&negotiated);
    conn.state.lock().qp = Some(qp.clone());
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

/// Runs an established connection until it ends, then closes it and sends the close.
fn run_connected(conn: &Conn, qp: QpRef<Rsiw>, sock: Arc<TcpSocket>, mut token: Connected<RsiwCm>) {
    let ev = conn.wait(
        EV_PEER_FIN | EV_CLOSED | EV_DISCONNECT | EV_ABORT,
        &mut None,
    );
    let hard = ev & (EV_ABORT | EV_CLOSED) != 0;
    let status = if ev & EV_PEER_FIN != 0 && !hard {
        // The peer closes in order: tell the ULP, and close our half.
        let _ = token.disconnect(Ok(()));
        Ok(())
    } else if ev & EV_DISCONNECT != 0 && !hard {
        // The ULP closes in order: send our FIN and give the peer time to answer with its own.
        let _ = sock.shutdown(Shutdown::Write);
        let mut left = jiffies(CLOSE_TIMEOUT_MS);
        let ev = conn.wait(EV_PEER_FIN | EV_CLOSED | EV_ABORT, &mut left);
        if ev != 0 && ev & EV_ABORT == 0 {
            Ok(())
        } else {
            Err(errno::econnreset())
        }
    } else if ev & EV_ABORT != 0 {
        Err(errno::econnaborted())
    } else {
        Err(errno::econnreset())
    };
    conn.state.lock().qp = None;
    sock.clear_callbacks();
    drop(link::detach(&qp));
    let _ = sock.shutdown(Shutdown::Both);
    drop(sock);
    pr_debug!("connection of QP {} closed\n", qp.qpn());
    let _ = token.close(status);
}

/// Everything an active connection's worker needs.
struct Active {
    dev: ARef<Device<Rsiw>>,
    token: Connecting<RsiwCm>,
    info: ConnectInfo,
    qp: QpRef<Rsiw>,
    private_data: KVec<u8>,
    ird: u16,
    ord: u16,
}

/// Binds `sock` for `local` on `dev`: a wildcard address binds to the device's netdev.
fn bind(sock: &TcpSocket, dev: &Device<Rsiw>, local: &SocketAddr, afonly: bool) -> Result {
    sock.set_reuseaddr();
    if afonly && local.is_ipv6() {
        sock.set_v6only()?;
    }
    if local.ip().is_unspecified() {
        if let Some(nd) = dev.netdev(1) {
            sock.bind_to_ifindex(nd.ifindex())?;
        }
    }
    if !local.ip().is_unspecified() || local.port() != 0 {
        sock.bind(local)?;
    }
    Ok(())
}

/// The active side: TCP connect, MPA Request, Reply, RTS, connected.
fn run_active(a: Active) {
    let Active {
        dev,
        token,
        info,
        qp,
        private_data,
        ird,
        ord,
    } = a;
    let conn = match Conn::new() {
        Ok(c) => c,
        Err(e) => {
            let _ = token.failed(e, PrivateData::EMPTY);
            return;
        }
    };
    let sock =
        match TcpSocket::new(Family::of(&info.remote)).and_then(|s| Ok(Arc::new(s, GFP_KERNEL)?)) {
            Ok(s) => s,
            Err(e) => {
                let _ = token.failed(e, PrivateData::EMPTY);
                return;
            }
        };
    let setup = bind(&sock, &dev, &info.local, info.afonly)
        .and_then(|()| sock.set_callbacks(Arc::new(ConnEvents(conn.clone()), GFP_KERNEL)?))
        .and_then(|()| sock.connect(&info.remote, Some(CONNECT_TIMEOUT_MS)));
    if let Err(e) = setup {
        pr_debug!("connect to {} failed: {:?}\n", info.remote, e);
        close(sock, false);
        let _ = token.failed(e, PrivateData::EMPTY);
        return;
    }
    sock.set_nodelay();
    let (mut init, frame): (Initiator, MpaFrame) =
        match Initiator::new(&policy(ird, ord), &private_data) {
            Ok(x) => x,
            Err(_) => {
                close(sock, true);
                let _ = token.failed(EINVAL, PrivateData::EMPTY);
                return;
            }
        };
    if let Err(e) = send_all(&sock, frame.as_bytes()) {
        close(sock, false);
        let _ = token.failed(e, PrivateData::EMPTY);
        return;
    }
    let mut saved = KVec::new();
    let ev = receive_frame(&sock, &conn, &mut saved, &mut init);
    let peer_pd = init.peer_private_data();
    let n = match ev {
        MpaEvent::Established(n) => n,
        MpaEvent::Rejected(_) => {
            pr_debug!("MPA Request to {} rejected\n", info.remote);
            let _ = token.failed(errno::econnrefused(), event_pd(peer_pd));
            close(sock, true);
            return;
        }
        MpaEvent::Failed(f) => {
            pr_info!(
                "{}: MPA negotiation with {} failed: {:?}\n",
                dev.name(),
                info.remote,
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
                MpaFailure::Terminate(err) => {
                    send_setup_terminate(&sock, &init, err, &dev, &info.remote)
                }
                _ => false,
            };
            close(sock, graceful);
            let _ = token.failed(status, PrivateData::EMPTY);
            return;
        }
        MpaEvent::NeedMore | MpaEvent::RequestReceived => {
            close(sock, false);
            let _ = token.failed(errno::eproto(), PrivateData::EMPTY);
            return;
        }
    };
    let local = sock.local_addr().unwrap_or(info.local);
    let remote = sock.peer_addr().unwrap_or(info.remote);
    if let Err(e) = establish(&conn, &qp, &sock, n, Role::Initiator) {
        close(sock, false);
        let _ = token.failed(e, PrivateData::EMPTY);
        return;
    }
    let ci = ConnInfo {
        private_data: event_pd(peer_pd),
        ird: depth_u8(n.ird),
        ord: depth_u8(n.ord),
        local,
        remote,
    };
    let token = match token.connected(&ci) {
        Ok(t) => t,
        Err(f) => {
            // No memory for the private data: the connection cannot be reported.
            conn.state.lock().qp = None;
            sock.clear_callbacks();
            drop(link::detach(&qp));
            close(sock, false);
            let _ = f.back.failed(ENOMEM, PrivateData::EMPTY);
            return;
        }
    };
    run_connected(&conn, qp, sock, token);
}

/// Everything a passive connection's worker needs.
struct Passive {
    /// Held so that unregistering the device (and unloading the module) waits for the worker.
    dev: ARef<Device<Rsiw>>,
    listener: ListenId<RsiwCm>,
    sock: Arc<TcpSocket>,
}

/// The passive side: MPA Request, connect request, the ULP's answer, Reply, RTS, connected.
fn run_passive(p: Passive) {
    let Passive {
        dev: _dev,
        listener,
        sock,
    } = p;
    let conn = match Conn::new() {
        Ok(c) => c,
        Err(_) => return close(sock, false),
    };
    let handler = match Arc::new(ConnEvents(conn.clone()), GFP_KERNEL) {
        Ok(h) => h,
        Err(_) => return close(sock, false),
    };
    if sock.set_callbacks(handler).is_err() {
        return close(sock, false);
    }
    sock.set_nodelay();
    let remote = match (sock.local_addr(), sock.peer_addr()) {
        (Ok(l), Ok(r)) => (l, r),
        _ => return close(sock, false),
    };
    let (local, remote) = remote;
    // Our IRD/ORD are the ULP's, known only at accept: the Request is kept and replayed into
    // a responder with the final policy then.
    let mut saved = KVec::new();
    let mut resp = Responder::new(&policy(depth(qp::MAX_IRD_ORD), depth(qp::MAX_IRD_ORD)));
    let ev = receive_frame(&sock, &conn, &mut saved, &mut resp);
    if ev != MpaEvent::RequestReceived {
        pr_info!("no valid MPA Request from {}: {:?}\n", remote, ev);
        return close(sock, false);
    }
    let (peer_ird, peer_ord) = resp
        .request_enhanced()
        .map_or((IRD_ORD_MAX, IRD_ORD_MAX), |e| (e.ird, e.ord));
    let cap = depth(qp::MAX_IRD_ORD);
    let info = ConnInfo {
        private_data: event_pd(resp.peer_private_data()),
        ird: depth_u8(peer_ord.min(cap)),
        ord: depth_u8(peer_ird.min(cap)),
        local,
        remote,
    };
    if resp.peer_private_data().len() > PrivateData::MAX_LEN {
        pr_info!(
            "rsiw: MPA Request from {} has more private data than iw_cm takes\n",
            remote
        );
        if let Ok(frame) = resp.reject(&[]) {
            let _ = send_all(&sock, frame.as_bytes());
        }
        return close(sock, true);
    }
    if let Err(f) = listener.connect_request(conn.clone(), &info) {
        pr_info!(
            "rsiw: connect request from {} dropped: {:?}\n",
            remote,
            f.error
        );
        return close(sock, false);
    }
    drop(listener);
    let mut left = jiffies(ULP_TIMEOUT_MS);
    let ev = conn.wait(EV_ANSWER | EV_CLOSED | EV_PEER_FIN, &mut left);
    let answer = {
        let mut st = conn.state.lock();
        st.gone = true;
        st.answer.take()
    };
    let _ = ev;
    let Some(answer) = answer else {
        pr_info!("connect request from {} not answered\n", remote);
        return close(sock, false);
    };
    let (token, qp, pd, ird, ord) = match answer {
        Answer::Reject { private_data } => {
            if let Ok(frame) = resp.reject(&private_data) {
                let _ = send_all(&sock, frame.as_bytes());
            }
            return close(sock, true);
        }
        Answer::Accept {
            token,
            qp,
            private_data,
            ird,
            ord,
        } => (token, qp, private_data, ird, ord),
    };
    let mut resp = Responder::new(&policy(ird, ord));
    let replay = resp.on_data(&saved);
    let accepted = if replay.event == MpaEvent::RequestReceived {
        resp.accept(&pd)
    } else {
        Err(MpaFailure::Close(closed_error()))
    };
    let (frame, n) = match accepted {
        Ok(x) => x,
        Err(f) => {
            pr_info!("cannot accept MPA Request from {}: {:?}\n", remote, f);
            close(sock, false);
            // Dropping the token sends the established event and a close.
            drop(token);
            return;
        }
    };
    if let Err(e) = establish(&conn, &qp, &sock, n, Role::Responder) {
        pr_info!("QP {} cannot go to RTS: {:?}\n", qp.qpn(), e);
        close(sock, false);
        drop(token);
        return;
    }
    if send_all(&sock, frame.as_bytes()).is_err() {
        conn.post(EV_CLOSED);
    }
    match token.established(depth_u8(n.ird), depth_u8(n.ord)) {
        Ok(t) => run_connected(&conn, qp, sock, t),
        Err(f) => {
            conn.state.lock().qp = None;
            sock.clear_callbacks();
            drop(link::detach(&qp));
            close(sock, false);
            drop(f.back);
        }
    }
}

/// A listener's worker: accepts connections and starts a passive worker for each.
///
/// Holds `dev` so that unregistering the device (and unloading the module) waits for it; the
/// RDMA CM destroys its listeners before that wait.
fn run_listener(
    dev: ARef<Device<Rsiw>>,
    listener: ListenId<RsiwCm>,
    sock: TcpListener,
    conn: Arc<Conn>,
) {
    loop {
        loop {
            match sock.accept() {
                Ok(Some(s)) => {
                    let Ok(s) = Arc::new(s, GFP_KERNEL) else {
                        continue;
                    };
                    let p = Passive {
                        dev: dev.clone(),
                        listener: listener.clone(),
                        sock: s,
                    };
                    if workqueue::system_long()
                        .try_spawn(GFP_KERNEL, move || run_passive(p))
                        .is_err()
                    {
                        pr_warn!("out of memory, connection dropped\n");
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    pr_warn!("accept failed: {:?}\n", e);
                    break;
                }
            }
        }
        if conn.wait(EV_INCOMING | EV_STOP, &mut None) & EV_STOP != 0 {
            break;
        }
    }
    sock.clear_callbacks();
    drop(sock);
    drop(listener);
    conn.post(EV_EXITED);
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
    type Listener = KBox<Listener>;

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
            dev: dev.into(),
            token: conn,
            info: *info,
            qp,
            private_data,
            ird: depth(param.ird),
            ord: depth(param.ord),
        };
        // The closure owns the token: if it cannot be queued, it is dropped with it and the
        // connect reply reports the failure, so the operation itself succeeded.
        if workqueue::system_long()
            .try_spawn(GFP_KERNEL, move || run_active(a))
            .is_err()
        {
            pr_warn!("out of memory for a connect\n");
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
        endpoint.post(EV_ANSWER);
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
        endpoint.post(EV_ANSWER);
        Ok(())
    }

    fn create_listen(
        dev: &Device<Rsiw>,
        listener: ListenId<Self>,
        info: &ListenInfo,
        backlog: u32,
    ) -> Result<KBox<Listener>> {
        let conn = Conn::new()?;
        let sock = TcpSocket::new(Family::of(&info.local))?;
        bind(&sock, dev, &info.local, info.afonly)?;
        let sock = sock.listen(backlog.max(1))?;
        sock.set_callbacks(Arc::new(ListenEvents(conn.clone()), GFP_KERNEL)?)?;
        let state = KBox::new(Listener { conn: conn.clone() }, GFP_KERNEL)?;
        let d: ARef<Device<Rsiw>> = dev.into();
        workqueue::system_long()
            .try_spawn(GFP_KERNEL, move || run_listener(d, listener, sock, conn))
            .map_err(|_| ENOMEM)?;
        pr_debug!("{} listens on {}\n", dev.name(), info.local);
        Ok(state)
    }

    fn destroy_listen(_dev: &Device<Rsiw>, listener: KBox<Listener>) -> Result {
        listener.conn.post(EV_STOP);
        // The worker never waits for the `iw_cm`, so this wait is bounded.
        let _ = listener.conn.wait(EV_EXITED, &mut None);
        Ok(())
    }
}
