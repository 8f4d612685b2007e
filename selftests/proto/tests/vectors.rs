// SPDX-License-Identifier: GPL-2.0
//! Byte-exact vectors: CRC32c check values, RFC 5044 §4.4 Figures 4-6,
//! the seeds checklist §2.8 vectors, MPA frames and MULPDU (RFC 5044 §4.5).

mod common;
use common::{encode, hex, receive, rx, HwCrc};
use rsiw_proto::proto::crc::{checksum, from_wire, to_wire, Crc32c, CRC32C_INIT};
use rsiw_proto::proto::ddp::DdpHdr;
use rsiw_proto::proto::error::{DdpUntagged, MpaCode, TermError};
use rsiw_proto::proto::fpdu::{mulpdu, pad_len, TxOp, TxStream};
use rsiw_proto::proto::mpa::{
    EnhancedData, FrameKind, MpaFrame, MpaHeader, RtrSet, KEY_REP, KEY_REQ,
};
use rsiw_proto::proto::rdmap::{Opcode, ReadRequest, TermControl, Terminate};
use rsiw_proto::soft_crc::SoftCrc32c;

fn send(msn: u32) -> TxOp {
    TxOp::Send {
        msn,
        solicited: false,
        invalidate: None,
    }
}

#[test]
fn crc32c_standard_check_values() {
    let inc: Vec<u8> = (0u8..32).collect();
    let dec: Vec<u8> = (0u8..32).rev().collect();
    let cases: [(&[u8], u32); 5] = [
        (&[0u8; 32], 0x8A91_36AA),
        (&[0xffu8; 32], 0x62A8_AB43),
        (&inc, 0x46DD_794E),
        (&dec, 0x113F_DB5C),
        (b"123456789", 0xE306_9283),
    ];
    for (data, want) in cases {
        assert_eq!(checksum(&SoftCrc32c, data), want, "soft {data:02x?}");
        assert_eq!(checksum(&HwCrc, data), want, "crc32c crate");
        assert_eq!(crc32c::crc32c(data), want);
    }
    // 32 zero octets go on the wire as aa 36 91 8a.
    assert_eq!(to_wire(0x8A91_36AA), [0xaa, 0x36, 0x91, 0x8a]);
    assert_eq!(from_wire([0x52, 0x23, 0x99, 0x83]), 0x8399_2352);
}

#[test]
fn crc32c_soft_matches_crate_on_splits() {
    let data: Vec<u8> = (0..4099u32).map(|i| (i * 7 + i / 13) as u8).collect();
    let want = crc32c::crc32c(&data);
    for split in [0, 1, 7, 8, 9, 63, 64, 1000, 4098, 4099] {
        let (a, b) = data.split_at(split);
        let r = SoftCrc32c.update(SoftCrc32c.update(CRC32C_INIT, a), b);
        assert_eq!(!r, want, "split {split}");
        let mut dst = vec![0u8; data.len()];
        let r = HwCrc.copy_update(CRC32C_INIT, &data, &mut dst);
        assert_eq!(!r, want);
        assert_eq!(dst, data);
    }
}

#[test]
fn rfc5044_figure5_first_fpdu_with_marker() {
    let mut tx = TxStream::new(true, true);
    let wire = encode(&mut tx, send(1), &[0u8; 24], 1442);
    let want = hex("00000000 002a 4143 00000000 00000000 00000001 00000000
         000000000000000000000000000000000000000000000000 52239983");
    assert_eq!(wire, want);
    // CRC covers the leading Marker.
    assert_eq!(checksum(&SoftCrc32c, &want[..48]), 0x8399_2352);
    let (segs, err) = receive(&mut rx(true, true), &wire, &[1]);
    assert_eq!(err, None);
    assert_eq!(segs.len(), 1);
    assert!(segs[0].done);
    assert_eq!(segs[0].payload, vec![0u8; 24]);
}

#[test]
fn rfc5044_figure6_marker_inside_second_fpdu() {
    let mut tx = TxStream::new(true, true);
    // First FPDU: 4 (Marker) + 2 + 482 + 0 + 4 = 492 octets = 0x1EC.
    let first = encode(&mut tx, send(1), &[0u8; 464], 1442);
    assert_eq!(first.len(), 0x1ec);
    let second = encode(&mut tx, send(2), &[0u8; 24], 1442);
    let want = hex("002a 4143 00000000 00000000 00000002 00000000 00000014
         000000000000000000000000000000000000000000000000 84925898");
    assert_eq!(second, want);
    // Without the Marker the CRC would differ (TRK-2).
    let mut no_marker = want[..20].to_vec();
    no_marker.extend_from_slice(&want[24..48]);
    assert_eq!(checksum(&SoftCrc32c, &no_marker), 0xDEBE_0F29);
    let mut all = first.clone();
    all.extend_from_slice(&second);
    for chunks in [&[1usize][..], &[3, 5, 7], &[600]] {
        let (segs, err) = receive(&mut rx(true, true), &all, chunks);
        assert_eq!(err, None);
        assert_eq!(segs.len(), 2);
        assert!(segs.iter().all(|s| s.done));
        match segs[1].info.hdr {
            DdpHdr::Untagged(u) => assert_eq!(u.msn, 2),
            _ => panic!("untagged expected"),
        }
    }
}

#[test]
fn rfc5044_figure4_marker_inside_ddp_header() {
    let mut tx = TxStream::new(true, true);
    // Bring the next ULPDU_Length to offset 500: 4 + 2 + 490 + 4 = 500.
    let first = encode(&mut tx, send(1), &[0u8; 472], 1442);
    assert_eq!(first.len(), 500);
    let w = encode(
        &mut tx,
        TxOp::Write {
            stag: 0x1122_3344,
            to: 0x0102_0304_0506_0708,
        },
        &[0xaa, 0xbb],
        1442,
    );
    assert_eq!(w.len(), 28, "FPDU with one Marker and 2 PAD octets");
    assert_eq!(&w[0..2], &[0x00, 0x10], "ULPDU_Length 0x10");
    // The Marker follows ULPDU octet 9 and points 12 octets back.
    assert_eq!(&w[12..16], &[0, 0, 0, 0x0c]);
    assert_eq!(&w[22..24], &[0, 0], "PAD");
    assert_eq!(pad_len(0x10), 2);
    let mut all = first;
    all.extend_from_slice(&w);
    let (segs, err) = receive(&mut rx(true, true), &all, &[1]);
    assert_eq!(err, None);
    assert_eq!(segs[1].payload, vec![0xaa, 0xbb]);
    assert_eq!(
        segs[1].info.hdr,
        DdpHdr::Tagged(rsiw_proto::proto::ddp::TaggedHdr {
            last: true,
            dv: 1,
            rsvd_ulp: 0x40,
            stag: 0x1122_3344,
            to: 0x0102_0304_0506_0708
        })
    );
}

fn one(op: TxOp, payload: &[u8]) -> Vec<u8> {
    encode(&mut TxStream::new(false, true), op, payload, 1454)
}

#[test]
fn checklist_vectors_no_markers() {
    let term = Terminate::for_error(TermError::Mpa(MpaCode::InsufficientIrd), None);
    let cases: Vec<(TxOp, &[u8], &str)> = vec![
        (
            TxOp::Write { stag: 1, to: 0 },
            &[],
            "000e c140 00000001 0000000000000000 ebd34c5f",
        ),
        (
            send(1),
            &[],
            "0012 4143 00000000 00000000 00000001 00000000 587be8c4",
        ),
        (
            TxOp::ReadRequest {
                msn: 1,
                req: ReadRequest {
                    sink_stag: 0,
                    sink_to: 0,
                    size: 0,
                    src_stag: 1,
                    src_to: 0,
                },
            },
            &[],
            "002e 4141 00000000 00000001 00000001 00000000 00000000 0000000000000000
             00000000 00000001 0000000000000000 ba10e3c9",
        ),
        (
            TxOp::ReadResponse { stag: 0, to: 0 },
            &[],
            "000e c142 00000000 0000000000000000 6975d6ca",
        ),
        (
            TxOp::Terminate { msn: 1, term },
            &[],
            "0016 4147 00000000 00000002 00000001 00000000 20060000 6540fb1b",
        ),
        (
            send(1),
            b"hello",
            "0017 4143 00000000 00000000 00000001 00000000 68656c6c6f 000000 b990b10c",
        ),
    ];
    for (op, payload, want) in cases {
        let wire = one(op, payload);
        assert_eq!(wire, hex(want), "{op:?}");
        let (segs, err) = receive(&mut rx(false, true), &wire, &[2]);
        assert_eq!(err, None);
        assert_eq!(segs[0].info.opcode, op.opcode());
        assert_eq!(segs[0].payload, payload);
    }
}

#[test]
fn send_with_invalidate_and_se_encodings() {
    for (sol, inv, opcode) in [
        (false, Some(0xdead_beef), Opcode::SendInvalidate),
        (true, None, Opcode::SendSe),
        (true, Some(7), Opcode::SendSeInvalidate),
    ] {
        let wire = one(
            TxOp::Send {
                msn: 9,
                solicited: sol,
                invalidate: inv,
            },
            b"x",
        );
        assert_eq!(wire[3], 0x40 | opcode as u8);
        assert_eq!(&wire[4..8], &inv.unwrap_or(0).to_be_bytes());
        let (segs, _) = receive(&mut rx(false, true), &wire, &[100]);
        assert_eq!(segs[0].info.opcode, opcode);
    }
}

#[test]
fn terminate_control_layout_and_siw_nibble_swap() {
    let c = TermControl {
        layer: 1,
        etype: 2,
        code: 5,
        m: true,
        d: true,
        r: false,
    };
    assert_eq!(c.encode(), [0x12, 0x05, 0xc0, 0x00]);
    assert_eq!(TermControl::parse([0x12, 0x05, 0xc0, 0x00]), c);
    assert_eq!(
        c.error(),
        Some(TermError::DdpUntagged(DdpUntagged::TooLong))
    );
    // Linux C siw's little-endian bitfield emits 21 05 03 00 for the same.
    let siw = [0x21, 0x05, 0x03, 0x00];
    assert_eq!(TermControl::parse_siw_swapped(siw), c);
    assert!(TermControl::looks_nibble_swapped(siw));
    assert!(!TermControl::looks_nibble_swapped(c.encode()));
}

#[test]
fn mpa_frames_from_checklist() {
    let h = MpaHeader {
        kind: FrameKind::Request,
        markers: false,
        crc: true,
        reject: false,
        enhanced: false,
        large_fpdu: false,
        res: 0,
        rev: 1,
        pd_len: 0,
    };
    let f = MpaFrame::build(&h, None, &[]).unwrap();
    let mut want = KEY_REQ.to_vec();
    want.extend_from_slice(&[0x40, 0x01, 0x00, 0x00]);
    assert_eq!(f.as_bytes(), &want[..]);
    assert_eq!(&KEY_REQ, &hex("4D50412049442052657120467261 6D65")[..]);
    assert_eq!(&KEY_REP, &hex("4D50412049442052657020467261 6D65")[..]);

    let enh = EnhancedData {
        p2p: true,
        ird: 16,
        ord: 16,
        rtr: RtrSet {
            send: false,
            write: true,
            read: false,
        },
    };
    let h2 = MpaHeader { rev: 2, ..h };
    let f = MpaFrame::build(&h2, Some(&enh), &[]).unwrap();
    assert_eq!(&f.as_bytes()[16..], &hex("50 02 0004 8010 8010")[..]);
    let rep = MpaHeader {
        kind: FrameKind::Reply,
        reject: true,
        ..h2
    };
    let f = MpaFrame::build(&rep, Some(&enh), &[]).unwrap();
    assert_eq!(&f.as_bytes()[..16], &KEY_REP);
    assert_eq!(&f.as_bytes()[16..20], &hex("70 02 0004")[..]);
    let back = MpaHeader::parse(f.as_bytes(), FrameKind::Reply).unwrap();
    assert!(back.reject && back.enhanced && back.crc && back.rev == 2 && back.pd_len == 4);
    assert_eq!(EnhancedData::parse(&f.as_bytes()[20..]), Some(enh));
    // B lives in the IRD word, C and D in the ORD word; 14-bit masks.
    let all = EnhancedData {
        p2p: true,
        ird: 0x3fff,
        ord: 0x1234,
        rtr: RtrSet {
            send: true,
            write: true,
            read: true,
        },
    };
    assert_eq!(all.encode(), [0xff, 0xff, 0xd2, 0x34]);
    // A=0: B/C/D are not sent and are ignored on receipt.
    assert_eq!(
        EnhancedData::parse(&[0x40, 0x01, 0xc0, 0x02]).unwrap(),
        EnhancedData {
            p2p: false,
            ird: 1,
            ord: 2,
            rtr: RtrSet::NONE
        }
    );
    // Linux NFS/RDMA client Private Data after the enhanced prefix.
    let nfs = hex("f6ab0e18 01 01 03 03");
    let f = MpaFrame::build(&h2, Some(&enh), &nfs).unwrap();
    assert_eq!(&f.as_bytes()[18..20], &[0, 12]);
}

#[test]
fn mulpdu_table() {
    for (emss, with, without) in [
        (1460, 1442, 1454),
        (1448, 1430, 1442),
        (8960, 8882, 8954),
        (536, 522, 530),
    ] {
        assert_eq!(mulpdu(emss, true), with, "EMSS {emss} markers");
        assert_eq!(mulpdu(emss, false), without, "EMSS {emss}");
    }
    // Never below 128, never above 64768.
    assert_eq!(mulpdu(100, true), 128);
    assert_eq!(mulpdu(0, false), 128);
    assert_eq!(mulpdu(1 << 20, false), 64768);
}

/// Terminates laid out as Linux C siw's `siw_send_terminate` builds them on a
/// little-endian host (bitfield Terminate Control, its own header copies):
/// the receiver decodes each, never refuses one.
#[test]
fn terminate_from_c_siw_is_decoded() {
    // DDP tagged error 1/1/0x00 (invalid STag): M and D in bits 0 and 1,
    // then the segment length and the 14-octet tagged header.
    let tagged = [0x81u8, 0x40, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0x10, 0];
    let mut body = vec![0x11, 0x00, 0x03, 0x00, 0x04, 0x00];
    body.extend_from_slice(&tagged);
    let t = Terminate::parse_received(&body).unwrap();
    assert_eq!((t.ctrl.layer, t.ctrl.etype, t.ctrl.code), (1, 1, 0));
    assert!(t.ctrl.m && t.ctrl.d && !t.ctrl.r);
    assert_eq!(t.segment_len, 0x400);
    assert_eq!(t.ddp.unwrap().as_bytes(), &tagged[..]);
    // RDMAP remote protection 0/1/0x02 on a Send: siw sets M, D and R but
    // copies only the 18-octet untagged header. The control survives.
    let untagged = [0x41u8, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    let mut body = vec![0x10, 0x02, 0x07, 0x00, 0x00, 0x20];
    body.extend_from_slice(&untagged);
    let t = Terminate::parse_received(&body).unwrap();
    assert_eq!((t.ctrl.layer, t.ctrl.etype, t.ctrl.code), (0, 1, 2));
    assert!(t.ddp.is_none() && t.rdma.is_none());
    // RDMAP operation error 0/2/0xff with no headers: siw's first octet is
    // 0x20. (Codes 0x05-0x07 also name MPA errors read the RFC way: there the
    // layout cannot be told apart.)
    let t = Terminate::parse_received(&[0x20, 0xff, 0x00, 0x00]).unwrap();
    assert_eq!((t.ctrl.layer, t.ctrl.etype, t.ctrl.code), (0, 2, 0xff));
    // An RFC 5040 Terminate decodes as before, and a short control still fails.
    let rfc = [0x12u8, 0x05, 0x00, 0x00];
    assert_eq!(Terminate::parse_received(&rfc), Terminate::parse(&rfc));
    assert!(Terminate::parse_received(&[0x12, 0x05]).is_err());
    // Through the receive path: a siw Terminate frame ends in a Terminate
    // segment, not in a protocol error.
    let mut ulpdu = vec![0x41u8, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0];
    ulpdu.extend_from_slice(&[0x10, 0x02, 0x07, 0x00, 0x00, 0x20]);
    ulpdu.extend_from_slice(&untagged);
    let wire = common::frame(&ulpdu);
    let (segs, err) = receive(&mut rx(false, true), &wire, &[wire.len()]);
    assert_eq!(err, None);
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].info.opcode, Opcode::Terminate);
    assert_eq!(segs[0].info.terminate.unwrap().ctrl.code, 2);
}
