// SPDX-License-Identifier: GPL-2.0

//! Completion queues: a bounded ring of work completions with one-shot arming.

#![deny(unsafe_code)]

use crate::{device::Rsiw, ring::Ring};
use kernel::{
    irqlock::SpinLockIrq,
    new_spinlock_irq,
    prelude::*,
    rdma::verbs::{Cq, CqInitAttr, NotifyRequest, WcArray, WcStatus, WorkCompletion},
};

/// Most entries one CQ may have.
pub(crate) const MAX_CQE: u32 = 1 << 20;

/// What the consumer armed the CQ for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arm {
    /// No upcall wanted (the state after an upcall, and initially).
    None,
    /// Upcall on the next solicited or error completion.
    Solicited,
    /// Upcall on the next completion.
    Next,
}

/// A CQ's completions and arming, behind [`CqData::ring`]. [`queue`] runs under a QP lock: from
/// the receive path (softirq or work item), the transmit work item, and posts or state changes
/// that flush. Consumers poll and arm from any context. No other lock is taken under it.
struct CqRing {
    entries: Ring<WorkCompletion>,
    arm: Arm,
}

/// Per-CQ state. The lock disables interrupts: completions are added from softirq (receive)
/// and process context, and consumers poll from any context.
#[pin_data]
pub(crate) struct CqData {
    #[pin]
    ring: SpinLockIrq<CqRing>,
}

impl CqData {
    /// Validates `attr` and creates the data for a CQ of `attr.cqe` entries.
    pub(crate) fn new(attr: &CqInitAttr) -> Result<(impl PinInit<Self, Error>, u32)> {
        if attr.user {
            // The user-space (libsiw) CQ ring ABI is not implemented.
            return Err(kernel::rdma::eopnotsupp());
        }
        if attr.flags != 0 {
            return Err(kernel::rdma::eopnotsupp());
        }
        if attr.cqe > MAX_CQE {
            return Err(EINVAL);
        }
        let entries = attr.cqe.max(1);
        let ring = CqRing {
            entries: Ring::new(entries)?,
            arm: Arm::None,
        };
        Ok((
            try_pin_init!(Self {
                ring <- new_spinlock_irq!(ring, "rsiw::CqData::ring"),
            }),
            entries,
        ))
    }
}

/// Consumer upcalls a queued completion calls for, delivered with [`Upcalls::deliver`] once no
/// driver lock is held (a consumer's handler may poll the CQ or post to the QP).
#[derive(Clone, Copy, Default)]
#[must_use]
pub(crate) struct Upcalls {
    completion: bool,
    error: bool,
}

impl Upcalls {
    /// Adds the upcalls of `other`.
    pub(crate) fn add(&mut self, other: Upcalls) {
        self.completion |= other.completion;
        self.error |= other.error;
    }

    /// Calls the consumer's handlers.
    pub(crate) fn deliver(self, cq: &Cq<Rsiw>) {
        if self.error {
            cq.report_error();
        }
        if self.completion {
            cq.notify_completion();
        }
    }
}

/// Queues `wc` on `cq`, returning the upcalls it calls for: the completion handler if the CQ
/// is armed for it, `IB_EVENT_CQ_ERR` on overflow (the completion is then lost, as on
/// hardware). `solicited` marks completions of solicited-event receives.
pub(crate) fn queue(cq: &Cq<Rsiw>, wc: WorkCompletion, solicited: bool) -> Upcalls {
    let mut ring = cq.data().ring.lock();
    if ring.entries.push(wc).is_err() {
        return Upcalls {
            completion: false,
            error: true,
        };
    }
    let wanted = match ring.arm {
        Arm::None => false,
        Arm::Next => true,
        Arm::Solicited => solicited || wc.status != WcStatus::Success,
    };
    if wanted {
        ring.arm = Arm::None;
    }
    Upcalls {
        completion: wanted,
        error: false,
    }
}

/// Moves queued completions into `out`.
pub(crate) fn poll(cq: &Cq<Rsiw>, out: &mut WcArray<'_>) {
    let mut ring = cq.data().ring.lock();
    while out.remaining() > 0 {
        let Some(wc) = ring.entries.pop() else {
            break;
        };
        out.push(&wc);
    }
}

/// Arms `cq`; returns whether completions are queued already.
pub(crate) fn arm(cq: &Cq<Rsiw>, req: NotifyRequest) -> bool {
    let mut ring = cq.data().ring.lock();
    ring.arm = match (ring.arm, req.solicited_only) {
        // A pending request for any completion is not narrowed by a later solicited one.
        (Arm::Next, _) | (_, false) => Arm::Next,
        (_, true) => Arm::Solicited,
    };
    !ring.entries.is_empty()
}
