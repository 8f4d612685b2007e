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
pub mod srq;
pub mod udata;
pub mod verbs;

/// `EOPNOTSUPP`, the errno verbs use for an unsupported feature or request.
///
/// The 6.12 kernel crate names no `EOPNOTSUPP` constant, so this builds it.
pub fn eopnotsupp() -> crate::error::Error {
    crate::error::Error::from_errno(-(crate::bindings::EOPNOTSUPP as i32))
}

/// `ENOTCONN`, the errno for posting to a queue pair that is not connected.
///
/// The 6.12 kernel crate names no `ENOTCONN` constant, so this builds it.
pub fn enotconn() -> crate::error::Error {
    crate::error::Error::from_errno(-(crate::bindings::ENOTCONN as i32))
}
