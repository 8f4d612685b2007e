// SPDX-License-Identifier: GPL-2.0

//! Memory regions and their STags.
//!
//! An STag is a 24-bit index into the device's STag table and an 8-bit key the consumer
//! rotates on every fast registration. A peer's tagged access is honoured only for a valid
//! region whose index and key match, in the QP's protection domain, with the access right,
//! inside the registered bounds: `MrShared::check` decides that before any placement.

#![deny(unsafe_code)]

use crate::{
    device::Rsiw,
    proto::error::{DdpTagged, RdmapProtection, TermError},
};
use core::num::NonZeroU32;
use kernel::{
    irqlock::SpinLockIrq,
    new_spinlock_irq,
    prelude::*,
    random,
    rdma::{
        eopnotsupp,
        mr::{
            AllMemory, KernelRange, Mr, MrKeys, MrMapping, MrType, PageFacts, ACCESS_LOCAL_WRITE,
            ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
        },
        qp::Sge,
        udata::UserData,
        umem::UserMemory,
        verbs::{Pd, PdId},
    },
    sync::Arc,
};

/// Most memory regions per device (the STag table's size).
pub(crate) const MAX_MR: u32 = 1 << 16;
/// Most scatter/gather entries one fast-registration MR maps. As in C siw (and as ULPs size
/// their MRs), an entry is a run of contiguous pages: `map_mr_sg` merges adjacent pages.
pub(crate) const MAX_FRWR_PAGES: u32 = 512;

/// The most one peer access under a PD's global rkey (the DMA region's rkey) may cover: a
/// larger Read Request is refused at its header (base or bounds). It is the largest I/O
/// iSER sends (16 MiB); nvme-rdma's is 1 MiB. Writes come in segments of at most 64 KiB.
const GLOBAL_RKEY_MAX_LEN: u64 = 16 << 20;

/// Whether a peer's access with `rights` under the global rkey may reach a page that the
/// kernel's memory map calls usable RAM ([`AllMemory::peer_range`]).
///
/// Reserved pages are refused: the kernel image, what firmware keeps, holes (their direct-map
/// alias may be read-only or not RAM at all). Only the shared zero page may be read: direct
/// I/O of never-written anonymous memory pins it into a ULP's buffers. Any other page is
/// allowed, a free one too: the consumer exposed all memory to the peer, no legitimate buffer
/// is ever refused for being free (the tail pages of a high-order allocation count as free),
/// and the data path copies such pages rather than taking references on them.
fn global_rkey_reaches(page: PageFacts, rights: u32) -> bool {
    !page.reserved || (page.zero && rights & RIGHTS_WRITE == 0)
}

/// Rights only a peer's tagged access asks for.
const RIGHTS_REMOTE: u32 = RIGHTS_READ | RIGHTS_WRITE;

/// What an MR covers.
enum Kind {
    /// All kernel memory, addressed by kernel virtual address.
    Dma(AllMemory),
    /// Pages set by `map_mr_sg`, made valid by `IB_WR_REG_MR`.
    Frwr,
    /// A process's pages, pinned at registration (`ibv_reg_mr`) and valid until
    /// deregistration: they cannot be invalidated or registered again.
    User,
}

impl Kind {
    fn is_dma(&self) -> bool {
        matches!(self, Kind::Dma(_))
    }

    /// Whether the registration is fixed at creation (no fast registration or invalidation).
    fn is_fixed(&self) -> bool {
        !matches!(self, Kind::Frwr)
    }
}

/// An MR's registration, behind [`MrShared::state`]. The data path holds it while it checks and
/// copies through the region, and `IB_WR_REG_MR` and local or remote invalidation take it: all
/// under the QP lock (receive upcall in softirq or its work item, transmit work item), hence
/// interrupts off. `map_mr_sg` and `dereg_mr` take it too. Never nested with the STag table's;
/// the transmit path may take its zero-copy release log under it.
struct MrState {
    key: u8,
    valid: bool,
    access: u32,
    /// Runs of contiguous pages of the valid registration. Emptied by `dereg_mr` (process
    /// context), as the last reference may go with interrupts off and a large array is vmalloc
    /// memory.
    runs: KVVec<Option<KernelRange>>,
    nruns: usize,
    /// Where the last access ended: a run's index and its start (bytes into the runs). Data
    /// arrives in order, so the next access mostly starts in the same run: without the hint,
    /// each access of a large region walked all the runs before it.
    hint: (usize, u64),
    /// Runs `map_mr_sg` set up for the next `IB_WR_REG_MR` (a consumer may map while the
    /// previous registration is still valid, with its invalidation queued).
    mapped: KVVec<Option<KernelRange>>,
    nmapped: usize,
    iova: u64,
    /// How far into the runs the region starts.
    lead: u64,
    length: u64,
    page_size: u32,
}

/// The part of an MR that the STag table and the data path share.
#[pin_data]
pub(crate) struct MrShared {
    index: u32,
    kind: Kind,
    pd: PdId,
    #[pin]
    state: SpinLockIrq<MrState>,
}

/// Why a tagged access was refused, mapped to RDMAP/DDP errors by the data path.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum AccessError {
    /// No valid region has this STag (index, key or invalidated).
    InvalidStag,
    /// The region belongs to another protection domain.
    WrongPd,
    /// The region lacks the access right.
    Rights,
    /// The access leaves the registered bounds.
    Bounds,
    /// Tagged Offset plus length wraps past 2^64.
    ToWrap,
    /// The memory cannot be reached (an address outside what the region maps).
    Fault,
}

impl AccessError {
    /// The Terminate class for a Read Request whose source the region refuses (RFC 5040 §7:
    /// RDMAP remote protection errors).
    pub(crate) fn read_source_error(self) -> TermError {
        TermError::RdmapProtection(match self {
            AccessError::InvalidStag => RdmapProtection::InvalidStag,
            AccessError::WrongPd => RdmapProtection::StagNotAssociated,
            AccessError::Rights => RdmapProtection::AccessRights,
            // The STag is valid; the address lies outside the memory it reaches.
            AccessError::Bounds | AccessError::Fault => RdmapProtection::BaseBounds,
            AccessError::ToWrap => RdmapProtection::ToWrap,
        })
    }

    /// The Terminate class for a tagged segment the region refuses (RFC 5041 §7.2 tagged buffer
    /// errors; a missing right is an RDMAP protection error, RFC 5040 §7.1).
    pub(crate) fn tagged_sink_error(self) -> TermError {
        match self {
            AccessError::InvalidStag => TermError::DdpTagged(DdpTagged::InvalidStag),
            AccessError::WrongPd => TermError::DdpTagged(DdpTagged::StagNotAssociated),
            AccessError::Bounds | AccessError::Fault => TermError::DdpTagged(DdpTagged::BaseBounds),
            AccessError::ToWrap => TermError::DdpTagged(DdpTagged::ToWrap),
            AccessError::Rights => TermError::RdmapProtection(RdmapProtection::AccessRights),
        }
    }
}

impl MrShared {
    /// The STag of the region with key `key`.
    fn stag(&self, key: u8) -> u32 {
        self.index << 8 | u32::from(key)
    }

    /// Checks a tagged access of `len` bytes at `addr` with `rights` by a QP in PD `pd`.
    fn check_locked(
        &self,
        st: &MrState,
        stag: u32,
        pd: PdId,
        rights: u32,
        addr: u64,
        len: u64,
    ) -> Result<(), AccessError> {
        if !st.valid || self.stag(st.key) != stag {
            return Err(AccessError::InvalidStag);
        }
        if self.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if st.access & rights != rights {
            return Err(AccessError::Rights);
        }
        let end = addr.checked_add(len).ok_or(AccessError::ToWrap)?;
        if self.kind.is_dma() && rights & RIGHTS_REMOTE != 0 && len > GLOBAL_RKEY_MAX_LEN {
            return Err(AccessError::Bounds);
        }
        if !self.kind.is_dma() {
            let reg_end = st.iova.checked_add(st.length).ok_or(AccessError::Bounds)?;
            if addr < st.iova || end > reg_end {
                return Err(AccessError::Bounds);
            }
        }
        Ok(())
    }

    /// Checks an access of `len` bytes at `addr` (a Tagged Offset, or an SGE's address) with
    /// `rights` by a QP in PD `pd` under key `stag`, and if it is allowed calls `f` with the
    /// kernel memory it covers, in order, while the region cannot be invalidated.
    ///
    /// `f` returning an error stops the walk; that error is returned as [`MapError::Copy`].
    pub(crate) fn access<E>(
        &self,
        stag: u32,
        pd: PdId,
        rights: u32,
        addr: u64,
        len: u64,
        mut f: impl FnMut(KernelRange) -> Result<(), E>,
    ) -> Result<(), MapError<E>> {
        let mut st = self.state.lock();
        self.check_locked(&st, stag, pd, rights, addr, len)
            .map_err(MapError::Access)?;
        if len == 0 {
            return Ok(());
        }
        let fault = || MapError::Access(AccessError::Fault);
        match &self.kind {
            Kind::Dma(all) => {
                let n = usize::try_from(len).map_err(|_| fault())?;
                let range = if rights & RIGHTS_REMOTE != 0 {
                    all.peer_range(addr, n, |page| global_rkey_reaches(page, rights))
                } else {
                    all.range(addr, n)
                };
                f(range.map_err(|_| fault())?).map_err(MapError::Copy)
            }
            Kind::Frwr | Kind::User => {
                let start = addr - st.iova + st.lead;
                let (mut idx, mut run_start) = if start >= st.hint.1 { st.hint } else { (0, 0) };
                let mut skip = start - run_start;
                let mut left = len;
                let nruns = st.nruns.min(st.runs.len());
                while left != 0 && idx < nruns {
                    let Some(run) = st.runs.get(idx).copied().flatten() else {
                        break;
                    };
                    let rlen = run.len() as u64;
                    if skip >= rlen {
                        skip -= rlen;
                        run_start += rlen;
                        idx += 1;
                        continue;
                    }
                    let n = (rlen - skip).min(left);
                    // Both fit in `usize`: they are at most the run's length.
                    let part = run.sub(skip as usize, n as usize).map_err(|_| fault())?;
                    st.hint = (idx, run_start);
                    f(part).map_err(MapError::Copy)?;
                    left -= n;
                    skip = 0;
                    if left != 0 {
                        run_start += rlen;
                        idx += 1;
                    }
                }
                if left != 0 {
                    return Err(fault());
                }
                Ok(())
            }
        }
    }

    /// Checks a peer's Read Request of `len` bytes at `addr` under `stag` by a QP in PD `pd`, as
    /// [`Self::access`] would, in bounded time (the receive path runs it with interrupts off).
    /// Under the global rkey only the first page is looked at here: each FPDU of the Read
    /// Response has its own pages checked when it is built.
    pub(crate) fn check_read_source(
        &self,
        stag: u32,
        pd: PdId,
        addr: u64,
        len: u64,
    ) -> Result<(), AccessError> {
        let probe = match self.kind {
            Kind::Dma(_) => {
                self.check_locked(&self.state.lock(), stag, pd, RIGHTS_READ, addr, len)?;
                let page = kernel::page::PAGE_SIZE as u64;
                len.min(page - addr % page)
            }
            // At most `MAX_FRWR_PAGES` runs to walk, or a user region's own, from the hint.
            Kind::Frwr | Kind::User => len,
        };
        self.access(stag, pd, RIGHTS_READ, addr, probe, |_| {
            Ok::<(), core::convert::Infallible>(())
        })
        .map_err(|e| match e {
            MapError::Access(a) => a,
            MapError::Copy(never) => match never {},
        })
    }

    /// Invalidates the region if `stag` names it, as a local or remote invalidate does; with
    /// `apply` false only checks that it could.
    pub(crate) fn invalidate(&self, stag: u32, apply: bool) -> Result<(), AccessError> {
        let mut st = self.state.lock();
        if self.stag(st.key) != stag || self.kind.is_fixed() {
            return Err(AccessError::InvalidStag);
        }
        if apply {
            st.valid = false;
        }
        Ok(())
    }
}

/// Per-MR driver data.
pub(crate) struct MrData {
    shared: Arc<MrShared>,
    /// A user MR's pinned pages, unpinned when the MR is deregistered (after [`dereg_mr`]
    /// invalidated the region, so the data path no longer reaches them).
    _pinned: Option<UserMemory>,
}

/// The device's STag table, behind `DeviceData::stags`. Changed by `alloc_mr`, `get_dma_mr` and
/// `dereg_mr`; read by the data path under the QP lock (receive upcall in softirq or its work
/// item, transmit work item), hence interrupts off. Held only for a lookup: the region is then
/// used through its own reference and lock.
pub(crate) struct StagTable {
    slots: KVVec<Option<Arc<MrShared>>>,
}

/// Random indexes tried before a scan for a free one: while the table is at most half full,
/// all of them are taken with a chance of at most 1/256.
const RANDOM_PICKS: usize = 8;

impl StagTable {
    /// An empty table with [`MAX_MR`] slots.
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            slots: KVVec::from_elem(None, MAX_MR as usize, GFP_KERNEL)?,
        })
    }

    /// Finds a free index at random, as C siw does, so that a peer who sees some STags
    /// cannot predict the others. Index 0 is never used, so no valid STag is zero.
    fn free_index(&self) -> Option<usize> {
        let n = self.slots.len();
        let above_zero = NonZeroU32::new(u32::try_from(n).ok()?.checked_sub(1)?)?;
        let pick = || 1 + random::u32_below(above_zero) as usize;
        let free = |i: &usize| matches!(self.slots.get(*i), Some(None));
        (0..RANDOM_PICKS).map(|_| pick()).find(free).or_else(|| {
            // A crowded table: the first free index after a random one.
            let start = pick();
            (start..n).find(free).or_else(|| (1..start).find(free))
        })
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

/// What a user MR is made with.
struct UserRuns {
    mem: UserMemory,
    iova: u64,
}

fn new_mr(
    pd: &Pd<Rsiw>,
    kind: Kind,
    access: u32,
    max_pages: u32,
    user: Option<UserRuns>,
) -> Result<(MrData, MrKeys)> {
    let dev = pd.device();
    let mut runs = KVVec::from_elem(None, max_pages as usize, GFP_KERNEL)?;
    let mapped_pages = if matches!(kind, Kind::Frwr) {
        max_pages
    } else {
        0
    };
    let mapped = KVVec::from_elem(None, mapped_pages as usize, GFP_KERNEL)?;
    let valid = kind.is_fixed();
    let (mut nruns, mut iova, mut lead, mut length) = (0, 0, 0, 0);
    if let Some(u) = &user {
        u.mem.for_each_range(|r| {
            let slot = runs.get_mut(nruns).ok_or(EINVAL)?;
            *slot = Some(r);
            nruns += 1;
            Ok(())
        })?;
        iova = u.iova;
        lead = u.mem.offset();
        length = u.mem.len();
    }
    let mut table = dev.data().stags.lock();
    let index = table.free_index().ok_or(ENOSPC)?;
    let shared = Arc::pin_init(
        pin_init!(MrShared {
            index: index as u32,
            kind,
            pd: pd.id(),
            state <- new_spinlock_irq!(
                MrState {
                    key: 0,
                    valid,
                    access,
                    runs,
                    nruns,
                    hint: (0, 0),
                    mapped,
                    nmapped: 0,
                    iova,
                    lead,
                    length,
                    page_size: kernel::page::PAGE_SIZE as u32,
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
    Ok((
        MrData {
            shared,
            _pinned: user.map(|u| u.mem),
        },
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
    memory: AllMemory,
) -> Result<(impl PinInit<MrData, Error>, MrKeys)> {
    new_mr(pd, Kind::Dma(memory), access, 0, None)
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
    new_mr(pd, Kind::Frwr, 0, max_num_sg, None)
}

/// `reg_user_mr`: a region over the user memory `mem` pinned for it, addressed from `iova`.
/// Tells libsiw its STag (`struct siw_uresp_reg_mr`).
pub(crate) fn reg_user_mr(
    pd: &Pd<Rsiw>,
    mem: UserMemory,
    iova: u64,
    access: u32,
    udata: &mut UserData<'_>,
) -> Result<(impl PinInit<MrData, Error>, MrKeys)> {
    iova.checked_add(mem.len()).ok_or(EINVAL)?;
    let runs = u32::try_from(mem.num_ranges()).map_err(|_| EINVAL)?;
    let (data, keys) = new_mr(pd, Kind::User, access, runs, Some(UserRuns { mem, iova }))?;
    let mut resp = [0u8; 8];
    resp[..4].copy_from_slice(&keys.lkey.to_ne_bytes());
    if let Err(e) = udata.respond(&resp) {
        // Not published to the core: take it out of the STag table again.
        data.shared.unpublish(pd.device());
        return Err(e);
    }
    Ok((data, keys))
}

/// `dereg_mr`: removes the region from the STag table.
pub(crate) fn dereg_mr(mr: &Mr<Rsiw>) {
    mr.data().shared.unpublish(mr.device());
}

impl MrShared {
    /// Invalidates the region for good and removes it from `dev`'s STag table. Process context:
    /// the page arrays are freed here.
    fn unpublish(&self, dev: &kernel::rdma::device::Device<Rsiw>) {
        let (runs, mapped) = {
            let mut st = self.state.lock();
            st.valid = false;
            st.nruns = 0;
            st.nmapped = 0;
            (
                core::mem::replace(&mut st.runs, KVVec::new()),
                core::mem::replace(&mut st.mapped, KVVec::new()),
            )
        };
        drop((runs, mapped));
        let mut table = dev.data().stags.lock();
        if let Some(slot) = table.slots.get_mut(self.index as usize) {
            *slot = None;
        }
    }
}

/// `map_mr_sg` starts: the mapping for the next registration is built aside; the valid one
/// (if any) stays in force until it is invalidated.
pub(crate) fn map_begin(mr: &Mr<Rsiw>) -> Result {
    mr.data().shared.state.lock().nmapped = 0;
    Ok(())
}

/// `map_mr_sg` adds a page, merging it into the previous run when contiguous.
pub(crate) fn set_page(mr: &Mr<Rsiw>, page: KernelRange) -> Result {
    let mut st = mr.data().shared.state.lock();
    let n = st.nmapped;
    if let Some(Some(last)) = n.checked_sub(1).and_then(|i| st.mapped.get_mut(i)) {
        if let Some(merged) = last.merge(&page) {
            *last = merged;
            return Ok(());
        }
    }
    let slot = st.mapped.get_mut(n).ok_or(ENOMEM)?;
    *slot = Some(page);
    st.nmapped = n + 1;
    Ok(())
}

/// The part of `mr` the data path keeps.
pub(crate) fn shared_of(mr: &Mr<Rsiw>) -> Arc<MrShared> {
    mr.data().shared.clone()
}

/// Executes `IB_WR_REG_MR`: makes the region valid under `key` with `access`, over the
/// mapping `map_mr_sg` set up before the post.
pub(crate) fn register(
    shared: &MrShared,
    key: u32,
    access: u32,
    MrMapping {
        iova,
        length,
        page_size,
    }: MrMapping,
) -> Result {
    if key >> 8 != shared.index || shared.kind.is_fixed() {
        return Err(EINVAL);
    }
    let mut st = shared.state.lock();
    if st.valid {
        return Err(EINVAL);
    }
    // The region starts `iova % page_size` bytes into the first page and must fit the runs.
    let covered = st
        .mapped
        .iter()
        .take(st.nmapped)
        .flatten()
        .try_fold(0u64, |acc, r| acc.checked_add(r.len() as u64))
        .ok_or(EINVAL)?;
    if page_size == 0 {
        return Err(EINVAL);
    }
    let lead = iova % u64::from(page_size);
    if lead.checked_add(length).ok_or(EINVAL)? > covered {
        return Err(EINVAL);
    }
    let st = &mut *st;
    for (d, s) in st.runs.iter_mut().zip(st.mapped.iter().take(st.nmapped)) {
        *d = *s;
    }
    st.nruns = st.nmapped;
    st.hint = (0, 0);
    // The region starts `iova % page_size` into the runs.
    st.lead = iova % u64::from(page_size);
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
    pd: PdId,
    stag: u32,
) -> Result<(), AccessError> {
    invalidate_checked(dev, pd, stag, true)
}

/// Whether [`invalidate`] of `stag` would succeed: a peer's Send with Invalidate is checked
/// before its payload is placed, and invalidates only once it is all received.
pub(crate) fn can_invalidate(
    dev: &kernel::rdma::device::Device<Rsiw>,
    pd: PdId,
    stag: u32,
) -> Result<(), AccessError> {
    invalidate_checked(dev, pd, stag, false)
}

fn invalidate_checked(
    dev: &kernel::rdma::device::Device<Rsiw>,
    pd: PdId,
    stag: u32,
    apply: bool,
) -> Result<(), AccessError> {
    let mr = lookup(dev, stag).ok_or(AccessError::InvalidStag)?;
    if mr.pd != pd {
        return Err(AccessError::WrongPd);
    }
    mr.invalidate(stag, apply)
}

/// Rights a tagged Write needs.
pub(crate) const RIGHTS_WRITE: u32 = ACCESS_REMOTE_WRITE;
/// Rights a tagged Read needs.
pub(crate) const RIGHTS_READ: u32 = ACCESS_REMOTE_READ;
/// Rights placing received data into a local buffer needs.
pub(crate) const RIGHTS_LOCAL_WRITE: u32 = ACCESS_LOCAL_WRITE;
/// Rights reading a local buffer to send it needs (every valid region allows it).
pub(crate) const RIGHTS_LOCAL_READ: u32 = 0;

/// Why an access through a region failed: the region's refusal, or the caller's function's own
/// error `E` (which ended the walk).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum MapError<E = Error> {
    /// The region refused the access.
    Access(AccessError),
    /// The caller's function failed.
    Copy(E),
}

/// Walks the kernel memory behind `len` bytes at offset `off` of the message the SGEs in `sges`
/// describe, resolving each through its lkey in PD `pd` with `rights`, and calls `f` with each
/// piece and its offset in the message.
pub(crate) fn walk_sges<E>(
    dev: &kernel::rdma::device::Device<Rsiw>,
    pd: PdId,
    sges: &[Sge],
    rights: u32,
    off: u64,
    len: u64,
    mut f: impl FnMut(u64, KernelRange) -> Result<(), E>,
) -> Result<(), MapError<E>> {
    let mut skip = off;
    let mut left = len;
    let mut pos = off;
    for sge in sges {
        if left == 0 {
            break;
        }
        let slen = u64::from(sge.length);
        if skip >= slen {
            skip -= slen;
            continue;
        }
        let n = (slen - skip).min(left);
        let mr = lookup(dev, sge.lkey).ok_or(MapError::Access(AccessError::InvalidStag))?;
        let addr = sge
            .addr
            .checked_add(skip)
            .ok_or(MapError::Access(AccessError::ToWrap))?;
        mr.access(sge.lkey, pd, rights, addr, n, |r| {
            let at = pos;
            pos += r.len() as u64;
            f(at, r)
        })?;
        left -= n;
        skip = 0;
    }
    if left != 0 {
        return Err(MapError::Access(AccessError::Bounds));
    }
    Ok(())
}

/// Total length of the SGEs in `sges`, or `None` if it overflows 32 bits.
pub(crate) fn sges_len(sges: &[Sge]) -> Option<u32> {
    sges.iter().try_fold(0u32, |a, s| a.checked_add(s.length))
}
