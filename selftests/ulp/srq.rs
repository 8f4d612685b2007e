// SPDX-License-Identifier: GPL-2.0

//! Shared receive queue tests.
//!
//! - `srq_many`: SENDs to several QPs of the server at once, interleaved; the server checks
//!   every message byte for byte. Against a server started with `srq=1` they all land in its
//!   SRQ's slots (any server works).
//!
//! The other two run on the client side, where the test sees everything: the client's QPs take
//! their receives from a client SRQ (slots of a guarded [`Region`], posted in order) and have a
//! direct CQ; the server (either kind) sends to them on request ([`Kind::SendMe`]: the data,
//! then its status reply, land in two consecutive slots).
//!
//! - `srq_limit`: a limit above the SRQ's size is refused (`EINVAL`), a post beyond its size
//!   fails with `ENOMEM`; `IB_EVENT_SRQ_LIMIT_REACHED` comes exactly when fewer work requests
//!   than the armed limit remain, once, and again after re-arming.
//! - `srq_drain`: a QP's error flushes none of the SRQ's queued work requests (the next QP on
//!   the SRQ receives into them, in order), and `ib_drain_qp` returns promptly (it waits for
//!   `IB_EVENT_QP_LAST_WQE_REACHED`, up to 60 s) for a QP in error and for one in RTS.

use crate::client::{
    check_region, expect_event, fail, resolved, status_ok, step_ms, take_first, ClientCm, Conn,
    ConnOpts, Ctx, Done, Fail, Params, TResult,
};
use crate::proto::{Kind, Msg, HELLO, MSG_LEN};
use crate::region::Region;
use crate::OWNER;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    prelude::*,
    rdma::consumer::{
        cm::{CmEventKind, CmId, ConnParam},
        cq::{Cq, CqHandler, CqWaiter},
        mem::{DmaBuf, Pd},
        qp::{Qp, QpCaps, SendWr, Sge, Wc, WcOpcode, WcStatus},
        srq::{Srq, SrqEvent, SrqHandler},
        Device,
    },
    sync::{Arc, ArcBorrow},
    time::{ktime_ms_delta, Ktime},
};

/// Work requests of the client SRQ; a power of two (the C siw rounds SRQ sizes up to one).
const DEPTH: usize = 16;
/// The limit `srq_limit` arms first.
const LIMIT: u32 = DEPTH as u32 - 2;
/// The largest data message of the client SRQ tests.
const SLOT_MAX: usize = 65537;
/// How long `ib_drain_qp` may take.
const DRAIN_MAX_MS: i64 = 5000;
/// How long to wait for an event that must not come.
const QUIET_MS: u32 = 200;

/// wr_ids: the control SEND, and SRQ slot `i` as `WR_SRQ + i`.
const WR_CTRL_TX: u64 = 2;
const WR_SRQ: u64 = 0x1000;
/// wr_ids of the data SENDs of `srq_many`.
const WR_DATA: u64 = 0x100;

/// SENDs of `size` bytes in `sge` SGEs to `qps` connections at once, [`PER_QP`] each, posted
/// round-robin; the server checks every one.
pub(crate) fn srq_many(p: &Params, qps: usize) -> TResult {
    /// Messages per connection.
    const PER_QP: usize = 4;
    let mut conns = KVec::with_capacity(qps, GFP_KERNEL).at("allocating")?;
    let mut data = KVec::with_capacity(qps, GFP_KERNEL).at("allocating")?;
    for i in 0..qps {
        let c = Conn::connect(p.dst, ConnOpts::default())?;
        let r = c.region(p.size, PER_QP)?;
        // CAST: `i < qps <= 1024`; seeds wrap.
        let seed = p.seed.wrapping_add((i * PER_QP) as u32);
        for k in 0..PER_QP {
            // CAST: `k < PER_QP`.
            r.fill(k, seed.wrapping_add(k as u32)).at("filling")?;
        }
        conns.push(c, GFP_KERNEL).at("allocating")?;
        data.push((r, seed), GFP_KERNEL).at("allocating")?;
    }
    for (c, (_, seed)) in conns.iter_mut().zip(data.iter()) {
        let r = c.call(Msg::new(
            Kind::ExpectSend,
            [
                p.size as u64,
                PER_QP as u64,
                (*seed).into(),
                p.sge as u64,
                0,
            ],
        ))?;
        if r.kind != Kind::Ready {
            status_ok(&r, "the server could not take the messages")?;
        }
        c.post_ctrl_recv()?;
    }
    for k in 0..PER_QP {
        for (c, (r, _)) in conns.iter_mut().zip(data.iter()) {
            let sges = if p.size == 0 {
                KVec::new()
            } else {
                r.sges(k, p.sge, c.qcaps.max_send_sge as usize)
                    .at("too many SGEs for the device")?
            };
            c.qp()?
                .post_send(&[SendWr::send(WR_DATA + k as u64)
                    .sges(&sges)
                    .at("building the SEND")?
                    .signaled()])
                .at("ib_post_send (SEND)")?;
        }
    }
    for c in conns.iter_mut() {
        for k in 0..PER_QP {
            c.wait_ok(WR_DATA + k as u64, "a SEND failed")?;
        }
        let r = c.reply()?;
        status_ok(&r, "the server did not get the data")?;
    }
    for c in conns.into_iter() {
        c.close()?;
    }
    Ok(())
}

/// Counts the client SRQ's events and wakes a waiter on each.
struct Events {
    limit: AtomicU32,
    other: AtomicU32,
    waiter: Arc<CqWaiter>,
}

impl SrqHandler for Events {
    fn event(this: ArcBorrow<'_, Self>, event: SrqEvent) {
        match event {
            SrqEvent::LimitReached => this.limit.fetch_add(1, Ordering::Relaxed),
            _ => this.other.fetch_add(1, Ordering::Relaxed),
        };
        <CqWaiter as CqHandler>::completion_event(this.waiter.as_arc_borrow());
    }
}

/// A client SRQ of [`DEPTH`] slots of `slot` bytes, on its own PD.
struct Fixture {
    pd: Arc<Pd>,
    srq: Arc<Srq>,
    events: Arc<Events>,
    region: Region,
    max_sge: usize,
}

impl Fixture {
    fn new(dev: &Device, slot: usize) -> TResult<Fixture> {
        let caps = dev.caps();
        if caps.max_srq == 0 {
            return Err(fail("the device reports no SRQs (max_srq 0)", 0, 0));
        }
        let pd = Pd::new(dev, OWNER).at("ib_alloc_pd")?;
        let waiter = CqWaiter::new().at("allocating the event waiter")?;
        let events = Arc::new(
            Events {
                limit: AtomicU32::new(0),
                other: AtomicU32::new(0),
                waiter,
            },
            GFP_KERNEL,
        )
        .at("allocating")?;
        // CAST: `DEPTH` is small.
        let srq = Srq::new(&pd, DEPTH as u32, caps.max_srq_sge.min(8), events.clone())
            .at("ib_create_srq")?;
        let granted = srq.caps();
        if (granted.max_wr as usize) < DEPTH || granted.max_sge == 0 {
            return Err(fail(
                "ib_create_srq granted less than asked (max_wr, max_sge)",
                granted.max_wr.into(),
                granted.max_sge.into(),
            ));
        }
        let region = Region::new(&pd, slot.max(MSG_LEN), DEPTH).at("allocating the slots")?;
        srq.attach_buf(&region.buf).at("attaching the slots")?;
        Ok(Fixture {
            pd,
            srq,
            events,
            region,
            max_sge: usize::try_from(granted.max_sge).unwrap_or(1),
        })
    }

    /// Posts slot `i` (wr_id `WR_SRQ + i`).
    fn post(&self, i: usize) -> TResult {
        let sges = self
            .region
            .sges(i, 1, self.max_sge)
            .at("too many SGEs for the SRQ")?;
        let wr = kernel::rdma::consumer::qp::RecvWr::new(WR_SRQ + i as u64)
            .sges(&sges)
            .at("building an SRQ receive")?;
        self.srq
            .post_recv(&[wr])
            .map_err(|e| e.error)
            .at("ib_post_srq_recv")
    }

    fn limit_events(&self) -> u32 {
        self.events.limit.load(Ordering::Relaxed)
    }

    /// Waits up to `ms` for an SRQ event; `Ok(false)` if none came.
    fn wait_event(&self, ms: u32) -> TResult<bool> {
        match self.events.waiter.wait(ms) {
            Ok(()) => Ok(true),
            Err(e) if e == kernel::rdma::consumer::etimedout() => Ok(false),
            Err(e) => Err(e).at("waiting for an SRQ event"),
        }
    }
}

/// A connection whose QP takes its receives from the fixture's SRQ, with one direct CQ.
struct SrqConn {
    id: CmId<ClientCm>,
    cm: Arc<ClientCm>,
    cq: Arc<Cq>,
    ctrl_tx: Arc<DmaBuf>,
    /// Completions polled but not consumed yet; consumed ones are `None`.
    pending: KVec<Option<Done>>,
}

impl SrqConn {
    /// Creates the QP of the resolved `id` on the fixture's SRQ and connects.
    fn connect(mut id: CmId<ClientCm>, cm: Arc<ClientCm>, fx: &Fixture) -> TResult<SrqConn> {
        let dev = id.device().ok_or(EINVAL).at("the id has no device")?;
        let caps = dev.caps();
        let cq = Cq::new_direct(dev, 64, OWNER).at("ib_alloc_cq")?;
        let want = QpCaps {
            max_send_wr: 16.min(caps.max_qp_wr),
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        let qp = id
            .create_qp_on_srq(&fx.pd, &cq, &cq, &fx.srq, want, false)
            .at("rdma_create_qp with an SRQ")?;
        let ctrl_tx = DmaBuf::new(&fx.pd, MSG_LEN).at("allocating the control buffer")?;
        qp.attach_buf(&ctrl_tx).at("attaching the control buffer")?;
        let param = ConnParam {
            private_data: HELLO,
            responder_resources: caps.max_qp_rd_atom.min(16) as u8,
            initiator_depth: caps.max_qp_init_rd_atom.min(16) as u8,
            retry_count: 7,
            rnr_retry_count: 7,
        };
        id.connect(&param).at("rdma_connect")?;
        expect_event(&cm, CmEventKind::Established, "connecting")?;
        Ok(SrqConn {
            id,
            cm,
            cq,
            ctrl_tx,
            pending: KVec::new(),
        })
    }

    fn qp(&self) -> TResult<&Qp> {
        self.id.qp().at("no QP")
    }

    /// Moves completions into `pending`, waiting up to `ms` for the first.
    fn reap(&mut self, ms: u32) -> TResult<usize> {
        let mut wcs: [Wc; 16] = core::array::from_fn(|_| Wc::default());
        let mut total = 0;
        let mut wait = ms;
        loop {
            let n = match self.cq.poll_wait(&mut wcs, wait) {
                Ok(n) => n,
                Err(e) if e == kernel::rdma::consumer::etimedout() => 0,
                Err(e) => return Err(e).at("polling the CQ"),
            };
            for wc in wcs.iter().take(n) {
                self.pending
                    .push(Some(Done::of(wc)), GFP_KERNEL)
                    .at("recording a completion")?;
            }
            total += n;
            if n < wcs.len() {
                return Ok(total);
            }
            wait = 0;
        }
    }

    /// Waits for (and takes) the first completion matching `pred`.
    fn wait(&mut self, pred: impl Fn(&Done) -> bool, what: &'static str) -> TResult<Done> {
        let start = Ktime::ktime_get();
        loop {
            if let Some(d) = take_first(&mut self.pending, &pred) {
                return Ok(d);
            }
            if ktime_ms_delta(Ktime::ktime_get(), start) > i64::from(step_ms()) {
                return Err(Fail::timeout(what));
            }
            self.reap(100)?;
        }
    }

    /// Sends a control request and waits for its SEND to complete.
    fn request(&mut self, m: Msg) -> TResult {
        self.ctrl_tx.write(0, &m.encode()).at("writing a request")?;
        let sge = Sge::from_buf(&self.ctrl_tx, 0, MSG_LEN).at("control SGE")?;
        self.qp()?
            .post_send(&[SendWr::send(WR_CTRL_TX)
                .sge(&sge)
                .at("control send")?
                .signaled()])
            .at("ib_post_send (control)")?;
        let d = self.wait(|d| d.wr_id == WR_CTRL_TX, "the control SEND")?;
        if d.status != WcStatus::Success {
            return Err(fail(
                "the control SEND failed (status)",
                d.status_raw.into(),
                0,
            ));
        }
        Ok(())
    }

    /// Waits for the next receive from the SRQ, which must complete successfully in slot
    /// `slot` with `len` bytes.
    fn recv(&mut self, slot: usize, len: usize) -> TResult {
        let d = self.wait(|d| d.wr_id >= WR_SRQ, "an SRQ receive")?;
        if d.status != WcStatus::Success || d.opcode != WcOpcode::Recv {
            return Err(fail(
                "an SRQ receive failed (wr_id, status)",
                d.wr_id,
                d.status_raw.into(),
            ));
        }
        if d.wr_id != WR_SRQ + slot as u64 {
            return Err(fail(
                "an SRQ receive took the wrong work request (expected, got)",
                WR_SRQ + slot as u64,
                d.wr_id,
            ));
        }
        if d.byte_len as usize != len {
            return Err(fail(
                "wrong SRQ receive length (expected, got)",
                len as u64,
                d.byte_len.into(),
            ));
        }
        Ok(())
    }

    /// Asks the server for `len` bytes of `pattern(seed)`: the data must land in SRQ slot
    /// `slot`, byte for byte, and the server's status reply in the next slot.
    fn send_me(&mut self, fx: &Fixture, slot: usize, len: usize, seed: u32) -> TResult {
        self.request(Msg::new(Kind::SendMe, [len as u64, seed.into(), 0, 1, 0]))?;
        self.recv(slot, len)?;
        check_region(&fx.region, slot, seed, len)?;
        self.recv(slot + 1, MSG_LEN)?;
        let mut b = [0u8; MSG_LEN];
        fx.region
            .buf
            .read(fx.region.data_off(slot + 1), &mut b)
            .at("reading the reply")?;
        let r = Msg::decode(&b).ok_or(fail("the server sent garbage", 0, 0))?;
        status_ok(&r, "the server could not send")
    }

    /// Fails if a receive completion (an SRQ work request) is pending or arrives within `ms`.
    fn no_recv(&mut self, ms: u32, what: &'static str) -> TResult {
        self.reap(ms)?;
        if let Some(d) = self.pending.iter().flatten().find(|d| d.wr_id >= WR_SRQ) {
            return Err(fail(what, d.wr_id, d.status_raw.into()));
        }
        Ok(())
    }

    /// Disconnects and waits for the disconnect event.
    fn disconnect(&self) -> TResult {
        self.id.disconnect().at("rdma_disconnect")?;
        loop {
            let (kind, _) = self.cm.next(step_ms()).at("waiting for the disconnect")?;
            if kind == CmEventKind::Disconnected {
                return Ok(());
            }
        }
    }

    /// `ib_drain_qp` on the QP, timed: it must return within [`DRAIN_MAX_MS`] and flush no SRQ
    /// work request. Returns the milliseconds it took.
    fn drain(&mut self) -> TResult<i64> {
        let start = Ktime::ktime_get();
        let left = self.qp()?.drain().at("ib_drain_qp")?;
        let ms = ktime_ms_delta(Ktime::ktime_get(), start);
        for wc in left.iter() {
            if wc.wr_id() >= WR_SRQ {
                return Err(fail(
                    "the QP's error flushed an SRQ work request (wr_id, status)",
                    wc.wr_id(),
                    wc.status_raw().into(),
                ));
            }
        }
        if ms > DRAIN_MAX_MS {
            // CAST: `ms` is positive here.
            return Err(fail(
                "ib_drain_qp took too long (ms, limit): no IB_EVENT_QP_LAST_WQE_REACHED?",
                ms as u64,
                DRAIN_MAX_MS as u64,
            ));
        }
        Ok(ms)
    }
}

impl Fail {
    fn timeout(what: &'static str) -> Fail {
        Fail {
            what,
            a: 0,
            b: step_ms().into(),
            err: kernel::rdma::consumer::etimedout(),
        }
    }
}

/// The client SRQ's limit: refused above its size, then armed, fired once when fewer than the
/// limit remain, and re-armed.
pub(crate) fn srq_limit(p: &Params) -> TResult {
    let len = p.size.min(SLOT_MAX);
    let (id, cm) = resolved(p.dst)?;
    let dev = id.device().ok_or(EINVAL).at("the id has no device")?;
    let fx = Fixture::new(dev, len)?;
    let granted = fx.srq.caps();
    match fx.srq.arm_limit(granted.max_wr + 1) {
        Err(e) if e == EINVAL => {}
        r => {
            return Err(fail(
                "arming a limit above max_wr did not fail with EINVAL (limit, errno)",
                (granted.max_wr + 1).into(),
                r.map_or_else(|e| e.to_errno().unsigned_abs().into(), |()| 0),
            ))
        }
    }
    for i in 0..DEPTH {
        fx.post(i)?;
    }
    if granted.max_wr as usize == DEPTH {
        let sges = fx.region.sges(0, 1, fx.max_sge).at("SGEs")?;
        let wr = kernel::rdma::consumer::qp::RecvWr::new(WR_SRQ + 999)
            .sges(&sges)
            .at("building an SRQ receive")?;
        match fx.srq.post_recv(&[wr]) {
            Err(e) if e.error == ENOMEM && e.index == 0 => {}
            r => {
                return Err(fail(
                    "posting to a full SRQ did not fail with ENOMEM (errno, index)",
                    r.map_or_else(|e| e.error.to_errno().unsigned_abs().into(), |()| 0),
                    r.map_or_else(|e| e.index as u64, |()| 0),
                ))
            }
        }
    }
    let q = fx.srq.query().at("ib_query_srq")?;
    if (q.max_wr as usize) < DEPTH || q.srq_limit != 0 {
        return Err(fail(
            "ib_query_srq of a fresh SRQ (max_wr, srq_limit)",
            q.max_wr.into(),
            q.srq_limit.into(),
        ));
    }
    let mut c = SrqConn::connect(id, cm, &fx)?;
    fx.srq.arm_limit(LIMIT).at("ib_modify_srq(IB_SRQ_LIMIT)")?;
    let q = fx.srq.query().at("ib_query_srq")?;
    if q.srq_limit != LIMIT {
        return Err(fail(
            "ib_query_srq does not report the armed limit (expected, got)",
            LIMIT.into(),
            q.srq_limit.into(),
        ));
    }
    // Two work requests taken: LIMIT remain, not fewer. No event.
    c.send_me(&fx, 0, len, p.seed)?;
    if fx.wait_event(QUIET_MS)? || fx.limit_events() != 0 {
        return Err(fail(
            "an SRQ event came while LIMIT work requests remained (events, limit)",
            fx.limit_events().into(),
            LIMIT.into(),
        ));
    }
    // The next one taken leaves LIMIT - 1: the event, once.
    c.send_me(&fx, 2, len, p.seed.wrapping_add(1))?;
    if !fx.wait_event(step_ms())? {
        return Err(fail(
            "no IB_EVENT_SRQ_LIMIT_REACHED when fewer than the limit remained (limit, left)",
            LIMIT.into(),
            (DEPTH - 4) as u64,
        ));
    }
    if fx.wait_event(QUIET_MS)? || fx.limit_events() != 1 {
        return Err(fail(
            "IB_EVENT_SRQ_LIMIT_REACHED came more than once (events, limit)",
            fx.limit_events().into(),
            LIMIT.into(),
        ));
    }
    // Re-armed above the fill level: the next work request taken fires it again.
    fx.srq
        .arm_limit(LIMIT - 1)
        .at("ib_modify_srq(IB_SRQ_LIMIT)")?;
    c.send_me(&fx, 4, len, p.seed.wrapping_add(2))?;
    if !fx.wait_event(step_ms())? || fx.limit_events() != 2 {
        return Err(fail(
            "no IB_EVENT_SRQ_LIMIT_REACHED after re-arming (events, limit)",
            fx.limit_events().into(),
            (LIMIT - 1).into(),
        ));
    }
    if fx.events.other.load(Ordering::Relaxed) != 0 {
        return Err(fail(
            "unexpected SRQ events",
            fx.events.other.load(Ordering::Relaxed).into(),
            0,
        ));
    }
    c.disconnect()
}

/// What `srq_drain` measured: the milliseconds `ib_drain_qp` took for a QP in error and for a
/// QP in RTS.
pub(crate) struct DrainTimes {
    pub(crate) error_ms: i64,
    pub(crate) rts_ms: i64,
}

/// A QP's error leaves the SRQ's work requests queued; `ib_drain_qp` returns promptly.
pub(crate) fn srq_drain(p: &Params) -> TResult<DrainTimes> {
    let len = p.size.min(SLOT_MAX);
    let (id, cm) = resolved(p.dst)?;
    let dev = id.device().ok_or(EINVAL).at("the id has no device")?;
    let fx = Fixture::new(dev, len)?;
    for i in 0..DEPTH {
        fx.post(i)?;
    }
    let mut a = SrqConn::connect(id, cm, &fx)?;
    a.send_me(&fx, 0, len, p.seed)?;
    // The QP goes to the error state (the connection closes): the SRQ's work requests are not
    // the QP's to flush.
    a.disconnect()?;
    a.no_recv(
        QUIET_MS,
        "a QP's error flushed an SRQ work request (wr_id, status)",
    )?;
    let error_ms = a.drain()?;
    drop(a);
    // The next QP on the SRQ receives into the work requests queued before, in order.
    let (id, cm) = resolved(p.dst)?;
    let mut b = SrqConn::connect(id, cm, &fx)?;
    b.send_me(&fx, 2, len, p.seed.wrapping_add(1))?;
    b.send_me(&fx, 4, len, p.seed.wrapping_add(2))?;
    // Drained straight from RTS.
    let rts_ms = b.drain()?;
    drop(b);
    if fx.events.other.load(Ordering::Relaxed) != 0 || fx.limit_events() != 0 {
        return Err(fail(
            "unexpected SRQ events (limit, other)",
            fx.limit_events().into(),
            fx.events.other.load(Ordering::Relaxed).into(),
        ));
    }
    Ok(DrainTimes { error_ms, rts_ms })
}
