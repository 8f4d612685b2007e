// SPDX-License-Identifier: GPL-2.0

//! Memory a user context maps and shares with the driver: the rings user-space providers post
//! work requests to and poll completions from without a system call.
//!
//! The memory comes from `vmalloc_user` and is offered to the process through the core's mmap
//! table (`rdma_user_mmap_entry`). User space may write any byte of it at any time, so the
//! driver only ever reads and writes single aligned values here ([`UserMapped::read_u64`],
//! [`UserMapped::load_u16`] and their kin): no reference to the memory is handed out.

use super::udata::UserData;
use crate::{bindings, error::Result, prelude::*, types::Opaque};
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering},
};

/// The core's mmap entry, followed by the memory it maps.
#[repr(C)]
struct Entry {
    rdma: Opaque<bindings::rdma_user_mmap_entry>,
    addr: *mut u8,
    len: usize,
}

/// A region of user-mappable memory, registered in a user context's mmap table.
///
/// Dropping it removes the entry from the table (a later `mmap` of its key fails); the memory is
/// freed once no `mmap` call uses the entry any more. Pages a process mapped stay valid for it:
/// the mapping holds their references.
///
/// # Invariants
///
/// `entry` points at a live [`Entry`] inserted into a user context's mmap table, whose insertion
/// reference this object owns. `addr..addr + len` is `vmalloc_user` memory, freed only by
/// [`free_entry`] when the entry's last reference goes, so it is valid while `self` lives.
pub struct UserMapped {
    entry: NonNull<Entry>,
}

// SAFETY: The memory is only accessed through atomic or volatile single-value accesses, from any
// context; the entry is owned.
unsafe impl Send for UserMapped {}
// SAFETY: See above.
unsafe impl Sync for UserMapped {}

impl UserMapped {
    /// Allocates `len` bytes (zeroed, rounded up to pages) that the user context of `udata` may
    /// map, and returns them with the offset user space passes to `mmap` for them.
    ///
    /// Fails with `EINVAL` for a kernel caller (no user context) or a zero length.
    pub fn new(udata: &UserData<'_>, len: usize) -> Result<(Self, u64)> {
        let uctx = udata.ucontext_raw().ok_or(EINVAL)?;
        if len == 0 {
            return Err(EINVAL);
        }
        // SAFETY: Any size may be requested; a null return is handled.
        let addr = unsafe { bindings::vmalloc_user_noprof(len) }.cast::<u8>();
        if addr.is_null() {
            return Err(ENOMEM);
        }
        let entry = match KBox::new(
            Entry {
                // SAFETY: An all-zero entry is what the core expects before insertion.
                rdma: Opaque::new(unsafe { core::mem::zeroed() }),
                addr,
                len,
            },
            GFP_KERNEL,
        ) {
            Ok(e) => KBox::into_raw(e),
            Err(e) => {
                // SAFETY: `addr` came from `vmalloc_user` and nothing else knows it.
                unsafe { bindings::vfree(addr.cast()) };
                return Err(e.into());
            }
        };
        // SAFETY: `uctx` is the live user context of this uverbs call; the entry is zeroed, as
        // the core expects, and stays allocated until `free_entry`.
        let rc = unsafe { bindings::rdma_user_mmap_entry_insert(uctx, (*entry).rdma.get(), len) };
        if rc != 0 {
            // SAFETY: The insertion failed, so the core holds no reference: undo both
            // allocations.
            unsafe {
                bindings::vfree(addr.cast());
                drop(KBox::from_raw(entry));
            }
            return Err(Error::from_errno(rc));
        }
        // SAFETY: The entry was inserted, which set its offset.
        let key = unsafe { bindings::rdma_user_mmap_get_offset((*entry).rdma.get()) };
        // INVARIANT: Inserted above; the insertion reference is ours.
        Ok((
            Self {
                // SAFETY: `KBox::into_raw` never returns null.
                entry: unsafe { NonNull::new_unchecked(entry) },
            },
            key,
        ))
    }

    /// The size in bytes, as requested.
    pub fn len(&self) -> usize {
        // SAFETY: By the type invariant the entry is live.
        unsafe { self.entry.as_ref().len }
    }

    /// Whether the region is empty (never: [`Self::new`] refuses a zero length).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address of a `T` at byte offset `off`, if it lies inside and is aligned.
    fn at<T>(&self, off: usize) -> Result<*mut T> {
        // SAFETY: By the type invariant the entry is live.
        let e = unsafe { self.entry.as_ref() };
        let end = off.checked_add(core::mem::size_of::<T>()).ok_or(EINVAL)?;
        if end > e.len || off % core::mem::align_of::<T>() != 0 {
            return Err(EINVAL);
        }
        // SAFETY: `off` is inside the region (checked above).
        Ok(unsafe { e.addr.add(off) }.cast())
    }

    /// Reads the `u64` at byte offset `off` (8-byte aligned) once.
    pub fn read_u64(&self, off: usize) -> Result<u64> {
        let p = self.at::<u64>(off)?;
        // SAFETY: `p` is aligned and inside the live region; a volatile read of memory user
        // space may write at the same time yields some value of it.
        Ok(unsafe { p.read_volatile() })
    }

    /// Writes `v` to the `u64` at byte offset `off` (8-byte aligned).
    pub fn write_u64(&self, off: usize, v: u64) -> Result {
        let p = self.at::<u64>(off)?;
        // SAFETY: As in `read_u64`.
        unsafe { p.write_volatile(v) };
        Ok(())
    }

    /// Writes `v` to the `u32` at byte offset `off` (4-byte aligned).
    pub fn write_u32(&self, off: usize, v: u32) -> Result {
        let p = self.at::<u32>(off)?;
        // SAFETY: As in `read_u64`.
        unsafe { p.write_volatile(v) };
        Ok(())
    }

    /// Writes `v` to the `u16` at byte offset `off` (2-byte aligned).
    pub fn write_u16(&self, off: usize, v: u16) -> Result {
        let p = self.at::<u16>(off)?;
        // SAFETY: As in `read_u64`.
        unsafe { p.write_volatile(v) };
        Ok(())
    }

    /// Writes `v` to the byte at offset `off`.
    pub fn write_u8(&self, off: usize, v: u8) -> Result {
        let p = self.at::<u8>(off)?;
        // SAFETY: As in `read_u64`.
        unsafe { p.write_volatile(v) };
        Ok(())
    }

    /// Atomically loads the `u32` at byte offset `off` (4-byte aligned) with `order`.
    pub fn load_u32(&self, off: usize, order: Ordering) -> Result<u32> {
        let p = self.at::<u32>(off)?;
        // SAFETY: `p` is aligned and inside the live region, and only accessed atomically or
        // by single volatile accesses here.
        Ok(unsafe { AtomicU32::from_ptr(p) }.load(order))
    }

    /// Atomically stores `v` to the `u32` at byte offset `off` (4-byte aligned) with `order`.
    pub fn store_u32(&self, off: usize, v: u32, order: Ordering) -> Result {
        let p = self.at::<u32>(off)?;
        // SAFETY: As in `load_u32`.
        unsafe { AtomicU32::from_ptr(p) }.store(v, order);
        Ok(())
    }

    /// Atomically loads the `u16` at byte offset `off` (2-byte aligned) with `order`.
    pub fn load_u16(&self, off: usize, order: Ordering) -> Result<u16> {
        let p = self.at::<u16>(off)?;
        // SAFETY: As in `load_u32`.
        Ok(unsafe { AtomicU16::from_ptr(p) }.load(order))
    }

    /// Atomically stores `v` to the `u16` at byte offset `off` (2-byte aligned) with `order`.
    pub fn store_u16(&self, off: usize, v: u16, order: Ordering) -> Result {
        let p = self.at::<u16>(off)?;
        // SAFETY: As in `load_u32`.
        unsafe { AtomicU16::from_ptr(p) }.store(v, order);
        Ok(())
    }

    /// Atomically loads the byte at offset `off` with `order`.
    pub fn load_u8(&self, off: usize, order: Ordering) -> Result<u8> {
        let p = self.at::<u8>(off)?;
        // SAFETY: As in `load_u32`.
        Ok(unsafe { AtomicU8::from_ptr(p) }.load(order))
    }

    /// Atomically stores `v` to the byte at offset `off` with `order`.
    pub fn store_u8(&self, off: usize, v: u8, order: Ordering) -> Result {
        let p = self.at::<u8>(off)?;
        // SAFETY: As in `load_u32`.
        unsafe { AtomicU8::from_ptr(p) }.store(v, order);
        Ok(())
    }
}

impl Drop for UserMapped {
    /// Removes the entry from its context's mmap table. Process context: the memory may be
    /// freed here, which can sleep.
    fn drop(&mut self) {
        // SAFETY: By the type invariant the entry is inserted and the insertion reference is
        // ours; it is given up here, once.
        unsafe { bindings::rdma_user_mmap_entry_remove((*self.entry.as_ptr()).rdma.get()) };
    }
}

/// `ib_device_ops.mmap`: maps the region whose key is the mapping's offset.
///
/// # Safety
///
/// `uctx` is a live user context of a device whose mmap entries are all [`Entry`]s, and `vma` the
/// mapping being set up for it, as the core passes them.
pub(super) unsafe extern "C" fn mmap(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> crate::ffi::c_int {
    // SAFETY: Guaranteed by the caller. The lookup takes a reference, and checks that the
    // mapping's length is the entry's.
    let rdma = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
    if rdma.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: Every entry of this device is the first field of an `Entry` (`repr(C)`), alive
    // while the reference taken above is held.
    let entry = unsafe { &*rdma.cast::<Entry>() };
    // SAFETY: `entry.addr` is `vmalloc_user` memory of at least the mapping's length (checked
    // by the lookup), kept allocated by our reference.
    let rc = unsafe { bindings::remap_vmalloc_range(vma, entry.addr.cast(), 0) };
    // SAFETY: Drops the reference taken above.
    unsafe { bindings::rdma_user_mmap_entry_put(rdma) };
    rc
}

/// `ib_device_ops.mmap_free`: frees an entry and its memory once its last reference is gone.
///
/// # Safety
///
/// `rdma` is the `rdma` field of an [`Entry`] made by [`UserMapped::new`], whose reference count
/// reached zero; nothing uses it any more.
pub(super) unsafe extern "C" fn free_entry(rdma: *mut bindings::rdma_user_mmap_entry) {
    let entry = rdma.cast::<Entry>();
    // SAFETY: Guaranteed by the caller: the box was leaked in `UserMapped::new`, and the memory
    // was `vmalloc_user`'d there; pages a process still maps keep their own references.
    unsafe {
        bindings::vfree((*entry).addr.cast());
        drop(KBox::from_raw(entry));
    }
}
