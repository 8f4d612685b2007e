// SPDX-License-Identifier: GPL-2.0

//! Completion queues: a bounded ring of work completions with one-shot arming.

#![deny(unsafe_code)]

use crate::device::Rsiw;
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

struct Ring {
    slots: KVVec<Option<WorkCompletion>>,
    head: usize,
    len: usize,
    arm: Arm,
}

/// Per-CQ state. The lock disables interrupts: completions are added from softirq (receive)
/// and process context, and consumers poll from any context.
#[pin_data]
pub(crate) struct CqData {
    #[pin]
    ring: SpinLockIrq<Ring>,
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
        let slots = KVVec::from_elem(None, entries as usize, GFP_KERNEL)?;
        let ring = Ring {
            slots,
            head: 0,
            len: 0,
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

/// `index` reduced into a ring of `cap` slots, for `index < 2 * cap` (no division).
fn wrap(index: usize, cap: usize) -> usize {
    if index >= cap {
        index - cap
    } else {
        index
    }
}

/// Queues `wc` on `cq` and calls the consumer's handler if the CQ is armed for it.
///
/// `solicited` marks completions of solicited-event receives. On overflow the consumer gets
/// `IB_EVENT_CQ_ERR` and the completion is lost, as on hardware.
#[expect(
    dead_code,
    reason = "queue pairs, the producers of completions, come next"
)]
pub(crate) fn push(cq: &Cq<Rsiw>, wc: WorkCompletion, solicited: bool) -> Result<(), CqOverflow> {
    let notify = {
        let mut ring = cq.data().ring.lock();
        let cap = ring.slots.len();
        if ring.len == cap {
            None
        } else {
            let tail = wrap(ring.head + ring.len, cap);
            if let Some(slot) = ring.slots.get_mut(tail) {
                *slot = Some(wc);
            }
            ring.len += 1;
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
    let cap = ring.slots.len();
    while ring.len > 0 && out.remaining() > 0 {
        let head = ring.head;
        let Some(wc) = ring.slots.get_mut(head).and_then(Option::take) else {
            break;
        };
        out.push(&wc);
        ring.head = wrap(head + 1, cap);
        ring.len -= 1;
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
    ring.len > 0
}
