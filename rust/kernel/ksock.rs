// SPDX-License-Identifier: GPL-2.0

//! In-kernel TCP sockets.
//!
//! A safe interface to the kernel's own TCP sockets for in-kernel protocols (rsiw runs MPA, DDP
//! and RDMAP over it). It covers what the C siw driver does with `struct socket`:
//!
//! - [`TcpSocket`] owns a socket created in a namespace with `sock_create_kern` (IPv4 or IPv6)
//!   or returned by [`TcpListener::accept`]; dropping it releases the socket (a connection's
//!   socket then holds its namespace until TCP has finished closing it). It binds, connects
//!   (blocking with a timeout, or non-blocking), sends byte slices ([`IoSlice`]) with
//!   `kernel_sendmsg`, sends page fragments without copying them ([`PageSlice`],
//!   `MSG_SPLICE_PAGES`), receives into a byte slice, and reports the MSS.
//! - [`TcpListener`] is a socket after `listen`; it accepts without blocking.
//! - [`SocketEvents`] and [`ListenerEvents`] are the socket upcalls (`sk_data_ready`,
//!   `sk_write_space`, `sk_state_change`, `sk_error_report`). A handler is installed with
//!   [`TcpSocket::set_callbacks`] and removed with [`TcpSocket::clear_callbacks`] (or when the
//!   socket is dropped).
//! - Inside [`SocketEvents::data_ready`], [`LockedSock::read_sock`] hands the queued bytes to an
//!   actor as [`SkbData`] views (`tcp_read_sock`): the actor copies ranges out or walks them as
//!   contiguous `&[u8]` pieces, and says how much it consumed.
//!
//! # Contexts and locking
//!
//! Upcalls run in softirq context, or in process context with bottom halves enabled when TCP
//! processes a socket's backlog in `release_sock`. They hold the read side of
//! `sk->sk_callback_lock`; for a connected socket TCP also holds the socket lock. A handler must
//! therefore not sleep, must use bottom-half-safe locking for data it shares with process
//! context, and must not call the methods of [`TcpSocket`]/[`TcpListener`] (they lock the socket
//! or `sk_callback_lock` and may sleep): it records what happened and defers the work, as the C
//! siw queues work items. The lock order is: socket lock, then `sk_callback_lock`.
//!
//! Installing, replacing and removing a handler takes `sk_callback_lock` for writing with bottom
//! halves disabled, so it waits for running upcalls. The handler is held as an [`Arc`] that is
//! dropped only after it has been unlinked under that lock: no upcall can see a handler after it
//! is gone. The upcall functions themselves are part of the kernel image, so a late upcall that
//! raced with the removal finds no handler and simply passes the event on to the socket's
//! original function.
//!
//! The handler's record lives in the socket's `sk_user_data`, tagged as ours. A socket that
//! someone else claimed through that field first (a BPF sockmap or sockhash does, for instance
//! from a sockops program on every new connection) is refused: `set_callbacks` fails with
//! `EBUSY`, and the caller should drop the socket. Foreign `sk_user_data` is never read,
//! replaced or freed; our upcall functions, when they run without a handler of ours (a sockmap
//! keeps calling the upcalls it found), do what the kernel's default upcalls do.
//!
//! A handler often owns the socket it is installed on (a connection endpoint owns its socket and
//! the socket's upcalls must reach the endpoint). That is a reference cycle: it is broken by
//! [`TcpSocket::clear_callbacks`], which the owner must call before it lets go of the handler.
//!
//! C headers: [`include/linux/net.h`](srctree/include/linux/net.h),
//! [`include/net/sock.h`](srctree/include/net/sock.h),
//! [`include/net/tcp.h`](srctree/include/net/tcp.h),
//! [`include/linux/skbuff.h`](srctree/include/linux/skbuff.h).
//!
//! [`Arc`]: crate::sync::Arc

mod addr;
mod events;
mod skb;
mod socket;
mod zerocopy;

pub use addr::{from_sockaddr_storage, to_sockaddr_storage, Family};
pub use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
#[doc(hidden)]
pub use events::testing;
pub use events::{ListenerEvents, LockedSock, Sock, SocketEvents};
pub use skb::{Consumed, SkbData};
pub use socket::{
    ConnectStatus, IoSlice, PageSlice, RecvFlags, SendFlags, Shutdown, TcpListener, TcpSocket,
    TcpState,
};
pub use zerocopy::{PageBatch, SendAs, SendProgress, ZcNotify, ZcRegistration, ZcToken};

/// The networking error codes, in [`crate::errno`].
pub use crate::errno;
