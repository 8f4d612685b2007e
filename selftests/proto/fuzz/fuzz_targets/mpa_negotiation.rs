// SPDX-License-Identifier: GPL-2.0
//! Fuzzes MPA startup: a policy chosen from the input, then arbitrary
//! octets fed in arbitrary chunks to a responder and an initiator. Neither
//! may panic or consume octets it was not given, and large FPDUs are only
//! agreed when both frames carry the G bit and the policy wants them. A
//! Reply the initiator must answer with a Terminate yields its framing, and
//! the Terminate builds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsiw_proto::proto::fpdu::{setup_terminate, SETUP_TERM_FPDU_MAX};
use rsiw_proto::proto::mpa::RtrSet;
use rsiw_proto::proto::negotiate::{Initiator, MpaEvent, MpaFailure, MpaPolicy, Responder};
use rsiw_proto::soft_crc::SoftCrc32c;

fuzz_target!(|data: &[u8]| {
    if data.len() < 6 {
        return;
    }
    let (h, body) = data.split_at(6);
    let p = MpaPolicy {
        rev: h[0] % 4,
        crc: h[1] & 1 != 0,
        markers_rx: h[1] & 2 != 0,
        markers_tx_ok: h[1] & 4 != 0,
        enhanced: h[1] & 8 != 0,
        ird: u16::from_be_bytes([h[2], h[3]]),
        ord: u16::from_be_bytes([h[3], h[4]]),
        p2p: h[1] & 16 != 0,
        rtr: RtrSet {
            send: h[1] & 32 != 0,
            write: h[1] & 64 != 0,
            read: h[1] & 128 != 0,
        },
        large_fpdu: h[0] & 4 != 0,
    };
    let chunk = usize::from(h[5]).max(1);
    let mut r = Responder::new(&p);
    for c in body.chunks(chunk) {
        let s = r.on_data(c);
        assert!(s.consumed <= c.len());
        if s.event == MpaEvent::RequestReceived {
            if h[5] & 1 == 0 {
                if let Ok((f, n)) = r.accept(&body[..body.len().min(600)]) {
                    let asked = r.request().is_some_and(|q| q.large_fpdu);
                    assert_eq!(n.large_fpdu, asked && p.large_fpdu);
                    assert_eq!(f.as_bytes()[16] & 0x08 != 0, n.large_fpdu);
                }
            } else {
                let _ = r.reject(&[1, 2, 3]);
            }
        }
    }
    let _ = r.on_timeout();
    if let Ok((mut i, f)) = Initiator::new(&p, &body[..body.len().min(520)]) {
        assert!(f.as_bytes().len() <= 532);
        assert_eq!(f.as_bytes()[16] & 0x08 != 0, p.large_fpdu);
        for c in body.chunks(chunk) {
            let s = i.on_data(c);
            assert!(s.consumed <= c.len());
            if let MpaEvent::Established(n) = s.event {
                let offered = i.reply().is_some_and(|q| q.large_fpdu);
                assert_eq!(n.large_fpdu, offered && p.large_fpdu);
            }
            // A setup Terminate is framed from the Reply and always fits.
            let stream = i.terminate_stream();
            match s.event {
                MpaEvent::Failed(MpaFailure::Terminate(err)) => {
                    let mut stream = stream.expect("a stream for the Terminate");
                    let mut out = [0u8; SETUP_TERM_FPDU_MAX];
                    let n = setup_terminate(&mut stream, err, &SoftCrc32c, &mut out)
                        .expect("the setup Terminate builds");
                    assert_eq!(stream.offset() as usize, n);
                }
                MpaEvent::Failed(_) => {}
                _ => assert!(stream.is_none()),
            }
        }
        let _ = i.on_timeout();
        let _ = i.peer_private_data();
    }
});
