// SPDX-License-Identifier: GPL-2.0

//! Received data as socket buffers: `tcp_read_sock` and views of `struct sk_buff` ranges.

use crate::{
    bindings,
    error::code::{EFAULT, EINVAL},
    ffi::{c_int, c_uint, c_void},
    prelude::*,
};
use core::{marker::PhantomData, ptr::NonNull};

/// How much of an [`SkbData`] a [`read_sock`](super::LockedSock::read_sock) actor consumed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Consumed {
    /// Consumed this many bytes; go on reading.
    Continue(usize),
    /// Consumed this many bytes; stop reading for now.
    Stop(usize),
}

/// A range of bytes of a received socket buffer, borrowed for one call of a
/// [`read_sock`](super::LockedSock::read_sock) actor.
///
/// The bytes may be spread over the buffer's linear part, its page fragments and its fragment
/// list; [`SkbData::for_each_chunk`] walks them as contiguous pieces and
/// [`SkbData::copy_to`] copies them out.
///
/// # Invariants
///
/// `skb` is a valid socket buffer, kept on the receive queue `queue` of a TCP socket whose lock
/// is held, for `'a`, and `offset + len <= skb->len`, with `len <= i32::MAX`. The queue holds
/// in-order data only, so the buffers after `skb` continue its sequence space.
#[derive(Clone, Copy)]
pub struct SkbData<'a> {
    skb: NonNull<bindings::sk_buff>,
    queue: NonNull<bindings::sk_buff_head>,
    offset: u32,
    len: u32,
    _p: PhantomData<&'a bindings::sk_buff>,
}

impl<'a> SkbData<'a> {
    /// The number of bytes.
    pub fn len(&self) -> usize {
        // CAST: `u32` fits in `usize` on every architecture Linux supports with Rust.
        self.len as usize
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `len` bytes at `offset` of this range.
    ///
    /// Fails with `EINVAL` if they are not all inside it.
    pub fn slice(&self, offset: usize, len: usize) -> Result<SkbData<'a>> {
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        if end > self.len() {
            return Err(EINVAL);
        }
        // INVARIANT: The new range lies inside this one.
        Ok(SkbData {
            skb: self.skb,
            queue: self.queue,
            offset: self.offset + u32::try_from(offset)?,
            len: u32::try_from(len)?,
            _p: PhantomData,
        })
    }

    /// Copies the first `dst.len()` bytes into `dst` (`skb_copy_bits`).
    ///
    /// Fails with `EINVAL` if `dst` is longer than this range.
    pub fn copy_to(&self, dst: &mut [u8]) -> Result {
        if dst.len() > self.len() {
            return Err(EINVAL);
        }
        // CAST: Both fit in an `int` (type invariant: `offset + len <= skb->len`, `len` fits).
        let (offset, len) = (self.offset as c_int, dst.len() as c_int);
        // SAFETY: `skb` is valid (type invariant) and the range lies inside it; `dst` is valid for
        // writes of `len` bytes.
        let ret = unsafe {
            bindings::skb_copy_bits(self.skb.as_ptr(), offset, dst.as_mut_ptr().cast(), len)
        };
        crate::error::to_result(ret)
    }

    /// Calls `f` with the bytes as consecutive contiguous pieces (`skb_seq_read`), in order.
    ///
    /// `f` stops the walk by returning an error of its own type `E` (why it stopped, not
    /// necessarily a failure), which is returned. The walk's own failure converts into `E`:
    /// `EFAULT` if part of the range is not readable by the CPU (device memory). `f` runs in
    /// atomic context: page fragments are mapped while it looks at them.
    pub fn for_each_chunk<E: From<Error>>(
        &self,
        mut f: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.walk(&mut f)
    }

    /// How many bytes the socket has queued from `from` bytes into this range to the end of
    /// its receive queue (0 if `from` lies beyond that).
    pub fn queued_from(&self, from: usize) -> usize {
        let Ok(from) = u32::try_from(from) else {
            return 0;
        };
        // SAFETY: `skb` is valid (type invariant).
        let pos = unsafe { skb_seq(self.skb.as_ptr()) }
            .wrapping_add(self.offset)
            .wrapping_add(from);
        // SAFETY: `queue` is the locked socket's receive queue (type invariant); it holds at
        // least `skb`, so its last buffer is a valid, queued one.
        let end = unsafe {
            let tail = (*self.queue.as_ptr()).__bindgen_anon_1.list.prev;
            skb_seq(tail).wrapping_add((*tail).len)
        };
        // CAST: The signed distance in sequence space, as TCP's `before()` computes it.
        let ahead = end.wrapping_sub(pos) as i32;
        usize::try_from(ahead).unwrap_or(0)
    }

    /// Calls `f` with the `len` bytes that start `from` bytes into this range, as contiguous
    /// pieces, reading on into the buffers queued after this one without consuming anything.
    ///
    /// Returns `Ok(false)`, having called `f` for a prefix only, when fewer bytes are queued yet.
    /// As with [`SkbData::for_each_chunk`], `f` stops the walk with an error of its own type,
    /// the walk's own failures (`EINVAL` for a range or queue it cannot follow) convert into
    /// it, and `f` runs in atomic context.
    pub fn read_ahead<E: From<Error>>(
        &self,
        from: usize,
        len: usize,
        mut f: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<bool, E> {
        let mut left = u32::try_from(len).map_err(|_| E::from(EINVAL))?;
        let from = u32::try_from(from).map_err(|_| E::from(EINVAL))?;
        if from > self.len {
            return Err(EINVAL.into());
        }
        let head = self.queue.as_ptr().cast::<bindings::sk_buff>();
        // Sequence number of the next byte wanted.
        // SAFETY: `skb` is valid (type invariant).
        let mut seq = unsafe { skb_seq(self.skb.as_ptr()) }
            .wrapping_add(self.offset)
            .wrapping_add(from);
        let mut skb = self.skb.as_ptr();
        while left > 0 {
            if skb == head {
                return Ok(false);
            }
            // SAFETY: `skb` is this range's buffer or one queued after it on the locked socket's
            // receive queue (the walk stops at the queue head), so it is valid.
            let (start, skb_len) = unsafe { (skb_seq(skb), (*skb).len) };
            let off = seq.wrapping_sub(start);
            // In-order queue: a buffer starting after `seq` would mean a hole.
            // CAST: The signed distance in sequence space, as TCP's `before()` computes it.
            if (off as i32) < 0 {
                return Err(EINVAL.into());
            }
            if off < skb_len {
                let n = (skb_len - off).min(left);
                // INVARIANT: `skb` is a buffer queued on the locked socket (see above) and
                // `off + n <= skb->len`, which is below `i32::MAX`.
                let piece = SkbData {
                    // SAFETY: Not null: it is a queued buffer.
                    skb: unsafe { NonNull::new_unchecked(skb) },
                    queue: self.queue,
                    offset: off,
                    len: n,
                    _p: PhantomData,
                };
                piece.walk(&mut f)?;
                left -= n;
                seq = seq.wrapping_add(n);
            }
            // SAFETY: `skb` is valid (above); on a queue, `next` is the following buffer or the
            // head.
            skb = unsafe { (*skb).__bindgen_anon_1.__bindgen_anon_1.next };
        }
        Ok(true)
    }

    fn walk<E: From<Error>>(&self, f: &mut dyn FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        if self.len == 0 {
            return Ok(());
        }
        let mut st = bindings::skb_seq_state::default();
        // SAFETY: `skb` is valid and `offset..offset + len` lies inside it (type invariant);
        // `st` is a valid state to initialize.
        unsafe {
            bindings::skb_prepare_seq_read(
                self.skb.as_ptr(),
                self.offset,
                self.offset + self.len,
                &mut st,
            )
        };
        let mut done: u32 = 0;
        let mut ret = Ok(());
        while done < self.len {
            let mut data: *const u8 = core::ptr::null();
            // SAFETY: `st` was prepared above and `done` bytes have been consumed since.
            let n = unsafe { bindings::skb_seq_read(done, &mut data, &mut st) };
            if n == 0 || data.is_null() {
                ret = Err(EFAULT.into());
                break;
            }
            // `skb_seq_read` may return more than is left of the range.
            let n = n.min(self.len - done);
            // CAST: `n` is a `u32`.
            // SAFETY: `skb_seq_read` returned a pointer to `n` (or more) readable bytes of the
            // buffer, mapped until the next call on `st`. Nobody writes received data while it is
            // queued.
            let chunk = unsafe { core::slice::from_raw_parts(data, n as usize) };
            if let Err(e) = f(chunk) {
                ret = Err(e);
                break;
            }
            done += n;
        }
        // Unmaps the last fragment, if one is still mapped.
        // SAFETY: `st` was prepared above.
        unsafe { bindings::skb_abort_seq_read(&mut st) };
        ret
    }
}

/// The TCP sequence number of the first byte of `skb` (`TCP_SKB_CB(skb)->seq`).
///
/// # Safety
///
/// `skb` must be a valid buffer of a TCP socket's receive queue.
unsafe fn skb_seq(skb: *const bindings::sk_buff) -> u32 {
    // SAFETY: A TCP socket's queued buffers keep a `struct tcp_skb_cb` in their control buffer,
    // which is large and aligned enough for it; the caller guarantees `skb`.
    unsafe { (*(*skb).cb.as_ptr().cast::<bindings::tcp_skb_cb>()).seq }
}

/// The state of one `tcp_read_sock` call, for the actor trampoline.
struct ReadCtx<'f> {
    queue: NonNull<bindings::sk_buff_head>,
    actor: &'f mut dyn FnMut(&SkbData<'_>) -> Consumed,
    stopped: bool,
}

/// The `sk_read_actor_t` given to `tcp_read_sock`.
///
/// # Safety
///
/// Called by `tcp_read_sock` with the descriptor set up by [`read_sock`] and a socket buffer of
/// the locked socket's receive queue, `offset + len` not beyond its end.
unsafe extern "C" fn read_actor(
    desc: *mut bindings::read_descriptor_t,
    skb: *mut bindings::sk_buff,
    offset: c_uint,
    len: usize,
) -> c_int {
    // SAFETY: `desc` is the descriptor of `read_sock`, whose `data` is a `ReadCtx` that outlives
    // the `tcp_read_sock` call, and nothing else accesses it meanwhile.
    let ctx = unsafe { &mut *(*desc).arg.data.cast::<ReadCtx<'_>>() };
    let Some(skb) = NonNull::new(skb) else {
        return 0;
    };
    if ctx.stopped {
        return 0;
    }
    // CAST: `c_int::MAX` is positive. Socket buffers are far shorter, but the result is an `int`.
    let len = len.min(c_int::MAX as usize);
    // INVARIANT: `tcp_read_sock` passes a buffer queued on the locked socket's receive queue
    // (`ctx.queue`), valid during this call, and a range inside it; `len` was limited to
    // `i32::MAX`.
    let data = SkbData {
        skb,
        queue: ctx.queue,
        offset,
        // CAST: Limited to `i32::MAX` above.
        len: len as u32,
        _p: PhantomData,
    };
    let used = match (ctx.actor)(&data) {
        Consumed::Continue(n) => n,
        Consumed::Stop(n) => {
            ctx.stopped = true;
            // Makes `tcp_read_sock` stop after this buffer; `stopped` covers the rest of it.
            // SAFETY: `desc` is valid, see above.
            unsafe { (*desc).count = 0 };
            n
        }
    };
    // CAST: At most `len`, which fits in an `int`.
    used.min(len) as c_int
}

/// Runs `actor` over the queued received data of `sk` (`tcp_read_sock`).
///
/// # Safety
///
/// `sk` must be a valid, non-listening TCP socket whose lock the current context holds.
pub(crate) unsafe fn read_sock(
    sk: *mut bindings::sock,
    actor: &mut dyn FnMut(&SkbData<'_>) -> Consumed,
) -> Result<usize> {
    // SAFETY: `sk` is valid (caller guarantee); this only takes a field's address.
    let queue = unsafe { core::ptr::addr_of_mut!((*sk).sk_receive_queue) };
    let mut ctx = ReadCtx {
        // SAFETY: The address of a field of a valid object is not null.
        queue: unsafe { NonNull::new_unchecked(queue) },
        actor,
        stopped: false,
    };
    let mut desc = bindings::read_descriptor_t {
        written: 0,
        count: 1,
        arg: bindings::read_descriptor_t__bindgen_ty_1 {
            data: core::ptr::from_mut(&mut ctx).cast::<c_void>(),
        },
        error: 0,
    };
    // SAFETY: The caller guarantees the socket and its lock; `desc` and `ctx` outlive the call,
    // and `read_actor` matches the descriptor.
    let ret = unsafe { bindings::tcp_read_sock(sk, &mut desc, Some(read_actor)) };
    if ret < 0 {
        Err(Error::from_errno(ret))
    } else {
        // CAST: Non-negative.
        Ok(ret as usize)
    }
}
