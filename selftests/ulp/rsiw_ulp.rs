// SPDX-License-Identifier: GPL-2.0

//! rsiw_ulp: a kernel test ULP for RDMA providers (rsiw, and the C siw as the reference).
//!
//! It uses only the RDMA CM and kernel verbs, through `kernel::rdma::consumer`, as kernel ULPs
//! (NVMe-oF, NFS/RDMA) do, and checks every byte it moves. It is driven through debugfs:
//!
//! ```text
//! echo "server addr=198.18.0.1 port=20886" > /sys/kernel/debug/rsiw_ulp/ctl
//! echo "server addr=198.18.0.1 port=20887 srq=1" > ctl   # connections share an SRQ
//! echo "server addr=fd00:5253:4957::11 port=20896" > ctl  # addresses are IPv4 or IPv6
//! echo "client addr=198.18.0.1 port=20886 test=all" > /sys/kernel/debug/rsiw_ulp/ctl
//! echo "client addr=198.18.0.1 port=20886 test=write size=65537 sge=6 qps=64 signaled=0" > ctl
//! echo "client addr=198.18.0.1 port=20886 test=send size=65537 sge=max" > ctl  # device's limit
//! echo "caps addr=198.18.0.1" > ctl        # logs the device's limits ("caps ..." line)
//! echo "bench addr=198.18.0.1 port=20886 op=write size=65536 secs=5" > ctl
//! echo "stop" > ctl; echo "clear" > ctl
//! echo "timeouts factor=3" > ctl          # each step may take 30 s, not 10 (slow kernels)
//! cat /sys/kernel/debug/rsiw_ulp/result    # "ok N - ..." / "not ok N - ... # why", bench lines
//! cat /sys/kernel/debug/rsiw_ulp/status    # servers and their counters (see server.rs)
//! ```
//!
//! A client command runs in the writing process and returns when its tests are done; the write
//! fails with `EIO` if any failed. Servers and clients resolve, listen and connect in the network
//! namespace of the writing process (`nsenter --net=/run/netns/NAME sh -c 'echo ... > ctl'`).
//! See Documentation/rsiw/testing.rst.

#![deny(unsafe_code)]

mod client;
mod proto;
mod region;
mod server;
mod srq;

use client::{BenchOp, Conn, ConnOpts, Fail, OverOp, Params, SgeArg, TResult, SGE_MAX};
use core::{
    fmt::Write,
    net::{IpAddr, SocketAddr},
};
use kernel::{
    c_str,
    debugfs::{Dir, FileHandler},
    new_mutex,
    prelude::*,
    rdma::consumer::{
        qp::SendFlags,
        workqueue::{OwnedQueue, QueueFlags},
    },
    str::CStr,
    sync::{Arc, Mutex},
};
use server::Server;

module! {
    type: RsiwUlp,
    name: "rsiw_ulp",
    author: "rsiw developers",
    description: "Test ULP for RDMA providers: rdma_cm and kernel verbs with data verification",
    license: "GPL",
}

/// How the ULP names itself to the RDMA core (`rdma resource show`).
pub(crate) const OWNER: &CStr = c_str!("rsiw_ulp");

/// The largest data region a request may ask for.
pub(crate) const MAX_SIZE: usize = 16 << 20;

/// The default sizes of the functional tests.
const SIZES: [usize; 6] = [0, 1, 4095, 4096, 65537, 4 << 20];

/// The module: its debugfs directory and state.
struct RsiwUlp {
    dir: Option<Dir>,
    ulp: Arc<Ulp>,
}

/// The ULP's state.
#[pin_data]
struct Ulp {
    queue: Arc<OwnedQueue>,
    /// Running servers.
    #[pin]
    servers: Mutex<KVec<Server>>,
    /// The result log and the number of the last test.
    #[pin]
    log: Mutex<(KVec<u8>, u64)>,
}

/// A `fmt::Write` into a byte vector.
struct Text<'a>(&'a mut KVec<u8>);

impl Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| core::fmt::Error)
    }
}

/// The `ctl` file.
struct Ctl(Arc<Ulp>);
/// The `result` file.
struct ResultFile(Arc<Ulp>);
/// The `status` file.
struct StatusFile(Arc<Ulp>);

impl kernel::Module for RsiwUlp {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let queue = Arc::new(
            OwnedQueue::new(c_str!("rsiw_ulp"), QueueFlags::PER_CPU)?,
            GFP_KERNEL,
        )?;
        let ulp = Arc::pin_init(
            pin_init!(Ulp {
                queue,
                servers <- new_mutex!(KVec::new(), "Ulp::servers"),
                log <- new_mutex!((KVec::new(), 0), "Ulp::log"),
            }),
            GFP_KERNEL,
        )?;
        let mut dir = Dir::new(c_str!("rsiw_ulp"), module)?;
        dir.create_file(
            c_str!("ctl"),
            0o200,
            Arc::new(Ctl(ulp.clone()), GFP_KERNEL)?,
        )?;
        dir.create_file(
            c_str!("result"),
            0o400,
            Arc::new(ResultFile(ulp.clone()), GFP_KERNEL)?,
        )?;
        dir.create_file(
            c_str!("status"),
            0o400,
            Arc::new(StatusFile(ulp.clone()), GFP_KERNEL)?,
        )?;
        Ok(RsiwUlp {
            dir: Some(dir),
            ulp,
        })
    }
}

impl Drop for RsiwUlp {
    fn drop(&mut self) {
        // No command runs after the directory is gone.
        self.dir = None;
        self.ulp.stop_servers();
        // Work items of closed connections may still be queued.
        self.ulp.queue.flush();
    }
}

impl Ulp {
    fn stop_servers(&self) -> usize {
        let servers = core::mem::take(&mut *self.servers.lock());
        let n = servers.len();
        // Dropped outside the lock: tearing connections down waits for CM handlers.
        drop(servers);
        n
    }

    /// Appends a line to the result log.
    fn log(&self, args: core::fmt::Arguments<'_>) {
        let mut g = self.log.lock();
        let _ = Text(&mut g.0).write_fmt(args);
    }

    /// Records a test result; returns whether it passed.
    fn record(&self, desc: core::fmt::Arguments<'_>, r: &TResult) -> bool {
        let mut g = self.log.lock();
        g.1 += 1;
        let n = g.1;
        let mut t = Text(&mut g.0);
        let _ = match r {
            Ok(()) => writeln!(t, "ok {n} - {desc}"),
            Err(Fail { what, a, b, err }) => writeln!(
                t,
                "not ok {n} - {desc} # {what} ({a:#x}, {b:#x}): error {}",
                err.to_errno()
            ),
        };
        r.is_ok()
    }
}

impl FileHandler for Ctl {
    fn write(&self, data: &[u8]) -> Result {
        let text = core::str::from_utf8(data).map_err(|_| EINVAL)?;
        let cmd = Command::parse(text)?;
        self.0.run(cmd)
    }
}

impl FileHandler for ResultFile {
    fn read(&self, out: &mut KVec<u8>) -> Result {
        let g = self.0.log.lock();
        out.extend_from_slice(&g.0, GFP_KERNEL)?;
        Ok(())
    }
}

impl FileHandler for StatusFile {
    fn read(&self, out: &mut KVec<u8>) -> Result {
        let servers = self.0.servers.lock();
        let mut t = Text(out);
        for s in servers.iter() {
            let a = s.addr();
            let (st, open) = s.stats();
            let _ = write!(
                t,
                "server addr={} port={} accepted={} rejected={} closed={} failed={} open={} tampered={} qp_errors={}",
                a.ip(), a.port(), st.accepted, st.rejected, st.closed, st.failed, open,
                st.tampered, st.qp_errors
            );
            if let Some((recvs, flushed, events)) = s.srq_stats() {
                let _ = write!(
                    t,
                    " srq_recvs={recvs} srq_flushed={flushed} srq_events={events}"
                );
            }
            let _ = writeln!(t);
        }
        Ok(())
    }
}

/// A parsed `ctl` command.
struct Command<'a> {
    verb: &'a str,
    addr: Option<SocketAddr>,
    test: &'a str,
    op: &'a str,
    size: Option<usize>,
    sge: Option<usize>,
    qps: usize,
    signaled: Option<bool>,
    seed: u32,
    secs: u32,
    depth: usize,
    /// `server`: its connections share a receive queue.
    srq: bool,
    /// `timeouts`: the factor for every step's time limit.
    factor: u32,
}

fn parse_num<T: core::str::FromStr>(v: &str) -> Result<T> {
    v.parse().map_err(|_| EINVAL)
}

impl<'a> Command<'a> {
    fn parse(text: &'a str) -> Result<Command<'a>> {
        let mut words = text.split_whitespace();
        let verb = words.next().ok_or(EINVAL)?;
        let mut c = Command {
            verb,
            addr: None,
            test: "all",
            op: "write",
            size: None,
            sge: None,
            qps: 1,
            signaled: None,
            seed: 0x5eed,
            secs: 5,
            depth: 16,
            srq: false,
            factor: 1,
        };
        let mut ip = None;
        let mut port = 20886u16;
        for w in words {
            let (k, v) = w.split_once('=').ok_or(EINVAL)?;
            match k {
                "addr" => ip = Some(parse_num::<IpAddr>(v)?),
                "port" => port = parse_num(v)?,
                "test" => c.test = v,
                "op" => c.op = v,
                "size" => c.size = Some(parse_num(v)?),
                "sge" if v == "max" => c.sge = Some(SGE_MAX),
                "sge" => c.sge = Some(parse_num(v)?),
                "qps" => c.qps = parse_num(v)?,
                "signaled" => c.signaled = Some(parse_num::<u8>(v)? != 0),
                "seed" => c.seed = parse_num(v)?,
                "secs" => c.secs = parse_num(v)?,
                "depth" => c.depth = parse_num(v)?,
                "srq" => c.srq = parse_num::<u8>(v)? != 0,
                "factor" => c.factor = parse_num(v)?,
                _ => return Err(EINVAL),
            }
        }
        if c.size.is_some_and(|s| s > MAX_SIZE) || c.qps == 0 || c.qps > 1024 || c.secs > 600 {
            return Err(EINVAL);
        }
        if c.seed == 0 {
            // Seed 0 means "zeros" in the protocol.
            c.seed = 1;
        }
        c.addr = ip.map(|addr| SocketAddr::new(addr, port));
        Ok(c)
    }
}

impl Ulp {
    fn run(&self, c: Command<'_>) -> Result {
        match c.verb {
            "server" => {
                let addr = c.addr.ok_or(EINVAL)?;
                let s = Server::start(&self.queue, addr, c.srq)?;
                self.servers.lock().push(s, GFP_KERNEL)?;
                Ok(())
            }
            "stop" => {
                self.stop_servers();
                Ok(())
            }
            "clear" => {
                let mut g = self.log.lock();
                g.0 = KVec::new();
                g.1 = 0;
                Ok(())
            }
            "client" => {
                let dst = c.addr.ok_or(EINVAL)?;
                if self.client(dst, &c)? {
                    Ok(())
                } else {
                    Err(EIO)
                }
            }
            "bench" => self.bench(c.addr.ok_or(EINVAL)?, &c),
            "caps" => self.caps(c.addr.ok_or(EINVAL)?),
            "timeouts" => client::set_step_factor(c.factor),
            _ => Err(EINVAL),
        }
    }

    /// Runs one functional test on a fresh connection (or several for `qps`).
    ///
    /// Never inlined, nor is [`client::sge_over`]: each test's frame then lives only while it
    /// runs, on top of the caller's, which a control file's `write` keeps on the syscall stack.
    #[inline(never)]
    fn one(&self, name: &str, p: &Params, qps: usize) -> TResult {
        let flags = SendFlags::default();
        let simple = |f: &dyn Fn(&mut Conn) -> TResult| -> TResult {
            let mut conn = Conn::connect(p.dst, ConnOpts::default())?;
            f(&mut conn)?;
            conn.close()
        };
        if qps > 1 && matches!(name, "write" | "read" | "qps") {
            return client::many(p, qps);
        }
        match name {
            "send" => simple(&|c| client::send(c, p, flags)),
            "solicited_send" => simple(&|c| client::send(c, p, SendFlags::SOLICITED)),
            "recv" => simple(&|c| client::recv(c, p, 0, 0)),
            "write" => simple(&|c| client::write(c, p, flags)),
            "read" => simple(&|c| client::read(c, p, false)),
            "read_inv" => simple(&|c| client::read(c, p, true)),
            "send_inv" => simple(&|c| client::send_inv(c, p)),
            "recv_inv" => simple(&|c| client::recv_inv(c, p)),
            "solicited" => simple(&|c| client::solicited(c, p, true)),
            "unsolicited_quiet" => simple(&|c| client::solicited(c, p, false)),
            "unsignaled" => simple(&|c| client::unsignaled(c, p)),
            "local_inv" => simple(&|c| client::local_inv(c)),
            "stag_random" => simple(&|c| {
                client::stag_random(c).map(|near| {
                    self.log(format_args!(
                        "# stag_random: {near} of {} STag indexes at most {} above the one before\n",
                        client::STAG_MRS - 1,
                        client::STAG_NEAR
                    ));
                })
            }),
            "inline" => {
                let mut conn = Conn::connect(p.dst, ConnOpts {
                    inline: 64,
                    ..Default::default()
                })?;
                client::inline(&mut conn, p)?;
                conn.close()
            }
            "reg_mr" => simple(&|c| client::reg_mr(c, p, false)),
            "stale_key" => {
                // The stale-key WRITE breaks the connection: no orderly close.
                let mut conn = Conn::connect(p.dst, ConnOpts::default())?;
                client::reg_mr(&mut conn, p, true)
            }
            "reject" => client::reject(p),
            "qps" => client::many(p, qps),
            "srq_many" => srq::srq_many(p, qps),
            "srq_limit" => srq::srq_limit(p),
            "srq_drain" => srq::srq_drain(p).map(|t| {
                self.log(format_args!(
                    "# srq_drain: ib_drain_qp took {} ms for a QP in error, {} ms for a QP in RTS\n",
                    t.error_ms, t.rts_ms
                ));
            }),
            "teardown" => client::teardown(p),
            "fin_after_data" => client::fin_after_data(p),
            "close_busy" => client::close_busy(p).map(|ms| {
                self.log(format_args!(
                    "# close_busy: disconnected {ms} ms after rdma_disconnect\n"
                ));
            }),
            "connect" => client::connect_only(p).map(|(ird, ord)| {
                self.log(format_args!(
                    "# connect: established, IRD {ird} ORD {ord}\n"
                ));
            }),
            "connect_error" => client::connect_error(p).map(|e| {
                self.log(format_args!(
                    "# connect_error: event={} status={} ms={}\n",
                    e.event, e.status, e.ms
                ));
            }),
            "rd_max" => client::rd_max(p).map(|r| {
                self.log(format_args!(
                    "# rd_max: IRD {} ORD {}, {} READs posted at once\n",
                    r.ird, r.ord, r.reads
                ));
            }),
            "qp_max_wr" => client::qp_max_wr(p).map(|m| {
                self.log(format_args!(
                    "# qp_max_wr: depth {} works; {} refused: send queue error {}, receive queue error {}\n",
                    m.max,
                    u64::from(m.max) + 1,
                    m.send_err,
                    m.recv_err
                ));
            }),
            _ => Err(Fail {
                what: "unknown test",
                a: 0,
                b: 0,
                err: EINVAL,
            }),
        }
    }

    /// Records a test that could not run here (a TAP skip).
    fn record_skip(&self, desc: core::fmt::Arguments<'_>, why: &str) {
        let mut g = self.log.lock();
        g.1 += 1;
        let n = g.1;
        let _ = writeln!(Text(&mut g.0), "ok {n} - {desc} # SKIP {why}");
    }

    /// Logs the limits of the device that routes to `dst` as a `caps` line.
    fn caps(&self, dst: SocketAddr) -> Result {
        match client::device_caps(dst) {
            Ok(d) => {
                self.log(format_args!(
                    "caps max_send_sge={} max_recv_sge={} max_sge_rd={} max_qp_wr={} max_qp_rd_atom={} max_qp_init_rd_atom={}\n",
                    d.max_send_sge,
                    d.max_recv_sge,
                    d.max_sge_rd,
                    d.max_qp_wr,
                    d.max_qp_rd_atom,
                    d.max_qp_init_rd_atom
                ));
                Ok(())
            }
            Err(f) => {
                self.record(format_args!("caps"), &Err(f));
                Err(EIO)
            }
        }
    }

    /// Runs the tests a `client` command names; returns whether all passed.
    fn client(&self, dst: SocketAddr, c: &Command<'_>) -> Result<bool> {
        let mut ok = true;
        let base = Params {
            dst,
            size: c.size.unwrap_or(65537),
            sge: c.sge.unwrap_or(1),
            signaled: c.signaled.unwrap_or(true),
            seed: c.seed,
        };
        let mut run = |name: &str, p: Params, qps: usize| {
            macro_rules! desc {
                () => {
                    format_args!(
                        "{name} size={} sge={} qps={qps} signaled={}",
                        p.size,
                        SgeArg(p.sge),
                        p.signaled as u8
                    )
                };
            }
            if let Some(op) = OverOp::of_test(name) {
                match client::sge_over(&p, op) {
                    Ok(Some(why)) => self.record_skip(desc!(), why),
                    r => ok &= self.record(desc!(), &r.map(|_| ())),
                }
                return;
            }
            let r = self.one(name, &p, qps);
            ok &= self.record(desc!(), &r);
        };
        let sized = [
            "send", "recv", "write", "read", "read_inv", "send_inv", "recv_inv",
        ];
        if c.test == "all" {
            // The multi-SGE variants use as many SGEs as the device allows.
            let max_sge = SGE_MAX;
            let sizes: &[usize] = match c.size {
                Some(_) => core::slice::from_ref(&base.size),
                None => &SIZES,
            };
            for name in sized {
                for &size in sizes {
                    // Sizes and SGEs vary the seed, so stale data from an earlier test shows.
                    let seed = base.seed.wrapping_add(size as u32);
                    run(name, Params { size, seed, ..base }, 1);
                }
            }
            for name in ["send", "recv", "write"] {
                for &size in sizes.iter().filter(|&&s| s >= 4096) {
                    run(
                        name,
                        Params {
                            size,
                            sge: max_sge,
                            seed: base.seed ^ 0x6e,
                            ..base
                        },
                        1,
                    );
                }
            }
            for name in ["send", "write"] {
                run(
                    name,
                    Params {
                        signaled: false,
                        ..base
                    },
                    1,
                );
            }
            run("solicited_send", base, 1);
            for name in [
                "solicited",
                "unsignaled",
                "inline",
                "local_inv",
                "stag_random",
                "reg_mr",
                "stale_key",
                "reject",
                "teardown",
            ] {
                run(name, base, 1);
            }
            run(
                "qps",
                Params {
                    size: c.size.unwrap_or(65537),
                    ..base
                },
                c.qps.max(64),
            );
        } else if sized.contains(&c.test) && c.size.is_none() {
            for &size in SIZES.iter() {
                let seed = base.seed.wrapping_add(size as u32);
                run(c.test, Params { size, seed, ..base }, c.qps);
            }
        } else {
            run(c.test, base, c.qps);
        }
        Ok(ok)
    }

    /// Runs a benchmark and logs a `bench` line.
    fn bench(&self, dst: SocketAddr, c: &Command<'_>) -> Result {
        let op = match c.op {
            "write" => BenchOp::Write,
            "read" => BenchOp::Read,
            "send" => BenchOp::Send,
            "ping" => BenchOp::Ping,
            _ => return Err(EINVAL),
        };
        let size = c.size.unwrap_or(65536);
        match client::bench(dst, op, size, c.secs, c.depth) {
            Ok(r) => {
                // Bytes per millisecond is kB/s; / 1000 gives MB/s (10^6 bytes).
                let kbps = r.bytes / r.ms;
                // Nanoseconds per operation (a round trip for `ping`).
                let ns = r.ms.saturating_mul(1_000_000) / r.ops.max(1);
                self.log(format_args!(
                    "bench op={} size={size} depth={} ops={} bytes={} ms={} us_per_op={}.{:03} MBps={}.{:03}\n",
                    c.op,
                    c.depth,
                    r.ops,
                    r.bytes,
                    r.ms,
                    ns / 1000,
                    ns % 1000,
                    kbps / 1000,
                    kbps % 1000
                ));
                Ok(())
            }
            Err(f) => {
                self.record(format_args!("bench op={} size={size}", c.op), &Err(f));
                Err(EIO)
            }
        }
    }
}
