// SPDX-License-Identifier: GPL-2.0
//! Independent check: writes a pcap of generated traffic over a synthetic
//! TCP connection and has tshark's iWARP dissectors (iwarp_mpa,
//! iwarp_ddp_rdmap) decode it. Asserts decoded field values and that no
//! frame is malformed.

mod common;
use common::{encode, HwCrc};
use rsiw_proto::proto::error::{DdpTagged, TermError};
use rsiw_proto::proto::fpdu::{RxConfig, RxEvent, RxStream, TxOp, TxStream};
use rsiw_proto::proto::negotiate::{Initiator, MpaEvent, MpaPolicy, Responder};
use rsiw_proto::proto::rdmap::{ReadRequest, Terminate};
use std::path::PathBuf;
use std::process::Command;

struct Pcap {
    buf: Vec<u8>,
    seq: [u32; 2],
    ts: u32,
}

const IP: [[u8; 4]; 2] = [[10, 0, 0, 1], [10, 0, 0, 2]];
const PORT: [u16; 2] = [40001, 5999];

fn csum(data: &[u8]) -> u16 {
    let mut s = 0u32;
    for c in data.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

impl Pcap {
    fn new() -> Self {
        let mut buf = Vec::new();
        buf.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        buf.extend_from_slice(&2u16.to_le_bytes());
        buf.extend_from_slice(&4u16.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&65535u32.to_le_bytes());
        buf.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
        Self {
            buf,
            seq: [1000, 700_000],
            ts: 0,
        }
    }

    /// One TCP segment from side `d` (0 initiator, 1 responder).
    fn seg(&mut self, d: usize, flags: u8, payload: &[u8]) {
        let o = 1 - d;
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&PORT[d].to_be_bytes());
        tcp.extend_from_slice(&PORT[o].to_be_bytes());
        tcp.extend_from_slice(&self.seq[d].to_be_bytes());
        let ack = if flags & 0x10 != 0 { self.seq[o] } else { 0 };
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(payload);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&IP[d]);
        pseudo.extend_from_slice(&IP[o]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(&tcp);
        let c = csum(&pseudo);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0]);
        ip.extend_from_slice(&IP[d]);
        ip.extend_from_slice(&IP[o]);
        let c = csum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut eth = vec![
            2,
            0,
            0,
            0,
            0,
            1 + o as u8,
            2,
            0,
            0,
            0,
            0,
            1 + d as u8,
            0x08,
            0x00,
        ];
        eth.extend_from_slice(&ip);
        eth.extend_from_slice(&tcp);
        self.ts += 1;
        self.buf.extend_from_slice(&self.ts.to_le_bytes());
        self.buf.extend_from_slice(&0u32.to_le_bytes());
        self.buf
            .extend_from_slice(&(eth.len() as u32).to_le_bytes());
        self.buf
            .extend_from_slice(&(eth.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&eth);
        let adv = payload.len() as u32 + u32::from(flags & 0x03 != 0);
        self.seq[d] = self.seq[d].wrapping_add(adv);
    }
}

/// Splits a message's wire octets into its FPDUs by re-parsing them with
/// the core's receiver (one FPDU per TCP segment, as the dissector wants).
fn fpdus(rx: &mut RxStream, wire: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut pos = 0usize;
    let mut input = wire;
    loop {
        let o = rx.poll(input, &HwCrc).expect("own traffic parses");
        pos += o.consumed;
        input = &input[o.consumed..];
        match o.event {
            RxEvent::NeedMore => break,
            RxEvent::Payload { len, .. } => {
                rx.consume_payload(&input[..len], &HwCrc).unwrap();
                pos += len;
                input = &input[len..];
            }
            RxEvent::SegmentDone => {
                out.push(wire[start..pos].to_vec());
                start = pos;
            }
            RxEvent::Header(_) => {}
        }
    }
    assert_eq!(start, wire.len());
    out
}

#[test]
fn tshark_decodes_generated_traffic() {
    let policy = MpaPolicy {
        rev: 1,
        crc: true,
        markers_rx: true,
        enhanced: false,
        ..MpaPolicy::default()
    };
    let (mut ini, req) = Initiator::new(&policy, b"rsiw-test").unwrap();
    let mut resp = Responder::new(&policy);
    assert_eq!(
        resp.on_data(req.as_bytes()).event,
        MpaEvent::RequestReceived
    );
    let (rep, rn) = resp.accept(b"ok").unwrap();
    let MpaEvent::Established(inn) = ini.on_data(rep.as_bytes()).event else {
        panic!("not established");
    };
    assert!(inn.crc && inn.markers_tx && rn.markers_tx);

    let mut p = Pcap::new();
    p.seg(0, 0x02, &[]);
    p.seg(1, 0x12, &[]);
    p.seg(0, 0x10, &[]);
    p.seg(0, 0x18, req.as_bytes());
    p.seg(1, 0x18, rep.as_bytes());

    let mut tx = [
        TxStream::new(inn.markers_tx, inn.crc),
        TxStream::new(rn.markers_tx, rn.crc),
    ];
    let mut rxs = [
        RxStream::new(RxConfig::new(rn.markers_rx, rn.crc)),
        RxStream::new(RxConfig::new(inn.markers_rx, inn.crc)),
    ];
    let big: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let msgs: Vec<(usize, TxOp, Vec<u8>)> = vec![
        (
            0,
            TxOp::Send {
                msn: 1,
                solicited: false,
                invalidate: None,
            },
            b"hello".to_vec(),
        ),
        (
            0,
            TxOp::Send {
                msn: 2,
                solicited: true,
                invalidate: Some(0x0000_ab01),
            },
            vec![0x5a; 40],
        ),
        (
            0,
            TxOp::Write {
                stag: 0x1234_5600,
                to: 0x10_0000,
            },
            big.clone(),
        ),
        (
            0,
            TxOp::ReadRequest {
                msn: 1,
                req: ReadRequest {
                    sink_stag: 0x0000_7701,
                    sink_to: 0x2000,
                    size: 1000,
                    src_stag: 0x0000_8802,
                    src_to: 0x3000,
                },
            },
            vec![],
        ),
        (
            1,
            TxOp::ReadResponse {
                stag: 0x0000_7701,
                to: 0x2000,
            },
            big[..1000].to_vec(),
        ),
    ];
    for (d, op, payload) in &msgs {
        let wire = encode(&mut tx[*d], *op, payload, 1442);
        for f in fpdus(&mut rxs[*d], &wire) {
            p.seg(*d, 0x18, &f);
        }
    }
    // Responder terminates on a (pretend) bounds violation of the Write.
    let write_hdr = {
        let w = encode(
            &mut TxStream::new(false, false),
            msgs[2].1,
            &big[..100],
            1442,
        );
        let mut r = RxStream::new(RxConfig::new(false, false));
        match r.poll(&w, &HwCrc).unwrap().event {
            RxEvent::Header(s) => s,
            e => panic!("{e:?}"),
        }
    };
    let term = Terminate::for_error(
        TermError::DdpTagged(DdpTagged::BaseBounds),
        Some(&write_hdr.offending()),
    );
    let wire = encode(&mut tx[1], TxOp::Terminate { msn: 1, term }, &[], 1442);
    for f in fpdus(&mut rxs[1], &wire) {
        p.seg(1, 0x18, &f);
    }

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rsiw-iwarp.pcap");
    std::fs::write(&path, &p.buf).unwrap();

    let fields = [
        "frame.number",
        "iwarp_mpa.key.req",
        "iwarp_mpa.key.rep",
        "iwarp_mpa.marker_flag",
        "iwarp_mpa.crc_flag",
        "iwarp_mpa.rev",
        "iwarp_mpa.pdlength",
        "iwarp_mpa.ulpdulength",
        "iwarp_mpa.crc_check",
        "iwarp_mpa.marker_fpduptr",
        "iwarp_ddp.tagged_flag",
        "iwarp_ddp.last_flag",
        "iwarp_ddp.dv",
        "iwarp_ddp.stag",
        "iwarp_ddp.tagged_offset",
        "iwarp_ddp.qn",
        "iwarp_ddp.msn",
        "iwarp_ddp.mo",
        "iwarp_rdma.version",
        "iwarp_rdma.opcode",
        "iwarp_rdma.inval_stag",
        "iwarp_rdma.sinkstag",
        "iwarp_rdma.sinkto",
        "iwarp_rdma.rdmardsz",
        "iwarp_rdma.srcstag",
        "iwarp_rdma.srcto",
        "iwarp_rdma.term_layer",
        "iwarp_rdma.term_etype_ddp",
        "iwarp_rdma.term_errcode_ddp_tagged",
        "iwarp_rdma.term_hdrct_m",
        "iwarp_rdma.hdrct_d",
        "iwarp_rdma.hdrct_r",
        "iwarp_rdma.term_ddp_seg_len",
        "iwarp_rdma.term_ddp_h",
        "data.data",
        "_ws.malformed",
        "_ws.expert.severity",
        "_ws.col.Info",
    ];
    let mut cmd = Command::new("tshark");
    // The Send payloads are not RPC-over-RDMA; keep that heuristic away.
    cmd.arg("-r").arg(&path).args([
        "--disable-protocol",
        "rpcordma",
        "-o",
        "tcp.check_checksum:TRUE",
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd
        .output()
        .expect("tshark is installed by scripts/deps.sh");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<std::collections::HashMap<&str, &str>> = text
        .lines()
        .map(|l| fields.iter().copied().zip(l.split('|')).collect())
        .collect();
    let dump = || text.clone();
    // Frames: 3 handshake, Request, Reply, then FPDUs.
    assert!(rows.len() >= 12, "{}", dump());
    for r in &rows {
        assert_eq!(r["_ws.malformed"], "", "malformed frame: {}", dump());
        assert!(
            !r["_ws.expert.severity"].contains("8388608"),
            "expert error: {}",
            dump()
        );
    }
    let req = &rows[3];
    assert!(!req["iwarp_mpa.key.req"].is_empty(), "{}", dump());
    assert_eq!(req["iwarp_mpa.marker_flag"], "1");
    assert_eq!(req["iwarp_mpa.crc_flag"], "1");
    assert_eq!(req["iwarp_mpa.rev"], "1");
    assert_eq!(req["iwarp_mpa.pdlength"], "9");
    let rep = &rows[4];
    assert!(!rep["iwarp_mpa.key.rep"].is_empty(), "{}", dump());
    let fp: Vec<_> = rows[5..].iter().collect();
    // Every FPDU decoded with a good CRC.
    for r in &fp {
        assert!(
            !r["iwarp_mpa.ulpdulength"].is_empty(),
            "not decoded: {}",
            dump()
        );
        assert!(!r["iwarp_ddp.dv"].is_empty(), "no DDP: {}", dump());
        assert_eq!(r["iwarp_ddp.dv"], "1");
        assert_eq!(r["iwarp_rdma.version"], "1");
    }
    let crc_checked = fp
        .iter()
        .filter(|r| !r["iwarp_mpa.crc_check"].is_empty())
        .count();
    assert_eq!(
        crc_checked,
        fp.len(),
        "CRC checked on every FPDU: {}",
        dump()
    );
    // Send "hello".
    let s = fp[0];
    assert_eq!(s["iwarp_rdma.opcode"], "0x03");
    assert_eq!(
        (s["iwarp_ddp.qn"], s["iwarp_ddp.msn"], s["iwarp_ddp.mo"]),
        ("0", "1", "0")
    );
    assert_eq!(s["iwarp_mpa.ulpdulength"], "23");
    // Send with SE and Invalidate.
    let s = fp[1];
    assert_eq!(s["iwarp_rdma.opcode"], "0x06");
    assert_eq!(s["iwarp_rdma.inval_stag"], "43777");
    assert_eq!(s["iwarp_ddp.msn"], "2");
    // Write: 3000 octets in 1442-octet ULPDUs: 1428 + 1428 + 144.
    let w: Vec<_> = fp
        .iter()
        .filter(|r| r["iwarp_rdma.opcode"] == "0x00")
        .collect();
    assert_eq!(w.len(), 3, "{}", dump());
    let tos: Vec<_> = w.iter().map(|r| r["iwarp_ddp.tagged_offset"]).collect();
    assert_eq!(
        tos,
        [
            "0x0000000000100000",
            "0x0000000000100594",
            "0x0000000000100b28"
        ]
    );
    assert_eq!(w[0]["iwarp_ddp.stag"], "0x12345600");
    // Marker back pointers as the dissector reads them at its own idea of
    // the Marker positions (every 512 octets from the first FPDU of each
    // direction): any position error would show payload octets here.
    let ptrs: Vec<_> = w.iter().map(|r| r["iwarp_mpa.marker_fpduptr"]).collect();
    assert_eq!(ptrs, ["412,924,1436", "488,1000", "56"]);
    // The dissector strips the Markers before DDP. Wireshark 4.0 skips 512
    // instead of 508 octets after the first Marker of an FPDU, so only data
    // up to the second Marker is comparable (396 + 508 octets in FPDU 1);
    // an FPDU with a single Marker compares in full.
    let hexs = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert!(
        w[0]["data.data"].starts_with(&hexs(&big[..904])),
        "{}",
        dump()
    );
    assert_eq!(w[2]["data.data"], hexs(&big[2856..]));
    let lasts: Vec<_> = w.iter().map(|r| r["iwarp_ddp.last_flag"]).collect();
    assert_eq!(lasts, ["0", "0", "1"]);
    // Read Request.
    let rr = fp
        .iter()
        .find(|r| r["iwarp_rdma.opcode"] == "0x01")
        .expect("read request");
    assert_eq!(rr["iwarp_ddp.qn"], "1");
    assert_eq!(rr["iwarp_rdma.sinkstag"], "0x00007701");
    assert_eq!(rr["iwarp_rdma.sinkto"], "0x0000000000002000");
    assert_eq!(rr["iwarp_rdma.rdmardsz"], "1000");
    assert_eq!(rr["iwarp_rdma.srcstag"], "0x00008802");
    assert_eq!(rr["iwarp_rdma.srcto"], "0x0000000000003000");
    // Read Response.
    let rs = fp
        .iter()
        .find(|r| r["iwarp_rdma.opcode"] == "0x02")
        .expect("read response");
    assert_eq!(rs["iwarp_ddp.stag"], "0x00007701");
    // Starts on a Marker boundary: leading Marker 0, then two inside.
    assert_eq!(rs["iwarp_mpa.marker_fpduptr"], "0,508,1020");
    assert!(rs["data.data"].starts_with(&hexs(&big[..492])));
    assert_eq!(rs["iwarp_ddp.last_flag"], "1");
    // Terminate: DDP / tagged buffer / base-bounds, M and D set.
    let t = fp
        .iter()
        .find(|r| r["iwarp_rdma.opcode"] == "0x07")
        .expect("terminate");
    assert_eq!(t["iwarp_ddp.qn"], "2");
    assert_eq!(t["iwarp_rdma.term_layer"], "0x01");
    assert_eq!(t["iwarp_rdma.term_etype_ddp"], "0x01");
    assert_eq!(t["iwarp_rdma.term_errcode_ddp_tagged"], "0x01");
    assert_eq!(t["iwarp_rdma.term_hdrct_m"], "1");
    assert_eq!(t["iwarp_rdma.hdrct_d"], "1");
    assert_eq!(t["iwarp_rdma.hdrct_r"], "0");
    assert_eq!(t["iwarp_rdma.term_ddp_seg_len"], "0072");
    assert_eq!(t["iwarp_rdma.term_ddp_h"], "c140123456000000000000100000");

    // The CRC verdict is only in the tree text: every FPDU must say Good.
    let v = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["--disable-protocol", "rpcordma", "-V"])
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&v.stdout);
    assert_eq!(tree.matches("(Good CRC32)").count(), fp.len(), "{tree}");
    assert_eq!(tree.matches("Bad CRC32").count(), 0);
}
