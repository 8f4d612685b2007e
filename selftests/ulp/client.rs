// SPDX-License-Identifier: GPL-2.0

//! The active side: connections and the tests and benchmarks run over them.
//!
//! Everything here runs in the context of the process that wrote the command, and sleeps on
//! CM events ([`ClientCm`]) and CQ events ([`CqWaiter`]) with timeouts, so a dead peer makes a
//! test fail instead of hanging.

use crate::proto::{
    status, Kind, Msg, GUARD, HELLO, MSG_LEN, REJECTED, REJECT_ME, SEND_ME_THEN_CLOSE,
};
use crate::region::Region;
use crate::OWNER;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    netns::Namespace,
    new_condvar, new_mutex,
    prelude::*,
    rdma::consumer::{
        cm::{CmEvent, CmEventKind, CmHandler, CmId, CmIdRef, ConnParam},
        cq::{Cq, CqWaiter},
        etimedout,
        mem::{Access, DmaBuf, FrMr, Pd},
        qp::{Qp, QpCaps, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus},
        DeviceCaps,
    },
    sync::{Arc, CondVar, Mutex},
    time::{msecs_to_jiffies, Ktime},
};

/// How long one step (a completion, a CM event) may take before the test fails: 10 s, times
/// the factor the `timeouts` command set (for slow test kernels, such as KASAN's).
pub(crate) fn step_ms() -> u32 {
    10_000u32.saturating_mul(STEP_FACTOR.load(Ordering::Relaxed))
}

/// See [`step_ms`].
static STEP_FACTOR: AtomicU32 = AtomicU32::new(1);

/// Multiplies every step's time limit by `factor` (1 to 100).
pub(crate) fn set_step_factor(factor: u32) -> Result {
    if !(1..=100).contains(&factor) {
        return Err(EINVAL);
    }
    STEP_FACTOR.store(factor, Ordering::Relaxed);
    Ok(())
}

/// wr_ids of the client.
const WR_CTRL_RX: u64 = 1;
const WR_CTRL_TX: u64 = 2;
const WR_DATA: u64 = 0x100;
const WR_LOCAL: u64 = 0x200;

/// A test failure: what failed, two numbers that say how, and the error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fail {
    pub(crate) what: &'static str,
    pub(crate) a: u64,
    pub(crate) b: u64,
    pub(crate) err: Error,
}

/// The result of a test step.
pub(crate) type TResult<T = ()> = core::result::Result<T, Fail>;

/// Adds context to errors.
pub(crate) trait Ctx<T> {
    fn at(self, what: &'static str) -> TResult<T>;
}

impl<T, E: Into<Error>> Ctx<T> for core::result::Result<T, E> {
    fn at(self, what: &'static str) -> TResult<T> {
        self.map_err(|e| Fail {
            what,
            a: 0,
            b: 0,
            err: e.into(),
        })
    }
}

/// A failure of `what` (with two numbers that say how) without an errno of its own.
pub(crate) fn fail(what: &'static str, a: u64, b: u64) -> Fail {
    Fail {
        what,
        a,
        b,
        err: EIO,
    }
}

/// CM events of a client id, for the connecting thread to wait on.
#[pin_data]
pub(crate) struct ClientCm {
    #[pin]
    log: Mutex<CmLog>,
    #[pin]
    cv: CondVar,
}

struct CmLog {
    /// Events in arrival order; consumed ones are `None`.
    events: KVec<Option<(CmEventKind, i32)>>,
    private_data: [u8; 64],
    private_len: usize,
    /// The Established event's `(initiator_depth, responder_resources)`: for iWARP the IRD and
    /// ORD this side ended up with (see `cma_iw_handler`).
    depths: (u8, u8),
}

impl CmHandler for ClientCm {
    fn event(&self, _id: &CmIdRef<'_>, event: &CmEvent<'_>) {
        let mut log = self.log.lock();
        if matches!(event.kind, CmEventKind::Rejected | CmEventKind::Established) {
            let n = event.private_data.len().min(log.private_data.len());
            if let (Some(d), Some(s)) = (log.private_data.get_mut(..n), event.private_data.get(..n))
            {
                d.copy_from_slice(s);
            }
            log.private_len = n;
        }
        if event.kind == CmEventKind::Established {
            log.depths = (event.initiator_depth, event.responder_resources);
        }
        // If this allocation fails the waiter times out, which reports the problem.
        let _ = log
            .events
            .push(Some((event.kind, event.status)), GFP_KERNEL);
        drop(log);
        self.cv.notify_all();
    }
}

impl ClientCm {
    /// A handler with no events yet.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(ClientCm {
                log <- new_mutex!(
                    CmLog {
                        events: KVec::new(),
                        private_data: [0; 64],
                        private_len: 0,
                        depths: (0, 0),
                    },
                    "ClientCm::log"
                ),
                cv <- new_condvar!("ClientCm::cv"),
            }),
            GFP_KERNEL,
        )
    }

    /// Waits for the first event not yet consumed and consumes it.
    pub(crate) fn next(&self, timeout_ms: u32) -> Result<(CmEventKind, i32)> {
        let mut log = self.log.lock();
        let mut left = msecs_to_jiffies(timeout_ms);
        loop {
            if let Some(e) = take_first(&mut log.events, |_| true) {
                return Ok(e);
            }
            if left == 0 {
                return Err(etimedout());
            }
            // CAST: The jiffies count fits (timeouts are seconds).
            left = match self.cv.wait_interruptible_timeout(&mut log, left) {
                kernel::sync::CondVarTimeoutResult::Timeout => 0,
                kernel::sync::CondVarTimeoutResult::Signal { .. } => return Err(ERESTARTSYS),
                kernel::sync::CondVarTimeoutResult::Woken { jiffies } => jiffies,
            };
        }
    }

    /// The IRD and ORD the Established event reported.
    pub(crate) fn depths(&self) -> (u8, u8) {
        self.log.lock().depths
    }

    fn private_data(&self, out: &mut [u8]) -> usize {
        let log = self.log.lock();
        let n = log.private_len.min(out.len());
        if let (Some(d), Some(s)) = (out.get_mut(..n), log.private_data.get(..n)) {
            d.copy_from_slice(s);
        }
        n
    }
}

/// A completion as the client keeps it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Done {
    pub(crate) wr_id: u64,
    pub(crate) status: WcStatus,
    pub(crate) status_raw: u32,
    pub(crate) opcode: WcOpcode,
    pub(crate) byte_len: u32,
    pub(crate) inv: Option<u32>,
}

impl Done {
    /// The completion `wc`, kept.
    pub(crate) fn of(wc: &Wc) -> Done {
        Done {
            wr_id: wc.wr_id(),
            status: wc.status(),
            status_raw: wc.status_raw(),
            opcode: wc.opcode(),
            byte_len: wc.byte_len(),
            inv: wc.invalidated_rkey(),
        }
    }
}

/// Connection options.
#[derive(Clone, Copy, Default)]
pub(crate) struct ConnOpts {
    /// Inline data to ask for.
    pub(crate) inline: u32,
    /// Ask for the device's largest IRD and ORD (else at most 16 each).
    pub(crate) rd_max: bool,
    /// Send and receive queue depth (0: 256, or the device's limit if lower).
    pub(crate) depth: u32,
    /// How long to wait for the connection (0: [`step_ms`]).
    pub(crate) wait_ms: u32,
}

/// A client connection. `id` comes first so that the QP is destroyed before the rest.
pub(crate) struct Conn {
    id: CmId<ClientCm>,
    cm: Arc<ClientCm>,
    pd: Arc<Pd>,
    cq: Arc<Cq>,
    waiter: Arc<CqWaiter>,
    ctrl_rx: Arc<DmaBuf>,
    ctrl_tx: Arc<DmaBuf>,
    /// Completions polled but not consumed yet; consumed ones are `None`.
    pending: KVec<Option<Done>>,
    pub(crate) caps: DeviceCaps,
    pub(crate) qcaps: QpCaps,
    mr: Option<Arc<FrMr>>,
}

/// What connecting led to.
pub(crate) enum Connected {
    /// Established.
    Up(Conn),
    /// Rejected, with the peer's private data (length, bytes).
    Rejected(usize, [u8; 64]),
    /// Another CM event ended the attempt: its kind, status, and the milliseconds since
    /// `rdma_connect`.
    Failed(CmEventKind, i32, i64),
}

/// A CM id with its address and route resolved to `dst`, and its event handler.
pub(crate) fn resolved(dst: SocketAddr) -> TResult<(CmId<ClientCm>, Arc<ClientCm>)> {
    let cm = ClientCm::new().at("allocating the CM handler")?;
    // Commands run in the writing process: its namespace is where the test runs.
    let ns = Namespace::current()
        .ok_or(ESRCH)
        .at("the writer's network namespace")?;
    let id = CmId::new(cm.clone(), OWNER, &ns).at("rdma_create_id")?;
    id.resolve_addr(None, dst, 5000).at("rdma_resolve_addr")?;
    expect_event(&cm, CmEventKind::AddrResolved, "address resolution")?;
    id.resolve_route(5000).at("rdma_resolve_route")?;
    expect_event(&cm, CmEventKind::RouteResolved, "route resolution")?;
    Ok((id, cm))
}

impl Conn {
    /// Connects to `dst` with `private_data`.
    pub(crate) fn open(dst: SocketAddr, opts: ConnOpts, private_data: &[u8]) -> TResult<Connected> {
        let (mut id, cm) = resolved(dst)?;
        let dev = id
            .device()
            .ok_or(EINVAL)
            .at("the resolved id has no device")?;
        let caps = dev.caps();
        let pd = Pd::new(dev, OWNER).at("ib_alloc_pd")?;
        let waiter = CqWaiter::new().at("allocating the CQ waiter")?;
        let cq = Cq::new(dev, 1024, 0, waiter.clone(), OWNER).at("ib_create_cq")?;
        let depth = match opts.depth {
            0 => 256.min(caps.max_qp_wr),
            d => d,
        };
        let want = QpCaps {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: caps.max_send_sge.min(8),
            max_recv_sge: caps.max_recv_sge.min(8),
            max_inline_data: opts.inline,
        };
        let qp = id
            .create_qp(&pd, &cq, &cq, want, false)
            .at("rdma_create_qp")?;
        let qcaps = qp.caps();
        let ctrl_rx = DmaBuf::new(&pd, MSG_LEN).at("allocating control buffers")?;
        let ctrl_tx = DmaBuf::new(&pd, MSG_LEN).at("allocating control buffers")?;
        qp.attach_buf(&ctrl_rx).at("attaching control buffers")?;
        qp.attach_buf(&ctrl_tx).at("attaching control buffers")?;
        let rd_limit = if opts.rd_max { 255 } else { 16 };
        let param = ConnParam {
            private_data,
            // CAST: Both are clamped to at most 255.
            responder_resources: caps.max_qp_rd_atom.min(rd_limit) as u8,
            initiator_depth: caps.max_qp_init_rd_atom.min(rd_limit) as u8,
            retry_count: 7,
            rnr_retry_count: 7,
        };
        let start = Ktime::ktime_get();
        id.connect(&param).at("rdma_connect")?;
        let wait = match opts.wait_ms {
            0 => step_ms(),
            w => w,
        };
        let (kind, st) = cm.next(wait).at("waiting for the connection")?;
        match kind {
            CmEventKind::Established => {}
            CmEventKind::Rejected => {
                let mut pd_bytes = [0u8; 64];
                let n = cm.private_data(&mut pd_bytes);
                return Ok(Connected::Rejected(n, pd_bytes));
            }
            _ => {
                let ms = kernel::time::ktime_ms_delta(Ktime::ktime_get(), start);
                return Ok(Connected::Failed(kind, st, ms));
            }
        }
        Ok(Connected::Up(Conn {
            id,
            cm,
            pd,
            cq,
            waiter,
            ctrl_rx,
            ctrl_tx,
            pending: KVec::new(),
            caps,
            qcaps,
            mr: None,
        }))
    }

    /// Connects, expecting to be accepted.
    pub(crate) fn connect(dst: SocketAddr, opts: ConnOpts) -> TResult<Conn> {
        match Conn::open(dst, opts, HELLO)? {
            Connected::Up(c) => Ok(c),
            Connected::Rejected(..) => Err(fail("the server rejected the connection", 0, 0)),
            Connected::Failed(kind, st, _) => Err(unexpected(kind, st)),
        }
    }

    /// The most SGEs of a SEND or WRITE: the device's limit, within what the QP granted.
    pub(crate) fn send_sge_max(&self) -> u32 {
        self.caps.max_send_sge.min(self.qcaps.max_send_sge)
    }

    /// The most SGEs of a receive: the device's limit, within what the QP granted.
    pub(crate) fn recv_sge_max(&self) -> u32 {
        self.caps.max_recv_sge.min(self.qcaps.max_recv_sge)
    }

    /// The most SGEs of an RDMA READ's sink: the device's `max_sge_rd`.
    pub(crate) fn read_sge_max(&self) -> u32 {
        self.caps.max_sge_rd.min(self.qcaps.max_send_sge)
    }

    /// The QP.
    pub(crate) fn qp(&self) -> TResult<&Qp> {
        self.id.qp().at("no QP")
    }

    /// Disconnects and waits for the disconnect event.
    pub(crate) fn close(self) -> TResult {
        self.id.disconnect().at("rdma_disconnect")?;
        loop {
            let (kind, _) = self.cm.next(step_ms()).at("waiting for the disconnect")?;
            if kind == CmEventKind::Disconnected {
                return Ok(());
            }
        }
    }

    /// Moves every available completion into `pending`; returns how many there were.
    fn reap(&mut self) -> TResult<usize> {
        let mut wcs: [Wc; 16] = core::array::from_fn(|_| Wc::default());
        let mut total = 0;
        loop {
            let n = self.cq.poll(&mut wcs).at("ib_poll_cq")?;
            for wc in wcs.iter().take(n) {
                self.pending
                    .push(Some(Done::of(wc)), GFP_KERNEL)
                    .at("recording a completion")?;
            }
            total += n;
            if n < wcs.len() {
                return Ok(total);
            }
        }
    }

    /// Waits for the completion of `wr_id` (and takes it), however it ended.
    pub(crate) fn wait(&mut self, wr_id: u64, timeout_ms: u32) -> TResult<Done> {
        let start = Ktime::ktime_get();
        loop {
            if let Some(d) = take_first(&mut self.pending, |d| d.wr_id == wr_id) {
                return Ok(d);
            }
            if self.reap()? > 0 {
                continue;
            }
            if self.cq.req_notify(false).at("ib_req_notify_cq")? {
                continue;
            }
            let spent = kernel::time::ktime_ms_delta(Ktime::ktime_get(), start);
            let left = i64::from(timeout_ms) - spent;
            if left <= 0 {
                return Err(Fail {
                    what: "timed out waiting for a completion",
                    a: wr_id,
                    b: timeout_ms.into(),
                    err: etimedout(),
                });
            }
            // CAST: `0 < left <= timeout_ms`.
            match self.waiter.wait(left as u32) {
                Ok(()) => {}
                Err(e) if e == etimedout() => {}
                Err(e) => return Err(e).at("waiting for a completion"),
            }
        }
    }

    /// Waits for `wr_id` and requires success.
    pub(crate) fn wait_ok(&mut self, wr_id: u64, what: &'static str) -> TResult<Done> {
        let d = self.wait(wr_id, step_ms())?;
        if d.status != WcStatus::Success {
            return Err(fail(what, wr_id, d.status_raw.into()));
        }
        Ok(d)
    }

    /// Whether a completion for `wr_id` came (without waiting).
    pub(crate) fn has_completion(&mut self, wr_id: u64) -> TResult<bool> {
        self.reap()?;
        Ok(self.pending.iter().flatten().any(|d| d.wr_id == wr_id))
    }

    /// Posts the control receive for the next reply.
    pub(crate) fn post_ctrl_recv(&self) -> TResult {
        let sge = Sge::from_buf(&self.ctrl_rx, 0, MSG_LEN).at("control SGE")?;
        self.qp()?
            .post_recv(&[RecvWr::new(WR_CTRL_RX).sge(&sge).at("control receive")?])
            .at("ib_post_recv (control)")
    }

    /// Sends a control message (signaled) and waits for its completion.
    fn send_ctrl(&mut self, m: Msg) -> TResult {
        self.send_request(m)?;
        self.wait_ok(WR_CTRL_TX, "the control send failed")?;
        Ok(())
    }

    /// Waits for the reply in the posted control receive.
    pub(crate) fn reply(&mut self) -> TResult<Msg> {
        self.wait_ok(WR_CTRL_RX, "the control receive failed")?;
        let mut b = [0u8; MSG_LEN];
        self.ctrl_rx.read(0, &mut b).at("reading a reply")?;
        Msg::decode(&b).ok_or(fail("the server sent garbage", 0, 0))
    }

    /// Sends a request and returns the reply.
    pub(crate) fn call(&mut self, m: Msg) -> TResult<Msg> {
        self.post_ctrl_recv()?;
        self.send_ctrl(m)?;
        self.reply()
    }

    /// Sends a request whose reply must be [`Kind::Status`] OK.
    pub(crate) fn call_ok(&mut self, m: Msg, what: &'static str) -> TResult {
        let r = self.call(m)?;
        status_ok(&r, what)
    }

    /// Asks for a target region; returns `(iova, rkey)`.
    pub(crate) fn target(&mut self, len: usize, seed: u32, access: u64) -> TResult<(u64, u32)> {
        let r = self.call(Msg::new(
            Kind::Target,
            [len as u64, seed.into(), access, 0, 0],
        ))?;
        target_is(&r)
    }

    /// The client's FRWR MR (allocated on first use, attached to the QP).
    pub(crate) fn mr(&mut self) -> TResult<Arc<FrMr>> {
        if let Some(mr) = &self.mr {
            return Ok(mr.clone());
        }
        let mr = FrMr::new(&self.pd, self.caps.max_fast_reg_page_list_len.clamp(1, 256))
            .at("ib_alloc_mr")?;
        self.qp()?.attach_mr(&mr).at("attaching the MR")?;
        self.mr = Some(mr.clone());
        Ok(mr)
    }

    /// Maps the client MR on `[GUARD, GUARD + len)` of `region` under a new key, registers it
    /// (signaled) and waits.
    pub(crate) fn register(&mut self, region: &Region, access: Access) -> TResult<Arc<FrMr>> {
        let mr = self.mr()?;
        mr.rotate_key();
        mr.map(&region.buf, GUARD, region.len.max(1))
            .at("ib_map_mr_sg")?;
        self.qp()?
            .post_send(&[SendWr::reg_mr(WR_LOCAL, &mr, access).signaled()])
            .at("ib_post_send (REG_MR)")?;
        let d = self.wait_ok(WR_LOCAL, "REG_MR failed")?;
        if d.opcode != WcOpcode::RegMr {
            return Err(fail("REG_MR completed with the wrong opcode", 0, 0));
        }
        Ok(mr)
    }

    /// Invalidates `key` locally (signaled) and waits.
    pub(crate) fn local_inv(&mut self, key: u32) -> TResult {
        self.qp()?
            .post_send(&[SendWr::local_inv(WR_LOCAL, key).signaled()])
            .at("ib_post_send (LOCAL_INV)")?;
        let d = self.wait_ok(WR_LOCAL, "LOCAL_INV failed")?;
        if d.opcode != WcOpcode::LocalInv {
            return Err(fail("LOCAL_INV completed with the wrong opcode", 0, 0));
        }
        Ok(())
    }

    /// A new local region, attached to the QP.
    pub(crate) fn region(&self, len: usize, count: usize) -> TResult<Region> {
        let r = Region::new(&self.pd, len, count).at("allocating a region")?;
        self.qp()?.attach_buf(&r.buf).at("attaching a region")?;
        Ok(r)
    }

    /// Drains the CQ and the waiter, then arms the CQ for solicited events only.
    pub(crate) fn arm_solicited(&mut self) -> TResult {
        loop {
            self.reap()?;
            self.waiter.drain();
            if !self.cq.req_notify(true).at("ib_req_notify_cq(SOLICITED)")? {
                return Ok(());
            }
        }
    }

    /// Waits for a CQ event without polling.
    pub(crate) fn wait_event(&self, timeout_ms: u32) -> Result {
        self.waiter.wait(timeout_ms)
    }

    /// Sends a request without waiting for anything (its reply needs a posted receive).
    pub(crate) fn send_request(&mut self, m: Msg) -> TResult {
        self.ctrl_tx.write(0, &m.encode()).at("writing a request")?;
        let sge = Sge::from_buf(&self.ctrl_tx, 0, MSG_LEN).at("control SGE")?;
        self.qp()?
            .post_send(&[SendWr::send(WR_CTRL_TX)
                .sge(&sge)
                .at("control send")?
                .signaled()])
            .at("ib_post_send (control)")
    }
}

/// Takes the first entry matching `pred` out of a list of slots; empties the list once every
/// slot is consumed.
pub(crate) fn take_first<T: Copy>(v: &mut KVec<Option<T>>, pred: impl Fn(&T) -> bool) -> Option<T> {
    let found = v
        .iter_mut()
        .find(|s| s.as_ref().is_some_and(&pred))
        .and_then(Option::take);
    if v.iter().all(Option::is_none) {
        *v = KVec::new();
    }
    found
}

/// The failure for a connect that ended with CM event `kind` (status `st`).
fn unexpected(kind: CmEventKind, st: i32) -> Fail {
    // CAST: Event kinds and statuses are reported as numbers.
    fail(
        "connecting: unexpected CM event",
        event_code(kind),
        st as u64,
    )
}

/// The number of a CM event kind (`enum rdma_cm_event_type`).
pub(crate) fn event_code(k: CmEventKind) -> u64 {
    match k {
        CmEventKind::AddrResolved => 0,
        CmEventKind::AddrError => 1,
        CmEventKind::RouteResolved => 2,
        CmEventKind::RouteError => 3,
        CmEventKind::ConnectRequest => 4,
        CmEventKind::ConnectResponse => 5,
        CmEventKind::ConnectError => 6,
        CmEventKind::Unreachable => 7,
        CmEventKind::Rejected => 8,
        CmEventKind::Established => 9,
        CmEventKind::Disconnected => 10,
        CmEventKind::DeviceRemoval => 11,
        CmEventKind::AddrChange => 14,
        CmEventKind::TimewaitExit => 15,
        CmEventKind::Other(o) => o.into(),
    }
}

/// Waits for the next CM event, which must be `want`.
pub(crate) fn expect_event(cm: &ClientCm, want: CmEventKind, what: &'static str) -> TResult {
    let (kind, st) = cm.next(step_ms()).at(what)?;
    if kind != want {
        // CAST: The status is a (negative) errno, reported as a number.
        return Err(fail(what, event_code(kind), st as u64));
    }
    Ok(())
}

/// Requires a [`Kind::Status`] OK reply (else fails with what the server reported).
pub(crate) fn status_ok(r: &Msg, what: &'static str) -> TResult {
    if r.kind != Kind::Status {
        return Err(fail(
            "the server answered with the wrong message",
            r.kind as u64,
            0,
        ));
    }
    if r.args[0] != status::OK {
        let what = match r.args[0] {
            status::MISMATCH => "data mismatch at the server (offset, byte)",
            status::GUARD => "guard bytes overwritten at the server (offset, byte)",
            status::LENGTH => "wrong receive length at the server (expected, got)",
            status::INVALIDATE => "wrong invalidation at the server (expected, got)",
            status::FAILED => "the server's work request failed (errno, step)",
            _ => what,
        };
        return Err(fail(what, r.args[1], r.args[2]));
    }
    Ok(())
}

fn target_is(r: &Msg) -> TResult<(u64, u32)> {
    if r.kind != Kind::TargetIs {
        status_ok(r, "the server could not register a target")?;
        return Err(fail(
            "the server answered with the wrong message",
            r.kind as u64,
            0,
        ));
    }
    // CAST: rkeys are 32-bit.
    Ok((r.args[0], r.args[1] as u32))
}

/// Checks a local region; turns a finding into a failure.
pub(crate) fn check_region(r: &Region, i: usize, seed: u32, len: usize) -> TResult {
    match r.check(i, seed, len).at("reading back a region")? {
        None => Ok(()),
        Some(bad) if bad.code == status::GUARD => Err(fail(
            "guard bytes overwritten (offset, byte)",
            bad.off as u64,
            bad.found.into(),
        )),
        Some(bad) => Err(fail(
            "data mismatch (offset, byte)",
            bad.off as u64,
            bad.found.into(),
        )),
    }
}

/// `sge=max`: exactly as many SGEs as the device allows for the work request.
pub(crate) const SGE_MAX: usize = usize::MAX;

/// The number of SGEs `sge` asks for, with [`SGE_MAX`] resolved to `max`.
fn sge_count(sge: usize, max: u32) -> usize {
    if sge == SGE_MAX {
        max as usize
    } else {
        sge
    }
}

/// An SGE count as commands spell it (`max` for [`SGE_MAX`]).
pub(crate) struct SgeArg(pub(crate) usize);

impl core::fmt::Display for SgeArg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0 == SGE_MAX {
            f.write_str("max")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// The SGEs of slot 0 of `region` in about `parts` pieces, at most `max` (none when empty);
/// for [`SGE_MAX`] exactly `max`.
fn data_sges(region: &Region, parts: usize, max: u32) -> TResult<KVec<Sge>> {
    if region.len == 0 {
        return Ok(KVec::new());
    }
    let want = sge_count(parts, max);
    let sges = region
        .sges(0, want, max as usize)
        .at("too many SGEs for the device")?;
    if parts == SGE_MAX && sges.len() != want {
        return Err(fail(
            "could not build the device's SGE limit (built, limit)",
            sges.len() as u64,
            want as u64,
        ));
    }
    Ok(sges)
}

/// `[0, len)` of `mr`'s mapping in `n` nearly equal SGEs (one zero-length SGE when empty).
fn mr_sges(mr: &FrMr, len: usize, n: usize) -> TResult<KVec<Sge>> {
    let n = n.max(1).min(len.max(1));
    let mut v = KVec::with_capacity(n, GFP_KERNEL).at("allocating")?;
    let mut start = 0;
    for k in 1..=n {
        let end = len
            .checked_mul(k)
            .and_then(|x| x.checked_div(n))
            .ok_or(EINVAL)
            .at("splitting the sink")?;
        v.push(
            Sge::from_mr(mr, start, end.saturating_sub(start)).at("the sink SGE")?,
            GFP_KERNEL,
        )
        .at("allocating")?;
        start = end;
    }
    Ok(v)
}

/// Posts `wr` (signaled if asked) and waits for its successful completion with `opcode`.
fn post_one(
    c: &mut Conn,
    wr: SendWr<'_>,
    signaled: bool,
    opcode: WcOpcode,
    what: &'static str,
) -> TResult {
    let wr = if signaled { wr.signaled() } else { wr };
    c.qp()?.post_send(&[wr]).at(what)?;
    if signaled {
        let d = c.wait_ok(WR_DATA, what)?;
        if d.opcode != opcode {
            return Err(fail("a work request completed with the wrong opcode", 0, 0));
        }
    }
    Ok(())
}

/// Parameters of a functional test.
#[derive(Clone, Copy)]
pub(crate) struct Params {
    pub(crate) dst: SocketAddr,
    pub(crate) size: usize,
    pub(crate) sge: usize,
    pub(crate) signaled: bool,
    pub(crate) seed: u32,
}

/// SEND of `size` bytes to the server, which verifies it.
pub(crate) fn send(c: &mut Conn, p: &Params, flags: SendFlags) -> TResult {
    send_to_server(c, p, flags, 0)
}

/// SEND (or with `inv`, SEND_WITH_INV of the server's rkey `inv`) of `size` bytes to the
/// server, which checks the data and the invalidation.
fn send_to_server(c: &mut Conn, p: &Params, flags: SendFlags, inv: u32) -> TResult {
    let data = c.region(p.size, 1)?;
    data.fill(0, p.seed).at("filling")?;
    let r = c.call(Msg::new(
        Kind::ExpectSend,
        [
            p.size as u64,
            1,
            p.seed.into(),
            sge_count(p.sge, c.send_sge_max()) as u64,
            inv.into(),
        ],
    ))?;
    if r.kind != Kind::Ready {
        status_ok(&r, "the server could not post receives")?;
    }
    c.post_ctrl_recv()?;
    let sges = data_sges(&data, p.sge, c.send_sge_max())?;
    let wr = if inv != 0 {
        SendWr::send_inv(WR_DATA, inv)
    } else {
        SendWr::send(WR_DATA)
    };
    let wr = wr.sges(&sges).at("building the SEND")?.flags(flags);
    post_one(c, wr, p.signaled, WcOpcode::Send, "the SEND")?;
    let r = c.reply()?;
    status_ok(&r, "the server did not get the data")?;
    if !p.signaled && c.has_completion(WR_DATA)? {
        return Err(fail("an unsignaled SEND generated a completion", 0, 0));
    }
    Ok(())
}

/// The server SENDs `size` bytes to us (optionally solicited, or invalidating `inv`).
pub(crate) fn recv(c: &mut Conn, p: &Params, flags: u64, inv: u32) -> TResult {
    let data = c.region(p.size, 1)?;
    let sges = data_sges(&data, p.sge, c.recv_sge_max())?;
    c.qp()?
        .post_recv(&[RecvWr::new(WR_DATA)
            .sges(&sges)
            .at("building the receive")?])
        .at("ib_post_recv (data)")?;
    c.call_ok(
        Msg::new(
            Kind::SendMe,
            [
                p.size as u64,
                p.seed.into(),
                flags,
                sge_count(p.sge, c.recv_sge_max()) as u64,
                inv.into(),
            ],
        ),
        "the server could not send",
    )?;
    let d = c.wait_ok(WR_DATA, "the data receive failed")?;
    check_recv(&d, p.size, inv)?;
    check_region(&data, 0, p.seed, p.size)
}

fn check_recv(d: &Done, size: usize, inv: u32) -> TResult {
    if d.opcode != WcOpcode::Recv {
        return Err(fail("the receive completed with the wrong opcode", 0, 0));
    }
    if d.byte_len as usize != size {
        return Err(fail(
            "wrong receive length (expected, got)",
            size as u64,
            d.byte_len.into(),
        ));
    }
    match (inv, d.inv) {
        (0, None) => Ok(()),
        (0, Some(k)) => Err(fail("unexpected IB_WC_WITH_INVALIDATE (rkey)", k.into(), 0)),
        (k, Some(g)) if k == g => Ok(()),
        (k, g) => Err(fail(
            "wrong invalidated rkey (expected, got)",
            k.into(),
            g.map_or(u64::MAX, u64::from),
        )),
    }
}

/// RDMA WRITE of `size` bytes in `sge` SGEs into a server target, which verifies it.
pub(crate) fn write(c: &mut Conn, p: &Params, flags: SendFlags) -> TResult {
    let (iova, rkey) = c.target(p.size, 0, 2)?;
    let data = c.region(p.size, 1)?;
    data.fill(0, p.seed).at("filling")?;
    let sges = data_sges(&data, p.sge, c.send_sge_max())?;
    let wr = SendWr::write(WR_DATA, iova, rkey)
        .sges(&sges)
        .at("building the WRITE")?
        .flags(flags);
    post_one(c, wr, p.signaled, WcOpcode::RdmaWrite, "the WRITE")?;
    c.call_ok(
        Msg::new(Kind::Verify, [p.size as u64, p.seed.into(), 0, 0, 0]),
        "verifying the WRITE",
    )?;
    if !p.signaled && c.has_completion(WR_DATA)? {
        return Err(fail("an unsignaled WRITE generated a completion", 0, 0));
    }
    Ok(())
}

/// RDMA READ (or READ_WITH_INV) of a server target into a registered local sink, in `sge`
/// SGEs at most the device's READ limit (`max_sge_rd`).
pub(crate) fn read(c: &mut Conn, p: &Params, with_inv: bool) -> TResult {
    let (iova, rkey) = c.target(p.size, p.seed, 1)?;
    let sink = c.region(p.size, 1)?;
    let mr = c.register(&sink, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let limit = c.read_sge_max();
    let sges = mr_sges(&mr, p.size, p.sge.min(limit as usize))?;
    if p.sge == SGE_MAX && p.size >= limit as usize && sges.len() != limit as usize {
        return Err(fail(
            "could not build the device's READ SGE limit (built, limit)",
            sges.len() as u64,
            limit.into(),
        ));
    }
    let wr = if with_inv {
        SendWr::read_inv(WR_DATA, iova, rkey, mr.lkey())
    } else {
        SendWr::read(WR_DATA, iova, rkey)
    };
    c.qp()?
        .post_send(&[wr.sges(&sges).at("building the READ")?.signaled()])
        .at("ib_post_send (READ)")?;
    let d = c.wait_ok(WR_DATA, "the READ failed")?;
    if d.opcode != WcOpcode::RdmaRead {
        return Err(fail("the READ completed with the wrong opcode", 0, 0));
    }
    check_region(&sink, 0, p.seed, p.size)?;
    if with_inv {
        // REG_MR of a valid MR is an error: registering again proves the invalidation.
        c.register(&sink, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .map_err(|f| Fail {
                what: "re-registering after READ_WITH_INV failed (MR not invalidated?)",
                ..f
            })?;
    }
    c.local_inv(mr.lkey())
}

/// SEND_WITH_INV of the server's target rkey: the server checks `IB_WC_WITH_INVALIDATE`, and a
/// new registration (which needs the MR invalid) and WRITE prove the invalidation.
pub(crate) fn send_inv(c: &mut Conn, p: &Params) -> TResult {
    let (_, rkey) = c.target(4096, 0, 2)?;
    let q = Params {
        signaled: true,
        ..*p
    };
    send_to_server(c, &q, SendFlags::default(), rkey)?;
    let q = Params {
        size: 4096,
        sge: 1,
        ..*p
    };
    write(c, &q, SendFlags::default())
}

/// The server SENDs with invalidate of our rkey; we check the completion and re-register.
pub(crate) fn recv_inv(c: &mut Conn, p: &Params) -> TResult {
    let target = c.region(4096, 1)?;
    let mr = c.register(&target, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    recv(c, p, 0, mr.rkey())?;
    c.register(&target, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .map_err(|f| Fail {
            what: "re-registering after SEND_WITH_INV failed (MR not invalidated?)",
            ..f
        })?;
    c.local_inv(mr.lkey())
}

/// LOCAL_INV on the client: register, invalidate, register under a new key, invalidate.
pub(crate) fn local_inv(c: &mut Conn) -> TResult {
    let target = c.region(8192, 1)?;
    let mr = c.register(&target, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let k1 = mr.rkey();
    c.local_inv(k1)?;
    let mr = c.register(&target, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let k2 = mr.rkey();
    if k1 == k2 || k1 >> 8 != k2 >> 8 {
        return Err(fail(
            "key rotation did not change only the key byte (old, new)",
            k1.into(),
            k2.into(),
        ));
    }
    c.local_inv(k2)
}

/// MRs [`stag_random`] allocates.
pub(crate) const STAG_MRS: usize = 32;
/// How close above the index before it counts as "next in sequence" for [`stag_random`].
pub(crate) const STAG_NEAR: u32 = 64;
/// Of the `STAG_MRS - 1` successive pairs, how many may be near: allocation in sequence makes
/// all of them near; random indexes (at least 2^16 of them) each with a chance below 1/1000,
/// so 8 or more with a chance below C(31, 8) / 1000^8 < 10^-17.
const STAG_NEAR_MAX: usize = 7;

/// STag indexes are not allocated in sequence (a peer that sees some STags must not be able to
/// predict others): of [`STAG_MRS`] MRs allocated in a row, few have an index just above the
/// one before. Also no STag has index 0. Returns how many did.
pub(crate) fn stag_random(c: &mut Conn) -> TResult<usize> {
    let mut mrs = KVec::with_capacity(STAG_MRS, GFP_KERNEL).at("allocating")?;
    for _ in 0..STAG_MRS {
        let mr = FrMr::new(&c.pd, 1).at("ib_alloc_mr")?;
        if mr.rkey() >> 8 == 0 {
            return Err(fail("an MR got STag index 0 (rkey)", mr.rkey().into(), 0));
        }
        mrs.push(mr, GFP_KERNEL).at("allocating")?;
    }
    let near = mrs
        .windows(2)
        .filter(|w| match w {
            [a, b] => (b.rkey() >> 8).wrapping_sub(a.rkey() >> 8).wrapping_sub(1) < STAG_NEAR,
            _ => false,
        })
        .count();
    if near > STAG_NEAR_MAX {
        return Err(fail(
            "STag indexes in sequence (successive MRs whose index is just above the one before, of)",
            near as u64,
            (STAG_MRS - 1) as u64,
        ));
    }
    Ok(near)
}

/// Key rotation at the server: write under key 1, rotate (LOCAL_INV + REG_MR), write under key
/// 2; with `stale`, a WRITE under the stale key 1 must then fail (RFC 5040: an STag is its
/// index and its key; the C siw checks only the index).
pub(crate) fn reg_mr(c: &mut Conn, p: &Params, stale: bool) -> TResult {
    let (iova, k1) = c.target(p.size, 0, 2)?;
    let data = c.region(p.size, 1)?;
    for (round, seed) in [p.seed, p.seed.wrapping_add(1)].into_iter().enumerate() {
        let (iova, key) = if round == 0 {
            (iova, k1)
        } else {
            let r = c.call(Msg::new(Kind::Rotate, [0; 5]))?;
            let (i2, k2) = target_is(&r)?;
            if k2 == k1 || k2 >> 8 != k1 >> 8 || i2 != iova {
                return Err(fail(
                    "rotation gave a bad key (old, new)",
                    k1.into(),
                    k2.into(),
                ));
            }
            (i2, k2)
        };
        data.fill(0, seed).at("filling")?;
        let sges = data
            .sges(0, p.sge, c.qcaps.max_send_sge as usize)
            .at("SGEs")?;
        c.qp()?
            .post_send(&[SendWr::write(WR_DATA, iova, key)
                .sges(&sges)
                .at("WRITE")?
                .signaled()])
            .at("ib_post_send (WRITE)")?;
        c.wait_ok(WR_DATA, "a WRITE under a valid key failed")?;
        c.call_ok(
            Msg::new(Kind::Verify, [p.size as u64, seed.into(), 0, 0, 0]),
            "verifying",
        )?;
    }
    if !stale {
        return Ok(());
    }
    // The stale key must be refused: the WRITE fails, or the connection is torn down.
    let sge = Sge::from_buf(&data.buf, GUARD, 1).at("SGE")?;
    c.qp()?
        .post_send(&[SendWr::write(WR_DATA + 1, iova, k1)
            .sge(&sge)
            .at("WRITE")?
            .signaled()])
        .at("ib_post_send (stale WRITE)")?;
    let d = c.wait(WR_DATA + 1, step_ms());
    match d {
        Ok(d) if d.status != WcStatus::Success => Ok(()),
        Ok(_) => {
            // An iWARP Write completes once it is sent; the peer refuses it with a Terminate
            // that ends the connection, so the next request must fail.
            match c.call(Msg::new(Kind::Verify, [0; 5])) {
                Ok(_) => Err(fail(
                    "a WRITE under the invalidated key was accepted (key)",
                    k1.into(),
                    0,
                )),
                Err(_) => Ok(()),
            }
        }
        Err(f) => Err(f),
    }
}

/// Inline SENDs and WRITEs up to the granted inline size.
pub(crate) fn inline(c: &mut Conn, p: &Params) -> TResult {
    let max = c.qcaps.max_inline_data as usize;
    if max == 0 {
        return Err(Fail {
            what: "the QP has no inline data",
            a: 0,
            b: 0,
            err: kernel::rdma::consumer::eopnotsupp(),
        });
    }
    for size in [1, max / 2, max] {
        let q = Params { size, sge: 1, ..*p };
        send(c, &q, SendFlags::INLINE)?;
        write(c, &q, SendFlags::INLINE)?;
    }
    Ok(())
}

/// Solicited events: an unsolicited SEND must not wake a CQ armed for solicited completions;
/// with `event`, a solicited one then must.
pub(crate) fn solicited(c: &mut Conn, p: &Params, event: bool) -> TResult {
    let data = c.region(64, 2)?;
    // One data receive per round: it must come before the control receive for the reply.
    let post = |c: &mut Conn, i: usize| -> TResult {
        let sges = data.sges(i, 1, 1).at("SGE")?;
        c.qp()?
            .post_recv(&[RecvWr::new(WR_DATA + i as u64).sges(&sges).at("receive")?])
            .at("ib_post_recv")
    };
    post(c, 0)?;
    c.arm_solicited()?;
    c.post_ctrl_recv()?;
    c.send_request(Msg::new(Kind::SendMe, [64, p.seed.into(), 0, 1, 0]))?;
    // The unsolicited data and the (unsolicited) reply arrive; no event may fire.
    let quiet = c.wait_event(1000);
    if quiet.is_ok() {
        return Err(fail(
            "an unsolicited SEND raised a solicited-only CQ event",
            0,
            0,
        ));
    }
    let d = c.wait_ok(WR_DATA, "the first data receive failed")?;
    check_recv(&d, 64, 0)?;
    let r = c.reply()?;
    status_ok(&r, "the server could not send")?;
    c.wait_ok(WR_CTRL_TX, "the control send failed")?;
    check_region(&data, 0, p.seed, 64)?;
    if !event {
        return Ok(());
    }
    post(c, 1)?;
    c.arm_solicited()?;
    c.post_ctrl_recv()?;
    c.send_request(Msg::new(
        Kind::SendMe,
        [64, p.seed.wrapping_add(1).into(), 1, 1, 0],
    ))?;
    c.wait_event(step_ms())
        .at("no CQ event for a solicited SEND")?;
    let d = c.wait_ok(WR_DATA + 1, "the second data receive failed")?;
    check_recv(&d, 64, 0)?;
    let r = c.reply()?;
    status_ok(&r, "the server could not send")?;
    c.wait_ok(WR_CTRL_TX, "the control send failed")?;
    check_region(&data, 1, p.seed.wrapping_add(1), 64)
}

/// Many unsignaled WRITEs then one signaled: exactly one completion; all data arrives.
pub(crate) fn unsignaled(c: &mut Conn, p: &Params) -> TResult {
    const N: usize = 32;
    const PIECE: usize = 4096;
    let (iova, rkey) = c.target(N * PIECE, 0, 2)?;
    let data = c.region(N * PIECE, 1)?;
    data.fill(0, p.seed).at("filling")?;
    // Work requests borrow their SGEs: all are made first.
    let mut sges = KVec::with_capacity(N, GFP_KERNEL).at("allocating")?;
    for i in 0..N {
        let sge = Sge::from_buf(&data.buf, GUARD + i * PIECE, PIECE).at("SGE")?;
        sges.push(sge, GFP_KERNEL).at("allocating")?;
    }
    let mut wrs = KVec::with_capacity(N, GFP_KERNEL).at("allocating")?;
    for (i, sge) in sges.iter().enumerate() {
        let mut wr = SendWr::write(WR_DATA + i as u64, iova + (i * PIECE) as u64, rkey)
            .sge(sge)
            .at("WRITE")?;
        if i == N - 1 {
            wr = wr.signaled();
        }
        wrs.push(wr, GFP_KERNEL).at("allocating")?;
    }
    c.qp()?.post_send(&wrs).at("ib_post_send (WRITE chain)")?;
    c.wait_ok(WR_DATA + (N - 1) as u64, "the signaled WRITE failed")?;
    for i in 0..N - 1 {
        if c.has_completion(WR_DATA + i as u64)? {
            return Err(fail("an unsignaled WRITE completed (index)", i as u64, 0));
        }
    }
    c.call_ok(
        Msg::new(Kind::Verify, [(N * PIECE) as u64, p.seed.into(), 0, 0, 0]),
        "verifying the WRITEs",
    )
}

/// Connecting with "reject me" private data is rejected with the echoed private data.
pub(crate) fn reject(p: &Params) -> TResult {
    let mut pdata = [0u8; 16];
    pdata[..8].copy_from_slice(REJECT_ME);
    pdata[8..12].copy_from_slice(&p.seed.to_le_bytes());
    pdata[12..16].copy_from_slice(b"tail");
    match Conn::open(p.dst, ConnOpts::default(), &pdata)? {
        Connected::Up(c) => {
            let _ = c.close();
            Err(fail(
                "the server accepted a connection it must reject",
                0,
                0,
            ))
        }
        Connected::Failed(kind, st, _) => Err(unexpected(kind, st)),
        Connected::Rejected(n, got) => {
            let want_len = REJECTED.len() + 8;
            let ok = n >= want_len
                && got.get(..8) == Some(&REJECTED[..])
                && got.get(8..16) == pdata.get(8..16);
            if ok {
                Ok(())
            } else {
                Err(fail(
                    "wrong reject private data (length, expected length)",
                    n as u64,
                    want_len as u64,
                ))
            }
        }
    }
}

/// `qps` connections at once: a WRITE on each, all in flight together, then a verify and a READ
/// back on each.
pub(crate) fn many(p: &Params, qps: usize) -> TResult {
    let mut conns = KVec::with_capacity(qps, GFP_KERNEL).at("allocating")?;
    for _ in 0..qps {
        conns
            .push(Conn::connect(p.dst, ConnOpts::default())?, GFP_KERNEL)
            .at("allocating")?;
    }
    let mut targets = KVec::with_capacity(qps, GFP_KERNEL).at("allocating")?;
    let mut sources = KVec::with_capacity(qps, GFP_KERNEL).at("allocating")?;
    for (i, c) in conns.iter_mut().enumerate() {
        let t = c.target(p.size, 0, 3)?;
        let s = c.region(p.size, 1)?;
        // CAST: `i < qps`.
        s.fill(0, p.seed.wrapping_add(i as u32)).at("filling")?;
        targets.push(t, GFP_KERNEL).at("allocating")?;
        sources.push(s, GFP_KERNEL).at("allocating")?;
    }
    for ((c, (iova, rkey)), s) in conns.iter_mut().zip(targets.iter()).zip(sources.iter()) {
        let sges = if p.size == 0 {
            KVec::new()
        } else {
            s.sges(0, p.sge, c.qcaps.max_send_sge as usize).at("SGEs")?
        };
        c.qp()?
            .post_send(&[SendWr::write(WR_DATA, *iova, *rkey)
                .sges(&sges)
                .at("WRITE")?
                .signaled()])
            .at("ib_post_send (WRITE)")?;
    }
    for (i, c) in conns.iter_mut().enumerate() {
        c.wait_ok(WR_DATA, "a WRITE failed")?;
        // CAST: `i < qps`.
        let seed = p.seed.wrapping_add(i as u32);
        c.call_ok(
            Msg::new(Kind::Verify, [p.size as u64, seed.into(), 0, 0, 0]),
            "verifying",
        )?;
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let (iova, rkey) = *targets.get(i).ok_or(EINVAL).at("index")?;
        let sink = c.region(p.size, 1)?;
        let mr = c.register(&sink, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let sge = Sge::from_mr(&mr, 0, p.size).at("SGE")?;
        c.qp()?
            .post_send(&[SendWr::read_inv(WR_DATA, iova, rkey, mr.lkey())
                .sge(&sge)
                .at("READ")?
                .signaled()])
            .at("ib_post_send (READ)")?;
        c.wait_ok(WR_DATA, "a READ failed")?;
        // CAST: `i < qps`.
        check_region(&sink, 0, p.seed.wrapping_add(i as u32), p.size)?;
    }
    for c in conns.into_iter() {
        c.close()?;
    }
    Ok(())
}

/// Teardown with traffic in flight: big WRITEs and READs are posted, then the connection is
/// disconnected and destroyed at once. Then a new connection must work.
pub(crate) fn teardown(p: &Params) -> TResult {
    const SIZE: usize = 1 << 20;
    for round in 0..3 {
        let mut c = Conn::connect(p.dst, ConnOpts::default())?;
        let (iova, rkey) = c.target(SIZE, p.seed, 3)?;
        let src = c.region(SIZE, 1)?;
        src.fill(0, p.seed).at("filling")?;
        let sink = c.region(SIZE, 1)?;
        let mr = c.register(&sink, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let sges = src.sges(0, 1, c.qcaps.max_send_sge as usize).at("SGEs")?;
        let rsge = Sge::from_mr(&mr, 0, SIZE).at("SGE")?;
        let mut wrs = KVec::new();
        for i in 0..16u64 {
            let w = SendWr::write(WR_DATA + i, iova, rkey)
                .sges(&sges)
                .at("WRITE")?
                .signaled();
            wrs.push(w, GFP_KERNEL).at("allocating")?;
            let r = SendWr::read(WR_DATA + 100 + i, iova, rkey)
                .sge(&rsge)
                .at("READ")?
                .signaled();
            wrs.push(r, GFP_KERNEL).at("allocating")?;
        }
        c.qp()?.post_send(&wrs).at("ib_post_send")?;
        if round == 1 {
            // Disconnect first, then destroy without waiting.
            c.id.disconnect().at("rdma_disconnect")?;
        }
        // Round 0 and 2: destroy with no disconnect at all.
        drop(c);
    }
    // The server must still serve new connections.
    let c = Conn::connect(p.dst, ConnOpts::default())?;
    write_then_close(c, p, 65537, 2)
}

/// An orderly close while the server's Read Responses stream in: 16 READs of 1 MiB are posted,
/// and once the first completes, the client disconnects. What the server already gave TCP
/// still arrives after the client's QP has left RTS; the client must take it off the socket
/// (and drop it) so that the server's FIN behind it gets through and both sockets close in
/// order, without a reset (the shell counts resets on unread data). Returns the milliseconds
/// from `rdma_disconnect` to the disconnect event.
pub(crate) fn close_busy(p: &Params) -> TResult<i64> {
    const SIZE: usize = 1 << 20;
    const READS: u64 = 16;
    let mut c = Conn::connect(p.dst, ConnOpts::default())?;
    let (iova, rkey) = c.target(SIZE, p.seed, 1)?;
    let sink = c.region(SIZE, 1)?;
    let mr = c.register(&sink, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = Sge::from_mr(&mr, 0, SIZE).at("SGE")?;
    let mut wrs = KVec::new();
    for i in 0..READS {
        let r = SendWr::read(WR_DATA + i, iova, rkey)
            .sge(&sge)
            .at("READ")?
            .signaled();
        wrs.push(r, GFP_KERNEL).at("allocating")?;
    }
    c.qp()?.post_send(&wrs).at("ib_post_send (READs)")?;
    c.wait_ok(WR_DATA, "the first READ failed")?;
    let start = Ktime::ktime_get();
    c.close()?;
    Ok(kernel::time::ktime_ms_delta(Ktime::ktime_get(), start))
}

/// The server's orderly close right behind bulk data: on each of [`FIN_ROUNDS`] connections
/// the server SENDs 1 MiB and its reply, then disconnects once both completed. Both must
/// complete here, intact, before the disconnect: when the server's FIN arrives, the client's
/// receive path may not have read the data queued ahead of it yet.
pub(crate) fn fin_after_data(p: &Params) -> TResult {
    const SIZE: usize = 1 << 20;
    for round in 0..FIN_ROUNDS {
        let mut c = Conn::connect(p.dst, ConnOpts::default())?;
        let data = c.region(SIZE, 1)?;
        let sges = data_sges(&data, 1, c.recv_sge_max())?;
        c.qp()?
            .post_recv(&[RecvWr::new(WR_DATA)
                .sges(&sges)
                .at("building the receive")?])
            .at("ib_post_recv (data)")?;
        c.post_ctrl_recv()?;
        let seed = p.seed.wrapping_add(round);
        c.send_request(Msg::new(
            Kind::SendMe,
            [SIZE as u64, seed.into(), SEND_ME_THEN_CLOSE, 1, 0],
        ))?;
        c.wait_ok(WR_CTRL_TX, "the control send failed")?;
        let d = c.wait(WR_DATA, step_ms())?;
        if d.status != WcStatus::Success {
            return Err(fail(
                "the data sent before the server's FIN did not complete (round, status)",
                round.into(),
                d.status_raw.into(),
            ));
        }
        check_recv(&d, SIZE, 0)?;
        check_region(&data, 0, seed, SIZE)?;
        let r = c.reply()?;
        status_ok(&r, "the server could not send")?;
        expect_event(&c.cm, CmEventKind::Disconnected, "the server's disconnect")?;
    }
    Ok(())
}

/// Connections [`fin_after_data`] makes: the receive path is behind the FIN in some of them only.
const FIN_ROUNDS: u32 = 32;

/// A signaled WRITE of `size` bytes in `sge` SGEs (verified by the server), then an orderly
/// close.
fn write_then_close(mut c: Conn, p: &Params, size: usize, sge: usize) -> TResult {
    let q = Params {
        size,
        sge,
        signaled: true,
        ..*p
    };
    write(&mut c, &q, SendFlags::default())?;
    c.close()
}

/// The result of a benchmark.
pub(crate) struct BenchResult {
    pub(crate) bytes: u64,
    pub(crate) ops: u64,
    pub(crate) ms: u64,
}

/// Benchmark operations.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum BenchOp {
    Write,
    Read,
    Send,
    /// Control messages ([`MSG_LEN`] bytes) sent one at a time, each answered before the
    /// next: the round-trip latency of a small Send and its Receive each way.
    Ping,
}

/// Runs `op` of `size` bytes for `secs` seconds with `depth` operations in flight.
pub(crate) fn bench(
    dst: SocketAddr,
    op: BenchOp,
    size: usize,
    secs: u32,
    depth: usize,
) -> TResult<BenchResult> {
    let mut c = Conn::connect(dst, ConnOpts::default())?;
    let depth = depth.clamp(1, 128);
    let start = Ktime::ktime_get();
    let limit = i64::from(secs) * 1000;
    let mut ops = 0u64;
    match op {
        BenchOp::Write | BenchOp::Read => {
            let (iova, rkey) = c.target(size, 1, 3)?;
            let local = c.region(size, 1)?;
            let mut read_mr = None;
            let sges = if op == BenchOp::Read {
                let mr = c.register(&local, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
                let mut v = KVec::new();
                v.push(Sge::from_mr(&mr, 0, size).at("SGE")?, GFP_KERNEL)
                    .at("allocating")?;
                read_mr = Some(mr);
                v
            } else if size == 0 {
                KVec::new()
            } else {
                local.sges(0, 1, c.qcaps.max_send_sge as usize).at("SGEs")?
            };
            let mut inflight = 0usize;
            let mut next = 0u64;
            loop {
                let elapsed = kernel::time::ktime_ms_delta(Ktime::ktime_get(), start);
                while inflight < depth && elapsed < limit {
                    let wr = if op == BenchOp::Read {
                        SendWr::read(WR_DATA + (next % 1024), iova, rkey)
                    } else {
                        SendWr::write(WR_DATA + (next % 1024), iova, rkey)
                    };
                    c.qp()?
                        .post_send(&[wr.sges(&sges).at("WR")?.signaled()])
                        .at("ib_post_send")?;
                    next += 1;
                    inflight += 1;
                }
                if inflight == 0 {
                    break;
                }
                let id = WR_DATA + ((next - inflight as u64) % 1024);
                c.wait_ok(id, "a benchmark operation failed")?;
                inflight -= 1;
                ops += 1;
            }
            drop(read_mr);
        }
        BenchOp::Send => {
            let batch = (8 << 20) / size.max(4096);
            let batch = batch.clamp(4, 256);
            let data = c.region(size, 1)?;
            let sges = if size == 0 {
                KVec::new()
            } else {
                data.sges(0, 1, c.qcaps.max_send_sge as usize).at("SGEs")?
            };
            while kernel::time::ktime_ms_delta(Ktime::ktime_get(), start) < limit {
                let r = c.call(Msg::new(
                    Kind::ExpectSend,
                    [size as u64, batch as u64, 0, 1, 0],
                ))?;
                if r.kind != Kind::Ready {
                    status_ok(&r, "the server could not post receives")?;
                }
                c.post_ctrl_recv()?;
                let mut posted = 0;
                let mut done = 0;
                while done < batch {
                    while posted < batch && posted - done < depth {
                        let wr = SendWr::send(WR_DATA + posted as u64)
                            .sges(&sges)
                            .at("SEND")?
                            .signaled();
                        c.qp()?.post_send(&[wr]).at("ib_post_send")?;
                        posted += 1;
                    }
                    c.wait_ok(WR_DATA + done as u64, "a benchmark SEND failed")?;
                    done += 1;
                }
                let r = c.reply()?;
                status_ok(&r, "the server did not get the SENDs")?;
                ops += batch as u64;
            }
        }
        BenchOp::Ping => {
            while kernel::time::ktime_ms_delta(Ktime::ktime_get(), start) < limit {
                c.call_ok(
                    Msg::new(Kind::Ping, [0; 5]),
                    "the server did not answer a ping",
                )?;
                ops += 1;
            }
        }
    }
    let size = if op == BenchOp::Ping { MSG_LEN } else { size };
    let ms = kernel::time::ktime_ms_delta(Ktime::ktime_get(), start).max(1);
    c.close()?;
    Ok(BenchResult {
        bytes: ops * size as u64,
        ops,
        ms: ms as u64,
    })
}

/// The device attributes of the RDMA device that routes to `dst`.
pub(crate) fn device_caps(dst: SocketAddr) -> TResult<DeviceCaps> {
    let (id, _cm) = resolved(dst)?;
    let dev = id
        .device()
        .ok_or(EINVAL)
        .at("the resolved id has no device")?;
    Ok(dev.caps())
}

/// Connects and disconnects; returns the IRD and ORD of the Established event.
pub(crate) fn connect_only(p: &Params) -> TResult<(u8, u8)> {
    let c = Conn::connect(p.dst, ConnOpts::default())?;
    let depths = c.cm.depths();
    c.close()?;
    Ok(depths)
}

/// How a connect that must fail ended.
pub(crate) struct ConnectError {
    /// The CM event (`enum rdma_cm_event_type`).
    pub(crate) event: u64,
    /// Its status (a negative errno).
    pub(crate) status: i32,
    /// Milliseconds from `rdma_connect` to the event.
    pub(crate) ms: i64,
}

/// A connect to `dst`, which never answers at the TCP or at the MPA level, must end with
/// `RDMA_CM_EVENT_CONNECT_ERROR` or `RDMA_CM_EVENT_UNREACHABLE` (not established, not rejected,
/// and within a minute).
pub(crate) fn connect_error(p: &Params) -> TResult<ConnectError> {
    let opts = ConnOpts {
        wait_ms: 60_000,
        ..ConnOpts::default()
    };
    match Conn::open(p.dst, opts, HELLO)? {
        Connected::Up(c) => {
            let _ = c.close();
            Err(fail("connected, but this connect must fail", 0, 0))
        }
        Connected::Rejected(n, _) => Err(fail(
            "rejected (private data length), but nobody answered",
            n as u64,
            0,
        )),
        Connected::Failed(kind, status, ms)
            if matches!(kind, CmEventKind::ConnectError | CmEventKind::Unreachable) =>
        {
            Ok(ConnectError {
                event: event_code(kind),
                status,
                ms,
            })
        }
        Connected::Failed(kind, st, _) => Err(unexpected(kind, st)),
    }
}

/// The work request [`sge_over`] posts.
#[derive(Clone, Copy)]
pub(crate) enum OverOp {
    Send,
    Recv,
    Write,
    Read,
}

impl OverOp {
    /// The op of test `sge_over_<op>`.
    pub(crate) fn of_test(name: &str) -> Option<OverOp> {
        Some(match name.strip_prefix("sge_over_")? {
            "send" => OverOp::Send,
            "recv" => OverOp::Recv,
            "write" => OverOp::Write,
            "read" => OverOp::Read,
            _ => return None,
        })
    }
}

/// A work request with one SGE more than the device allows (`max_send_sge`, `max_recv_sge` or
/// `max_sge_rd`) must be refused by the post with `EINVAL`, and the QP must go on working.
/// Returns why the check could not run here, if it could not.
#[inline(never)]
pub(crate) fn sge_over(p: &Params, op: OverOp) -> TResult<Option<&'static str>> {
    const PIECE: usize = 64;
    let mut c = Conn::connect(p.dst, ConnOpts::default())?;
    let limit = match op {
        OverOp::Send | OverOp::Write => c.send_sge_max(),
        OverOp::Recv => c.recv_sge_max(),
        OverOp::Read => c.read_sge_max(),
    } as usize;
    let n = limit + 1;
    if n > kernel::rdma::consumer::qp::MAX_SGE {
        c.close()?;
        return Ok(Some(
            "the device allows as many SGEs as kernel::rdma::consumer builds (MAX_SGE)",
        ));
    }
    let data = c.region(n * PIECE, 1)?;
    data.fill(0, p.seed).at("filling")?;
    let posted = match op {
        OverOp::Send | OverOp::Write => {
            let sges = data.sges(0, n, n).at("SGEs")?;
            let wr = if let OverOp::Write = op {
                let (iova, rkey) = c.target(n * PIECE, 0, 2)?;
                SendWr::write(WR_DATA, iova, rkey)
            } else {
                SendWr::send(WR_DATA)
            };
            let wr = wr.sges(&sges).at("building the work request")?.signaled();
            (sges.len(), c.qp()?.post_send(&[wr]))
        }
        OverOp::Recv => {
            let sges = data.sges(0, n, n).at("SGEs")?;
            let wr = RecvWr::new(WR_DATA)
                .sges(&sges)
                .at("building the receive")?;
            (sges.len(), c.qp()?.post_recv(&[wr]))
        }
        OverOp::Read => {
            let (iova, rkey) = c.target(n * PIECE, p.seed, 1)?;
            let mr = c.register(&data, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
            let sges = mr_sges(&mr, n * PIECE, n)?;
            let wr = SendWr::read(WR_DATA, iova, rkey)
                .sges(&sges)
                .at("building the READ")?
                .signaled();
            (sges.len(), c.qp()?.post_send(&[wr]))
        }
    };
    match posted {
        (built, _) if built != n => Err(fail(
            "could not build limit + 1 SGEs (built, wanted)",
            built as u64,
            n as u64,
        )),
        (_, Ok(())) => Err(fail(
            "a work request with more SGEs than the device allows was posted (SGEs, limit)",
            n as u64,
            limit as u64,
        )),
        (_, Err(e)) if e.error != EINVAL => Err(Fail {
            what: "the post failed, but not with EINVAL (SGEs, limit)",
            a: n as u64,
            b: limit as u64,
            err: e.error,
        }),
        (_, Err(_)) => {
            // The refused request left the QP working.
            write_then_close(c, p, 4096, 1).map(|()| None)
        }
    }
}

/// What [`rd_max`] did.
pub(crate) struct RdMax {
    /// RDMA READs posted at once.
    pub(crate) reads: usize,
    /// The IRD and ORD of the Established event.
    pub(crate) ird: u8,
    pub(crate) ord: u8,
}

/// Connects asking for the device's largest IRD and ORD, then posts as many RDMA READs as the
/// ORD at once (one `ib_post_send`); all must complete and bring the right data.
pub(crate) fn rd_max(p: &Params) -> TResult<RdMax> {
    const PIECE: usize = 256;
    let opts = ConnOpts {
        rd_max: true,
        ..ConnOpts::default()
    };
    let mut c = Conn::connect(p.dst, opts)?;
    let (ird, ord) = c.cm.depths();
    let want = c.caps.max_qp_init_rd_atom.min(255);
    if u32::from(ord) != want {
        return Err(fail(
            "the connection did not get the device's largest ORD (got, device)",
            ord.into(),
            want.into(),
        ));
    }
    let n = usize::from(ord);
    if n > c.qcaps.max_send_wr as usize {
        return Err(fail(
            "the send queue is shorter than the ORD (depth, ORD)",
            c.qcaps.max_send_wr.into(),
            n as u64,
        ));
    }
    let (iova, rkey) = c.target(n * PIECE, p.seed, 1)?;
    let sink = c.region(n * PIECE, 1)?;
    let mr = c.register(&sink, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    // Work requests borrow their SGEs: all are made first.
    let mut sges = KVec::with_capacity(n, GFP_KERNEL).at("allocating")?;
    for i in 0..n {
        let sge = Sge::from_mr(&mr, i * PIECE, PIECE).at("the sink SGE")?;
        sges.push(sge, GFP_KERNEL).at("allocating")?;
    }
    let mut wrs = KVec::with_capacity(n, GFP_KERNEL).at("allocating")?;
    for (i, sge) in sges.iter().enumerate() {
        let wr = SendWr::read(WR_DATA + i as u64, iova + (i * PIECE) as u64, rkey)
            .sge(sge)
            .at("building a READ")?
            .signaled();
        wrs.push(wr, GFP_KERNEL).at("allocating")?;
    }
    c.qp()?.post_send(&wrs).map_err(|e| Fail {
        what: "ib_post_send (READs up to the ORD) (index, ORD)",
        a: e.index as u64,
        b: n as u64,
        err: e.error,
    })?;
    for i in 0..n {
        let d = c.wait_ok(WR_DATA + i as u64, "a READ failed")?;
        if d.opcode != WcOpcode::RdmaRead {
            return Err(fail("a READ completed with the wrong opcode", i as u64, 0));
        }
    }
    check_region(&sink, 0, p.seed, n * PIECE)?;
    c.local_inv(mr.lkey())?;
    c.close()?;
    Ok(RdMax { reads: n, ird, ord })
}

/// What [`qp_max_wr`] found.
pub(crate) struct MaxWr {
    /// The device's `max_qp_wr`.
    pub(crate) max: u32,
    /// The errors of creating a QP one deeper (send queue, receive queue).
    pub(crate) send_err: i32,
    pub(crate) recv_err: i32,
}

/// A QP of the device's `max_qp_wr` send and receive depth is created and works (a WRITE and a
/// SEND); one a work request deeper (send or receive queue) is refused with an errno.
pub(crate) fn qp_max_wr(p: &Params) -> TResult<MaxWr> {
    let (mut id, _cm) = resolved(p.dst)?;
    let dev = id
        .device()
        .ok_or(EINVAL)
        .at("the resolved id has no device")?;
    let caps = dev.caps();
    let max = caps.max_qp_wr;
    let pd = Pd::new(dev, OWNER).at("ib_alloc_pd")?;
    let waiter = CqWaiter::new().at("allocating the CQ waiter")?;
    let cq = Cq::new(dev, 64, 0, waiter, OWNER).at("ib_create_cq")?;
    let base = QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let over = max.checked_add(1).ok_or(EINVAL).at("max_qp_wr + 1")?;
    let mut errs = [0i32; 2];
    for (i, want) in [
        QpCaps {
            max_send_wr: over,
            ..base
        },
        QpCaps {
            max_recv_wr: over,
            ..base
        },
    ]
    .into_iter()
    .enumerate()
    {
        match id.create_qp(&pd, &cq, &cq, want, false) {
            Ok(_) => {
                return Err(fail(
                    "a QP deeper than max_qp_wr was created (queue 0 send 1 receive, depth)",
                    i as u64,
                    over.into(),
                ))
            }
            Err(e) => {
                if let Some(slot) = errs.get_mut(i) {
                    *slot = e.to_errno();
                }
            }
        }
    }
    drop(id);
    drop(cq);
    drop(pd);
    let opts = ConnOpts {
        depth: max,
        ..ConnOpts::default()
    };
    let mut c = Conn::connect(p.dst, opts)?;
    if c.qcaps.max_send_wr < max || c.qcaps.max_recv_wr < max {
        return Err(fail(
            "the QP got less than max_qp_wr (send, receive depth)",
            c.qcaps.max_send_wr.into(),
            c.qcaps.max_recv_wr.into(),
        ));
    }
    let q = Params {
        size: 4096,
        sge: 1,
        signaled: true,
        ..*p
    };
    write(&mut c, &q, SendFlags::default())?;
    send(&mut c, &q, SendFlags::default())?;
    c.close()?;
    Ok(MaxWr {
        max,
        send_err: errs[0],
        recv_err: errs[1],
    })
}
