// SPDX-License-Identifier: GPL-2.0

//! rsiw: a software iWARP RDMA provider.
//!
//! `rdma link add NAME type rsiw netdev DEV` creates an iWARP RNIC on an Ethernet netdev. The
//! device follows its netdev: port state tracks the netdev's admin and carrier state, and the
//! device goes away with the netdev, with `rdma link delete`, or with `rmmod`.

#![deny(unsafe_code)]

use driver::RsiwModule;
use kernel::prelude::*;

mod cm;
mod cq;
pub mod crc;
mod device;
mod driver;
mod knobs;
mod mem;
pub mod proto;
mod qp;
mod ring;
mod srq;
mod stats;
mod uabi;
mod wqe;

module! {
    type: RsiwModule,
    name: "rsiw",
    author: "rsiw developers",
    description: "Software iWARP RDMA provider (RDMAP/DDP/MPA over kernel TCP)",
    license: "GPL",
    alias: ["rdma-link-rsiw"],
}
