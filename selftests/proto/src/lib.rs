// SPDX-License-Identifier: GPL-2.0
//! Host build of the rsiw protocol core.
//!
//! The kernel module compiles `drivers/rsiw/proto` as `crate::proto`; this
//! crate compiles the very same files, as `rsiw_proto::proto`, so the tests,
//! fuzz targets and benchmarks exercise the code the kernel runs. The lint
//! set mirrors the kernel's Rust lints.
#![no_std]
#![deny(
    missing_docs,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    non_ascii_idents,
    rust_2018_idioms,
    warnings
)]
#![deny(
    clippy::correctness,
    clippy::style,
    clippy::suspicious,
    clippy::complexity,
    clippy::perf,
    clippy::let_unit_value,
    clippy::mut_mut,
    clippy::needless_bitwise_bool,
    clippy::needless_continue,
    clippy::no_mangle_with_rust_abi,
    clippy::dbg_macro
)]

#[path = "../../../drivers/rsiw/proto/mod.rs"]
pub mod proto;

pub mod soft_crc;
