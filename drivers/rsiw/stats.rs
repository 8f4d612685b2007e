// SPDX-License-Identifier: GPL-2.0

//! Port counters, as `rdma statistic show link rsiw0/1` and
//! `/sys/class/infiniband/rsiw0/ports/1/hw_counters/` show them.
//!
//! The data path counts in its QP's own [`Counters`], so that the CPUs serving different QPs
//! never write the same cache line; the connection manager counts in the device's. A QP that is
//! destroyed adds its counts to the device's. A read sums the device's counters and those of
//! every live QP, under the lock of the device's QP table, so that a QP being destroyed is
//! counted exactly once.

#![deny(unsafe_code)]

use core::{
    num::NonZeroU32,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::{c_str, prelude::*, rdma::stats::StatDesc};

/// One counter: its index in [`NAMES`] and in [`Counters`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Counter {
    /// FPDUs sent (Terminates included).
    TxFpdus,
    /// FPDUs received whole (their CRC checked, where negotiated).
    RxFpdus,
    /// Payload octets sent (ULPDU data: no headers, pad, Markers or CRC).
    TxPayloadBytes,
    /// Payload octets received and placed.
    RxPayloadBytes,
    /// Of the payload sent, the octets TCP sent from the consumer's pages (zero copy).
    TxPayloadByReferenceBytes,
    /// Of the payload sent, the octets copied into the transmit buffer.
    TxPayloadCopiedBytes,
    /// Of the payload received, the octets placed through the bounce buffer (an FPDU whose CRC
    /// could not be checked ahead of placement).
    RxPayloadBouncedBytes,
    /// Octets the transmit path ran CRC32c over (headers and pad included).
    TxCrcBytes,
    /// Octets the receive path ran CRC32c over (a lookahead check included).
    RxCrcBytes,
    /// Octets TCP copied out of the transmit buffer (sent as a copy, not by reference).
    TxTcpCopiedBytes,
    /// Batches of FPDUs handed to TCP: one `sendmsg` each, more when TCP takes one in parts.
    TxBatches,
    /// FPDUs received with a bad CRC.
    RxCrcErrors,
    /// Terminates sent, by the layer of the error they report.
    TxTerminateRdmap,
    TxTerminateDdp,
    TxTerminateLlp,
    /// Terminates received, by the layer of the error they report.
    RxTerminateRdmap,
    RxTerminateDdp,
    RxTerminateLlp,
    /// Connections that reached RTS.
    CmEstablished,
    /// Connect requests rejected: by the peer (active side) or by the ULP (passive side).
    CmRejected,
    /// Connection setups that failed otherwise (TCP, MPA, resources).
    CmFailed,
    /// MPA Requests or Replies that did not come in time.
    CmMpaTimeouts,
    /// TCP connections a listener refused because too many were waiting for their MPA Request.
    CmHandshakesRefused,
}

/// How many counters there are.
const NUM: usize = Counter::CmHandshakesRefused as usize + 1;

/// The counters' names, in [`Counter`] order.
pub(crate) static NAMES: [StatDesc; NUM] = [
    StatDesc::new(c_str!("tx_fpdus")),
    StatDesc::new(c_str!("rx_fpdus")),
    StatDesc::new(c_str!("tx_payload_bytes")),
    StatDesc::new(c_str!("rx_payload_bytes")),
    StatDesc::new(c_str!("tx_payload_by_reference_bytes")),
    StatDesc::new(c_str!("tx_payload_copied_bytes")),
    StatDesc::new(c_str!("rx_payload_bounced_bytes")),
    StatDesc::new(c_str!("tx_crc_bytes")),
    StatDesc::new(c_str!("rx_crc_bytes")),
    StatDesc::new(c_str!("tx_tcp_copied_bytes")),
    StatDesc::new(c_str!("tx_batches")),
    StatDesc::new(c_str!("rx_crc_errors")),
    StatDesc::new(c_str!("tx_terminate_rdmap")),
    StatDesc::new(c_str!("tx_terminate_ddp")),
    StatDesc::new(c_str!("tx_terminate_llp")),
    StatDesc::new(c_str!("rx_terminate_rdmap")),
    StatDesc::new(c_str!("rx_terminate_ddp")),
    StatDesc::new(c_str!("rx_terminate_llp")),
    StatDesc::new(c_str!("cm_established")),
    StatDesc::new(c_str!("cm_rejected")),
    StatDesc::new(c_str!("cm_failed")),
    StatDesc::new(c_str!("cm_mpa_timeouts")),
    StatDesc::new(c_str!("cm_handshakes_refused")),
];

/// One value for each counter, in [`Counter`] order.
pub(crate) type Values = [u64; NUM];

/// `a - b`, counter by counter (counters wrap at 2^64).
pub(crate) fn difference(a: &Values, b: &Values) -> Values {
    core::array::from_fn(|i| a[i].wrapping_sub(b[i]))
}

/// Adds `v` into `out` (as many counters as `out` has room for).
pub(crate) fn add_into(out: &mut [u64], v: &Values) {
    for (o, v) in out.iter_mut().zip(v) {
        *o = o.wrapping_add(*v);
    }
}

/// A set of counters. Relaxed atomics: each is exact, and a read of several is not a snapshot
/// of one instant (nor does `rdma statistic` promise one).
pub(crate) struct Counters([AtomicU64; NUM]);

impl Counters {
    /// All zero.
    pub(crate) const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; NUM])
    }

    /// Adds `n` to `c`. Counters wrap at 2^64.
    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.0[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one to `c`.
    pub(crate) fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Adds every counter into `out` (in [`Counter`] order).
    pub(crate) fn sum_into(&self, out: &mut [u64]) {
        for (o, c) in out.iter_mut().zip(&self.0) {
            *o = o.wrapping_add(c.load(Ordering::Relaxed));
        }
    }

    /// The counters' values now (each exact; together not one instant's).
    pub(crate) fn snapshot(&self) -> Values {
        core::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }

    /// Sets every counter to `v`'s.
    pub(crate) fn store(&self, v: &Values) {
        for (c, v) in self.0.iter().zip(v) {
            c.store(*v, Ordering::Relaxed);
        }
    }

    /// Adds `v` into the counters.
    pub(crate) fn add_values(&self, v: &Values) {
        for (c, v) in self.0.iter().zip(v) {
            c.fetch_add(*v, Ordering::Relaxed);
        }
    }
}

/// The counter of Terminates sent (`sent`) or received for an error of `layer` (the Terminate's
/// Layer nibble: 0 RDMAP, 1 DDP, 2 LLP; others count as LLP).
pub(crate) fn terminate_counter(sent: bool, layer: u8) -> Counter {
    match (sent, layer) {
        (true, 0) => Counter::TxTerminateRdmap,
        (true, 1) => Counter::TxTerminateDdp,
        (true, _) => Counter::TxTerminateLlp,
        (false, 0) => Counter::RxTerminateRdmap,
        (false, 1) => Counter::RxTerminateDdp,
        (false, _) => Counter::RxTerminateLlp,
    }
}

/// The QP counters of a device (`rdma statistic qp`): for each live one, what the QPs no longer
/// bound to it counted while they were. A counter's id is its index plus one.
pub(crate) struct QpCounters(KVec<Option<Values>>);

impl QpCounters {
    /// None yet.
    pub(crate) const fn new() -> Self {
        Self(KVec::new())
    }

    /// A new counter with nothing counted: its id (process context).
    pub(crate) fn alloc(&mut self, max: usize) -> Result<NonZeroU32> {
        let index = match self.0.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.0.len() < max => {
                self.0.push(None, GFP_KERNEL)?;
                self.0.len() - 1
            }
            None => return Err(ENOSPC),
        };
        let id = u32::try_from(index + 1)
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or(ENOSPC)?;
        self.0[index] = Some([0; NUM]);
        Ok(id)
    }

    /// The slot of counter `id`, if the table has one.
    fn slot(&mut self, id: NonZeroU32) -> Option<&mut Option<Values>> {
        self.0.get_mut(usize::try_from(id.get() - 1).ok()?)
    }

    /// The history of counter `id`, if it lives.
    pub(crate) fn get_mut(&mut self, id: NonZeroU32) -> Option<&mut Values> {
        self.slot(id)?.as_mut()
    }

    /// Frees counter `id`.
    pub(crate) fn free(&mut self, id: NonZeroU32) {
        if let Some(slot) = self.slot(id) {
            *slot = None;
        }
    }
}
