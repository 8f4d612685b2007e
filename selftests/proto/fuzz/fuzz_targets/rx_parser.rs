// SPDX-License-Identifier: GPL-2.0
//! Fuzzes the FPDU receiver: arbitrary octets, options and chunking. The
//! parser must never panic, must never report payload beyond the segment,
//! and must stay failed after an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsiw_proto::proto::ddp::{DdpHdr, DdpRx};
use rsiw_proto::proto::fpdu::{RxConfig, RxEvent, RxStream};
use rsiw_proto::soft_crc::SoftCrc32c;

fuzz_target!(|data: &[u8]| {
    let Some((&opts, rest)) = data.split_first() else {
        return;
    };
    let Some((&chunk, body)) = rest.split_first() else {
        return;
    };
    let mut cfg = RxConfig::new(opts & 1 != 0, opts & 2 != 0);
    if opts & 4 != 0 {
        cfg.max_ulpdu = 128 + u16::from(opts >> 3) * 64;
    }
    let mut rx = RxStream::new(cfg);
    let mut ddp = DdpRx::new();
    let chunk = usize::from(chunk).max(1);
    let mut dst = vec![0u8; 65536];
    let mut seg_payload = 0u32;
    let mut seg_len = 0u32;
    for piece in body.chunks(chunk) {
        let mut input = piece;
        loop {
            let out = match rx.poll(input, &SoftCrc32c) {
                Ok(o) => o,
                Err(e) => {
                    assert_eq!(rx.poll(&[0], &SoftCrc32c), Err(e));
                    let _ = rx.offending();
                    let _ = e.term();
                    return;
                }
            };
            assert!(out.consumed <= input.len());
            input = &input[out.consumed..];
            match out.event {
                RxEvent::NeedMore => break,
                RxEvent::Header(s) => {
                    assert!(u32::from(s.ulpdu_len) >= s.payload_len);
                    seg_len = s.payload_len;
                    seg_payload = 0;
                    if let DdpHdr::Untagged(u) = s.hdr {
                        let _ = ddp.check_untagged(&u, s.payload_len, Some(u32::from(opts) * 300));
                    }
                    let _ = s.offending();
                }
                RxEvent::Payload { len, offset } => {
                    assert!(len > 0 && len <= input.len());
                    assert_eq!(offset, seg_payload);
                    // Alternate between the two placement calls.
                    if offset % 2 == 0 {
                        rx.copy_payload(&input[..len], &mut dst[..len], &SoftCrc32c)
                            .unwrap();
                    } else {
                        rx.consume_payload(&input[..len], &SoftCrc32c).unwrap();
                    }
                    seg_payload += len as u32;
                    assert!(seg_payload <= seg_len);
                    input = &input[len..];
                }
                RxEvent::SegmentDone => assert_eq!(seg_payload, seg_len),
            }
        }
    }
});
