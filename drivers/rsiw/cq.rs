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

/// Why a completion could not be queued.
#[derive(Debug)]
pub(crate) struct CqOverflow;

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

/// Queues `wc` on `cq` and calls the consumer's handler if the CQ is armed for it.
///
/// `solicited` marks completions of solicited-event receives. On overflow the consumer gets
/// `IB_EVENT_CQ_ERR` and the completion is lost, as on hardware.
pub(crate) fn push(cq: &Cq<Rsiw>, wc: WorkCompletion, solicited: bool) -> Result<(), CqOverflow> {
    let notify = {
        let mut ring = cq.data().ring.lock();
        if ring.entries.push(wc).is_err() {
            None
        } else {
            let wanted = match ring.arm {
                Arm::None => false,
                Arm::Next => true,
                Arm::Solicited => solicited || wc.status != WcStatus::Success,
            };
            if wanted {
                ring.arm = Arm::None;
            }
            Some(wanted)
        }
    };
    match notify {
        None => {
            cq.report_error();
            Err(CqOverflow)
        }
        Some(wanted) => {
            // Outside the lock: the handler may poll this CQ.
            if wanted {
                cq.notify_completion();
            }
            Ok(())
        }
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
