// SPDX-License-Identifier: GPL-2.0

//! RDMA (InfiniBand/iWARP) provider abstractions.
//!
//! These wrap the RDMA core's provider interface (`struct ib_device` and its `ib_device_ops`
//! table) and the `rdma link` netlink hooks, so a Rust RDMA driver needs no `unsafe` code.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h),
//! [`include/rdma/rdma_netlink.h`](srctree/include/rdma/rdma_netlink.h).

pub mod consumer;
pub mod device;
pub mod iwcm;
pub mod link;
pub mod mr;
pub mod qp;
pub mod res;
pub mod srq;
pub mod stats;
pub mod udata;
pub mod umem;
pub mod user_map;
pub mod verbs;

pub use crate::errno::{enotconn, eopnotsupp};
