// SPDX-License-Identifier: GPL-2.0

//! Network devices: a reference-counted `struct net_device` and netdevice notifiers.
//!
//! C headers: [`include/linux/netdevice.h`](srctree/include/linux/netdevice.h),
//! [`include/linux/notifier.h`](srctree/include/linux/notifier.h).

use crate::{
    bindings,
    error::to_result,
    prelude::*,
    types::{ARef, AlwaysRefCounted, Opaque},
};
use core::{marker::PhantomData, ptr::NonNull};

/// Hardware type of an Ethernet device (`ARPHRD_ETHER`).
pub const ARPHRD_ETHER: u16 = bindings::ARPHRD_ETHER as u16;
/// Hardware type of an IEEE 802.2 device (`ARPHRD_IEEE802`).
pub const ARPHRD_IEEE802: u16 = bindings::ARPHRD_IEEE802 as u16;
/// Hardware type of the loopback device (`ARPHRD_LOOPBACK`).
pub const ARPHRD_LOOPBACK: u16 = bindings::ARPHRD_LOOPBACK as u16;

/// Length of a MAC address of an Ethernet-like device.
pub const ETH_ALEN: usize = bindings::ETH_ALEN as usize;

/// Length of a network device name buffer, including its NUL (`IFNAMSIZ`).
pub const IFNAMSIZ: usize = bindings::IFNAMSIZ as usize;

/// A network device.
///
/// Wraps the kernel's `struct net_device`. Handles to it are either borrowed for the duration of a
/// callback or held as [`ARef<NetDevice>`], which owns a `dev_hold` reference.
///
/// # Invariants
///
/// The wrapped `net_device` is valid and its reference count is non-zero for the lifetime of
/// every `&NetDevice`.
#[repr(transparent)]
pub struct NetDevice(Opaque<bindings::net_device>);

// SAFETY: `net_device` is designed to be shared between threads; the fields read here are either
// immutable after registration or read with the same tolerance for races as C readers have.
unsafe impl Send for NetDevice {}
// SAFETY: See above: all methods taking `&self` are safe to call concurrently.
unsafe impl Sync for NetDevice {}

// SAFETY: `dev_hold`/`dev_put` keep the device alive; the type invariant guarantees a non-zero count.
unsafe impl AlwaysRefCounted for NetDevice {
    fn inc_ref(&self) {
        // SAFETY: By the type invariant the device is valid and already referenced.
        unsafe { bindings::dev_hold(self.as_raw()) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference taken by `inc_ref` or `dev_get_by_*`.
        unsafe { bindings::dev_put(obj.cast::<bindings::net_device>().as_ptr()) };
    }
}

/// A copy of a network device's name, taken at one point in time.
///
/// Names can change under RTNL at any time, so rsiw never keeps a pointer to the live name.
#[derive(Clone, Copy)]
pub struct NetDevName([u8; IFNAMSIZ]);

impl NetDevName {
    /// The name as a C string.
    pub fn as_cstr(&self) -> &CStr {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(IFNAMSIZ - 1);
        // `get(..=len)` always succeeds because `len < IFNAMSIZ`; the last byte is forced to NUL
        // when the name was copied.
        CStr::from_bytes_with_nul(self.0.get(..=len).unwrap_or(&[0])).unwrap_or(crate::c_str!(""))
    }
}

impl core::fmt::Display for NetDevName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self.as_cstr(), f)
    }
}

impl NetDevice {
    /// Borrows a `net_device` for the duration of `'a`.
    ///
    /// # Safety
    ///
    /// `ptr` must point at a valid `net_device` that stays referenced for `'a`.
    pub unsafe fn from_raw<'a>(ptr: *const bindings::net_device) -> &'a Self {
        // SAFETY: `NetDevice` is a transparent wrapper; the caller guarantees validity for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// Returns the raw `net_device` pointer.
    pub fn as_raw(&self) -> *mut bindings::net_device {
        self.0.get()
    }

    /// A snapshot of the device's name.
    pub fn name(&self) -> NetDevName {
        let mut buf = [0u8; IFNAMSIZ];
        // SAFETY: `name` is an `IFNAMSIZ` array inside a valid `net_device`. A concurrent rename
        // can at worst give a torn copy, which the forced NUL below keeps well formed.
        let name = unsafe { &(*self.as_raw()).name };
        for (dst, src) in buf.iter_mut().zip(name.iter()) {
            *dst = *src;
        }
        buf[IFNAMSIZ - 1] = 0;
        NetDevName(buf)
    }

    /// The interface index.
    pub fn ifindex(&self) -> i32 {
        // SAFETY: The device is valid; `ifindex` is set once at registration.
        unsafe { (*self.as_raw()).ifindex }
    }

    /// The hardware type (`ARPHRD_*`).
    pub fn hw_type(&self) -> u16 {
        // SAFETY: The device is valid; `type_` is a plain integer.
        unsafe { (*self.as_raw()).type_ }
    }

    /// The current MTU.
    pub fn mtu(&self) -> u32 {
        // SAFETY: The device is valid; a racy read of an integer is what C readers do too.
        unsafe { core::ptr::read_volatile(&(*self.as_raw()).mtu) }
    }

    /// The largest MTU the device supports.
    pub fn max_mtu(&self) -> u32 {
        // SAFETY: The device is valid; `max_mtu` is a plain integer.
        unsafe { (*self.as_raw()).max_mtu }
    }

    /// The device's MAC address, if it has an Ethernet-sized one.
    pub fn mac_address(&self) -> Option<[u8; ETH_ALEN]> {
        // SAFETY: The device is valid; `addr_len` is a plain integer.
        let len = usize::from(unsafe { (*self.as_raw()).addr_len });
        if len != ETH_ALEN {
            return None;
        }
        // SAFETY: `dev_addr` points at `addr_len` (here `ETH_ALEN`) bytes for a registered device.
        let addr = unsafe { (*self.as_raw()).dev_addr };
        if addr.is_null() {
            return None;
        }
        let mut mac = [0u8; ETH_ALEN];
        // SAFETY: `addr` is valid for `ETH_ALEN` bytes, checked above.
        unsafe { core::ptr::copy_nonoverlapping(addr, mac.as_mut_ptr(), ETH_ALEN) };
        Some(mac)
    }

    /// The modified EUI-64 derived from the MAC address (`addrconf_addr_eui48`), if it has one.
    pub fn eui64(&self) -> Option<[u8; 8]> {
        let mac = self.mac_address()?;
        let mut eui = [0u8; 8];
        // SAFETY: `eui` has the 8 bytes and `mac` the 6 bytes the function accesses.
        unsafe { bindings::addrconf_addr_eui48(eui.as_mut_ptr(), mac.as_ptr().cast()) };
        Some(eui)
    }

    /// Whether the device is administratively up (`netif_running`).
    pub fn is_running(&self) -> bool {
        // SAFETY: The device is valid.
        unsafe { bindings::netif_running(self.as_raw()) }
    }

    /// Whether the device has carrier (`netif_carrier_ok`).
    pub fn has_carrier(&self) -> bool {
        // SAFETY: The device is valid.
        unsafe { bindings::netif_carrier_ok(self.as_raw()) }
    }

    /// Takes a new reference to the device.
    pub fn to_owned(&self) -> ARef<NetDevice> {
        ARef::from(self)
    }
}

/// A network device event, as delivered to a [`Notifier`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Event {
    /// The device was brought up (`NETDEV_UP`).
    Up,
    /// The device was brought down (`NETDEV_DOWN`).
    Down,
    /// The device's state changed, e.g. its carrier (`NETDEV_CHANGE`).
    Change,
    /// The device's MTU changed (`NETDEV_CHANGEMTU`).
    ChangeMtu,
    /// The device's hardware address changed (`NETDEV_CHANGEADDR`).
    ChangeAddr,
    /// The device was renamed (`NETDEV_CHANGENAME`).
    ChangeName,
    /// The device is being unregistered (`NETDEV_UNREGISTER`).
    Unregister,
    /// Any other event, with its raw `NETDEV_*` code.
    Other(u64),
}

impl Event {
    fn from_raw(code: u64) -> Self {
        match code as u32 {
            bindings::netdev_cmd_NETDEV_UP => Event::Up,
            bindings::netdev_cmd_NETDEV_DOWN => Event::Down,
            bindings::netdev_cmd_NETDEV_CHANGE => Event::Change,
            bindings::netdev_cmd_NETDEV_CHANGEMTU => Event::ChangeMtu,
            bindings::netdev_cmd_NETDEV_CHANGEADDR => Event::ChangeAddr,
            bindings::netdev_cmd_NETDEV_CHANGENAME => Event::ChangeName,
            bindings::netdev_cmd_NETDEV_UNREGISTER => Event::Unregister,
            _ => Event::Other(code),
        }
    }
}

/// A handler for netdevice notifier events.
///
/// Called with RTNL held, in process context.
pub trait Notifier: Sync + 'static {
    /// Handles `event` for `dev`.
    fn event(&self, dev: &NetDevice, event: Event);
}

/// A registered netdevice notifier.
///
/// The notifier is unregistered when this is dropped.
///
/// # Invariants
///
/// `nb` is registered with `register_netdevice_notifier` for the whole pinned lifetime, and
/// `handler` outlives the registration.
#[pin_data(PinnedDrop)]
pub struct NotifierRegistration<T: Notifier> {
    #[pin]
    nb: Opaque<bindings::notifier_block>,
    handler: T,
    _pin: PhantomData<core::marker::PhantomPinned>,
}

// SAFETY: The registration only hands out `&T` to the notifier chain, and `T: Sync`.
unsafe impl<T: Notifier> Sync for NotifierRegistration<T> {}
// SAFETY: Moving the (pinned) registration handle between threads is fine; `T: Sync + 'static`.
unsafe impl<T: Notifier + Send> Send for NotifierRegistration<T> {}

impl<T: Notifier> NotifierRegistration<T> {
    /// Registers `handler` for all netdevice events.
    ///
    /// `register_netdevice_notifier` replays `NETDEV_REGISTER`/`NETDEV_UP` for existing devices.
    pub fn new(handler: T) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            // `handler` is initialized before `nb`, so it exists by the time the first callback
            // (a replayed event for an existing device) runs.
            handler,
            nb <- {
                let init = |slot: *mut Opaque<bindings::notifier_block>| {
                    let nb = Opaque::raw_get(slot);
                    // SAFETY: `nb` is valid for writes; a zeroed notifier_block is its empty
                    // state.
                    unsafe {
                        nb.write(core::mem::zeroed());
                        (*nb).notifier_call = Some(Self::notifier_callback);
                    }
                    // SAFETY: `nb` is pinned inside `Self`, and `handler` is already initialized
                    // next to it; `PinnedDrop` unregisters it before either is freed.
                    to_result(unsafe { bindings::register_netdevice_notifier(nb) })
                };
                // SAFETY: `init` fully initializes the slot on success. On failure nothing was
                // registered, so leaving the slot uninitialized is fine.
                unsafe { crate::init::pin_init_from_closure(init) }
            },
            _pin: PhantomData,
        })
    }

    /// Callback for the C side.
    ///
    /// # Safety
    ///
    /// Only the C core calls this, with the pointers its contract for this callback guarantees.
    unsafe extern "C" fn notifier_callback(
        nb: *mut bindings::notifier_block,
        action: crate::ffi::c_ulong,
        data: *mut crate::ffi::c_void,
    ) -> crate::ffi::c_int {
        // SAFETY: `nb` is the `nb` field of a pinned `NotifierRegistration<T>` (it is only ever
        // registered by `new`), so `container_of` yields the registration.
        let this = unsafe {
            &*crate::container_of!(nb.cast::<Opaque<bindings::notifier_block>>(), Self, nb)
        };
        // SAFETY: Netdevice notifiers are passed a `netdev_notifier_info`.
        let dev = unsafe { bindings::netdev_notifier_info_to_dev(data.cast()) };
        if !dev.is_null() {
            // SAFETY: The notifier chain holds the device for the duration of the call.
            let dev = unsafe { NetDevice::from_raw(dev) };
            this.handler.event(dev, Event::from_raw(action as u64));
        }
        bindings::NOTIFY_DONE as crate::ffi::c_int
    }
}

#[pinned_drop]
impl<T: Notifier> PinnedDrop for NotifierRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant `nb` is registered.
        unsafe { bindings::unregister_netdevice_notifier(self.nb.get()) };
    }
}
