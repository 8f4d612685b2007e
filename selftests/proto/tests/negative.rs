// SPDX-License-Identifier: GPL-2.0
//! Negative tests: every malformed field yields the exact error class and
//! Terminate code, and arbitrary input never panics.

mod common;
use common::{encode, frame, hex, receive, rx, HwCrc};
use proptest::prelude::*;
use rsiw_proto::proto::ddp::{check_tagged, DdpHdr, DdpRx, StagLookup, TaggedHdr, UntaggedHdr};
use rsiw_proto::proto::error::{
    DdpTagged, DdpUntagged, Layer, MpaCode, RdmapOperation, RdmapProtection, TermError,
};
use rsiw_proto::proto::fpdu::{RxConfig, RxError, RxStream, Segmenter, TxError, TxOp, TxStream};
use rsiw_proto::proto::rdmap::{ReadRequest, TermParseError, Terminate, TERM_MAX_LEN};
use rsiw_proto::soft_crc::SoftCrc32c;

fn untagged(ctrl: u8, rdmap: u8, inv: u32, qn: u32, msn: u32, mo: u32) -> Vec<u8> {
    let mut v = vec![ctrl, rdmap];
    for w in [inv, qn, msn, mo] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v
}

fn tagged(ctrl: u8, rdmap: u8, stag: u32, to: u64) -> Vec<u8> {
    let mut v = vec![ctrl, rdmap];
    v.extend_from_slice(&stag.to_be_bytes());
    v.extend_from_slice(&to.to_be_bytes());
    v
}

fn term_of(ulpdu: &[u8]) -> Option<RxError> {
    let wire = frame(ulpdu);
    let (_, err) = receive(&mut rx(false, true), &wire, &[1]);
    let (_, err2) = receive(&mut rx(false, true), &wire, &[wire.len()]);
    assert_eq!(err, err2, "verdict independent of chunking");
    err
}

fn proto(t: TermError) -> Option<RxError> {
    Some(RxError::Protocol(t))
}

fn triple(t: TermError) -> (u8, u8, u8) {
    (t.layer() as u8, t.etype(), t.code())
}

#[test]
fn header_field_violations_map_to_exact_terminate_codes() {
    let send = |v: &mut Vec<u8>| v.extend_from_slice(b"data");
    let mut cases: Vec<(&str, Vec<u8>, Option<RxError>, (u8, u8, u8))> = Vec::new();
    let mut push = |name, ulpdu: Vec<u8>, t: TermError, want: (u8, u8, u8)| {
        assert_eq!(triple(t), want, "{name}: triple");
        cases.push((name, ulpdu, proto(t), want));
    };
    // ULPDU shorter than any DDP header.
    push(
        "short ulpdu",
        vec![0xc1, 0x40, 0, 0],
        TermError::DdpCatastrophic,
        (1, 0, 0),
    );
    // Untagged but shorter than 18 octets.
    push(
        "short untagged",
        untagged(0x41, 0x43, 0, 0, 1, 0)[..16].to_vec(),
        TermError::DdpCatastrophic,
        (1, 0, 0),
    );
    // DDP version.
    push(
        "DV 0 tagged",
        tagged(0xc0, 0x40, 1, 0),
        TermError::DdpTagged(DdpTagged::InvalidVersion),
        (1, 1, 4),
    );
    push(
        "DV 2 untagged",
        untagged(0x42, 0x43, 0, 0, 1, 0),
        TermError::DdpUntagged(DdpUntagged::InvalidVersion),
        (1, 2, 6),
    );
    // RDMAP version.
    push(
        "RV 0",
        untagged(0x41, 0x03, 0, 0, 1, 0),
        TermError::RdmapOperation(RdmapOperation::InvalidVersion),
        (0, 2, 5),
    );
    push(
        "RV 2",
        tagged(0xc1, 0x80, 0, 0),
        TermError::RdmapOperation(RdmapOperation::InvalidVersion),
        (0, 2, 5),
    );
    // Opcodes.
    for op in 8u8..16 {
        push(
            "reserved opcode",
            untagged(0x41, 0x40 | op, 0, 0, 1, 0),
            TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode),
            (0, 2, 6),
        );
    }
    push(
        "Send tagged",
        tagged(0xc1, 0x43, 0, 0),
        TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode),
        (0, 2, 6),
    );
    push(
        "Write untagged",
        untagged(0x41, 0x40, 0, 0, 1, 0),
        TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode),
        (0, 2, 6),
    );
    // QN.
    let mut v = untagged(0x41, 0x43, 0, 3, 1, 0);
    send(&mut v);
    push(
        "QN 3",
        v,
        TermError::DdpUntagged(DdpUntagged::InvalidQn),
        (1, 2, 1),
    );
    push(
        "QN 0xffffffff",
        untagged(0x41, 0x43, 0, u32::MAX, 1, 0),
        TermError::DdpUntagged(DdpUntagged::InvalidQn),
        (1, 2, 1),
    );
    push(
        "Send on QN 1",
        untagged(0x41, 0x43, 0, 1, 1, 0),
        TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode),
        (0, 2, 6),
    );
    // Read Request shape.
    let mut rr = untagged(0x41, 0x41, 0, 1, 1, 0);
    rr.extend_from_slice(&[0u8; 28]);
    let mut rr_mo = untagged(0x41, 0x41, 0, 1, 1, 4);
    rr_mo.extend_from_slice(&[0u8; 28]);
    push(
        "Read Request MO 4",
        rr_mo,
        TermError::DdpUntagged(DdpUntagged::InvalidMo),
        (1, 2, 4),
    );
    let mut rr_nl = untagged(0x01, 0x41, 0, 1, 1, 0);
    rr_nl.extend_from_slice(&[0u8; 28]);
    push(
        "Read Request L=0",
        rr_nl,
        TermError::DdpUntagged(DdpUntagged::TooLong),
        (1, 2, 5),
    );
    let mut rr_long = rr.clone();
    rr_long.extend_from_slice(&[0u8; 4]);
    push(
        "Read Request 50 octets",
        rr_long,
        TermError::DdpUntagged(DdpUntagged::TooLong),
        (1, 2, 5),
    );
    push(
        "Read Request 40 octets",
        rr[..40].to_vec(),
        TermError::RdmapOperation(RdmapOperation::CatastrophicStream),
        (0, 2, 7),
    );
    // Terminate shape.
    push(
        "Terminate without control",
        untagged(0x41, 0x47, 0, 2, 1, 0),
        TermError::RdmapOperation(RdmapOperation::CatastrophicStream),
        (0, 2, 7),
    );
    // A Terminate whose header copies disagree with its bits is still a
    // Terminate (the peer is gone either way): decoded, not refused.
    let mut t_d = untagged(0x41, 0x47, 0, 2, 1, 0);
    t_d.extend_from_slice(&[0x10, 0x00, 0x40, 0x00, 0x00, 0x12]);
    let wire = frame(&t_d);
    let (segs, err) = receive(&mut rx(false, true), &wire, &[1]);
    assert_eq!(err, None, "Terminate D=1 without header");
    let t = segs[0].info.terminate.expect("decoded");
    assert_eq!(
        (t.ctrl.layer, t.ctrl.etype, t.ctrl.code, t.ddp),
        (1, 0, 0, None)
    );
    let mut t_long = untagged(0x41, 0x47, 0, 2, 1, 0);
    t_long.extend_from_slice(&[0u8; TERM_MAX_LEN + 4]);
    push(
        "Terminate too long",
        t_long,
        TermError::DdpUntagged(DdpUntagged::TooLong),
        (1, 2, 5),
    );
    for (name, ulpdu, want, _) in cases {
        assert_eq!(term_of(&ulpdu), want, "{name}");
    }
    // A well-formed Send passes.
    let mut ok = untagged(0x41, 0x43, 0, 0, 1, 0);
    ok.extend_from_slice(b"x");
    assert_eq!(term_of(&ok), None);
}

#[test]
fn ulpdu_length_above_receive_limit() {
    let mut cfg = RxConfig::new(false, true);
    cfg.max_ulpdu = 200;
    let mut ok = untagged(0x41, 0x43, 0, 0, 1, 0);
    ok.resize(201, 0);
    let (_, err) = receive(&mut RxStream::new(cfg), &frame(&ok), &[7]);
    assert_eq!(err, proto(TermError::DdpCatastrophic));
}

fn valid_stream(markers: bool, crc: bool) -> Vec<u8> {
    let mut tx = TxStream::new(markers, crc);
    let payload: Vec<u8> = (0..1500u32).map(|i| i as u8).collect();
    encode(&mut tx, TxOp::Write { stag: 9, to: 100 }, &payload, 600)
}

#[test]
fn crc_errors_in_every_region() {
    let wire = valid_stream(false, true);
    // Length field, DDP header, payload, PAD/CRC regions of the first FPDU.
    for pos in [1usize, 3, 10, 20, 500, 599, 601, 603] {
        let mut bad = wire.clone();
        bad[pos] ^= 0x01;
        if pos < 2 {
            // A length change moves the frame; any verdict but a panic is
            // fine, and nothing after it is delivered.
            let (_, err) = receive(&mut rx(false, true), &bad, &[5]);
            assert!(err.is_some());
            continue;
        }
        let (segs, err) = receive(&mut rx(false, true), &bad, &[1]);
        match err {
            Some(RxError::Crc { computed, received }) => {
                assert_ne!(computed, received);
                assert_eq!(triple(err.unwrap().term()), (2, 0, 2));
            }
            other => panic!("pos {pos}: {other:?}"),
        }
        assert!(segs.iter().all(|s| !s.done) || segs.len() == 1);
        // With CRC off the same corruption passes framing.
        let (_, err) = receive(&mut rx(false, false), &bad, &[1]);
        assert!(err.is_none() || pos < 22, "CRC off: {err:?}");
    }
}

#[test]
fn no_delivery_after_error() {
    let mut wire = valid_stream(false, true);
    wire[30] ^= 0xff;
    let mut r = rx(false, true);
    let (segs, err) = receive(&mut r, &wire, &[64]);
    assert!(matches!(err, Some(RxError::Crc { .. })));
    assert!(segs.iter().all(|s| !s.done));
    // Further input keeps failing with the same error.
    assert_eq!(r.poll(&[0u8; 16], &HwCrc), Err(err.unwrap()));
    assert_eq!(r.error(), err);
}

#[test]
fn marker_pointer_errors() {
    let good = valid_stream(true, true);
    // The stream starts with Marker 00000000; the next Marker is at 512.
    assert_eq!(&good[..4], &[0, 0, 0, 0]);
    let fpduptr = u16::from_be_bytes([good[514], good[515]]);
    assert_eq!(fpduptr, 512 - 4, "first FPDU's ULPDU_Length is at offset 4");
    // Wrong pointer, CRC off: Marker/length mismatch.
    let mut bad = good.clone();
    bad[515] ^= 0x10;
    let (_, err) = receive(&mut rx(true, false), &bad, &[3]);
    assert_eq!(
        err,
        Some(RxError::MarkerMismatch {
            expected: 508,
            found: 508 ^ 0x10
        })
    );
    assert_eq!(triple(err.unwrap().term()), (2, 0, 3));
    // Wrong pointer, CRC on and not fixed up: the CRC error wins.
    let (_, err) = receive(&mut rx(true, true), &bad, &[3]);
    assert!(matches!(err, Some(RxError::Crc { .. })));
    // Wrong pointer with a recomputed (valid) CRC: marker mismatch.
    let mut fixed = bad.clone();
    let first_len = 4 + 2 + 600 + 2 + 4 + 4; // Marker, len, ULPDU 600, PAD 2, CRC, 1 Marker
    let crc_at = first_len - 4;
    let covered: Vec<u8> = fixed[..crc_at].to_vec();
    fixed[crc_at..crc_at + 4].copy_from_slice(&crc32c::crc32c(&covered).to_le_bytes());
    let (_, err) = receive(&mut rx(true, true), &fixed, &[1]);
    assert_eq!(triple(err.unwrap().term()), (2, 0, 3));
    // The low two bits of FPDUPTR are ignored on receipt.
    let mut low = good.clone();
    low[515] |= 0x03;
    let crc_ok: Vec<u8> = low[..crc_at].to_vec();
    low[crc_at..crc_at + 4].copy_from_slice(&crc32c::crc32c(&crc_ok).to_le_bytes());
    let (_, err) = receive(&mut rx(true, true), &low, &[2]);
    assert_eq!(err, None);
    // Leading Marker must be zero.
    let mut lead = good.clone();
    lead[3] = 4;
    let (_, err) = receive(&mut rx(true, false), &lead, &[9]);
    assert_eq!(triple(err.unwrap().term()), (2, 0, 3));
}

#[test]
fn ddp_untagged_state_errors() {
    let h = |qn, msn, mo, last| UntaggedHdr {
        last,
        dv: 1,
        rsvd_ulp: 0x43,
        rsvd_ulp2: 0,
        qn,
        msn,
        mo,
    };
    let mut d = DdpRx::new();
    assert_eq!(
        d.check_untagged(&h(3, 1, 0, true), 4, Some(100)),
        Err(DdpUntagged::InvalidQn)
    );
    assert_eq!(
        d.check_untagged(&h(0, 2, 0, true), 4, Some(100)),
        Err(DdpUntagged::MsnRange)
    );
    assert_eq!(
        d.check_untagged(&h(0, 0, 0, true), 4, Some(100)),
        Err(DdpUntagged::MsnRange)
    );
    assert_eq!(
        d.check_untagged(&h(0, 1, 0, true), 4, None),
        Err(DdpUntagged::NoBuffer)
    );
    assert_eq!(
        d.check_untagged(&h(0, 1, 8, true), 4, Some(100)),
        Err(DdpUntagged::InvalidMo)
    );
    assert_eq!(
        d.check_untagged(&h(0, 1, 0, true), 101, Some(100)),
        Err(DdpUntagged::TooLong)
    );
    assert_eq!(
        d.check_untagged(&h(0, 1, u32::MAX, true), 4, Some(100)),
        Err(DdpUntagged::InvalidMo)
    );
    // Errors leave the state alone; a two-segment message then succeeds.
    assert_eq!(d, DdpRx::new());
    let p = d.check_untagged(&h(0, 1, 0, false), 60, Some(100)).unwrap();
    assert!(!p.last && p.offset == 0);
    assert!(d.in_message(0));
    assert_eq!(
        d.check_untagged(&h(0, 1, 50, true), 40, Some(100)),
        Err(DdpUntagged::InvalidMo)
    );
    assert_eq!(
        d.check_untagged(&h(0, 1, 60, true), 41, Some(100)),
        Err(DdpUntagged::TooLong)
    );
    let p = d.check_untagged(&h(0, 1, 60, true), 40, Some(100)).unwrap();
    assert!(p.last && p.message_len == 100);
    assert_eq!(d.expected_msn(0), Some(2));
    assert_eq!(d.expected_msn(1), Some(1), "queues are independent");
    assert_eq!(d.expected_msn(3), None);
    for e in [
        DdpUntagged::InvalidQn,
        DdpUntagged::NoBuffer,
        DdpUntagged::MsnRange,
        DdpUntagged::InvalidMo,
        DdpUntagged::TooLong,
    ] {
        let t = TermError::DdpUntagged(e);
        assert_eq!((t.layer(), t.etype()), (Layer::Ddp, 2));
        assert_eq!(TermError::from_wire(1, 2, e as u8), Some(t));
    }
}

#[test]
fn msn_wraps_to_zero() {
    let mut d = DdpRx::new();
    let mut h = UntaggedHdr {
        last: true,
        dv: 1,
        rsvd_ulp: 0x43,
        rsvd_ulp2: 0,
        qn: 0,
        msn: 1,
        mo: 0,
    };
    // Walk the state to 0xFFFFFFFF quickly by construction.
    for _ in 0..3 {
        d.check_untagged(&h, 0, Some(0)).unwrap();
        h.msn += 1;
    }
    let mut tx = rsiw_proto::proto::ddp::DdpTx::new();
    assert_eq!(tx.take_msn(0), Some(1));
    assert_eq!(tx.take_msn(2), Some(1));
    assert_eq!(tx.take_msn(3), None);
    // Wrap arithmetic: u32::MAX + 1 == 0 in the expected MSN.
    assert_eq!(u32::MAX.wrapping_add(1), 0);
}

#[test]
fn ddp_tagged_checks() {
    let h = |to| TaggedHdr {
        last: true,
        dv: 1,
        rsvd_ulp: 0x40,
        stag: 0x100,
        to,
    };
    let region = StagLookup::Region {
        base: 1000,
        len: 100,
    };
    assert_eq!(check_tagged(&h(1000), 100, region), Ok(()));
    assert_eq!(
        check_tagged(&h(1000), 101, region),
        Err(DdpTagged::BaseBounds)
    );
    assert_eq!(check_tagged(&h(999), 1, region), Err(DdpTagged::BaseBounds));
    assert_eq!(
        check_tagged(&h(1000), 1, StagLookup::Invalid),
        Err(DdpTagged::InvalidStag)
    );
    assert_eq!(
        check_tagged(&h(1000), 1, StagLookup::NotAssociated),
        Err(DdpTagged::StagNotAssociated)
    );
    assert_eq!(
        check_tagged(&h(u64::MAX), 1, region),
        Err(DdpTagged::ToWrap)
    );
    // Zero-length segments are not checked at all.
    assert_eq!(check_tagged(&h(u64::MAX), 0, StagLookup::Invalid), Ok(()));
    assert_eq!(
        triple(TermError::DdpTagged(DdpTagged::InvalidStag)),
        (1, 1, 0)
    );
    assert_eq!(
        triple(TermError::DdpTagged(DdpTagged::BaseBounds)),
        (1, 1, 1)
    );
    assert_eq!(
        triple(TermError::DdpTagged(DdpTagged::StagNotAssociated)),
        (1, 1, 2)
    );
    assert_eq!(triple(TermError::DdpTagged(DdpTagged::ToWrap)), (1, 1, 3));
}

#[test]
fn error_triples_roundtrip_and_reject_undefined() {
    let all = [
        TermError::RdmapCatastrophic,
        TermError::RdmapProtection(RdmapProtection::InvalidStag),
        TermError::RdmapProtection(RdmapProtection::BaseBounds),
        TermError::RdmapProtection(RdmapProtection::AccessRights),
        TermError::RdmapProtection(RdmapProtection::StagNotAssociated),
        TermError::RdmapProtection(RdmapProtection::ToWrap),
        TermError::RdmapProtection(RdmapProtection::CannotInvalidate),
        TermError::RdmapProtection(RdmapProtection::Unspecified),
        TermError::RdmapOperation(RdmapOperation::InvalidVersion),
        TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode),
        TermError::RdmapOperation(RdmapOperation::CatastrophicStream),
        TermError::RdmapOperation(RdmapOperation::CatastrophicGlobal),
        TermError::RdmapOperation(RdmapOperation::CannotInvalidate),
        TermError::RdmapOperation(RdmapOperation::Unspecified),
        TermError::DdpCatastrophic,
        TermError::Mpa(MpaCode::TcpLost),
        TermError::Mpa(MpaCode::Crc),
        TermError::Mpa(MpaCode::MarkerMismatch),
        TermError::Mpa(MpaCode::InvalidReqRep),
        TermError::Mpa(MpaCode::LocalCatastrophic),
        TermError::Mpa(MpaCode::InsufficientIrd),
        TermError::Mpa(MpaCode::NoMatchingRtr),
    ];
    for t in all {
        let (l, e, c) = triple(t);
        assert_eq!(TermError::from_wire(l, e, c), Some(t));
    }
    let mut defined = 0;
    for l in 0..16u8 {
        for e in 0..16u8 {
            for c in 0..=255u8 {
                if let Some(t) = TermError::from_wire(l, e, c) {
                    assert_eq!(triple(t), (l, e, c));
                    defined += 1;
                }
            }
        }
    }
    // 1 + 7 + 6 RDMAP, 1 + 5 + 6 DDP, 7 MPA.
    assert_eq!(defined, 33);
}

#[test]
fn terminate_header_copy_rules() {
    // An untagged Read Request with a bad source STag: RDMAP 0/1/0 with
    // M, D and R set and both headers copied.
    let mut rr = untagged(0x41, 0x41, 0, 1, 1, 0);
    rr.extend_from_slice(&hex(
        "00000011 0000000000001000 00000040 00000022 0000000000002000",
    ));
    let wire = frame(&rr);
    let (segs, err) = receive(&mut rx(false, true), &wire, &[4]);
    assert_eq!(err, None);
    let off = segs[0].info.offending();
    let t = Terminate::for_error(
        TermError::RdmapProtection(RdmapProtection::InvalidStag),
        Some(&off),
    );
    assert!(t.ctrl.m && t.ctrl.d && t.ctrl.r);
    assert_eq!(t.segment_len, 46);
    let mut body = [0u8; TERM_MAX_LEN];
    let n = t.encode(&mut body);
    assert_eq!(n, 4 + 2 + 18 + 28);
    assert_eq!(&body[..4], &[0x01, 0x00, 0xe0, 0x00]);
    assert_eq!(&body[4..6], &[0, 46]);
    assert_eq!(&body[6..24], &rr[..18]);
    assert_eq!(&body[24..52], &rr[18..46]);
    assert_eq!(Terminate::parse(&body[..n]), Ok(t));
    // Version / opcode errors: no headers even if the segment is known.
    for e in [
        TermError::RdmapOperation(RdmapOperation::InvalidVersion),
        TermError::RdmapOperation(RdmapOperation::UnexpectedOpcode),
        TermError::DdpTagged(DdpTagged::InvalidVersion),
        TermError::DdpUntagged(DdpUntagged::InvalidVersion),
        TermError::Mpa(MpaCode::Crc),
        TermError::RdmapCatastrophic,
    ] {
        let t = Terminate::for_error(e, Some(&off));
        assert!(!t.ctrl.m && !t.ctrl.d && !t.ctrl.r, "{e:?}");
        assert_eq!(t.encoded_len(), 4);
    }
    // A tagged DDP error copies the 14-octet tagged header, no RDMA header.
    let w = tagged(0xc1, 0x40, 5, 0);
    let mut wpl = w.clone();
    wpl.extend_from_slice(b"abcd");
    let (segs, _) = receive(&mut rx(false, true), &frame(&wpl), &[100]);
    let t = Terminate::for_error(
        TermError::DdpTagged(DdpTagged::BaseBounds),
        Some(&segs[0].info.offending()),
    );
    let n = t.encode(&mut body);
    assert_eq!(n, 4 + 2 + 14);
    assert_eq!(&body[..6], &[0x11, 0x01, 0xc0, 0x00, 0, 18]);
    assert_eq!(&body[6..20], &w[..]);
    // The RX parser also offers the header after a header error.
    let mut r = rx(false, true);
    let bad = untagged(0x41, 0x43, 0, 7, 1, 0);
    let (_, err) = receive(&mut r, &frame(&bad), &[1]);
    assert_eq!(err, proto(TermError::DdpUntagged(DdpUntagged::InvalidQn)));
    let off = r.offending().unwrap();
    assert_eq!(off.ddp.as_bytes(), &bad[..]);
    let t = Terminate::for_error(err.unwrap().term(), Some(&off));
    assert!(t.ctrl.d && !t.ctrl.r);
    // Malformed Terminate bodies.
    assert_eq!(Terminate::parse(&[0x20, 0x06]), Err(TermParseError::Short));
    assert_eq!(
        Terminate::parse(&[0x20, 0x06, 0, 0, 1]),
        Err(TermParseError::TrailingBytes)
    );
    assert_eq!(
        Terminate::parse(&[0x20, 0x06, 0x20, 0, 1]),
        Err(TermParseError::Short)
    );
}

#[test]
fn tx_rejects_bad_descriptions() {
    let w = TxOp::Write {
        stag: 1,
        to: u64::MAX - 10,
    };
    assert_eq!(Segmenter::new(w, 11, 1000).err(), Some(TxError::ToWrap));
    assert!(Segmenter::new(w, 10, 1000).is_ok());
    assert_eq!(
        Segmenter::new(w, 10, 127).err(),
        Some(TxError::BadMulpdu(127))
    );
    assert_eq!(
        Segmenter::new(w, 10, 64769).err(),
        Some(TxError::BadMulpdu(64769))
    );
    let rr = TxOp::ReadRequest {
        msn: 1,
        req: Default::default(),
    };
    assert_eq!(
        Segmenter::new(rr, 1, 1000).err(),
        Some(TxError::PayloadNotAllowed)
    );
    // Asking for the next piece before feeding the payload is refused.
    let mut s = Segmenter::new(TxOp::Write { stag: 1, to: 0 }, 100, 1000).unwrap();
    let mut tx = TxStream::new(false, true);
    let mut f = s.next_fpdu(&mut tx).unwrap();
    f.next_piece(&SoftCrc32c).unwrap();
    f.next_piece(&SoftCrc32c).unwrap();
    assert_eq!(
        f.next_piece(&SoftCrc32c).err(),
        Some(TxError::PayloadNotFed)
    );
    assert_eq!(
        f.feed_payload(&SoftCrc32c, &[0u8; 101]).err(),
        Some(TxError::PayloadOverfed)
    );
    f.feed_payload(&SoftCrc32c, &[0u8; 100]).unwrap();
    assert!(f.next_piece(&SoftCrc32c).unwrap().is_some());
    assert!(f.next_piece(&SoftCrc32c).unwrap().is_none());
    assert!(s.next_fpdu(&mut tx).is_none());
}

fn read_req(sink_to: u64, size: u32) -> ReadRequest {
    ReadRequest {
        sink_stag: 0x00c0_ff01,
        sink_to,
        size,
        src_stag: 0x0000_1100,
        src_to: 0xffff_8880_0100_0000,
    }
}

#[test]
fn read_request_sink_wrap() {
    let wrap = TermError::RdmapProtection(RdmapProtection::ToWrap);
    assert_eq!(triple(wrap), (0, 1, 0x04));
    assert_eq!(
        read_req(0xffff_ffff_ffff_ff00, 0x200).check_sink(),
        Err(wrap)
    );
    // The end, exclusive, at 2^64 wraps; one octet below does not.
    assert_eq!(read_req(u64::MAX - 0x1ff, 0x200).check_sink(), Err(wrap));
    assert_eq!(read_req(u64::MAX - 0x200, 0x200).check_sink(), Ok(()));
    assert_eq!(read_req(u64::MAX, 0).check_sink(), Ok(()));
    assert_eq!(read_req(1, u32::MAX).check_sink(), Ok(()));
}

/// The Terminate for hostile-peer.sh's read-sink-wrap case, octet for octet: the receiver
/// parses the Read Request (a valid segment), refuses its sink, and copies both headers.
#[test]
fn read_request_sink_wrap_terminate_wire() {
    let mut rr = untagged(0x41, 0x41, 0, 1, 1, 0);
    rr.extend_from_slice(&read_req(0xffff_ffff_ffff_ff00, 0x200).encode());
    let (segs, err) = receive(&mut rx(false, true), &frame(&rr), &[7]);
    assert_eq!(err, None);
    let info = &segs[0].info;
    let e = info.read_request.unwrap().check_sink().unwrap_err();
    let term = Terminate::for_error(e, Some(&info.offending()));
    let wire = encode(
        &mut TxStream::new(false, true),
        TxOp::Terminate { msn: 1, term },
        &[],
        1000,
    );
    let mut want = hex("0046 4147 00000000 00000002 00000001 00000000 0104e000 002e");
    want.extend_from_slice(&rr);
    want.extend_from_slice(&crc32c::crc32c(&want).to_le_bytes());
    assert_eq!(wire, want);
}

#[test]
fn ddp_header_parse_short() {
    assert!(DdpHdr::parse(&[]).is_err());
    assert!(DdpHdr::parse(&[0xc1; 13]).is_err());
    assert!(DdpHdr::parse(&[0x41; 17]).is_err());
    assert!(DdpHdr::parse(&[0xc1; 14]).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A Read Request passes `check_sink` exactly when its Read Response can be cut into
    /// segments.
    #[test]
    fn read_request_sink_check_matches_segmenter(
        sink_to in prop_oneof![any::<u64>(), (u64::MAX - u64::from(u32::MAX))..=u64::MAX],
        size in any::<u32>(),
    ) {
        let r = read_req(sink_to, size);
        let resp = TxOp::ReadResponse { stag: r.sink_stag, to: r.sink_to };
        let seg = Segmenter::new(resp, size, 1000);
        prop_assert_eq!(r.check_sink().is_ok(), seg.is_ok());
    }

    /// Arbitrary octets never panic the parser, whatever the options and
    /// chunking; after an error nothing more is delivered.
    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..3000),
                            markers in any::<bool>(), crc in any::<bool>(),
                            chunk in 1usize..300) {
        let mut r = rx(markers, crc);
        let (segs, err) = receive(&mut r, &data, &[chunk]);
        if err.is_some() {
            prop_assert_eq!(r.poll(&[1, 2, 3], &HwCrc).err(), err);
        }
        for s in segs.iter().filter(|s| s.done) {
            prop_assert_eq!(s.payload.len() as u32, s.info.payload_len);
        }
    }

    /// Mutating a valid stream yields a clean verdict, never a panic, and
    /// with CRC on a payload corruption is always caught.
    #[test]
    fn mutations_are_caught(markers in any::<bool>(), flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4)) {
        let mut wire = valid_stream(markers, true);
        for (pos, x) in &flips {
            let p = pos % wire.len();
            wire[p] ^= x;
        }
        let mut r = rx(markers, true);
        let (_, err) = receive(&mut r, &wire, &[13]);
        // Either an error, or a damaged length left the parser waiting for
        // octets that never come (nothing more is delivered).
        prop_assert!(err.is_some() || !r.at_boundary(), "corruption not detected");
    }
}
