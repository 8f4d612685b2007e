// SPDX-License-Identifier: GPL-2.0

//! Owned kernel TCP sockets: [`TcpSocket`] and [`TcpListener`].

use super::addr::{Family, RawSockAddr};
use super::errno;
use super::events::{self, Handler, ListenerEvents, LockedSock, Sock, SocketEvents};
use crate::{
    bindings,
    error::{
        code::{EAGAIN, EINVAL},
        to_result,
    },
    ffi::{c_int, c_long, c_uint},
    netns::Namespace,
    page::{Page, PAGE_SIZE},
    prelude::*,
    sync::Arc,
    time::Msecs,
};
use core::{marker::PhantomData, net::SocketAddr, ptr::addr_of_mut, ptr::NonNull};

/// The state of a TCP connection (`TCP_*` in `include/net/tcp_states.h`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TcpState {
    /// Connected.
    Established,
    /// Connecting: SYN sent.
    SynSent,
    /// Being accepted: SYN received.
    SynRecv,
    /// Closed by us, waiting for the peer's ACK.
    FinWait1,
    /// Closed by us, waiting for the peer's FIN.
    FinWait2,
    /// Closed on both sides, lingering.
    TimeWait,
    /// Closed (or never connected).
    Close,
    /// The peer closed its side.
    CloseWait,
    /// Closed by both, waiting for the last ACK.
    LastAck,
    /// Listening.
    Listen,
    /// Both sides closing at once.
    Closing,
    /// Any other state, with its raw value.
    Other(u8),
}

impl TcpState {
    pub(crate) fn from_raw(raw: u8) -> Self {
        match u32::from(raw) {
            bindings::TCP_ESTABLISHED => TcpState::Established,
            bindings::TCP_SYN_SENT => TcpState::SynSent,
            bindings::TCP_SYN_RECV => TcpState::SynRecv,
            bindings::TCP_FIN_WAIT1 => TcpState::FinWait1,
            bindings::TCP_FIN_WAIT2 => TcpState::FinWait2,
            bindings::TCP_TIME_WAIT => TcpState::TimeWait,
            bindings::TCP_CLOSE => TcpState::Close,
            bindings::TCP_CLOSE_WAIT => TcpState::CloseWait,
            bindings::TCP_LAST_ACK => TcpState::LastAck,
            bindings::TCP_LISTEN => TcpState::Listen,
            bindings::TCP_CLOSING => TcpState::Closing,
            _ => TcpState::Other(raw),
        }
    }
}

/// Which directions [`TcpSocket::shutdown`] closes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Shutdown {
    /// No more receiving.
    Read,
    /// No more sending: a FIN goes to the peer once queued data is sent.
    Write,
    /// Both.
    Both,
}

/// The outcome of [`TcpSocket::connect_nonblocking`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ConnectStatus {
    /// Connected already.
    Connected,
    /// Connecting. Completion is signalled by [`SocketEvents::state_change`] (with
    /// [`TcpState::Established`], or [`TcpState::Close`] on failure, when
    /// [`TcpSocket::take_error`] tells why).
    InProgress,
}

macro_rules! msg_flags {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $flag:ident = $raw:ident,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
        pub struct $name(u32);

        impl $name {
            $(
                $(#[$fmeta])*
                pub const $flag: Self = Self(bindings::$raw);
            )*

            /// No flags.
            pub const fn empty() -> Self {
                Self(0)
            }

            /// Whether every flag in `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
        }

        impl core::ops::BitOr for $name {
            type Output = Self;

            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }
    };
}

msg_flags! {
    /// Flags for [`TcpSocket::send`] and [`TcpSocket::send_pages`] (`MSG_*`).
    ///
    /// `MSG_NOSIGNAL` is always added: a send on a closed connection fails with `EPIPE` instead
    /// of signalling the calling task.
    SendFlags {
        /// Do not block: send what fits, or fail with `EAGAIN` if nothing does.
        DONTWAIT = MSG_DONTWAIT,
        /// More data follows at once; TCP may hold back a partial segment.
        MORE = MSG_MORE,
        /// End of record: this ends a message.
        EOR = MSG_EOR,
    }
}

msg_flags! {
    /// Flags for [`TcpSocket::recv`] (`MSG_*`).
    RecvFlags {
        /// Do not block: fail with `EAGAIN` if no data is queued.
        DONTWAIT = MSG_DONTWAIT,
        /// Look at the data without consuming it.
        PEEK = MSG_PEEK,
        /// Block until the whole buffer is filled (or the connection ends, or a signal comes).
        WAITALL = MSG_WAITALL,
    }
}

/// A byte slice to send, in the kernel's `struct kvec` form.
///
/// # Invariants
///
/// The `kvec` describes the bytes of a `&'a [u8]`.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct IoSlice<'a> {
    vec: bindings::kvec,
    _p: PhantomData<&'a [u8]>,
}

impl<'a> IoSlice<'a> {
    /// Describes `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        // INVARIANT: Built from `buf`, borrowed for `'a`.
        Self {
            vec: bindings::kvec {
                iov_base: buf.as_ptr().cast_mut().cast(),
                iov_len: buf.len(),
            },
            _p: PhantomData,
        }
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.vec.iov_len
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.vec.iov_len == 0
    }
}

/// A range of bytes within one page, to send without copying ([`TcpSocket::send_pages`]).
///
/// # Invariants
///
/// `bvec.bv_page` is a valid page that stays allocated for `'a`, and
/// `bv_offset + bv_len <= PAGE_SIZE`.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct PageSlice<'a> {
    bvec: bindings::bio_vec,
    _p: PhantomData<&'a Page>,
}

impl<'a> PageSlice<'a> {
    /// Describes `len` bytes at `offset` in `page`.
    ///
    /// Fails with `EINVAL` if the range does not lie inside the page.
    pub fn new(page: &'a Page, offset: usize, len: usize) -> Result<Self> {
        // SAFETY: `page` is a valid page, kept allocated for `'a` by the borrow.
        unsafe { Self::from_raw(page.as_ptr(), offset, len) }
    }

    /// Describes `len` bytes at `offset` in the page `page`.
    ///
    /// Fails with `EINVAL` if the range does not lie inside the page.
    ///
    /// # Safety
    ///
    /// `page` must be a valid `struct page` on which the caller holds a reference (or which is
    /// otherwise kept allocated, e.g. pinned memory) for `'a`.
    pub unsafe fn from_raw(page: *mut bindings::page, offset: usize, len: usize) -> Result<Self> {
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        if page.is_null() || end > PAGE_SIZE {
            return Err(EINVAL);
        }
        // INVARIANT: The caller keeps `page` allocated for `'a`; the range was checked.
        Ok(Self {
            bvec: bindings::bio_vec {
                bv_page: page,
                bv_len: c_uint::try_from(len)?,
                bv_offset: c_uint::try_from(offset)?,
            },
            _p: PhantomData,
        })
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        // CAST: At most `PAGE_SIZE`.
        self.bvec.bv_len as usize
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.bvec.bv_len == 0
    }
}

/// A kernel TCP socket (IPv4 or IPv6) in the initial network namespace.
///
/// Created unconnected by [`TcpSocket::new`] or connected by [`TcpListener::accept`]; released
/// (after removing its upcall handler, if any) when dropped. All methods may be called
/// concurrently from several threads: the kernel serializes them with the socket lock. They sleep
/// (except where noted), so they are not for upcalls or other atomic contexts; dropping the
/// socket sleeps too.
///
/// # Invariants
///
/// - `sock` is a TCP socket of family `family`, created by `sock_create_kern` or returned by
///   `kernel_accept`, owned by this object (released in `drop`); `sock->sk` is valid for as long
///   as this object exists.
/// - `sk->sk_user_data` is null, a hook installed by [`events::install`] (on these sockets only
///   this module writes a word tagged as its hook), or someone else's data, which this module
///   never uses; the socket never listens while a [`Handler::Stream`] is installed.
pub struct TcpSocket {
    sock: NonNull<bindings::socket>,
    family: Family,
}

// SAFETY: A kernel socket may be used and released from any thread.
unsafe impl Send for TcpSocket {}
// SAFETY: The methods taking `&self` go through kernel functions that serialize with the socket
// lock, or only read fields racily as C does (with `READ_ONCE`).
unsafe impl Sync for TcpSocket {}

impl TcpSocket {
    /// Creates an unconnected TCP socket of `family` in namespace `ns` (`sock_create_kern`).
    ///
    /// Until it is released, the socket does not keep `ns` from being dismantled, only its
    /// memory: whoever makes it must close it before the namespace's TCP state goes away, for
    /// instance when the netdev it serves leaves the namespace. A connection released while
    /// `ns` lives holds `ns` until TCP has finished closing it (see `drop`).
    pub fn new(ns: &Namespace, family: Family) -> Result<Self> {
        let mut sock = core::ptr::null_mut();
        // SAFETY: `ns` is alive (type invariant of `Namespace`); `sock` is valid for writes.
        to_result(unsafe {
            bindings::sock_create_kern(
                ns.as_raw(),
                family.as_raw(),
                // CAST: `SOCK_STREAM` and `IPPROTO_TCP` are small constants.
                bindings::sock_type_SOCK_STREAM as c_int,
                bindings::IPPROTO_TCP as c_int,
                &mut sock,
            )
        })?;
        // INVARIANT: A new TCP socket, now owned here, with no hook.
        Ok(Self {
            sock: NonNull::new(sock).ok_or(EINVAL)?,
            family,
        })
    }

    pub(super) fn raw(&self) -> *mut bindings::socket {
        self.sock.as_ptr()
    }

    fn sk(&self) -> *mut bindings::sock {
        // SAFETY: `sock` is valid (type invariant) and `sk` is set for its lifetime.
        unsafe { (*self.raw()).sk }
    }

    /// The socket's `struct sock`, for the read-only accessors of [`Sock`].
    pub fn sock(&self) -> &Sock {
        // SAFETY: `sk` is a valid TCP `sock` for as long as `self` is borrowed.
        unsafe { Sock::from_raw(self.sk()) }
    }

    /// The address family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Lets `bind` reuse a local address still in `TIME_WAIT` (`SO_REUSEADDR`).
    pub fn set_reuseaddr(&self) {
        // SAFETY: `sk` is valid; the function takes the socket lock.
        unsafe { bindings::sock_set_reuseaddr(self.sk()) };
    }

    /// Makes releasing the socket abort the connection with a reset instead of closing it in
    /// order (`SO_LINGER` with a zero timeout).
    pub fn set_abortive_close(&self) {
        // SAFETY: `sk` is valid; the function takes the socket lock.
        unsafe { bindings::sock_no_linger(self.sk()) };
    }

    /// Disables Nagle's algorithm (`TCP_NODELAY`): small segments go out at once.
    pub fn set_nodelay(&self) {
        // SAFETY: `sk` is valid; the function takes the socket lock.
        unsafe { bindings::tcp_sock_set_nodelay(self.sk()) };
    }

    /// Restricts an IPv6 socket to IPv6 (`IPV6_V6ONLY`). Must precede `bind`.
    ///
    /// Fails with `EINVAL` on an IPv4 socket or a bound one.
    pub fn set_v6only(&self) -> Result {
        if self.family != Family::Inet6 {
            return Err(EINVAL);
        }
        // SAFETY: `sk` is a valid IPv6 socket; the function takes the socket lock.
        to_result(unsafe { bindings::ip6_sock_set_v6only(self.sk()) })
    }

    /// Restricts the socket to the network device with index `ifindex` (`SO_BINDTOIFINDEX`).
    ///
    /// A listener bound to a wildcard address then only accepts connections that arrive on that
    /// device, as the C siw does for its listeners.
    pub fn bind_to_ifindex(&self, ifindex: i32) -> Result {
        // SAFETY: `sk` is valid; `true` makes the function take the socket lock.
        to_result(unsafe { bindings::sock_bindtoindex(self.sk(), ifindex, true) })
    }

    /// Binds the socket to a local address (port 0 picks a free port).
    pub fn bind(&self, addr: &SocketAddr) -> Result {
        let (mut raw, len) = RawSockAddr::new(addr);
        // SAFETY: `sock` is valid; `raw` holds `len` valid bytes.
        to_result(unsafe { bindings::kernel_bind(self.raw(), raw.as_mut_ptr(), len) })
    }

    /// Starts listening, with room for `backlog` connections waiting to be accepted.
    ///
    /// An upcall handler installed on the socket is removed first. The socket is released if
    /// this fails.
    pub fn listen(self, backlog: u32) -> Result<TcpListener> {
        // INVARIANT: No `Stream` handler stays installed on a listening socket.
        // SAFETY: `sk` is our valid socket.
        unsafe { events::remove(self.sk()) };
        let backlog = c_int::try_from(backlog).unwrap_or(c_int::MAX);
        // SAFETY: `sock` is valid.
        to_result(unsafe { bindings::kernel_listen(self.raw(), backlog) })?;
        Ok(TcpListener { sock: self })
    }

    /// Connects to `addr`, waiting at most `timeout` milliseconds (`None`: until TCP gives up).
    ///
    /// Fails with `ETIMEDOUT` when the time is up; the connection attempt is then still under
    /// way, and the socket should be dropped. Fails with `EINTR`/`ERESTARTSYS` when the calling
    /// task is signalled.
    pub fn connect(&self, addr: &SocketAddr, timeout: Option<Msecs>) -> Result {
        let old = timeout.map(|ms| {
            // At least one jiffy: zero would not wait at all.
            let jiffies = crate::time::msecs_to_jiffies(ms).max(1);
            let jiffies = c_long::try_from(jiffies).unwrap_or(c_long::MAX);
            // SAFETY: `sk` is valid and the socket lock protects `sk_sndtimeo`, which is how
            // long a blocking connect waits.
            unsafe { self.swap_sndtimeo(jiffies) }
        });
        let (mut raw, len) = RawSockAddr::new(addr);
        // SAFETY: `sock` is valid; `raw` holds `len` valid bytes.
        let ret = unsafe { bindings::kernel_connect(self.raw(), raw.as_mut_ptr(), len, 0) };
        if let Some(old) = old {
            // SAFETY: As above.
            unsafe { self.swap_sndtimeo(old) };
        }
        match to_result(ret) {
            // A blocking connect that ran out of time reports the attempt as in progress.
            Err(e) if timeout.is_some() && e == errno::einprogress() => Err(errno::etimedout()),
            r => r,
        }
    }

    /// Sets `sk_sndtimeo`, returning the old value.
    ///
    /// # Safety
    ///
    /// Only to be used as in `connect`.
    unsafe fn swap_sndtimeo(&self, timeo: c_long) -> c_long {
        let sk = self.sk();
        // SAFETY: `sk` is valid.
        unsafe { bindings::lock_sock(sk) };
        // SAFETY: The socket lock is held; readers use `READ_ONCE`.
        let old = unsafe { addr_of_mut!((*sk).sk_sndtimeo).read_volatile() };
        // SAFETY: As above.
        unsafe { addr_of_mut!((*sk).sk_sndtimeo).write_volatile(timeo) };
        // SAFETY: Locked above.
        unsafe { bindings::release_sock(sk) };
        old
    }

    /// Starts connecting to `addr` without waiting.
    ///
    /// Does not sleep for the connection, only for the socket lock.
    pub fn connect_nonblocking(&self, addr: &SocketAddr) -> Result<ConnectStatus> {
        let (mut raw, len) = RawSockAddr::new(addr);
        // CAST: `O_NONBLOCK` is a small constant.
        let flags = bindings::O_NONBLOCK as c_int;
        // SAFETY: `sock` is valid; `raw` holds `len` valid bytes.
        let ret = unsafe { bindings::kernel_connect(self.raw(), raw.as_mut_ptr(), len, flags) };
        match to_result(ret) {
            Ok(()) => Ok(ConnectStatus::Connected),
            Err(e) if e == errno::einprogress() => Ok(ConnectStatus::InProgress),
            Err(e) => Err(e),
        }
    }

    /// Takes the pending socket error (`sock_error`), clearing it.
    pub fn take_error(&self) -> Option<Error> {
        // SAFETY: `sk` is valid; the error is taken atomically.
        let err = unsafe { bindings::sock_error(self.sk()) };
        (err < 0).then(|| Error::from_errno(err))
    }

    /// The current TCP state.
    pub fn state(&self) -> TcpState {
        self.sock().state()
    }

    /// Whether the route leaves through a loopback device; see [`Sock::route_is_loopback`].
    pub fn route_is_loopback(&self) -> bool {
        self.sock().route_is_loopback()
    }

    /// The current maximum segment size; see [`Sock::mss`].
    pub fn mss(&self) -> u32 {
        self.sock().mss()
    }

    /// The current GSO segment count; see [`Sock::gso_segs`].
    pub fn gso_segs(&self) -> u16 {
        self.sock().gso_segs()
    }

    /// The local address (`kernel_getsockname`).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        let mut raw = RawSockAddr::zeroed();
        // SAFETY: `sock` is valid; `raw` has room for any address.
        let len = unsafe { bindings::kernel_getsockname(self.raw(), raw.as_mut_ptr()) };
        to_result(len.min(0))?;
        raw.decode(len)
    }

    /// The peer's address (`kernel_getpeername`). Fails with `ENOTCONN` if not connected.
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        let mut raw = RawSockAddr::zeroed();
        // SAFETY: `sock` is valid; `raw` has room for any address.
        let len = unsafe { bindings::kernel_getpeername(self.raw(), raw.as_mut_ptr()) };
        to_result(len.min(0))?;
        raw.decode(len)
    }

    /// Shuts down one or both directions of the connection (`kernel_sock_shutdown`).
    pub fn shutdown(&self, how: Shutdown) -> Result {
        let how = match how {
            Shutdown::Read => bindings::sock_shutdown_cmd_SHUT_RD,
            Shutdown::Write => bindings::sock_shutdown_cmd_SHUT_WR,
            Shutdown::Both => bindings::sock_shutdown_cmd_SHUT_RDWR,
        };
        // SAFETY: `sock` is valid.
        to_result(unsafe { bindings::kernel_sock_shutdown(self.raw(), how) })
    }

    /// Sends the concatenation of `bufs` (`kernel_sendmsg`); the data is copied.
    ///
    /// Returns how many bytes were queued, which with [`SendFlags::DONTWAIT`] may be fewer than
    /// offered; fails with `EAGAIN` if none were (then [`SocketEvents::write_space`] follows when
    /// there is room again).
    pub fn send(&self, bufs: &[IoSlice<'_>], flags: SendFlags) -> Result<usize> {
        let total = bufs
            .iter()
            .try_fold(0usize, |sum, b| sum.checked_add(b.len()))
            .ok_or(EINVAL)?;
        // SAFETY: `msghdr` is a plain C struct for which all zeroes is the empty message.
        let mut msg: bindings::msghdr = unsafe { core::mem::zeroed() };
        msg.msg_flags = flags.0 | bindings::MSG_NOSIGNAL;
        // CAST: `IoSlice` is a transparent wrapper of `kvec`.
        let vec = bufs.as_ptr().cast::<bindings::kvec>().cast_mut();
        // SAFETY: `sock` is valid; `vec` points to `bufs.len()` `kvec`s describing borrowed
        // slices (invariant of `IoSlice`) of `total` bytes, which the kernel only reads.
        let ret = unsafe { bindings::kernel_sendmsg(self.raw(), &mut msg, vec, bufs.len(), total) };
        sent(ret)
    }

    /// Sends the concatenation of `pages` without copying them (`MSG_SPLICE_PAGES`).
    ///
    /// TCP takes a reference on each page and reads it until the data is acknowledged, which is
    /// long after this returns: the caller must not change the bytes in that time (the C siw
    /// uses this only for work requests that complete without signalling). Pages that cannot be
    /// spliced (`!sendpage_ok`, e.g. slab memory) make the whole call copy instead.
    ///
    /// Returns as [`TcpSocket::send`] does.
    pub fn send_pages(&self, pages: &[PageSlice<'_>], flags: SendFlags) -> Result<usize> {
        let mut total = 0usize;
        let mut splice = true;
        for p in pages {
            total = total.checked_add(p.len()).ok_or(EINVAL)?;
            // SAFETY: The page is valid (invariant of `PageSlice`).
            splice &= unsafe { bindings::sendpage_ok(p.bvec.bv_page) };
        }
        // SAFETY: `msghdr` is a plain C struct for which all zeroes is the empty message.
        let mut msg: bindings::msghdr = unsafe { core::mem::zeroed() };
        msg.msg_flags = flags.0 | bindings::MSG_NOSIGNAL;
        if splice {
            msg.msg_flags |= bindings::MSG_SPLICE_PAGES;
        }
        // CAST: `PageSlice` is a transparent wrapper of `bio_vec`.
        let bvec = pages.as_ptr().cast::<bindings::bio_vec>();
        // SAFETY: `bvec` points to `pages.len()` `bio_vec`s of valid pages (invariant of
        // `PageSlice`) of `total` bytes, which outlive the call.
        unsafe {
            bindings::iov_iter_bvec(
                &mut msg.msg_iter,
                bindings::ITER_SOURCE,
                bvec,
                // CAST: A slice length fits in `unsigned long`.
                pages.len() as crate::ffi::c_ulong,
                total,
            )
        };
        // SAFETY: `sock` is valid and `msg` describes the pages, see above.
        let ret = unsafe { bindings::sock_sendmsg(self.raw(), &mut msg) };
        sent(ret)
    }

    /// Receives into `buf` (`kernel_recvmsg`).
    ///
    /// Returns the number of bytes received, 0 at the end of the stream; with
    /// [`RecvFlags::DONTWAIT`] fails with `EAGAIN` if nothing is queued.
    pub fn recv(&self, buf: &mut [u8], flags: RecvFlags) -> Result<usize> {
        let mut vec = bindings::kvec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: `msghdr` is a plain C struct for which all zeroes is the empty message.
        let mut msg: bindings::msghdr = unsafe { core::mem::zeroed() };
        // CAST: The `MSG_*` flags fit in an `int`.
        let flags = flags.0 as c_int;
        // SAFETY: `sock` is valid; `vec` describes `buf`, valid for writes.
        let ret = unsafe {
            bindings::kernel_recvmsg(self.raw(), &mut msg, &mut vec, 1, buf.len(), flags)
        };
        to_result(ret.min(0))?;
        // CAST: Non-negative.
        Ok(ret as usize)
    }

    /// Installs `handler` for the socket's upcalls, replacing the handler installed before.
    ///
    /// The handler is held until it is replaced, [`TcpSocket::clear_callbacks`] is called, or the
    /// socket is dropped. Data that arrived before the handler was installed raises no
    /// `data_ready`: see [`TcpSocket::kick_data_ready`].
    ///
    /// Fails with `EBUSY` if someone else claimed the socket through its `sk_user_data` (a BPF
    /// sockmap, say): the socket is not for us then, and should be dropped.
    pub fn set_callbacks<T: SocketEvents + 'static>(&self, handler: Arc<T>) -> Result {
        let handler: Arc<dyn SocketEvents> = handler;
        // SAFETY: `sk` is our valid socket, and it does not listen (type invariant).
        unsafe { events::install(self.sk(), Handler::Stream(handler)) }
    }

    /// Removes the upcall handler, if any, and restores the socket's original upcalls.
    ///
    /// Waits for upcalls running the handler; when this returns, none runs and none will, and
    /// the socket's reference to the handler is gone. Must not be called from an upcall.
    pub fn clear_callbacks(&self) {
        // SAFETY: `sk` is our valid socket.
        unsafe { events::remove(self.sk()) };
    }

    /// Runs the installed handler's [`SocketEvents::data_ready`] now, from process context with
    /// the socket locked (and bottom halves disabled), as if data had just arrived.
    ///
    /// For data that was queued before the handler was installed, or that a handler left queued
    /// when it stopped reading.
    pub fn kick_data_ready(&self) {
        // SAFETY: `sk` is our valid socket, and it does not listen (type invariant).
        unsafe { events::kick_data_ready(self.sk()) };
    }

    /// Runs `f` with the socket locked as a `data_ready` upcall has it, to read received data
    /// from process context (a reader that moved bulk work out of the upcall). Sleeps for the
    /// socket lock (`lock_sock` checks `might_sleep`): process context only. Data arriving
    /// meanwhile is processed when the lock is released, with upcalls.
    pub fn with_locked<R>(&self, f: impl FnOnce(&LockedSock) -> R) -> R {
        // SAFETY: `sk` is our valid socket, and it does not listen (type invariant); the caller
        // sleeps in `lock_sock` if it is not in process context, which `might_sleep` reports.
        unsafe { events::with_locked(self.sk(), f) }
    }
}

/// Converts the result of a send.
fn sent(ret: c_int) -> Result<usize> {
    match ret {
        // A stream socket reports "nothing sent" as `EAGAIN`, but be safe about a zero.
        0 => Err(EAGAIN),
        r if r < 0 => Err(Error::from_errno(r)),
        // CAST: Positive.
        r => Ok(r as usize),
    }
}

impl Drop for TcpSocket {
    fn drop(&mut self) {
        // Upcalls made while the socket closes go to the original functions.
        self.clear_callbacks();
        // `tcp_close` stops every timer of a socket that holds no namespace reference (a
        // kernel socket's). An orphan whose FIN, or the ACK of it, is lost then never
        // retransmits: it stays in LAST-ACK or FIN-WAIT-1 for good. A connection's socket
        // therefore holds its namespace from here until TCP frees it, as a user socket does.
        // A listener needs none (it resets its pending children), and a socket in a namespace
        // being dismantled gets none (TCP ends it at once).
        if !matches!(self.sock().state(), TcpState::Listen | TcpState::Close) {
            // SAFETY: `sk` is valid (type invariant); we are its only user, in process context,
            // without its lock.
            unsafe { bindings::sk_hold_netns(self.sk()) };
        }
        // SAFETY: We own the socket (type invariant) and nobody uses it any more.
        unsafe { bindings::sock_release(self.raw()) };
    }
}

/// A listening kernel TCP socket.
///
/// Made by [`TcpSocket::listen`]; released when dropped. Connections that were not accepted are
/// reset then.
pub struct TcpListener {
    sock: TcpSocket,
}

impl TcpListener {
    /// Accepts a connection, without waiting (`kernel_accept` with `O_NONBLOCK`).
    ///
    /// Returns `None` when no connection is waiting. The new socket has no upcall handler (the
    /// listener's handler is not inherited) and may already hold received data. Someone else may
    /// have claimed it already (see [`TcpSocket::set_callbacks`]).
    pub fn accept(&self) -> Result<Option<TcpSocket>> {
        let mut new = core::ptr::null_mut();
        // CAST: `O_NONBLOCK` is a small constant.
        let flags = bindings::O_NONBLOCK as c_int;
        // SAFETY: `sock` is valid; `new` is valid for writes.
        let ret = unsafe { bindings::kernel_accept(self.sock.raw(), &mut new, flags) };
        match to_result(ret) {
            Err(e) if e == EAGAIN => return Ok(None),
            r => r?,
        }
        let sock = NonNull::new(new).ok_or(EINVAL)?;
        // INVARIANT: A connected TCP socket of the listener's family, now owned here. Its
        // `sk_user_data` is null (the listener's hook is not copied) or someone else's (a
        // sockmap's), and `fix_accepted` replaces the upcalls it inherited.
        let child = TcpSocket {
            sock,
            family: self.sock.family,
        };
        // SAFETY: The listener is ours; the child is fresh from `kernel_accept` on it.
        unsafe { events::fix_accepted(self.sock.sk(), child.sk()) };
        Ok(Some(child))
    }

    /// The local address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// The listening socket's `struct sock`.
    pub fn sock(&self) -> &Sock {
        self.sock.sock()
    }

    /// Installs `handler` for the listener's upcalls, replacing the handler installed before.
    ///
    /// [`ListenerEvents::incoming`] signals connections to accept. Connections that were ready
    /// before the handler was installed raise no upcall: call [`TcpListener::accept`] once after
    /// installing it.
    ///
    /// Fails with `EBUSY` as [`TcpSocket::set_callbacks`] does.
    pub fn set_callbacks<T: ListenerEvents + 'static>(&self, handler: Arc<T>) -> Result {
        let handler: Arc<dyn ListenerEvents> = handler;
        // SAFETY: `sk` is our valid socket.
        unsafe { events::install(self.sock.sk(), Handler::Listener(handler)) }
    }

    /// Removes the upcall handler, if any, as [`TcpSocket::clear_callbacks`] does.
    pub fn clear_callbacks(&self) {
        self.sock.clear_callbacks();
    }
}
