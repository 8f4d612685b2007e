// SPDX-License-Identifier: GPL-2.0

//! Protection domains, DMA-mapped kernel buffers and fast-registration memory regions.
//!
//! Memory safety across the device boundary: the device reads and writes a [`DmaBuf`] and the
//! memory an [`FrMr`] maps after the CPU has posted a work request, and until it completes (or
//! until the QP is destroyed, which flushes it). Rust cannot see that, so the QP keeps every
//! buffer and MR its work requests name alive: a [`super::qp::Sge`] or a `REG_MR` work request
//! can only be posted for a buffer or MR attached to the QP ([`super::qp::Qp::attach_buf`],
//! [`super::qp::Qp::attach_mr`]), and attachments are released only when the QP is destroyed.
//! The CPU side uses copies ([`DmaBuf::read`], [`DmaBuf::write`]), never references into
//! device-owned memory.

use super::Device;
use crate::{
    alloc::{flags::GFP_KERNEL, KVec},
    bindings,
    error::{from_err_ptr, to_result, Result},
    new_mutex,
    page::PAGE_SIZE,
    prelude::*,
    str::CStr,
    sync::{Arc, Mutex},
};
use core::ptr::NonNull;

/// Memory access rights of a memory region (`enum ib_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Access(u32);

impl Access {
    /// The local device may write (needed for receive and READ sinks).
    pub const LOCAL_WRITE: Access = Access(bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE);
    /// The peer may write with RDMA WRITE (and iWARP READ responses land here).
    pub const REMOTE_WRITE: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE);
    /// The peer may read with RDMA READ.
    pub const REMOTE_READ: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_READ);

    /// The raw `IB_ACCESS_*` bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// A protection domain (`struct ib_pd`).
///
/// # Invariants
///
/// `pd` was returned by `__ib_alloc_pd` and is deallocated only in `drop`.
pub struct Pd {
    pd: NonNull<bindings::ib_pd>,
}

// SAFETY: A PD is a handle the RDMA core lets any thread use.
unsafe impl Send for Pd {}
// SAFETY: All methods take `&self` and only read fields fixed at allocation.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a PD on `dev`. `owner` names the ULP in `rdma resource show`.
    pub fn new(dev: &Device, owner: &'static CStr) -> Result<Arc<Self>> {
        Self::alloc(dev, 0, owner)
    }

    /// Allocates a PD on `dev` with `IB_PD_UNSAFE_GLOBAL_RKEY`: the core gives it a DMA memory
    /// region with remote rights, whose rkey ([`Pd::unsafe_global_rkey`]) lets any peer that
    /// learns it read and write kernel memory by DMA address, as nvme-rdma's
    /// `register_always=N` does. The core logs a warning naming `owner`.
    pub fn new_unsafe_global_rkey(dev: &Device, owner: &'static CStr) -> Result<Arc<Self>> {
        Self::alloc(dev, bindings::ib_pd_flags_IB_PD_UNSAFE_GLOBAL_RKEY, owner)
    }

    fn alloc(dev: &Device, flags: u32, owner: &'static CStr) -> Result<Arc<Self>> {
        // SAFETY: `dev` is a registered device; `owner` is a static C string the core keeps.
        let pd = unsafe { bindings::__ib_alloc_pd(dev.as_raw(), flags, owner.as_char_ptr()) };
        let pd = NonNull::new(from_err_ptr(pd)?).ok_or(ENOMEM)?;
        // INVARIANT: `pd` was just allocated.
        Ok(Arc::new(Pd { pd }, GFP_KERNEL)?)
    }

    /// The rkey of the PD's global DMA region, or 0 if it was not allocated with
    /// [`Pd::new_unsafe_global_rkey`].
    pub fn unsafe_global_rkey(&self) -> u32 {
        // SAFETY: By the type invariant the PD is valid; the field is set at allocation.
        unsafe { (*self.as_raw()).unsafe_global_rkey }
    }

    /// Returns the raw `ib_pd` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_pd {
        self.pd.as_ptr()
    }

    /// The device of this PD.
    pub fn device(&self) -> &Device {
        // SAFETY: By the type invariant the PD is allocated, so its device is registered (the
        // core does not free a device with PDs) for as long as `&self`.
        unsafe { Device::from_raw((*self.as_raw()).device) }
    }

    /// The lkey for DMA-mapped kernel memory: the device's local DMA lkey
    /// (`IBK_LOCAL_DMA_LKEY`) or the lkey of the PD's internal DMA MR, as the core chose.
    pub fn local_dma_lkey(&self) -> u32 {
        // SAFETY: By the type invariant the PD is valid; `local_dma_lkey` is set at allocation.
        unsafe { (*self.as_raw()).local_dma_lkey }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the PD is allocated; everything using it holds an
        // `Arc<Pd>`, so nothing does any more.
        unsafe { bindings::ib_dealloc_pd_user(self.as_raw(), core::ptr::null_mut()) };
    }
}

/// The largest piece of physically contiguous memory a [`DmaBuf`] allocates.
pub const MAX_CHUNK: usize = 1 << 20;

/// Kernel memory DMA-mapped for an RDMA device, bidirectionally.
///
/// The buffer is made of chunks of physically contiguous memory of `chunk_size()` bytes (a
/// power of two, at least a page, at most [`MAX_CHUNK`]); one SGE cannot cross a chunk
/// boundary, an [`FrMr`] can. The memory is zeroed at allocation.
///
/// # Invariants
///
/// `chunks[i]` points at `chunk` bytes allocated with `kmalloc` (aligned to `chunk`), described
/// by `sg[i]`; `sg` is mapped for `pd`'s device with `ib_dma_map_sg` until `drop`.
pub struct DmaBuf {
    pd: Arc<Pd>,
    chunks: KVec<*mut u8>,
    sg: KVec<bindings::scatterlist>,
    chunk: usize,
    len: usize,
}

// SAFETY: The chunks are plain kernel memory owned by the buffer; CPU access goes through
// copies in `&self` methods, which the caller orders against the device.
unsafe impl Send for DmaBuf {}
// SAFETY: See above.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `len` zeroed bytes and maps them for the device of `pd`.
    pub fn new(pd: &Arc<Pd>, len: usize) -> Result<Arc<Self>> {
        let chunk = len
            .max(1)
            .checked_next_power_of_two()
            .ok_or(EINVAL)?
            .clamp(PAGE_SIZE, MAX_CHUNK);
        let n = len.max(1).div_ceil(chunk);
        let mut chunks = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut sg = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            let mut v = KVec::<u8>::with_capacity(chunk, GFP_KERNEL)?;
            v.extend_with(chunk, 0, GFP_KERNEL)?;
            let (ptr, _, _) = v.into_raw_parts();
            // Cannot fail: capacity for `n` was reserved.
            if chunks.push(ptr, GFP_KERNEL).is_err() {
                // SAFETY: `ptr` came from `into_raw_parts` of a `KVec` of `chunk` bytes.
                drop(unsafe { KVec::from_raw_parts(ptr, chunk, chunk) });
                return Err(ENOMEM);
            }
            // SAFETY: All-zero is a valid scatterlist entry; `sg_init_table` sets it up below.
            sg.push(unsafe { core::mem::zeroed() }, GFP_KERNEL)?;
        }
        // The buffer now owns the chunks: from here on errors free them in `drop`.
        let mut buf = DmaBuf {
            pd: pd.clone(),
            chunks,
            sg,
            chunk,
            len,
        };
        let nents: u32 = n.try_into()?;
        // SAFETY: `sg` has `n` entries.
        unsafe { bindings::sg_init_table(buf.sg.as_mut_ptr(), nents) };
        let chunk_u32: u32 = chunk.try_into()?;
        for (i, c) in buf.chunks.iter().enumerate() {
            // SAFETY: `i < n`; `*c` is `chunk` bytes of kmalloc memory (direct-mapped).
            unsafe { bindings::sg_set_buf(buf.sg.as_mut_ptr().add(i), c.cast(), chunk_u32) };
        }
        let dev = pd.device().as_raw();
        // SAFETY: `sg` is an initialised table of `n` entries for `dev`.
        let mapped = unsafe {
            bindings::ib_dma_map_sg(
                dev,
                buf.sg.as_mut_ptr(),
                nents.try_into()?,
                bindings::dma_data_direction_DMA_BIDIRECTIONAL,
            )
        };
        // CAST: `n` fits in `i32` (checked above).
        if mapped != n as i32 {
            // Mark the buffer as unmapped so that `drop` only frees the chunks.
            buf.sg = KVec::new();
            return Err(crate::error::code::EIO);
        }
        // INVARIANT: every chunk is allocated, described by `sg` and mapped.
        Ok(Arc::new(buf, GFP_KERNEL)?)
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size of the physically contiguous chunks.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// The PD this buffer's lkeys belong to.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// Checks that `[offset, offset + len)` lies in the buffer.
    fn check(&self, offset: usize, len: usize) -> Result<usize> {
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        Ok(end)
    }

    /// The DMA address of byte `offset` and the bytes left in its chunk.
    fn dma_at(&self, offset: usize) -> Result<(u64, usize)> {
        let idx = offset / self.chunk;
        let within = offset % self.chunk;
        let sg = self.sg.get(idx).ok_or(EINVAL)?;
        // CAST: `within < chunk <= MAX_CHUNK`.
        Ok((sg.dma_address + within as u64, self.chunk - within))
    }

    /// Visits `[offset, offset + len)` chunk by chunk: `f(position, cpu pointer, dma address,
    /// length)`, where `position` counts from `offset`.
    fn for_each_piece(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(usize, *mut u8, u64, usize) -> Result,
    ) -> Result {
        self.check(offset, len)?;
        let mut done = 0;
        while done < len {
            let at = offset + done;
            let (dma, room) = self.dma_at(at)?;
            let n = room.min(len - done);
            let base = *self.chunks.get(at / self.chunk).ok_or(EINVAL)?;
            // SAFETY: `at % chunk + n <= chunk`, inside the chunk allocation.
            let cpu = unsafe { base.add(at % self.chunk) };
            f(done, cpu, dma, n)?;
            done += n;
        }
        Ok(())
    }

    /// Copies `data` into the buffer at `offset` and hands the range to the device.
    ///
    /// The caller must not let the device access the range at the same time (no work request
    /// or remotely accessible MR covering it in flight); otherwise the contents are undefined.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result {
        let dev = self.pd.device().as_raw();
        self.for_each_piece(offset, data.len(), |pos, cpu, dma, n| {
            let src = data.get(pos..pos + n).ok_or(EINVAL)?;
            // SAFETY: `cpu` is valid for `n` bytes of our chunk, and `src` has `n` bytes; they
            // cannot overlap (`data` is a Rust slice, the chunk is never lent out).
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), cpu, n) };
            // SAFETY: `dma..dma + n` is part of our mapping on `dev`.
            unsafe {
                bindings::ib_dma_sync_single_for_device(
                    dev,
                    dma,
                    n,
                    bindings::dma_data_direction_DMA_BIDIRECTIONAL,
                )
            };
            Ok(())
        })
    }

    /// Fills `[offset, offset + len)` with `f(position)` bytes, where `position` is the offset in
    /// the buffer, and hands the range to the device. Same rules as [`DmaBuf::write`].
    pub fn fill(&self, offset: usize, len: usize, mut f: impl FnMut(usize) -> u8) -> Result {
        let mut block = [0u8; 256];
        let mut done = 0;
        while done < len {
            let n = block.len().min(len - done);
            for (i, b) in block.iter_mut().take(n).enumerate() {
                *b = f(offset + done + i);
            }
            self.write(offset + done, block.get(..n).ok_or(EINVAL)?)?;
            done += n;
        }
        Ok(())
    }

    /// Takes the range back from the device and copies it out of the buffer at `offset`.
    ///
    /// Same rules as [`DmaBuf::write`]: the device must be done with the range.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result {
        let dev = self.pd.device().as_raw();
        let len = out.len();
        self.for_each_piece(offset, len, |pos, cpu, dma, n| {
            // SAFETY: `dma..dma + n` is part of our mapping on `dev`.
            unsafe {
                bindings::ib_dma_sync_single_for_cpu(
                    dev,
                    dma,
                    n,
                    bindings::dma_data_direction_DMA_BIDIRECTIONAL,
                )
            };
            let dst = out.get_mut(pos..pos + n).ok_or(EINVAL)?;
            // SAFETY: `cpu` is valid for `n` bytes of our chunk; `dst` is a distinct Rust slice.
            unsafe { core::ptr::copy_nonoverlapping(cpu, dst.as_mut_ptr(), n) };
            Ok(())
        })
    }

    /// Compares `[offset, offset + len)` with `f(position)`; returns the position (buffer offset)
    /// of the first byte that differs, with the byte found, or `None` when all match.
    pub fn find_mismatch(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(usize) -> u8,
    ) -> Result<Option<(usize, u8)>> {
        self.check(offset, len)?;
        let mut block = [0u8; 256];
        let mut done = 0;
        while done < len {
            let n = block.len().min(len - done);
            let blk = block.get_mut(..n).ok_or(EINVAL)?;
            self.read(offset + done, blk)?;
            for (i, b) in blk.iter().enumerate() {
                let at = offset + done + i;
                if *b != f(at) {
                    return Ok(Some((at, *b)));
                }
            }
            done += n;
        }
        Ok(None)
    }

    /// Splits `[offset, offset + len)` into SGE pieces `(dma address, length)`: first into
    /// `parts` nearly equal parts (at least one byte each unless `len` is 0), then at chunk
    /// boundaries. A zero `len` gives one zero-length piece.
    pub(crate) fn pieces(
        &self,
        offset: usize,
        len: usize,
        parts: usize,
    ) -> Result<KVec<(u64, u32)>> {
        self.check(offset, len)?;
        let mut out = KVec::new();
        if len == 0 {
            let (dma, _) = self.dma_at(offset.min(self.len.saturating_sub(1)))?;
            out.push((dma, 0), GFP_KERNEL)?;
            return Ok(out);
        }
        let parts = parts.clamp(1, len);
        let mut start = offset;
        for p in 0..parts {
            // Part `p` ends at `len * (p + 1) / parts`, computed without overflow.
            let end = offset + (len / parts) * (p + 1) + (len % parts) * (p + 1) / parts;
            self.for_each_piece(start, end - start, |_, _, dma, n| {
                out.push((dma, n.try_into()?), GFP_KERNEL)?;
                Ok(())
            })?;
            start = end;
        }
        Ok(out)
    }

    /// Whether `[addr, addr + len)` (DMA addresses) lies inside this buffer's mapping.
    pub(crate) fn contains_dma(&self, addr: u64, len: u32) -> bool {
        let Some(end) = addr.checked_add(u64::from(len)) else {
            return false;
        };
        self.sg.iter().any(|sg| {
            let start = sg.dma_address;
            start <= addr && end <= start.saturating_add(u64::from(sg.dma_length))
        })
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        if !self.sg.is_empty() {
            // SAFETY: By the type invariant `sg` is mapped for this device; nothing uses the
            // buffer any more (users hold an `Arc`, QPs until they are destroyed).
            unsafe {
                bindings::ib_dma_unmap_sg(
                    self.pd.device().as_raw(),
                    self.sg.as_mut_ptr(),
                    // CAST: The entry count was checked to fit in `u32` (and `i32`) at mapping.
                    self.sg.len() as i32,
                    bindings::dma_data_direction_DMA_BIDIRECTIONAL,
                )
            };
        }
        for &c in self.chunks.iter() {
            // SAFETY: By the type invariant each chunk came from `into_raw_parts` of a `KVec`
            // of `chunk` bytes, and the device no longer uses it.
            drop(unsafe { KVec::from_raw_parts(c, self.chunk, self.chunk) });
        }
    }
}

/// The mapping state of an [`FrMr`], under its lock.
struct FrState {
    /// The buffer the MR was last mapped onto (kept alive for the device).
    buf: Option<Arc<DmaBuf>>,
    /// Scratch scatterlist for `ib_map_mr_sg`.
    sg: KVec<bindings::scatterlist>,
}

/// A fast-registration memory region (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`).
///
/// [`FrMr::map`] maps it onto a range of a [`DmaBuf`] in the CPU's view; a `REG_MR` work request
/// ([`super::qp::SendWr::reg_mr`]) makes the mapping and the current key valid on the device,
/// and `LOCAL_INV` (or a peer's `SEND_WITH_INV`/`READ_WITH_INV`) invalidates it. Use
/// [`FrMr::rotate_key`] before each new registration so that stale keys of the previous one
/// fail.
///
/// # Invariants
///
/// `mr` was returned by `ib_alloc_mr` for `pd` and is deregistered only in `drop`.
#[pin_data(PinnedDrop)]
pub struct FrMr {
    mr: NonNull<bindings::ib_mr>,
    pd: Arc<Pd>,
    max_sg: usize,
    #[pin]
    state: Mutex<FrState>,
}

// SAFETY: The MR is a core handle usable from any thread; its mutable fields (`iova`, `length`,
// keys) change only under `state`'s lock.
unsafe impl Send for FrMr {}
// SAFETY: See above.
unsafe impl Sync for FrMr {}

impl FrMr {
    /// Allocates an MR that can map up to `max_sg` scatterlist entries (the C API's
    /// `max_num_sg`; how many pages that covers is the provider's business).
    pub fn new(pd: &Arc<Pd>, max_sg: u32) -> Result<Arc<Self>> {
        let mut sg = KVec::with_capacity(max_sg.try_into()?, GFP_KERNEL)?;
        for _ in 0..max_sg {
            // SAFETY: All-zero is a valid scatterlist entry.
            sg.push(unsafe { core::mem::zeroed() }, GFP_KERNEL)?;
        }
        // SAFETY: `pd` is a valid PD.
        let mr = unsafe {
            bindings::ib_alloc_mr(pd.as_raw(), bindings::ib_mr_type_IB_MR_TYPE_MEM_REG, max_sg)
        };
        let mr = NonNull::new(from_err_ptr(mr)?).ok_or(ENOMEM)?;
        let init = pin_init!(FrMr {
            mr,
            pd: pd.clone(),
            max_sg: sg.len(),
            state <- new_mutex!(FrState { buf: None, sg }, "FrMr::state"),
        });
        match Arc::pin_init(init, GFP_KERNEL) {
            Ok(a) => Ok(a),
            Err(e) => {
                // SAFETY: The MR was just allocated and nothing else knows it.
                unsafe { bindings::ib_dereg_mr_user(mr.as_ptr(), core::ptr::null_mut()) };
                Err(e)
            }
        }
    }

    /// Returns the raw `ib_mr` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_mr {
        self.mr.as_ptr()
    }

    /// The PD the MR belongs to.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The current rkey (what a `REG_MR` posted now registers).
    pub fn rkey(&self) -> u32 {
        let _g = self.state.lock();
        // SAFETY: By the type invariant the MR is valid; keys change under `state`.
        unsafe { (*self.as_raw()).rkey }
    }

    /// The current lkey.
    pub fn lkey(&self) -> u32 {
        let _g = self.state.lock();
        // SAFETY: By the type invariant the MR is valid; keys change under `state`.
        unsafe { (*self.as_raw()).lkey }
    }

    /// The I/O virtual address the mapping starts at (the address a peer uses).
    pub fn iova(&self) -> u64 {
        let _g = self.state.lock();
        // SAFETY: By the type invariant the MR is valid; `iova` changes under `state`.
        unsafe { (*self.as_raw()).iova }
    }

    /// The length of the mapping in bytes.
    pub fn length(&self) -> u64 {
        let _g = self.state.lock();
        // SAFETY: By the type invariant the MR is valid; `length` changes under `state`.
        unsafe { (*self.as_raw()).length }
    }

    /// Moves to the next key (`ib_update_fast_reg_key(mr, ib_inc_rkey(rkey))`); returns the
    /// new rkey. The next `REG_MR` registers it; the old key stays valid until invalidated.
    pub fn rotate_key(&self) -> u32 {
        let _g = self.state.lock();
        // SAFETY: By the type invariant the MR is valid; keys change only here, under `state`.
        unsafe {
            let mr = self.as_raw();
            let next = bindings::ib_inc_rkey((*mr).rkey);
            // CAST: The key is the low byte of the rkey by definition.
            bindings::ib_update_fast_reg_key(mr, (next & 0xff) as u8);
            (*mr).rkey
        }
    }

    /// Maps the MR onto `[offset, offset + len)` of `buf` (`ib_map_mr_sg` with `PAGE_SIZE`
    /// pages). `len` must be non-zero. The buffer is kept alive until the next mapping or the
    /// MR's release. Must not be called while a `REG_MR` of this MR is in flight.
    pub fn map(&self, buf: &Arc<DmaBuf>, offset: usize, len: usize) -> Result {
        if len == 0 || !Arc::ptr_eq(buf.pd(), &self.pd) {
            return Err(EINVAL);
        }
        let mut st = self.state.lock();
        let mut pieces = KVec::<(u64, u32)>::new();
        buf.for_each_piece(offset, len, |_, _, dma, n| {
            pieces.push((dma, n.try_into()?), GFP_KERNEL)?;
            Ok(())
        })?;
        if pieces.len() > self.max_sg {
            return Err(EINVAL);
        }
        let n: u32 = pieces.len().try_into()?;
        // SAFETY: `st.sg` has `max_sg >= n` entries.
        unsafe { bindings::sg_init_table(st.sg.as_mut_ptr(), n) };
        for (i, (dma, l)) in pieces.iter().enumerate() {
            let sg = st.sg.get_mut(i).ok_or(EINVAL)?;
            // The device's view is all `ib_map_mr_sg` reads: DMA address and length.
            sg.dma_address = *dma;
            sg.dma_length = *l;
            sg.length = *l;
        }
        let mut sg_off: u32 = 0;
        // SAFETY: The MR is valid; `st.sg` holds `n` initialised entries of DMA addresses mapped
        // for this device (`buf` is mapped on the PD's device).
        let mapped = unsafe {
            bindings::ib_map_mr_sg(
                self.as_raw(),
                st.sg.as_mut_ptr(),
                n.try_into()?,
                &mut sg_off,
                // CAST: `PAGE_SIZE` is 4096 or another small power of two.
                PAGE_SIZE as u32,
            )
        };
        if mapped < 0 {
            to_result(mapped)?;
        }
        // CAST: `n` fits in `i32` (checked by `try_into` above).
        if mapped != n as i32 {
            return Err(EINVAL);
        }
        st.buf = Some(buf.clone());
        Ok(())
    }
}

#[pinned_drop]
impl PinnedDrop for FrMr {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the MR is allocated. QPs hold an `Arc` to every MR they
        // may use, so no work request refers to it any more.
        unsafe { bindings::ib_dereg_mr_user(self.as_raw(), core::ptr::null_mut()) };
    }
}
