// SPDX-License-Identifier: GPL-2.0
//! Helpers shared by the host tests: a crates.io CRC32c engine and a
//! reference driver loop around the core's TX and RX APIs.
#![allow(dead_code)]

use rsiw_proto::proto::crc::Crc32c;
use rsiw_proto::proto::fpdu::{
    RxConfig, RxError, RxEvent, RxStream, SegmentInfo, Segmenter, TxOp, TxPiece, TxStream,
    INLINE_MAX,
};

/// CRC32c from the `crc32c` crate (hardware accelerated where available),
/// adapted to the core's raw-register trait.
#[derive(Clone, Copy, Debug, Default)]
pub struct HwCrc;

impl Crc32c for HwCrc {
    fn update(&self, reg: u32, data: &[u8]) -> u32 {
        // crc32c_append works on finished values: finished = !raw.
        !crc32c::crc32c_append(!reg, data)
    }
}

/// Encodes one message on `tx` with `payload` and returns the wire octets.
pub fn encode(tx: &mut TxStream, op: TxOp, payload: &[u8], mulpdu: u16) -> Vec<u8> {
    let mut seg = Segmenter::new(op, payload.len() as u32, mulpdu).expect("segmenter");
    let mut out = Vec::new();
    while let Some(mut f) = seg.next_fpdu(tx) {
        let start = out.len();
        while let Some(p) = f.next_piece(&HwCrc).expect("piece") {
            match p {
                TxPiece::Payload { offset, len } => {
                    let s = &payload[offset as usize..(offset + len) as usize];
                    out.extend_from_slice(s);
                    f.feed_payload(&HwCrc, s).expect("feed");
                }
                other => {
                    let b = f.bytes(&other);
                    assert!(!b.is_empty() && b.len() <= INLINE_MAX);
                    out.extend_from_slice(b);
                }
            }
        }
        assert_eq!(
            out.len() - start,
            f.wire_len() as usize,
            "wire_len matches pieces"
        );
    }
    assert!(seg.is_done());
    out
}

/// One segment as the reference receiver saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxSeg {
    pub info: SegmentInfo,
    pub payload: Vec<u8>,
    pub done: bool,
}

/// Feeds `wire` to `rx` in chunks whose sizes cycle through `chunks`
/// (0 entries are treated as 1) and collects the segments. Payload is
/// copied with `copy_payload` into the segment buffer. Stops at the first
/// error and returns it together with the segments seen so far.
pub fn receive(rx: &mut RxStream, wire: &[u8], chunks: &[usize]) -> (Vec<RxSeg>, Option<RxError>) {
    let mut segs: Vec<RxSeg> = Vec::new();
    let mut pos = 0usize;
    let mut ci = 0usize;
    while pos < wire.len() {
        let n = chunks
            .get(ci % chunks.len().max(1))
            .copied()
            .unwrap_or(wire.len())
            .max(1);
        ci += 1;
        let chunk = &wire[pos..(pos + n).min(wire.len())];
        pos += chunk.len();
        let mut input = chunk;
        loop {
            let out = match rx.poll(input, &HwCrc) {
                Ok(o) => o,
                Err(e) => return (segs, Some(e)),
            };
            input = &input[out.consumed..];
            match out.event {
                RxEvent::NeedMore => {
                    assert!(input.is_empty());
                    break;
                }
                RxEvent::Header(info) => segs.push(RxSeg {
                    info,
                    payload: Vec::new(),
                    done: false,
                }),
                RxEvent::Payload { len, offset } => {
                    let s = segs.last_mut().expect("payload before header");
                    assert_eq!(offset as usize, s.payload.len());
                    let mut dst = vec![0u8; len];
                    rx.copy_payload(&input[..len], &mut dst, &HwCrc)
                        .expect("copy");
                    s.payload.extend_from_slice(&dst);
                    input = &input[len..];
                }
                RxEvent::SegmentDone => {
                    let s = segs.last_mut().expect("done before header");
                    assert_eq!(s.payload.len() as u32, s.info.payload_len);
                    s.done = true;
                }
            }
        }
    }
    (segs, None)
}

/// A receiver with the given options.
pub fn rx(markers: bool, crc: bool) -> RxStream {
    RxStream::new(RxConfig::new(markers, crc))
}

/// Parses a hex string with optional whitespace and `|` separators.
pub fn hex(s: &str) -> Vec<u8> {
    let clean: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..clean.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&clean[i..i + 2], 16).unwrap())
        .collect()
}

/// Frames a ULPDU by hand (no Markers): length, PAD, CRC32c LSB first.
/// Independent of the core's transmitter, for crafting malformed input.
pub fn frame(ulpdu: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(ulpdu.len() as u16).to_be_bytes());
    v.extend_from_slice(ulpdu);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    let c = crc32c::crc32c(&v);
    v.extend_from_slice(&c.to_le_bytes());
    v
}
