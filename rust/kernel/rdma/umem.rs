// SPDX-License-Identifier: GPL-2.0

//! User memory pinned for a memory region (`struct ib_umem`).

use super::{
    device::{Device, Driver},
    mr::KernelRange,
};
use crate::{bindings, error::Result, prelude::*};
use core::ptr::NonNull;

/// A range of a process's memory, pinned by the core's `ib_umem_get` for a user memory region.
///
/// The pages stay pinned until this is dropped, however the process changes its mappings
/// (munmap, fork, exit): a peer that reaches the region reaches only these pages.
///
/// # Invariants
///
/// `umem` is a live `ib_umem` from `ib_umem_get`, owned by this object, for a virtual-DMA device:
/// its scatterlist's DMA addresses are kernel virtual addresses of the pinned pages.
pub struct UserMemory {
    umem: NonNull<bindings::ib_umem>,
}

// SAFETY: The `ib_umem` is owned and only read after creation; the core allows releasing it from
// any process context.
unsafe impl Send for UserMemory {}
// SAFETY: See above.
unsafe impl Sync for UserMemory {}

impl UserMemory {
    /// Pins `len` bytes of the calling process's memory at `addr` for `dev`, writable if
    /// `access` (`IB_ACCESS_*`) allows local or remote writes. Process context, from a uverbs
    /// call.
    pub fn pin<T: Driver>(dev: &Device<T>, addr: u64, len: u64, access: u32) -> Result<Self> {
        let addr = crate::ffi::c_ulong::try_from(addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        let access = crate::ffi::c_int::try_from(access).map_err(|_| EINVAL)?;
        // SAFETY: `dev` is a live device; the core checks the range against the process.
        let umem = unsafe { bindings::ib_umem_get(dev.as_raw(), addr, len, access) };
        let umem = crate::error::from_err_ptr(umem)?;
        // INVARIANT: Just returned by `ib_umem_get`; rsiw's devices use virtual DMA.
        Ok(Self {
            umem: NonNull::new(umem).ok_or(EINVAL)?,
        })
    }

    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        // SAFETY: By the type invariant `umem` is live; `length` does not change.
        unsafe { self.umem.as_ref().length as u64 }
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How far into the first range the region starts (its address within a page).
    pub fn offset(&self) -> u64 {
        // SAFETY: By the type invariant `umem` is live; `address` does not change.
        let address = unsafe { self.umem.as_ref().address };
        // CAST: `unsigned long` fits in `u64`.
        address as u64 % kernel::page::PAGE_SIZE as u64
    }

    /// Calls `f` with each run of contiguous pinned pages, in order; the region starts
    /// [`Self::offset`] bytes into the first. Stops at the first error `f` returns.
    ///
    /// The ranges stay valid while `self` lives: the caller must stop using them before it
    /// drops `self`.
    pub fn for_each_range(&self, mut f: impl FnMut(KernelRange) -> Result) -> Result {
        // SAFETY: By the type invariant `umem` is live; its table does not change.
        let sgt = unsafe { &self.umem.as_ref().sgt_append.sgt };
        let mut sg = sgt.sgl;
        for _ in 0..sgt.nents {
            if sg.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: `sg` is one of the table's `nents` mapped entries.
            let (addr, len) = unsafe {
                (
                    bindings::sg_dma_address(sg),
                    bindings::sg_dma_len(sg) as usize,
                )
            };
            // SAFETY: For a virtual-DMA device the DMA address is the kernel virtual address of
            // pinned pages, which stay pinned while `self` lives (the caller's contract).
            f(unsafe { KernelRange::new(addr, len) }?)?;
            // SAFETY: `sg` is a valid entry of the table.
            sg = unsafe { bindings::sg_next(sg) };
        }
        Ok(())
    }

    /// How many runs [`Self::for_each_range`] calls back with.
    pub fn num_ranges(&self) -> usize {
        // SAFETY: By the type invariant `umem` is live.
        unsafe { self.umem.as_ref().sgt_append.sgt.nents as usize }
    }
}

impl Drop for UserMemory {
    /// Unpins the pages. Process context.
    fn drop(&mut self) {
        // SAFETY: By the type invariant the umem is ours; released once, here.
        unsafe { bindings::ib_umem_release(self.umem.as_ptr()) };
    }
}
