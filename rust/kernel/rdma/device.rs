// SPDX-License-Identifier: GPL-2.0

//! RDMA devices: allocation, registration and the `ib_device_ops` table.
//!
//! Ownership follows the RDMA core's model for software providers: after a successful
//! [`Registry::register`] the core owns the device. It is freed after unregistration, which
//! happens through `rdma link delete`, [`Device::unregister_queued`] (e.g. when the netdev goes
//! away), or when the driver's [`Registry`] is dropped at module unload. The driver's per-device
//! data ([`Driver::Data`]) is dropped in the core's `dealloc_driver` callback.

use crate::{
    bindings,
    error::{from_result, to_result, Result},
    netdev::NetDevice,
    new_condvar, new_mutex,
    prelude::*,
    rdma::{
        mr::{Mr, MrKeys, MrType},
        qp::{Qp, QpInitAttr, QpModify, QpQuery, QpRef, RecvWr, SendWr},
        res::ResDetails,
        srq::{Srq, SrqAttr, SrqInitAttr, SrqModify},
        stats::StatDesc,
        udata::UserData,
        verbs::{Cq, CqInitAttr, NotifyRequest, Pd, WcArray},
    },
    str::CStr,
    sync::{CondVar, Mutex},
    types::{ARef, AlwaysRefCounted, Opaque},
    ThisModule,
};
use core::{marker::PhantomData, num::NonZeroU32, ptr::NonNull};

/// RDMA driver identifiers (`enum rdma_driver_id`) that user-space providers match on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DriverId {
    /// Matched by no user-space provider.
    Unknown,
    /// Matched by rdma-core's `libsiw` (soft-iWARP user ABI version 1).
    Siw,
}

impl DriverId {
    const fn to_raw(self) -> bindings::rdma_driver_id {
        match self {
            DriverId::Unknown => bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
            DriverId::Siw => bindings::rdma_driver_id_RDMA_DRIVER_SIW,
        }
    }
}

/// The state of a port (`enum ib_port_state`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PortState {
    /// The link is down.
    Down,
    /// The link is up but not yet usable.
    Init,
    /// The port is usable.
    Active,
}

/// The physical state of a port (`enum ib_port_phys_state`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PortPhysState {
    /// The port is disabled.
    Disabled,
    /// The physical link is up.
    LinkUp,
}

/// Device capability flag: the device supports memory management extensions (FRWR).
// CAST: Flag bits of the C enums, positive.
pub const DEVICE_MEM_MGT_EXTENSIONS: u64 =
    bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64;
/// Kernel capability flag: `rdma link delete` may unregister the device.
pub const KERNEL_CAP_ALLOW_USER_UNREG: u64 =
    bindings::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG as u64;
/// Kernel capability flag: the device has a local DMA lkey usable for all kernel memory.
pub const KERNEL_CAP_LOCAL_DMA_LKEY: u64 = bindings::ib_kernel_cap_flags_IBK_LOCAL_DMA_LKEY as u64;

/// Device attributes reported by `query_device`: the limits the driver honours.
#[derive(Clone, Copy, Default, Debug)]
#[allow(missing_docs)] // Each field is the `struct ib_device_attr` field of the same name.
pub struct DeviceAttr {
    pub fw_ver: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u64,
    pub kernel_cap_flags: u64,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_fast_reg_page_list_len: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
}

/// Port attributes reported by `query_port`.
#[derive(Clone, Copy, Debug)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Physical port state.
    pub phys_state: PortPhysState,
    /// Largest supported MTU in bytes (rounded down to an IB MTU).
    pub max_mtu: u32,
    /// Current MTU in bytes (rounded down to an IB MTU).
    pub active_mtu: u32,
    /// Speed (`enum ib_port_speed`), e.g. from [`Device::eth_speed`].
    pub active_speed: u16,
    /// Width (`enum ib_port_width`), e.g. from [`Device::eth_speed`].
    pub active_width: u8,
    /// Number of GID table entries.
    pub gid_tbl_len: i32,
    /// Largest message size.
    pub max_msg_sz: u32,
}

/// A port event for [`Device::dispatch_port_event`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PortEvent {
    /// The port became active (`IB_EVENT_PORT_ACTIVE`).
    Active,
    /// The port went down (`IB_EVENT_PORT_ERR`).
    Error,
    /// The port's address changed (`IB_EVENT_LID_CHANGE`).
    AddressChange,
    /// The GID table changed (`IB_EVENT_GID_CHANGE`).
    GidChange,
}

/// Static description of a device, applied before it is registered.
pub struct DeviceInfo<'a> {
    /// Node GUID, in host order (it is stored big-endian).
    pub node_guid: u64,
    /// Node description shown by `ibv_devinfo` and friends.
    pub node_desc: &'a CStr,
    /// Number of completion vectors.
    pub num_comp_vectors: u32,
}

/// An RDMA provider driver: the Rust side of an `ib_device_ops` table.
///
/// Every device of the driver is one port, iWARP transport, with `GID_TABLE_LEN` GIDs.
#[vtable]
pub trait Driver: Sized + 'static {
    /// Per-device driver data.
    type Data: Send + Sync;
    /// The driver id that user-space providers match on.
    const DRIVER_ID: DriverId;
    /// The user verbs ABI version.
    const ABI_VERSION: u32;
    /// Number of GIDs per port.
    const GID_TABLE_LEN: u32 = 1;

    /// Reports the device's attributes. The core calls this once at registration and caches
    /// the result for kernel consumers.
    fn query_device(dev: &Device<Self>) -> Result<DeviceAttr>;

    /// Reports the attributes of `port`.
    fn query_port(dev: &Device<Self>, port: u32) -> Result<PortAttr>;

    /// Returns GID `index` of `port`.
    fn query_gid(dev: &Device<Self>, port: u32, index: u32) -> Result<[u8; 16]>;

    /// Per-protection-domain driver data.
    type Pd: Send + Sync;
    /// Per-completion-queue driver data.
    type Cq: Send + Sync;
    /// The driver's iWARP connection manager operations.
    type IwCm: super::iwcm::IwCm<Driver = Self>;

    /// Creates a protection domain's data.
    fn alloc_pd(
        dev: &Device<Self>,
        udata: &mut UserData<'_>,
    ) -> Result<impl PinInit<Self::Pd, Error>>;

    /// Called before a protection domain's data is dropped.
    fn dealloc_pd(_pd: &Pd<Self>) {}

    /// Creates a completion queue's data; also returns the number of entries it really has.
    fn create_cq(
        dev: &Device<Self>,
        attr: &CqInitAttr,
        udata: &mut UserData<'_>,
    ) -> Result<(impl PinInit<Self::Cq, Error>, u32)>;

    /// Called before a completion queue's data is dropped.
    fn destroy_cq(_cq: &Cq<Self>) {}

    /// Moves up to `out.remaining()` completions from `cq` into `out`.
    fn poll_cq(cq: &Cq<Self>, out: &mut WcArray<'_>);

    /// Arms `cq` for one completion upcall. Returns whether completions are already queued.
    fn req_notify_cq(cq: &Cq<Self>, req: NotifyRequest) -> bool;

    /// Per-queue-pair driver data.
    type Qp: Send + Sync;
    /// Per-memory-region driver data.
    type Mr: Send + Sync;

    /// Validates `attr` (updating `attr.cap` to what the QP really provides) and creates a QP's
    /// data and number. `srq` is the shared receive queue the QP takes its receives from (with
    /// `attr.has_srq`); it stays alive as long as the QP, see [`Qp::srq`].
    fn create_qp(
        pd: &Pd<Self>,
        attr: &mut QpInitAttr,
        srq: Option<&Srq<Self>>,
        udata: &mut UserData<'_>,
    ) -> Result<(impl PinInit<Self::Qp, Error>, u32)>;

    /// Called once the QP is fully set up, before the consumer sees it (e.g. to publish it).
    fn qp_created(_qp: &Qp<Self>) -> Result {
        Ok(())
    }

    /// Tears a QP down: afterwards the driver must drop every [`QpRef`] it holds, so that
    /// destruction can complete.
    fn destroy_qp(qp: &Qp<Self>);

    /// Applies a consumer's modification.
    fn modify_qp(qp: &Qp<Self>, m: &QpModify, udata: &mut UserData<'_>) -> Result;

    /// Reports a QP's attributes.
    fn query_qp(qp: &Qp<Self>) -> Result<QpQuery>;

    /// Posts one send work request.
    fn post_send(qp: &Qp<Self>, wr: &SendWr<'_, Self>) -> Result;

    /// Posts one receive work request.
    fn post_recv(qp: &Qp<Self>, wr: &RecvWr<'_>) -> Result;

    /// A post with no send work request: user space rang the doorbell of a QP whose send queue
    /// it writes itself (uverbs `POST_SEND` with no WR).
    fn doorbell(_qp: &Qp<Self>) -> Result {
        Ok(())
    }

    /// Finds a QP by number (for the iWARP connection manager). The reference must be taken
    /// while the QP is certainly alive (for example under the lock of a table `destroy_qp` removes
    /// it from), not after the lookup let go.
    fn get_qp(dev: &Device<Self>, qpn: u32) -> Option<QpRef<Self>>;

    /// Creates the data of a DMA MR (all of kernel memory) with `access` (`IB_ACCESS_*`).
    fn get_dma_mr(
        pd: &Pd<Self>,
        access: u32,
        memory: super::mr::AllMemory,
    ) -> Result<(impl PinInit<Self::Mr, Error>, MrKeys)>;

    /// Creates the data of an MR for fast registration of up to `max_num_sg` pages.
    fn alloc_mr(
        pd: &Pd<Self>,
        ty: MrType,
        max_num_sg: u32,
    ) -> Result<(impl PinInit<Self::Mr, Error>, MrKeys)>;

    /// Creates the data of an MR over user memory `mem`, pinned for it, which the consumer
    /// addresses from `iova` (uverbs `REG_MR`).
    fn reg_user_mr(
        _pd: &Pd<Self>,
        _mem: super::umem::UserMemory,
        _iova: u64,
        _access: u32,
        _udata: &mut UserData<'_>,
    ) -> Result<(impl PinInit<Self::Mr, Error>, MrKeys)> {
        Err::<(Self::Mr, MrKeys), Error>(super::eopnotsupp())
    }

    /// Called before an MR's data is dropped.
    fn dereg_mr(_mr: &Mr<Self>) {}

    /// `map_mr_sg` starts: forget the previous page list.
    fn mr_map_begin(mr: &Mr<Self>) -> Result;

    /// `map_mr_sg` adds a page (`page_size` bytes of the consumer's mapped memory).
    fn mr_set_page(mr: &Mr<Self>, page: super::mr::KernelRange) -> Result;

    /// Per-shared-receive-queue driver data.
    type Srq: Send + Sync;

    /// Validates `attr` (updating `attr.max_wr` and `attr.max_sge` to what the SRQ really
    /// provides) and creates an SRQ's data.
    ///
    /// A driver that implements this supports SRQs and must also implement
    /// [`Driver::post_srq_recv`]; [`Driver::modify_srq`] and [`Driver::query_srq`] fail with
    /// `EOPNOTSUPP` unless implemented.
    fn create_srq(
        _pd: &Pd<Self>,
        _attr: &mut SrqInitAttr,
        _udata: &mut UserData<'_>,
    ) -> Result<impl PinInit<Self::Srq, Error>> {
        Err::<Self::Srq, Error>(super::eopnotsupp())
    }

    /// Called before an SRQ's data is dropped; no QP uses the SRQ any more.
    fn destroy_srq(_srq: &Srq<Self>) {}

    /// Applies a consumer's `ib_modify_srq`.
    fn modify_srq(_srq: &Srq<Self>, _m: &SrqModify) -> Result {
        Err(super::eopnotsupp())
    }

    /// Reports an SRQ's attributes.
    fn query_srq(_srq: &Srq<Self>) -> Result<SrqAttr> {
        Err(super::eopnotsupp())
    }

    /// Posts one receive work request to an SRQ.
    fn post_srq_recv(_srq: &Srq<Self>, _wr: &RecvWr<'_>) -> Result {
        Err(super::eopnotsupp())
    }

    /// Sets up a user context; may write a driver-specific response to `udata`.
    fn alloc_ucontext(_dev: &Device<Self>, _udata: &mut UserData<'_>) -> Result {
        crate::build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// The port counters, in the order [`Driver::get_hw_stats`] fills them.
    const HW_STATS: &'static [StatDesc] = &[];

    /// Reads the counters of `port` into `values`, one for each of [`Driver::HW_STATS`]. The
    /// core serializes the calls for one set of values, and also calls this while it registers
    /// the device.
    fn get_hw_stats(_dev: &Device<Self>, _port: u32, _values: &mut [u64]) {
        crate::build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Binds `qp` to a QP counter of `port` (`rdma statistic qp`, process context): `counter` is
    /// the counter's id, or `None` for a counter the core has just made, which the driver names:
    /// the id returned, unique among the device's live QP counters. The core serializes the
    /// calls for one counter (binding, unbinding and reading it).
    fn counter_bind_qp(
        _qp: &Qp<Self>,
        _counter: Option<NonZeroU32>,
        _port: u32,
    ) -> Result<NonZeroU32> {
        crate::build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Unbinds `qp` from QP counter `counter` (process context); what `qp` counted while bound
    /// stays in the counter.
    fn counter_unbind_qp(_qp: &Qp<Self>, _counter: NonZeroU32) -> Result {
        crate::build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// The core frees QP counter `counter`; no QP is bound to it (process context).
    fn counter_dealloc(_dev: &Device<Self>, _counter: NonZeroU32) {
        crate::build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Reads QP counter `counter` into `values`, one for each of [`Driver::HW_STATS`]: what its
    /// QPs counted while bound (process context). The core adds the QP counters to the port's
    /// values ([`Driver::get_hw_stats`]), so what a QP counts while bound to a counter must not
    /// be in those too.
    fn counter_update_stats(
        _dev: &Device<Self>,
        _counter: NonZeroU32,
        _values: &mut [u64],
    ) -> Result {
        crate::build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Adds the driver's details of `qp` to `rdma resource show qp -dd` (process context). An
    /// error from `details` (the message is full) must be passed on.
    fn fill_res_qp(_qp: &Qp<Self>, _details: &mut ResDetails<'_>) -> Result {
        crate::build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Adds the driver's details of the connection manager id `id` (the `iw_cm_id` under an
    /// `rdma_cm_id` on `dev`) to `rdma resource show cm_id -dd` (process context). An error from
    /// `details` (the message is full) must be passed on.
    fn fill_res_cm_id(
        _dev: &Device<Self>,
        _id: super::iwcm::CmIdKey,
        _details: &mut ResDetails<'_>,
    ) -> Result {
        crate::build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }
}

/// An RDMA device of driver `T`: the core's `struct ib_device` followed by the driver's data.
///
/// # Invariants
///
/// `ibdev` was allocated by `_ib_alloc_device` with room for `Self`; `data` is initialized, and
/// `registry` outlives the device, from the moment the driver's ops are installed until
/// `dealloc_driver` runs.
#[repr(C)]
#[pin_data]
pub struct Device<T: Driver> {
    ibdev: Opaque<bindings::ib_device>,
    registry: *const Registry<T>,
    netdev: *const bindings::net_device,
    #[pin]
    data: T::Data,
}

// SAFETY: The core shares devices between threads; the driver data is `Send + Sync`.
unsafe impl<T: Driver> Send for Device<T> {}
// SAFETY: See above.
unsafe impl<T: Driver> Sync for Device<T> {}

// SAFETY: `ib_device_try_get`/`ib_device_put` manage the registration reference count; the
// memory itself stays valid until the core's `dealloc_driver` after the count drops to zero.
unsafe impl<T: Driver> AlwaysRefCounted for Device<T> {
    fn inc_ref(&self) {
        // SAFETY: `self` is referenced, so the count is non-zero and the increment succeeds.
        let _ = unsafe { bindings::ib_device_try_get(self.as_raw()) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference.
        unsafe { bindings::ib_device_put(obj.cast::<bindings::ib_device>().as_ptr()) };
    }
}

impl<T: Driver> Device<T> {
    /// Returns the device of `ibdev`.
    ///
    /// # Safety
    ///
    /// `ibdev` must be a device of driver `T` (its ops are `T`'s), valid for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ibdev: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `ibdev` is the first field of a `#[repr(C)]` `Device<T>`.
        unsafe { &*ibdev.cast::<Self>() }
    }

    /// The raw `ib_device`.
    pub fn as_raw(&self) -> *mut bindings::ib_device {
        self.ibdev.get()
    }

    /// The driver's data.
    pub fn data(&self) -> &T::Data {
        &self.data
    }

    /// The device's name (e.g. `rsiw0`).
    pub fn name(&self) -> &CStr {
        // SAFETY: `dev.kobj.name` is set by registration and stays valid while the device is
        // referenced; renames go through the core under its own locks.
        let name = unsafe { (*self.as_raw()).__bindgen_anon_1.dev.kobj.name };
        if name.is_null() {
            return crate::c_str!("(unregistered)");
        }
        // SAFETY: Non-null kobject names are NUL-terminated strings.
        unsafe { CStr::from_char_ptr(name) }
    }

    /// Whether this device is bound to `netdev`.
    pub fn is_on(&self, netdev: &NetDevice) -> bool {
        core::ptr::eq(self.netdev, netdev.as_raw())
    }

    /// The netdev of `port`, or `None` once it is being unregistered.
    pub fn netdev(&self, port: u32) -> Option<ARef<NetDevice>> {
        // SAFETY: The device is valid; the core returns a held reference or null.
        let ndev = unsafe { bindings::ib_device_get_netdev(self.as_raw(), port) };
        let ndev = NonNull::new(ndev)?;
        // SAFETY: `ib_device_get_netdev` took a reference that the `ARef` now owns.
        Some(unsafe { ARef::from_raw(ndev.cast::<NetDevice>()) })
    }

    /// The Ethernet speed and width of `port`, as `(enum ib_port_speed, enum ib_port_width)`.
    pub fn eth_speed(&self, port: u32) -> Result<(u16, u8)> {
        let mut speed = 0u16;
        let mut width = 0u8;
        // SAFETY: The device is valid; the out pointers are valid for writes.
        to_result(unsafe {
            bindings::ib_get_eth_speed(self.as_raw(), port, &mut speed, &mut width)
        })?;
        Ok((speed, width))
    }

    /// Tells the core's clients (ULPs, user space) about a port event.
    pub fn dispatch_port_event(&self, port: u32, event: PortEvent) {
        let kind = match event {
            PortEvent::Active => bindings::ib_event_type_IB_EVENT_PORT_ACTIVE,
            PortEvent::Error => bindings::ib_event_type_IB_EVENT_PORT_ERR,
            PortEvent::AddressChange => bindings::ib_event_type_IB_EVENT_LID_CHANGE,
            PortEvent::GidChange => bindings::ib_event_type_IB_EVENT_GID_CHANGE,
        };
        // SAFETY: An all-zero `ib_event` is valid; the fields used are set below.
        let mut ev: bindings::ib_event = unsafe { core::mem::zeroed() };
        ev.device = self.as_raw();
        ev.event = kind;
        ev.element.port_num = port;
        // SAFETY: `ev` is fully set up and the device is valid.
        unsafe { bindings::ib_dispatch_event(&ev) };
    }

    /// Finds the device of driver `T` bound to `netdev`, if there is one.
    pub fn lookup_by_netdev(netdev: &NetDevice) -> Option<ARef<Self>> {
        // SAFETY: `netdev` is valid; the core returns a referenced device or null.
        let raw =
            unsafe { bindings::ib_device_get_by_netdev(netdev.as_raw(), T::DRIVER_ID.to_raw()) };
        let raw = NonNull::new(raw)?;
        // Another driver may share the driver id (e.g. the C siw): only our ops identify ours.
        // Addresses are compared: a C driver's callbacks can never share code with ours.
        // CAST: Function addresses, only compared.
        // SAFETY: `raw` is referenced, so its ops are readable.
        let theirs = unsafe { (*raw.as_ptr()).ops.dealloc_driver }.map_or(0, |f| f as usize);
        let ours_fn: unsafe extern "C" fn(*mut bindings::ib_device) = Adapter::<T>::dealloc_driver;
        let ours = theirs == ours_fn as usize;
        if !ours {
            // SAFETY: Drops the reference `ib_device_get_by_netdev` took.
            unsafe { bindings::ib_device_put(raw.as_ptr()) };
            return None;
        }
        // SAFETY: `raw` is a device of driver `T`, referenced by us.
        Some(unsafe { ARef::from_raw(raw.cast()) })
    }

    /// Unregisters the device from a work item, dropping this reference.
    ///
    /// Safe from contexts that must not wait for unregistration, e.g. a netdev notifier.
    pub fn unregister_queued(this: ARef<Self>) {
        let raw = this.as_raw();
        // SAFETY: `raw` is a registered device; the core takes its own reference for the work.
        unsafe { bindings::ib_unregister_device_queued(raw) };
    }
}

/// Whether any RDMA device of any driver is named `name`.
pub fn name_in_use(name: &CStr) -> bool {
    // SAFETY: `name` is NUL-terminated; the core returns a referenced device or null.
    let dev = unsafe {
        bindings::ib_device_get_by_name(
            name.as_char_ptr(),
            bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
        )
    };
    if dev.is_null() {
        return false;
    }
    // SAFETY: Drops the reference just taken.
    unsafe { bindings::ib_device_put(dev) };
    true
}

/// Whether `netdev` already has a device with driver id `id` (of this or another driver).
pub fn netdev_has_device(netdev: &NetDevice, id: DriverId) -> bool {
    // SAFETY: `netdev` is valid; the core returns a referenced device or null.
    let dev = unsafe { bindings::ib_device_get_by_netdev(netdev.as_raw(), id.to_raw()) };
    if dev.is_null() {
        return false;
    }
    // SAFETY: Drops the reference just taken.
    unsafe { bindings::ib_device_put(dev) };
    true
}

/// The devices a driver has registered, so that all can be unregistered at module unload.
///
/// Dropping the registry unregisters every device and waits until the core has released them.
///
/// # Invariants
///
/// `devices` holds exactly the devices of this registry whose `dealloc_driver` has not run.
#[pin_data(PinnedDrop)]
pub struct Registry<T: Driver> {
    #[pin]
    devices: Mutex<KVec<DevicePtr<T>>>,
    #[pin]
    released: CondVar,
    module: &'static ThisModule,
}

struct DevicePtr<T: Driver>(NonNull<Device<T>>);
// SAFETY: The pointer is only dereferenced under the registry lock while the device is alive.
unsafe impl<T: Driver> Send for DevicePtr<T> {}

// SAFETY: All shared state is behind the mutex.
unsafe impl<T: Driver> Sync for Registry<T> {}
// SAFETY: See above.
unsafe impl<T: Driver> Send for Registry<T> {}

impl<T: Driver> Registry<T> {
    /// Creates an empty registry for devices owned by `module`.
    pub fn new(module: &'static ThisModule) -> impl PinInit<Self> {
        pin_init!(Self {
            devices <- new_mutex!(KVec::new(), "rdma::device::Registry::devices"),
            released <- new_condvar!("rdma::device::Registry::released"),
            module,
        })
    }

    /// Finds a registered device for which `pred` holds.
    fn find(&self, pred: impl Fn(&Device<T>) -> bool) -> Option<ARef<Device<T>>> {
        let devices = self.devices.lock();
        for ptr in devices.iter() {
            // SAFETY: Entries are alive until `dealloc_driver` removes them under this lock.
            let dev = unsafe { ptr.0.as_ref() };
            // SAFETY: The device is alive (see above); a zero count means it is unregistering.
            if !pred(dev) || !unsafe { bindings::ib_device_try_get(dev.as_raw()) } {
                continue;
            }
            // SAFETY: `ib_device_try_get` took the reference the `ARef` now owns.
            return Some(unsafe { ARef::from_raw(ptr.0) });
        }
        None
    }

    /// Allocates, sets up and registers a device named `name` on port 1 of `netdev`.
    ///
    /// On success the core owns the device.
    pub fn register(
        &self,
        name: &CStr,
        netdev: &NetDevice,
        info: &DeviceInfo<'_>,
        data: impl PinInit<T::Data, Error>,
    ) -> Result {
        // Reserve the registry slot first so that no failure is possible after registration.
        self.devices.lock().reserve(1, GFP_KERNEL)?;

        // SAFETY: Allocates a zeroed, initialized `ib_device` with room for `Device<T>`.
        let raw = unsafe { bindings::_ib_alloc_device(core::mem::size_of::<Device<T>>()) };
        let raw = NonNull::new(raw).ok_or(ENOMEM)?;
        let dev = raw.cast::<Device<T>>().as_ptr();

        // SAFETY: `dev` points at zeroed memory sized for `Device<T>`; `data` is its own field
        // and is initialized in place (the allocation never moves).
        let init = unsafe {
            // A `Registry` is only ever created pinned (it is `PinInit` only) and its drop
            // waits for all devices, so this pointer stays valid for the device's lifetime.
            core::ptr::addr_of_mut!((*dev).registry).write(self);
            core::ptr::addr_of_mut!((*dev).netdev).write(netdev.as_raw());
            data.__pinned_init(core::ptr::addr_of_mut!((*dev).data))
        };
        if let Err(e) = init {
            // SAFETY: The driver ops (thus `dealloc_driver`) are not installed yet, so this
            // only frees the core's part.
            unsafe { bindings::ib_dealloc_device(raw.as_ptr()) };
            return Err(e);
        }

        // SAFETY: `raw` is a valid, unregistered device that only this function references.
        unsafe { Self::setup(raw.as_ptr(), netdev, info, self.module) };
        // INVARIANT: From here on `dealloc_driver` drops `data` and removes the registry entry.
        self.devices
            .lock()
            .push(DevicePtr(raw.cast()), GFP_KERNEL)
            .map_err(|_| ENOMEM)?;

        // SAFETY: `raw` is set up; port 1 exists (`phys_port_cnt == 1`).
        let ret = unsafe { bindings::ib_device_set_netdev(raw.as_ptr(), netdev.as_raw(), 1) };
        let ret = to_result(ret).and_then(|()| {
            // SAFETY: `raw` is fully set up; the name is NUL-terminated. A null DMA device
            // makes it a virtual-DMA device, as software providers are.
            unsafe {
                bindings::ib_mark_name_assigned_by_user(raw.as_ptr());
                to_result(bindings::ib_register_device(
                    raw.as_ptr(),
                    name.as_char_ptr(),
                    core::ptr::null_mut(),
                ))
            }
        });
        if let Err(e) = ret {
            // SAFETY: Registration failed, so ownership is back with us; this runs
            // `dealloc_driver` and frees the device.
            unsafe { bindings::ib_dealloc_device(raw.as_ptr()) };
            return Err(e);
        }
        Ok(())
    }

    /// Fills in the core's fields of a fresh device and installs `T`'s ops.
    ///
    /// # Safety
    ///
    /// `raw` must be a valid, unregistered device referenced by nothing else.
    unsafe fn setup(
        raw: *mut bindings::ib_device,
        netdev: &NetDevice,
        info: &DeviceInfo<'_>,
        module: &'static ThisModule,
    ) {
        // SAFETY: The caller guarantees exclusive access to a valid device.
        let ib = unsafe { &mut *raw };
        // CAST: The node types fit the `u8` field.
        ib.node_type = bindings::RDMA_NODE_RNIC as u8;
        ib.phys_port_cnt = 1;
        ib.num_comp_vectors = info.num_comp_vectors.try_into().unwrap_or(1);
        ib.node_guid = info.node_guid.to_be();
        copy_cstr(&mut ib.node_desc, info.node_desc.as_bytes());
        copy_cstr(&mut ib.iw_ifname, netdev.name().as_cstr().as_bytes());
        ib.iw_driver_flags = bindings::iw_flags_IW_F_NO_PORT_MAP;
        ib.uverbs_cmd_mask |= 1u64 << bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND;

        let mut ops = Adapter::<T>::OPS;
        ops.owner = module.as_ptr();
        // SAFETY: `ops` is a complete ops table; the core copies it.
        unsafe { bindings::ib_set_device_ops(raw, &ops) };
    }

    fn remove(&self, dev: *mut bindings::ib_device) {
        let mut devices = self.devices.lock();
        if let Some(pos) = devices
            .iter()
            .position(|p| core::ptr::eq(p.0.as_ptr().cast::<bindings::ib_device>(), dev))
        {
            let last = devices.len() - 1;
            devices.as_mut_slice().swap(pos, last);
            // SAFETY: `last < len`; the element beyond the new length is a plain pointer that
            // needs no drop.
            unsafe { devices.set_len(last) };
        }
        if devices.is_empty() {
            self.released.notify_all();
        }
    }
}

#[pinned_drop]
impl<T: Driver> PinnedDrop for Registry<T> {
    fn drop(self: Pin<&mut Self>) {
        // Unregister every device we can take a reference on; devices already unregistering
        // (count zero) finish on their own and are waited for below.
        while let Some(dev) = self.find(|_| true) {
            let raw = ARef::into_raw(dev);
            // SAFETY: We own the reference `find` took; this unregisters and drops it.
            unsafe {
                bindings::ib_unregister_device_and_put(raw.cast::<bindings::ib_device>().as_ptr())
            };
        }
        let mut devices = self.devices.lock();
        while !devices.is_empty() {
            self.released.wait(&mut devices);
        }
    }
}

fn copy_cstr(dst: &mut [crate::ffi::c_char], src: &[u8]) {
    let n = src.len().min(dst.len().saturating_sub(1));
    for (d, s) in dst.iter_mut().zip(src.iter().take(n)) {
        *d = *s as crate::ffi::c_char;
    }
    if let Some(last) = dst.get_mut(n) {
        *last = 0;
    }
}

fn mtu_to_enum(mtu: u32) -> bindings::ib_mtu {
    // SAFETY: Pure function.
    unsafe { bindings::ib_mtu_int_to_enum(mtu.try_into().unwrap_or(i32::MAX)) }
}

pub(crate) struct Adapter<T: Driver>(PhantomData<T>);

impl<T: Driver> Adapter<T> {
    const OPS: bindings::ib_device_ops = {
        // SAFETY: An all-zero ops table (no ops, no sizes) is valid.
        let mut ops: bindings::ib_device_ops = unsafe { core::mem::zeroed() };
        ops.driver_id = T::DRIVER_ID.to_raw();
        ops.uverbs_abi_ver = T::ABI_VERSION;
        ops.query_device = Some(Self::query_device);
        ops.query_port = Some(Self::query_port);
        ops.query_gid = Some(Self::query_gid);
        ops.get_port_immutable = Some(Self::get_port_immutable);
        ops.dealloc_driver = Some(Self::dealloc_driver);
        ops.alloc_pd = Some(Self::alloc_pd);
        ops.dealloc_pd = Some(Self::dealloc_pd);
        ops.size_ib_pd = core::mem::size_of::<Pd<T>>();
        ops.create_cq = Some(Self::create_cq);
        ops.destroy_cq = Some(Self::destroy_cq);
        ops.poll_cq = Some(Self::poll_cq);
        ops.req_notify_cq = Some(Self::req_notify_cq);
        ops.size_ib_cq = core::mem::size_of::<Cq<T>>();
        ops.create_qp = Some(Self::create_qp);
        ops.destroy_qp = Some(Self::destroy_qp);
        ops.modify_qp = Some(Self::modify_qp);
        ops.query_qp = Some(Self::query_qp);
        ops.post_send = Some(Self::post_send);
        ops.post_recv = Some(Self::post_recv);
        ops.iw_get_qp = Some(Self::iw_get_qp);
        ops.iw_add_ref = Some(Self::iw_add_ref);
        ops.iw_rem_ref = Some(Self::iw_rem_ref);
        ops.size_ib_qp = core::mem::size_of::<Qp<T>>();
        ops.get_dma_mr = Some(Self::get_dma_mr);
        ops.alloc_mr = Some(Self::alloc_mr);
        ops.reg_user_mr = Some(Self::reg_user_mr);
        ops.dereg_mr = Some(Self::dereg_mr);
        ops.map_mr_sg = Some(Self::map_mr_sg);
        if T::HAS_CREATE_SRQ {
            assert!(
                T::HAS_POST_SRQ_RECV,
                "a driver that creates SRQs must implement post_srq_recv"
            );
            ops.create_srq = Some(Self::create_srq);
            ops.destroy_srq = Some(Self::destroy_srq);
            ops.modify_srq = Some(Self::modify_srq);
            ops.query_srq = Some(Self::query_srq);
            ops.post_srq_recv = Some(Self::post_srq_recv);
            ops.size_ib_srq = core::mem::size_of::<Srq<T>>();
        }
        super::iwcm::fill_ops::<T::IwCm>(&mut ops);
        if T::HAS_FILL_RES_QP {
            ops.fill_res_qp_entry = Some(Self::fill_res_qp_entry);
        }
        if T::HAS_FILL_RES_CM_ID {
            ops.fill_res_cm_id_entry = Some(Self::fill_res_cm_id_entry);
        }
        if T::HAS_GET_HW_STATS {
            ops.alloc_hw_port_stats = Some(Self::alloc_hw_port_stats);
            ops.get_hw_stats = Some(Self::get_hw_stats);
        }
        if T::HAS_COUNTER_BIND_QP {
            assert!(
                T::HAS_COUNTER_UNBIND_QP
                    && T::HAS_COUNTER_DEALLOC
                    && T::HAS_COUNTER_UPDATE_STATS
                    && T::HAS_GET_HW_STATS,
                "a driver with QP counters implements all their ops and has port counters"
            );
            ops.counter_bind_qp = Some(Self::counter_bind_qp);
            ops.counter_unbind_qp = Some(Self::counter_unbind_qp);
            ops.counter_dealloc = Some(Self::counter_dealloc);
            ops.counter_alloc_stats = Some(Self::counter_alloc_stats);
            ops.counter_update_stats = Some(Self::counter_update_stats);
        }
        if T::HAS_ALLOC_UCONTEXT {
            ops.alloc_ucontext = Some(Self::alloc_ucontext);
            ops.dealloc_ucontext = Some(Self::dealloc_ucontext);
            // User contexts map only ordinary memory (`user_map`), whose pages the mappings keep,
            // so they can always be disassociated. Without this, unregistering the device would
            // wait for user space to close the uverbs file first, while an rdma_cm user waits
            // for the DEVICE_REMOVAL event that comes after.
            ops.disassociate_ucontext = Some(Self::disassociate_ucontext);
            ops.size_ib_ucontext = core::mem::size_of::<bindings::ib_ucontext>();
            ops.mmap = Some(super::user_map::mmap);
            ops.mmap_free = Some(super::user_map::free_entry);
        }
        ops
    };

    /// # Safety
    ///
    /// `ibdev` must be a live device with these ops.
    unsafe fn dev<'a>(ibdev: *mut bindings::ib_device) -> &'a Device<T> {
        // SAFETY: The core calls `T`'s ops only on devices set up by `Registry::<T>::register`.
        unsafe { Device::from_raw(ibdev) }
    }

    /// `ib_device_ops.query_device`: reports the device's attributes (at registration, where the
    /// core caches them, and for uverbs `EX_QUERY_DEVICE`).
    ///
    /// # Safety
    ///
    /// `ibdev` is a live device whose ops are `T`'s; `attr` is valid for writes for the call;
    /// `udata` is null or valid for the call.
    unsafe extern "C" fn query_device(
        ibdev: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        from_result(|| {
            // SAFETY: The core passes a device with our ops and a writable `attr`.
            let (dev, out) = unsafe { (Self::dev(ibdev), &mut *attr) };
            // Reject unknown extended-request input, as the uverbs ABI asks.
            // SAFETY: `udata` is null (kernel) or valid for the call.
            if !udata.is_null() && unsafe { (*udata).inlen } != 0 {
                return Err(EINVAL);
            }
            let a = T::query_device(dev)?;
            out.fw_ver = a.fw_ver;
            out.sys_image_guid = a.sys_image_guid.to_be();
            out.max_mr_size = a.max_mr_size;
            out.page_size_cap = a.page_size_cap;
            out.vendor_id = a.vendor_id;
            out.vendor_part_id = a.vendor_part_id;
            out.hw_ver = a.hw_ver;
            out.max_qp = clamp_i32(a.max_qp);
            out.max_qp_wr = clamp_i32(a.max_qp_wr);
            out.device_cap_flags = a.device_cap_flags;
            out.kernel_cap_flags = a.kernel_cap_flags;
            out.max_send_sge = clamp_i32(a.max_send_sge);
            out.max_recv_sge = clamp_i32(a.max_recv_sge);
            out.max_sge_rd = clamp_i32(a.max_sge_rd);
            out.max_cq = clamp_i32(a.max_cq);
            out.max_cqe = clamp_i32(a.max_cqe);
            out.max_mr = clamp_i32(a.max_mr);
            out.max_pd = clamp_i32(a.max_pd);
            out.max_qp_rd_atom = clamp_i32(a.max_qp_rd_atom);
            out.max_qp_init_rd_atom = clamp_i32(a.max_qp_init_rd_atom);
            out.max_res_rd_atom = clamp_i32(a.max_res_rd_atom);
            out.max_srq = clamp_i32(a.max_srq);
            out.max_srq_wr = clamp_i32(a.max_srq_wr);
            out.max_srq_sge = clamp_i32(a.max_srq_sge);
            out.max_fast_reg_page_list_len = a.max_fast_reg_page_list_len;
            out.max_pkeys = a.max_pkeys;
            out.local_ca_ack_delay = a.local_ca_ack_delay;
            Ok(0)
        })
    }

    /// `ib_device_ops.query_port`: reports the attributes of port `port` (`ib_query_port`).
    ///
    /// # Safety
    ///
    /// `ibdev` is a live device whose ops are `T`'s; `attr` is valid for writes for the call.
    unsafe extern "C" fn query_port(
        ibdev: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> crate::ffi::c_int {
        from_result(|| {
            // SAFETY: The core passes a device with our ops and a writable `attr`.
            let (dev, out) = unsafe { (Self::dev(ibdev), &mut *attr) };
            let a = T::query_port(dev, port)?;
            out.state = match a.state {
                PortState::Down => bindings::ib_port_state_IB_PORT_DOWN,
                PortState::Init => bindings::ib_port_state_IB_PORT_INIT,
                PortState::Active => bindings::ib_port_state_IB_PORT_ACTIVE,
            };
            // CAST: The physical states fit the `u8` field.
            out.phys_state = match a.phys_state {
                PortPhysState::Disabled => bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED,
                PortPhysState::LinkUp => bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP,
            } as u8;
            out.max_mtu = mtu_to_enum(a.max_mtu);
            out.active_mtu = mtu_to_enum(a.active_mtu);
            out.active_speed = a.active_speed;
            out.active_width = a.active_width;
            out.gid_tbl_len = a.gid_tbl_len;
            out.max_msg_sz = a.max_msg_sz;
            out.port_cap_flags = bindings::ib_port_capability_mask_bits_IB_PORT_CM_SUP
                | bindings::ib_port_capability_mask_bits_IB_PORT_DEVICE_MGMT_SUP;
            Ok(0)
        })
    }

    /// `ib_device_ops.query_gid`: reads GID `index` of `port` (the core fills its GID cache with it
    /// at registration).
    ///
    /// # Safety
    ///
    /// `ibdev` is a live device whose ops are `T`'s; `gid` is valid for writes for the call.
    /// `index` need not be in range: it is checked here.
    unsafe extern "C" fn query_gid(
        ibdev: *mut bindings::ib_device,
        port: u32,
        index: crate::ffi::c_int,
        gid: *mut bindings::ib_gid,
    ) -> crate::ffi::c_int {
        from_result(|| {
            let index = u32::try_from(index).map_err(|_| EINVAL)?;
            if index >= T::GID_TABLE_LEN {
                return Err(EINVAL);
            }
            // SAFETY: The core passes a device with our ops.
            let raw = T::query_gid(unsafe { Self::dev(ibdev) }, port, index)?;
            // SAFETY: `gid` is writable; `raw` is the 16-byte GID.
            unsafe { (*gid).raw = raw };
            Ok(0)
        })
    }

    /// `ib_device_ops.get_port_immutable`: reports a port's fixed properties (at registration).
    ///
    /// # Safety
    ///
    /// `imm` is valid for writes for the call. `_ibdev` is not used.
    unsafe extern "C" fn get_port_immutable(
        _ibdev: *mut bindings::ib_device,
        port: u32,
        imm: *mut bindings::ib_port_immutable,
    ) -> crate::ffi::c_int {
        if port != 1 {
            return EINVAL.to_errno();
        }
        // SAFETY: `imm` is writable for the call.
        let imm = unsafe { &mut *imm };
        // CAST: Drivers declare small GID tables.
        imm.gid_tbl_len = T::GID_TABLE_LEN as i32;
        imm.core_cap_flags = bindings::RDMA_CORE_CAP_PROT_IWARP | bindings::RDMA_CORE_CAP_IW_CM;
        0
    }

    /// `ib_device_ops.alloc_ucontext`: sets up a user context (uverbs `GET_CONTEXT`).
    ///
    /// # Safety
    ///
    /// `uctx` is a core-allocated context whose `device` is a live device with `T`'s ops; `udata`
    /// is null or valid for the call.
    unsafe extern "C" fn alloc_ucontext(
        uctx: *mut bindings::ib_ucontext,
        udata: *mut bindings::ib_udata,
    ) -> crate::ffi::c_int {
        from_result(|| {
            // SAFETY: The core passes a context of a device with our ops.
            let dev = unsafe { Self::dev((*uctx).device) };
            // SAFETY: `udata` is null or valid for the call.
            let mut udata = unsafe { UserData::from_raw(udata) };
            T::alloc_ucontext(dev, &mut udata)?;
            Ok(0)
        })
    }

    /// `ib_device_ops.fill_res_qp_entry`: adds the driver's details of a QP to a netlink resource
    /// dump (`rdma resource show qp -dd`).
    ///
    /// # Safety
    ///
    /// `ibqp` is a QP of this driver whose `create_qp` succeeded and whose `destroy_qp` has not
    /// started (nldev holds a restrack reference, which `ib_destroy_qp_user` drains first); `msg`
    /// is the netlink message the core is building, used by nothing else during the call.
    unsafe extern "C" fn fill_res_qp_entry(
        msg: *mut bindings::sk_buff,
        ibqp: *mut bindings::ib_qp,
    ) -> crate::ffi::c_int {
        // SAFETY: The core passes a QP of ours that restrack keeps alive during the call.
        let qp = unsafe { &*ibqp.cast::<Qp<T>>() };
        // SAFETY: `msg` is the message the core is building for this entry.
        unsafe { super::res::fill_details(msg, |d| T::fill_res_qp(qp, d)) }
    }

    /// `ib_device_ops.fill_res_cm_id_entry`: adds the driver's details of an `rdma_cm_id` to a
    /// netlink resource dump (`rdma resource show cm_id -dd`).
    ///
    /// # Safety
    ///
    /// `cm_id` is an `rdma_cm_id` on a device of this driver that nldev keeps alive during the
    /// call (it holds a restrack reference, which `rdma_destroy_id` drains first); `msg` is the
    /// netlink message the core is building, used by nothing else during the call.
    unsafe extern "C" fn fill_res_cm_id_entry(
        msg: *mut bindings::sk_buff,
        cm_id: *mut bindings::rdma_cm_id,
    ) -> crate::ffi::c_int {
        // SAFETY: `cm_id` is alive (see above); the function only reads which `iw_cm_id` the
        // RDMA CM made for it, if any.
        let iw = unsafe { bindings::rdma_iw_cm_id(cm_id) };
        if iw.is_null() {
            return 0;
        }
        // SAFETY: The core calls the op of the id's own device, one of ours, which it holds
        // during the dump.
        let dev = unsafe { Device::<T>::from_raw((*cm_id).device) };
        let key = super::iwcm::CmIdKey::of(iw);
        // SAFETY: `msg` is the message the core is building for this entry.
        unsafe { super::res::fill_details(msg, |d| T::fill_res_cm_id(dev, key, d)) }
    }

    /// `ib_device_ops.alloc_hw_port_stats`: allocates the `rdma_hw_stats` for a port's counters,
    /// named by [`Driver::HW_STATS`] (for sysfs `hw_counters` and the port's counter state).
    ///
    /// # Safety
    ///
    /// No requirement beyond the C signature: no argument is used. The caller owns the result and
    /// frees it with `rdma_free_hw_stats_struct`.
    unsafe extern "C" fn alloc_hw_port_stats(
        _ibdev: *mut bindings::ib_device,
        _port: u32,
    ) -> *mut bindings::rdma_hw_stats {
        let Ok(n) = i32::try_from(T::HW_STATS.len()) else {
            return core::ptr::null_mut();
        };
        // CAST: A lifespan of some milliseconds fits any `c_ulong`.
        let lifespan = bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as crate::ffi::c_ulong;
        // SAFETY: The descriptors are static, as the core needs them for the device's lifetime;
        // the core frees the struct (or the function returns null).
        unsafe { bindings::rdma_alloc_hw_stats_struct(StatDesc::as_raw(T::HW_STATS), n, lifespan) }
    }

    /// `ib_device_ops.get_hw_stats`: reads port `port`'s counters into `stats->value` and returns
    /// how many there are (sysfs `hw_counters`, `rdma statistic`).
    ///
    /// # Safety
    ///
    /// `ibdev` is a live device whose ops are `T`'s; `stats` was returned by this driver's
    /// `alloc_hw_port_stats` and not freed, and the caller holds `stats->lock` (or, during
    /// registration, has not published `stats` yet). `_index` is not used.
    unsafe extern "C" fn get_hw_stats(
        ibdev: *mut bindings::ib_device,
        stats: *mut bindings::rdma_hw_stats,
        port: u32,
        _index: crate::ffi::c_int,
    ) -> crate::ffi::c_int {
        // SAFETY: `stats` came from `alloc_hw_port_stats` above, and the core holds
        // `stats->lock` around the call (or has not published `stats` yet).
        let (n, values) = unsafe { Self::stats_values(stats) };
        // SAFETY: The core passes a device with our ops.
        T::get_hw_stats(unsafe { Self::dev(ibdev) }, port, values);
        n
    }

    /// The values of `stats`: its `num_counters`, and as many of them as [`Driver::HW_STATS`]
    /// names.
    ///
    /// # Safety
    ///
    /// `stats` came from `alloc_hw_port_stats` above (`num_counters` values follow it, one for
    /// each of `T::HW_STATS`) and is not freed while the result lives; nothing else reads or
    /// writes its values meanwhile (the caller holds the lock the core keeps them under).
    unsafe fn stats_values<'a>(stats: *mut bindings::rdma_hw_stats) -> (i32, &'a mut [u64]) {
        // SAFETY: `stats` is live (the caller's contract).
        let n = unsafe { (*stats).num_counters };
        let len = usize::try_from(n).unwrap_or(0).min(T::HW_STATS.len());
        // SAFETY: `len` values follow `stats`, used by nothing else while the slice lives (the
        // caller's contract).
        let values = unsafe {
            core::slice::from_raw_parts_mut(
                core::ptr::addr_of_mut!((*stats).value).cast::<u64>(),
                len,
            )
        };
        (n, values)
    }

    /// `ib_device_ops.counter_bind_qp`: binds a QP to a QP counter, naming a new counter.
    ///
    /// # Safety
    ///
    /// `counter` is a live QP counter of this device whose `lock` the caller holds, and `ibqp` a
    /// live QP of this driver (the core binds QPs it holds, before their `destroy_qp`) not bound
    /// to any counter.
    unsafe extern "C" fn counter_bind_qp(
        counter: *mut bindings::rdma_counter,
        ibqp: *mut bindings::ib_qp,
    ) -> crate::ffi::c_int {
        // SAFETY: The core passes a QP of ours that it keeps alive during the call.
        let qp = unsafe { &*ibqp.cast::<Qp<T>>() };
        // SAFETY: `counter` is live and its lock, held by the caller, covers `id`; `port` is set
        // when the counter is made.
        let (id, port) = unsafe { ((*counter).id, (*counter).port) };
        match T::counter_bind_qp(qp, NonZeroU32::new(id), port) {
            Ok(id) => {
                // SAFETY: As above. The core reads `qp->counter` to unbind, under the counter's
                // lock or when it destroys the QP, neither of which runs concurrently.
                unsafe {
                    (*counter).id = id.get();
                    (*ibqp).counter = counter;
                }
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// `ib_device_ops.counter_unbind_qp`: unbinds a QP from its QP counter.
    ///
    /// # Safety
    ///
    /// `ibqp` is a live QP of this driver bound to a counter (`counter_bind_qp` above set
    /// `ibqp->counter`), whose `lock` the caller holds.
    unsafe extern "C" fn counter_unbind_qp(ibqp: *mut bindings::ib_qp) -> crate::ffi::c_int {
        // SAFETY: The core passes a QP of ours that it keeps alive during the call.
        let qp = unsafe { &*ibqp.cast::<Qp<T>>() };
        // SAFETY: `counter_bind_qp` set `counter` to a live counter, which the core keeps until
        // the QP is unbound; the caller holds its lock.
        let id = unsafe { (*(*ibqp).counter).id };
        // A bound counter was named by `counter_bind_qp`.
        let Some(id) = NonZeroU32::new(id) else {
            return EINVAL.to_errno();
        };
        match T::counter_unbind_qp(qp, id) {
            Ok(()) => {
                // SAFETY: As above.
                unsafe { (*ibqp).counter = core::ptr::null_mut() };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// `ib_device_ops.counter_dealloc`: frees the driver's state of a QP counter.
    ///
    /// # Safety
    ///
    /// `counter` is a QP counter of this device that the core is freeing: no QP is bound to it
    /// and nothing else uses it.
    unsafe extern "C" fn counter_dealloc(
        counter: *mut bindings::rdma_counter,
    ) -> crate::ffi::c_int {
        // SAFETY: `counter` is live and used by nothing else.
        let (ibdev, id) = unsafe { ((*counter).device, (*counter).id) };
        // A counter whose first binding failed was never named: nothing to free.
        if let Some(id) = NonZeroU32::new(id) {
            // SAFETY: The counter belongs to a device with our ops.
            T::counter_dealloc(unsafe { Self::dev(ibdev) }, id);
        }
        0
    }

    /// `ib_device_ops.counter_alloc_stats`: allocates the `rdma_hw_stats` of a QP counter, or of
    /// a port's history of freed counters (`counter` null). They have the port's counters,
    /// [`Driver::HW_STATS`]: the core adds them up by the port's indexes.
    ///
    /// # Safety
    ///
    /// No requirement beyond the C signature: `_counter` is not used. The caller owns the result
    /// and frees it with `rdma_free_hw_stats_struct`.
    unsafe extern "C" fn counter_alloc_stats(
        _counter: *mut bindings::rdma_counter,
    ) -> *mut bindings::rdma_hw_stats {
        // SAFETY: No requirement: the port's allocation uses no argument.
        unsafe { Self::alloc_hw_port_stats(core::ptr::null_mut(), 0) }
    }

    /// `ib_device_ops.counter_update_stats`: reads a QP counter into `counter->stats->value`.
    ///
    /// # Safety
    ///
    /// `counter` is a live QP counter of this device whose `lock` the caller holds, and whose
    /// `stats` came from `counter_alloc_stats` above.
    unsafe extern "C" fn counter_update_stats(
        counter: *mut bindings::rdma_counter,
    ) -> crate::ffi::c_int {
        // SAFETY: `counter` is live; its lock, held by the caller, covers `id` and the values.
        let (ibdev, id, stats) = unsafe { ((*counter).device, (*counter).id, (*counter).stats) };
        let Some(id) = NonZeroU32::new(id) else {
            return EINVAL.to_errno();
        };
        // SAFETY: `stats` came from `counter_alloc_stats`, which allocates as
        // `alloc_hw_port_stats` does; the caller holds the counter's lock, which covers them.
        let (_, values) = unsafe { Self::stats_values(stats) };
        // SAFETY: The counter belongs to a device with our ops.
        match T::counter_update_stats(unsafe { Self::dev(ibdev) }, id, values) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    /// `ib_device_ops.dealloc_ucontext`: tears down a user context; there is nothing to do, as the
    /// adapter keeps no per-context data.
    ///
    /// # Safety
    ///
    /// No requirement beyond the C signature: `_uctx` is not used.
    unsafe extern "C" fn dealloc_ucontext(_uctx: *mut bindings::ib_ucontext) {}

    /// `ib_device_ops.disassociate_ucontext`: detaches a user context from a device being
    /// unregistered; there is nothing to do, as contexts map no device memory (the rings' pages
    /// stay with the processes that map them).
    ///
    /// # Safety
    ///
    /// No requirement beyond the C signature: `_uctx` is not used.
    unsafe extern "C" fn disassociate_ucontext(_uctx: *mut bindings::ib_ucontext) {}

    /// `ib_device_ops.dealloc_driver`: drops the driver's data of a device and removes it from its
    /// [`Registry`] (`ib_dealloc_device`, before the core frees the device).
    ///
    /// # Safety
    ///
    /// `ibdev` is a device set up by [`Registry::register`] with these ops, so `data` is
    /// initialised and `registry` valid; this is called once for it, as the last op: no other op of
    /// the device runs concurrently or afterwards.
    unsafe extern "C" fn dealloc_driver(ibdev: *mut bindings::ib_device) {
        let dev = ibdev.cast::<Device<T>>();
        // SAFETY: This is the last op the core calls; `registry` outlives all its devices.
        let registry = unsafe { &*(*dev).registry };
        // SAFETY: `data` was initialized in `register` and is dropped exactly once, here; the
        // core frees the memory afterwards.
        unsafe { core::ptr::drop_in_place(core::ptr::addr_of_mut!((*dev).data)) };
        registry.remove(ibdev);
    }
}

fn clamp_i32(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}
