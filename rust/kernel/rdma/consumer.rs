// SPDX-License-Identifier: GPL-2.0

//! The consumer (ULP) side of the RDMA core: rdma_cm connection ids and kernel verbs.
//!
//! A kernel upper-layer protocol (ULP) uses these types the way NVMe-oF or NFS/RDMA use the C
//! API, with no `unsafe` code of its own:
//!
//! - [`cm::CmId`]: an RDMA CM id (`struct rdma_cm_id`) for the RC port space: resolve an address
//!   and route and connect, or bind and listen; events go to a [`cm::CmHandler`].
//! - [`mem::Pd`]: a protection domain, with the lkey for DMA-mapped kernel memory.
//! - [`cq::Cq`]: a completion queue, polled directly or with a completion callback.
//! - [`qp::Qp`]: the RC queue pair of a connected [`cm::CmId`]; typed work requests
//!   ([`qp::SendWr`], [`qp::RecvWr`]) and completions ([`qp::Wc`]).
//! - [`srq::Srq`]: a shared receive queue that QPs created on it take their receives from;
//!   [`qp::Qp::drain`] drains such a QP with the core's `ib_drain_qp`.
//! - [`mem::DmaBuf`]: kernel memory mapped for the device; [`mem::FrMr`]: a fast-registration
//!   memory region that a `REG_MR` work request maps onto part of a [`mem::DmaBuf`].
//! - [`workqueue::OwnedQueue`]: a workqueue owned by the ULP, drained when dropped.
//!
//! Ownership follows the C rules and is enforced by Rust: a QP keeps its PD and CQs alive; a CM
//! id destroys its QP before itself; a PD, CQ or buffer is released only after everything that
//! uses it. All objects must be released before their device is unregistered: a ULP does that
//! when its CM ids see [`cm::CmEventKind::DeviceRemoval`] (or it keeps the device from going
//! away, as tests do by unloading the ULP first).
//!
//! C headers: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h),
//! [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use crate::bindings;

pub mod cm;
pub mod cq;
pub mod mem;
pub mod qp;
pub mod srq;
pub mod workqueue;

pub use crate::errno::{
    econnrefused, econnreset, ehostunreach, enotconn, eopnotsupp, eproto, etimedout,
};

/// The capabilities of an RDMA device that a ULP sizes itself by (a copy of the core's cached
/// `struct ib_device_attr`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceCaps {
    /// Largest number of QPs.
    pub max_qp: u32,
    /// Largest number of work requests per queue.
    pub max_qp_wr: u32,
    /// Largest number of SGEs of a send-queue work request.
    pub max_send_sge: u32,
    /// Largest number of SGEs of a receive work request.
    pub max_recv_sge: u32,
    /// Largest number of SGEs of an RDMA READ.
    pub max_sge_rd: u32,
    /// Largest number of CQ entries.
    pub max_cqe: u32,
    /// Largest number of outstanding RDMA READs a QP can be the target of (IRD).
    pub max_qp_rd_atom: u32,
    /// Largest number of outstanding RDMA READs a QP can issue (ORD).
    pub max_qp_init_rd_atom: u32,
    /// Largest page list of a fast-registration MR.
    pub max_fast_reg_page_list_len: u32,
    /// Largest number of SRQs (0: the device has none).
    pub max_srq: u32,
    /// Largest number of work requests of an SRQ.
    pub max_srq_wr: u32,
    /// Largest number of SGEs of an SRQ work request.
    pub max_srq_sge: u32,
    /// `IB_DEVICE_*` capability flags.
    pub device_cap_flags: u64,
    /// `IBK_*` kernel capability flags.
    pub kernel_cap_flags: u64,
}

impl DeviceCaps {
    /// Whether the device supports memory management extensions (FRWR, `SEND_WITH_INV`).
    pub fn mem_mgt_extensions(&self) -> bool {
        // CAST: A flag bit of the C enum, positive.
        self.device_cap_flags & bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64
            != 0
    }

    /// Whether the device has a local DMA lkey for all kernel memory (`IBK_LOCAL_DMA_LKEY`).
    /// Without it, the core gives every PD an internal DMA MR; either way [`mem::Pd::local_dma_lkey`]
    /// is the key to use.
    pub fn local_dma_lkey(&self) -> bool {
        // CAST: A flag bit of the C enum, positive.
        self.kernel_cap_flags & bindings::ib_kernel_cap_flags_IBK_LOCAL_DMA_LKEY as u64 != 0
    }
}

/// An RDMA device as a consumer sees it: borrowed from a CM id that is bound to it.
///
/// # Invariants
///
/// The `ib_device` is registered and valid for the lifetime of every `&Device` (a CM id bound
/// to it holds a reference).
#[repr(transparent)]
pub struct Device(crate::types::Opaque<bindings::ib_device>);

// SAFETY: `ib_device` is shared between threads by design; the methods only read fields that are
// fixed after registration.
unsafe impl Sync for Device {}
// SAFETY: See above.
unsafe impl Send for Device {}

impl Device {
    /// Borrows a device.
    ///
    /// # Safety
    ///
    /// `ptr` must point at a registered `ib_device` that stays valid for `'a`.
    pub unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `Device` is a transparent wrapper; the caller guarantees validity for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// Returns the raw `ib_device` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_device {
        self.0.get()
    }

    /// The device's capabilities as the core cached them at registration.
    pub fn caps(&self) -> DeviceCaps {
        // SAFETY: By the type invariant the device is registered; `attrs` is fixed after that.
        let a = unsafe { &(*self.as_raw()).attrs };
        DeviceCaps {
            max_qp: a.max_qp.try_into().unwrap_or(0),
            max_qp_wr: a.max_qp_wr.try_into().unwrap_or(0),
            max_send_sge: a.max_send_sge.try_into().unwrap_or(0),
            max_recv_sge: a.max_recv_sge.try_into().unwrap_or(0),
            max_sge_rd: a.max_sge_rd.try_into().unwrap_or(0),
            max_cqe: a.max_cqe.try_into().unwrap_or(0),
            max_qp_rd_atom: a.max_qp_rd_atom.try_into().unwrap_or(0),
            max_qp_init_rd_atom: a.max_qp_init_rd_atom.try_into().unwrap_or(0),
            max_fast_reg_page_list_len: a.max_fast_reg_page_list_len,
            max_srq: a.max_srq.try_into().unwrap_or(0),
            max_srq_wr: a.max_srq_wr.try_into().unwrap_or(0),
            max_srq_sge: a.max_srq_sge.try_into().unwrap_or(0),
            device_cap_flags: a.device_cap_flags,
            kernel_cap_flags: a.kernel_cap_flags,
        }
    }

    /// The device's name (e.g. `siw0`), as a byte string without the NUL.
    pub fn name(&self) -> &[u8] {
        // SAFETY: By the type invariant the device is registered; its name is a NUL-terminated
        // `c_char` array (same size as `u8`) that stays valid with the device.
        let bytes = unsafe {
            let name = &(*self.as_raw()).name;
            core::slice::from_raw_parts(name.as_ptr().cast::<u8>(), name.len())
        };
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        bytes.get(..len).unwrap_or(&[])
    }
}
