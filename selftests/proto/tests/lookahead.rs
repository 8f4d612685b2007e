// SPDX-License-Identifier: GPL-2.0
//! The CRC lookahead: a receiver that checks each FPDU's CRC before placing
//! its payload (as rsiw's RX does over the socket's queued buffers) sees the
//! same segments as the plain receiver on clean input, and places nothing of
//! an FPDU whose payload, pad or CRC was damaged.

mod common;
use common::{encode, receive, rx, HwCrc, RxSeg};
use proptest::prelude::*;
use rsiw_proto::proto::crc::Crc32c;
use rsiw_proto::proto::fpdu::{RxError, RxEvent, RxStream, TxOp, TxStream, CRC_LEN, MULPDU_MIN};

/// What the lookahead receiver did.
#[derive(Debug, Default)]
struct Run {
    segs: Vec<RxSeg>,
    err: Option<RxError>,
    /// Payload octets placed into a segment that then failed its CRC.
    placed_unchecked: usize,
    /// Segments whose payload was placed after a successful lookahead.
    checked_ahead: usize,
}

/// Receives `wire` in `chunk`-sized pieces. At the start of each payload it
/// reads ahead in the whole of `wire` (the socket's queue) when the FPDU is
/// already complete there; otherwise it waits for the next chunk, as rsiw's
/// RX stops consuming until the FPDU is in.
fn receive_checked(rx: &mut RxStream, wire: &[u8], chunk: usize) -> Run {
    let mut run = Run::default();
    let mut pos = 0usize;
    let mut avail = 0usize;
    let mut discard = false;
    let mut placed_here = 0usize;
    while pos < wire.len() {
        avail = (avail + chunk.max(1)).min(wire.len());
        loop {
            let input = &wire[pos..avail];
            let out = match rx.poll(input, &HwCrc) {
                Ok(o) => o,
                Err(e) => {
                    if matches!(e, RxError::Crc { .. }) {
                        run.placed_unchecked += placed_here;
                    }
                    run.err = Some(e);
                    return run;
                }
            };
            pos += out.consumed;
            match out.event {
                RxEvent::NeedMore => break,
                RxEvent::Header(info) => {
                    discard = false;
                    placed_here = 0;
                    run.segs.push(RxSeg {
                        info,
                        payload: Vec::new(),
                        done: false,
                    });
                }
                RxEvent::Payload { len, .. } => {
                    if let Some(n) = rx.lookahead_len() {
                        if wire.len() - pos < n {
                            // Not all there yet: the real receiver stops
                            // reading and resumes when more arrives.
                            if avail == wire.len() {
                                run.err = None;
                                return run;
                            }
                            break;
                        }
                        let body = &wire[pos..pos + n - CRC_LEN];
                        let reg = HwCrc.update(rx.lookahead_crc(), body);
                        let mut trailer = [0u8; CRC_LEN];
                        trailer.copy_from_slice(&wire[pos + n - CRC_LEN..pos + n]);
                        if rx.accept_lookahead(reg, trailer) {
                            run.checked_ahead += 1;
                        } else {
                            discard = true;
                        }
                    }
                    let src = &wire[pos..pos + len];
                    if discard {
                        rx.consume_payload(src, &HwCrc).expect("consume");
                    } else {
                        let mut dst = vec![0u8; len];
                        rx.copy_payload(src, &mut dst, &HwCrc).expect("copy");
                        placed_here += len;
                        run.segs.last_mut().unwrap().payload.extend_from_slice(&dst);
                    }
                    pos += len;
                }
                RxEvent::SegmentDone => {
                    run.segs.last_mut().unwrap().done = true;
                }
            }
        }
    }
    run
}

fn write_wire(payload: &[u8], mulpdu: u16) -> Vec<u8> {
    let mut tx = TxStream::new(false, true);
    encode(
        &mut tx,
        TxOp::Write {
            stag: 7,
            to: 0x1000,
        },
        payload,
        mulpdu,
    )
}

#[test]
fn clean_input_checks_every_fpdu_ahead() {
    let payload: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let wire = write_wire(&payload, 1460);
    let run = receive_checked(&mut rx(false, true), &wire, wire.len());
    assert_eq!(run.err, None);
    let (plain, err) = receive(&mut rx(false, true), &wire, &[wire.len()]);
    assert_eq!(err, None);
    assert_eq!(run.segs, plain);
    assert_eq!(run.checked_ahead, plain.len());
}

#[test]
fn damaged_payload_is_never_placed() {
    let payload = vec![0x5au8; 3000];
    let mut wire = write_wire(&payload, 1460);
    // A payload octet of the first FPDU (past its 2 + 14 header octets).
    wire[100] ^= 1;
    let run = receive_checked(&mut rx(false, true), &wire, wire.len());
    assert!(
        matches!(run.err, Some(RxError::Crc { .. })),
        "{:?}",
        run.err
    );
    assert_eq!(run.placed_unchecked, 0);
    assert!(run.segs.iter().all(|s| s.payload.is_empty()));
}

#[test]
fn no_lookahead_without_crc_or_with_markers() {
    let payload = vec![1u8; 2000];
    for (markers, crc) in [(false, false), (true, true), (true, false)] {
        let mut tx = TxStream::new(markers, crc);
        let wire = encode(&mut tx, TxOp::Write { stag: 1, to: 0 }, &payload, 1000);
        let run = receive_checked(&mut rx(markers, crc), &wire, wire.len());
        assert_eq!(run.err, None);
        assert_eq!(run.checked_ahead, 0);
        let got: Vec<u8> = run.segs.iter().flat_map(|s| s.payload.clone()).collect();
        assert_eq!(got, payload);
    }
}

#[test]
fn accept_refuses_outside_a_payload_start() {
    let mut r = rx(false, true);
    assert_eq!(r.lookahead_len(), None);
    assert!(!r.accept_lookahead(0, [0; CRC_LEN]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)))]

    /// Clean input: same segments as the plain receiver, at any chunking.
    #[test]
    fn same_segments_as_plain(len in 0usize..20_000, mulpdu in MULPDU_MIN..9000, chunk in 1usize..5000) {
        let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 3) as u8).collect();
        let wire = write_wire(&payload, mulpdu);
        let run = receive_checked(&mut rx(false, true), &wire, chunk);
        let (plain, err) = receive(&mut rx(false, true), &wire, &[chunk]);
        prop_assert_eq!(err, None);
        prop_assert_eq!(run.err, None);
        prop_assert_eq!(run.segs, plain);
    }

    /// One flipped bit after the headers: the damaged FPDU places nothing and
    /// the stream ends with a CRC error; earlier FPDUs are intact.
    #[test]
    fn damage_blocks_placement(len in 1usize..20_000, mulpdu in MULPDU_MIN..9000,
                               chunk in 1usize..5000, at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let payload: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
        let mut wire = write_wire(&payload, mulpdu);
        let (clean, _) = receive(&mut rx(false, true), &wire, &[wire.len()]);
        // Damage a payload, pad or CRC octet: locate the FPDUs by walking
        // their length fields.
        let mut spans = Vec::new();
        let mut p = 0usize;
        while p < wire.len() {
            let ulpdu = u16::from_be_bytes([wire[p], wire[p + 1]]) as usize;
            let total = (2 + ulpdu).div_ceil(4) * 4 + CRC_LEN;
            spans.push((p + 2 + 14, p + total));
            p += total;
        }
        let candidates: Vec<usize> = spans.iter().flat_map(|&(a, b)| a..b).collect();
        let victim = candidates[at.index(candidates.len())];
        wire[victim] ^= 1 << bit;
        let hit = spans.iter().position(|&(a, b)| (a..b).contains(&victim)).unwrap();
        let run = receive_checked(&mut rx(false, true), &wire, chunk);
        prop_assert!(matches!(run.err, Some(RxError::Crc { .. })), "{:?}", run.err);
        prop_assert_eq!(run.placed_unchecked, 0);
        prop_assert_eq!(run.segs.len(), hit + 1);
        prop_assert!(run.segs[hit].payload.is_empty());
        prop_assert_eq!(&run.segs[..hit], &clean[..hit]);
    }
}
