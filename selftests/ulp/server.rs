// SPDX-License-Identifier: GPL-2.0

//! The passive side: a listener that accepts connections and answers the client's control
//! messages.
//!
//! Each connection has its own PD, one CQ for both queues (with a completion handler) and a
//! work item on the ULP's workqueue. The CQ's completion event queues the work item, which
//! polls the CQ and handles every completion without sleeping on the network, then re-arms the
//! CQ. A connection's resources live in `SConn::res` until the connection closes (the CM
//! handler tears them down) or the server stops.
//!
//! When a connection closes, the server audits its buffers before it frees them: the guard
//! bytes around the target and data regions must be intact, a target the client sealed (see
//! [`Kind::Target`]) must still hold exactly the pattern it was filled with, and a data receive
//! that never completed must still hold the guard pattern [`Region::new`] filled it with (no
//! octet of a message that was not delivered was placed). A target that a new one replaces is
//! audited then. Regions that fail count as `tampered`; connections that
//! ended with an error (an abortive close reported by the CM, or a work request that failed
//! other than by a flush) count as `qp_errors`. `selftests/hostile-peer.sh` relies on both.
//!
//! A server started with `srq=1` gives all its connections one shared receive queue ([`SrvSrq`],
//! on its own PD, made at the first connection): every message, control or data, lands in one
//! of its slots, and the connection that took it checks it (data byte for byte against the
//! pattern, as its own receives would be) and posts the slot again. A connection that closes
//! hands back the slots it took but did not handle; those that completed with a flush error (a
//! message cut short by the close) count as `srq_flushed`. Queued slots must never be flushed by
//! a QP's error: they stay for the other connections (`selftests/srq.sh`).

use crate::proto::{
    guard, status, Kind, Msg, GUARD, HELLO, HELLO_GLOBAL_RKEY, MSG_LEN, REJECTED, REJECT_ME,
    SEND_ME_THEN_CLOSE,
};
use crate::region::Region;
use crate::OWNER;
use core::{
    net::SocketAddr,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::{
    netns::Namespace,
    new_mutex, new_work,
    prelude::*,
    rdma::consumer::{
        cm::{CmEvent, CmEventKind, CmHandler, CmId, CmIdRef, ConnParam, ConnRequest},
        cq::{Cq, CqHandler},
        mem::{Access, DmaBuf, FrMr, Pd},
        qp::{QpCaps, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus},
        srq::{Srq, SrqEvent, SrqHandler},
        workqueue::OwnedQueue,
        Device, DeviceCaps,
    },
    sync::{Arc, ArcBorrow, Mutex},
    workqueue::{Work, WorkItem},
};

/// wr_id kinds (top byte); the low bits are an index.
const WR_CTRL_RX: u64 = 1 << 56;
const WR_DATA_RX: u64 = 2 << 56;
const WR_SEND: u64 = 3 << 56;
const WR_LOCAL: u64 = 4 << 56;
const WR_SRQ: u64 = 5 << 56;
const WR_KIND: u64 = 0xff << 56;

/// Queue depths of a server connection.
const SQ_DEPTH: u32 = 512;
const RQ_DEPTH: u32 = 512;

/// Slots of a server SRQ, and the largest message one holds.
const SRQ_SLOTS: usize = 128;
const SRQ_SLOT: usize = 65537;

/// The handler of every server CM id.
pub(crate) enum ServerCm {
    /// The listener.
    Listener(Arc<Shared>),
    /// An accepted connection.
    Conn(Arc<SConn>, Arc<Shared>),
}

/// State shared by the listener and its connections.
#[pin_data]
pub(crate) struct Shared {
    /// The listener, until the server stops or its device goes away. Taken out under the lock
    /// and dropped after it (dropping waits for the listener's handler, which takes it).
    #[pin]
    listener: Mutex<Option<CmId<ServerCm>>>,
    queue: Arc<OwnedQueue>,
    #[pin]
    conns: Mutex<KVec<Arc<SConn>>>,
    #[pin]
    stats: Mutex<Stats>,
    /// Whether connections share an SRQ (`srq=1`).
    srq_mode: bool,
    /// The SRQ of an `srq=1` server, from its first connection on.
    #[pin]
    srq: Mutex<Option<Arc<SrvSrq>>>,
}

/// The shared receive queue of a server started with `srq=1`: [`SRQ_SLOTS`] slots of
/// [`SRQ_SLOT`] bytes, each posted as one work request (`WR_SRQ` and the slot index).
pub(crate) struct SrvSrq {
    srq: Arc<Srq>,
    region: Region,
    max_sge: usize,
    counts: Arc<SrqCounts>,
}

/// Counters of a server SRQ, shown in `status`.
#[derive(Default)]
pub(crate) struct SrqCounts {
    /// Messages received into SRQ slots.
    pub(crate) recvs: AtomicU64,
    /// SRQ work requests completed with a flush error (a QP failed while filling them).
    pub(crate) flushed: AtomicU64,
    /// SRQ events (none is armed: any is unexpected).
    pub(crate) events: AtomicU64,
}

impl SrqHandler for SrqCounts {
    fn event(this: ArcBorrow<'_, Self>, _event: SrqEvent) {
        this.events.fetch_add(1, Ordering::Relaxed);
    }
}

impl SrvSrq {
    /// Creates the SRQ on a PD of its own on `dev` and posts every slot.
    fn new(dev: &Device) -> Result<Arc<SrvSrq>> {
        let caps = dev.caps();
        if caps.max_srq == 0 {
            return Err(kernel::rdma::consumer::eopnotsupp());
        }
        let pd = Pd::new(dev, OWNER)?;
        let counts = Arc::new(SrqCounts::default(), GFP_KERNEL)?;
        // CAST: `SRQ_SLOTS` is small.
        let srq = Srq::new(
            &pd,
            SRQ_SLOTS as u32,
            caps.max_srq_sge.min(8),
            counts.clone(),
        )?;
        let region = Region::new(&pd, SRQ_SLOT, SRQ_SLOTS)?;
        srq.attach_buf(&region.buf)?;
        let max_sge = usize::try_from(srq.caps().max_sge)?.max(1);
        let s = Arc::new(
            SrvSrq {
                srq,
                region,
                max_sge,
                counts,
            },
            GFP_KERNEL,
        )?;
        for i in 0..SRQ_SLOTS {
            s.post(i)?;
        }
        Ok(s)
    }

    /// Posts slot `i`.
    fn post(&self, i: usize) -> Result {
        let sges = self.region.sges(i, 1, self.max_sge)?;
        // CAST: `i < SRQ_SLOTS`.
        let wr = RecvWr::new(WR_SRQ | i as u64).sges(&sges)?;
        self.srq.post_recv(&[wr])?;
        Ok(())
    }

    /// The slot of a completion's `wr_id`.
    fn slot(wc: &Wc) -> Result<usize> {
        let i = usize::try_from(wc.wr_id() & !WR_KIND)?;
        if i >= SRQ_SLOTS {
            return Err(EINVAL);
        }
        Ok(i)
    }
}

/// Counters shown in `status`.
#[derive(Default, Clone, Copy)]
pub(crate) struct Stats {
    /// Connections accepted.
    pub(crate) accepted: u64,
    /// Connect requests rejected (on request, or without the ULP's hello).
    pub(crate) rejected: u64,
    /// Accepted connections that have closed.
    pub(crate) closed: u64,
    /// Connect requests the server could not accept.
    pub(crate) failed: u64,
    /// Regions of closed connections (or replaced targets) whose guards were overwritten, or
    /// sealed targets whose data changed.
    pub(crate) tampered: u64,
    /// Closed connections that ended with an error: the CM reported an abortive close (a
    /// non-zero status, as after a Terminate), or a work request failed other than by a flush.
    pub(crate) qp_errors: u64,
}

/// What the server expects from data receives.
struct Expect {
    /// The length of each message (with an SRQ, whose slots are larger).
    len: usize,
    count: usize,
    received: usize,
    seed: u32,
    inv: u32,
    first_bad: Option<(u64, u64, u64)>,
}

/// The resources of one connection. `id` is declared first so that it (with the QP) is
/// destroyed first.
struct ConnRes {
    id: CmId<ServerCm>,
    pd: Arc<Pd>,
    caps: DeviceCaps,
    qcaps: QpCaps,
    ctrl_rx: Arc<DmaBuf>,
    ctrl_tx: Arc<DmaBuf>,
    mr: Option<Arc<FrMr>>,
    mr_valid: bool,
    target: Option<Region>,
    /// The seed `target` was filled with, if the client sealed it: it must keep that content.
    sealed: Option<u32>,
    data: Option<Region>,
    expect: Option<Expect>,
    sends: u64,
    /// Disconnect once `sends` reaches this ([`SEND_ME_THEN_CLOSE`]).
    close_at_sends: Option<u64>,
    /// Replaced targets that failed their audit.
    tampered: u64,
    /// A work request completed with an error other than a flush.
    wc_error: bool,
    /// The server's SRQ, which this connection's QP takes its receives from.
    srq: Option<Arc<SrvSrq>>,
}

/// One accepted connection.
#[pin_data]
pub(crate) struct SConn {
    #[pin]
    work: Work<SConn>,
    #[pin]
    res: Mutex<Option<ConnRes>>,
    queue: Arc<OwnedQueue>,
}

kernel::impl_has_work! {
    impl HasWork<Self> for SConn { self.work }
}

impl WorkItem for SConn {
    type Pointer = Arc<SConn>;

    fn run(this: Arc<SConn>) {
        this.process();
    }
}

impl CqHandler for SConn {
    fn completion_event(this: ArcBorrow<'_, Self>) {
        let a: Arc<SConn> = this.into();
        // An `Err` means the work is queued already; the returned reference is not the last
        // one (the CQ holds another), so dropping it here is fine.
        let _ = this.queue.queue().enqueue(a);
    }
}

/// A running server.
pub(crate) struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl Server {
    /// Starts listening on `addr`; with `srq`, connections share a receive queue.
    pub(crate) fn start(queue: &Arc<OwnedQueue>, addr: SocketAddr, srq: bool) -> Result<Server> {
        let shared = Arc::pin_init(
            pin_init!(Shared {
                listener <- new_mutex!(None, "Shared::listener"),
                queue: queue.clone(),
                conns <- new_mutex!(KVec::new(), "Shared::conns"),
                stats <- new_mutex!(Stats::default(), "Shared::stats"),
                srq_mode: srq,
                srq <- new_mutex!(None, "Shared::srq"),
            }),
            GFP_KERNEL,
        )?;
        let h = Arc::new(ServerCm::Listener(shared.clone()), GFP_KERNEL)?;
        // In the namespace of the process that wrote the command.
        let ns = Namespace::current().ok_or(ESRCH)?;
        let id = CmId::new(h, OWNER, &ns)?;
        id.bind(addr)?;
        id.listen(128)?;
        *shared.listener.lock() = Some(id);
        Ok(Server { shared, addr })
    }

    /// The address listened on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Counters and the number of open connections.
    pub(crate) fn stats(&self) -> (Stats, usize) {
        let s = *self.shared.stats.lock();
        (s, self.shared.conns.lock().len())
    }

    /// For an `srq=1` server: the SRQ's counters (receives, flushed, events), zero before the
    /// first connection made it.
    pub(crate) fn srq_stats(&self) -> Option<(u64, u64, u64)> {
        if !self.shared.srq_mode {
            return None;
        }
        Some(self.shared.srq.lock().as_ref().map_or((0, 0, 0), |s| {
            let c = &s.counts;
            (
                c.recvs.load(Ordering::Relaxed),
                c.flushed.load(Ordering::Relaxed),
                c.events.load(Ordering::Relaxed),
            )
        }))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The listener goes first, so that no new connection arrives during teardown.
        let listener = self.shared.listener.lock().take();
        drop(listener);
        let conns = core::mem::take(&mut *self.shared.conns.lock());
        for c in conns.iter() {
            let res = c.res.lock().take();
            drop(res);
        }
    }
}

impl CmHandler for ServerCm {
    fn event(&self, _id: &CmIdRef<'_>, event: &CmEvent<'_>) {
        let (conn, shared) = match self {
            ServerCm::Conn(conn, shared) => (conn, shared),
            ServerCm::Listener(shared) => {
                if matches!(event.kind, CmEventKind::DeviceRemoval) {
                    // The device's unregistration waits for its ids: let go of the listener
                    // (destroyed when this handler returns) and of the shared SRQ (its
                    // connections see the removal on their own ids).
                    let listener = shared.listener.lock().take();
                    drop(listener);
                    let srq = shared.srq.lock().take();
                    drop(srq);
                }
                return;
            }
        };
        match event.kind {
            CmEventKind::Established => {}
            CmEventKind::Disconnected
            | CmEventKind::DeviceRemoval
            | CmEventKind::ConnectError
            | CmEventKind::Unreachable
            | CmEventKind::Rejected
            | CmEventKind::TimewaitExit => {
                // Dropping the id in its own handler is deferred to the core.
                let res = conn.res.lock().take();
                if let Some(mut res) = res {
                    // The QP is out of RTS now: nothing is placed into the regions any more.
                    let tampered = res.audit();
                    res.srq_release();
                    let error = res.wc_error
                        || event.status != 0
                        || !matches!(
                            event.kind,
                            CmEventKind::Disconnected | CmEventKind::TimewaitExit
                        );
                    let mut s = shared.stats.lock();
                    s.closed += 1;
                    s.tampered += tampered;
                    if error {
                        s.qp_errors += 1;
                    }
                    drop(s);
                    drop(res);
                }
                let mut conns = shared.conns.lock();
                let old = core::mem::take(&mut *conns);
                if let Ok(mut kept) = KVec::with_capacity(old.len(), GFP_KERNEL) {
                    for c in old.into_iter().filter(|c| !Arc::ptr_eq(c, conn)) {
                        // Cannot fail: the capacity is reserved.
                        let _ = kept.push(c, GFP_KERNEL);
                    }
                    *conns = kept;
                }
            }
            _ => {}
        }
    }

    fn connect_request(&self, req: ConnRequest<'_, Self>, event: &CmEvent<'_>) {
        let ServerCm::Listener(shared) = self else {
            return;
        };
        if let Some(rest) = event.private_data.strip_prefix(REJECT_ME) {
            let mut reply = [0u8; 64];
            let n = (REJECTED.len() + rest.len()).min(reply.len());
            reply[..REJECTED.len()].copy_from_slice(REJECTED);
            if let (Some(dst), Some(src)) = (
                reply.get_mut(REJECTED.len()..n),
                rest.get(..n - REJECTED.len()),
            ) {
                dst.copy_from_slice(src);
            }
            if req.reject(reply.get(..n).unwrap_or(&[])).is_ok() {
                shared.stats.lock().rejected += 1;
            }
            return;
        }
        if !event.private_data.starts_with(HELLO)
            && !event.private_data.starts_with(HELLO_GLOBAL_RKEY)
        {
            let _ = req.reject(b"BADHELLO");
            shared.stats.lock().rejected += 1;
            return;
        }
        if let Err(e) = accept(shared, req, event) {
            pr_warn!("rsiw_ulp: server: cannot accept a connection: {:?}\n", e);
            shared.stats.lock().failed += 1;
        }
    }
}

/// The SRQ of an `srq=1` server (made on the first call), or `None`.
fn server_srq(shared: &Shared, dev: &Device) -> Result<Option<Arc<SrvSrq>>> {
    if !shared.srq_mode {
        return Ok(None);
    }
    let mut g = shared.srq.lock();
    if let Some(s) = g.as_ref() {
        if s.srq.pd().device().as_raw() != dev.as_raw() {
            // One SRQ per server: its connections all come through one device.
            return Err(EINVAL);
        }
        return Ok(Some(s.clone()));
    }
    let s = SrvSrq::new(dev)?;
    *g = Some(s.clone());
    Ok(Some(s))
}

/// Sets up an accepted connection: PD, CQ, QP, control buffers, first control receive.
fn accept(shared: &Arc<Shared>, req: ConnRequest<'_, ServerCm>, event: &CmEvent<'_>) -> Result {
    let dev = req.device().ok_or(EINVAL)?;
    let caps = dev.caps();
    let srq = server_srq(shared, dev)?;
    let pd = if event.private_data.starts_with(HELLO_GLOBAL_RKEY) {
        Pd::new_unsafe_global_rkey(dev, OWNER)?
    } else {
        Pd::new(dev, OWNER)?
    };
    let conn = Arc::pin_init(
        pin_init!(SConn {
            work <- new_work!("SConn::work"),
            res <- new_mutex!(None, "SConn::res"),
            queue: shared.queue.clone(),
        }),
        GFP_KERNEL,
    )?;
    let cq = Cq::new(dev, SQ_DEPTH + RQ_DEPTH, 0, conn.clone(), OWNER)?;
    let mut id = req.adopt(Arc::new(
        ServerCm::Conn(conn.clone(), shared.clone()),
        GFP_KERNEL,
    )?)?;
    let want = QpCaps {
        max_send_wr: SQ_DEPTH.min(caps.max_qp_wr),
        max_recv_wr: RQ_DEPTH.min(caps.max_qp_wr),
        max_send_sge: caps.max_send_sge.min(8),
        max_recv_sge: caps.max_recv_sge.min(8),
        max_inline_data: 0,
    };
    // With an SRQ (on another PD than the QP's: the SRQ's lkeys are checked against its own)
    // every message lands in one of its slots.
    let qp = match &srq {
        Some(s) => id.create_qp_on_srq(&pd, &cq, &cq, &s.srq, want, true)?,
        None => id.create_qp(&pd, &cq, &cq, want, true)?,
    };
    let qcaps = qp.caps();
    let ctrl_rx = DmaBuf::new(&pd, MSG_LEN)?;
    let ctrl_tx = DmaBuf::new(&pd, MSG_LEN)?;
    qp.attach_buf(&ctrl_rx)?;
    qp.attach_buf(&ctrl_tx)?;
    if srq.is_none() {
        qp.post_recv(&[RecvWr::new(WR_CTRL_RX).sge(&Sge::from_buf(&ctrl_rx, 0, MSG_LEN)?)?])?;
    }
    let ird = caps.max_qp_rd_atom.min(255);
    let ord = u32::from(event.responder_resources).min(caps.max_qp_init_rd_atom);
    let param = ConnParam {
        private_data: HELLO,
        // CAST: Both are at most 255 (see `min` above and the event's `u8`).
        responder_resources: ird as u8,
        initiator_depth: ord as u8,
        ..Default::default()
    };
    id.accept(&param)?;
    *conn.res.lock() = Some(ConnRes {
        id,
        pd,
        caps,
        qcaps,
        ctrl_rx,
        ctrl_tx,
        mr: None,
        mr_valid: false,
        target: None,
        sealed: None,
        data: None,
        expect: None,
        sends: 0,
        close_at_sends: None,
        tampered: 0,
        wc_error: false,
        srq,
    });
    // The first request may have completed before `res` was set: look now.
    let _ = shared.queue.queue().enqueue(conn.clone());
    shared.conns.lock().push(conn, GFP_KERNEL)?;
    shared.stats.lock().accepted += 1;
    Ok(())
}

impl SConn {
    /// Handles all completions, then re-arms the CQ.
    fn process(&self) {
        let mut guard = self.res.lock();
        let Some(res) = guard.as_mut() else {
            return;
        };
        let Ok(qp) = res.id.qp() else {
            return;
        };
        let cq = qp.recv_cq().clone();
        let mut wcs: [Wc; 16] = core::array::from_fn(|_| Wc::default());
        loop {
            let n = match cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(_) => return,
            };
            for wc in wcs.iter().take(n) {
                if let Err(e) = res.handle(wc) {
                    // The QP is broken or the peer misbehaved: close the connection.
                    pr_debug!("rsiw_ulp: server: closing a connection: {:?}\n", e);
                    let _ = res.id.disconnect();
                    return;
                }
            }
            if n == 0 {
                match cq.req_notify(false) {
                    Ok(true) => continue,
                    _ => return,
                }
            }
        }
    }
}

impl ConnRes {
    /// Handles one completion.
    fn handle(&mut self, wc: &Wc) -> Result {
        let kind = wc.wr_id() & WR_KIND;
        if kind == WR_SRQ {
            return self.srq_received(wc);
        }
        if !wc.is_ok() {
            // Flushes after a disconnect, or a failure the client provoked (stale keys):
            // either way the connection is over.
            if wc.status() != WcStatus::FlushErr {
                self.wc_error = true;
            }
            return Err(EIO);
        }
        match kind {
            WR_CTRL_RX => {
                let mut b = [0u8; MSG_LEN];
                self.ctrl_rx.read(0, &mut b)?;
                match Msg::decode(&b) {
                    Some(m) => self.request(m),
                    None => self.reply_status(status::BAD_REQUEST, 0, 0),
                }
            }
            WR_DATA_RX => self.data_received(wc),
            WR_SEND | WR_LOCAL => {
                if wc.opcode() == WcOpcode::Send {
                    self.sends += 1;
                    if self.close_at_sends == Some(self.sends) {
                        // TCP took the data and the reply: the FIN follows them.
                        self.close_at_sends = None;
                        self.id.disconnect()?;
                    }
                }
                Ok(())
            }
            _ => Err(EINVAL),
        }
    }

    fn post_ctrl_recv(&self) -> Result {
        if self.srq.is_some() {
            // Control messages land in the SRQ, which always has slots posted.
            return Ok(());
        }
        let qp = self.id.qp()?;
        qp.post_recv(&[RecvWr::new(WR_CTRL_RX).sge(&Sge::from_buf(
            &self.ctrl_rx,
            0,
            MSG_LEN,
        )?)?])?;
        Ok(())
    }

    fn reply(&self, m: Msg) -> Result {
        self.ctrl_tx.write(0, &m.encode())?;
        let qp = self.id.qp()?;
        qp.post_send(&[SendWr::send(WR_SEND).sge(&Sge::from_buf(&self.ctrl_tx, 0, MSG_LEN)?)?])?;
        Ok(())
    }

    fn reply_status(&self, code: u64, b: u64, c: u64) -> Result {
        self.reply(Msg::new(Kind::Status, [code, b, c, 0, 0]))
    }

    /// Handles a control request; posts the next control receive before answering.
    fn request(&mut self, m: Msg) -> Result {
        let [a, b, c, d, e] = m.args;
        match m.kind {
            Kind::Target => {
                self.post_ctrl_recv()?;
                match self.register_target(a, b, c, d & 1 != 0) {
                    Ok(()) => self.reply_target(),
                    Err(err) => {
                        self.reply_status(status::FAILED, err.to_errno().unsigned_abs().into(), 1)
                    }
                }
            }
            Kind::GlobalKey => {
                self.post_ctrl_recv()?;
                let (addr, len) = match (&self.target, &self.mr) {
                    (Some(t), Some(mr)) => (mr.iova(), t.len.try_into()?),
                    _ => (0, 0),
                };
                let rkey = self.pd.unsafe_global_rkey();
                self.reply(Msg::new(Kind::TargetIs, [addr, rkey.into(), len, 0, 0]))
            }
            Kind::Rotate => {
                self.post_ctrl_recv()?;
                match self.rotate() {
                    Ok(()) => self.reply_target(),
                    Err(err) => {
                        self.reply_status(status::FAILED, err.to_errno().unsigned_abs().into(), 2)
                    }
                }
            }
            Kind::Verify => {
                self.post_ctrl_recv()?;
                let r = match &self.target {
                    // CAST: Seeds are 32-bit by protocol.
                    Some(t) => t.check(0, b as u32, a.try_into()?)?,
                    None => return self.reply_status(status::BAD_REQUEST, m.kind as u64, 0),
                };
                match r {
                    None => self.reply_status(status::OK, 0, 0),
                    Some(bad) => self.reply_status(bad.code, bad.off.try_into()?, bad.found.into()),
                }
            }
            Kind::ExpectSend => {
                // Data receives first, then the control receive, so that data lands in them.
                // CAST: Seeds and keys are 32-bit by protocol.
                match self.expect(a, b, c as u32, d, e as u32) {
                    Ok(()) => {
                        self.post_ctrl_recv()?;
                        self.reply(Msg::new(Kind::Ready, [0; 5]))
                    }
                    Err(err) => {
                        self.post_ctrl_recv()?;
                        self.reply_status(status::FAILED, err.to_errno().unsigned_abs().into(), 3)
                    }
                }
            }
            Kind::SendMe => {
                self.post_ctrl_recv()?;
                // CAST: Seeds and keys are 32-bit by protocol.
                match self.send_data(a, b as u32, c, d, e as u32) {
                    Ok(()) => {
                        self.reply_status(status::OK, 0, 0)?;
                        if c & SEND_ME_THEN_CLOSE != 0 {
                            self.close_at_sends = Some(self.sends.saturating_add(2));
                        }
                        Ok(())
                    }
                    Err(err) => {
                        self.reply_status(status::FAILED, err.to_errno().unsigned_abs().into(), 4)
                    }
                }
            }
            Kind::Ping => {
                self.post_ctrl_recv()?;
                self.reply_status(status::OK, 0, 0)
            }
            _ => {
                self.post_ctrl_recv()?;
                self.reply_status(status::BAD_REQUEST, m.kind as u64, 0)
            }
        }
    }

    fn reply_target(&self) -> Result {
        let (t, mr) = match (&self.target, &self.mr) {
            (Some(t), Some(mr)) => (t, mr),
            _ => return self.reply_status(status::FAILED, 0, 5),
        };
        self.reply(Msg::new(
            Kind::TargetIs,
            [mr.iova(), mr.rkey().into(), t.len.try_into()?, 0, 0],
        ))
    }

    /// Checks a region of this connection: the guards of every slot; for a sealed target
    /// (`seed`) its data; and the data of slots from `pending` on (receives that never
    /// completed), which must still hold their initial guard fill. Logs what it found wrong.
    fn audit_region(&self, r: &Region, what: &str, seed: Option<u32>, pending: usize) -> bool {
        let stride = r.len + 2 * GUARD;
        let slots = r.buf.len() / stride;
        for i in 0..slots {
            let found = match seed {
                Some(seed) if i == 0 => r.check(0, seed, r.len),
                _ => r.check(i, 0, 0),
            };
            let found = match found {
                Ok(None) if i >= pending => {
                    let d = r.data_off(i);
                    r.buf
                        .find_mismatch(d, r.len, guard)
                        .map(|m| m.map(|(off, b)| (false, off - d, b)))
                }
                Ok(b) => Ok(b.map(|b| (b.code == status::GUARD, b.off, b.found))),
                Err(e) => Err(e),
            };
            match found {
                Ok(None) => {}
                Ok(Some((in_guard, off, byte))) => {
                    pr_info!(
                        "server: {} region of {} bytes, slot {}, tampered with: {} at offset {} (byte {:#04x})\n",
                        what,
                        r.len,
                        i,
                        if in_guard {
                            "guard"
                        } else if i >= pending {
                            "undelivered data"
                        } else {
                            "data"
                        },
                        off,
                        byte
                    );
                    return false;
                }
                Err(e) => {
                    pr_info!("server: cannot audit a {} region: {:?}\n", what, e);
                    return false;
                }
            }
        }
        true
    }

    /// Audits the target and data regions (see the module documentation); returns how many
    /// failed, including targets replaced earlier.
    fn audit(&mut self) -> u64 {
        let mut bad = self.tampered;
        if let Some(t) = &self.target {
            bad += u64::from(!self.audit_region(t, "target", self.sealed, usize::MAX));
        }
        if let Some(d) = &self.data {
            // While receives are expected, those from `received` on have not completed.
            let pending = self.expect.as_ref().map_or(usize::MAX, |e| e.received);
            bad += u64::from(!self.audit_region(d, "data", None, pending));
        }
        bad
    }

    /// Allocates and fills a target region and registers the MR on it (invalidating the old
    /// registration first). A `sealed` target must keep its content until it is replaced or the
    /// connection ends.
    fn register_target(&mut self, len: u64, seed: u64, access: u64, sealed: bool) -> Result {
        let len: usize = len.try_into()?;
        if len > crate::MAX_SIZE {
            return Err(EINVAL);
        }
        let qp = self.id.qp()?;
        let region = Region::new(&self.pd, len, 1)?;
        // CAST: Seeds are 32-bit by protocol.
        region.fill(0, seed as u32)?;
        qp.attach_buf(&region.buf)?;
        let mr = match &self.mr {
            Some(mr) => mr.clone(),
            None => {
                let mr = FrMr::new(&self.pd, self.caps.max_fast_reg_page_list_len.clamp(1, 256))?;
                qp.attach_mr(&mr)?;
                self.mr = Some(mr.clone());
                mr
            }
        };
        if self.mr_valid {
            qp.post_send(&[SendWr::local_inv(WR_LOCAL, mr.rkey())])?;
            self.mr_valid = false;
        }
        mr.rotate_key();
        // A zero-length region still needs a one-byte mapping (the first trailing guard byte,
        // which the guard check then proves untouched).
        mr.map(&region.buf, GUARD, len.max(1))?;
        let mut acc = Access::LOCAL_WRITE;
        if access & 1 != 0 {
            acc = acc | Access::REMOTE_READ;
        }
        if access & 2 != 0 {
            acc = acc | Access::REMOTE_WRITE;
        }
        qp.post_send(&[SendWr::reg_mr(WR_LOCAL, &mr, acc)])?;
        self.mr_valid = true;
        if let Some(old) = self.target.replace(region) {
            if !self.audit_region(&old, "target", self.sealed, usize::MAX) {
                self.tampered += 1;
            }
        }
        // CAST: Seeds are 32-bit by protocol.
        self.sealed = sealed.then_some(seed as u32);
        Ok(())
    }

    /// Invalidates the target MR, moves to the next key and registers it again.
    fn rotate(&mut self) -> Result {
        let qp = self.id.qp()?;
        let (mr, t) = match (&self.mr, &self.target) {
            (Some(mr), Some(t)) => (mr.clone(), t),
            _ => return Err(EINVAL),
        };
        if self.mr_valid {
            qp.post_send(&[SendWr::local_inv(WR_LOCAL, mr.rkey())])?;
        }
        self.mr_valid = false;
        mr.rotate_key();
        mr.map(&t.buf, GUARD, t.len.max(1))?;
        qp.post_send(&[SendWr::reg_mr(
            WR_LOCAL,
            &mr,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )])?;
        self.mr_valid = true;
        Ok(())
    }

    /// Posts `count` data receives of `len` bytes in `nsge` SGEs.
    fn expect(&mut self, len: u64, count: u64, seed: u32, nsge: u64, inv: u32) -> Result {
        let len: usize = len.try_into()?;
        let count: usize = count.try_into()?;
        if self.srq.is_some() {
            // The data lands in SRQ slots: nothing to post. At most half of them per request,
            // so that other connections' messages find slots too.
            if len > SRQ_SLOT || count == 0 || count > SRQ_SLOTS / 2 {
                return Err(EINVAL);
            }
            // A region kept from an earlier SEND to the client is no receive to audit.
            self.data = None;
            self.expect = Some(Expect {
                len,
                count,
                received: 0,
                seed,
                inv,
                first_bad: None,
            });
            return Ok(());
        }
        if len > crate::MAX_SIZE || count == 0 || count > (RQ_DEPTH as usize) - 8 {
            return Err(EINVAL);
        }
        let qp = self.id.qp()?;
        let region = Region::new(&self.pd, len, count)?;
        qp.attach_buf(&region.buf)?;
        // Work requests borrow their SGEs: all lists are made first.
        let mut lists = KVec::with_capacity(count, GFP_KERNEL)?;
        for i in 0..count {
            let sges = region.sges(i, nsge.try_into()?, self.qcaps.max_recv_sge.try_into()?)?;
            lists.push(sges, GFP_KERNEL)?;
        }
        let mut wrs = KVec::with_capacity(count, GFP_KERNEL)?;
        for (i, sges) in lists.iter().enumerate() {
            // CAST: `i < count <= RQ_DEPTH`.
            wrs.push(RecvWr::new(WR_DATA_RX | i as u64).sges(sges)?, GFP_KERNEL)?;
        }
        qp.post_recv(&wrs)?;
        self.data = Some(region);
        self.expect = Some(Expect {
            len,
            count,
            received: 0,
            seed,
            inv,
            first_bad: None,
        });
        Ok(())
    }

    /// Checks a data receive; answers when all expected ones arrived.
    fn data_received(&mut self, wc: &Wc) -> Result {
        let (Some(exp), Some(region)) = (self.expect.as_mut(), self.data.as_ref()) else {
            return Err(EINVAL);
        };
        // CAST: Only the index bits remain.
        let i = (wc.wr_id() & !WR_KIND) as usize;
        // Receives complete in the order they were posted: slot `i` holds message `i`.
        check_data(exp, region, i, i, wc)?;
        self.data_done(wc)
    }

    /// After a data receive was checked: notes an invalidation of our MR, and answers when all
    /// expected receives arrived.
    fn data_done(&mut self, wc: &Wc) -> Result {
        let Some(exp) = self.expect.as_mut() else {
            return Err(EINVAL);
        };
        if exp.inv != 0 && wc.invalidated_rkey() == Some(exp.inv) {
            // The peer invalidated our target MR.
            if self.mr.as_ref().is_some_and(|m| m.rkey() == exp.inv) {
                self.mr_valid = false;
            }
        }
        if exp.received == exp.count {
            let r = exp.first_bad.unwrap_or((status::OK, 0, 0));
            self.expect = None;
            return self.reply_status(r.0, r.1, r.2);
        }
        Ok(())
    }

    /// A completion of an SRQ work request (slot) this connection's QP took: a data message
    /// while data is expected, else a control message. The slot is read first, then posted
    /// again, then the message handled.
    fn srq_received(&mut self, wc: &Wc) -> Result {
        let srq = self.srq.clone().ok_or(EINVAL)?;
        let slot = SrvSrq::slot(wc)?;
        if !wc.is_ok() {
            if wc.status() == WcStatus::FlushErr {
                srq.counts.flushed.fetch_add(1, Ordering::Relaxed);
            } else {
                self.wc_error = true;
            }
            srq.post(slot)?;
            return Err(EIO);
        }
        srq.counts.recvs.fetch_add(1, Ordering::Relaxed);
        if let Some(exp) = self.expect.as_mut() {
            // Whichever slot it took, this QP's `received`-th message is that message.
            let index = exp.received;
            let checked = check_data(exp, &srq.region, slot, index, wc);
            srq.post(slot)?;
            checked?;
            return self.data_done(wc);
        }
        let mut b = [0u8; MSG_LEN];
        let read = if wc.byte_len() as usize == MSG_LEN {
            srq.region.buf.read(srq.region.data_off(slot), &mut b)
        } else {
            Err(EINVAL)
        };
        srq.post(slot)?;
        match read.ok().and_then(|()| Msg::decode(&b)) {
            Some(m) => self.request(m),
            None => self.reply_status(status::BAD_REQUEST, 0, 0),
        }
    }

    /// At close, for a connection on the server's SRQ: destroys the QP (so that everything it
    /// took is completed), then posts again the slots whose completions were never handled,
    /// counting those flushed.
    fn srq_release(&mut self) {
        let Some(srq) = self.srq.clone() else {
            return;
        };
        let Ok(cq) = self.id.qp().map(|qp| qp.recv_cq().clone()) else {
            return;
        };
        self.id.destroy_qp();
        let mut wcs: [Wc; 16] = core::array::from_fn(|_| Wc::default());
        while let Ok(n) = cq.poll(&mut wcs) {
            if n == 0 {
                break;
            }
            for wc in wcs.iter().take(n) {
                if wc.wr_id() & WR_KIND != WR_SRQ {
                    continue;
                }
                let counter = if wc.is_ok() {
                    &srq.counts.recvs
                } else {
                    &srq.counts.flushed
                };
                counter.fetch_add(1, Ordering::Relaxed);
                if let Ok(slot) = SrvSrq::slot(wc) {
                    if let Err(e) = srq.post(slot) {
                        pr_warn!(
                            "rsiw_ulp: server: cannot post SRQ slot {} again: {:?}\n",
                            slot,
                            e
                        );
                    }
                }
            }
        }
    }

    /// Sends `len` bytes of `pattern(seed)` to the client in `nsge` SGEs.
    fn send_data(&mut self, len: u64, seed: u32, flags: u64, nsge: u64, inv: u32) -> Result {
        let len: usize = len.try_into()?;
        if len > crate::MAX_SIZE {
            return Err(EINVAL);
        }
        let qp = self.id.qp()?;
        let region = Region::new(&self.pd, len, 1)?;
        region.fill(0, seed)?;
        qp.attach_buf(&region.buf)?;
        let sges = if len == 0 {
            KVec::new()
        } else {
            region.sges(0, nsge.try_into()?, self.qcaps.max_send_sge.try_into()?)?
        };
        let mut wr = if inv != 0 {
            SendWr::send_inv(WR_SEND, inv)
        } else {
            SendWr::send(WR_SEND)
        };
        wr = wr.sges(&sges)?;
        if flags & 1 != 0 {
            wr = wr.flags(SendFlags::SOLICITED);
        }
        qp.post_send(&[wr])?;
        self.data = Some(region);
        Ok(())
    }
}

/// Checks an expected data receive (counted in `exp`): message `index`, which landed in slot
/// `slot` of `region`: its length, invalidation and data. Records the first problem in `exp`.
fn check_data(exp: &mut Expect, region: &Region, slot: usize, index: usize, wc: &Wc) -> Result {
    exp.received += 1;
    if exp.first_bad.is_some() {
        return Ok(());
    }
    let len = u64::try_from(exp.len)?;
    if u64::from(wc.byte_len()) != len {
        exp.first_bad = Some((status::LENGTH, len, wc.byte_len().into()));
    } else if exp.inv != 0 && wc.invalidated_rkey() != Some(exp.inv) {
        let got = wc.invalidated_rkey().map_or(u64::MAX, u64::from);
        exp.first_bad = Some((status::INVALIDATE, exp.inv.into(), got));
    } else if exp.inv == 0 && wc.invalidated_rkey().is_some() {
        let got = wc.invalidated_rkey().map_or(u64::MAX, u64::from);
        exp.first_bad = Some((status::INVALIDATE, 0, got));
    } else if exp.seed != 0 {
        // CAST: Message indices are small; seeds wrap.
        let seed = exp.seed.wrapping_add(index as u32);
        if let Some(bad) = region.check(slot, seed, exp.len)? {
            exp.first_bad = Some((bad.code, bad.off.try_into()?, bad.found.into()));
        }
    }
    Ok(())
}
