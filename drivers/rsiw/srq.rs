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
//! Lifetime: the SRQ's state is an [`Arc<SrqQueue>`] that every QP created on the SRQ holds
//! until it is destroyed; the RDMA core also refuses to destroy an SRQ while a QP uses it.

#![deny(unsafe_code)]

use crate::{
    device::Rsiw,
    qp::{self, RecvEntry},
    ring::Ring,
};
use kernel::{
    irqlock::SpinLockIrq,
    new_spinlock_irq,
    prelude::*,
    rdma::{
        eopnotsupp,
        qp::RecvWr,
        srq::{Srq, SrqAttr, SrqInitAttr, SrqModify},
        verbs::{Pd, PdId},
    },
    sync::Arc,
};

/// Most SRQs per device.
pub(crate) const MAX_SRQ: u32 = 1024;
/// Most work requests per SRQ.
pub(crate) const MAX_SRQ_WR: u32 = qp::MAX_QP_WR;

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
    /// The armed limit: when a work request is taken and fewer than this remain,
    /// `IB_EVENT_SRQ_LIMIT_REACHED` is reported once and the limit disarmed (set to 0).
    limit: u32,
}

/// A work request taken from an SRQ.
pub(crate) struct Taken {
    /// The work request, if one was queued.
    pub(crate) entry: Option<RecvEntry>,
    /// Taking it crossed the armed limit: report `IB_EVENT_SRQ_LIMIT_REACHED` (without locks).
    pub(crate) limit_reached: bool,
}

/// Validates a create request, fits `attr` to what the SRQ provides, and builds its data.
pub(crate) fn create(pd: &Pd<Rsiw>, attr: &mut SrqInitAttr) -> Result<SrqData> {
    if attr.user {
        // The user-space (libsiw) SRQ ring ABI is not implemented.
        return Err(eopnotsupp());
    }
    if !attr.basic {
        // XRC and tag-matching SRQs do not exist in iWARP.
        return Err(eopnotsupp());
    }
    if attr.max_wr == 0
        || attr.max_wr > MAX_SRQ_WR
        || attr.max_sge > qp::MAX_SGE
        || attr.srq_limit > attr.max_wr
    {
        return Err(EINVAL);
    }
    // The ring holds exactly `max_wr`; every work request may have up to `MAX_SGE` SGEs.
    attr.max_sge = qp::MAX_SGE;
    let inner = SrqInner {
        rq: Ring::new(attr.max_wr)?,
        limit: attr.srq_limit,
    };
    let queue = Arc::pin_init(
        try_pin_init!(SrqQueue {
            max_wr: attr.max_wr,
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
        let (sges, num_sge) = qp::copy_sges(wr.sges, qp::MAX_SGE)?;
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
        let entry = g.rq.pop();
        let left = g.rq.len();
        let limit_reached =
            entry.is_some() && g.limit != 0 && u32::try_from(left).is_ok_and(|n| n < g.limit);
        if limit_reached {
            g.limit = 0;
        }
        Taken {
            entry,
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
            max_sge: qp::MAX_SGE,
            srq_limit: self.inner.lock().limit,
        }
    }
}

/// The queue of `srq`.
pub(crate) fn queue(srq: &Srq<Rsiw>) -> &Arc<SrqQueue> {
    &srq.data().queue
}
