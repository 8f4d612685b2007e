// SPDX-License-Identifier: GPL-2.0

//! RDMA connection manager ids (`struct rdma_cm_id`, RC port space, IPv4).
//!
//! # Events and contexts
//!
//! The RDMA CM reports events by calling the id's handler ([`CmHandler`]) from its own context:
//! a workqueue or the thread of the caller that triggered the event, never an atomic context,
//! so handlers may sleep. The core holds the id's handler mutex while a handler runs, so events
//! of one id never overlap. The C contract "a non-zero return destroys the id" is kept inside
//! this module:
//!
//! - A connection request arrives at the listener's handler as a [`ConnRequest`] for a new id.
//!   The handler either adopts it ([`ConnRequest::adopt`], giving an owned [`CmId`] on which it
//!   creates a QP and calls [`CmId::accept`]), rejects it ([`ConnRequest::reject`]), or drops it;
//!   in the last two cases the core destroys the new id when the handler returns.
//! - Dropping a [`CmId`] from its own handler (e.g. on [`CmEventKind::Disconnected`] or
//!   [`CmEventKind::DeviceRemoval`]) is allowed: the id is then destroyed by the core when the
//!   handler returns. Dropping it anywhere else destroys it at once (`rdma_destroy_id`), which
//!   waits for a running handler of that id to return: do not hold, while dropping, a lock that
//!   the handler takes, and do not drop a `CmId` from the handler of another id.
//! - [`CmId::connect`] and [`CmId::accept`] work inside and outside the id's handler (they take
//!   the handler mutex when called outside).

use super::{
    cq::Cq,
    mem::Pd,
    qp::{Qp, QpCaps},
    srq::Srq,
    Device,
};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{from_err_ptr, to_result, Result},
    netns::Namespace,
    prelude::*,
    str::CStr,
    sync::Arc,
};
use core::{
    marker::PhantomData,
    net::SocketAddr,
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicPtr, Ordering},
};

/// `IB_CM_REJ_CONSUMER_DEFINED`: the reject reason for ULP rejections (iWARP ignores it).
const REJ_CONSUMER_DEFINED: u8 = 28;

/// A socket address, IPv4 or IPv6, as the CM takes it: a `struct sockaddr_storage`.
fn raw_addr(addr: &SocketAddr) -> bindings::__kernel_sockaddr_storage {
    crate::ksock::to_sockaddr_storage(addr)
}

/// The kind of a CM event (`enum rdma_cm_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmEventKind {
    /// The address was resolved; resolve the route next.
    AddrResolved,
    /// Address resolution failed.
    AddrError,
    /// The route was resolved; connect next.
    RouteResolved,
    /// Route resolution failed.
    RouteError,
    /// A connection request (delivered as [`CmHandler::connect_request`]).
    ConnectRequest,
    /// A response to a connect without QP (not used on RC ids with a QP).
    ConnectResponse,
    /// Connecting failed.
    ConnectError,
    /// The peer is unreachable.
    Unreachable,
    /// The peer rejected the connection; the event carries its private data.
    Rejected,
    /// The connection is established.
    Established,
    /// The connection was closed.
    Disconnected,
    /// The device is being removed: release every resource on it.
    DeviceRemoval,
    /// The bound address changed.
    AddrChange,
    /// The connection's time-wait ended.
    TimewaitExit,
    /// Any other event (`RDMA_CM_EVENT_*` value).
    Other(u32),
}

impl CmEventKind {
    fn from_raw(e: u32) -> Self {
        match e {
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => Self::AddrResolved,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR => Self::AddrError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => Self::RouteResolved,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR => Self::RouteError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_REQUEST => Self::ConnectRequest,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_RESPONSE => Self::ConnectResponse,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR => Self::ConnectError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => Self::Unreachable,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => Self::Rejected,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => Self::Established,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => Self::Disconnected,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => Self::DeviceRemoval,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE => Self::AddrChange,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_TIMEWAIT_EXIT => Self::TimewaitExit,
            o => Self::Other(o),
        }
    }
}

/// A CM event, valid for the duration of the handler call.
#[derive(Clone, Copy, Debug)]
pub struct CmEvent<'a> {
    /// What happened.
    pub kind: CmEventKind,
    /// The event's status (a negative errno for failures, 0 otherwise).
    pub status: i32,
    /// The peer's private data (connect request, accept, reject), possibly empty.
    pub private_data: &'a [u8],
    /// The peer's responder resources (IRD) for connect requests and replies.
    pub responder_resources: u8,
    /// The peer's initiator depth (ORD) for connect requests and replies.
    pub initiator_depth: u8,
}

impl CmEvent<'_> {
    /// Reads an event.
    ///
    /// # Safety
    ///
    /// `ev` must be a valid event for `'a`.
    unsafe fn from_raw<'a>(ev: *const bindings::rdma_cm_event) -> CmEvent<'a> {
        // SAFETY: Guaranteed by the caller.
        let ev = unsafe { &*ev };
        // SAFETY: For the RC port space the union holds `conn`.
        let conn = unsafe { &ev.param.conn };
        let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
            &[][..]
        } else {
            // SAFETY: The core passes `private_data_len` bytes at `private_data`, valid for the
            // duration of the handler.
            unsafe {
                core::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
            }
        };
        CmEvent {
            kind: CmEventKind::from_raw(ev.event),
            status: ev.status,
            private_data,
            responder_resources: conn.responder_resources,
            initiator_depth: conn.initiator_depth,
        }
    }
}

/// Connection parameters for [`CmId::connect`] and [`CmId::accept`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnParam<'a> {
    /// Private data for the peer (at most 255 bytes; iWARP carries it in the MPA exchange).
    pub private_data: &'a [u8],
    /// RDMA READs this side accepts at once (IRD).
    pub responder_resources: u8,
    /// RDMA READs this side issues at once (ORD).
    pub initiator_depth: u8,
    /// Transport retries (ignored by iWARP).
    pub retry_count: u8,
    /// RNR retries (ignored by iWARP).
    pub rnr_retry_count: u8,
}

impl ConnParam<'_> {
    fn to_raw(self) -> Result<bindings::rdma_conn_param> {
        // SAFETY: All-zero is a valid `rdma_conn_param`.
        let mut p: bindings::rdma_conn_param = unsafe { core::mem::zeroed() };
        p.private_data = if self.private_data.is_empty() {
            core::ptr::null()
        } else {
            self.private_data.as_ptr().cast()
        };
        p.private_data_len = self.private_data.len().try_into()?;
        p.responder_resources = self.responder_resources;
        p.initiator_depth = self.initiator_depth;
        p.retry_count = self.retry_count;
        p.rnr_retry_count = self.rnr_retry_count;
        Ok(p)
    }
}

/// Receives the events of the CM ids created with it.
///
/// Called from the RDMA CM's context (process context, may sleep), with the id's handler mutex
/// held; see the [module documentation](self) for what that allows.
pub trait CmHandler: Send + Sync + Sized + 'static {
    /// An event on an id owned by this handler.
    fn event(&self, id: &CmIdRef<'_>, event: &CmEvent<'_>);

    /// A connection request on a listening id. Adopt, reject or drop `req`; the default drops
    /// it, which refuses the connection.
    fn connect_request(&self, req: ConnRequest<'_, Self>, event: &CmEvent<'_>) {
        let _ = (req, event);
    }
}

/// Per-id state shared with the event callback; `rdma_cm_id::context` points here.
struct IdState<H: CmHandler> {
    handler: Arc<H>,
    /// The task running this id's handler, or NULL.
    task: AtomicPtr<bindings::task_struct>,
    /// The owner dropped the `CmId` inside its handler: the callback frees this state and
    /// returns non-zero so that the core destroys the id.
    dropped: AtomicBool,
}

fn current_task() -> *mut bindings::task_struct {
    // SAFETY: `get_current` has no preconditions.
    unsafe { bindings::get_current() }
}

/// A CM id seen from inside its own event handler.
pub struct CmIdRef<'a> {
    raw: NonNull<bindings::rdma_cm_id>,
    _p: PhantomData<&'a ()>,
}

impl CmIdRef<'_> {
    /// The device the id is bound to, if any.
    pub fn device(&self) -> Option<&Device> {
        // SAFETY: The id is valid during the handler call.
        let dev = unsafe { (*self.raw.as_ptr()).device };
        // SAFETY: A bound id holds its device.
        (!dev.is_null()).then(|| unsafe { Device::from_raw(dev) })
    }

    /// Starts disconnecting (`rdma_disconnect`).
    pub fn disconnect(&self) -> Result {
        // SAFETY: The id is valid during the handler call.
        to_result(unsafe { bindings::rdma_disconnect(self.raw.as_ptr()) })
    }
}

/// A connection request: the new id, owned by the callback until adopted.
pub struct ConnRequest<'a, H: CmHandler> {
    raw: NonNull<bindings::rdma_cm_id>,
    _p: PhantomData<&'a H>,
}

impl<H: CmHandler> ConnRequest<'_, H> {
    /// The device the request arrived on.
    pub fn device(&self) -> Option<&Device> {
        // SAFETY: The new id is valid during the handler call.
        let dev = unsafe { (*self.raw.as_ptr()).device };
        // SAFETY: The new id holds its device.
        (!dev.is_null()).then(|| unsafe { Device::from_raw(dev) })
    }

    /// Takes ownership of the new id, with `handler` for its events. Create a QP on it and
    /// [`CmId::accept`]; dropping it instead refuses the connection.
    pub fn adopt(self, handler: Arc<H>) -> Result<CmId<H>> {
        let state = KBox::into_raw(KBox::new(
            IdState {
                handler,
                // The callback for this id is running in this task now.
                task: AtomicPtr::new(current_task()),
                dropped: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?);
        // SAFETY: The handler mutex of the new id is held, so no other event reads `context`.
        unsafe { (*self.raw.as_ptr()).context = state.cast() };
        Ok(CmId {
            raw: self.raw,
            // SAFETY: `state` comes from `KBox::into_raw`.
            state: unsafe { NonNull::new_unchecked(state) },
            qp: None,
        })
    }

    /// Rejects the request with `private_data` (at most 255 bytes); the core destroys the new
    /// id when the handler returns.
    pub fn reject(self, private_data: &[u8]) -> Result {
        // SAFETY: The new id is valid during the handler call.
        unsafe { reject(self.raw, private_data) }
    }
}

/// Rejects a connection request on `id` with `private_data` (at most 255 bytes).
///
/// # Safety
///
/// `id` must be a live CM id.
unsafe fn reject(id: NonNull<bindings::rdma_cm_id>, private_data: &[u8]) -> Result {
    let len: u8 = private_data.len().try_into()?;
    // SAFETY: The caller guarantees `id` is live; `private_data` is valid for `len` bytes during
    // the call.
    to_result(unsafe {
        bindings::rdma_reject(
            id.as_ptr(),
            private_data.as_ptr().cast(),
            len,
            REJ_CONSUMER_DEFINED,
        )
    })
}

/// Event callback of ids created by [`CmId::new`] / [`ConnRequest::adopt`] for handler `H`.
///
/// # Safety
///
/// Called by the RDMA CM with a valid id whose `context` is an `IdState<H>` (for connection
/// requests: the listener's), and a valid event.
unsafe extern "C" fn cm_callback<H: CmHandler>(
    id: *mut bindings::rdma_cm_id,
    ev: *mut bindings::rdma_cm_event,
) -> core::ffi::c_int {
    // SAFETY: `ev` is valid for the call.
    let event = unsafe { CmEvent::from_raw(ev) };
    // SAFETY: `id` is valid for the call.
    let ctx = unsafe { (*id).context }.cast::<IdState<H>>();
    // SAFETY: `id` is not NULL.
    let raw = unsafe { NonNull::new_unchecked(id) };
    if event.kind == CmEventKind::ConnectRequest {
        // SAFETY: A new id inherits the listener's context, a live `IdState<H>` (the listener
        // cannot be destroyed while its handler runs).
        let listener = unsafe { &*ctx };
        let req = ConnRequest {
            raw,
            _p: PhantomData,
        };
        listener.handler.connect_request(req, &event);
        // SAFETY: `id` is valid; only `adopt` (in this task) changes `context`.
        let now = unsafe { (*id).context }.cast::<IdState<H>>();
        if now == ctx {
            // Not adopted: have the core destroy (and so refuse) the new id.
            return 1;
        }
        // SAFETY: `adopt` set `context` to a live `IdState<H>`.
        return unsafe { finish_handler(now) };
    }
    // SAFETY: The context of an owned id is its live `IdState<H>`: the owner frees it only
    // after `rdma_destroy_id` (which waits for this handler) or through `finish_handler`.
    let st = unsafe { &*ctx };
    st.task.store(current_task(), Ordering::Relaxed);
    st.handler.event(
        &CmIdRef {
            raw,
            _p: PhantomData,
        },
        &event,
    );
    // SAFETY: `ctx` is still live: a drop inside the handler only marks it.
    unsafe { finish_handler(ctx) }
}

/// Ends a handler call on an owned id: frees the state and asks the core to destroy the id if
/// the owner dropped its `CmId` during the call.
///
/// # Safety
///
/// `st` must be the live `IdState<H>` of the id whose handler ran in this task.
unsafe fn finish_handler<H: CmHandler>(st: *mut IdState<H>) -> core::ffi::c_int {
    // SAFETY: Guaranteed by the caller.
    let s = unsafe { &*st };
    s.task.store(core::ptr::null_mut(), Ordering::Relaxed);
    if s.dropped.load(Ordering::Relaxed) {
        // SAFETY: The owner is gone and the core destroys the id without calling us again.
        drop(unsafe { KBox::from_raw(st) });
        return 1;
    }
    0
}

/// An RDMA CM id for reliable connections over IPv4, with its optional QP.
///
/// # Invariants
///
/// `raw` is a live id (created with `cm_callback::<H>`) whose `context` is `state`, a leaked
/// `KBox<IdState<H>>`; `qp`, if any, is the id's QP.
pub struct CmId<H: CmHandler> {
    raw: NonNull<bindings::rdma_cm_id>,
    state: NonNull<IdState<H>>,
    qp: Option<Pin<KBox<Qp>>>,
}

// SAFETY: CM ids may be used from any thread; the handler is `Send + Sync`.
unsafe impl<H: CmHandler> Send for CmId<H> {}
// SAFETY: The `&self` methods call CM functions that do their own locking.
unsafe impl<H: CmHandler> Sync for CmId<H> {}

impl<H: CmHandler> CmId<H> {
    /// Creates an id in network namespace `ns` whose events go to `handler`: it resolves
    /// addresses and routes there. `owner` names the ULP in `rdma resource show`.
    pub fn new(handler: Arc<H>, owner: &'static CStr, ns: &Namespace) -> Result<Self> {
        let state = KBox::into_raw(KBox::new(
            IdState {
                handler,
                task: AtomicPtr::new(core::ptr::null_mut()),
                dropped: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?);
        // SAFETY: `ns` is alive (type invariant of `Namespace`), and the id holds its own
        // reference to it; `state` stays valid until the id is destroyed; `owner` is a static C
        // string.
        let raw = unsafe {
            bindings::__rdma_create_kernel_id(
                ns.as_raw(),
                Some(cm_callback::<H>),
                state.cast(),
                bindings::rdma_ucm_port_space_RDMA_PS_TCP,
                bindings::ib_qp_type_IB_QPT_RC,
                owner.as_char_ptr(),
            )
        };
        match from_err_ptr(raw).map(NonNull::new) {
            Ok(Some(raw)) => Ok(CmId {
                raw,
                // SAFETY: `state` comes from `KBox::into_raw`.
                state: unsafe { NonNull::new_unchecked(state) },
                qp: None,
            }),
            r => {
                // SAFETY: No id was created, so nothing refers to `state`.
                drop(unsafe { KBox::from_raw(state) });
                Err(r.err().unwrap_or(ENOMEM))
            }
        }
    }

    fn state(&self) -> &IdState<H> {
        // SAFETY: By the type invariant `state` is live while `self` is.
        unsafe { self.state.as_ref() }
    }

    /// Whether this task is running this id's handler right now.
    fn in_own_handler(&self) -> bool {
        self.state().task.load(Ordering::Relaxed) == current_task()
    }

    /// The handler of this id.
    pub fn handler(&self) -> &Arc<H> {
        &self.state().handler
    }

    /// The device the id is bound to (after address resolution, bind to a device address, or
    /// for accepted ids).
    pub fn device(&self) -> Option<&Device> {
        // SAFETY: By the type invariant the id is live.
        let dev = unsafe { (*self.raw.as_ptr()).device };
        // SAFETY: A bound id holds a reference to its device.
        (!dev.is_null()).then(|| unsafe { Device::from_raw(dev) })
    }

    /// Starts resolving `dst` (from `src`, if given); [`CmEventKind::AddrResolved`] or
    /// [`CmEventKind::AddrError`] follows.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    ) -> Result {
        let mut s = src.as_ref().map(raw_addr);
        let mut d = raw_addr(&dst);
        let sp = s.as_mut().map_or(core::ptr::null_mut(), |s| {
            core::ptr::from_mut(s).cast::<bindings::sockaddr>()
        });
        // SAFETY: The id is live; the addresses are valid for the call (the CM copies them).
        to_result(unsafe {
            bindings::rdma_resolve_addr(
                self.raw.as_ptr(),
                sp,
                core::ptr::from_mut(&mut d).cast(),
                timeout_ms.try_into()?,
            )
        })
    }

    /// Starts resolving the route; [`CmEventKind::RouteResolved`] or
    /// [`CmEventKind::RouteError`] follows.
    pub fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: The id is live.
        to_result(unsafe {
            bindings::rdma_resolve_route(self.raw.as_ptr(), timeout_ms.try_into()?)
        })
    }

    /// Binds the id to `addr` (a local address, which selects the device).
    pub fn bind(&self, addr: SocketAddr) -> Result {
        let mut a = raw_addr(&addr);
        // SAFETY: The id is live; the address is copied by the CM.
        to_result(unsafe {
            bindings::rdma_bind_addr(self.raw.as_ptr(), core::ptr::from_mut(&mut a).cast())
        })
    }

    /// Listens for connection requests (after [`CmId::bind`]).
    pub fn listen(&self, backlog: i32) -> Result {
        // SAFETY: The id is live.
        to_result(unsafe { bindings::rdma_listen(self.raw.as_ptr(), backlog) })
    }

    /// Creates the id's RC QP (after route resolution, or on an adopted id) with the given CQs,
    /// on `pd`. With `signal_all` every send-queue work request completes, else only signaled
    /// ones. Returns the QP, whose granted sizes are in [`Qp::caps`].
    pub fn create_qp(
        &mut self,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        caps: QpCaps,
        signal_all: bool,
    ) -> Result<&Qp> {
        if self.qp.is_some() {
            return Err(EBUSY);
        }
        let dev = self.device().ok_or(EINVAL)?;
        if dev.as_raw() != pd.device().as_raw() {
            return Err(EINVAL);
        }
        // SAFETY: The id is live, has no QP (checked) and is bound to `pd`'s device; it outlives
        // the QP because `drop` destroys the QP first.
        let qp = unsafe { Qp::create(self.raw, pd, send_cq, recv_cq, None, caps, signal_all)? };
        Ok(&**self.qp.insert(qp))
    }

    /// Like [`CmId::create_qp`], for a QP that takes its receives from `srq` (of the same
    /// device; its PD may differ). The receive sizes of `caps` are ignored.
    pub fn create_qp_on_srq(
        &mut self,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        srq: &Arc<Srq>,
        caps: QpCaps,
        signal_all: bool,
    ) -> Result<&Qp> {
        if self.qp.is_some() {
            return Err(EBUSY);
        }
        let dev = self.device().ok_or(EINVAL)?;
        if dev.as_raw() != pd.device().as_raw() {
            return Err(EINVAL);
        }
        let caps = QpCaps {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..caps
        };
        // SAFETY: As in `create_qp`; `Qp::create` checks that `srq` is of the same device.
        let qp =
            unsafe { Qp::create(self.raw, pd, send_cq, recv_cq, Some(srq), caps, signal_all)? };
        Ok(&**self.qp.insert(qp))
    }

    /// The id's QP (`ENOTCONN` if there is none).
    pub fn qp(&self) -> Result<&Qp> {
        self.qp.as_deref().ok_or(super::enotconn())
    }

    /// Destroys the id's QP, flushing its work and releasing its attachments.
    pub fn destroy_qp(&mut self) {
        self.qp = None;
    }

    /// Connects (after route resolution and [`CmId::create_qp`]); [`CmEventKind::Established`],
    /// [`CmEventKind::Rejected`], [`CmEventKind::Unreachable`] or
    /// [`CmEventKind::ConnectError`] follows.
    pub fn connect(&self, param: &ConnParam<'_>) -> Result {
        let mut p = param.to_raw()?;
        // SAFETY: The id is live; `p` and its private data are valid for the call. Inside the
        // handler the mutex is held already, else `rdma_connect` takes it.
        to_result(unsafe {
            if self.in_own_handler() {
                bindings::rdma_connect_locked(self.raw.as_ptr(), &mut p)
            } else {
                bindings::rdma_connect(self.raw.as_ptr(), &mut p)
            }
        })
    }

    /// Accepts the connection request of an adopted id (after [`CmId::create_qp`]).
    pub fn accept(&self, param: &ConnParam<'_>) -> Result {
        let mut p = param.to_raw()?;
        let own = self.in_own_handler();
        if !own {
            // SAFETY: The id is live; `rdma_accept` requires the handler mutex.
            unsafe { bindings::rdma_lock_handler(self.raw.as_ptr()) };
        }
        // SAFETY: The id is live and its handler mutex is held; `p` is valid for the call.
        let r = unsafe { bindings::rdma_accept(self.raw.as_ptr(), &mut p) };
        if !own {
            // SAFETY: Locked above.
            unsafe { bindings::rdma_unlock_handler(self.raw.as_ptr()) };
        }
        to_result(r)
    }

    /// Rejects the connection request of an adopted id with `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result {
        // SAFETY: By the type invariant the id is live.
        unsafe { reject(self.raw, private_data) }
    }

    /// Starts disconnecting (`rdma_disconnect`); both sides then see
    /// [`CmEventKind::Disconnected`], and the QP goes to the error state (flushing its work).
    pub fn disconnect(&self) -> Result {
        // SAFETY: The id is live.
        to_result(unsafe { bindings::rdma_disconnect(self.raw.as_ptr()) })
    }
}

impl<H: CmHandler> Drop for CmId<H> {
    fn drop(&mut self) {
        // The QP goes first: `rdma_destroy_id` does not destroy it.
        self.qp = None;
        let st = self.state.as_ptr();
        if self.in_own_handler() {
            // Inside the handler the core's handler mutex is held, so `rdma_destroy_id` would
            // deadlock: let the callback free the state and return non-zero instead.
            self.state().dropped.store(true, Ordering::Relaxed);
            return;
        }
        // SAFETY: By the type invariant the id is live; this waits for a running handler and
        // stops all further calls.
        unsafe { bindings::rdma_destroy_id(self.raw.as_ptr()) };
        // SAFETY: The id is gone, so nothing refers to its state.
        drop(unsafe { KBox::from_raw(st) });
    }
}
