// SPDX-License-Identifier: GPL-2.0
#![forbid(unsafe_code)]

//! The iWARP protocol core of rsiw: MPA (RFC 5044, RFC 6581), DDP (RFC 5041)
//! and RDMAP (RFC 5040) wire formats, framing and per-stream state.
//!
//! Everything here is plain `core` Rust under `forbid(unsafe_code)`: no
//! allocation, no kernel bindings. The kernel module includes it with
//! `pub mod proto;` and the host crate in `selftests/proto` includes the same
//! files for tests, property tests, fuzzing and benchmarks.
//!
//! Layering, bottom up:
//!
//! - [`crc`]: the CRC32c engine trait the driver implements (the kernel build
//!   wraps the kernel's `crc32c()`), plus a portable table implementation.
//! - [`fpdu`]: MPA Full Operation framing. [`fpdu::Segmenter`] and
//!   [`fpdu::FpduTx`] describe outbound FPDUs as header/marker/trailer bytes
//!   and payload ranges (zero copy). [`fpdu::RxStream`] parses an inbound
//!   byte stream fed in arbitrary chunks and hands payload ranges to the
//!   caller for placement, with CRC computed in the same pass.
//! - [`ddp`]: tagged and untagged DDP headers, plus the receive-side
//!   validation state ([`ddp::DdpRx`]) and send-side MSN state.
//! - [`rdmap`]: opcodes, the RDMA Read Request header and the Terminate
//!   message with its header-copy rules.
//! - [`mpa`]: MPA Request/Reply frames and the RFC 6581 enhanced data.
//! - [`negotiate`]: the initiator and responder startup state machines.
//! - [`error`]: Terminate error classes (Layer/EType/Code).
//!
//! See Documentation/rsiw/protocol.rst for the design.

pub mod crc;
pub mod ddp;
pub mod error;
pub mod fpdu;
pub mod mpa;
pub mod negotiate;
pub mod rdmap;

mod wire;
