// SPDX-License-Identifier: GPL-2.0

//! Completion queues: a bounded ring of work completions with one-shot arming. A user CQ's ring
//! is shared with user space ([`crate::uabi::CqRing`]), which polls and arms it itself.

#![deny(unsafe_code)]

use crate::{device::Rsiw, ring::Ring, uabi};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    irqlock::SpinLockIrq,
    new_spinlock_irq,
    prelude::*,
    rdma::{
        udata::UserData,
        verbs::{Cq, CqInitAttr, NotifyRequest, WcArray, WcStatus, WorkCompletion},
    },
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

/// Where a CQ's completions go.
enum Entries {
    /// A kernel consumer's: polled through `ib_poll_cq`.
    Kernel(Ring<WorkCompletion>),
    /// A user context's: written into the ring it maps.
    User(uabi::CqRing),
}

/// A CQ's completions and arming, behind [`CqData::ring`]. [`queue`] runs under a QP lock: from
/// the receive path (softirq or work item), the transmit work item, and posts or state changes
/// that flush. Consumers poll and arm from any context. No other lock is taken under it.
struct CqRing {
    entries: Entries,
    /// A kernel CQ's arming (a user CQ's is its control word).
    arm: Arm,
}

/// Numbers user CQs for libsiw's messages (`struct siw_uresp_create_cq`'s `cq_id`).
static NEXT_USER_CQ_ID: AtomicU32 = AtomicU32::new(0);

/// Per-CQ state. The lock disables interrupts: completions are added from softirq (receive)
/// and process context, and consumers poll from any context.
#[pin_data]
pub(crate) struct CqData {
    #[pin]
    ring: SpinLockIrq<CqRing>,
}

impl CqData {
    /// Validates `attr` and creates the data for a CQ of `attr.cqe` entries. A user CQ gets a
    /// ring its context maps, of a power-of-two size, described in the response to `udata`.
    pub(crate) fn new(
        attr: &CqInitAttr,
        udata: &mut UserData<'_>,
    ) -> Result<(impl PinInit<Self, Error>, u32)> {
        if attr.flags != 0 {
            return Err(kernel::rdma::eopnotsupp());
        }
        if attr.cqe > MAX_CQE {
            return Err(EINVAL);
        }
        let (entries, size) = if attr.user {
            let size = attr.cqe.max(1).checked_next_power_of_two().ok_or(EINVAL)?;
            let (ring, key) = uabi::CqRing::new(udata, size)?;
            // `struct siw_uresp_create_cq { u32 cq_id; u32 num_cqe; u64 cq_key; }`
            let id = NEXT_USER_CQ_ID.fetch_add(1, Ordering::Relaxed);
            let mut resp = [0u8; 16];
            resp[..4].copy_from_slice(&id.to_ne_bytes());
            resp[4..8].copy_from_slice(&size.to_ne_bytes());
            resp[8..].copy_from_slice(&key.to_ne_bytes());
            udata.respond(&resp)?;
            (Entries::User(ring), size)
        } else {
            let size = attr.cqe.max(1);
            (Entries::Kernel(Ring::new(size)?), size)
        };
        let ring = CqRing {
            entries,
            arm: Arm::None,
        };
        Ok((
            try_pin_init!(Self {
                ring <- new_spinlock_irq!(ring, "rsiw::CqData::ring"),
            }),
            size,
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
    let overflow = Upcalls {
        completion: false,
        error: true,
    };
    let mut ring = cq.data().ring.lock();
    let ring = &mut *ring;
    let entries = match &mut ring.entries {
        Entries::Kernel(entries) => entries,
        Entries::User(user) => {
            return match user.push(&wc, solicited) {
                Ok(wanted) => Upcalls {
                    completion: wanted,
                    error: false,
                },
                Err(()) => overflow,
            };
        }
    };
    if entries.push(wc).is_err() {
        return overflow;
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

/// Moves queued completions into `out` (none for a user CQ: user space polls its ring).
pub(crate) fn poll(cq: &Cq<Rsiw>, out: &mut WcArray<'_>) {
    let mut ring = cq.data().ring.lock();
    let Entries::Kernel(entries) = &mut ring.entries else {
        return;
    };
    while out.remaining() > 0 {
        let Some(wc) = entries.pop() else {
            break;
        };
        out.push(&wc);
    }
}

/// Arms `cq`; returns whether completions are queued already. A user CQ is armed through its
/// control word instead: this changes nothing for it.
pub(crate) fn arm(cq: &Cq<Rsiw>, req: NotifyRequest) -> bool {
    let mut ring = cq.data().ring.lock();
    let Entries::Kernel(entries) = &ring.entries else {
        return false;
    };
    let queued = !entries.is_empty();
    ring.arm = match (ring.arm, req.solicited_only) {
        // A pending request for any completion is not narrowed by a later solicited one.
        (Arm::Next, _) | (_, false) => Arm::Next,
        (_, true) => Arm::Solicited,
    };
    queued
}
