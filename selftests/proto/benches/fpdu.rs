// SPDX-License-Identifier: GPL-2.0
//! Throughput of the protocol core against a memcpy+crc32c bound.
//!
//! - `bound`: copy the message into a destination buffer and CRC32c it
//!   (what any receiver must at least do).
//! - `tx`: segment into FPDUs (MULPDU 1454, no Markers, CRC on) and CRC the
//!   payload pieces as a zero-copy sender would (no payload copy).
//! - `rx`: parse the framed stream and place every payload range with
//!   `copy_payload` (copy and CRC in one pass).
//!
//! Sizes 4 KiB, 64 KiB and 1 MiB; throughput counts message payload octets.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rsiw_proto::proto::crc::Crc32c;
use rsiw_proto::proto::fpdu::{RxConfig, RxEvent, RxStream, Segmenter, TxOp, TxPiece, TxStream};
use std::hint::black_box;

#[derive(Clone, Copy)]
struct HwCrc;

impl Crc32c for HwCrc {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        !crc32c::crc32c_append(!reg, data)
    }
}

const OP: TxOp = TxOp::Write { stag: 0x100, to: 0 };

fn tx_once(payload: &[u8], mulpdu: u16, out: Option<&mut Vec<u8>>) -> u32 {
    let mut stream = TxStream::new(false, true);
    let mut seg = Segmenter::new(OP, payload.len() as u32, mulpdu).unwrap();
    let mut acc = 0u32;
    let mut out = out;
    while let Some(mut f) = seg.next_fpdu(&mut stream) {
        while let Some(p) = f.next_piece(&HwCrc).unwrap() {
            match p {
                TxPiece::Bytes(b) => {
                    acc = acc.wrapping_add(b.as_slice().len() as u32);
                    if let Some(o) = out.as_deref_mut() {
                        o.extend_from_slice(b.as_slice());
                    }
                }
                TxPiece::Payload { offset, len } => {
                    let s = &payload[offset as usize..(offset + len) as usize];
                    f.feed_payload(&HwCrc, s).unwrap();
                    if let Some(o) = out.as_deref_mut() {
                        o.extend_from_slice(s);
                    }
                }
            }
        }
    }
    acc
}

fn rx_once(wire: &[u8], dst: &mut [u8]) -> usize {
    let mut rx = RxStream::new(RxConfig::new(false, true));
    let mut input = wire;
    let mut placed = 0usize;
    loop {
        let o = rx.poll(input, &HwCrc).unwrap();
        input = &input[o.consumed..];
        match o.event {
            RxEvent::NeedMore => break,
            RxEvent::Payload { len, .. } => {
                rx.copy_payload(&input[..len], &mut dst[placed..placed + len], &HwCrc)
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

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("proto");
    for size in [4usize << 10, 64 << 10, 1 << 20] {
        let payload: Vec<u8> = (0..size).map(|i| (i * 13) as u8).collect();
        let mut dst = vec![0u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("bound", size), &payload, |b, p| {
            b.iter(|| {
                dst.copy_from_slice(black_box(p));
                black_box(crc32c::crc32c(&dst))
            })
        });
        // MULPDU 1454: Ethernet MTU; 64768: the RFC maximum (loopback,
        // jumbo frames with TSO).
        for mulpdu in [1454u16, 64768] {
            let mut wire = Vec::new();
            tx_once(&payload, mulpdu, Some(&mut wire));
            // The same bound, but with the CRC run per FPDU over exactly the
            // octets MPA covers: separates framing cost from the cost of
            // CRC32c on FPDU-sized (not message-sized) buffers.
            let ranges = fpdu_ranges(&wire);
            g.bench_with_input(
                BenchmarkId::new(format!("bound-fpdu-m{mulpdu}"), size),
                &payload,
                |b, p| {
                    b.iter(|| {
                        dst.copy_from_slice(black_box(p));
                        let mut acc = 0u32;
                        for &(s, e) in &ranges {
                            acc ^= crc32c::crc32c(&wire[s..e]);
                        }
                        black_box(acc)
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new(format!("tx-m{mulpdu}"), size),
                &payload,
                |b, p| b.iter(|| black_box(tx_once(black_box(p), mulpdu, None))),
            );
            g.bench_with_input(
                BenchmarkId::new(format!("rx-m{mulpdu}"), size),
                &wire,
                |b, w| b.iter(|| black_box(rx_once(black_box(w), &mut dst))),
            );
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
