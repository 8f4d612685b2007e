// SPDX-License-Identifier: GPL-2.0

//! Sending page fragments without copying them, and learning when TCP let go of them.
//!
//! A [`PageBatch`] is a list of page fragments, each holding a reference on its page. Bytes the
//! caller builds itself (protocol headers, short payloads) are copied into pages the batch
//! allocates for that and never writes again once sent; other memory is added by reference
//! ([`PageBatch::push_kernel_memory`]) when its pages can be spliced. [`TcpSocket::send_batch`]
//! hands the whole list to TCP in one `sendmsg`.
//!
//! TCP keeps referring to the pages until the data is acknowledged and every skb holding them
//! is freed, long after `sendmsg` returned. `MSG_SPLICE_PAGES` says nothing about that moment,
//! which is fine for the batch's own pages (nobody writes them again) but not for a consumer's
//! buffer, which it may reuse as soon as its work request completes. For those the batch goes
//! out with `MSG_ZEROCOPY` and a [`ZcToken`] as `msg_ubuf` (as io_uring's zero-copy send does):
//! TCP splices the pages the same way and drops the token's references as it frees the skbs.
//! When the last is gone the token's [`ZcNotify`] handler runs with the token's cookie.
//! Or the batch goes out as a plain `sendmsg` ([`SendAs::Copy`]): TCP copies every fragment
//! into its own pages before `sendmsg` returns, so the consumer's buffer is free again then.
//!
//! # Lifetimes
//!
//! Tokens can outlive the connection (an orphaned TCP socket still holds its skbs), and the
//! handler is the driver's code. So the handler is reached through a [`ZcRegistration`], which
//! the driver owns: dropping it unhooks the handler, waiting for a running notification to
//! finish. Notifications after that find no handler and only free the token. The notification
//! function itself is part of the kernel image.
//!
//! C headers: [`include/linux/skbuff.h`](srctree/include/linux/skbuff.h) (`struct ubuf_info`),
//! [`include/linux/socket.h`](srctree/include/linux/socket.h) (`msg_ubuf`).

use super::socket::TcpSocket;
use crate::{
    alloc::{AllocError, Flags, KVec},
    bindings,
    error::code::{EAGAIN, EINVAL, ENOMEM},
    ffi::c_void,
    irqlock::SpinLockIrq,
    new_spinlock_irq,
    page::PAGE_SIZE,
    prelude::*,
    sync::Arc,
};
use core::ptr::NonNull;

/// Receives the notice that TCP let go of the pages sent with a token.
pub trait ZcNotify: Send + Sync {
    /// Every skb that held pages sent with the token of `cookie` was freed.
    ///
    /// Runs in any context up to softirq (also inside `sendmsg` or a socket close), with the
    /// registration's lock held: it must not sleep, must not take locks held around dropping the
    /// [`ZcRegistration`], and should only record the fact and defer work.
    fn released(&self, cookie: u64);
}

/// The part of a registration that tokens share.
#[pin_data]
struct Hub {
    #[pin]
    handler: SpinLockIrq<Option<Arc<dyn ZcNotify>>>,
}

/// A driver's hook for the notifications of its [`ZcToken`]s; dropping it unhooks the handler.
pub struct ZcRegistration {
    hub: Arc<Hub>,
}

impl ZcRegistration {
    /// Hooks `handler` up for the tokens made from this registration.
    pub fn new(handler: Arc<dyn ZcNotify>, flags: Flags) -> Result<Self> {
        let hub = Arc::pin_init(
            pin_init!(Hub {
                handler <- new_spinlock_irq!(Some(handler), "ZcRegistration::handler"),
            }),
            flags,
        )?;
        Ok(Self { hub })
    }

    /// A new token whose release is reported with `cookie`.
    pub fn token(&self, cookie: u64, flags: Flags) -> Result<ZcToken, AllocError> {
        let token = KBox::new(
            TokenInner {
                ubuf: bindings::ubuf_info {
                    ops: &TOKEN_OPS,
                    refcnt: refcount_one(),
                    // CAST: The flags are the low bits of a `u8` field.
                    flags: (bindings::SKBFL_ZEROCOPY_ENABLE
                        | bindings::SKBFL_SHARED_FRAG
                        | bindings::SKBFL_DONT_ORPHAN) as u8,
                },
                hub: self.hub.clone(),
                cookie,
            },
            flags,
        )?;
        // INVARIANT: The new token's count is one, owned by the returned value.
        // SAFETY: `KBox::into_raw` never returns null.
        Ok(ZcToken(unsafe {
            NonNull::new_unchecked(KBox::into_raw(token))
        }))
    }
}

impl Drop for ZcRegistration {
    fn drop(&mut self) {
        // Taking the lock waits for a notification that is running the handler.
        let handler = self.hub.handler.lock().take();
        drop(handler);
    }
}

/// A reference count of one.
fn refcount_one() -> bindings::refcount_t {
    bindings::refcount_t {
        refs: bindings::atomic_t { counter: 1 },
    }
}

/// What a token is: the `ubuf_info` TCP counts, and where to report.
#[repr(C)]
struct TokenInner {
    /// First, so that a pointer to it is a pointer to the whole.
    ubuf: bindings::ubuf_info,
    hub: Arc<Hub>,
    cookie: u64,
}

static TOKEN_OPS: bindings::ubuf_info_ops = bindings::ubuf_info_ops {
    complete: Some(token_complete),
    link_skb: None,
};

/// `ubuf_info_ops::complete`: drops a reference; the last one reports and frees the token.
///
/// # Safety
///
/// `uarg` is the `ubuf` of a live [`TokenInner`] and the caller owns one of its references.
unsafe extern "C" fn token_complete(
    _skb: *mut bindings::sk_buff,
    uarg: *mut bindings::ubuf_info,
    _success: bool,
) {
    // SAFETY: `uarg` is valid and the caller owns a reference (function safety requirement).
    if !unsafe { bindings::refcount_dec_and_test(&mut (*uarg).refcnt) } {
        return;
    }
    // SAFETY: That was the last reference: nothing else refers to the token, which `token` made
    // with `KBox::leak`; `ubuf` is its first field (`repr(C)`).
    let token = unsafe { KBox::from_raw(uarg.cast::<TokenInner>()) };
    {
        let handler = token.hub.handler.lock();
        if let Some(h) = handler.as_ref() {
            h.released(token.cookie);
        }
    }
    drop(token);
}

/// One reference on a zero-copy send token (a `struct ubuf_info`).
///
/// Pass it to [`TcpSocket::send_batch`]; TCP takes a reference for every skb it links to it.
/// Dropping the token drops this reference.
///
/// # Invariants
///
/// The pointee is a live [`TokenInner`] on which this value owns one reference.
pub struct ZcToken(NonNull<TokenInner>);

// SAFETY: The token is a reference count and immutable data behind it; the count is atomic.
unsafe impl Send for ZcToken {}
// SAFETY: See above; shared access only reads the pointer.
unsafe impl Sync for ZcToken {}

impl ZcToken {
    fn as_ubuf(&self) -> *mut bindings::ubuf_info {
        // CAST: `ubuf` is the first field of the `repr(C)` `TokenInner`.
        self.0.as_ptr().cast()
    }
}

impl Drop for ZcToken {
    fn drop(&mut self) {
        // SAFETY: This value owns one reference (type invariant), which it gives up here.
        unsafe { token_complete(core::ptr::null_mut(), self.as_ubuf(), true) };
    }
}

/// Page fragments to send, each holding a reference on its page.
///
/// # Invariants
///
/// - Every entry of `frags` is a fragment of a valid page, within the page, on which the batch
///   owns one reference; `bytes` is the sum of their lengths.
/// - `sent <= bytes`: the first `sent` bytes were handed to TCP already.
/// - `fill` is null or a page allocated by the batch, on which it owns one more reference, whose
///   bytes from `fill_off` on are the batch's alone: no fragment and no other reference (TCP's
///   among them) reaches them.
pub struct PageBatch {
    frags: KVec<bindings::bio_vec>,
    bytes: usize,
    sent: usize,
    fill: *mut bindings::page,
    fill_off: usize,
}

// SAFETY: The batch owns page references, which may be dropped from any thread.
unsafe impl Send for PageBatch {}
// SAFETY: Shared access only reads lengths.
unsafe impl Sync for PageBatch {}

impl PageBatch {
    /// An empty batch with room for `max_frags` fragments (its fixed capacity).
    pub fn new(max_frags: usize, flags: Flags) -> Result<Self> {
        // INVARIANT: No fragment and no fill page.
        Ok(Self {
            frags: KVec::with_capacity(max_frags, flags)?,
            bytes: 0,
            sent: 0,
            fill: core::ptr::null_mut(),
            fill_off: 0,
        })
    }

    /// The number of bytes in the batch.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The number of bytes not yet handed to TCP (see [`TcpSocket::send_batch_nowait`]).
    pub fn unsent(&self) -> usize {
        self.bytes - self.sent
    }

    /// How many more fragments fit.
    pub fn frags_left(&self) -> usize {
        self.frags.capacity() - self.frags.len()
    }

    /// Appends a fragment that owns one reference on `page`, merging it into the last one when
    /// it continues it (then the reference is dropped).
    ///
    /// # Safety
    ///
    /// `page` is valid, `offset + len <= PAGE_SIZE`, and the caller gives up one reference on
    /// `page` to the batch.
    unsafe fn push_frag(&mut self, page: *mut bindings::page, offset: usize, len: usize) -> Result {
        if let Some(last) = self.frags.last_mut() {
            // CAST: Page offsets and lengths fit in `u32`.
            if last.bv_page == page && (last.bv_offset + last.bv_len) as usize == offset {
                last.bv_len += len as u32;
                self.bytes += len;
                // SAFETY: The merged fragment keeps its own reference; this one is surplus.
                unsafe { bindings::put_page(page) };
                return Ok(());
            }
        }
        if self.frags_left() == 0 {
            // SAFETY: The reference was given to us; it is dropped as it cannot be stored.
            unsafe { bindings::put_page(page) };
            return Err(ENOMEM);
        }
        // CAST: Page offsets and lengths fit in `u32`.
        let frag = bindings::bio_vec {
            bv_page: page,
            bv_len: len as u32,
            bv_offset: offset as u32,
        };
        // INVARIANT: The fragment owns the reference given up by the caller.
        if self.frags.push(frag, GFP_ATOMIC).is_err() {
            // SAFETY: As above: the reference cannot be stored.
            unsafe { bindings::put_page(page) };
            return Err(ENOMEM);
        }
        self.bytes += len;
        Ok(())
    }

    /// Appends a copy of `data`, in pages of the batch's own (allocated with `flags`).
    pub fn push_copy(&mut self, mut data: &[u8], flags: Flags) -> Result {
        while !data.is_empty() {
            if self.fill.is_null() || self.fill_off == PAGE_SIZE {
                self.drop_fill();
                // SAFETY: Allocating an order-0 page has no precondition.
                let page = unsafe { bindings::alloc_pages(flags.as_raw(), 0) };
                if page.is_null() {
                    return Err(ENOMEM);
                }
                // INVARIANT: A new page, unseen by TCP; the batch owns its reference.
                self.fill = page;
                self.fill_off = 0;
            }
            let n = data.len().min(PAGE_SIZE - self.fill_off);
            // SAFETY: `fill` is a page without `__GFP_HIGHMEM`, so in the direct map; bytes from
            // `fill_off` are ours alone (type invariant) and `fill_off + n <= PAGE_SIZE`.
            unsafe {
                let dst = bindings::ksock_page_address(self.fill)
                    .cast::<u8>()
                    .add(self.fill_off);
                core::ptr::copy_nonoverlapping(data.as_ptr(), dst, n);
                bindings::get_page(self.fill);
                self.push_frag(self.fill, self.fill_off, n)?;
            }
            // INVARIANT: The bytes just written now belong to a fragment.
            self.fill_off += n;
            data = &data[n..];
        }
        Ok(())
    }

    /// Appends the `len` bytes at kernel address `addr` by reference, if every page they lie in
    /// can be spliced (in the direct map or vmalloc space, not slab memory). Returns `false`,
    /// adding nothing, if not.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` is kernel memory that stays allocated for the duration of the call.
    pub unsafe fn push_kernel_memory(&mut self, addr: usize, len: usize) -> Result<bool> {
        let end = addr.checked_add(len).ok_or(EINVAL)?;
        let (first, last) = (
            addr & !(PAGE_SIZE - 1),
            end.saturating_sub(1) & !(PAGE_SIZE - 1),
        );
        let pages = if len == 0 {
            0
        } else {
            (last - first) / PAGE_SIZE + 1
        };
        if pages > self.frags_left() {
            return Ok(false);
        }
        let mut at = first;
        for _ in 0..pages {
            // SAFETY: `at` is in the caller's valid kernel memory (function safety requirement).
            let page = unsafe { bindings::ksock_kernel_addr_page(at as *const c_void) };
            // SAFETY: A non-null result is the page backing valid memory.
            if page.is_null() || !unsafe { bindings::sendpage_ok(page) } {
                return Ok(false);
            }
            at += PAGE_SIZE;
        }
        let mut pos = addr;
        while pos < end {
            let off = pos & (PAGE_SIZE - 1);
            let n = (end - pos).min(PAGE_SIZE - off);
            // SAFETY: Checked above: `pos` lies in a spliceable page of valid memory; the page
            // stays allocated for the call, so taking a reference is sound.
            unsafe {
                let page = bindings::ksock_kernel_addr_page(pos as *const c_void);
                bindings::get_page(page);
                self.push_frag(page, off, n)?;
            }
            pos += n;
        }
        Ok(true)
    }

    /// Cuts the batch back to its first `len` bytes, or to what was sent if that is more.
    pub fn truncate(&mut self, len: usize) {
        let len = len.max(self.sent);
        while self.bytes > len {
            let Some(last) = self.frags.last_mut() else {
                break;
            };
            let excess = self.bytes - len;
            // CAST: A fragment length fits in `usize`.
            let flen = last.bv_len as usize;
            if flen > excess {
                // CAST: Less than the old length.
                last.bv_len -= excess as u32;
                self.bytes = len;
                break;
            }
            self.bytes -= flen;
            let page = last.bv_page;
            let n = self.frags.len() - 1;
            // SAFETY: Dropping the last element of a vector of plain C structs; its page
            // reference is given up next.
            unsafe { self.frags.set_len(n) };
            // SAFETY: The fragment owned a reference (type invariant).
            unsafe { bindings::put_page(page) };
        }
    }

    /// Empties the batch, dropping the references of its fragments.
    ///
    /// The fill page stays for the next batch if nothing else refers to it any more (TCP copied
    /// what it was given, or freed its buffers): a batch of short pieces then allocates no
    /// page. Otherwise its reference is dropped too.
    pub fn clear(&mut self) {
        // INVARIANT: Nothing is left to count as sent.
        self.sent = 0;
        self.truncate(0);
        if self.fill.is_null() {
            return;
        }
        // SAFETY: The batch owns a reference on its fill page (type invariant).
        if unsafe { bindings::ksock_page_only_ref(self.fill) } {
            // INVARIANT: No fragment is left, and no one else holds a reference that could
            // reach the page's bytes: all of them are the batch's again.
            self.fill_off = 0;
        } else {
            self.drop_fill();
        }
    }

    fn drop_fill(&mut self) {
        if !self.fill.is_null() {
            // SAFETY: The batch owns a reference on its fill page (type invariant).
            unsafe { bindings::put_page(self.fill) };
            // INVARIANT: No fill page any more.
            self.fill = core::ptr::null_mut();
            self.fill_off = 0;
        }
    }
}

impl Drop for PageBatch {
    fn drop(&mut self) {
        self.clear();
        self.drop_fill();
    }
}

/// How [`TcpSocket::send_batch`] hands a batch to TCP.
#[derive(Clone, Copy)]
pub enum SendAs<'a> {
    /// `MSG_SPLICE_PAGES`: TCP refers to the pages until it freed the skbs. Only for batches
    /// whose memory may be reused at once (the batch's own pages are never written again).
    Splice,
    /// `MSG_ZEROCOPY` with the token as `msg_ubuf`: spliced as well, and the token is released
    /// once TCP let go of every page.
    ZeroCopy(&'a ZcToken),
    /// A plain `sendmsg`: TCP copies the bytes into its own pages (in large fragments) before
    /// the call returns; nothing refers to the batch's pages after that.
    Copy,
}

/// How far [`TcpSocket::send_batch_nowait`] got.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SendProgress {
    /// TCP took the whole batch, which is empty again.
    Done,
    /// The socket is full: the rest of the batch stays, to be sent by a later call with the same
    /// `how`, once [`SocketEvents::write_space`](super::SocketEvents::write_space) reported room.
    Blocked,
    /// TCP could not allocate memory for the batch, and holds no data whose acknowledgement
    /// would bring a [`SocketEvents::write_space`](super::SocketEvents::write_space): the rest
    /// of the batch stays, and the caller tries again later by itself.
    NoMemory,
}

impl TcpSocket {
    /// Sends the whole batch as `how` says, blocking while the socket is full, and empties it.
    pub fn send_batch(&self, batch: &mut PageBatch, how: SendAs<'_>) -> Result {
        let res = self.send_frags(batch, how, false);
        batch.clear();
        res
    }

    /// Sends what TCP takes of the batch now, without blocking. The part not sent stays in the
    /// batch (nothing may be pushed to it meanwhile); on an error the batch is emptied.
    pub fn send_batch_nowait(
        &self,
        batch: &mut PageBatch,
        how: SendAs<'_>,
    ) -> Result<SendProgress> {
        match self.send_frags(batch, how, true) {
            Ok(()) => {
                batch.clear();
                Ok(SendProgress::Done)
            }
            // TCP reports a full send buffer and a failed allocation alike. With data queued, its
            // acknowledgement reports room; with none, nothing would.
            Err(e) if e == EAGAIN && self.sock().send_queued() > 0 => Ok(SendProgress::Blocked),
            Err(e) if e == EAGAIN => Ok(SendProgress::NoMemory),
            Err(e) => {
                batch.clear();
                Err(e)
            }
        }
    }

    /// Hands the batch's unsent bytes to TCP, counting them as sent as it goes.
    fn send_frags(&self, batch: &mut PageBatch, how: SendAs<'_>, nowait: bool) -> Result {
        while batch.sent < batch.bytes {
            // SAFETY: `msghdr` is a plain C struct for which all zeroes is the empty message.
            let mut msg: bindings::msghdr = unsafe { core::mem::zeroed() };
            msg.msg_flags = bindings::MSG_NOSIGNAL;
            if nowait {
                msg.msg_flags |= bindings::MSG_DONTWAIT;
            }
            match how {
                SendAs::ZeroCopy(t) => {
                    msg.msg_flags |= bindings::MSG_ZEROCOPY;
                    msg.msg_ubuf = t.as_ubuf();
                }
                SendAs::Splice => msg.msg_flags |= bindings::MSG_SPLICE_PAGES,
                SendAs::Copy => {}
            }
            // SAFETY: The fragments are valid pages the batch holds references on (type
            // invariant), `bytes` long in all; they outlive the call. `sent < bytes`.
            unsafe {
                bindings::iov_iter_bvec(
                    &mut msg.msg_iter,
                    bindings::ITER_SOURCE,
                    batch.frags.as_ptr(),
                    // CAST: A slice length fits in `unsigned long`.
                    batch.frags.len() as crate::ffi::c_ulong,
                    batch.bytes,
                );
                bindings::iov_iter_advance(&mut msg.msg_iter, batch.sent);
            }
            // SAFETY: The socket is valid; `msg` describes the fragments, see above; with a
            // token TCP takes its own references on it (`msg_ubuf`), when copying it reads the
            // pages only during the call.
            let ret = unsafe { bindings::sock_sendmsg(self.raw(), &mut msg) };
            if ret < 0 {
                return Err(Error::from_errno(ret));
            }
            if ret == 0 {
                return Err(EAGAIN);
            }
            // CAST: Positive.
            let n = ret as usize;
            // INVARIANT: TCP took at most what was offered, `bytes - sent`.
            batch.sent = batch.sent.saturating_add(n).min(batch.bytes);
        }
        Ok(())
    }
}
