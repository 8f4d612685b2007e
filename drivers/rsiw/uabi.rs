// SPDX-License-Identifier: GPL-2.0

//! The siw user-space ABI (`include/uapi/rdma/siw-abi.h`), which rdma-core's libsiw speaks: the
//! layout of the rings user space shares with rsiw, and what goes in them.
//!
//! User space may change a ring entry while rsiw reads it, so an entry is read once, word by
//! word, into an [`EntryCopy`] and only the copy is looked at.

#![deny(unsafe_code)]

use crate::wqe::{
    InlineData, RecvEntry, SendEntry, SendKind, MAX_INLINE as KERNEL_MAX_INLINE, NO_SGE,
};
use core::{num::NonZeroU32, sync::atomic::Ordering};
use kernel::{
    prelude::*,
    rdma::{
        qp::Sge,
        user_map::UserMapped,
        verbs::{WcOpcode, WcStatus, WorkCompletion},
    },
};

/// SGEs in a user work request (`SIW_MAX_SGE`).
pub(crate) const MAX_SGE: u32 = 6;
/// Inline bytes in a user send work request (`SIW_MAX_INLINE`: five SGEs' room).
pub(crate) const MAX_INLINE: u32 = 80;

/// `struct siw_sqe`, in 64-bit words.
pub(crate) const SQE_WORDS: usize = 15;
/// `struct siw_rqe`, in 64-bit words.
pub(crate) const RQE_WORDS: usize = 14;
/// Bytes of `struct siw_cqe`.
pub(crate) const CQE_BYTES: usize = 32;
/// Bytes of `struct siw_cq_ctrl`, which follows a CQ's entries.
pub(crate) const CQ_CTRL_BYTES: usize = 8;
/// Where the flags of a send or receive entry are (a `u16`), in bytes.
const WQE_FLAGS_AT: usize = 8;
/// Where the flags of a completion entry are (a `u8`), in bytes.
const CQE_FLAGS_AT: usize = 8;

/// Entry flags (`enum siw_wqe_flags`).
const WQE_VALID: u16 = 1;
const WQE_INLINE: u16 = 1 << 1;
const WQE_SIGNALLED: u16 = 1 << 2;
const WQE_SOLICITED: u16 = 1 << 3;
const WQE_READ_FENCE: u16 = 1 << 4;
const WQE_REM_INVAL: u8 = 1 << 5;

/// Opcodes (`enum siw_opcode`) user space may post, and those completions report.
const OP_WRITE: u8 = 0;
const OP_READ: u8 = 1;
const OP_SEND: u8 = 3;
const OP_SEND_REMOTE_INV: u8 = 5;
const OP_RECEIVE: u8 = 8;

/// Arming bits of the CQ control word (`enum siw_notify_flags`).
const NOTIFY_SOLICITED: u32 = 1;
const NOTIFY_NEXT_COMPLETION: u32 = 1 << 1;

/// Size in bytes of `n` entries of `words` words each, or `EINVAL` on overflow.
pub(crate) fn ring_bytes(n: u32, words: usize) -> Result<usize> {
    (n as usize)
        .checked_mul(words * 8)
        .filter(|b| *b != 0)
        .ok_or(EINVAL)
}

/// One ring entry, copied out of user memory a word at a time.
pub(crate) struct EntryCopy<const N: usize>([u64; N]);

impl<const N: usize> EntryCopy<N> {
    /// The entry's bytes in memory order.
    fn byte(&self, at: usize) -> u8 {
        self.0
            .get(at / 8)
            .map_or(0, |w| w.to_ne_bytes().get(at % 8).copied().unwrap_or(0))
    }

    fn u16_at(&self, at: usize) -> u16 {
        u16::from_ne_bytes([self.byte(at), self.byte(at + 1)])
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_ne_bytes([
            self.byte(at),
            self.byte(at + 1),
            self.byte(at + 2),
            self.byte(at + 3),
        ])
    }

    fn u64_at(&self, at: usize) -> u64 {
        self.0.get(at / 8).copied().unwrap_or(0)
    }

    /// `struct siw_sge` number `i` of an array starting at byte `at`.
    fn sge(&self, at: usize, i: usize) -> Sge {
        let base = at + 16 * i;
        Sge {
            addr: self.u64_at(base),
            length: self.u32_at(base + 8),
            lkey: self.u32_at(base + 12),
        }
    }
}

/// A ring of work request entries of `N` words that user space fills and rsiw takes from.
pub(crate) struct WqRing<const N: usize> {
    mem: UserMapped,
    size: NonZeroU32,
}

impl<const N: usize> WqRing<N> {
    /// A ring of `size` zeroed (invalid) entries in memory `udata`'s context may map; also
    /// returns the key user space maps it with.
    pub(crate) fn new(udata: &kernel::rdma::udata::UserData<'_>, size: u32) -> Result<(Self, u64)> {
        let size = NonZeroU32::new(size).ok_or(EINVAL)?;
        let (mem, key) = UserMapped::new(udata, ring_bytes(size.get(), N)?)?;
        Ok((Self { mem, size }, key))
    }

    /// Where the entry at position `pos` starts, in bytes.
    fn slot(&self, pos: u32) -> Option<usize> {
        ((pos % self.size) as usize).checked_mul(N * 8)
    }

    /// Takes the entry at position `pos` if user space marked it valid: copies it, then hands
    /// the slot back (clears its flags). Returns `None` if the slot is empty.
    ///
    /// The slot is cleared with a full barrier before the caller looks at the next one, and
    /// libsiw marks an entry valid before it looks whether the previous one was taken (to
    /// decide on a doorbell): one of the two always sees the other's write.
    pub(crate) fn take(&self, pos: u32) -> Option<EntryCopy<N>> {
        let base = self.slot(pos)?;
        let flags = self
            .mem
            .load_u16(base + WQE_FLAGS_AT, Ordering::SeqCst)
            .ok()?;
        if flags & WQE_VALID == 0 {
            return None;
        }
        let mut words = [0u64; N];
        for (off, w) in (base..).step_by(8).zip(words.iter_mut()) {
            *w = self.mem.read_u64(off).ok()?;
        }
        self.mem
            .store_u16(base + WQE_FLAGS_AT, 0, Ordering::SeqCst)
            .ok()?;
        Some(EntryCopy(words))
    }

    /// Whether the slot at position `pos` holds a valid entry.
    pub(crate) fn is_posted(&self, pos: u32) -> bool {
        self.slot(pos).is_some_and(|base| {
            self.mem
                .load_u16(base + WQE_FLAGS_AT, Ordering::SeqCst)
                .is_ok_and(|f| f & WQE_VALID != 0)
        })
    }

    /// The number of entries.
    pub(crate) fn size(&self) -> u32 {
        self.size.get()
    }
}

/// A user send queue's entries.
pub(crate) type SqRing = WqRing<SQE_WORDS>;
/// A user receive queue's entries.
pub(crate) type RqRing = WqRing<RQE_WORDS>;

/// Turns a copied `struct siw_sqe` into a send queue entry. An entry rsiw cannot execute (an
/// unknown opcode, too many SGEs, inline data too long or on a Read) becomes
/// [`SendKind::Invalid`], which completes with `IB_WC_LOC_QP_OP_ERR` in its turn.
pub(crate) fn parse_sqe(c: &EntryCopy<SQE_WORDS>, sig_all: bool) -> SendEntry {
    let flags = c.u16_at(WQE_FLAGS_AT);
    let num_sge = c.byte(10);
    let opcode = c.byte(11);
    let rkey = c.u32_at(12);
    let raddr = c.u64_at(16);
    let mut e = SendEntry {
        wr_id: c.u64_at(0),
        op: SendKind::Invalid,
        signaled: sig_all || flags & WQE_SIGNALLED != 0,
        solicited: flags & WQE_SOLICITED != 0,
        fence: flags & WQE_READ_FENCE != 0,
        sges: [NO_SGE; crate::wqe::MAX_SGE as usize],
        num_sge: 0,
        inline: None,
    };
    let op = match opcode {
        OP_WRITE => SendKind::Write {
            remote_addr: raddr,
            rkey,
        },
        OP_READ => SendKind::Read {
            remote_addr: raddr,
            rkey,
            invalidate_local: false,
        },
        OP_SEND => SendKind::Send,
        OP_SEND_REMOTE_INV => SendKind::SendWithInv { rkey },
        _ => return e,
    };
    let is_read = matches!(op, SendKind::Read { .. });
    if flags & WQE_INLINE != 0 {
        // The data follows the first SGE, whose length is the data's.
        let len = c.u32_at(24 + 8);
        if is_read || len > MAX_INLINE || len > KERNEL_MAX_INLINE {
            return e;
        }
        let mut data = InlineData {
            len,
            bytes: [0; KERNEL_MAX_INLINE as usize],
        };
        for (i, b) in data.bytes.iter_mut().take(len as usize).enumerate() {
            *b = c.byte(40 + i);
        }
        e.inline = Some(data);
    } else {
        let max = if is_read {
            crate::wqe::MAX_SGE_RD
        } else {
            MAX_SGE
        };
        if u32::from(num_sge) > max {
            return e;
        }
        for (i, s) in e.sges.iter_mut().take(usize::from(num_sge)).enumerate() {
            *s = c.sge(24, i);
        }
        e.num_sge = num_sge;
    }
    e.op = op;
    e
}

/// Turns a copied `struct siw_rqe` into a receive queue entry, or `None` if it has more SGEs
/// than the ABI allows.
pub(crate) fn parse_rqe(c: &EntryCopy<RQE_WORDS>) -> Option<RecvEntry> {
    let num_sge = c.byte(10);
    if u32::from(num_sge) > MAX_SGE {
        return None;
    }
    let mut r = RecvEntry {
        wr_id: c.u64_at(0),
        sges: [NO_SGE; crate::wqe::MAX_SGE as usize],
        num_sge,
    };
    for (i, s) in r.sges.iter_mut().take(usize::from(num_sge)).enumerate() {
        *s = c.sge(16, i);
    }
    Some(r)
}

/// The work request id of a copied entry.
pub(crate) fn entry_id<const N: usize>(c: &EntryCopy<N>) -> u64 {
    c.u64_at(0)
}

/// A user CQ's entries and its control word, behind the CQ's lock.
pub(crate) struct CqRing {
    mem: UserMapped,
    size: NonZeroU32,
    /// Where the next completion goes (user space polls from its own position).
    put: u32,
}

/// The ABI opcode a completion reports (libsiw indexes a table with it: only known values).
fn cqe_opcode(op: WcOpcode) -> u8 {
    match op {
        WcOpcode::RdmaWrite => OP_WRITE,
        WcOpcode::RdmaRead => OP_READ,
        WcOpcode::Recv => OP_RECEIVE,
        _ => OP_SEND,
    }
}

/// The ABI status a completion reports (`enum siw_wc_status`; libsiw indexes a table with it).
fn cqe_status(s: WcStatus) -> u16 {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocLenErr => 1,
        WcStatus::LocProtErr => 2,
        WcStatus::LocQpOpErr => 3,
        WcStatus::WrFlushErr => 4,
        WcStatus::LocAccessErr => 6,
        WcStatus::RemAccessErr => 7,
        WcStatus::RemInvReqErr => 8,
        WcStatus::RemOpErr | WcStatus::RemAbortErr | WcStatus::FatalErr | WcStatus::GeneralErr => 9,
    }
}

impl CqRing {
    /// A CQ ring of `size` entries in memory `udata`'s context may map; also returns the key
    /// user space maps it with.
    pub(crate) fn new(udata: &kernel::rdma::udata::UserData<'_>, size: u32) -> Result<(Self, u64)> {
        let size = NonZeroU32::new(size).ok_or(EINVAL)?;
        let bytes = (size.get() as usize)
            .checked_mul(CQE_BYTES)
            .and_then(|b| b.checked_add(CQ_CTRL_BYTES))
            .ok_or(EINVAL)?;
        let (mem, key) = UserMapped::new(udata, bytes)?;
        Ok((Self { mem, size, put: 0 }, key))
    }

    /// Writes `wc` into the next slot. Returns `Err(())` if user space has not polled that slot
    /// yet (an overflow: the completion is lost), else whether the CQ was armed for it; arming
    /// is one-shot, so the control word is cleared then.
    pub(crate) fn push(&mut self, wc: &WorkCompletion, solicited: bool) -> Result<bool, ()> {
        let base = ((self.put % self.size) as usize)
            .checked_mul(CQE_BYTES)
            .ok_or(())?;
        let m = &self.mem;
        let busy = m
            .load_u8(base + CQE_FLAGS_AT, Ordering::Acquire)
            .map_err(|_| ())?;
        if busy & WQE_VALID as u8 != 0 {
            return Err(());
        }
        let mut flags = WQE_VALID as u8;
        let written = (|| -> Result {
            m.write_u64(base, wc.wr_id)?;
            m.write_u8(base + 9, cqe_opcode(wc.opcode))?;
            m.write_u16(base + 10, cqe_status(wc.status))?;
            m.write_u32(base + 12, wc.byte_len)?;
            m.write_u64(base + 16, 0)?;
            if let Some(rkey) = wc.invalidated_rkey {
                m.write_u32(base + 16, rkey)?;
                flags |= WQE_REM_INVAL;
            }
            m.write_u64(base + 24, u64::from(wc.qp.qp_num()))
        })();
        written.map_err(|_| ())?;
        // Published last: user space reads the fields once it sees the flag. Sequentially
        // consistent with the load of the control word below, as libsiw's arming store is.
        m.store_u8(base + CQE_FLAGS_AT, flags, Ordering::SeqCst)
            .map_err(|_| ())?;
        self.put = self.put.wrapping_add(1);
        // Inside the region: `new` sized it to hold this.
        let ctrl = (self.size.get() as usize).saturating_mul(CQE_BYTES);
        let armed = m.load_u32(ctrl, Ordering::SeqCst).unwrap_or(0);
        let wanted = armed & NOTIFY_NEXT_COMPLETION != 0
            || (armed & NOTIFY_SOLICITED != 0 && (solicited || wc.status != WcStatus::Success));
        if wanted {
            let _ = m.store_u32(ctrl, 0, Ordering::SeqCst);
        }
        Ok(wanted)
    }
}
