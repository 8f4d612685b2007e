// SPDX-License-Identifier: GPL-2.0

//! Memory regions of a provider: the DMA MR and fast-registration MRs.
//!
//! Unlike PDs and QPs, MRs are allocated by the driver: [`Mr`] is boxed, handed to the core as
//! its `ib_mr`, and freed in `dereg_mr`.
//!
//! Software iWARP is a virtual-DMA device: DMA addresses are kernel virtual addresses. The
//! data path reads and writes registered memory only through [`KernelRange`], whose
//! constructor is the one place that trusts a consumer's registration.

use super::{
    device::{Adapter, Device, Driver},
    udata::UserData,
    verbs::Pd,
};
use crate::{bindings, error::Result, prelude::*, types::Opaque};

/// Kinds of memory region `alloc_mr` is asked for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MrType {
    /// Fast registration through `IB_WR_REG_MR` (`IB_MR_TYPE_MEM_REG`).
    MemReg,
    /// Any other kind (SG gaps, integrity, user), which software iWARP does not offer.
    Other,
}

/// The keys of a new memory region.
#[derive(Clone, Copy, Debug)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key (STag).
    pub rkey: u32,
}

/// A memory region of driver `T`.
///
/// # Invariants
///
/// Allocated by [`Adapter::alloc_mr`], [`Adapter::get_dma_mr`] or [`Adapter::reg_user_mr`] in a
/// pinned box; `data` is initialised until `dereg_mr` frees it.
#[repr(C)]
#[pin_data]
pub struct Mr<T: Driver> {
    #[pin]
    ib: Opaque<bindings::ib_mr>,
    #[pin]
    data: T::Mr,
}

// SAFETY: MRs are used from every context; the driver data is `Send + Sync`.
unsafe impl<T: Driver> Sync for Mr<T> {}
// SAFETY: See above.
unsafe impl<T: Driver> Send for Mr<T> {}

impl<T: Driver> Mr<T> {
    /// The driver's data.
    pub fn data(&self) -> &T::Mr {
        &self.data
    }

    /// The device the MR belongs to.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: The core sets `device` after allocation, before the MR is used.
        unsafe { Device::from_raw((*self.ib.get()).device) }
    }

    /// The MR's protection domain.
    pub fn pd_id(&self) -> super::verbs::PdId {
        // SAFETY: Kernel MRs never change PD.
        super::verbs::PdId::of_raw(unsafe { (*self.ib.get()).pd })
    }

    /// The mapping `map_mr_sg` set up.
    pub fn mapping(&self) -> MrMapping {
        let mr = self.ib.get();
        // SAFETY: These fields are written by `ib_map_mr_sg`, which the consumer serialises
        // with posting the REG_MR that makes them used.
        let (iova, length, page_size) = unsafe { ((*mr).iova, (*mr).length, (*mr).page_size) };
        MrMapping {
            iova,
            length,
            page_size,
        }
    }
}

/// Where a fast-registration MR's pages appear: what `ib_map_mr_sg` set up, and an
/// `IB_WR_REG_MR` makes valid.
#[derive(Clone, Copy, Debug)]
pub struct MrMapping {
    /// The I/O virtual address of the region's first byte.
    pub iova: u64,
    /// The region's length in bytes.
    pub length: u64,
    /// The size of the pages `map_mr_sg` was given.
    pub page_size: u32,
}

/// A range of kernel memory that a consumer registered, which the data path may read and write.
///
/// # Invariants
///
/// `addr..addr + len` is kernel memory that stays valid while the registration that produced it
/// is valid (the RDMA verbs contract: memory stays mapped until the MR is invalidated or
/// deregistered and the work requests using it have completed). Unless `spliceable`, the range
/// is valid only for the access it was made for, and its pages must not be referenced beyond it.
#[derive(Clone, Copy, Debug)]
pub struct KernelRange {
    addr: usize,
    len: usize,
    spliceable: bool,
}

impl KernelRange {
    /// A range of a consumer's registered memory at DMA address `dma_addr`.
    ///
    /// # Safety
    ///
    /// `dma_addr..dma_addr + len` must be a DMA range a kernel consumer mapped for this
    /// (virtual-DMA) device and registered in a valid MR or SGE, and the caller must stop
    /// using the range when that registration ends.
    pub unsafe fn new(dma_addr: u64, len: usize) -> Result<Self> {
        let addr = usize::try_from(dma_addr).map_err(|_| EINVAL)?;
        addr.checked_add(len).ok_or(EINVAL)?;
        // INVARIANT: Guaranteed by the caller.
        Ok(Self {
            addr,
            len,
            spliceable: true,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sub-range `off..off + len`, or `EINVAL` if it is not inside this one.
    pub fn sub(&self, off: usize, len: usize) -> Result<Self> {
        let end = off.checked_add(len).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        Ok(Self {
            addr: self.addr + off,
            len,
            spliceable: self.spliceable,
        })
    }

    /// The first address, for comparing ranges (e.g. to merge adjacent ones).
    pub fn addr(&self) -> u64 {
        // CAST: `usize` is at most 64 bits wide.
        self.addr as u64
    }

    /// The range covering `self` and then `next`, if `next` starts where `self` ends.
    pub fn merge(&self, next: &KernelRange) -> Option<KernelRange> {
        if self.addr.checked_add(self.len)? != next.addr {
            return None;
        }
        // INVARIANT: Both parts are valid for as long as their registrations are.
        Some(Self {
            addr: self.addr,
            len: self.len.checked_add(next.len)?,
            spliceable: self.spliceable && next.spliceable,
        })
    }

    /// Calls `f` with the range's bytes.
    ///
    /// The consumer may change the memory meanwhile only if it breaks the verbs contract; the
    /// bytes are then unspecified, but reading them is still memory-safe.
    pub fn with_slice<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: By the type invariant the range is valid kernel memory of `len` bytes.
        f(unsafe { core::slice::from_raw_parts(self.addr as *const u8, self.len) })
    }

    /// Appends the range to `batch` by reference (its pages, not a copy), if they can be
    /// spliced; returns `false`, adding nothing, if not (e.g. slab memory, or pages a peer
    /// named: [`AllMemory::peer_range`]).
    ///
    /// TCP reads the pages after this returns: send the batch with a
    /// [`crate::ksock::ZcToken`] and end the operation only once it is released.
    pub fn push_by_reference(&self, batch: &mut crate::ksock::PageBatch) -> Result<bool> {
        if !self.spliceable {
            return Ok(false);
        }
        // SAFETY: By the type invariant the range is valid kernel memory for this call.
        unsafe { batch.push_kernel_memory(self.addr, self.len) }
    }

    /// Copies `src` into the start of the range.
    pub fn write(&self, src: &[u8]) -> Result {
        if src.len() > self.len {
            return Err(EINVAL);
        }
        // SAFETY: By the type invariant the range is valid kernel memory of `len` bytes.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.addr as *mut u8, src.len()) };
        Ok(())
    }

    /// Copies the start of the range into `dst`.
    pub fn read(&self, dst: &mut [u8]) -> Result {
        if dst.len() > self.len {
            return Err(EINVAL);
        }
        // SAFETY: By the type invariant the range is valid kernel memory of `len` bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(self.addr as *const u8, dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }
}

/// Proof that a consumer asked for a DMA memory region (`get_dma_mr`): access to all kernel
/// memory, addressed by DMA address, which for a virtual-DMA device is the kernel virtual
/// address. With remote rights (a PD's `IB_PD_UNSAFE_GLOBAL_RKEY`) the peer picks those
/// addresses; the consumer opted into that, but an address where no usable memory is, is
/// still refused rather than dereferenced ([`AllMemory::peer_range`]).
///
/// Only the core's `get_dma_mr` callback creates one. The driver keeps it with the region and
/// resolves addresses of work requests that use the region's key with [`AllMemory::range`].
pub struct AllMemory(());

/// What the kernel's memory map says about a page a peer named under a DMA region's rkey,
/// for the driver to decide whether the peer may reach it ([`AllMemory::peer_range`]).
#[derive(Clone, Copy, Debug)]
pub struct PageFacts {
    /// `PG_reserved`: memory the page allocator never handed out, such as the kernel image
    /// (text, rodata, data, bss), what firmware keeps, and holes in RAM.
    pub reserved: bool,
    /// The shared zero page (a reserved page of the kernel image; reading it is harmless).
    pub zero: bool,
}

/// The start of every page that the `len` bytes at `start` touch (none if `len` is zero).
fn page_starts(start: usize, len: usize) -> Result<impl Iterator<Item = usize>> {
    let size = crate::page::PAGE_SIZE;
    let last = start.checked_add(len.saturating_sub(1)).ok_or(EFAULT)?;
    let pages = if len == 0 { 0 } else { usize::MAX };
    Ok(((start & !(size - 1))..=(last & !(size - 1)))
        .step_by(size)
        .take(pages))
}

/// What [`AllMemory::peer_range`] may hand to `allow` about the page at `page`, or `None` if
/// the page is not usable memory: not RAM of the linear map, not mapped present and writable
/// there, poisoned by a memory error, or offline (ballooned or being unplugged).
fn linear_map_facts(page: usize) -> Option<PageFacts> {
    // SAFETY: The helper only compares the address with the kernel's memory layout and
    // computes its `struct page`; it dereferences nothing.
    let p = unsafe { bindings::linear_map_page(page) };
    if p.is_null() {
        return None;
    }
    // SAFETY: `page` is a linear-map address (checked above); the helper reads the kernel's
    // page tables, not the page.
    if !unsafe { bindings::linear_map_writable(page) } {
        return None;
    }
    // SAFETY: `p` is the `struct page` of a page with a memory map entry (checked above); the
    // helpers only read its flags and page type.
    let unusable = unsafe { bindings::PageHWPoison(p) || bindings::PageOffline(p) };
    if unusable {
        return None;
    }
    // SAFETY: As above.
    let (reserved, zero) = unsafe { (bindings::PageReserved(p), bindings::is_zero_page(p)) };
    Some(PageFacts { reserved, zero })
}

impl AllMemory {
    /// The `len` bytes at DMA address `addr` of the region, for an address a work request of
    /// the consumer named, or `EFAULT` if any of its pages is not in the kernel's direct map.
    ///
    /// The consumer that created the region hands the device only addresses it mapped with
    /// `ib_dma_map_*` and keeps them valid until the work requests using them complete; the
    /// check catches an address that no DMA mapping can have produced. Costs O(pages).
    pub fn range(&self, addr: u64, len: usize) -> Result<KernelRange> {
        let start = usize::try_from(addr).map_err(|_| EFAULT)?;
        for page in page_starts(start, len)? {
            // SAFETY: The helper only compares the address with the kernel's memory layout;
            // it dereferences nothing.
            if !unsafe { bindings::virt_addr_valid(page) } {
                return Err(EFAULT);
            }
        }
        // SAFETY: Holding `self` shows the consumer registered all kernel memory for this
        // device, and the range lies in the direct map (checked above), where every buffer it
        // mapped lives.
        unsafe { KernelRange::new(addr, len) }
    }

    /// The `len` bytes at DMA address `addr` of the region, for an address a peer named under
    /// the region's rkey, or `EFAULT`.
    ///
    /// The peer may name any address, so every page must be RAM of the kernel's linear map
    /// (not the kernel image's own mapping, vmalloc or module space), mapped present and
    /// writable there now (not taken out of it, like secretmem, nor made read-only, like a
    /// module's read-only sections through their alias), not poisoned by a memory error nor
    /// offline, and `allow` (the driver's policy) must accept what [`PageFacts`] says about it.
    ///
    /// The range is valid for the access being checked only, and never goes by reference into
    /// a socket ([`KernelRange::push_by_reference`] declines it): a reference taken on a page
    /// the peer picked could revive one being freed, to be freed twice. Reads no memory; costs
    /// O(pages), a page-table walk each: check short pieces, not a whole request at once.
    pub fn peer_range(
        &self,
        addr: u64,
        len: usize,
        mut allow: impl FnMut(PageFacts) -> bool,
    ) -> Result<KernelRange> {
        let start = usize::try_from(addr).map_err(|_| EFAULT)?;
        for page in page_starts(start, len)? {
            if !linear_map_facts(page).is_some_and(&mut allow) {
                return Err(EFAULT);
            }
        }
        // SAFETY: Holding `self` shows the consumer registered all kernel memory for this device
        // and let the peer name addresses in it; every page is linear-map RAM, present and writable
        // (checked above). Used only for the access it was checked for; no page reference taken.
        let mut range = unsafe { KernelRange::new(addr, len)? };
        // INVARIANT: Valid for this access only, so not to be spliced.
        range.spliceable = false;
        Ok(range)
    }
}

impl<T: Driver> Adapter<T> {
    fn finish_mr(
        pd: *mut bindings::ib_pd,
        res: Result<(impl PinInit<T::Mr, Error>, MrKeys)>,
    ) -> *mut bindings::ib_mr {
        let build = || -> Result<*mut bindings::ib_mr> {
            let (init, keys) = res?;
            let mr = KBox::pin_init(
                try_pin_init!(Mr::<T> {
                    // SAFETY: An all-zero `ib_mr` is what the core expects from drivers; it
                    // fills in device, pd, type and uobject itself.
                    ib <- Opaque::ffi_init(|p: *mut bindings::ib_mr| unsafe {
                        p.write(core::mem::zeroed());
                        (*p).lkey = keys.lkey;
                        (*p).rkey = keys.rkey;
                        (*p).pd = pd;
                    }),
                    data <- init,
                }),
                GFP_KERNEL,
            )?;
            // SAFETY: The box is released to the core as the `ib_mr`; `dereg_mr` takes it back
            // without moving it.
            let raw = KBox::into_raw(unsafe { Pin::into_inner_unchecked(mr) });
            Ok(raw.cast())
        };
        match build() {
            Ok(p) => p,
            Err(e) => e.to_ptr(),
        }
    }

    /// `ib_device_ops.get_dma_mr`: creates a PD's internal DMA MR, which covers all kernel memory
    /// (`ib_alloc_pd`, for the local DMA lkey or `IB_PD_UNSAFE_GLOBAL_RKEY`).
    ///
    /// # Safety
    ///
    /// `ibpd` is a PD of this driver whose `alloc_pd` succeeded and whose `dealloc_pd` has not
    /// started.
    pub(super) unsafe extern "C" fn get_dma_mr(
        ibpd: *mut bindings::ib_pd,
        access: crate::ffi::c_int,
    ) -> *mut bindings::ib_mr {
        // SAFETY: `ibpd` is a live PD of ours.
        let pd = unsafe { &*ibpd.cast::<Pd<T>>() };
        // CAST: Access flags are positive bits.
        Self::finish_mr(ibpd, T::get_dma_mr(pd, access as u32, AllMemory(())))
    }

    /// `ib_device_ops.alloc_mr`: creates an MR for fast registration (`ib_alloc_mr`).
    ///
    /// # Safety
    ///
    /// `ibpd` is a PD of this driver whose `alloc_pd` succeeded and whose `dealloc_pd` has not
    /// started.
    pub(super) unsafe extern "C" fn alloc_mr(
        ibpd: *mut bindings::ib_pd,
        mr_type: bindings::ib_mr_type,
        max_num_sg: u32,
    ) -> *mut bindings::ib_mr {
        // SAFETY: `ibpd` is a live PD of ours.
        let pd = unsafe { &*ibpd.cast::<Pd<T>>() };
        let ty = if mr_type == bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
            MrType::MemReg
        } else {
            MrType::Other
        };
        Self::finish_mr(ibpd, T::alloc_mr(pd, ty, max_num_sg))
    }

    /// `ib_device_ops.reg_user_mr`: registers user memory (uverbs `REG_MR`): pins it, then lets the
    /// driver make the MR over it.
    ///
    /// # Safety
    ///
    /// `ibpd` is a PD of this driver whose `alloc_pd` succeeded and whose `dealloc_pd` has not
    /// started; `udata` is null or valid for the call.
    pub(super) unsafe extern "C" fn reg_user_mr(
        ibpd: *mut bindings::ib_pd,
        start: u64,
        length: u64,
        virt: u64,
        access: crate::ffi::c_int,
        udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        if !T::HAS_REG_USER_MR {
            return crate::rdma::eopnotsupp().to_ptr();
        }
        // SAFETY: `ibpd` is a live PD of ours; `udata` is null or valid for the call.
        let (pd, mut udata) = unsafe { (&*ibpd.cast::<Pd<T>>(), UserData::from_raw(udata)) };
        // CAST: Access flags are positive bits.
        let access = access as u32;
        let res = super::umem::UserMemory::pin(pd.device(), start, length, access)
            .and_then(|mem| T::reg_user_mr(pd, mem, virt, access, &mut udata));
        Self::finish_mr(ibpd, res)
    }

    /// `ib_device_ops.dereg_mr`: drops an MR's data and frees it (`ib_dereg_mr`, or `ib_dealloc_pd`
    /// for the PD's internal DMA MR).
    ///
    /// # Safety
    ///
    /// `ibmr` was returned by this driver's `get_dma_mr`, `alloc_mr` or `reg_user_mr`, and this
    /// is called once for it, with no other op on it running or following. `_udata` is not used.
    pub(super) unsafe extern "C" fn dereg_mr(
        ibmr: *mut bindings::ib_mr,
        _udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        let mr = ibmr.cast::<Mr<T>>();
        // SAFETY: `mr` is a live MR of ours.
        T::dereg_mr(unsafe { &*mr });
        // SAFETY: The box was leaked in `finish_mr`; the core no longer uses the MR.
        drop(unsafe { KBox::from_raw(mr) });
        0
    }

    /// `ib_device_ops.map_mr_sg`: hands the pages of a DMA-mapped scatterlist to the driver as an
    /// MR's page list (`ib_map_mr_sg`, which sets `mr->page_size` first).
    ///
    /// # Safety
    ///
    /// `ibmr` is a live MR of this driver, not used concurrently, with `page_size` set; `sg` is a
    /// scatterlist of `sg_nents` entries mapped for this device, valid for the call; `sg_offset` is
    /// null or valid for reads and writes.
    pub(super) unsafe extern "C" fn map_mr_sg(
        ibmr: *mut bindings::ib_mr,
        sg: *mut bindings::scatterlist,
        sg_nents: crate::ffi::c_int,
        sg_offset: *mut crate::ffi::c_uint,
    ) -> crate::ffi::c_int {
        // SAFETY: `ibmr` is a live MR of ours.
        let mr = unsafe { &*ibmr.cast::<Mr<T>>() };
        if let Err(e) = T::mr_map_begin(mr) {
            return e.to_errno();
        }
        // SAFETY: The consumer passes a valid, DMA-mapped scatterlist; `set_page` only runs
        // during this call.
        unsafe { bindings::ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, Some(Self::set_page)) }
    }

    /// Callback for `ib_sg_to_pages`.
    ///
    /// # Safety
    ///
    /// Only `ib_sg_to_pages`, called from `map_mr_sg`, calls this, with an MR of ours.
    unsafe extern "C" fn set_page(ibmr: *mut bindings::ib_mr, addr: u64) -> crate::ffi::c_int {
        // SAFETY: Called by `ib_sg_to_pages` for an MR of ours.
        let mr = unsafe { &*ibmr.cast::<Mr<T>>() };
        // CAST: Widening.
        let page_size = mr.mapping().page_size as usize;
        // SAFETY: `ib_sg_to_pages` passes the DMA address of a page of the scatterlist the
        // consumer mapped for this device and is registering in `mr`; the driver uses the range
        // only while the registration is valid.
        let page = match unsafe { KernelRange::new(addr, page_size) } {
            Ok(r) => r,
            Err(e) => return e.to_errno(),
        };
        match T::mr_set_page(mr, page) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }
}

/// Access flag: local write (`IB_ACCESS_LOCAL_WRITE`).
pub const ACCESS_LOCAL_WRITE: u32 = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE;
/// Access flag: remote write (`IB_ACCESS_REMOTE_WRITE`).
pub const ACCESS_REMOTE_WRITE: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE;
/// Access flag: remote read (`IB_ACCESS_REMOTE_READ`).
pub const ACCESS_REMOTE_READ: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_READ;
