// SPDX-License-Identifier: GPL-2.0

//! Memory regions and their STags.
//!
//! An STag is a 24-bit index into the device's STag table and an 8-bit key the consumer
//! rotates on every fast registration. A peer's tagged access is honoured only for a valid
//! region whose index and key match, in the QP's protection domain, with the access right,
//! inside the registered bounds: `MrShared::check` decides that before any placement.

#![deny(unsafe_code)]

use crate::device::Rsiw;
use kernel::{
    irqlock::SpinLockIrq,
    new_spinlock_irq,
    prelude::*,
    rdma::{
        eopnotsupp,
        mr::{Mr, MrKeys, MrType, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE},
        verbs::Pd,
    },
    sync::Arc,
};

/// Most memory regions per device (the STag table's size).
pub(crate) const MAX_MR: u32 = 1 << 16;
/// Most scatter/gather entries one fast-registration MR maps. As in C siw (and as ULPs size
/// their MRs), an entry is a run of contiguous pages: `map_mr_sg` merges adjacent pages.
pub(crate) const MAX_FRWR_PAGES: u32 = 512;

/// What an MR covers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// All kernel memory, addressed by kernel virtual address.
    Dma,
    /// Pages set by `map_mr_sg`, made valid by `IB_WR_REG_MR`.
    Frwr,
}

struct MrState {
    key: u8,
    valid: bool,
    access: u32,
    /// Runs of contiguous pages: (DMA address, length).
    runs: KVVec<(u64, u64)>,
    nruns: usize,
    iova: u64,
    length: u64,
    page_size: u32,
}

/// The part of an MR that the STag table and the data path share.
#[pin_data]
pub(crate) struct MrShared {
    index: u32,
    kind: Kind,
    pd: usize,
    #[pin]
    state: SpinLockIrq<MrState>,
}

/// Why a tagged access was refused, mapped to RDMAP/DDP errors by the data path.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[allow(
    dead_code,
    reason = "read by the transmit and receive paths, which come next"
)]
pub(crate) enum AccessError {
    /// No valid region has this STag (index, key or invalidated).
    InvalidStag,
    /// The region belongs to another protection domain.
    WrongPd,
    /// The region lacks the access right.
    Rights,
    /// The access leaves the registered bounds.
    Bounds,
}

impl MrShared {
    /// The STag of the region with key `key`.
    fn stag(&self, key: u8) -> u32 {
        self.index << 8 | u32::from(key)
    }

    #[expect(
        dead_code,
        reason = "read by the transmit and receive paths, which come next"
    )]
    /// Checks a tagged access of `len` bytes at `addr` with `rights` by a QP in PD `pd`.
    pub(crate) fn check(
        &self,
        stag: u32,
        pd: usize,
        rights: u32,
        addr: u64,
        len: u64,
    ) -> Result<(), AccessError> {
        let st = self.state.lock();
        if !st.valid || self.stag(st.key) != stag {
            return Err(AccessError::InvalidStag);
        }
        if self.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if st.access & rights != rights {
            return Err(AccessError::Rights);
        }
        if self.kind == Kind::Frwr {
            let end = addr.checked_add(len).ok_or(AccessError::Bounds)?;
            let reg_end = st.iova.checked_add(st.length).ok_or(AccessError::Bounds)?;
            if addr < st.iova || end > reg_end {
                return Err(AccessError::Bounds);
            }
        }
        Ok(())
    }

    /// Invalidates the region if `stag` names it, as a local or remote invalidate does.
    pub(crate) fn invalidate(&self, stag: u32) -> Result<(), AccessError> {
        let mut st = self.state.lock();
        if self.stag(st.key) != stag || self.kind == Kind::Dma {
            return Err(AccessError::InvalidStag);
        }
        st.valid = false;
        Ok(())
    }
}

/// Per-MR driver data.
pub(crate) struct MrData {
    shared: Arc<MrShared>,
}

/// The device's STag table.
pub(crate) struct StagTable {
    slots: KVVec<Option<Arc<MrShared>>>,
    next: usize,
}

impl StagTable {
    /// An empty table with [`MAX_MR`] slots.
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            slots: KVVec::from_elem(None, MAX_MR as usize, GFP_KERNEL)?,
            // Index 0 is never used, so no valid STag is zero.
            next: 1,
        })
    }

    /// Finds a free index, starting after the last one handed out.
    fn free_index(&self) -> Option<usize> {
        let n = self.slots.len();
        (0..n)
            .map(|i| {
                let j = self.next + i;
                if j >= n {
                    j - n
                } else {
                    j
                }
            })
            .find(|&j| j != 0 && matches!(self.slots.get(j), Some(None)))
    }
}

/// Looks up the region an STag's index names (the key is checked by [`MrShared::check`]).
pub(crate) fn lookup(dev: &kernel::rdma::device::Device<Rsiw>, stag: u32) -> Option<Arc<MrShared>> {
    let table = dev.data().stags.lock();
    table
        .slots
        .get((stag >> 8) as usize)
        .and_then(|s| s.clone())
}

fn new_mr(
    pd: &Pd<Rsiw>,
    kind: Kind,
    access: u32,
    max_pages: u32,
) -> Result<(impl PinInit<MrData, Error>, MrKeys)> {
    let dev = pd.device();
    let runs = KVVec::from_elem((0u64, 0u64), max_pages as usize, GFP_KERNEL)?;
    let mut table = dev.data().stags.lock();
    let index = table.free_index().ok_or(ENOSPC)?;
    let valid = kind == Kind::Dma;
    let shared = Arc::pin_init(
        pin_init!(MrShared {
            index: index as u32,
            kind,
            pd: pd.as_raw() as usize,
            state <- new_spinlock_irq!(
                MrState {
                    key: 0,
                    valid,
                    access,
                    runs,
                    nruns: 0,
                    iova: 0,
                    length: 0,
                    page_size: 0,
                },
                "rsiw::MrShared::state"
            ),
        }),
        GFP_ATOMIC,
    )?;
    let stag = shared.stag(0);
    if let Some(slot) = table.slots.get_mut(index) {
        *slot = Some(shared.clone());
    }
    table.next = index + 1;
    Ok((
        MrData { shared },
        MrKeys {
            lkey: stag,
            rkey: stag,
        },
    ))
}

/// `get_dma_mr`: a region over all kernel memory.
pub(crate) fn get_dma_mr(
    pd: &Pd<Rsiw>,
    access: u32,
) -> Result<(impl PinInit<MrData, Error>, MrKeys)> {
    new_mr(pd, Kind::Dma, access, 0)
}

/// `alloc_mr`: a fast-registration region of up to `max_num_sg` runs of pages.
pub(crate) fn alloc_mr(
    pd: &Pd<Rsiw>,
    ty: MrType,
    max_num_sg: u32,
) -> Result<(impl PinInit<MrData, Error>, MrKeys)> {
    if ty != MrType::MemReg {
        return Err(eopnotsupp());
    }
    if max_num_sg == 0 || max_num_sg > MAX_FRWR_PAGES {
        return Err(EINVAL);
    }
    new_mr(pd, Kind::Frwr, 0, max_num_sg)
}

/// `dereg_mr`: removes the region from the STag table.
pub(crate) fn dereg_mr(mr: &Mr<Rsiw>) {
    let shared = &mr.data().shared;
    shared.state.lock().valid = false;
    let mut table = mr.device().data().stags.lock();
    if let Some(slot) = table.slots.get_mut(shared.index as usize) {
        *slot = None;
    }
}

/// `map_mr_sg` starts.
pub(crate) fn map_begin(mr: &Mr<Rsiw>) -> Result {
    let mut st = mr.data().shared.state.lock();
    if st.valid {
        // A valid region must be invalidated before it is mapped again.
        return Err(EINVAL);
    }
    st.nruns = 0;
    Ok(())
}

/// `map_mr_sg` adds a page, merging it into the previous run when contiguous.
pub(crate) fn set_page(mr: &Mr<Rsiw>, addr: u64) -> Result {
    let page_size = u64::from(mr.mapping().2);
    let mut st = mr.data().shared.state.lock();
    let n = st.nruns;
    if let Some(last) = n.checked_sub(1).and_then(|i| st.runs.get_mut(i)) {
        if last.0.checked_add(last.1) == Some(addr) {
            last.1 = last.1.checked_add(page_size).ok_or(EINVAL)?;
            return Ok(());
        }
    }
    let slot = st.runs.get_mut(n).ok_or(ENOMEM)?;
    *slot = (addr, page_size);
    st.nruns = n + 1;
    Ok(())
}

/// Executes `IB_WR_REG_MR`: makes `mr` valid under `key` with `access`.
pub(crate) fn register(mr: &Mr<Rsiw>, key: u32, access: u32) -> Result {
    let shared = &mr.data().shared;
    if key >> 8 != shared.index || shared.kind != Kind::Frwr {
        return Err(EINVAL);
    }
    let (iova, length, page_size) = mr.mapping();
    let mut st = shared.state.lock();
    if st.valid {
        return Err(EINVAL);
    }
    // The region starts `iova % page_size` bytes into the first page and must fit the runs.
    let covered = st
        .runs
        .iter()
        .take(st.nruns)
        .try_fold(0u64, |acc, r| acc.checked_add(r.1))
        .ok_or(EINVAL)?;
    if page_size == 0 {
        return Err(EINVAL);
    }
    let lead = iova % u64::from(page_size);
    if lead.checked_add(length).ok_or(EINVAL)? > covered {
        return Err(EINVAL);
    }
    st.key = key as u8;
    st.access = access;
    st.iova = iova;
    st.length = length;
    st.page_size = page_size;
    st.valid = true;
    Ok(())
}

/// Executes `IB_WR_LOCAL_INV` (or a peer's Send with Invalidate): invalidates `stag` if it
/// names a fast-registration region of `pd`.
pub(crate) fn invalidate(
    dev: &kernel::rdma::device::Device<Rsiw>,
    pd: usize,
    stag: u32,
) -> Result<(), AccessError> {
    let mr = lookup(dev, stag).ok_or(AccessError::InvalidStag)?;
    if mr.pd != pd {
        return Err(AccessError::WrongPd);
    }
    mr.invalidate(stag)
}

/// Rights a tagged Write needs.
#[expect(
    dead_code,
    reason = "read by the transmit and receive paths, which come next"
)]
pub(crate) const RIGHTS_WRITE: u32 = ACCESS_REMOTE_WRITE;
/// Rights a tagged Read needs.
#[expect(
    dead_code,
    reason = "read by the transmit and receive paths, which come next"
)]
pub(crate) const RIGHTS_READ: u32 = ACCESS_REMOTE_READ;
