// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: one FIFO of receive work requests for every QP attached to it, and
//! the limit ("low watermark") event.
//!
//! A QP on an SRQ takes a work request from it when the first segment of a Send arrives
//! ([`SrqQueue::take`]) and fills it like one of its own; the work request then belongs to
//! that QP: it completes on the QP's receive CQ, successfully or, if the QP fails meanwhile,
//! with `IB_WC_WR_FLUSH_ERR`. Work requests still queued stay in the SRQ when a QP fails (other
//! QPs go on using them); they are dropped, without completions, when the SRQ is destroyed.
//!
//! Locking: the SRQ's lock ([`SrqQueue::inner`]) disables interrupts, because work requests are
//! posted from any context. It is taken alone (post, modify, query) or nested inside a QP's
//! lock when that QP's receive path takes a work request: the order is always QP lock, then
//! SRQ lock. The limit event is reported once both are released (by the QP's deferred upcalls,
//! see `qp::Locked`).
//!
//! A user SRQ's work requests are in a ring user space writes ([`crate::uabi`]); a QP takes the
//! next valid entry from it the same way, and the limit event comes when the entry `limit`
//! places ahead is not valid (fewer than the limit remain), as in the C siw.
//!
//! Lifetime: the SRQ's state is an [`Arc<SrqQueue>`] that every QP created on the SRQ holds
//! until it is destroyed; the RDMA core also refuses to destroy an SRQ while a QP uses it.

#![deny(unsafe_code)]

use crate::{
    device::Rsiw,
    ring::Ring,
    uabi,
    wqe::{self, RecvEntry},
};
use kernel::{
    irqlock::SpinLockIrq,
    new_spinlock_irq,
    prelude::*,
    rdma::{
        eopnotsupp,
        qp::RecvWr,
        srq::{Srq, SrqAttr, SrqInitAttr, SrqModify},
        udata::UserData,
        verbs::{Pd, PdId},
    },
    sync::Arc,
};

/// Most SRQs per device.
pub(crate) const MAX_SRQ: u32 = 1024;
/// Most work requests per SRQ.
pub(crate) const MAX_SRQ_WR: u32 = wqe::MAX_QP_WR;

/// Per-SRQ driver data ([`kernel::rdma::device::Driver::Srq`]).
pub(crate) struct SrqData {
    /// The queue, shared with the QPs created on this SRQ.
    pub(crate) queue: Arc<SrqQueue>,
}

/// The state of an SRQ that its QPs share.
#[pin_data]
pub(crate) struct SrqQueue {
    /// Number of work requests the SRQ holds.
    max_wr: u32,
    /// Most SGEs of a work request.
    max_sge: u32,
    /// A user SRQ's ring (its work requests are there, not in [`SrqInner::rq`]).
    user: Option<uabi::RqRing>,
    /// The SRQ's PD (its address, as the STag table identifies PDs): the lkeys of the work
    /// requests' SGEs are checked against it, not against the PD of the QP that fills them.
    pd: PdId,
    #[pin]
    inner: SpinLockIrq<SrqInner>,
}

/// An SRQ's queued work requests and armed limit, behind [`SrqQueue::inner`]. Posted to from any
/// context a kernel ULP posts from; modified and queried by verbs; taken by a QP's receive path
/// (receive upcall in softirq, or its work item) with that QP's lock held. Nothing is locked
/// under it.
struct SrqInner {
    rq: Ring<RecvEntry>,
    /// A user SRQ's position in its ring: the next entry to take.
    user_next: u32,
    /// The armed limit: when a work request is taken and fewer than this remain,
    /// `IB_EVENT_SRQ_LIMIT_REACHED` is reported once and the limit disarmed (set to 0).
    limit: u32,
}

/// A work request taken from an SRQ.
pub(crate) struct Taken {
    /// The work request, if one was queued.
    pub(crate) entry: Option<RecvEntry>,
    /// The id of a user work request that was taken but cannot be used (too many SGEs): it
    /// completes with `IB_WC_LOC_QP_OP_ERR` on the taking QP, and `entry` is `None`.
    pub(crate) invalid: Option<u64>,
    /// Taking it crossed the armed limit: report `IB_EVENT_SRQ_LIMIT_REACHED` (without locks).
    pub(crate) limit_reached: bool,
}

/// Validates a create request, fits `attr` to what the SRQ provides, and builds its data. A user
/// SRQ gets a ring of a power-of-two size its context maps, described in the response to
/// `udata`.
pub(crate) fn create(
    pd: &Pd<Rsiw>,
    attr: &mut SrqInitAttr,
    udata: &mut UserData<'_>,
) -> Result<SrqData> {
    if !attr.basic {
        // XRC and tag-matching SRQs do not exist in iWARP.
        return Err(eopnotsupp());
    }
    let max_sge = if attr.user {
        uabi::MAX_SGE
    } else {
        wqe::MAX_SGE
    };
    if attr.max_wr == 0
        || attr.max_wr > MAX_SRQ_WR
        || attr.max_sge > max_sge
        || attr.srq_limit > attr.max_wr
    {
        return Err(EINVAL);
    }
    // The ring holds exactly `max_wr`; every work request may have up to `max_sge` SGEs.
    attr.max_sge = max_sge;
    let (user, kernel_wr) = if attr.user {
        // At most `MAX_SRQ_WR`, a power of two.
        attr.max_wr = attr.max_wr.next_power_of_two();
        let (ring, key) = uabi::RqRing::new(udata, attr.max_wr)?;
        // `struct siw_uresp_create_srq { u32 num_rqe; u32 pad; u64 srq_key; }`
        let mut resp = [0u8; 16];
        resp[..4].copy_from_slice(&attr.max_wr.to_ne_bytes());
        resp[8..].copy_from_slice(&key.to_ne_bytes());
        udata.respond(&resp)?;
        (Some(ring), 1)
    } else {
        (None, attr.max_wr)
    };
    let inner = SrqInner {
        rq: Ring::new(kernel_wr)?,
        user_next: 0,
        limit: attr.srq_limit,
    };
    let queue = Arc::pin_init(
        try_pin_init!(SrqQueue {
            max_wr: attr.max_wr,
            max_sge,
            user,
            pd: pd.id(),
            inner <- new_spinlock_irq!(inner, "rsiw::SrqQueue::inner"),
        }),
        GFP_KERNEL,
    )?;
    Ok(SrqData { queue })
}

impl SrqQueue {
    /// The SRQ's PD, as the STag table identifies PDs.
    pub(crate) fn pd(&self) -> PdId {
        self.pd
    }

    /// `ib_post_srq_recv` for one work request: queues a copy of it, or fails with `ENOMEM`
    /// when the SRQ is full (and `EINVAL` for too many SGEs).
    pub(crate) fn post(&self, wr: &RecvWr<'_>) -> Result {
        if self.user.is_some() {
            // User space writes its ring.
            return Err(EINVAL);
        }
        let (sges, num_sge) = wqe::copy_sges(wr.sges, wqe::MAX_SGE)?;
        let entry = RecvEntry {
            wr_id: wr.wr_id,
            sges,
            num_sge,
        };
        self.inner.lock().rq.push(entry).map_err(|_| ENOMEM)
    }

    /// Takes the oldest work request (a message starts arriving on one of the SRQ's QPs). The
    /// caller holds that QP's lock (lock order: QP, then SRQ).
    pub(crate) fn take(&self) -> Taken {
        let mut g = self.inner.lock();
        let (entry, invalid, below_limit) = match &self.user {
            None => {
                let entry = g.rq.pop();
                let left = g.rq.len();
                let below = u32::try_from(left).is_ok_and(|n| n < g.limit);
                (entry, None, below)
            }
            Some(ring) => match ring.take(g.user_next) {
                None => (None, None, false),
                Some(copy) => {
                    g.user_next = g.user_next.wrapping_add(1);
                    // Fewer than `limit` remain if the one `limit` places on is not posted.
                    let below = g.limit != 0
                        && !ring.is_posted(g.user_next.wrapping_add(g.limit.wrapping_sub(1)));
                    match uabi::parse_rqe(&copy) {
                        Some(r) => (Some(r), None, below),
                        None => (None, Some(uabi::entry_id(&copy)), below),
                    }
                }
            },
        };
        let limit_reached = (entry.is_some() || invalid.is_some()) && g.limit != 0 && below_limit;
        if limit_reached {
            g.limit = 0;
        }
        Taken {
            entry,
            invalid,
            limit_reached,
        }
    }

    /// `ib_modify_srq`: arms (or with 0 disarms) the limit. Resizing is not supported
    /// (`EOPNOTSUPP`), as in the C siw. Nothing changes if any part of the request fails.
    ///
    /// Arming does not look at the current fill level: the event comes when a later work
    /// request is taken and fewer than the limit remain.
    pub(crate) fn modify(&self, m: &SrqModify) -> Result {
        if m.unknown_bits != 0 {
            return Err(EINVAL);
        }
        if m.max_wr.is_some() {
            return Err(eopnotsupp());
        }
        if let Some(limit) = m.srq_limit {
            if limit > self.max_wr {
                return Err(EINVAL);
            }
            self.inner.lock().limit = limit;
        }
        Ok(())
    }

    /// `ib_query_srq`.
    pub(crate) fn query(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.inner.lock().limit,
        }
    }
}

/// The queue of `srq`.
pub(crate) fn queue(srq: &Srq<Rsiw>) -> &Arc<SrqQueue> {
    &srq.data().queue
}
