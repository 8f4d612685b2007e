// SPDX-License-Identifier: GPL-2.0
//! Large FPDUs: the G bit of the MPA Request/Reply (the C siw's
//! `MPA_RR_FLAG_GSO_EXP`, not in the RFCs), its negotiation, and the FPDU
//! size budget the transmitter derives from the MSS and GSO segment count.

mod common;
use common::{receive, rx, HwCrc};
use proptest::prelude::*;
use rsiw_proto::proto::fpdu::{
    mulpdu, tx_budget, Segmenter, TxError, TxOp, TxPiece, TxStream, LARGE_FPDU_MAX, MULPDU_MAX,
    MULPDU_MIN,
};
use rsiw_proto::proto::mpa::{FrameKind, MpaFrame, MpaHeader, KEY_REP, KEY_REQ};
use rsiw_proto::proto::negotiate::{Initiator, MpaEvent, MpaPolicy, Negotiated, Responder};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn hdr(kind: FrameKind, large_fpdu: bool) -> MpaHeader {
    MpaHeader {
        kind,
        markers: false,
        crc: false,
        reject: false,
        enhanced: false,
        large_fpdu,
        res: 0,
        rev: 1,
        pd_len: 0,
    }
}

#[test]
fn g_bit_position_matches_the_c_siw() {
    // siw's iwarp.h: MPA_RR_FLAG_GSO_EXP = cpu_to_be16(0x0800) over the
    // 16-bit word of flags and Rev, i.e. 0x08 in the flags octet (octet 16),
    // right after M (0x80), C (0x40), R (0x20) and S (0x10).
    let b = hdr(FrameKind::Request, true).encode();
    assert_eq!(&b[..16], &KEY_REQ);
    assert_eq!(b[16], 0x08);
    assert_eq!(b[17], 1, "Rev untouched");
    assert_eq!(u16::from_be_bytes([b[16], b[17]]) & 0x0800, 0x0800);
    assert_eq!(hdr(FrameKind::Request, false).encode()[16], 0);
    // Every other flag combined with it.
    let all = MpaHeader {
        markers: true,
        crc: true,
        enhanced: true,
        rev: 2,
        ..hdr(FrameKind::Reply, true)
    };
    assert_eq!(all.encode()[16], 0xd8);
    assert_eq!(
        MpaHeader {
            reject: true,
            ..all
        }
        .encode()[16],
        0xf8
    );
    // The other three Res bits stay separate from G both ways.
    let res = MpaHeader {
        res: 0x0f,
        ..hdr(FrameKind::Request, false)
    };
    assert_eq!(res.encode()[16], 0x07, "res is masked to three bits");
    let mut f = KEY_REQ.to_vec();
    f.extend_from_slice(&[0x0f, 1, 0, 0]);
    let h = MpaHeader::parse(&f, FrameKind::Request).unwrap();
    assert!(h.large_fpdu);
    assert_eq!(h.res, 0x07);
    f[16] = 0x07;
    let h = MpaHeader::parse(&f, FrameKind::Request).unwrap();
    assert!(!h.large_fpdu);
    assert_eq!(h.res, 0x07);
}

#[test]
fn decodes_a_c_siw_request_with_gso() {
    // What siw_send_mpareqrep() sends with try_gso, CRC and revision 2:
    // bits = GSO_EXP | CRC | ENHANCED | rev 2 = 0x5802 on the wire, then
    // PD_Length 4 and the IRD/ORD words.
    let mut f = KEY_REQ.to_vec();
    f.extend_from_slice(&[0x58, 0x02, 0x00, 0x04, 0x00, 0x10, 0x00, 0x10]);
    let h = MpaHeader::parse(&f, FrameKind::Request).unwrap();
    assert!(h.large_fpdu && h.crc && h.enhanced && !h.markers && !h.reject);
    assert_eq!((h.rev, h.pd_len, h.res), (2, 4, 0));
    let p = MpaPolicy {
        large_fpdu: true,
        ..MpaPolicy::default()
    };
    let mut r = Responder::new(&p);
    assert_eq!(r.on_data(&f).event, MpaEvent::RequestReceived);
    let (rep, n) = r.accept(b"").unwrap();
    assert!(n.large_fpdu);
    assert_eq!(rep.as_bytes()[16], 0x58, "Reply: G, C and S");
}

/// Request, then Reply, each in one piece; the two ends' outcomes.
fn run(ip: &MpaPolicy, rp: &MpaPolicy) -> (Negotiated, Negotiated, u8, u8) {
    let (mut i, req) = Initiator::new(ip, b"i").unwrap();
    let mut r = Responder::new(rp);
    assert_eq!(r.on_data(req.as_bytes()).event, MpaEvent::RequestReceived);
    let (rep, rn) = r.accept(b"r").unwrap();
    let MpaEvent::Established(inn) = i.on_data(rep.as_bytes()).event else {
        panic!("not established");
    };
    (inn, rn, req.as_bytes()[16], rep.as_bytes()[16])
}

#[test]
fn both_ends_must_want_large_fpdus() {
    for rev in [1u8, 2] {
        for markers in [false, true] {
            for (il, rl) in [(false, false), (false, true), (true, false), (true, true)] {
                let pol = |large_fpdu| MpaPolicy {
                    rev,
                    enhanced: rev == 2,
                    markers_rx: markers,
                    large_fpdu,
                    ..MpaPolicy::default()
                };
                let (i, r, req_flags, rep_flags) = run(&pol(il), &pol(rl));
                let want = il && rl;
                assert_eq!(i.large_fpdu, want, "initiator {il} responder {rl}");
                assert_eq!(r.large_fpdu, want, "initiator {il} responder {rl}");
                assert_eq!(req_flags & 0x08 != 0, il, "the initiator proposes");
                assert_eq!(rep_flags & 0x08 != 0, want, "the responder echoes");
                assert_eq!(req_flags & 0x07, 0, "other Res bits stay 0");
                assert_eq!(rep_flags & 0x07, 0, "other Res bits stay 0");
                // Markers and CRC are negotiated as before.
                assert_eq!((i.markers_tx, i.markers_rx), (markers, markers));
                assert!(i.crc && r.crc);
            }
        }
    }
}

#[test]
fn g_in_a_reply_to_a_request_without_it_is_ignored() {
    let (mut i, req) = Initiator::new(&MpaPolicy::default(), b"").unwrap();
    assert_eq!(req.as_bytes()[16] & 0x08, 0);
    let rep = MpaHeader {
        enhanced: false,
        ..hdr(FrameKind::Reply, true)
    };
    // A revision 1, unenhanced Reply is refused by an enhanced initiator;
    // use a revision 1 initiator for this one.
    let p1 = MpaPolicy {
        rev: 1,
        enhanced: false,
        ..MpaPolicy::default()
    };
    let (mut i1, _) = Initiator::new(&p1, b"").unwrap();
    let f = MpaFrame::build(&rep, None, &[]).unwrap();
    assert_eq!(&f.as_bytes()[..16], &KEY_REP);
    match i1.on_data(f.as_bytes()).event {
        MpaEvent::Established(n) => assert!(!n.large_fpdu),
        e => panic!("{e:?}"),
    }
    assert!(i1.reply().unwrap().large_fpdu);
    // The same for an enhanced exchange, with a Reply as the C siw would
    // echo it (it reuses the Request's flag word for its Reply).
    let mut r = Responder::new(&MpaPolicy::default());
    assert_eq!(r.on_data(req.as_bytes()).event, MpaEvent::RequestReceived);
    let (rep, _) = r.accept(b"").unwrap();
    let mut b = rep.as_bytes().to_vec();
    b[16] |= 0x08;
    match i.on_data(&b).event {
        MpaEvent::Established(n) => assert!(!n.large_fpdu),
        e => panic!("{e:?}"),
    }
}

#[test]
fn a_rejecting_reply_never_carries_g() {
    let p = MpaPolicy {
        large_fpdu: true,
        ..MpaPolicy::default()
    };
    let (_, req) = Initiator::new(&p, b"").unwrap();
    let mut r = Responder::new(&p);
    assert_eq!(r.on_data(req.as_bytes()).event, MpaEvent::RequestReceived);
    let rep = r.reject(b"no").unwrap();
    assert_eq!(rep.as_bytes()[16] & 0x28, 0x20);
}

#[test]
fn budget_examples() {
    // Without large FPDUs, or before TCP set a GSO segment count: one MSS.
    assert_eq!(tx_budget(1448, 45, false), 1448);
    assert_eq!(tx_budget(1448, 0, true), 1448);
    assert_eq!(tx_budget(1448, 1, true), 1448);
    // A GSO packet of 45 segments, a multiple of 8 already.
    assert_eq!(tx_budget(1448, 45, true), 65160);
    // Capped at 64 KiB.
    assert_eq!(tx_budget(1448, 46, true), LARGE_FPDU_MAX);
    assert_eq!(tx_budget(65483, 2, true), LARGE_FPDU_MAX);
    assert_eq!(tx_budget(u32::MAX, u16::MAX, true), u32::MAX);
    // Rounded down to a multiple of 8, never below one MSS.
    assert_eq!(tx_budget(1449, 3, true), 4344);
    assert_eq!(tx_budget(65483, 1, true), 65483);
    // The MULPDU of the cap is the largest a sender may use.
    assert_eq!(mulpdu(LARGE_FPDU_MAX, false), MULPDU_MAX);
    assert_eq!(mulpdu(LARGE_FPDU_MAX, true), MULPDU_MAX);
    assert_eq!(mulpdu(1448, false), 1442);
}

#[test]
fn set_mulpdu_range() {
    let op = TxOp::Write { stag: 1, to: 0 };
    let mut s = Segmenter::new(op, 10, 1000).unwrap();
    assert_eq!(s.set_mulpdu(MULPDU_MIN - 1), Err(TxError::BadMulpdu(127)));
    assert_eq!(s.set_mulpdu(MULPDU_MAX + 1), Err(TxError::BadMulpdu(64769)));
    assert_eq!(s.mulpdu(), 1000, "a refused value keeps the old one");
    assert_eq!(s.set_mulpdu(MULPDU_MAX), Ok(()));
    assert_eq!(s.mulpdu(), MULPDU_MAX);
}

/// Cuts one Write of `payload` into FPDUs, each sized from the next
/// `(mss, gso_segs)` of `sizes` (cycled), as the driver does once per round.
/// Returns the wire octets and each FPDU's (wire length, budget, MSS).
fn encode_resized(
    tx: &mut TxStream,
    payload: &[u8],
    sizes: &[(u32, u16)],
    large: bool,
) -> (Vec<u8>, Vec<(u32, u32, u32)>) {
    let op = TxOp::Write {
        stag: 0x1234,
        to: 0x1000,
    };
    let markers = tx.markers();
    let (mss0, segs0) = sizes[0];
    let mut seg = Segmenter::new(
        op,
        payload.len() as u32,
        mulpdu(tx_budget(mss0, segs0, large), markers),
    )
    .unwrap();
    let mut out = Vec::new();
    let mut lens = Vec::new();
    let mut k = 0usize;
    loop {
        let (mss, segs) = sizes[k % sizes.len()];
        k += 1;
        let budget = tx_budget(mss, segs, large);
        seg.set_mulpdu(mulpdu(budget, markers)).unwrap();
        let Some(mut f) = seg.next_fpdu(tx) else {
            break;
        };
        let start = out.len();
        while let Some(p) = f.next_piece(&HwCrc).unwrap() {
            match p {
                TxPiece::Payload { offset, len } => {
                    let s = &payload[offset as usize..(offset + len) as usize];
                    out.extend_from_slice(s);
                    f.feed_payload(&HwCrc, s).unwrap();
                }
                other => out.extend_from_slice(f.bytes(&other)),
            }
        }
        assert_eq!(out.len() - start, f.wire_len() as usize);
        lens.push((f.wire_len(), budget, mss));
    }
    assert!(seg.is_done());
    (out, lens)
}

fn mss() -> impl Strategy<Value = u32> {
    prop_oneof![2 => 536u32..1500, 2 => 1400u32..9000, 1 => 9000u32..=65495]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// The budget: one MSS without large FPDUs; with them at least one MSS,
    /// at most one GSO packet and 64 KiB (unless one MSS is more), and a
    /// multiple of 8 whenever it is more than one MSS.
    #[test]
    fn budget_bounds(mss in 0u32..200_000, segs in any::<u16>(), large in any::<bool>()) {
        let b = tx_budget(mss, segs, large);
        prop_assert!(b >= mss);
        if !large || segs <= 1 {
            prop_assert_eq!(b, mss);
        } else {
            prop_assert!(u64::from(b) <= (u64::from(mss) * u64::from(segs)).max(u64::from(mss)));
            prop_assert!(b <= LARGE_FPDU_MAX.max(mss));
            if b > mss {
                prop_assert_eq!(b % 8, 0);
            }
        }
    }

    /// FPDUs resized between any two of them (MSS and GSO size changing
    /// mid-message) still arrive as one intact message; each fills at most
    /// its budget, so at most one MSS without large FPDUs, and never more
    /// than 64 KiB; the ULPDU never exceeds MULPDU_MAX.
    #[test]
    fn resized_fpdus_round_trip(
        sizes in proptest::collection::vec((mss(), any::<u16>()), 1..6),
        len in prop_oneof![0usize..3000, 0usize..300_000],
        large in any::<bool>(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        chunk in 1usize..70_000,
    ) {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let mut tx = TxStream::new(markers, crc);
        let (wire, lens) = encode_resized(&mut tx, &payload, &sizes, large);
        for &(wire_len, budget, mss) in &lens {
            prop_assert!(wire_len <= budget, "FPDU {} > budget {}", wire_len, budget);
            prop_assert!(wire_len <= LARGE_FPDU_MAX);
            if !large {
                prop_assert!(wire_len <= mss, "FPDU {} > MSS {}", wire_len, mss);
            }
        }
        let (segs, err) = receive(&mut rx(markers, crc), &wire, &[chunk]);
        prop_assert_eq!(err, None);
        prop_assert_eq!(segs.len(), lens.len());
        let mut got = Vec::new();
        for (k, s) in segs.iter().enumerate() {
            prop_assert!(s.done);
            prop_assert!(s.payload.len() <= usize::from(MULPDU_MAX));
            prop_assert_eq!(s.info.hdr.last(), k + 1 == segs.len());
            got.extend_from_slice(&s.payload);
        }
        prop_assert_eq!(got, payload);
    }
}
