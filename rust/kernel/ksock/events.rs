// SPDX-License-Identifier: GPL-2.0

//! Socket upcalls: handlers for `sk_data_ready`, `sk_write_space`, `sk_state_change` and
//! `sk_error_report`, and the borrowed socket views they are given.

use super::skb::{self, Consumed, SkbData};
use super::socket::TcpState;
use crate::{alloc::KBox, bindings, error::code::EBUSY, prelude::*, sync::Arc, types::Opaque};
use core::ptr::{addr_of, addr_of_mut};

/// Handler for the upcalls of a connected (or connecting) [`TcpSocket`].
///
/// Every method runs in softirq context, or in process context with bottom halves enabled (when
/// TCP processes the socket backlog), with the read side of `sk_callback_lock` held; see the
/// [module documentation](super) for what that rules out. After the handler returns, the
/// socket's original upcall runs too, so the socket keeps behaving as it would without the
/// handler (it wakes up waiters, for example).
///
/// Upcalls can be spurious: a handler must cope with, say, `data_ready` when no data is queued.
///
/// [`TcpSocket`]: super::TcpSocket
pub trait SocketEvents: Send + Sync {
    /// Data arrived (`sk_data_ready`).
    ///
    /// The socket lock is held, so `sk` can read the data with [`LockedSock::read_sock`].
    fn data_ready(&self, sk: &LockedSock) {
        let _ = sk;
    }

    /// The socket became writable after a send came back with `EAGAIN` (`sk_write_space`).
    ///
    /// Only called when at least a third of the send buffer is free
    /// (`sk_stream_is_writeable`).
    fn write_space(&self, sk: &Sock) {
        let _ = sk;
    }

    /// The TCP state changed, to `state` (`sk_state_change`).
    ///
    /// [`TcpState::Established`] completes a non-blocking connect; [`TcpState::CloseWait`] means
    /// the peer closed its side; [`TcpState::Close`] means the connection is gone.
    fn state_change(&self, sk: &Sock, state: TcpState) {
        let _ = (sk, state);
    }

    /// An error was reported on the socket (`sk_error_report`), such as a reset by the peer.
    ///
    /// `err` is the pending socket error, if it is still set; it stays pending (see
    /// [`TcpSocket::take_error`](super::TcpSocket::take_error)).
    fn error_report(&self, sk: &Sock, err: Option<Error>) {
        let _ = (sk, err);
    }
}

/// Handler for the upcalls of a [`TcpListener`](super::TcpListener).
///
/// Runs in the contexts described for [`SocketEvents`]. Listener upcalls do not hold the
/// listening socket's lock (TCP processes listeners locklessly).
pub trait ListenerEvents: Send + Sync {
    /// A new connection is ready to be accepted (the listener's `sk_data_ready`).
    ///
    /// Accepting sleeps, so the handler defers it to process context, where it calls
    /// [`TcpListener::accept`](super::TcpListener::accept) until that returns `None`.
    fn incoming(&self, sk: &Sock);

    /// The listener's TCP state changed, to `state`.
    fn state_change(&self, sk: &Sock, state: TcpState) {
        let _ = (sk, state);
    }

    /// An error was reported on the listening socket.
    fn error_report(&self, sk: &Sock, err: Option<Error>) {
        let _ = (sk, err);
    }
}

/// A `struct sock` of a TCP socket, borrowed for the duration of an upcall.
///
/// Gives read-only access to the connection's state.
///
/// # Invariants
///
/// The wrapped `sock` is a valid TCP socket for the lifetime of every `&Sock`.
#[repr(transparent)]
pub struct Sock(Opaque<bindings::sock>);

impl Sock {
    /// Borrows `sk`.
    ///
    /// # Safety
    ///
    /// `sk` must be a valid TCP `sock` for `'a`.
    pub(crate) unsafe fn from_raw<'a>(sk: *mut bindings::sock) -> &'a Self {
        // CAST: `Sock` is a transparent wrapper of `sock`.
        // SAFETY: The caller guarantees validity for `'a`.
        unsafe { &*sk.cast::<Self>() }
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::sock {
        self.0.get()
    }

    /// The current TCP state.
    pub fn state(&self) -> TcpState {
        // SAFETY: The socket is valid (type invariant). `skc_state` changes under the socket
        // lock; an unlocked read of the byte is what C does with `READ_ONCE`.
        let raw = unsafe { addr_of!((*self.as_raw()).__sk_common.skc_state).read_volatile() };
        TcpState::from_raw(raw)
    }

    /// The pending socket error (`sk_err`), without clearing it.
    pub fn error(&self) -> Option<Error> {
        // SAFETY: The socket is valid; a racy read of an `int`, as `READ_ONCE` in C.
        let err = unsafe { addr_of!((*self.as_raw()).sk_err).read_volatile() };
        (err > 0).then(|| Error::from_errno(-err))
    }

    /// The current maximum segment size (`tcp_sk(sk)->mss_cache`).
    ///
    /// Zero before the connection is established.
    pub fn mss(&self) -> u32 {
        // SAFETY: The socket is a TCP socket (type invariant), so it is embedded in a `tcp_sock`.
        let tp = unsafe { bindings::tcp_sk(self.as_raw()) };
        // SAFETY: `tp` is valid; a racy read of an integer, as siw does.
        unsafe { addr_of!((*tp).mss_cache).read_volatile() }
    }

    /// The bytes of send buffer the socket holds (`sk_wmem_queued`): queued or sent and not
    /// yet acknowledged.
    pub fn send_queued(&self) -> i32 {
        // SAFETY: The socket is valid (type invariant); a racy read of an integer, which TCP
        // itself reads with `READ_ONCE` outside the socket lock.
        unsafe { addr_of!((*self.as_raw()).sk_wmem_queued).read_volatile() }
    }

    /// How many MSS-sized segments TCP currently builds into one GSO packet (`gso_segs`).
    pub fn gso_segs(&self) -> u16 {
        // SAFETY: As in `mss`.
        let tp = unsafe { bindings::tcp_sk(self.as_raw()) };
        // SAFETY: As in `mss`.
        unsafe { addr_of!((*tp).gso_segs).read_volatile() }
    }

    /// Whether the socket's route leaves through a loopback device: the peer is on this host.
    ///
    /// Data sent there with `MSG_ZEROCOPY` is copied when it is delivered (the receiving socket
    /// could hold the pages indefinitely), so zero copy only adds cost. False without a route.
    pub fn route_is_loopback(&self) -> bool {
        // SAFETY: The socket is valid (type invariant); the helper takes and drops its own
        // reference on the cached route.
        unsafe { bindings::ksock_route_is_loopback(self.as_raw()) }
    }

    /// Whether at least a third of the send buffer is free (`sk_stream_is_writeable`).
    pub fn is_writeable(&self) -> bool {
        // SAFETY: The socket is valid.
        unsafe { bindings::sk_stream_is_writeable(self.as_raw()) }
    }
}

/// A [`Sock`] whose socket lock the current context holds: received data can be read.
///
/// Given to [`SocketEvents::data_ready`].
///
/// # Invariants
///
/// The current context holds the socket lock (owns it, or holds its spinlock in softirq) for the
/// lifetime of every `&LockedSock`, and the socket is not listening.
#[repr(transparent)]
pub struct LockedSock(Sock);

impl core::ops::Deref for LockedSock {
    type Target = Sock;

    fn deref(&self) -> &Sock {
        &self.0
    }
}

impl LockedSock {
    /// Borrows `sk`.
    ///
    /// # Safety
    ///
    /// `sk` must be a valid TCP `sock`, not listening, whose socket lock the current context
    /// holds for `'a`.
    unsafe fn from_raw<'a>(sk: *mut bindings::sock) -> &'a Self {
        // CAST: `LockedSock` is a transparent wrapper of `Sock`, itself one of `sock`.
        // SAFETY: The caller guarantees validity and the lock for `'a`.
        unsafe { &*sk.cast::<Self>() }
    }

    /// How many received bytes are queued, not yet read (`tcp_inq`).
    pub fn queued_len(&self) -> usize {
        // SAFETY: By the type invariant the socket is a locked, non-listening TCP socket.
        let n = unsafe { bindings::ksock_inq(self.as_raw()) };
        usize::try_from(n).unwrap_or(0)
    }

    /// How many more bytes the peer may send under the receive window advertised last
    /// (`tcp_receive_window`): bytes it can still deliver while nothing queued is consumed.
    pub fn receive_window(&self) -> u32 {
        // SAFETY: By the type invariant the socket is a locked TCP socket, so its receive
        // sequence numbers are stable.
        unsafe { bindings::ksock_receive_window(self.as_raw()) }
    }

    /// Sets how many unread bytes must be queued before TCP calls `data_ready` (`SO_RCVLOWAT`;
    /// 0 and 1 both mean any). TCP also ACKs at once, rather than delaying its ACKs, while
    /// fewer than that are queued: a reader waiting for a whole message does not slow the
    /// sender's clock. Under memory pressure TCP calls `data_ready` below the mark as well.
    pub fn set_wakeup_mark(&self, bytes: usize) {
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        // SAFETY: By the type invariant the socket is a locked TCP socket; the helper writes
        // `sk_rcvlowat` with `WRITE_ONCE`, as lockless readers expect.
        unsafe { bindings::ksock_set_rcvlowat(self.as_raw(), bytes) }
    }

    /// Hands the queued received bytes to `actor`, in order (`tcp_read_sock`).
    ///
    /// `actor` is called with consecutive pieces of the stream (one socket buffer, or what is
    /// left of one, at a time) and returns how much of each it consumed:
    ///
    /// - [`Consumed::Continue(n)`](Consumed::Continue) with `n` equal to the length: the next
    ///   piece follows, if any;
    /// - `Continue(n)` with a smaller non-zero `n`: the rest of the piece is offered at once;
    /// - [`Consumed::Stop(n)`](Consumed::Stop), or `Continue(0)`: reading stops after `n` bytes.
    ///
    /// Bytes not consumed stay queued and are offered again by a later `read_sock`. Consumed
    /// bytes are removed from the socket, which lets TCP open its receive window (and send an
    /// ACK). A consumption larger than the piece counts as the whole piece.
    ///
    /// Returns the number of bytes consumed. The actor runs in atomic context.
    pub fn read_sock(&self, mut actor: impl FnMut(&SkbData<'_>) -> Consumed) -> Result<usize> {
        // SAFETY: By the type invariant the socket is a locked, non-listening TCP socket.
        unsafe { skb::read_sock(self.as_raw(), &mut actor) }
    }
}

/// An upcall function pointer as stored in `struct sock`.
type Upcall = Option<unsafe extern "C" fn(*mut bindings::sock)>;

/// A socket's upcalls from before a handler was installed.
#[derive(Clone, Copy)]
pub(crate) struct Upcalls {
    data_ready: Upcall,
    write_space: Upcall,
    state_change: Upcall,
    error_report: Upcall,
}

impl Upcalls {
    /// The upcalls currently installed on `sk`.
    ///
    /// # Safety
    ///
    /// `sk` must be valid and its `sk_callback_lock` held.
    unsafe fn read(sk: *mut bindings::sock) -> Self {
        // SAFETY: The caller guarantees validity; the lock serializes against writers.
        unsafe {
            Self {
                data_ready: (*sk).sk_data_ready,
                write_space: (*sk).sk_write_space,
                state_change: (*sk).sk_state_change,
                error_report: (*sk).sk_error_report,
            }
        }
    }

    /// Installs these upcalls on `sk`.
    ///
    /// # Safety
    ///
    /// `sk` must be valid and its `sk_callback_lock` held for writing.
    unsafe fn write(&self, sk: *mut bindings::sock) {
        // SAFETY: The caller guarantees validity and exclusive access to the pointers. TCP reads
        // them with `READ_ONCE`, so they are written as whole words.
        unsafe {
            addr_of_mut!((*sk).sk_data_ready).write_volatile(self.data_ready);
            addr_of_mut!((*sk).sk_write_space).write_volatile(self.write_space);
            addr_of_mut!((*sk).sk_state_change).write_volatile(self.state_change);
            addr_of_mut!((*sk).sk_error_report).write_volatile(self.error_report);
        }
    }

    /// Our own upcalls.
    const TRAMPOLINES: Self = Self {
        data_ready: Some(data_ready_upcall),
        write_space: Some(write_space_upcall),
        state_change: Some(state_change_upcall),
        error_report: Some(error_report_upcall),
    };

    /// Replaces each of our own upcalls found in `self` by the one in `originals`.
    fn replace_trampolines(&mut self, originals: &Self) {
        fn fix(cur: &mut Upcall, own: Upcall, orig: Upcall) {
            if addr(*cur) == addr(own) {
                *cur = orig;
            }
        }
        let own = Self::TRAMPOLINES;
        fix(&mut self.data_ready, own.data_ready, originals.data_ready);
        fix(
            &mut self.write_space,
            own.write_space,
            originals.write_space,
        );
        fix(
            &mut self.state_change,
            own.state_change,
            originals.state_change,
        );
        fix(
            &mut self.error_report,
            own.error_report,
            originals.error_report,
        );
    }
}

/// The address of an upcall, for identity comparisons.
fn addr(f: Upcall) -> usize {
    f.map_or(0, |f| f as usize)
}

/// The installed handler.
pub(crate) enum Handler {
    /// On a connected or connecting socket.
    Stream(Arc<dyn SocketEvents>),
    /// On a listening socket.
    Listener(Arc<dyn ListenerEvents>),
}

/// What `sk_user_data` points to while a handler is installed.
struct Hook {
    handler: Handler,
    /// The upcalls to restore on removal, and to chain to.
    orig: Upcalls,
}

// Whose `sk_user_data` it is.
//
// Its low bits are flags (`include/net/sock.h`). A `Hook` is tagged with `SK_USER_DATA_NOCOPY`
// alone, which also keeps TCP from copying the pointer into sockets cloned from a listener (the
// `Hook` belongs to the listener alone).
//
// Others can claim our sockets while they carry no hook: a BPF sockmap or sockhash
// (`sk_psock_init`, tag `NOCOPY | PSOCK`; a sockops program can add each new connection before
// we accept it) or a reuseport array (`NOCOPY | BPF`). Both refuse a socket whose
// `sk_user_data` is set, so they never replace a hook. Kernel users that store an untagged
// pointer, or tag `NOCOPY` alone (SMC), do so only on sockets they created themselves. So on
// our sockets exactly `NOCOPY` means a `Hook`, and any other non-null word is foreign: it is
// never dereferenced, replaced or freed here, and a handler is not installed next to it.
// CAST: The flag values are small.
const NOCOPY: usize = bindings::SK_USER_DATA_NOCOPY as usize;
// CAST: `SK_USER_DATA_PTRMASK` is `~7` as an `int`; sign extension gives the `unsigned long` mask.
const PTRMASK: usize = bindings::SK_USER_DATA_PTRMASK as isize as usize;

/// What a socket's `sk_user_data` holds.
enum UserData {
    /// Nothing.
    Empty,
    /// Our hook.
    Ours(*mut Hook),
    /// Someone else's data.
    Foreign,
}

impl UserData {
    /// Reads `sk_user_data` of `sk`, telling ours from foreign data by its tag only.
    ///
    /// # Safety
    ///
    /// `sk` must be valid and its `sk_callback_lock` held (for reading or writing).
    unsafe fn of(sk: *mut bindings::sock) -> Self {
        // SAFETY: `sk` is valid; the lock keeps writers out.
        let word = unsafe { addr_of!((*sk).sk_user_data).read_volatile() };
        // CAST: A pointer with tag bits in its low bits, taken apart as an integer.
        let word = word as usize;
        let ptr = word & PTRMASK;
        if word == 0 {
            UserData::Empty
        } else if word & !PTRMASK == NOCOPY && ptr != 0 {
            // CAST: The pointer without its tag.
            UserData::Ours(ptr as *mut Hook)
        } else {
            UserData::Foreign
        }
    }
}

/// The hook installed on `sk`, if any; `None` for foreign `sk_user_data`.
///
/// # Safety
///
/// `sk` must be a valid socket owned by a `TcpSocket` or `TcpListener`, so that a word tagged as
/// ours in its `sk_user_data` is a `Hook` (see their invariants), and its `sk_callback_lock`
/// must be held for `'a` (for reading or writing).
unsafe fn hook<'a>(sk: *mut bindings::sock) -> Option<&'a Hook> {
    // SAFETY: `sk` is valid and the lock is held.
    match unsafe { UserData::of(sk) } {
        // SAFETY: On our socket, a word tagged as ours is a live `Hook` that is only freed after
        // being unlinked under the write lock, which the caller's lock excludes for `'a`.
        UserData::Ours(hook) => Some(unsafe { &*hook }),
        UserData::Empty | UserData::Foreign => None,
    }
}

/// The read side of `sk_callback_lock`.
struct ReadGuard(*mut bindings::sock);

impl ReadGuard {
    /// # Safety
    ///
    /// `sk` must be valid for the lifetime of the guard.
    unsafe fn new(sk: *mut bindings::sock) -> Self {
        // SAFETY: The caller guarantees `sk` is valid.
        unsafe { bindings::read_lock(addr_of_mut!((*sk).sk_callback_lock)) };
        Self(sk)
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        // SAFETY: Locked in `new`; `sk` is still valid.
        unsafe { bindings::read_unlock(addr_of_mut!((*self.0).sk_callback_lock)) };
    }
}

/// The write side of `sk_callback_lock`, with bottom halves disabled.
struct WriteGuard(*mut bindings::sock);

impl WriteGuard {
    /// # Safety
    ///
    /// `sk` must be valid for the lifetime of the guard.
    unsafe fn new(sk: *mut bindings::sock) -> Self {
        // SAFETY: The caller guarantees `sk` is valid.
        unsafe { bindings::write_lock_bh(addr_of_mut!((*sk).sk_callback_lock)) };
        Self(sk)
    }
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        // SAFETY: Locked in `new`; `sk` is still valid.
        unsafe { bindings::write_unlock_bh(addr_of_mut!((*self.0).sk_callback_lock)) };
    }
}

/// Installs `handler` on `sk`, replacing the handler installed before, if any.
///
/// Fails with `EBUSY`, changing nothing, if `sk_user_data` holds someone else's data.
///
/// # Safety
///
/// `sk` must be a valid TCP socket owned by a `TcpSocket` or `TcpListener` (so that a word
/// tagged as ours in its `sk_user_data` is a `Hook`) that stays valid until [`remove`] has run
/// on it. A [`Handler::Stream`] must only be installed on a socket that never listens.
pub(crate) unsafe fn install(sk: *mut bindings::sock, handler: Handler) -> Result {
    let mut new = KBox::new(
        Hook {
            handler,
            orig: Upcalls::TRAMPOLINES,
        },
        GFP_KERNEL,
    )?;
    let old = {
        // SAFETY: `sk` is valid.
        let _guard = unsafe { WriteGuard::new(sk) };
        // SAFETY: The lock is held.
        let old = match unsafe { UserData::of(sk) } {
            UserData::Foreign => return Err(EBUSY),
            UserData::Ours(old) => {
                // SAFETY: `old` is a live `Hook` (our socket, and we hold the lock).
                new.orig = unsafe { (*old).orig };
                Some(old)
            }
            UserData::Empty => {
                // These are the originals. Some may be ours all the same, on a socket TCP
                // copied from a listener with a hook whose upcalls someone else saved and put
                // back (a sockmap does, when it lets go of the socket): `chain` runs the
                // kernel's default for them.
                // SAFETY: The lock is held.
                new.orig = unsafe { Upcalls::read(sk) };
                // SAFETY: The lock is held for writing.
                unsafe { Upcalls::TRAMPOLINES.write(sk) };
                None
            }
        };
        // CAST: The pointer tagged as ours, and back to a pointer below.
        let raw = KBox::into_raw(new) as usize | NOCOPY;
        // INVARIANT: `sk_user_data` now points to a live `Hook`, owned through this pointer and
        // tagged as ours.
        // SAFETY: The lock is held for writing; TCP reads `sk_user_data` as a whole word.
        unsafe { addr_of_mut!((*sk).sk_user_data).write_volatile(raw as *mut _) };
        old
    };
    if let Some(old) = old {
        // SAFETY: `old` came from `KBox::into_raw` in an earlier `install` and was unlinked
        // under the write lock, which has been released since: no upcall can still use it.
        drop(unsafe { KBox::from_raw(old) });
    }
    Ok(())
}

/// Removes the handler installed on `sk`, if any, and restores the original upcalls. Foreign
/// `sk_user_data` is left alone.
///
/// When this returns, no upcall is running the handler any more and none will; the handler has
/// been dropped (this is where a last reference to it goes away).
///
/// # Safety
///
/// `sk` must be a valid TCP socket owned by a `TcpSocket` or `TcpListener`.
pub(crate) unsafe fn remove(sk: *mut bindings::sock) {
    let old = {
        // SAFETY: `sk` is valid.
        let _guard = unsafe { WriteGuard::new(sk) };
        // SAFETY: The lock is held; `sk` is ours.
        let Some(old) = (unsafe { hook(sk) }) else {
            return;
        };
        // SAFETY: The lock is held for writing.
        unsafe { old.orig.write(sk) };
        // INVARIANT: No hook is installed, and the original upcalls are back.
        // SAFETY: The lock is held for writing.
        unsafe { addr_of_mut!((*sk).sk_user_data).write_volatile(core::ptr::null_mut()) };
        core::ptr::from_ref(old).cast_mut()
    };
    // SAFETY: `old` came from `KBox::into_raw` in `install`; it was unlinked under the write lock,
    // which waited for every upcall that could still see it.
    drop(unsafe { KBox::from_raw(old) });
}

/// Gives a socket just accepted from `listener` its original upcalls back.
///
/// TCP creates the socket of a new connection as a copy of the listener, including its
/// upcalls; the `Hook` pointer is not copied (`SK_USER_DATA_NOCOPY`), so our upcalls run the
/// kernel's defaults on it until this puts the listener's originals in their place. Someone
/// else may have claimed the new socket already (see `UserData`): their `sk_user_data` is left
/// alone, and [`install`] refuses the socket.
///
/// # Safety
///
/// `listener` must be a valid socket owned by a `TcpListener`, and `child` a valid socket
/// returned by `kernel_accept` on it, not yet given to anyone.
pub(crate) unsafe fn fix_accepted(listener: *mut bindings::sock, child: *mut bindings::sock) {
    let originals = {
        // SAFETY: `listener` is valid.
        let _guard = unsafe { ReadGuard::new(listener) };
        // SAFETY: The lock is held; `listener` is ours.
        match unsafe { hook(listener) } {
            Some(h) => h.orig,
            // SAFETY: The lock is held. Without a hook, the listener's upcalls are the originals.
            None => unsafe { Upcalls::read(listener) },
        }
    };
    // The two locks are of the same lockdep class; they are taken one after the other.
    // SAFETY: `child` is valid.
    let _guard = unsafe { WriteGuard::new(child) };
    // SAFETY: The lock is held.
    let mut upcalls = unsafe { Upcalls::read(child) };
    upcalls.replace_trampolines(&originals);
    // SAFETY: The lock is held for writing.
    unsafe { upcalls.write(child) };
}

/// Runs the installed handler's `data_ready` now, from process context.
///
/// # Safety
///
/// `sk` must be a valid TCP socket owned by a `TcpSocket` (never listening).
pub(crate) unsafe fn kick_data_ready(sk: *mut bindings::sock) {
    let run = |locked: &LockedSock| {
        // SAFETY: `sk` is valid.
        let _guard = unsafe { ReadGuard::new(sk) };
        // SAFETY: The socket lock is held (`with_locked`); `sk` is ours.
        if let Some(Handler::Stream(h)) = unsafe { hook(sk) }.map(|h| &h.handler) {
            h.data_ready(locked);
        }
    };
    // SAFETY: `sk` is a valid, non-listening socket owned by a `TcpSocket` (caller guarantees),
    // and this runs in process context, as the handler's `kick_data_ready` callers do.
    unsafe { with_locked(sk, run) }
}

/// Runs `f` on `sk` locked by its owner (`lock_sock`), with bottom halves disabled as in a
/// `data_ready` upcall.
///
/// # Safety
///
/// `sk` must be a valid TCP socket owned by a `TcpSocket` (never listening), and the caller in
/// process context.
pub(crate) unsafe fn with_locked<R>(
    sk: *mut bindings::sock,
    f: impl FnOnce(&LockedSock) -> R,
) -> R {
    // SAFETY: `sk` is valid; process context (caller guarantees), so taking the lock may sleep.
    unsafe { bindings::lock_sock(sk) };
    // SAFETY: Paired with `local_bh_enable` below.
    unsafe { bindings::local_bh_disable() };
    // SAFETY: We own the socket lock until `release_sock` below; the socket does not listen.
    let r = f(unsafe { LockedSock::from_raw(sk) });
    // SAFETY: Disabled above.
    unsafe { bindings::local_bh_enable() };
    // SAFETY: Locked above. Releasing processes the backlog, which may call `data_ready`.
    unsafe { bindings::release_sock(sk) };
    r
}

/// One of the four upcalls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Event {
    DataReady,
    WriteSpace,
    StateChange,
    ErrorReport,
}

impl Upcalls {
    fn get(&self, event: Event) -> Upcall {
        match event {
            Event::DataReady => self.data_ready,
            Event::WriteSpace => self.write_space,
            Event::StateChange => self.state_change,
            Event::ErrorReport => self.error_report,
        }
    }
}

/// The body of our upcalls: runs `f` with the installed handler under the read side of
/// `sk_callback_lock`, and the socket's original upcall for `event` after it (for
/// [`Event::WriteSpace`], before it).
///
/// Without a hook of ours, runs the kernel's default upcall for `event` instead. That happens
/// when the upcall raced with [`remove`] (the restored original is the default: our sockets
/// start with the kernel's upcalls), on a socket TCP copied from a listener before
/// [`fix_accepted`], and when someone else claimed the socket (a sockmap, whose psock saved
/// our upcalls and calls them): foreign `sk_user_data` is never touched, and the socket's
/// current upcall is not called either (it may be the claimer's, which called us).
///
/// # Safety
///
/// Only for our upcalls, with the socket TCP passes them: valid during the call, and one of our
/// sockets or a copy TCP made of one (whose `sk_user_data` is then null or foreign).
unsafe fn run_upcall(sk: *mut bindings::sock, event: Event, f: impl FnOnce(&Handler)) {
    // SAFETY: TCP passes a valid socket that stays valid during the call.
    let guard = unsafe { ReadGuard::new(sk) };
    // SAFETY: The lock is held, and a word tagged as ours in `sk_user_data` is a `Hook` (see
    // `UserData`).
    let Some(hook) = (unsafe { hook(sk) }) else {
        drop(guard);
        // SAFETY: `sk` is a valid TCP socket.
        unsafe { default_upcall(event, sk) };
        return;
    };
    let orig = hook.orig.get(event);
    // The original `sk_write_space` clears `SOCK_NOSPACE`: it must run before the handler
    // lets a sender retry, or a retry that fails again would set the flag just to see it
    // cleared, and no further `sk_write_space` would come.
    let orig_first = event == Event::WriteSpace;
    if orig_first {
        // SAFETY: `orig` is the socket's original upcall for `event`.
        unsafe { chain(orig, event, sk) };
    }
    f(&hook.handler);
    drop(guard);
    if !orig_first {
        // SAFETY: `orig` is the socket's original upcall for `event`.
        unsafe { chain(orig, event, sk) };
    }
}

/// Calls `orig`, the original upcall of `sk` for `event`; if that is ours (see [`install`]),
/// the kernel's default instead, which is what ours does without a hook.
///
/// # Safety
///
/// `sk` must be a valid TCP socket and `orig` its upcall for `event` from before our hook.
unsafe fn chain(orig: Upcall, event: Event, sk: *mut bindings::sock) {
    if addr(orig) == addr(Upcalls::TRAMPOLINES.get(event)) {
        // SAFETY: `sk` is a valid TCP socket.
        unsafe { default_upcall(event, sk) };
    } else if let Some(orig) = orig {
        // SAFETY: The caller guarantees this is the socket's upcall.
        unsafe { orig(sk) };
    }
}

/// Runs what the upcall for `event` of a TCP socket does by default (`sock_init_data`,
/// `tcp_init_sock`): wakes up the socket's waiters.
///
/// # Safety
///
/// `sk` must be a valid TCP socket, in a context where TCP calls that upcall.
unsafe fn default_upcall(event: Event, sk: *mut bindings::sock) {
    // SAFETY: The caller guarantees a valid TCP socket and an upcall context.
    unsafe {
        match event {
            Event::DataReady => bindings::ksock_default_data_ready(sk),
            Event::WriteSpace => bindings::ksock_default_write_space(sk),
            Event::StateChange => bindings::ksock_default_state_change(sk),
            Event::ErrorReport => bindings::ksock_default_error_report(sk),
        }
    }
}

/// Our `sk_data_ready`.
///
/// # Safety
///
/// Called by TCP with a valid socket, as the contract for `sk_data_ready` says.
unsafe extern "C" fn data_ready_upcall(sk: *mut bindings::sock) {
    let f = |h: &Handler| match h {
        // SAFETY: TCP calls `sk_data_ready` of a non-listening socket with the socket lock held,
        // and a `Stream` hook is only installed on sockets that never listen.
        Handler::Stream(h) => h.data_ready(unsafe { LockedSock::from_raw(sk) }),
        // SAFETY: `sk` is valid during the call.
        Handler::Listener(h) => h.incoming(unsafe { Sock::from_raw(sk) }),
    };
    // SAFETY: This is our upcall, called by TCP.
    unsafe { run_upcall(sk, Event::DataReady, f) };
}

/// Our `sk_write_space`.
///
/// # Safety
///
/// Called by TCP with a valid socket, as the contract for `sk_write_space` says.
unsafe extern "C" fn write_space_upcall(sk: *mut bindings::sock) {
    let f = |h: &Handler| {
        // SAFETY: `sk` is valid during the call.
        let s = unsafe { Sock::from_raw(sk) };
        if let Handler::Stream(h) = h {
            if s.is_writeable() {
                h.write_space(s);
            }
        }
    };
    // SAFETY: This is our upcall, called by TCP.
    unsafe { run_upcall(sk, Event::WriteSpace, f) };
}

/// Our `sk_state_change`.
///
/// # Safety
///
/// Called by TCP with a valid socket, as the contract for `sk_state_change` says.
unsafe extern "C" fn state_change_upcall(sk: *mut bindings::sock) {
    let f = |h: &Handler| {
        // SAFETY: `sk` is valid during the call.
        let s = unsafe { Sock::from_raw(sk) };
        match h {
            Handler::Stream(h) => h.state_change(s, s.state()),
            Handler::Listener(h) => h.state_change(s, s.state()),
        }
    };
    // SAFETY: This is our upcall, called by TCP.
    unsafe { run_upcall(sk, Event::StateChange, f) };
}

/// Our `sk_error_report`.
///
/// # Safety
///
/// Called by TCP with a valid socket, as the contract for `sk_error_report` says.
unsafe extern "C" fn error_report_upcall(sk: *mut bindings::sock) {
    let f = |h: &Handler| {
        // SAFETY: `sk` is valid during the call.
        let s = unsafe { Sock::from_raw(sk) };
        match h {
            Handler::Stream(h) => h.error_report(s, s.error()),
            Handler::Listener(h) => h.error_report(s, s.error()),
        }
    };
    // SAFETY: This is our upcall, called by TCP.
    unsafe { run_upcall(sk, Event::ErrorReport, f) };
}

/// Test support, not for drivers: someone else's data in a socket's `sk_user_data`, put there as
/// the kernel's BPF maps do, to show that this module leaves it alone.
#[doc(hidden)]
pub mod testing {
    use super::{
        addr_of, addr_of_mut, bindings, ReadGuard, Sock, Upcalls, UserData, WriteGuard, EBUSY,
        PTRMASK,
    };
    use crate::{error::code::ENOENT, prelude::*};

    /// The foreign data. All zeroes: to the sockmap code, whose tag [`Foreign::Psock`] imitates,
    /// a psock being freed, which it does not take (`sk_psock_get`); and a `Hook` read from it
    /// by mistake would crash at once.
    static FOREIGN: [usize; 32] = [0; 32];

    /// How the foreign data is tagged.
    #[derive(Clone, Copy, Debug)]
    pub enum Foreign {
        /// As a sockmap's or sockhash's psock (`SK_USER_DATA_NOCOPY | SK_USER_DATA_PSOCK`).
        Psock,
        /// As a reuseport array's entry (`SK_USER_DATA_NOCOPY | SK_USER_DATA_BPF`).
        ReuseportArray,
        /// Untagged, as most kernel users store it.
        Plain,
    }

    impl Foreign {
        fn word(self) -> usize {
            let tag = match self {
                Foreign::Psock => bindings::SK_USER_DATA_NOCOPY | bindings::SK_USER_DATA_PSOCK,
                Foreign::ReuseportArray => {
                    bindings::SK_USER_DATA_NOCOPY | bindings::SK_USER_DATA_BPF
                }
                Foreign::Plain => 0,
            };
            // CAST: The flag values are small; an address fits in a `usize`.
            FOREIGN.as_ptr() as usize | tag as usize
        }
    }

    /// Claims `sk` with foreign data tagged as `kind`, as a sockmap does: fails with `EBUSY` if
    /// its `sk_user_data` is set. With `our_upcalls`, the socket gets this module's upcalls
    /// without a hook, as it has when TCP copied it from a listener with a handler and it is
    /// claimed before `accept` (and when a sockmap saved those upcalls and calls them).
    pub fn claim(sk: &Sock, kind: Foreign, our_upcalls: bool) -> Result {
        let sk = sk.as_raw();
        // SAFETY: `sk` is valid while borrowed.
        let _guard = unsafe { WriteGuard::new(sk) };
        // SAFETY: The lock is held.
        if !matches!(unsafe { UserData::of(sk) }, UserData::Empty) {
            return Err(EBUSY);
        }
        if our_upcalls {
            // SAFETY: The lock is held for writing. Without a hook, our upcalls run the
            // kernel's defaults.
            unsafe { Upcalls::TRAMPOLINES.write(sk) };
        }
        // CAST: `sk_user_data` is a pointer with tag bits.
        let word = kind.word() as *mut _;
        // SAFETY: The lock is held for writing; the word is never read as ours (see
        // `UserData`).
        unsafe { addr_of_mut!((*sk).sk_user_data).write_volatile(word) };
        Ok(())
    }

    /// Whether `sk` carries the foreign data of [`claim`], with its tag intact.
    pub fn is_claimed(sk: &Sock, kind: Foreign) -> bool {
        let sk = sk.as_raw();
        // SAFETY: `sk` is valid while borrowed.
        let _guard = unsafe { ReadGuard::new(sk) };
        // SAFETY: The lock is held.
        let word = unsafe { addr_of!((*sk).sk_user_data).read_volatile() };
        // CAST: A pointer with tag bits, compared as an integer.
        word as usize == kind.word()
    }

    /// Removes the foreign data of [`claim`], as its owner would; fails with `ENOENT` if `sk`
    /// does not carry it. Our upcalls stay (and keep running the kernel's defaults).
    pub fn release(sk: &Sock) -> Result {
        let sk = sk.as_raw();
        // SAFETY: `sk` is valid while borrowed.
        let _guard = unsafe { WriteGuard::new(sk) };
        // SAFETY: The lock is held.
        let word = unsafe { addr_of!((*sk).sk_user_data).read_volatile() };
        // CAST: A pointer with tag bits, and an address, compared as integers.
        if word as usize & PTRMASK != FOREIGN.as_ptr() as usize {
            return Err(ENOENT);
        }
        // SAFETY: The lock is held for writing.
        unsafe { addr_of_mut!((*sk).sk_user_data).write_volatile(core::ptr::null_mut()) };
        Ok(())
    }
}
