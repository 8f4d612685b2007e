// SPDX-License-Identifier: GPL-2.0

//! The provider side of the iWARP connection manager (`iw_cm`).
//!
//! An iWARP provider sets up connections itself (for rsiw: TCP plus the MPA handshake) and
//! reports their progress to the RDMA core's `iw_cm`, which turns it into RDMA CM events for the
//! ULP. The `iw_cm` calls the provider through five operations of `ib_device_ops` (the
//! [`IwCm`] trait) and the provider calls back through `cm_id->event_handler` with a
//! `struct iw_cm_event` (the upcall methods of [`ListenId`], [`Connecting`], [`Accepting`] and
//! [`Connected`]).
//!
//! # The contract, and how the types enforce it
//!
//! The `iw_cm` tracks a state per `iw_cm_id` and hits `BUG()` when the provider sends an event
//! the state does not allow (`drivers/infiniband/core/iwcm.c`). Each allowed sequence is
//! therefore a chain of owned tokens, every one holding a reference on the id; an upcall consumes
//! its token and returns the next one:
//!
//! - **Listener.** [`IwCm::create_listen`] gets a [`ListenId`]. Until [`IwCm::destroy_listen`]
//!   the provider may send any number of connect requests ([`ListenId::connect_request`]). There
//!   is no way to send one with a non-zero status (a `BUG()` in the `iw_cm`).
//! - **Active side.** [`IwCm::connect`] gets a [`Connecting`] token. If it fails it must return
//!   that token inside [`Failed`], which proves that no event was sent (none may follow a failed
//!   downcall). Otherwise exactly one connect reply follows: [`Connecting::connected`] (which
//!   yields a [`Connected`]) or [`Connecting::failed`] (the end).
//! - **Passive side.** [`IwCm::accept`] gets an [`Accepting`] token, with the same rule for
//!   failure. Otherwise exactly one [`Accepting::established`] follows, which yields a
//!   [`Connected`]. It must be sent even if the connection broke in the meantime (then it is
//!   directly followed by the close), since the `iw_cm` only accepts a close once established.
//!   [`IwCm::reject`] generates no events.
//! - **Connected.** At most one [`Connected::disconnect`] (sent once, later calls do nothing),
//!   then exactly one [`Connected::close`].
//!
//! Until the connect reply or the established event arrives, `iw_cm_disconnect` and
//! `iw_destroy_cm_id` wait for it, so a lost event would hang the ULP. Dropping a token therefore
//! sends the event that ends the sequence with `ECONNABORTED`: [`Connecting`] a failed connect
//! reply, [`Accepting`] established then close, [`Connected`] close.
//!
//! The sequences also stay within the work entries the `iw_cm` preallocates per id (four for an
//! active, three for a passive id), so only the connect request (when more than `backlog`
//! requests are queued) and the events that carry private data (when the `GFP_ATOMIC` copy
//! fails) can fail to be delivered, with `ENOMEM`. A [`Failed`] then hands the token or
//! endpoint back: the caller may retry or give up.
//!
//! Before sending [`Connecting::connected`] or [`Accepting::established`] the provider must have
//! moved the QP to RTS: the ULP may post work requests as soon as it sees the event. Before
//! [`Connected::close`] the QP should be in the error state; the `iw_cm` drops its QP reference
//! (`iw_rem_ref`) when it processes the close or a failed connect reply.
//! [`Connected::disconnect`] reports that the peer started an orderly close, so the `iw_cm` does
//! not move the QP to closing itself when the ULP disconnects.
//!
//! # Contexts
//!
//! The operations are called in process context and may sleep, but some run on the `iw_cm`'s own
//! ordered workqueue (a ULP accepting or rejecting from its connect-request handler, or the
//! `iw_cm` rejecting a request it cannot take). They must therefore never wait for the `iw_cm`
//! to process an event. [`IwCm::reject`] is also called from `iw_destroy_cm_id`, without private
//! data.
//!
//! The upcalls may be made from any context, including atomic context (softirq, spinlocks held):
//! the `iw_cm` takes an IRQ-safe spinlock, copies the event and its private data (with
//! `GFP_ATOMIC`) and queues it to its ordered workqueue, where the ULP's handler runs later.
//! Events are delivered in the order they were made, so a connection's events must come from one
//! serialised context, which owning the token guarantees.
//!
//! # Parameters
//!
//! - IRD and ORD are given from the provider's side: `ird` is the inbound RDMA Read depth it
//!   grants, `ord` the outbound one. A connect request carries them swapped in
//!   `struct iw_cm_event` (its `ird` is our `ord`), which [`ListenId::connect_request`] does; the
//!   reply and the established event carry them as they are.
//! - Private data is at most 255 bytes ([`PrivateData`]; `private_data_len` is a `u8`). Only the
//!   connect request and the connect reply carry it, since the `iw_cm` copies no other.
//! - Addresses are the mapped ones (`m_local_addr`, `m_remote_addr`), which the provider must use.
//!
//! # `provider_data`
//!
//! `cm_id->provider_data` is typed and owned: on a listening id it holds the provider's
//! [`IwCm::Listener`] from [`IwCm::create_listen`] until it is handed back to
//! [`IwCm::destroy_listen`]. The endpoint given to [`ListenId::connect_request`] is copied by the
//! `iw_cm` into the new id it creates for the request, and handed back by value, exactly once, to
//! [`IwCm::accept`] or [`IwCm::reject`]. Two `iw_cm` paths drop a queued connect request without
//! calling either (the listener is being destroyed, or the new id cannot be allocated); the
//! endpoint is then never returned. A provider should keep its own reference (e.g. use an
//! [`Arc`]) and time out endpoints that see no accept or reject, as the C siw does.
//!
//! # References
//!
//! [`CmId`] is reference counted through the id's `add_ref`/`rem_ref`; [`ARef<CmId>`] is an
//! owned reference and dropping the last one may free the id (from any context).
//! `iw_destroy_cm_id` does not wait for the provider's references, but it makes the `iw_cm` drop
//! all later events of the id.
//!
//! C header: [`include/rdma/iw_cm.h`](srctree/include/rdma/iw_cm.h).
//!
//! [`Arc`]: crate::sync::Arc

use super::device::{Device, Driver};
use crate::{
    bindings,
    error::{from_result, to_result, Result},
    ffi::{c_int, c_void},
    ksock::{errno::econnaborted, from_sockaddr_storage, to_sockaddr_storage, SocketAddr},
    prelude::*,
    types::{ARef, AlwaysRefCounted, ForeignOwnable, Opaque},
};
use core::{
    marker::PhantomData,
    mem::ManuallyDrop,
    ptr::{addr_of, addr_of_mut, NonNull},
    sync::atomic::{AtomicPtr, Ordering},
};

/// The iWARP connection management operations of a provider.
///
/// See the [module documentation](self) for the order of events the types enforce and the
/// contexts of the calls.
#[vtable]
pub trait IwCm: Sized + 'static {
    /// The driver whose devices these operations serve.
    type Driver: Driver;

    /// A passive connection endpoint, handed through the `iw_cm` from a connect request to
    /// [`IwCm::accept`] or [`IwCm::reject`]. Typically an [`Arc`](crate::sync::Arc).
    type Endpoint: ForeignOwnable + Send;

    /// The state of a listening id, from [`IwCm::create_listen`] to [`IwCm::destroy_listen`].
    type Listener: ForeignOwnable + Send;

    /// Starts an active connection (`iw_connect`) from `info.local` to `info.remote` for the QP
    /// numbered `param.qpn`, with `param`'s private data.
    ///
    /// On success the result is reported later through `conn`. On failure `conn` must be
    /// returned in the [`Failed`]: no event may be sent then.
    fn connect(
        dev: &Device<Self::Driver>,
        conn: Connecting<Self>,
        info: &ConnectInfo,
        param: &ConnParam<'_>,
    ) -> Result<(), Failed<Connecting<Self>>>;

    /// Accepts the connection request that delivered `endpoint` (`iw_accept`), for the QP
    /// numbered `param.qpn`, answering with `param`'s private data.
    ///
    /// On success the established event follows through `conn`. On failure `conn` must be
    /// returned in the [`Failed`]: no event may be sent then.
    fn accept(
        dev: &Device<Self::Driver>,
        conn: Accepting<Self>,
        endpoint: Self::Endpoint,
        param: &ConnParam<'_>,
    ) -> Result<(), Failed<Accepting<Self>>>;

    /// Rejects the connection request that delivered `endpoint` (`iw_reject`), sending
    /// `private_data` to the peer where the protocol allows. Generates no event.
    fn reject(
        dev: &Device<Self::Driver>,
        endpoint: Self::Endpoint,
        private_data: PrivateData<'_>,
    ) -> Result;

    /// Starts listening on `info.local` (`iw_create_listen`) with room for `backlog` pending
    /// connection requests; requests are reported through `listener`.
    ///
    /// The returned state is stored in the id until [`IwCm::destroy_listen`].
    fn create_listen(
        dev: &Device<Self::Driver>,
        listener: ListenId<Self>,
        info: &ListenInfo,
        backlog: u32,
    ) -> Result<Self::Listener>;

    /// Stops listening (`iw_destroy_listen`); `listener` is what [`IwCm::create_listen`]
    /// returned.
    ///
    /// The `iw_cm` drops connect requests sent after this is called.
    fn destroy_listen(dev: &Device<Self::Driver>, listener: Self::Listener) -> Result;
}

/// Private data of a connect request or reply: at most [`PrivateData::MAX_LEN`] bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrivateData<'a>(&'a [u8]);

impl<'a> PrivateData<'a> {
    /// The largest amount of private data an event can carry (its length is a `u8`).
    // CAST: Widening.
    pub const MAX_LEN: usize = u8::MAX as usize;

    /// No private data.
    pub const EMPTY: PrivateData<'static> = PrivateData(&[]);

    /// Wraps `data`; fails with `EINVAL` if it is longer than [`PrivateData::MAX_LEN`].
    pub fn new(data: &'a [u8]) -> Result<Self> {
        if data.len() > Self::MAX_LEN {
            return Err(EINVAL);
        }
        Ok(Self(data))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The length as the `u8` the C structures use.
    fn len_u8(&self) -> u8 {
        // `new` guarantees that the length fits.
        u8::try_from(self.0.len()).unwrap_or(u8::MAX)
    }
}

/// Connection parameters of [`IwCm::connect`] and [`IwCm::accept`] (`struct iw_cm_conn_param`).
#[derive(Clone, Copy, Debug)]
pub struct ConnParam<'a> {
    /// Private data to send to the peer (as given by the ULP, up to 65535 bytes: the provider
    /// checks it against its protocol's limit).
    pub private_data: &'a [u8],
    /// Requested inbound RDMA Read depth.
    pub ird: u32,
    /// Requested outbound RDMA Read depth.
    pub ord: u32,
    /// Number of the QP to connect.
    pub qpn: u32,
}

/// What the `iw_cm` set on an id before [`IwCm::connect`] (a snapshot).
#[derive(Clone, Copy, Debug)]
pub struct ConnectInfo {
    /// Local (mapped) address; the port may be 0 (any).
    pub local: SocketAddr,
    /// Remote (mapped) address.
    pub remote: SocketAddr,
    /// Type of service requested by the ULP, if any.
    pub tos: Option<u8>,
    /// Whether an IPv6 socket must not accept IPv4 (`IPV6_V6ONLY`).
    pub afonly: bool,
}

/// What the `iw_cm` set on an id before [`IwCm::create_listen`] (a snapshot).
#[derive(Clone, Copy, Debug)]
pub struct ListenInfo {
    /// Local (mapped) address to listen on; the IP address may be the wildcard.
    pub local: SocketAddr,
    /// Type of service requested by the ULP, if any.
    pub tos: Option<u8>,
    /// Whether an IPv6 socket must not accept IPv4 (`IPV6_V6ONLY`).
    pub afonly: bool,
}

/// The parameters of a connect request, or of a successful connect reply.
#[derive(Clone, Copy, Debug)]
pub struct ConnInfo<'a> {
    /// The peer's private data (without any of the provider's own protocol fields).
    pub private_data: PrivateData<'a>,
    /// Inbound RDMA Read depth for this side (for a request: the peer's ORD, capped).
    pub ird: u8,
    /// Outbound RDMA Read depth for this side (for a request: the peer's IRD, capped).
    pub ord: u8,
    /// Local (mapped) address of the connection.
    pub local: SocketAddr,
    /// Remote (mapped) address of the connection.
    pub remote: SocketAddr,
}

/// An operation or upcall that failed, with what it was given back.
///
/// Operations return the token they were given, which proves that no event was sent. Upcalls
/// that the `iw_cm` could not take return their token (or endpoint), so the caller may retry or
/// end the sequence.
pub struct Failed<T> {
    /// The error.
    pub error: Error,
    /// The token or endpoint, unused.
    pub back: T,
}

impl<T> Failed<T> {
    /// Bundles `error` with `back`.
    pub fn new(error: Error, back: T) -> Self {
        Self { error, back }
    }
}

impl<T> From<Failed<T>> for Error {
    fn from(f: Failed<T>) -> Error {
        f.error
    }
}

impl<T> core::fmt::Debug for Failed<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Failed")
            .field("error", &self.error)
            .finish()
    }
}

/// The identity of an `iw_cm_id`: its address, compared and never dereferenced.
///
/// The RDMA core names a connection by its `rdma_cm_id` (`rdma resource show cm_id`); the
/// provider knows it by the `iw_cm_id` underneath. A key is only meaningful while the provider
/// holds the id it took the key from: an id freed later may share its address with a new one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CmIdKey(usize);

impl CmIdKey {
    pub(super) fn of(id: *const bindings::iw_cm_id) -> Self {
        // CAST: Only the address is kept, as an identity.
        Self(id as usize)
    }

    /// A key that no id has (the null address).
    pub const NONE: CmIdKey = CmIdKey(0);

    /// The key as an integer, for storing it atomically and comparing it with a stored one.
    pub fn as_raw(self) -> usize {
        self.0
    }
}

/// An `iw_cm` connection identifier (`struct iw_cm_id`) of a device served by `C`.
///
/// Only references exist: `&CmId` for the duration of a call, or an owned [`ARef<CmId>`].
///
/// # Invariants
///
/// The id was created by `iw_create_cm_id` for a device whose iWARP operations are `C`'s, so its
/// `event_handler`, `add_ref` and `rem_ref` are set (and never change).
#[repr(transparent)]
pub struct CmId<C: IwCm>(Opaque<bindings::iw_cm_id>, PhantomData<C>);

// SAFETY: The `iw_cm` serialises its id state with an IRQ-safe spinlock; the reference count
// and the event handler may be used from any thread and context.
unsafe impl<C: IwCm> Send for CmId<C> {}
// SAFETY: See above; all methods taking `&self` are thread safe.
unsafe impl<C: IwCm> Sync for CmId<C> {}

// SAFETY: `add_ref`/`rem_ref` manage the id's reference count; the `iw_cm` frees the id when it
// drops to zero and not before.
unsafe impl<C: IwCm> AlwaysRefCounted for CmId<C> {
    fn inc_ref(&self) {
        let id = self.0.get();
        // SAFETY: By the type invariant `add_ref` is set and constant. `self` is referenced, so
        // the count is non-zero.
        unsafe {
            if let Some(add_ref) = (*id).add_ref {
                add_ref(id);
            }
        }
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        let id = obj.cast::<bindings::iw_cm_id>().as_ptr();
        // SAFETY: The caller owns a reference, which this drops; `rem_ref` is set (type
        // invariant). The id may be freed here; it is not used afterwards.
        unsafe {
            if let Some(rem_ref) = (*id).rem_ref {
                rem_ref(id);
            }
        }
    }
}

impl<C: IwCm> CmId<C> {
    /// Returns the id at `id`, checking the function pointers the invariant needs.
    ///
    /// # Safety
    ///
    /// `id` must be an id created by `iw_create_cm_id` on a device with `C`'s operations,
    /// valid for `'a`.
    unsafe fn from_raw<'a>(id: *mut bindings::iw_cm_id) -> Result<&'a Self> {
        // SAFETY: `id` is valid; these fields are set at creation and never written again.
        let complete = unsafe {
            (*id).event_handler.is_some() && (*id).add_ref.is_some() && (*id).rem_ref.is_some()
        };
        if !complete {
            return Err(EINVAL);
        }
        // INVARIANT: Checked above; the caller guarantees where the id comes from.
        // SAFETY: `CmId` is a transparent wrapper of the C struct.
        Ok(unsafe { &*id.cast::<Self>() })
    }

    fn as_raw(&self) -> *mut bindings::iw_cm_id {
        self.0.get()
    }

    /// The id's identity, for finding what the provider keeps for an id the RDMA core names
    /// (see [`CmIdKey`]).
    pub fn key(&self) -> CmIdKey {
        CmIdKey::of(self.as_raw())
    }

    /// The `provider_data` field, accessed atomically.
    fn provider_data(&self) -> &AtomicPtr<c_void> {
        // SAFETY: The field is a properly aligned pointer that lives as long as `self`. The
        // `iw_cm` writes it only while creating an id for a connect request, before the id is
        // shared, and never reads it after; here it is only accessed atomically.
        unsafe { AtomicPtr::from_ptr(addr_of_mut!((*self.as_raw()).provider_data)) }
    }

    /// Sends `ev` to the `iw_cm`.
    ///
    /// Pointers in `ev` need to be valid only for this call: the `iw_cm` copies the event, and
    /// the private data of connect requests and replies.
    fn deliver(&self, ev: &mut bindings::iw_cm_event) -> Result {
        let id = self.as_raw();
        // SAFETY: `event_handler` is set and constant (type invariant).
        let Some(handler) = (unsafe { (*id).event_handler }) else {
            return Err(EINVAL);
        };
        // SAFETY: `id` is alive (we are referenced) and `ev` is valid for the call. The handler
        // may be called in any context.
        to_result(unsafe { handler(id, ev) })
    }

    /// Sends an event of kind `kind` with `status` and no other data.
    fn send(&self, kind: bindings::iw_cm_event_type, status: Result) -> Result {
        self.deliver(&mut event(kind, status))
    }

    /// The mapped local address, and the mapped remote one if it is set.
    ///
    /// # Safety
    ///
    /// Only while the `iw_cm` does not write the addresses: within an operation, before the
    /// provider sends an event.
    unsafe fn addresses(&self) -> (Result<SocketAddr>, Result<SocketAddr>) {
        let id = self.as_raw();
        // SAFETY: `id` is valid and, per the caller, not written concurrently.
        let (local, remote) = unsafe {
            (
                addr_of!((*id).m_local_addr).read(),
                addr_of!((*id).m_remote_addr).read(),
            )
        };
        (
            from_sockaddr_storage(&local),
            from_sockaddr_storage(&remote),
        )
    }

    /// The type of service the ULP set, if any, and the IPv6-only flag.
    ///
    /// # Safety
    ///
    /// As for [`Self::addresses`].
    unsafe fn tos_afonly(&self) -> (Option<u8>, bool) {
        let id = self.as_raw();
        // SAFETY: `id` is valid and, per the caller, not written concurrently.
        unsafe {
            let tos = bindings::iw_cm_id::tos_set_raw(id).then(|| addr_of!((*id).tos).read());
            (tos, bindings::iw_cm_id::afonly_raw(id))
        }
    }
}

/// A new event of kind `kind` with `status`, all other fields zero.
fn event(kind: bindings::iw_cm_event_type, status: Result) -> bindings::iw_cm_event {
    bindings::iw_cm_event {
        event: kind,
        status: status.map_or_else(|e| e.to_errno(), |()| 0),
        ..Default::default()
    }
}

/// Puts `pd` (valid for the event's delivery) into `ev`.
fn set_private_data(ev: &mut bindings::iw_cm_event, pd: &PrivateData<'_>) {
    if !pd.0.is_empty() {
        // The `iw_cm` only reads through this pointer.
        ev.private_data = pd.0.as_ptr().cast_mut().cast();
        ev.private_data_len = pd.len_u8();
    }
}

/// Puts the connection addresses into `ev`.
fn set_addresses(ev: &mut bindings::iw_cm_event, info: &ConnInfo<'_>) {
    ev.local_addr = to_sockaddr_storage(&info.local);
    ev.remote_addr = to_sockaddr_storage(&info.remote);
}

/// The tokens of a connection: each holds a reference on its id and ends the sequence on drop.
trait Token<C: IwCm>: Sized {
    /// The id.
    fn cm_id(&self) -> &CmId<C>;

    /// Takes the id reference without running the token's `Drop` (so without its events).
    fn into_id(self) -> ARef<CmId<C>>;
}

macro_rules! impl_token {
    ($($t:ident),*) => {$(
        impl<C: IwCm> $t<C> {
            /// The id.
            pub fn id(&self) -> &CmId<C> {
                &self.id
            }
        }

        impl<C: IwCm> Token<C> for $t<C> {
            fn cm_id(&self) -> &CmId<C> {
                self.id()
            }

            fn into_id(self) -> ARef<CmId<C>> {
                let me = ManuallyDrop::new(self);
                // SAFETY: `me` is never used or dropped again, so the reference moves out
                // exactly once.
                unsafe { core::ptr::read(&me.id) }
            }
        }
    )*};
}

impl_token!(Connecting, Accepting, Connected);

/// A reference on a listening id, for reporting connection requests.
///
/// Created for [`IwCm::create_listen`]; it may be cloned and kept (e.g. one per listening socket
/// of a wildcard address).
pub struct ListenId<C: IwCm> {
    id: ARef<CmId<C>>,
}

impl<C: IwCm> Clone for ListenId<C> {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
        }
    }
}

impl<C: IwCm> ListenId<C> {
    /// The id.
    pub fn id(&self) -> &CmId<C> {
        &self.id
    }

    /// Reports a connection request (`IW_CM_EVENT_CONNECT_REQUEST`).
    ///
    /// `endpoint` comes back in [`IwCm::accept`] or [`IwCm::reject`] on the new id the `iw_cm`
    /// creates for the request. If the request cannot be queued (`ENOMEM`: more than `backlog`
    /// requests are pending, or the private data could not be copied) the endpoint is returned
    /// and the provider must refuse the connection itself. Requests sent once
    /// [`IwCm::destroy_listen`] has been called are dropped by the `iw_cm`, endpoint included.
    ///
    /// May be called from any context.
    pub fn connect_request(
        &self,
        endpoint: C::Endpoint,
        info: &ConnInfo<'_>,
    ) -> Result<(), Failed<C::Endpoint>> {
        let mut ev = event(
            bindings::iw_cm_event_type_IW_CM_EVENT_CONNECT_REQUEST,
            Ok(()),
        );
        set_private_data(&mut ev, &info.private_data);
        set_addresses(&mut ev, info);
        // The `iw_cm` (and the RDMA CM) read a request's IRD/ORD swapped.
        ev.ird = info.ord;
        ev.ord = info.ird;
        let ptr = endpoint.into_foreign();
        ev.provider_data = ptr.cast_mut();
        self.id.deliver(&mut ev).map_err(|error| {
            // SAFETY: The event was not queued, so `ptr` (from `into_foreign` above) is ours
            // again and was never borrowed.
            Failed::new(error, unsafe { C::Endpoint::from_foreign(ptr) })
        })
    }
}

/// An active connection waiting for its connect reply; holds a reference on the id.
///
/// Dropping it sends a failed connect reply (`ECONNABORTED`).
pub struct Connecting<C: IwCm> {
    id: ARef<CmId<C>>,
}

impl<C: IwCm> Connecting<C> {
    /// Reports that the connection is set up (`IW_CM_EVENT_CONNECT_REPLY`, status 0).
    ///
    /// The QP must be in RTS already. On failure (`ENOMEM`, only if there is private data) the
    /// token is returned. May be called from any context.
    pub fn connected(self, info: &ConnInfo<'_>) -> Result<Connected<C>, Failed<Self>> {
        let mut ev = event(bindings::iw_cm_event_type_IW_CM_EVENT_CONNECT_REPLY, Ok(()));
        set_private_data(&mut ev, &info.private_data);
        set_addresses(&mut ev, info);
        ev.ird = info.ird;
        ev.ord = info.ord;
        match self.id.deliver(&mut ev) {
            Ok(()) => Ok(Connected {
                id: self.into_id(),
                disconnected: false,
            }),
            Err(e) => Err(Failed::new(e, self)),
        }
    }

    /// Reports that the connection failed (`IW_CM_EVENT_CONNECT_REPLY` with `status`); this ends
    /// the connection's events.
    ///
    /// The RDMA CM reports `ECONNRESET` and `ECONNREFUSED` as rejected (with `private_data`
    /// from the peer's reject), `ETIMEDOUT` as unreachable, anything else as a connect error.
    /// On failure (`ENOMEM`, only if there is private data) the token is returned. May be called
    /// from any context.
    pub fn failed(self, status: Error, private_data: PrivateData<'_>) -> Result<(), Failed<Self>> {
        let mut ev = event(
            bindings::iw_cm_event_type_IW_CM_EVENT_CONNECT_REPLY,
            Err(status),
        );
        set_private_data(&mut ev, &private_data);
        match self.id.deliver(&mut ev) {
            Ok(()) => {
                drop(self.into_id());
                Ok(())
            }
            Err(e) => Err(Failed::new(e, self)),
        }
    }
}

impl<C: IwCm> Drop for Connecting<C> {
    fn drop(&mut self) {
        // Without private data the event cannot fail for lack of memory; there is no other
        // way to end the sequence.
        let _ = self.id.send(
            bindings::iw_cm_event_type_IW_CM_EVENT_CONNECT_REPLY,
            Err(econnaborted()),
        );
    }
}

/// An accepted passive connection waiting for its established event; holds a reference on the
/// id.
///
/// Dropping it sends the established event, then a close (`ECONNABORTED`).
pub struct Accepting<C: IwCm> {
    id: ARef<CmId<C>>,
}

impl<C: IwCm> Accepting<C> {
    /// Reports that the connection is set up (`IW_CM_EVENT_ESTABLISHED`) with the negotiated
    /// `ird` and `ord`.
    ///
    /// The QP must be in RTS already. If the connection broke before it was established, send
    /// this and then close. On failure the token is returned. May be called from any context.
    pub fn established(self, ird: u8, ord: u8) -> Result<Connected<C>, Failed<Self>> {
        let mut ev = event(bindings::iw_cm_event_type_IW_CM_EVENT_ESTABLISHED, Ok(()));
        ev.ird = ird;
        ev.ord = ord;
        match self.id.deliver(&mut ev) {
            Ok(()) => Ok(Connected {
                id: self.into_id(),
                disconnected: false,
            }),
            Err(e) => Err(Failed::new(e, self)),
        }
    }
}

impl<C: IwCm> Drop for Accepting<C> {
    fn drop(&mut self) {
        let established = bindings::iw_cm_event_type_IW_CM_EVENT_ESTABLISHED;
        if self.id.send(established, Ok(())).is_ok() {
            let _ = self.id.send(
                bindings::iw_cm_event_type_IW_CM_EVENT_CLOSE,
                Err(econnaborted()),
            );
        }
    }
}

/// An established connection; holds a reference on the id.
///
/// Dropping it sends a close (`ECONNABORTED`).
pub struct Connected<C: IwCm> {
    id: ARef<CmId<C>>,
    disconnected: bool,
}

impl<C: IwCm> Connected<C> {
    /// Reports that the peer started an orderly close (`IW_CM_EVENT_DISCONNECT`).
    ///
    /// Sent at most once: later calls do nothing. May be called from any context.
    pub fn disconnect(&mut self, status: Result) -> Result {
        if self.disconnected {
            return Ok(());
        }
        self.id
            .send(bindings::iw_cm_event_type_IW_CM_EVENT_DISCONNECT, status)?;
        self.disconnected = true;
        Ok(())
    }

    /// Reports that the connection is closed (`IW_CM_EVENT_CLOSE`); this ends its events and
    /// drops the reference on the id.
    ///
    /// The QP should be in the error state. May be called from any context.
    pub fn close(self, status: Result) -> Result {
        let ret = self
            .id
            .send(bindings::iw_cm_event_type_IW_CM_EVENT_CLOSE, status);
        drop(self.into_id());
        ret
    }
}

impl<C: IwCm> Drop for Connected<C> {
    fn drop(&mut self) {
        let _ = self.id.send(
            bindings::iw_cm_event_type_IW_CM_EVENT_CLOSE,
            Err(econnaborted()),
        );
    }
}

/// Installs `C`'s connection manager operations in `ops`.
pub(crate) const fn fill_ops<C: IwCm>(ops: &mut bindings::ib_device_ops) {
    ops.iw_connect = Some(Adapter::<C>::connect);
    ops.iw_accept = Some(Adapter::<C>::accept);
    ops.iw_reject = Some(Adapter::<C>::reject);
    ops.iw_create_listen = Some(Adapter::<C>::create_listen);
    ops.iw_destroy_listen = Some(Adapter::<C>::destroy_listen);
}

struct Adapter<C: IwCm>(PhantomData<C>);

impl<C: IwCm> Adapter<C> {
    /// The id and device of an operation.
    ///
    /// # Safety
    ///
    /// `id` must be the id the `iw_cm` passed to one of `C`'s operations, valid for `'a`.
    unsafe fn id_dev<'a>(
        id: *mut bindings::iw_cm_id,
    ) -> Result<(&'a CmId<C>, &'a Device<C::Driver>)> {
        // SAFETY: The `iw_cm` calls `C`'s operations with its ids on devices of `C::Driver`
        // (`fill_ops` is only used for those), which are alive during the call.
        unsafe { Ok((CmId::from_raw(id)?, Device::from_raw((*id).device))) }
    }

    /// The connection parameters at `param`.
    ///
    /// # Safety
    ///
    /// `param` must be valid for `'a`, with `private_data_len` readable bytes at `private_data`
    /// unless the length is zero.
    unsafe fn conn_param<'a>(param: *const bindings::iw_cm_conn_param) -> ConnParam<'a> {
        // SAFETY: `param` is valid for `'a`.
        let p = unsafe { &*param };
        let private_data = if p.private_data.is_null() || p.private_data_len == 0 {
            &[][..]
        } else {
            // SAFETY: Per the caller, the bytes are readable for `'a`.
            unsafe {
                core::slice::from_raw_parts(p.private_data.cast(), usize::from(p.private_data_len))
            }
        };
        ConnParam {
            private_data,
            ird: p.ird,
            ord: p.ord,
            qpn: p.qpn,
        }
    }

    /// `ib_device_ops.iw_connect`: starts an active connection (`iw_cm_connect`, after it took the
    /// QP's reference and mapped the addresses; no lock held).
    ///
    /// # Safety
    ///
    /// `id` is the `iw_cm`'s id for this call, on a live device with `C`'s operations, whose mapped
    /// addresses are set and not written before the provider's connect reply; `param` is valid for
    /// the call, with `private_data_len` readable bytes at `private_data` unless that is zero.
    unsafe extern "C" fn connect(
        id: *mut bindings::iw_cm_id,
        param: *mut bindings::iw_cm_conn_param,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `id` comes from the `iw_cm` for this operation.
            let (cm_id, dev) = unsafe { Self::id_dev(id)? };
            let ((local, remote), (tos, afonly)) =
                // SAFETY: The `iw_cm` set the addresses before this call; nothing writes them
                // before the provider sends its connect reply, which it cannot do before `conn`
                // exists below.
                unsafe { (cm_id.addresses(), cm_id.tos_afonly()) };
            let info = ConnectInfo {
                local: local?,
                remote: remote?,
                tos,
                afonly,
            };
            // SAFETY: `param` is valid for the call, as is its private data.
            let param = unsafe { Self::conn_param(param) };
            let conn = Connecting { id: cm_id.into() };
            C::connect(dev, conn, &info, &param).map_err(|f| dismiss(cm_id, f))?;
            Ok(0)
        })
    }

    /// `ib_device_ops.iw_accept`: accepts the connect request `id` was created for (`iw_cm_accept`,
    /// after it took the QP's reference; no lock held).
    ///
    /// # Safety
    ///
    /// `id` is the `iw_cm`'s id for this call, on a live device with `C`'s operations, created for
    /// a connect request (its `provider_data` is null or the endpoint that request carried);
    /// `param` is valid for the call, with `private_data_len` readable bytes at `private_data`
    /// unless zero.
    unsafe extern "C" fn accept(
        id: *mut bindings::iw_cm_id,
        param: *mut bindings::iw_cm_conn_param,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `id` comes from the `iw_cm` for this operation.
            let (cm_id, dev) = unsafe { Self::id_dev(id)? };
            let endpoint = take_endpoint::<C>(cm_id).ok_or(EINVAL)?;
            // SAFETY: `param` is valid for the call, as is its private data.
            let param = unsafe { Self::conn_param(param) };
            let conn = Accepting { id: cm_id.into() };
            C::accept(dev, conn, endpoint, &param).map_err(|f| dismiss(cm_id, f))?;
            Ok(0)
        })
    }

    /// `ib_device_ops.iw_reject`: rejects the connect request `id` was created for (`iw_cm_reject`,
    /// or `iw_destroy_cm_id` without private data); generates no event.
    ///
    /// # Safety
    ///
    /// `id` is the `iw_cm`'s id for this call, on a live device with `C`'s operations, created for
    /// a connect request (its `provider_data` is null or the endpoint that request carried);
    /// `pdata` is null or has `pdata_len` readable bytes for the call.
    unsafe extern "C" fn reject(
        id: *mut bindings::iw_cm_id,
        pdata: *const c_void,
        pdata_len: u8,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `id` comes from the `iw_cm` for this operation.
            let (cm_id, dev) = unsafe { Self::id_dev(id)? };
            let endpoint = take_endpoint::<C>(cm_id).ok_or(EINVAL)?;
            let private_data = if pdata.is_null() || pdata_len == 0 {
                PrivateData::EMPTY
            } else {
                // SAFETY: The `iw_cm` passes `pdata_len` readable bytes for the call; a `u8`
                // length is within `PrivateData::MAX_LEN`.
                PrivateData(unsafe {
                    core::slice::from_raw_parts(pdata.cast(), usize::from(pdata_len))
                })
            };
            C::reject(dev, endpoint, private_data)?;
            Ok(0)
        })
    }

    /// `ib_device_ops.iw_create_listen`: starts listening on `id`'s mapped local address
    /// (`iw_cm_listen`; no lock held).
    ///
    /// # Safety
    ///
    /// `id` is the `iw_cm`'s id for this call, on a live device with `C`'s operations, which it has
    /// just made listening, with its mapped local address set and not written while it listens.
    unsafe extern "C" fn create_listen(id: *mut bindings::iw_cm_id, backlog: c_int) -> c_int {
        from_result(|| {
            let backlog = u32::try_from(backlog).map_err(|_| EINVAL)?;
            // SAFETY: `id` comes from the `iw_cm` for this operation.
            let (cm_id, dev) = unsafe { Self::id_dev(id)? };
            // SAFETY: The `iw_cm` set the address before this call and does not write it on a
            // listening id.
            let ((local, _), (tos, afonly)) = unsafe { (cm_id.addresses(), cm_id.tos_afonly()) };
            let info = ListenInfo {
                local: local?,
                tos,
                afonly,
            };
            // An id only gets provider data from a connect request, which accept or reject
            // takes back, or from here; the `iw_cm` only listens on idle ids.
            if !cm_id.provider_data().load(Ordering::Acquire).is_null() {
                return Err(EBUSY);
            }
            let listener = ListenId { id: cm_id.into() };
            let state = C::create_listen(dev, listener, &info, backlog)?;
            // INVARIANT: A listening id's provider data is its `C::Listener`, until
            // `destroy_listen`.
            cm_id
                .provider_data()
                .store(state.into_foreign().cast_mut(), Ordering::Release);
            Ok(0)
        })
    }

    /// `ib_device_ops.iw_destroy_listen`: stops listening (`iw_destroy_cm_id` on a listening id; no
    /// lock held).
    ///
    /// # Safety
    ///
    /// `id` is the `iw_cm`'s id for this call, on a live device with `C`'s operations, that was
    /// listening (its `provider_data` is null or the listener `create_listen` stored), and this is
    /// called at most once for it.
    unsafe extern "C" fn destroy_listen(id: *mut bindings::iw_cm_id) -> c_int {
        from_result(|| {
            // SAFETY: `id` comes from the `iw_cm` for this operation.
            let (cm_id, dev) = unsafe { Self::id_dev(id)? };
            let ptr = cm_id
                .provider_data()
                .swap(core::ptr::null_mut(), Ordering::AcqRel);
            // Without a stored listener there is nothing to stop.
            // SAFETY: The `iw_cm` calls this only on ids that `create_listen` made listening,
            // whose provider data is a `C::Listener` (or null if none was stored); the swap
            // took it exactly once and it was never borrowed.
            if let Some(listener) = unsafe { C::Listener::try_from_foreign(ptr) } {
                C::destroy_listen(dev, listener)?;
            }
            Ok(0)
        })
    }
}

/// Takes the endpoint a connect request stored on `cm_id`, if it is still there.
fn take_endpoint<C: IwCm>(cm_id: &CmId<C>) -> Option<C::Endpoint> {
    let ptr = cm_id
        .provider_data()
        .swap(core::ptr::null_mut(), Ordering::AcqRel);
    // `accept` and `reject` are only called on ids the `iw_cm` created for a connect request
    // (state `IW_CM_STATE_CONN_RECV`), whose provider data `ListenId::connect_request` set.
    // SAFETY: `ptr` is null or that endpoint, converted with `into_foreign`; the swap takes it
    // exactly once, and it is never borrowed.
    unsafe { C::Endpoint::try_from_foreign(ptr) }
}

/// Ends a failed operation: drops the returned token without its events, and returns the error.
///
/// A token for another id (which a provider must not return) is dropped normally, so that id's
/// sequence still ends.
fn dismiss<C: IwCm, T: Token<C>>(cm_id: &CmId<C>, f: Failed<T>) -> Error {
    if core::ptr::eq(f.back.cm_id(), cm_id) {
        drop(f.back.into_id());
    } else {
        drop(f.back);
    }
    f.error
}
