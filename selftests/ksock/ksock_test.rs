// SPDX-License-Identifier: GPL-2.0

//! ksock_test: proves `kernel::ksock` on loopback.
//!
//! The whole test runs in the module's `init`, which prints one KTAP line per check
//! (`ok N - ...` or `not ok N - ... # errno`) and the plan, and fails with `EINVAL` (so `insmod`
//! fails) if any check failed. `selftests/ksock.sh` loads it in the VM and turns the lines into
//! TAP. Everything stays on loopback, except a connect to 198.18.0.2, which the shell test routes
//! to a dummy netdev that drops it (for the timeout check).

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::SeqCst};
use kernel::{
    c_str,
    error::code::{EAGAIN, EBUSY, EINVAL, EIO},
    ksock::{
        errno,
        testing::{self, Foreign},
        ConnectStatus, Consumed, Family, IoSlice, Ipv4Addr, Ipv6Addr, ListenerEvents, LockedSock,
        PageBatch, PageSlice, RecvFlags, SendAs, SendFlags, Shutdown, SkbData, Sock, SocketAddr,
        SocketEvents, TcpListener, TcpSocket, TcpState, ZcNotify, ZcRegistration,
    },
    netns::Namespace,
    new_condvar, new_mutex,
    owned_queue::{OwnedQueue, QueueFlags},
    page::{Page, PAGE_SIZE},
    prelude::*,
    sync::{Arc, CondVar, Mutex},
    time::msecs_to_jiffies,
};

module! {
    type: KsockTest,
    name: "ksock_test",
    author: "rsiw developers",
    description: "In-kernel test of kernel::ksock (loopback TCP)",
    license: "GPL",
}

/// Bytes sent with [`TcpSocket::send`] (copying).
const COPY_BYTES: u64 = 4 << 20;
/// Bytes sent with [`TcpSocket::send_pages`] (zero copy).
const ZCOPY_BYTES: u64 = 4 << 20;
/// The stream's content repeats with this period, so that the pages sent without copying can be
/// filled once and never changed while TCP holds them.
const PERIOD: u64 = 1 << 20;
/// Pages holding one period of the stream.
const PERIOD_PAGES: usize = (PERIOD as usize) / PAGE_SIZE;
/// The receiver consumes at most this much per actor call, so pieces are often consumed partly.
const RX_UNIT: usize = 1500;
/// While the copying send runs, the receiver stops after this much per `data_ready`, leaving
/// data queued, so that the sender runs into `EAGAIN` and the test kicks the receiver.
const RX_BUDGET: u64 = 16 << 10;
/// Where a dummy netdev set up by `ksock.sh` sends packets into the void.
const BLACKHOLE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// The stream byte at `offset`.
fn pattern(offset: u64) -> u8 {
    let x = offset % PERIOD;
    // CAST: Truncation to the low byte is the point.
    (x ^ (x >> 8) ^ (x >> 16)).wrapping_mul(0x9d) as u8
}

/// Counts the release notices of zero-copy tokens.
#[derive(Default)]
struct Releases {
    count: AtomicUsize,
    cookie: AtomicU64,
}

impl ZcNotify for Releases {
    fn released(&self, cookie: u64) {
        self.cookie.store(cookie, SeqCst);
        self.count.fetch_add(1, SeqCst);
    }
}

/// Counts live handlers, to show that every installed handler is dropped in the end.
static LIVE_HANDLERS: AtomicUsize = AtomicUsize::new(0);

/// A handler counted in [`LIVE_HANDLERS`].
struct Counted;

impl Counted {
    fn new() -> Self {
        LIVE_HANDLERS.fetch_add(1, SeqCst);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        LIVE_HANDLERS.fetch_sub(1, SeqCst);
    }
}

/// Upcalls wake the test thread through this. Upcalls only notify (a wake-up is safe in softirq
/// context); they never take the mutex, so a wake-up can be missed between the test's check and
/// its sleep: the test sleeps at most a jiffy at a time.
#[pin_data]
struct Waiter {
    #[pin]
    lock: Mutex<()>,
    #[pin]
    cv: CondVar,
}

impl Waiter {
    fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                lock <- new_mutex!((), "ksock_test::Waiter::lock"),
                cv <- new_condvar!("ksock_test::Waiter::cv"),
            }),
            GFP_KERNEL,
        )
    }

    fn notify(&self) {
        self.cv.notify_all();
    }

    /// Waits until `cond` holds, for about `ms` milliseconds at most; calls `poke` before each
    /// sleep. Returns whether `cond` held.
    fn wait_until(&self, ms: u32, mut poke: impl FnMut(), mut cond: impl FnMut() -> bool) -> bool {
        let mut slept = 0u32;
        let mut guard = self.lock.lock();
        loop {
            if cond() {
                return true;
            }
            if slept >= ms {
                return false;
            }
            poke();
            // Sleeps at most one jiffy (a millisecond or more).
            let _ = self
                .cv
                .wait_interruptible_timeout(&mut guard, msecs_to_jiffies(1));
            slept += 1;
        }
    }
}

/// Listener handler: counts incoming connections.
struct Listener {
    incoming: AtomicU64,
    waiter: Arc<Waiter>,
    _c: Counted,
}

impl Listener {
    fn new(waiter: &Arc<Waiter>) -> Result<Arc<Self>> {
        let h = Listener {
            incoming: AtomicU64::new(0),
            waiter: waiter.clone(),
            _c: Counted::new(),
        };
        Ok(Arc::new(h, GFP_KERNEL)?)
    }
}

impl ListenerEvents for Listener {
    fn incoming(&self, _sk: &Sock) {
        self.incoming.fetch_add(1, SeqCst);
        self.waiter.notify();
    }
}

/// What a stream handler saw; kept apart from the handler so it can be read after the handler
/// is gone.
#[derive(Default)]
struct Stats {
    /// `data_ready` upcalls.
    data_ready: AtomicU64,
    /// Stream bytes consumed and verified.
    received: AtomicU64,
    /// 1 + the offset of the first byte that did not match the pattern (0: none).
    first_bad: AtomicU64,
    /// Pieces walked with `for_each_chunk`.
    chunks: AtomicU64,
    /// Actor calls that consumed less than offered.
    partial: AtomicU64,
    /// Reads stopped with `Consumed::Stop`.
    stops: AtomicU64,
    /// Failures of `read_sock`, `slice`, `copy_to` or `for_each_chunk`.
    errors: AtomicU64,
    /// `write_space` upcalls.
    write_space: AtomicU64,
    /// `state_change` upcalls, by state.
    established: AtomicU64,
    close_wait: AtomicU64,
    /// `error_report` upcalls.
    error_reports: AtomicU64,
}

/// Stream handler: reads and verifies the stream in `data_ready` (when `rx` is set), and counts
/// the other upcalls.
struct Stream {
    stats: Arc<Stats>,
    waiter: Arc<Waiter>,
    rx: bool,
    /// Bytes to consume per `data_ready` before stopping (0: no limit).
    budget: AtomicU64,
    /// Leave received data queued.
    hold: AtomicBool,
    _c: Counted,
}

impl Stream {
    fn new(waiter: &Arc<Waiter>, rx: bool) -> Result<(Arc<Self>, Arc<Stats>)> {
        let stats = Arc::new(Stats::default(), GFP_KERNEL)?;
        let h = Arc::new(
            Stream {
                stats: stats.clone(),
                waiter: waiter.clone(),
                rx,
                budget: AtomicU64::new(0),
                hold: AtomicBool::new(false),
                _c: Counted::new(),
            },
            GFP_KERNEL,
        )?;
        Ok((h, stats))
    }

    /// Verifies `data` as the stream bytes at `offset`: walked as pieces, and its head copied.
    fn verify(&self, data: &SkbData<'_>, offset: u64) -> Result {
        let s = &self.stats;
        let mut o = offset;
        data.for_each_chunk(|chunk| -> Result {
            s.chunks.fetch_add(1, SeqCst);
            for &b in chunk {
                if b != pattern(o) && s.first_bad.load(SeqCst) == 0 {
                    s.first_bad.store(o + 1, SeqCst);
                }
                o += 1;
            }
            Ok(())
        })?;
        let mut head = [0u8; 24];
        let n = head.len().min(data.len());
        let head = head.get_mut(..n).ok_or(EINVAL)?;
        data.copy_to(head)?;
        for (i, &b) in (0u64..).zip(head.iter()) {
            if b != pattern(offset + i) && s.first_bad.load(SeqCst) == 0 {
                s.first_bad.store(offset + i + 1, SeqCst);
            }
        }
        // A range past the end is refused.
        if data.slice(data.len(), 1).is_ok() {
            return Err(EINVAL);
        }
        Ok(())
    }
}

impl SocketEvents for Stream {
    fn data_ready(&self, sk: &LockedSock) {
        let s = &self.stats;
        s.data_ready.fetch_add(1, SeqCst);
        if !self.rx || self.hold.load(SeqCst) {
            return;
        }
        let limit = self.budget.load(SeqCst);
        let mut budget = if limit == 0 { u64::MAX } else { limit };
        let mut offset = s.received.load(SeqCst);
        let res = sk.read_sock(|data| {
            let mut take = data.len().min(RX_UNIT);
            take = take.min(usize::try_from(budget).unwrap_or(usize::MAX));
            let ok = data
                .slice(0, take)
                .and_then(|piece| self.verify(&piece, offset));
            if ok.is_err() {
                s.errors.fetch_add(1, SeqCst);
                return Consumed::Stop(0);
            }
            offset += take as u64;
            budget -= take as u64;
            if take < data.len() {
                s.partial.fetch_add(1, SeqCst);
            }
            if budget == 0 {
                s.stops.fetch_add(1, SeqCst);
                Consumed::Stop(take)
            } else {
                Consumed::Continue(take)
            }
        });
        if res.is_err() {
            s.errors.fetch_add(1, SeqCst);
        }
        s.received.store(offset, SeqCst);
        self.waiter.notify();
    }

    fn write_space(&self, _sk: &Sock) {
        self.stats.write_space.fetch_add(1, SeqCst);
        self.waiter.notify();
    }

    fn state_change(&self, _sk: &Sock, state: TcpState) {
        match state {
            TcpState::Established => self.stats.established.fetch_add(1, SeqCst),
            TcpState::CloseWait => self.stats.close_wait.fetch_add(1, SeqCst),
            _ => 0,
        };
        self.waiter.notify();
    }

    fn error_report(&self, _sk: &Sock, _err: Option<Error>) {
        self.stats.error_reports.fetch_add(1, SeqCst);
        self.waiter.notify();
    }
}

/// KTAP output.
struct Ktap {
    n: u32,
    failed: u32,
}

impl Ktap {
    fn check(&mut self, desc: &str, res: Result) -> bool {
        self.n += 1;
        match res {
            Ok(()) => {
                pr_info!("ok {} - {}\n", self.n, desc);
                true
            }
            Err(e) => {
                self.failed += 1;
                pr_info!("not ok {} - {} # error {}\n", self.n, desc, e.to_errno());
                false
            }
        }
    }

    /// A check that `cond` holds; `what` explains a failure.
    fn expect(&mut self, desc: &str, cond: bool, what: core::fmt::Arguments<'_>) -> bool {
        if !cond {
            pr_info!("# {}: {}\n", desc, what);
        }
        self.check(desc, if cond { Ok(()) } else { Err(EIO) })
    }
}

/// Fails with `EIO` unless `cond` holds.
fn ensure(cond: bool) -> Result {
    if cond {
        Ok(())
    } else {
        Err(EIO)
    }
}

/// Runs `f`: a scope for `?`.
fn attempt(f: impl FnOnce() -> Result) -> Result {
    f()
}

fn listen(addr: SocketAddr, ifindex: Option<i32>) -> Result<TcpListener> {
    let s = TcpSocket::new(Namespace::init(), Family::of(&addr))?;
    s.set_reuseaddr();
    if let SocketAddr::V6(_) = addr {
        s.set_v6only()?;
    }
    if let Some(i) = ifindex {
        s.bind_to_ifindex(i)?;
    }
    s.bind(&addr)?;
    s.listen(16)
}

/// Waits for the listener's next connection and accepts it.
fn accept(w: &Waiter, l: &TcpListener, h: &Listener, seen: u64) -> Result<TcpSocket> {
    ensure(w.wait_until(5000, || {}, || h.incoming.load(SeqCst) > seen))?;
    l.accept()?.ok_or(EAGAIN)
}

/// The connected pair and the state of the transfer tests.
struct Pair {
    client: TcpSocket,
    server: TcpSocket,
    rx: Arc<Stats>,
    tx: Arc<Stats>,
    eagain: u64,
}

impl Pair {
    /// Waits after `EAGAIN` until `write_space` comes, kicking the receiver (which may have
    /// stopped reading) meanwhile.
    fn wait_writable(&mut self, w: &Waiter) {
        self.eagain += 1;
        let before = self.tx.write_space.load(SeqCst);
        let server = &self.server;
        let tx = &self.tx;
        w.wait_until(
            2000,
            || server.kick_data_ready(),
            || tx.write_space.load(SeqCst) > before,
        );
    }

    /// Sends `COPY_BYTES` with `send`, as three slices per call (header, body, trailer).
    fn send_copy(&mut self, w: &Waiter) -> Result {
        let mut buf = KVec::from_elem(0u8, 64 << 10, GFP_KERNEL)?;
        let mut offset = 0u64;
        while offset < COPY_BYTES {
            // Vary the size: 20 bytes to 64 KiB.
            let want = (COPY_BYTES - offset).min(20 + (offset * 7919) % ((64 << 10) - 20));
            let len = usize::try_from(want)?;
            let data = buf.get_mut(..len).ok_or(EINVAL)?;
            for (i, b) in (0u64..).zip(data.iter_mut()) {
                *b = pattern(offset + i);
            }
            let data = buf.get(..len).ok_or(EINVAL)?;
            let (hdr, rest) = data.split_at(16.min(len));
            let (body, trailer) = rest.split_at(rest.len().saturating_sub(4));
            let slices = [IoSlice::new(hdr), IoSlice::new(body), IoSlice::new(trailer)];
            match self
                .client
                .send(&slices, SendFlags::DONTWAIT | SendFlags::EOR)
            {
                Ok(n) => offset += n as u64,
                Err(e) if e == EAGAIN => self.wait_writable(w),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends `ZCOPY_BYTES` with `send_pages`, from pages filled once with one period of the
    /// stream, in pieces of varying size and offset.
    fn send_zcopy(&mut self, w: &Waiter, start: u64) -> Result {
        let mut pages = KVec::with_capacity(PERIOD_PAGES, GFP_KERNEL)?;
        let mut buf = KVec::from_elem(0u8, PAGE_SIZE, GFP_KERNEL)?;
        for p in 0..PERIOD_PAGES {
            let page = Page::alloc_page(GFP_KERNEL)?;
            for (i, b) in (0u64..).zip(buf.iter_mut()) {
                *b = pattern((p * PAGE_SIZE) as u64 + i);
            }
            // SAFETY: The page was just allocated and nobody else can see it yet; `buf` holds
            // `PAGE_SIZE` bytes.
            unsafe { page.write_raw(buf.as_ptr(), 0, PAGE_SIZE)? };
            pages.push(page, GFP_KERNEL)?;
        }
        let end = start + ZCOPY_BYTES;
        let mut offset = start;
        let mut round = 0u64;
        while offset < end {
            let mut slices = KVec::with_capacity(16, GFP_KERNEL)?;
            let mut o = offset;
            while slices.len() < 16 && o < end {
                let in_period = usize::try_from(o % PERIOD)?;
                let (idx, off) = (in_period / PAGE_SIZE, in_period % PAGE_SIZE);
                round += 1;
                // 1 to PAGE_SIZE bytes, never across the page's end.
                let want = 1 + usize::try_from(round * 2654435761 % PAGE_SIZE as u64)?;
                let len = want.min(PAGE_SIZE - off).min(usize::try_from(end - o)?);
                let page = pages.get(idx).ok_or(EINVAL)?;
                slices.push(PageSlice::new(page, off, len)?, GFP_KERNEL)?;
                o += len as u64;
            }
            match self.client.send_pages(&slices, SendFlags::DONTWAIT) {
                Ok(n) => offset += n as u64,
                Err(e) if e == EAGAIN => self.wait_writable(w),
                Err(e) => return Err(e),
            }
        }
        // The pages are dropped here; TCP keeps its own references until it is done with them.
        Ok(())
    }

    /// Waits until the receiver has consumed `total` bytes, kicking it.
    fn wait_received(&self, w: &Waiter, total: u64) -> Result {
        let server = &self.server;
        let rx = &self.rx;
        ensure(w.wait_until(
            20000,
            || server.kick_data_ready(),
            || rx.received.load(SeqCst) >= total,
        ))
    }
}

/// Checks that the receiver consumed and verified exactly `total` bytes.
fn check_received(t: &mut Ktap, desc: &str, rx: &Stats, total: u64) {
    let (received, bad) = (rx.received.load(SeqCst), rx.first_bad.load(SeqCst));
    let (errors, chunks) = (rx.errors.load(SeqCst), rx.chunks.load(SeqCst));
    t.expect(
        desc,
        received == total && bad == 0 && errors == 0 && chunks > 0,
        format_args!("received {received}, first bad {bad}, errors {errors}, chunks {chunks}"),
    );
}

fn test_ipv4(t: &mut Ktap, w: &Arc<Waiter>) -> Result {
    let lh = Listener::new(w)?;
    let any = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
    let mut laddr = any;
    let listener = listen(any, None).and_then(|l| {
        laddr = l.local_addr()?;
        ensure(laddr.port() != 0 && laddr.ip() == any.ip())?;
        l.set_callbacks(lh.clone())?;
        Ok(l)
    });
    let ok = t.check(
        "IPv4 listener on 127.0.0.1, ephemeral port, with callbacks",
        listener.as_ref().map(|_| ()).map_err(|e| *e),
    );
    let listener = match (ok, listener) {
        (true, Ok(l)) => l,
        _ => return Err(EIO),
    };

    let client = TcpSocket::new(Namespace::init(), Family::Inet)?;
    client.set_nodelay();
    if !t.check(
        "blocking connect to the listener",
        client.connect(&laddr, Some(5000)),
    ) {
        return Err(EIO);
    }
    let server = accept(w, &listener, &lh, 0);
    if !t.check(
        "incoming upcall, then accept",
        server.as_ref().map(|_| ()).map_err(|e| *e),
    ) {
        return Err(EIO);
    }
    let server = server?;
    t.check(
        "second accept finds nothing (EAGAIN is None)",
        listener.accept().and_then(|s| ensure(s.is_none())),
    );
    t.check(
        "addresses, states and MSS of both ends agree",
        attempt(|| {
            ensure(client.peer_addr()? == laddr)?;
            ensure(server.local_addr()? == laddr)?;
            ensure(server.peer_addr()? == client.local_addr()?)?;
            ensure(client.state() == TcpState::Established)?;
            ensure(server.state() == TcpState::Established)?;
            ensure(client.mss() > 0 && server.mss() > 0)
        }),
    );

    let (txh, tx) = Stream::new(w, false)?;
    let (rxh, rx) = Stream::new(w, true)?;
    rxh.budget.store(RX_BUDGET, SeqCst);
    t.check(
        "callbacks installed on both ends",
        client
            .set_callbacks(txh.clone())
            .and_then(|()| server.set_callbacks(rxh.clone())),
    );
    drop(txh);
    let mut pair = Pair {
        client,
        server,
        rx,
        tx,
        eagain: 0,
    };

    let res = pair
        .send_copy(w)
        .and_then(|()| pair.wait_received(w, COPY_BYTES));
    let rx = pair.rx.clone();
    t.check(
        "copying send: 4 MiB in 3-slice messages, received by read_sock",
        res,
    );
    check_received(
        t,
        "copying send: every byte verified, walked as slices and copied",
        &rx,
        COPY_BYTES,
    );
    t.expect(
        "receiver stopped and resumed; actor consumed partly",
        rx.stops.load(SeqCst) > 0 && rx.partial.load(SeqCst) > 0,
        format_args!(
            "stops {}, partial {}",
            rx.stops.load(SeqCst),
            rx.partial.load(SeqCst)
        ),
    );
    t.expect(
        "sender got EAGAIN and write_space upcalls",
        pair.eagain > 0 && pair.tx.write_space.load(SeqCst) > 0,
        format_args!(
            "EAGAIN {}, write_space {}",
            pair.eagain,
            pair.tx.write_space.load(SeqCst)
        ),
    );

    rxh.budget.store(0, SeqCst);
    let total = COPY_BYTES + ZCOPY_BYTES;
    let res = pair
        .send_zcopy(w, COPY_BYTES)
        .and_then(|()| pair.wait_received(w, total));
    t.check(
        "zero-copy send: 4 MiB of page pieces, received by read_sock",
        res,
    );
    check_received(t, "zero-copy send: every byte verified", &rx, total);

    // Zero copy shares the pages: bytes changed after `send_pages` (while the receiver leaves
    // them queued) arrive changed; bytes changed after a copying `send` do not.
    rxh.hold.store(true, SeqCst);
    let res = attempt(|| {
        let page = Page::alloc_page(GFP_KERNEL)?;
        // On the heap: a page-sized array would take a quarter of the kernel stack.
        let mut buf = KVec::from_elem(b'A', PAGE_SIZE, GFP_KERNEL)?;
        // SAFETY: The page was just allocated; nobody else sees it.
        unsafe { page.write_raw(buf.as_ptr(), 0, PAGE_SIZE)? };
        let piece = [PageSlice::new(&page, 0, PAGE_SIZE)?];
        ensure(pair.client.send_pages(&piece, SendFlags::DONTWAIT)? == PAGE_SIZE)?;
        let (copied, _) = buf.split_at_mut(512);
        copied.fill(b'C');
        ensure(
            pair.client
                .send(&[IoSlice::new(copied)], SendFlags::DONTWAIT)?
                == 512,
        )?;
        copied.fill(b'D');
        buf.fill(b'B');
        // SAFETY: TCP's socket buffers are the only other users of the page. The receiver does
        // not read its copy while `hold` is set, and the sender's is freed when acknowledged,
        // which on loopback happens before `send_pages` returns (a retransmission could only
        // come after the 200 ms minimum RTO).
        unsafe { page.write_raw(buf.as_ptr(), 0, PAGE_SIZE)? };
        pair.server.clear_callbacks();
        let mut got = KVec::from_elem(0u8, PAGE_SIZE + 512, GFP_KERNEL)?;
        ensure(pair.server.recv(&mut got, RecvFlags::WAITALL)? == got.len())?;
        let (spliced, copied) = got.split_at(PAGE_SIZE);
        if !spliced.iter().all(|&b| b == b'B') || !copied.iter().all(|&b| b == b'C') {
            pr_info!(
                "# page arrived as {:?}..., copied bytes as {:?}...\n",
                spliced.get(..8),
                copied.get(..8)
            );
            return Err(EIO);
        }
        Ok(())
    });
    t.check(
        "send_pages shares the page (later changes arrive), send copies (they do not)",
        res,
    );

    // A batch with a token: copied bytes and 6000 bytes of vmalloc memory by reference. The
    // token is released once TCP let go of the memory (on loopback, when the receiver copied
    // it and the sender's skbs were acknowledged), and only then: changing the memory after the
    // release must change nothing that arrives, although the receiver has not read it yet.
    let res = attempt(|| {
        let releases = Arc::new(Releases::default(), GFP_KERNEL)?;
        let reg = ZcRegistration::new(releases.clone(), GFP_KERNEL)?;
        let mut mem = VVec::from_elem(b'E', 3 * PAGE_SIZE, GFP_KERNEL)?;
        let mut batch = PageBatch::new(16, GFP_KERNEL)?;
        batch.push_copy(&[b'H'; 100], GFP_KERNEL)?;
        // SAFETY: `mem` is allocated for the call.
        let by_ref = unsafe { batch.push_kernel_memory(mem.as_ptr() as usize + 100, 6000)? };
        ensure(by_ref && batch.len() == 6100)?;
        // Slab memory is never taken by reference.
        let small = KBox::new([0u8; 64], GFP_KERNEL)?;
        // SAFETY: `small` is allocated for the call.
        ensure(!unsafe { batch.push_kernel_memory(small.as_ptr() as usize, 64)? })?;
        let token = reg.token(7, GFP_KERNEL)?;
        pair.client
            .send_batch(&mut batch, SendAs::ZeroCopy(&token))?;
        ensure(batch.is_empty())?;
        ensure(releases.count.load(SeqCst) == 0)?;
        drop(token);
        let released = w.wait_until(5000, || {}, || releases.count.load(SeqCst) > 0);
        if !released || releases.cookie.load(SeqCst) != 7 {
            pr_info!("# released {}\n", releases.count.load(SeqCst));
            return Err(EIO);
        }
        mem.iter_mut().for_each(|b| *b = b'F');
        let mut got = KVec::from_elem(0u8, 6100, GFP_KERNEL)?;
        ensure(pair.server.recv(&mut got, RecvFlags::WAITALL)? == got.len())?;
        let (head, body) = got.split_at(100);
        if !head.iter().all(|&b| b == b'H') || !body.iter().all(|&b| b == b'E') {
            pr_info!(
                "# arrived as {:?}... {:?}...\n",
                head.get(..8),
                body.get(..8)
            );
            return Err(EIO);
        }
        // After the registration is gone, a release finds no handler.
        let mut batch = PageBatch::new(4, GFP_KERNEL)?;
        // SAFETY: `mem` is allocated for the call.
        ensure(unsafe { batch.push_kernel_memory(mem.as_ptr() as usize, PAGE_SIZE)? })?;
        let token = reg.token(8, GFP_KERNEL)?;
        drop(reg);
        pair.client
            .send_batch(&mut batch, SendAs::ZeroCopy(&token))?;
        drop(token);
        let mut got = KVec::from_elem(0u8, PAGE_SIZE, GFP_KERNEL)?;
        ensure(pair.server.recv(&mut got, RecvFlags::WAITALL)? == got.len())?;
        ensure(got.iter().all(|&b| b == b'F'))?;
        w.wait_until(200, || {}, || false);
        ensure(releases.count.load(SeqCst) == 1)
    });
    t.check(
        "send_batch with a token: released once, after which changes do not arrive; none after the registration is dropped",
        res,
    );

    // A batch sent as copies: TCP copied the memory before `send_batch` returned, so changing it
    // right after changes nothing that arrives, although the receiver has not read it yet.
    let res = attempt(|| {
        let mut mem = VVec::from_elem(b'C', 3 * PAGE_SIZE, GFP_KERNEL)?;
        let mut batch = PageBatch::new(16, GFP_KERNEL)?;
        batch.push_copy(&[b'H'; 100], GFP_KERNEL)?;
        // SAFETY: `mem` is allocated for the call.
        ensure(unsafe { batch.push_kernel_memory(mem.as_ptr() as usize + 10, 9000)? })?;
        pair.client.send_batch(&mut batch, SendAs::Copy)?;
        ensure(batch.is_empty())?;
        mem.iter_mut().for_each(|b| *b = b'D');
        let mut got = KVec::from_elem(0u8, 9100, GFP_KERNEL)?;
        ensure(pair.server.recv(&mut got, RecvFlags::WAITALL)? == got.len())?;
        let (head, body) = got.split_at(100);
        if !head.iter().all(|&b| b == b'H') || !body.iter().all(|&b| b == b'C') {
            pr_info!(
                "# arrived as {:?}... {:?}...\n",
                head.get(..8),
                body.get(..8)
            );
            return Err(EIO);
        }
        Ok(())
    });
    t.check(
        "send_batch as copies: changes right after the call do not arrive",
        res,
    );

    // Remove the receiver's handler: it is dropped, and no upcall reaches it any more.
    pair.server.clear_callbacks();
    drop(rxh);
    let live = LIVE_HANDLERS.load(SeqCst);
    let calls = rx.data_ready.load(SeqCst);
    t.expect(
        "clear_callbacks drops the handler",
        live == 2,
        format_args!("{} live handlers, expected 2 (listener, client)", live),
    );

    // The MPA handshake style: plain sends and non-blocking receives.
    let req = [0x4du8; 100];
    let res = attempt(|| {
        let n = pair
            .client
            .send(&[IoSlice::new(&req)], SendFlags::empty())?;
        ensure(n == req.len())?;
        let mut peek = [0u8; 10];
        let mut got = [0u8; 100];
        let mut have = 0;
        let server = &pair.server;
        let mut err = Ok(());
        let done = w.wait_until(
            5000,
            || {},
            || {
                if have == 0 {
                    match server.recv(&mut peek, RecvFlags::DONTWAIT | RecvFlags::PEEK) {
                        Ok(n)
                            if n > 0
                                && peek.get(..n).is_some_and(|p| p.iter().all(|&b| b == 0x4d)) => {}
                        Ok(_) => return false,
                        Err(e) if e == EAGAIN => return false,
                        Err(e) => {
                            err = Err(e);
                            return true;
                        }
                    }
                }
                let Some(rest) = got.get_mut(have..) else {
                    return true;
                };
                match server.recv(rest, RecvFlags::DONTWAIT) {
                    Ok(n) => have += n,
                    Err(e) if e == EAGAIN => {}
                    Err(e) => {
                        err = Err(e);
                        return true;
                    }
                }
                have >= got.len()
            },
        );
        err?;
        ensure(done && got == req)
    });
    t.check(
        "send, then recv with PEEK and DONTWAIT, after clear_callbacks",
        res,
    );
    t.expect(
        "no upcall reached the removed handler",
        rx.data_ready.load(SeqCst) == calls,
        format_args!(
            "{} data_ready calls after removal",
            rx.data_ready.load(SeqCst) - calls
        ),
    );

    // A half-close: the peer's handler sees CLOSE_WAIT, its recv returns 0.
    let (sh, st) = Stream::new(w, false)?;
    let res = attempt(|| {
        pair.server.set_callbacks(sh.clone())?;
        pair.client.shutdown(Shutdown::Write)?;
        ensure(w.wait_until(5000, || {}, || st.close_wait.load(SeqCst) > 0))?;
        ensure(pair.server.state() == TcpState::CloseWait)?;
        let mut b = [0u8; 8];
        ensure(pair.server.recv(&mut b, RecvFlags::DONTWAIT)? == 0)
    });
    drop(sh);
    t.check(
        "shutdown(Write): peer gets state_change(CloseWait) and EOF",
        res,
    );

    // A reset: the client goes away; data the server still sends is answered with a reset,
    // which TCP reports as EPIPE in CLOSE_WAIT (`tcp_reset`).
    let Pair { client, server, .. } = pair;
    let res = attempt(|| {
        drop(client);
        let b = [0u8; 64];
        let _ = server.send(&[IoSlice::new(&b)], SendFlags::DONTWAIT);
        ensure(w.wait_until(5000, || {}, || st.error_reports.load(SeqCst) > 0))?;
        ensure(server.take_error() == Some(errno::epipe()))?;
        ensure(server.take_error().is_none())
    });
    t.check(
        "reset by the peer: error_report upcall, take_error is EPIPE once",
        res,
    );

    listener.clear_callbacks();
    drop(server);
    drop(listener);
    drop(lh);
    Ok(())
}

fn test_ipv6(t: &mut Ktap, w: &Arc<Waiter>) -> Result {
    let lh = Listener::new(w)?;
    let (ch, cs) = Stream::new(w, false)?;
    let res = attempt(|| {
        let listener = listen(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), 0), None)?;
        listener.set_callbacks(lh.clone())?;
        let laddr = listener.local_addr()?;
        ensure(laddr.is_ipv6() && laddr.port() != 0)?;
        let client = TcpSocket::new(Namespace::init(), Family::Inet6)?;
        client.set_callbacks(ch.clone())?;
        match client.connect_nonblocking(&laddr)? {
            ConnectStatus::Connected => {}
            ConnectStatus::InProgress => {
                ensure(w.wait_until(5000, || {}, || cs.established.load(SeqCst) > 0))?
            }
        }
        let server = accept(w, &listener, &lh, 0)?;
        ensure(server.peer_addr()? == client.local_addr()?)?;
        let msg = KVec::from_elem(0x36u8, 1000, GFP_KERNEL)?;
        ensure(client.send(&[IoSlice::new(&msg)], SendFlags::empty())? == msg.len())?;
        let mut got = KVec::from_elem(0u8, 1000, GFP_KERNEL)?;
        ensure(server.recv(&mut got, RecvFlags::WAITALL)? == got.len() && got == msg)
    });
    drop(ch);
    drop(lh);
    t.check(
        "IPv6 ::1: non-blocking connect, state_change(Established), accept, send/recv",
        res,
    );
    Ok(())
}

fn test_errors(t: &mut Ktap, w: &Arc<Waiter>) -> Result {
    // A port that is bound but not listening refuses connections.
    let res = attempt(|| {
        let bound = TcpSocket::new(Namespace::init(), Family::Inet)?;
        bound.bind(&SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0))?;
        let addr = bound.local_addr()?;
        let c = TcpSocket::new(Namespace::init(), Family::Inet)?;
        ensure(c.connect(&addr, Some(5000)) == Err(errno::econnrefused()))
    });
    t.check("connect to a port nobody listens on: ECONNREFUSED", res);

    // A wildcard listener bound to the loopback device (ifindex 1) accepts on 127.0.0.1; one
    // bound to a device that does not exist does not.
    let lh = Listener::new(w)?;
    let res = attempt(|| {
        let wildcard = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0);
        let l = listen(wildcard, Some(1))?;
        l.set_callbacks(lh.clone())?;
        let port = l.local_addr()?.port();
        let c = TcpSocket::new(Namespace::init(), Family::Inet)?;
        c.connect(
            &SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
            Some(5000),
        )?;
        let _s = accept(w, &l, &lh, 0)?;
        let other = listen(wildcard, Some(1_000_000))?;
        let port = other.local_addr()?.port();
        let c = TcpSocket::new(Namespace::init(), Family::Inet)?;
        let to = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
        ensure(c.connect(&to, Some(5000)) == Err(errno::econnrefused()))
    });
    drop(lh);
    t.check(
        "bind_to_ifindex: listener on lo accepts, on another device refuses",
        res,
    );

    let res = attempt(|| {
        let c = TcpSocket::new(Namespace::init(), Family::Inet)?;
        let r = c.connect(&SocketAddr::new(BLACKHOLE.into(), 9), Some(300));
        if r != Err(errno::etimedout()) {
            pr_info!(
                "# connect to {}: {:?}\n",
                BLACKHOLE,
                r.map_err(|e| e.to_errno())
            );
            return Err(EIO);
        }
        ensure(c.state() == TcpState::SynSent)
    });
    t.check("blocking connect with a 300 ms timeout: ETIMEDOUT", res);

    let res = attempt(|| {
        let s = TcpSocket::new(Namespace::init(), Family::Inet)?;
        ensure(s.set_v6only() == Err(EINVAL))?;
        let mut b = [0u8; 4];
        ensure(s.recv(&mut b, RecvFlags::DONTWAIT).is_err())?;
        ensure(s.peer_addr() == Err(errno::enotconn()))
    });
    t.check(
        "misuse is refused: v6only on IPv4, recv and peer_addr unconnected",
        res,
    );
    Ok(())
}

/// What a reader that blocked in `recv` in a work item got.
struct BlockedRead {
    done: AtomicBool,
    /// The bytes received, or a negative errno.
    result: AtomicI64,
    /// Whether every byte received was [`FOREIGN_FILL`].
    intact: AtomicBool,
    waiter: Arc<Waiter>,
}

/// The bytes sent to a socket someone else claimed.
const FOREIGN_FILL: u8 = 0x5a;

/// Receives `len` bytes (`WAITALL`) on `sock` in a work item on `wq`, and runs `act` once the
/// reader has had time to go to sleep: only an upcall can wake it. Returns the number of bytes
/// received (0 at the end of the stream).
fn recv_woken(
    w: &Arc<Waiter>,
    wq: &OwnedQueue,
    sock: &Arc<TcpSocket>,
    len: usize,
    act: impl FnOnce() -> Result,
) -> Result<usize> {
    let read = Arc::new(
        BlockedRead {
            done: AtomicBool::new(false),
            result: AtomicI64::new(0),
            intact: AtomicBool::new(false),
            waiter: w.clone(),
        },
        GFP_KERNEL,
    )?;
    let (r, s) = (read.clone(), sock.clone());
    wq.queue()
        .try_spawn(GFP_KERNEL, move || {
            let res = KVec::from_elem(0u8, len, GFP_KERNEL)
                .map_err(Error::from)
                .and_then(|mut buf| {
                    let n = s.recv(&mut buf, RecvFlags::WAITALL)?;
                    let intact = buf
                        .get(..n)
                        .is_some_and(|b| b.iter().all(|&x| x == FOREIGN_FILL));
                    r.intact.store(intact, SeqCst);
                    Ok(i64::try_from(n)?)
                });
            r.result
                .store(res.unwrap_or_else(|e| e.to_errno().into()), SeqCst);
            r.done.store(true, SeqCst);
            r.waiter.notify();
        })
        .map_err(|_| ENOMEM)?;
    w.wait_until(100, || {}, || false);
    let acted = act();
    let woken = w.wait_until(5000, || {}, || read.done.load(SeqCst));
    if !woken {
        pr_info!("# the reader was not woken; shutting the socket down\n");
        let _ = sock.shutdown(Shutdown::Both);
        // The work item must end before the module can go.
        while !w.wait_until(5000, || {}, || read.done.load(SeqCst)) {}
    }
    acted?;
    ensure(woken)?;
    let n = read.result.load(SeqCst);
    if n < 0 {
        return Err(Error::from_errno(
            i32::try_from(n).unwrap_or(EIO.to_errno()),
        ));
    }
    ensure(read.intact.load(SeqCst))?;
    Ok(usize::try_from(n)?)
}

/// Someone else's `sk_user_data` (a BPF sockmap's, imitated by `ksock::testing`) on our
/// sockets: `set_callbacks` refuses them and nothing touches the data, and our upcalls, which
/// such a socket can carry (copied from a listener with a handler), behave as TCP's own.
fn test_foreign(t: &mut Ktap, w: &Arc<Waiter>) -> Result {
    let wq = OwnedQueue::new(c_str!("ksock_test"), QueueFlags::UNBOUND)?;
    let lh = Listener::new(w)?;
    let listener = listen(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0), None)?;
    // A sockops program can claim a listener between `listen` and `set_callbacks`.
    let res = attempt(|| {
        testing::claim(listener.sock(), Foreign::Psock, false)?;
        ensure(listener.set_callbacks(lh.clone()) == Err(EBUSY))?;
        listener.clear_callbacks();
        ensure(testing::is_claimed(listener.sock(), Foreign::Psock))?;
        testing::release(listener.sock())?;
        listener.set_callbacks(lh.clone())
    });
    t.check(
        "claimed listener: set_callbacks is EBUSY, the claim stays; accepted once released",
        res,
    );

    let laddr = listener.local_addr()?;
    let client = TcpSocket::new(Namespace::init(), Family::Inet)?;
    client.connect(&laddr, Some(5000))?;
    let server = Arc::new(accept(w, &listener, &lh, 0)?, GFP_KERNEL)?;

    let res = attempt(|| {
        for kind in [Foreign::Psock, Foreign::ReuseportArray, Foreign::Plain] {
            testing::claim(client.sock(), kind, false)?;
            let (h, _) = Stream::new(w, false)?;
            let refused = client.set_callbacks(h) == Err(EBUSY);
            client.clear_callbacks();
            client.kick_data_ready();
            let queued = client.with_locked(|sk| sk.queued_len());
            if !refused || queued != 0 || !testing::is_claimed(client.sock(), kind) {
                pr_info!("# {:?}: refused {}, queued {}\n", kind, refused, queued);
                return Err(EIO);
            }
            testing::release(client.sock())?;
        }
        Ok(())
    });
    t.check(
        "psock, reuseport and untagged sk_user_data: set_callbacks EBUSY; clear_callbacks, kick_data_ready, with_locked leave it",
        res,
    );

    // The accepted socket as TCP made it from a listener with a handler, claimed before
    // `accept`: our upcalls, foreign data.
    let msg = [FOREIGN_FILL; 100];
    let send = || {
        let n = client.send(&[IoSlice::new(&msg)], SendFlags::empty())?;
        ensure(n == msg.len())
    };
    let res = attempt(|| {
        testing::claim(server.sock(), Foreign::Psock, true)?;
        let (h, _) = Stream::new(w, false)?;
        ensure(server.set_callbacks(h) == Err(EBUSY))?;
        ensure(recv_woken(w, &wq, &server, msg.len(), send)? == msg.len())?;
        ensure(testing::is_claimed(server.sock(), Foreign::Psock))
    });
    t.check(
        "claimed socket with our upcalls: data_ready wakes a blocked reader",
        res,
    );

    // Released, the socket keeps our upcalls without a hook; a handler installed now finds
    // them as its originals and must not chain to itself.
    let (sh, st) = Stream::new(w, false)?;
    let res = attempt(|| {
        testing::release(server.sock())?;
        server.set_callbacks(sh.clone())?;
        ensure(recv_woken(w, &wq, &server, msg.len(), send)? == msg.len())?;
        ensure(st.data_ready.load(SeqCst) > 0)?;
        server.clear_callbacks();
        // A claim made while a handler is installed is refused, as a sockmap's is.
        server.set_callbacks(sh.clone())?;
        ensure(testing::claim(server.sock(), Foreign::Psock, false) == Err(EBUSY))?;
        server.clear_callbacks();
        Ok(())
    });
    drop(sh);
    t.check(
        "released: a handler installed over our hookless upcalls gets data_ready and the reader still wakes",
        res,
    );

    let res = attempt(|| {
        testing::claim(server.sock(), Foreign::Plain, true)?;
        let eof = recv_woken(w, &wq, &server, 1, || client.shutdown(Shutdown::Write))?;
        ensure(eof == 0 && server.state() == TcpState::CloseWait)?;
        // The client is gone; what the server sends now is answered with a reset.
        drop(client);
        let b = [0u8; 64];
        let _ = server.send(&[IoSlice::new(&b)], SendFlags::DONTWAIT);
        ensure(w.wait_until(5000, || {}, || server.sock().error().is_some()))?;
        ensure(server.take_error() == Some(errno::epipe()))?;
        ensure(testing::is_claimed(server.sock(), Foreign::Plain))?;
        testing::release(server.sock())
    });
    t.check(
        "claimed socket with our upcalls: the peer's FIN wakes a blocked reader (EOF), a reset sets the error",
        res,
    );

    listener.clear_callbacks();
    drop(server);
    drop(listener);
    drop(lh);
    drop(wq);
    Ok(())
}

struct KsockTest;

impl kernel::Module for KsockTest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_info!("KTAP version 1\n");
        let mut t = Ktap { n: 0, failed: 0 };
        let w = Waiter::new()?;
        for (name, test) in [
            ("IPv4", test_ipv4 as fn(&mut Ktap, &Arc<Waiter>) -> Result),
            ("IPv6", test_ipv6),
            ("errors", test_errors),
            ("foreign sk_user_data", test_foreign),
        ] {
            if let Err(e) = test(&mut t, &w) {
                t.check(name, Err(e));
            }
        }
        let live = LIVE_HANDLERS.load(SeqCst);
        t.expect(
            "every handler was dropped",
            live == 0,
            format_args!("{} handlers still alive", live),
        );
        pr_info!("1..{}\n", t.n);
        if t.failed > 0 {
            pr_info!("# {} of {} checks failed\n", t.failed, t.n);
            return Err(EINVAL);
        }
        Ok(KsockTest)
    }
}
