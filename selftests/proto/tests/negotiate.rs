// SPDX-License-Identifier: GPL-2.0
//! MPA startup state machines (RFC 5044 §7.1, RFC 6581 §9-§10).

mod common;
use common::{encode, receive, rx, HwCrc};
use proptest::prelude::*;
use rsiw_proto::proto::ddp::DdpHdr;
use rsiw_proto::proto::error::{MpaCode, TermError};
use rsiw_proto::proto::fpdu::{setup_terminate, TxOp, TxStream, SETUP_TERM_FPDU_MAX};
use rsiw_proto::proto::mpa::{
    EnhancedData, FrameError, FrameKind, MpaFrame, MpaHeader, RtrSet, RtrType, KEY_REP, KEY_REQ,
};
use rsiw_proto::proto::negotiate::{
    check_first_fpdu, Initiator, MpaEvent, MpaFailure, MpaPolicy, Negotiated, Responder,
};
use rsiw_proto::proto::rdmap::{Opcode, ReadRequest, Terminate};

const W: RtrSet = RtrSet {
    send: false,
    write: true,
    read: false,
};
const R: RtrSet = RtrSet {
    send: false,
    write: false,
    read: true,
};
const S: RtrSet = RtrSet {
    send: true,
    write: false,
    read: false,
};

/// Runs a full exchange, feeding every frame one octet at a time.
fn run(
    ip: &MpaPolicy,
    rp: &MpaPolicy,
    pd: &[u8],
) -> (Result<Negotiated, MpaEvent>, Option<Negotiated>) {
    let (mut i, req) = Initiator::new(ip, pd).unwrap();
    let mut r = Responder::new(rp);
    let mut ev = MpaEvent::NeedMore;
    for b in req.as_bytes() {
        let s = r.on_data(core::slice::from_ref(b));
        assert_eq!(s.consumed, 1);
        ev = s.event;
    }
    if ev != MpaEvent::RequestReceived {
        return (Err(ev), None);
    }
    assert_eq!(r.peer_private_data(), pd);
    let (rep, rn) = match r.accept(b"reply-pd") {
        Ok(x) => x,
        Err(f) => return (Err(MpaEvent::Failed(f)), None),
    };
    for (k, b) in rep.as_bytes().iter().enumerate() {
        let s = i.on_data(core::slice::from_ref(b));
        if k + 1 < rep.as_bytes().len() {
            assert_eq!(s.event, MpaEvent::NeedMore);
        } else {
            assert_eq!(i.peer_private_data(), b"reply-pd");
            return match s.event {
                MpaEvent::Established(n) => (Ok(n), Some(rn)),
                e => (Err(e), Some(rn)),
            };
        }
    }
    unreachable!()
}

fn pol(rev: u8, crc: bool, m: bool, enh: bool) -> MpaPolicy {
    MpaPolicy {
        rev,
        crc,
        markers_rx: m,
        enhanced: enh,
        ..MpaPolicy::default()
    }
}

#[test]
fn crc_matrix_either_side_enables() {
    for (ic, rc) in [(false, false), (false, true), (true, false), (true, true)] {
        let (i, r) = run(&pol(1, ic, false, false), &pol(1, rc, false, false), b"");
        let (i, r) = (i.unwrap(), r.unwrap());
        assert_eq!(i.crc, ic || rc);
        assert_eq!(r.crc, ic || rc);
    }
}

#[test]
fn marker_direction_matrix() {
    for (im, rm) in [(false, false), (false, true), (true, false), (true, true)] {
        let (i, r) = run(&pol(2, true, im, true), &pol(2, true, rm, true), b"x");
        let (i, r) = (i.unwrap(), r.unwrap());
        // Request M=1: responder sends Markers; Reply M=1: initiator does.
        assert_eq!(r.markers_tx, im);
        assert_eq!(i.markers_rx, im);
        assert_eq!(i.markers_tx, rm);
        assert_eq!(r.markers_rx, rm);
    }
    // A peer that cannot generate Markers refuses.
    let mut no = pol(1, true, false, false);
    no.markers_tx_ok = false;
    let (res, _) = run(&pol(1, true, true, false), &no, b"");
    assert_eq!(res, Err(MpaEvent::Failed(MpaFailure::MarkersUnsupported)));
    let (res, _) = run(&no, &pol(1, true, true, false), b"");
    assert_eq!(res, Err(MpaEvent::Failed(MpaFailure::MarkersUnsupported)));
}

#[test]
fn revisions() {
    // Rev 2 initiator, Rev 1 responder: answered with Rev 1, unenhanced is
    // only possible when the initiator is unenhanced.
    let (i, _) = run(
        &pol(2, true, false, false),
        &pol(1, true, false, false),
        b"",
    );
    assert_eq!(i.unwrap().rev, 1);
    let (i, _) = run(&pol(1, true, false, false), &pol(2, true, false, true), b"");
    let i = i.unwrap();
    assert_eq!((i.rev, i.enhanced), (1, false));
    // Enhanced request to a non-enhanced responder: closed (RFC 6581 §10).
    let (res, _) = run(&pol(2, true, false, true), &pol(2, true, false, false), b"");
    assert_eq!(
        res,
        Err(MpaEvent::Failed(MpaFailure::Close(FrameError::BadEnhanced)))
    );
    // Raw frames with bad revisions.
    for (rev, enh, pd) in [
        (0u8, false, 0u16),
        (3, false, 0),
        (1, true, 4),
        (2, true, 2),
    ] {
        let h = MpaHeader {
            kind: FrameKind::Request,
            markers: false,
            crc: true,
            reject: false,
            enhanced: enh,
            large_fpdu: false,
            res: 0,
            rev,
            pd_len: pd,
        };
        let mut f = h.encode().to_vec();
        f.extend(std::iter::repeat_n(0u8, pd as usize));
        let mut r = Responder::new(&MpaPolicy::default());
        let s = r.on_data(&f);
        let want = if enh {
            FrameError::BadEnhanced
        } else {
            FrameError::BadRevision(rev)
        };
        assert_eq!(
            s.event,
            MpaEvent::Failed(MpaFailure::Close(want)),
            "rev {rev}"
        );
    }
}

#[test]
fn malformed_frames_close() {
    let p = MpaPolicy::default();
    // Wrong key; the other frame's key means initiator/initiator startup.
    let (_, req) = Initiator::new(&p, b"").unwrap();
    let mut r = Responder::new(&p);
    let mut bad = req.as_bytes().to_vec();
    bad[9] = b'p';
    let s = r.on_data(&bad);
    assert_eq!(
        s.event,
        MpaEvent::Failed(MpaFailure::Close(FrameError::BadKey { other_kind: true }))
    );
    let mut r = Responder::new(&p);
    bad[0] = b'X';
    let s = r.on_data(&bad[..16]);
    assert_eq!(
        s.event,
        MpaEvent::Failed(MpaFailure::Close(FrameError::BadKey { other_kind: false }))
    );
    // Stays failed.
    assert!(matches!(r.on_data(b"more").event, MpaEvent::Failed(_)));
    // A Request arriving at an initiator.
    let (mut i, req2) = Initiator::new(&p, b"").unwrap();
    let s = i.on_data(req2.as_bytes());
    assert_eq!(
        s.event,
        MpaEvent::Failed(MpaFailure::Close(FrameError::BadKey { other_kind: true }))
    );
    // PD_Length above 512.
    let mut f = KEY_REQ.to_vec();
    f.extend_from_slice(&[0x40, 1, 0x02, 0x01]);
    let mut r = Responder::new(&p);
    assert_eq!(
        r.on_data(&f).event,
        MpaEvent::Failed(MpaFailure::Close(FrameError::PrivateDataTooLong(513)))
    );
    // 512 octets of Private Data are fine; 513 cannot be encoded.
    let h = MpaHeader::parse(req.as_bytes(), FrameKind::Request).unwrap();
    assert!(MpaFrame::build(&h, None, &[7u8; 512]).is_ok());
    assert_eq!(
        MpaFrame::build(&h, None, &[7u8; 513]).err(),
        Some(FrameError::EncodeTooLong)
    );
    let e = EnhancedData {
        p2p: false,
        ird: 1,
        ord: 1,
        rtr: RtrSet::NONE,
    };
    assert_eq!(
        MpaFrame::build(&h, Some(&e), &[7u8; 509]).err(),
        Some(FrameError::EncodeTooLong)
    );
    // Octets after the Request (the initiator must wait for the Reply).
    let mut r = Responder::new(&p);
    let mut f = req.as_bytes().to_vec();
    f.push(0);
    assert_eq!(
        r.on_data(&f).event,
        MpaEvent::Failed(MpaFailure::Close(FrameError::UnexpectedData))
    );
    let mut r = Responder::new(&p);
    assert_eq!(r.on_data(req.as_bytes()).event, MpaEvent::RequestReceived);
    assert_eq!(
        r.on_data(&[0]).event,
        MpaEvent::Failed(MpaFailure::Close(FrameError::UnexpectedData))
    );
}

#[test]
fn reply_stops_at_frame_end() {
    let p = MpaPolicy::default();
    let (mut i, req) = Initiator::new(&p, b"").unwrap();
    let mut r = Responder::new(&p);
    assert_eq!(r.on_data(req.as_bytes()).event, MpaEvent::RequestReceived);
    let (rep, _) = r.accept(b"").unwrap();
    let mut input = rep.as_bytes().to_vec();
    input.extend_from_slice(&[0xaa; 10]);
    let s = i.on_data(&input);
    assert_eq!(s.consumed, rep.as_bytes().len());
    assert!(matches!(s.event, MpaEvent::Established(_)));
}

#[test]
fn reject_leaves_mpa() {
    let p = MpaPolicy::default();
    let (mut i, req) = Initiator::new(&p, b"hi").unwrap();
    let mut r = Responder::new(&p);
    assert_eq!(r.on_data(req.as_bytes()).event, MpaEvent::RequestReceived);
    let rep = r.reject(b"no").unwrap();
    assert_eq!(rep.as_bytes()[16] & 0x20, 0x20);
    assert_eq!(&rep.as_bytes()[..16], &KEY_REP);
    let s = i.on_data(rep.as_bytes());
    match s.event {
        MpaEvent::Rejected(Some(e)) => assert_eq!((e.ird, e.ord), (16, 16)),
        e => panic!("{e:?}"),
    }
    assert_eq!(i.peer_private_data(), b"no");
    // R in a Request is not sent (and not checked).
    let h = MpaHeader {
        reject: true,
        ..MpaHeader::parse(req.as_bytes(), FrameKind::Request).unwrap()
    };
    assert_eq!(h.encode()[16] & 0x20, 0);
}

#[test]
fn timeouts() {
    let p = MpaPolicy::default();
    let (mut i, _) = Initiator::new(&p, b"").unwrap();
    assert_eq!(i.on_timeout(), MpaEvent::Failed(MpaFailure::Timeout));
    assert_eq!(i.on_data(b"x").event, MpaEvent::Failed(MpaFailure::Timeout));
    let mut r = Responder::new(&p);
    assert_eq!(r.on_timeout(), MpaEvent::Failed(MpaFailure::Timeout));
    // After success a late timer is harmless.
    let (res, _) = run(&p, &p, b"");
    assert!(res.is_ok());
}

fn enh(ird: u16, ord: u16, p2p: bool, rtr: RtrSet) -> MpaPolicy {
    MpaPolicy {
        ird,
        ord,
        p2p,
        rtr,
        ..MpaPolicy::default()
    }
}

/// An accepting revision 2 Reply header with enhanced data and these M and C bits, for Replies
/// crafted by hand.
fn enhanced_reply(markers: bool, crc: bool) -> MpaHeader {
    MpaHeader {
        kind: FrameKind::Reply,
        markers,
        crc,
        reject: false,
        enhanced: true,
        large_fpdu: false,
        res: 0,
        rev: 2,
        pd_len: 0,
    }
}

#[test]
fn ird_ord_negotiation() {
    // Initiator IRD 8/ORD 4, responder IRD 2/ORD 16.
    let (i, r) = run(&enh(8, 4, false, W), &enh(2, 16, false, W), b"");
    let (i, r) = (i.unwrap(), r.unwrap());
    assert_eq!((r.ird, r.ord), (2, 8), "responder ORD <= initiator IRD");
    assert_eq!((i.ird, i.ord), (8, 2), "initiator ORD <= responder IRD");
    assert_eq!((i.peer_ird, i.peer_ord), (2, 8));
    assert_eq!((r.peer_ird, r.peer_ord), (8, 4));
    // 0x3FFF: keep local values, echo 0x3FFF.
    let (i, r) = run(&enh(0x3fff, 0x3fff, false, W), &enh(3, 5, false, W), b"");
    let (i, r) = (i.unwrap(), r.unwrap());
    assert_eq!((r.ird, r.ord), (3, 5));
    assert_eq!((i.peer_ird, i.peer_ord), (0x3fff, 0x3fff));
    assert_eq!((i.ird, i.ord), (0x3fff, 0x3fff));
    // Responder ORD above the initiator's IRD cannot happen with a
    // conforming responder; craft such a Reply by hand: TERM 2/0/0x06.
    let (mut ini, _) = Initiator::new(&enh(2, 2, false, W), b"").unwrap();
    let h = enhanced_reply(false, true);
    let e = EnhancedData {
        p2p: false,
        ird: 4,
        ord: 9,
        rtr: RtrSet::NONE,
    };
    let f = MpaFrame::build(&h, Some(&e), &[]).unwrap();
    let ev = ini.on_data(f.as_bytes()).event;
    assert_eq!(
        ev,
        MpaEvent::Failed(MpaFailure::Terminate(TermError::Mpa(
            MpaCode::InsufficientIrd
        )))
    );
    // The Terminate goes out framed as the Reply negotiated: CRC (C=1), no Markers.
    assert_eq!(ini.terminate_stream(), Some(TxStream::new(false, true)));
}

/// Decodes `wire` as exactly one FPDU and checks that it is the setup Terminate for `err`:
/// untagged queue 2, MSN 1, MO 0, Last, with no headers attached.
fn assert_setup_terminate(wire: &[u8], markers: bool, crc: bool, err: TermError) {
    let (segs, e) = receive(&mut rx(markers, crc), wire, &[wire.len()]);
    assert_eq!(e, None);
    assert_eq!(segs.len(), 1, "one FPDU");
    let s = &segs[0];
    assert!(s.done);
    assert_eq!(s.info.opcode, Opcode::Terminate);
    let DdpHdr::Untagged(h) = s.info.hdr else {
        panic!("a tagged Terminate");
    };
    assert_eq!((h.qn, h.msn, h.mo, h.last), (2, 1, 0, true));
    let t = s.info.terminate.expect("Terminate body");
    let want = Terminate::for_error(err, None).ctrl;
    assert_eq!(
        (t.ctrl.layer, t.ctrl.etype, t.ctrl.code),
        (want.layer, want.etype, want.code)
    );
    assert!(!t.ctrl.m && !t.ctrl.d && !t.ctrl.r, "no headers attached");
}

#[test]
fn setup_terminate_framing() {
    for err in [
        TermError::Mpa(MpaCode::InsufficientIrd),
        TermError::Mpa(MpaCode::NoMatchingRtr),
    ] {
        for (markers, crc) in [(false, false), (false, true), (true, false), (true, true)] {
            let mut stream = TxStream::new(markers, crc);
            let mut out = [0u8; SETUP_TERM_FPDU_MAX];
            let n = setup_terminate(&mut stream, err, &HwCrc, &mut out).unwrap();
            assert_eq!(
                stream.offset() as usize,
                n,
                "the stream advanced by the FPDU"
            );
            // The same octets as the general transmit path builds.
            let term = Terminate::for_error(err, None);
            let general = encode(
                &mut TxStream::new(markers, crc),
                TxOp::Terminate { msn: 1, term },
                &[],
                1454,
            );
            assert_eq!(&out[..n], &general[..]);
            assert_setup_terminate(&out[..n], markers, crc, err);
        }
    }
    // Too small an output buffer is an error, never a partial FPDU claimed whole.
    let mut small = [0u8; 8];
    assert!(setup_terminate(
        &mut TxStream::new(false, true),
        TermError::Mpa(MpaCode::NoMatchingRtr),
        &HwCrc,
        &mut small
    )
    .is_err());
}

#[test]
fn terminate_stream_only_after_a_setup_terminate() {
    // Established: no Terminate to send.
    let (mut ini, _) = Initiator::new(&enh(4, 4, false, W), b"").unwrap();
    let mut resp = Responder::new(&enh(4, 4, false, W));
    let (_, req) = Initiator::new(&enh(4, 4, false, W), b"").unwrap();
    assert_eq!(
        resp.on_data(req.as_bytes()).event,
        MpaEvent::RequestReceived
    );
    let (reply, _) = resp.accept(b"").unwrap();
    assert!(matches!(
        ini.on_data(reply.as_bytes()).event,
        MpaEvent::Established(_)
    ));
    assert_eq!(ini.terminate_stream(), None);
    // Waiting for the Reply: none either.
    let (waiting, _) = Initiator::new(&enh(4, 4, false, W), b"").unwrap();
    assert_eq!(waiting.terminate_stream(), None);
    // No matching RTR with a Reply asking for Markers and without CRC: framed that way.
    let mut p = enh(4, 4, true, S);
    p.crc = false;
    p.markers_tx_ok = true;
    let (mut ini, _) = Initiator::new(&p, b"").unwrap();
    let h = enhanced_reply(true, false);
    let e = EnhancedData {
        p2p: true,
        ird: 4,
        ord: 4,
        rtr: W,
    };
    let f = MpaFrame::build(&h, Some(&e), &[]).unwrap();
    assert_eq!(
        ini.on_data(f.as_bytes()).event,
        MpaEvent::Failed(MpaFailure::Terminate(TermError::Mpa(
            MpaCode::NoMatchingRtr
        )))
    );
    assert_eq!(ini.terminate_stream(), Some(TxStream::new(true, false)));
}

#[test]
fn rtr_negotiation() {
    // Initiator offers Write+Read, responder supports Read only.
    let wr = RtrSet {
        send: false,
        write: true,
        read: true,
    };
    let (i, r) = run(&enh(4, 4, true, wr), &enh(4, 4, false, R), b"");
    let (i, r) = (i.unwrap(), r.unwrap());
    assert_eq!(i.rtr_send, Some(RtrType::Read));
    assert_eq!(r.rtr_accept, R);
    // Offered Send only, responder supports Write: responder offers Write,
    // initiator cannot comply: TERM 2/0/0x07.
    let (i, _) = run(&enh(4, 4, true, S), &enh(4, 4, false, W), b"");
    assert_eq!(
        i,
        Err(MpaEvent::Failed(MpaFailure::Terminate(TermError::Mpa(
            MpaCode::NoMatchingRtr
        ))))
    );
    // Preference: Write over Read over Send.
    let all = RtrSet {
        send: true,
        write: true,
        read: true,
    };
    let (i, _) = run(&enh(4, 4, true, all), &enh(4, 4, false, all), b"");
    assert_eq!(i.unwrap().rtr_send, Some(RtrType::Write));
    // Read RTR with ORD 0 / IRD 0: the Read still gets one slot each side.
    let (i, r) = run(&enh(4, 0, true, R), &enh(0, 4, false, R), b"");
    let (i, r) = (i.unwrap(), r.unwrap());
    assert_eq!(i.rtr_send, Some(RtrType::Read));
    assert_eq!(r.ird, 1);
    assert_eq!(i.ord, 1);
    // Client-server (A=0): no RTR.
    let (i, r) = run(&enh(4, 4, false, all), &enh(4, 4, false, all), b"");
    assert_eq!(i.unwrap().rtr_send, None);
    assert!(r.unwrap().rtr_accept.is_empty());
}

#[test]
fn first_fpdu_rtr_check() {
    let wr = RtrSet {
        send: false,
        write: true,
        read: true,
    };
    let (i, r) = run(&enh(4, 4, true, wr), &enh(4, 4, false, wr), b"");
    let (i, r) = (i.unwrap(), r.unwrap());
    assert_eq!(i.rtr_send, Some(RtrType::Write));
    let seg_of = |op: TxOp, len: usize| {
        let wire = encode(&mut TxStream::new(false, true), op, &vec![0u8; len], 1000);
        receive(&mut rx(false, true), &wire, &[50]).0[0].info
    };
    let zw = seg_of(TxOp::Write { stag: 1, to: 0 }, 0);
    assert_eq!(check_first_fpdu(&r, &zw), Ok(Some(RtrType::Write)));
    let rr = seg_of(
        TxOp::ReadRequest {
            msn: 1,
            req: ReadRequest {
                src_stag: 1,
                ..Default::default()
            },
        },
        0,
    );
    assert_eq!(check_first_fpdu(&r, &rr), Ok(Some(RtrType::Read)));
    let nz = seg_of(TxOp::Write { stag: 1, to: 0 }, 4);
    let zs = seg_of(
        TxOp::Send {
            msn: 1,
            solicited: false,
            invalidate: None,
        },
        0,
    );
    let rr1 = seg_of(
        TxOp::ReadRequest {
            msn: 1,
            req: ReadRequest {
                size: 1,
                ..Default::default()
            },
        },
        0,
    );
    for s in [nz, zs, rr1] {
        assert_eq!(
            check_first_fpdu(&r, &s),
            Err(TermError::Mpa(MpaCode::NoMatchingRtr))
        );
    }
}

proptest! {
    /// Arbitrary octets never panic either machine.
    #[test]
    fn garbage_startup(data in proptest::collection::vec(any::<u8>(), 0..700), chunk in 1usize..64, key in any::<bool>()) {
        let mut data = data;
        if key && data.len() >= 16 {
            data[..16].copy_from_slice(&KEY_REQ);
        }
        let mut r = Responder::new(&MpaPolicy::default());
        let (mut i, _) = Initiator::new(&MpaPolicy::default(), b"").unwrap();
        if key && data.len() >= 16 {
            let mut d2 = data.clone();
            d2[..16].copy_from_slice(&KEY_REP);
            for c in d2.chunks(chunk) { let _ = i.on_data(c); }
        }
        for c in data.chunks(chunk) {
            let s = r.on_data(c);
            prop_assert!(s.consumed <= c.len());
            if s.event == MpaEvent::RequestReceived {
                let _ = r.accept(&[]);
            }
        }
    }
}
