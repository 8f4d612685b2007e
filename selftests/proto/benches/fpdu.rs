// SPDX-License-Identifier: GPL-2.0
//! Throughput of the protocol core against a memcpy+crc32c bound.
//!
//! Every case runs with two CRC32c engines, and each engine is measured
//! against bounds computed with that same engine:
//!
//! - `crate`: the `crc32c` crate. It runs three lanes in parallel only over
//!   whole 768-octet blocks, so most of a ~1.4 KB FPDU is summed serially.
//! - `pcl`: three lanes over any buffer of 192 octets or more, recombined
//!   with a carry-less multiply; the strategy of the kernel's crc32c-intel
//!   (`crc_pcl`), which is what a kernel CRC32c costs per FPDU.
//!
//! Cases, per engine, size and MULPDU (1454: Ethernet; 64768: the RFC
//! maximum, loopback and jumbo frames with TSO):
//!
//! - `bound`: copy the whole message once and CRC it in one call: the
//!   headline reference (what any receiver must at least do).
//! - `bound-chunked`: the same, with the copy made in [`CHUNK`]-octet
//!   pieces. glibc copies large buffers with `rep movsb`, which some CPUs
//!   (AMD EPYC under a hypervisor, measured) run at a fifth of the speed of
//!   a vector loop; the summary takes the faster of the two as the bound, so
//!   that a slow library copy cannot flatter the cases.
//! - `bound-fpdu-mN`: the chunked copy, but the CRC run per FPDU over
//!   exactly the octets MPA covers: context that separates the cost of
//!   CRC32c on FPDU-sized buffers from the cost of framing.
//! - `tx-mN`: segment into FPDUs (no Markers, CRC on) and CRC the payload
//!   pieces as a zero-copy sender does (no payload copy).
//! - `rx-mN`: parse the framed stream and place every payload range with
//!   `copy_payload` (copy and CRC through the engine's `copy_update`).
//!
//! Sizes 4 KiB, 64 KiB and 1 MiB; throughput counts message payload octets.
//! After the runs a table gives each case's ratio to both bounds (from
//! criterion's mean estimates).

use criterion::{BenchmarkId, Criterion, Throughput};
use rsiw_proto::proto::crc::Crc32c;
use rsiw_proto::proto::fpdu::{RxConfig, RxEvent, RxStream, Segmenter, TxOp, TxPiece, TxStream};
use std::hint::black_box;

/// The `crc32c` crate, on the core's raw-register trait.
#[derive(Clone, Copy)]
struct CrateCrc;

impl Crc32c for CrateCrc {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        !crc32c::crc32c_append(!reg, data)
    }
}

/// Three-lane CRC32c for any length (see the module comment).
#[derive(Clone, Copy)]
struct PclCrc;

impl Crc32c for PclCrc {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        pcl::update(reg, data)
    }
}

mod pcl {
    //! SSE4.2 `crc32` in three interleaved lanes; the lanes are joined by
    //! multiplying the earlier lane's register by x^(8 * lane length) mod P
    //! (one `pclmulqdq`) and reducing with one more `crc32`.
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u64, _mm_crc32_u8, _mm_cvtsi128_si64, _mm_cvtsi64_si128,
    };
    use std::sync::OnceLock;

    /// 64-bit words per lane and round (1 KiB lanes).
    const MAX_WORDS: usize = 128;
    /// Buffers shorter than this are summed serially.
    const SMALL: usize = 3 * 8 * 8;

    /// x^e mod P in the reflected representation (bit 31 is x^0).
    fn xpow(e: usize) -> u32 {
        let mut v: u32 = 0x8000_0000;
        for _ in 0..e {
            v = if v & 1 != 0 {
                (v >> 1) ^ rsiw_proto::proto::crc::CRC32C_POLY_REFLECTED
            } else {
                v >> 1
            };
        }
        v
    }

    /// `K[w]` shifts a register over a lane of `w` words: the 64-bit
    /// carry-less product of two reflected values carries one extra x, and
    /// the `crc32` reduction multiplies by x^32, hence x^(64w - 33).
    fn shift_constants() -> &'static [u64; MAX_WORDS + 1] {
        static K: OnceLock<[u64; MAX_WORDS + 1]> = OnceLock::new();
        K.get_or_init(|| {
            let mut k = [0u64; MAX_WORDS + 1];
            for (w, c) in k.iter_mut().enumerate().skip(1) {
                *c = u64::from(xpow(64 * w - 33));
            }
            k
        })
    }

    fn word(b: &[u8], i: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i * 8..i * 8 + 8]);
        u64::from_le_bytes(a)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    unsafe fn update_hw(reg: u32, data: &[u8]) -> u32 {
        let k = shift_constants();
        let shift = |c: u64, k: u64| {
            let p =
                _mm_clmulepi64_si128(_mm_cvtsi64_si128(c as i64), _mm_cvtsi64_si128(k as i64), 0);
            _mm_crc32_u64(0, _mm_cvtsi128_si64(p) as u64)
        };
        let mut c0 = u64::from(reg);
        let mut d = data;
        while d.len() >= SMALL {
            let words = (d.len() / 24).min(MAX_WORDS);
            let (a, rest) = d.split_at(words * 8);
            let (b, rest) = rest.split_at(words * 8);
            let (c, rest) = rest.split_at(words * 8);
            let (mut c1, mut c2) = (0u64, 0u64);
            for i in 0..words {
                c0 = _mm_crc32_u64(c0, word(a, i));
                c1 = _mm_crc32_u64(c1, word(b, i));
                c2 = _mm_crc32_u64(c2, word(c, i));
            }
            c0 = shift(c0, k[words]) ^ c1;
            c0 = shift(c0, k[words]) ^ c2;
            d = rest;
        }
        let words = d.len() / 8;
        for i in 0..words {
            c0 = _mm_crc32_u64(c0, word(d, i));
        }
        let mut r = c0 as u32;
        for &b in &d[words * 8..] {
            r = _mm_crc32_u8(r, b);
        }
        r
    }

    /// Advances the raw register over `data`.
    pub(super) fn update(reg: u32, data: &[u8]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("sse4.2") && is_x86_feature_detected!("pclmulqdq") {
            // SAFETY: the CPU supports both target features.
            return unsafe { update_hw(reg, data) };
        }
        !crc32c::crc32c_append(!reg, data)
    }
}

const OP: TxOp = TxOp::Write { stag: 0x100, to: 0 };

fn tx_once<C: Crc32c>(crc: &C, payload: &[u8], mulpdu: u16, out: Option<&mut Vec<u8>>) -> u32 {
    let mut stream = TxStream::new(false, true);
    let mut seg = Segmenter::new(OP, payload.len() as u32, mulpdu).unwrap();
    let mut acc = 0u32;
    let mut out = out;
    while let Some(mut f) = seg.next_fpdu(&mut stream) {
        while let Some(p) = f.next_piece(crc).unwrap() {
            match p {
                TxPiece::Payload { offset, len } => {
                    let s = &payload[offset as usize..(offset + len) as usize];
                    f.feed_payload(crc, s).unwrap();
                    if let Some(o) = out.as_deref_mut() {
                        o.extend_from_slice(s);
                    }
                }
                other => {
                    let b = f.bytes(&other);
                    acc = acc.wrapping_add(b.len() as u32);
                    if let Some(o) = out.as_deref_mut() {
                        o.extend_from_slice(b);
                    }
                }
            }
        }
    }
    acc
}

fn rx_once<C: Crc32c>(crc: &C, wire: &[u8], dst: &mut [u8]) -> usize {
    let mut rx = RxStream::new(RxConfig::new(false, true));
    let mut input = wire;
    let mut placed = 0usize;
    loop {
        let o = rx.poll(input, crc).unwrap();
        input = &input[o.consumed..];
        match o.event {
            RxEvent::NeedMore => break,
            RxEvent::Payload { len, .. } => {
                rx.copy_payload(&input[..len], &mut dst[placed..placed + len], crc)
                    .unwrap();
                placed += len;
                input = &input[len..];
            }
            _ => {}
        }
    }
    placed
}

/// CRC-covered range of every FPDU in a Marker-less stream.
fn fpdu_ranges(wire: &[u8]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut at = 0usize;
    while at < wire.len() {
        let ulpdu = usize::from(u16::from_be_bytes([wire[at], wire[at + 1]]));
        let covered = (2 + ulpdu + 3) & !3;
        v.push((at, at + covered));
        at += covered + 4;
    }
    v
}

const SIZES: [usize; 3] = [4 << 10, 64 << 10, 1 << 20];
const MULPDUS: [u16; 2] = [1454, 64768];
/// Piece of the chunked copy: below glibc's `rep movsb` threshold.
const CHUNK: usize = 2048;

/// Copies `src` into `dst` (same length) in [`CHUNK`]-octet pieces.
fn copy_chunked(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_mut(CHUNK).zip(src.chunks(CHUNK)) {
        d.copy_from_slice(s);
    }
}

fn engine<C: Crc32c + Copy>(c: &mut Criterion, name: &str, crc: C) {
    // The engine must be a CRC32c before its numbers mean anything.
    let probe: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
    for len in [0, 1, 7, 191, 192, 1456, 3072, 5000] {
        assert_eq!(
            !crc.update(!0, &probe[..len]),
            crc32c::crc32c(&probe[..len]),
            "{name} engine, {len} octets"
        );
    }
    let mut g = c.benchmark_group(name);
    for size in SIZES {
        let payload: Vec<u8> = (0..size).map(|i| (i * 13) as u8).collect();
        let mut dst = vec![0u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("bound", size), &payload, |b, p| {
            b.iter(|| {
                dst.copy_from_slice(black_box(p));
                black_box(crc.update(!0, &dst))
            })
        });
        g.bench_with_input(BenchmarkId::new("bound-chunked", size), &payload, |b, p| {
            b.iter(|| {
                copy_chunked(&mut dst, black_box(p));
                black_box(crc.update(!0, &dst))
            })
        });
        for mulpdu in MULPDUS {
            let mut wire = Vec::new();
            tx_once(&crc, &payload, mulpdu, Some(&mut wire));
            let ranges = fpdu_ranges(&wire);
            g.bench_with_input(
                BenchmarkId::new(format!("bound-fpdu-m{mulpdu}"), size),
                &payload,
                |b, p| {
                    b.iter(|| {
                        copy_chunked(&mut dst, black_box(p));
                        let mut acc = 0u32;
                        for &(s, e) in &ranges {
                            acc ^= crc.update(!0, &wire[s..e]);
                        }
                        black_box(acc)
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new(format!("tx-m{mulpdu}"), size),
                &payload,
                |b, p| b.iter(|| black_box(tx_once(&crc, black_box(p), mulpdu, None))),
            );
            g.bench_with_input(
                BenchmarkId::new(format!("rx-m{mulpdu}"), size),
                &wire,
                |b, w| b.iter(|| black_box(rx_once(&crc, black_box(w), &mut dst))),
            );
        }
    }
    g.finish();
}

/// Mean time in ns of one case, from criterion's `estimates.json`.
fn mean_ns(group: &str, id: &str, size: usize) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target"));
    let path = dir.join(format!("criterion/{group}/{id}/{size}/new/estimates.json"));
    let text = std::fs::read_to_string(path).ok()?;
    let mean = &text[text.find("\"mean\"")?..];
    let pe = &mean[mean.find("\"point_estimate\":")? + 17..];
    pe[..pe.find([',', '}'])?].trim().parse().ok()
}

/// Prints GB/s and the ratio of every case to both bounds.
fn summary() {
    println!("\nratio = case throughput / bound throughput (same engine, same run)");
    println!("bound = the faster of one copy and a chunked copy, then one CRC");
    println!(
        "{:<7}{:>8} {:>7} {:<3}{:>8} {:>10} {:>11}",
        "engine", "size", "mulpdu", "", "GiB/s", "/ bound", "/ per-FPDU"
    );
    for group in ["crate", "pcl"] {
        for size in SIZES {
            let Some(bound) = [
                mean_ns(group, "bound", size),
                mean_ns(group, "bound-chunked", size),
            ]
            .into_iter()
            .flatten()
            .reduce(f64::min) else {
                continue;
            };
            for mulpdu in MULPDUS {
                let Some(per_fpdu) = mean_ns(group, &format!("bound-fpdu-m{mulpdu}"), size) else {
                    continue;
                };
                for case in ["tx", "rx"] {
                    let Some(t) = mean_ns(group, &format!("{case}-m{mulpdu}"), size) else {
                        continue;
                    };
                    let gib = size as f64 / t / 1.073_741_824;
                    println!(
                        "{group:<7}{size:>8} {mulpdu:>7} {case:<3}{gib:>8.2} {:>10.2} {:>11.2}",
                        bound / t,
                        per_fpdu / t
                    );
                }
            }
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(1))
        .configure_from_args();
    engine(&mut c, "crate", CrateCrc);
    engine(&mut c, "pcl", PclCrc);
    c.final_summary();
    if !std::env::args().any(|a| a == "--list" || a == "--test") {
        summary();
    }
}
