// SPDX-License-Identifier: GPL-2.0

//! Work queue entries: what a posted work request becomes in a send or receive queue, kernel or
//! user (see `uabi`), of a QP or of a shared receive queue, and the limits they are built to.

use kernel::{
    prelude::*,
    rdma::{mr::MrMapping, qp::Sge, verbs::WcOpcode},
    sync::Arc,
};

use crate::mem;

/// Most work requests per queue.
pub(crate) const MAX_QP_WR: u32 = 1 << 15;
/// Most SGEs per send or receive work request.
pub(crate) const MAX_SGE: u32 = 8;
/// Most SGEs of an RDMA Read's local sink.
pub(crate) const MAX_SGE_RD: u32 = 1;
/// Most inline bytes per send work request.
pub(crate) const MAX_INLINE: u32 = 128;
/// A send queue entry: the work request, copied at post time.
#[derive(Clone)]
pub(crate) struct SendEntry {
    pub(crate) wr_id: u64,
    pub(crate) op: SendKind,
    pub(crate) signaled: bool,
    pub(crate) solicited: bool,
    pub(crate) fence: bool,
    pub(crate) sges: [Sge; MAX_SGE as usize],
    pub(crate) num_sge: u8,
    /// Inline payload (valid for `inline_len` bytes when `inline`).
    pub(crate) inline: Option<InlineData>,
}

impl SendEntry {
    /// The payload bytes this work request puts on the wire (an RDMA Read only its request).
    pub(crate) fn wire_payload(&self) -> u64 {
        match self.op {
            SendKind::Send | SendKind::SendWithInv { .. } | SendKind::Write { .. } => {
                match &self.inline {
                    Some(d) => u64::from(d.len),
                    None => self
                        .sges
                        .iter()
                        .take(usize::from(self.num_sge))
                        .map(|s| u64::from(s.length))
                        .sum(),
                }
            }
            _ => 0,
        }
    }
}

/// Inline payload copied at post time.
#[derive(Clone, Copy)]
pub(crate) struct InlineData {
    pub(crate) len: u32,
    pub(crate) bytes: [u8; MAX_INLINE as usize],
}

/// The operation of a queued send work request.
#[derive(Clone)]
pub(crate) enum SendKind {
    Send,
    SendWithInv {
        rkey: u32,
    },
    Write {
        remote_addr: u64,
        rkey: u32,
    },
    Read {
        remote_addr: u64,
        rkey: u32,
        invalidate_local: bool,
    },
    /// `IB_WR_REG_MR`, with the mapping `map_mr_sg` set up before the post.
    RegMr {
        mr: Arc<mem::MrShared>,
        key: u32,
        access: u32,
        mapping: MrMapping,
    },
    /// `IB_WR_LOCAL_INV`.
    LocalInv {
        rkey: u32,
    },
    /// A user send queue entry rsiw cannot execute: completes with `IB_WC_LOC_QP_OP_ERR`.
    Invalid,
}

impl SendKind {
    pub(crate) fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendKind::Send | SendKind::SendWithInv { .. } | SendKind::Invalid => WcOpcode::Send,
            SendKind::Write { .. } => WcOpcode::RdmaWrite,
            SendKind::Read { .. } => WcOpcode::RdmaRead,
            SendKind::RegMr { .. } => WcOpcode::RegMr,
            SendKind::LocalInv { .. } => WcOpcode::LocalInv,
        }
    }
}

/// A receive queue entry.
#[derive(Clone, Copy)]
pub(crate) struct RecvEntry {
    pub(crate) wr_id: u64,
    pub(crate) sges: [Sge; MAX_SGE as usize],
    pub(crate) num_sge: u8,
}

pub(crate) const NO_SGE: Sge = Sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// Copies a work request's SGE list (at most `max` SGEs) into a queue entry's array.
pub(crate) fn copy_sges(list: &[Sge], max: u32) -> Result<([Sge; MAX_SGE as usize], u8)> {
    if list.len() > max as usize {
        return Err(EINVAL);
    }
    let mut sges = [NO_SGE; MAX_SGE as usize];
    for (d, s) in sges.iter_mut().zip(list) {
        *d = *s;
    }
    Ok((sges, list.len() as u8))
}
