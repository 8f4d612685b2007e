// SPDX-License-Identifier: GPL-2.0
//! Property tests: TX -> RX round trips for every message type, at random
//! chunk splits, Markers on/off, CRC on/off and random MULPDU.

mod common;
use common::{encode, receive, rx, HwCrc};
use proptest::prelude::*;
use rsiw_proto::proto::ddp::{DdpHdr, DdpRx, DdpTx};
use rsiw_proto::proto::error::{MpaCode, TermError};
use rsiw_proto::proto::fpdu::{
    RxConfig, RxEvent, RxStream, Segmenter, TxOp, TxStream, MULPDU_MAX, MULPDU_MIN,
};
use rsiw_proto::proto::rdmap::{Offending, RawDdpHdr, ReadRequest, Terminate, QN_SEND};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

#[derive(Clone, Debug)]
enum Kind {
    Write(u32, u64),
    ReadResponse(u32, u64),
    Send { se: bool, inv: Option<u32> },
    ReadRequest(ReadRequest),
    Terminate(u8, bool),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        (any::<u32>(), 0u64..u64::MAX / 2).prop_map(|(s, t)| Kind::Write(s, t)),
        (any::<u32>(), 0u64..u64::MAX / 2).prop_map(|(s, t)| Kind::ReadResponse(s, t)),
        (any::<bool>(), proptest::option::of(any::<u32>()))
            .prop_map(|(se, inv)| Kind::Send { se, inv }),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>()
        )
            .prop_map(|(a, b, c, d, e)| Kind::ReadRequest(ReadRequest {
                sink_stag: a,
                sink_to: b,
                size: c,
                src_stag: d,
                src_to: e
            })),
        (0u8..7, any::<bool>()).prop_map(|(c, h)| Kind::Terminate(c, h)),
    ]
}

fn payload_len() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..64, 4 => 0usize..3000, 1 => 0usize..70000]
}

fn mulpdu() -> impl Strategy<Value = u16> {
    prop_oneof![3 => MULPDU_MIN..600, 2 => 600u16..9000, 1 => 9000u16..=MULPDU_MAX]
}

fn chunks() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        Just(vec![1usize]),
        proptest::collection::vec(1usize..8, 1..8),
        proptest::collection::vec(1usize..2000, 1..8),
        Just(vec![1 << 20]),
    ]
}

fn make_op(k: &Kind, tx: &mut DdpTx, payload: usize) -> (TxOp, usize) {
    match *k {
        Kind::Write(stag, to) => (TxOp::Write { stag, to }, payload),
        Kind::ReadResponse(stag, to) => (TxOp::ReadResponse { stag, to }, payload),
        Kind::Send { se, inv } => (
            TxOp::Send {
                msn: tx.take_msn(0).unwrap(),
                solicited: se,
                invalidate: inv,
            },
            payload,
        ),
        Kind::ReadRequest(req) => (
            TxOp::ReadRequest {
                msn: tx.take_msn(1).unwrap(),
                req,
            },
            0,
        ),
        Kind::Terminate(c, with_hdr) => {
            let err = TermError::Mpa(match c {
                0 => MpaCode::TcpLost,
                1 => MpaCode::Crc,
                2 => MpaCode::MarkerMismatch,
                3 => MpaCode::InvalidReqRep,
                4 => MpaCode::LocalCatastrophic,
                5 => MpaCode::InsufficientIrd,
                _ => MpaCode::NoMatchingRtr,
            });
            let mut t = Terminate::for_error(err, None);
            if with_hdr {
                // Attach a copied untagged header and a Read Request header.
                let h = [0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 0];
                t = Terminate::for_error(
                    TermError::DdpUntagged(rsiw_proto::proto::error::DdpUntagged::MsnRange),
                    Some(&Offending {
                        segment_len: 46,
                        ddp: RawDdpHdr::from_ulpdu(&h).unwrap(),
                        read_request: Some([7u8; 28]),
                    }),
                );
            }
            (
                TxOp::Terminate {
                    msn: tx.take_msn(2).unwrap(),
                    term: t,
                },
                0,
            )
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn tx_rx_roundtrip(
        msgs in proptest::collection::vec((kind(), payload_len()), 1..5),
        mul in mulpdu(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        ch in chunks(),
        seed in any::<u8>(),
    ) {
        let mut tx = TxStream::new(markers, crc);
        let mut dtx = DdpTx::new();
        let mut wire = Vec::new();
        let mut expect = Vec::new();
        for (i, (k, len)) in msgs.iter().enumerate() {
            let (op, len) = make_op(k, &mut dtx, *len);
            let payload: Vec<u8> = (0..len).map(|j| (j as u8).wrapping_mul(31) ^ seed ^ i as u8).collect();
            wire.extend(encode(&mut tx, op, &payload, mul));
            expect.push((op, payload));
        }
        prop_assert_eq!(tx.offset() as usize, wire.len());
        let mut r = rx(markers, crc);
        let (segs, err) = receive(&mut r, &wire, &ch);
        prop_assert_eq!(err, None);
        prop_assert!(r.at_boundary());
        prop_assert_eq!(r.offset() as usize, wire.len());
        // Reassemble messages and compare.
        let mut ddp = DdpRx::new();
        let mut it = segs.iter();
        for (op, payload) in &expect {
            let mut got = Vec::new();
            let mut first = true;
            loop {
                let s = it.next().expect("segment missing");
                prop_assert!(s.done);
                prop_assert_eq!(s.info.opcode, op.opcode());
                prop_assert!(usize::from(s.info.ulpdu_len) <= usize::from(mul));
                match (op, s.info.hdr) {
                    (TxOp::Write { stag, to }, DdpHdr::Tagged(h))
                    | (TxOp::ReadResponse { stag, to }, DdpHdr::Tagged(h)) => {
                        prop_assert_eq!(h.stag, *stag);
                        prop_assert_eq!(h.to, to + got.len() as u64);
                    }
                    (_, DdpHdr::Untagged(h)) => {
                        prop_assert_eq!(h.mo as usize, got.len());
                        prop_assert_eq!(h.msn == 0, false);
                        let p = ddp.check_untagged(&h, s.info.payload_len, Some(u32::MAX));
                        prop_assert!(p.is_ok());
                        if let TxOp::Send { invalidate, .. } = op {
                            prop_assert_eq!(h.qn, QN_SEND);
                            prop_assert_eq!(h.rsvd_ulp2, invalidate.unwrap_or(0));
                        }
                    }
                    _ => prop_assert!(false, "tagged/untagged mismatch"),
                }
                if let TxOp::ReadRequest { req, .. } = op {
                    prop_assert_eq!(s.info.read_request, Some(*req));
                }
                if let TxOp::Terminate { term, .. } = op {
                    prop_assert_eq!(s.info.terminate, Some(*term));
                }
                prop_assert!(first || !got.is_empty() || s.info.payload_len > 0);
                first = false;
                got.extend_from_slice(&s.payload);
                if s.info.hdr.last() {
                    break;
                }
                // L=0 segments are full: header + payload == MULPDU.
                prop_assert_eq!(s.info.ulpdu_len, mul);
            }
            prop_assert_eq!(&got, payload);
        }
        prop_assert!(it.next().is_none());
    }

    /// Whole FPDUs in one input (the direct path) and one octet at a time
    /// (the octet-wise path) give the same events, errors and state, also
    /// on damaged streams.
    #[test]
    fn whole_and_octetwise_input_agree(
        msgs in proptest::collection::vec((kind(), 0usize..3000), 1..5),
        mul in mulpdu(),
        crc in any::<bool>(),
        max_ulpdu in prop_oneof![Just(u16::MAX), MULPDU_MIN..2000],
        flips in proptest::collection::vec((any::<usize>(), 0u8..=255), 0..3),
    ) {
        let mut tx = TxStream::new(false, crc);
        let mut dtx = DdpTx::new();
        let mut wire = Vec::new();
        for (k, len) in &msgs {
            let (op, len) = make_op(k, &mut dtx, *len);
            let payload: Vec<u8> = (0..len).map(|j| j as u8).collect();
            wire.extend(encode(&mut tx, op, &payload, mul));
        }
        for (pos, x) in &flips {
            let p = pos % wire.len();
            wire[p] ^= x;
        }
        let mut cfg = RxConfig::new(false, crc);
        cfg.max_ulpdu = max_ulpdu;
        let (mut whole, mut octets) = (RxStream::new(cfg), RxStream::new(cfg));
        let a = receive(&mut whole, &wire, &[wire.len()]);
        let b = receive(&mut octets, &wire, &[1]);
        prop_assert_eq!(a, b);
        prop_assert_eq!(whole.offset(), octets.offset());
        prop_assert_eq!(whole.at_boundary(), octets.at_boundary());
        prop_assert_eq!(whole.offending(), octets.offending());
        prop_assert_eq!(whole.error(), octets.error());
    }

    /// FPDUs a segmenter laid out ahead equal those laid out on demand (a
    /// copy whose MULPDU was set again has none ahead), also when another
    /// message's FPDUs move the stream in between or the MULPDU changes.
    #[test]
    fn fpdus_laid_out_ahead_match(
        lens in (0usize..20000, 0usize..20000),
        mul in mulpdu(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        steps in proptest::collection::vec((any::<bool>(), proptest::option::of(mulpdu())), 1..40),
    ) {
        let mut stream = TxStream::new(markers, crc);
        let payload = vec![0x5au8; lens.0.max(lens.1)];
        let mut segs = [
            Segmenter::new(TxOp::Write { stag: 1, to: 0 }, lens.0 as u32, mul).unwrap(),
            Segmenter::new(TxOp::Send { msn: 1, solicited: false, invalidate: None }, lens.1 as u32, mul).unwrap(),
        ];
        for (second, new_mul) in steps {
            let seg = &mut segs[usize::from(second)];
            if let Some(m) = new_mul {
                seg.set_mulpdu(m).unwrap();
            }
            let mut fresh = *seg;
            fresh.set_mulpdu(fresh.mulpdu()).unwrap();
            let mut fresh_stream = stream;
            let (a, b) = (seg.next_fpdu(&mut stream), fresh.next_fpdu(&mut fresh_stream));
            prop_assert_eq!(a.is_some(), b.is_some());
            prop_assert_eq!(stream.offset(), fresh_stream.offset());
            prop_assert_eq!(seg.payload_done(), fresh.payload_done());
            prop_assert_eq!(seg.is_done(), fresh.is_done());
            if let (Some(mut a), Some(mut b)) = (a, b) {
                let (mut wa, mut wb) = (vec![0u8; 70000], vec![0u8; 70000]);
                let na = a.write_to(&HwCrc, &payload, &mut wa).unwrap();
                let nb = b.write_to(&HwCrc, &payload, &mut wb).unwrap();
                prop_assert_eq!(&wa[..na], &wb[..nb]);
            }
        }
    }

    /// Payload placed with consume_payload (driver copies itself) in
    /// partial pieces gives the same verdicts.
    #[test]
    fn partial_payload_consumption(len in 0usize..5000, mul in mulpdu(), markers in any::<bool>(), split in 1usize..300) {
        let mut tx = TxStream::new(markers, true);
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let wire = encode(&mut tx, TxOp::Write { stag: 5, to: 0 }, &payload, mul);
        let mut r = rx(markers, true);
        let mut input = &wire[..];
        let mut placed = Vec::new();
        let mut done = 0;
        while !input.is_empty() {
            let o = r.poll(input, &HwCrc).unwrap();
            input = &input[o.consumed..];
            match o.event {
                RxEvent::Payload { len, .. } => {
                    let n = len.min(split);
                    placed.extend_from_slice(&input[..n]);
                    r.consume_payload(&input[..n], &HwCrc).unwrap();
                    input = &input[n..];
                }
                RxEvent::SegmentDone => done += 1,
                _ => {}
            }
        }
        prop_assert_eq!(placed, payload);
        prop_assert!(done >= 1);
    }
}

#[test]
fn payload_misuse_is_refused_without_state_change() {
    let mut tx = TxStream::new(false, true);
    let wire = encode(&mut tx, TxOp::Write { stag: 1, to: 0 }, &[1, 2, 3, 4], 1454);
    let mut r = rx(false, true);
    let o = r.poll(&wire, &HwCrc).unwrap();
    assert!(matches!(o.event, RxEvent::Header(_)));
    let rest = &wire[o.consumed..];
    let o = r.poll(rest, &HwCrc).unwrap();
    assert_eq!(o.event, RxEvent::Payload { len: 4, offset: 0 });
    // Asking again reports the same range.
    assert_eq!(
        r.poll(rest, &HwCrc).unwrap().event,
        RxEvent::Payload { len: 4, offset: 0 }
    );
    let mut small = [0u8; 2];
    assert!(r.copy_payload(&rest[..4], &mut small, &HwCrc).is_err());
    assert!(r.consume_payload(&rest[..5], &HwCrc).is_err());
    let mut dst = [0u8; 4];
    r.copy_payload(&rest[..4], &mut dst, &HwCrc).unwrap();
    assert_eq!(dst, [1, 2, 3, 4]);
    assert_eq!(
        r.poll(&rest[4..], &HwCrc).unwrap().event,
        RxEvent::SegmentDone
    );
}
