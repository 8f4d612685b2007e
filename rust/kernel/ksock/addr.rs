// SPDX-License-Identifier: GPL-2.0

//! Socket addresses: [`core::net::SocketAddr`] and the kernel's `sockaddr_in`/`sockaddr_in6`.

use super::errno::eafnosupport;
use crate::{bindings, error::code::EINVAL, ffi::c_int, prelude::*};
use core::mem::size_of;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The address family of a socket.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Family {
    /// IPv4 (`AF_INET`).
    Inet,
    /// IPv6 (`AF_INET6`).
    Inet6,
}

impl Family {
    /// The family of `addr`.
    pub fn of(addr: &SocketAddr) -> Self {
        match addr {
            SocketAddr::V4(_) => Family::Inet,
            SocketAddr::V6(_) => Family::Inet6,
        }
    }

    /// The `AF_*` constant.
    pub(crate) fn as_raw(self) -> c_int {
        // CAST: `AF_*` constants are small.
        match self {
            Family::Inet => bindings::AF_INET as c_int,
            Family::Inet6 => bindings::AF_INET6 as c_int,
        }
    }
}

/// A socket address in the kernel's binary form, large enough for any family.
///
/// Always fully initialized: it is created from a zeroed `sockaddr_storage`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union RawSockAddr {
    v4: bindings::sockaddr_in,
    v6: bindings::sockaddr_in6,
    storage: bindings::__kernel_sockaddr_storage,
}

// CAST: The sizes of the address structures are small constants.
const SOCKADDR_IN_LEN: c_int = size_of::<bindings::sockaddr_in>() as c_int;
// CAST: See above.
const SOCKADDR_IN6_LEN: c_int = size_of::<bindings::sockaddr_in6>() as c_int;

impl RawSockAddr {
    /// An all-zero address (family `AF_UNSPEC`).
    pub(crate) fn zeroed() -> Self {
        // `storage` is the largest member, so every byte of the union is initialized.
        RawSockAddr {
            storage: bindings::__kernel_sockaddr_storage::default(),
        }
    }

    /// The binary form of `addr` and its length.
    pub(crate) fn new(addr: &SocketAddr) -> (Self, c_int) {
        let mut raw = Self::zeroed();
        match addr {
            SocketAddr::V4(a) => {
                raw.v4 = bindings::sockaddr_in {
                    // CAST: `AF_INET` fits in `sa_family_t`.
                    sin_family: bindings::AF_INET as bindings::__kernel_sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: bindings::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    __pad: [0; 8],
                };
                (raw, SOCKADDR_IN_LEN)
            }
            SocketAddr::V6(a) => {
                raw.v6 = bindings::sockaddr_in6 {
                    // CAST: `AF_INET6` fits in `sa_family_t`.
                    sin6_family: bindings::AF_INET6 as crate::ffi::c_ushort,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: bindings::in6_addr {
                        in6_u: bindings::in6_addr__bindgen_ty_1 {
                            u6_addr8: a.ip().octets(),
                        },
                    },
                    sin6_scope_id: a.scope_id(),
                };
                (raw, SOCKADDR_IN6_LEN)
            }
        }
    }

    /// A pointer for the kernel's `struct sockaddr *` parameters.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut bindings::sockaddr {
        core::ptr::from_mut(self).cast()
    }

    /// Decodes the address, of which the kernel filled in `len` bytes.
    pub(crate) fn decode(&self, len: c_int) -> Result<SocketAddr> {
        // SAFETY: All members are plain integers and every byte is initialized (see `zeroed`).
        let family = u32::from(unsafe { self.v4.sin_family });
        if family == bindings::AF_INET && len >= SOCKADDR_IN_LEN {
            // SAFETY: As above.
            let a = unsafe { self.v4 };
            let ip = Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes());
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(a.sin_port),
            )))
        } else if family == bindings::AF_INET6 && len >= SOCKADDR_IN6_LEN {
            // SAFETY: As above.
            let a = unsafe { self.v6 };
            // SAFETY: Every member of the `in6_addr` union is a plain integer array.
            let ip = Ipv6Addr::from(unsafe { a.sin6_addr.in6_u.u6_addr8 });
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                u32::from_be(a.sin6_flowinfo),
                a.sin6_scope_id,
            )))
        } else if family == bindings::AF_INET || family == bindings::AF_INET6 {
            Err(EINVAL)
        } else {
            Err(eafnosupport())
        }
    }
}

/// Decodes a `struct sockaddr_storage` holding an IPv4 or IPv6 address (as in `iw_cm_id`).
///
/// Fails with `EAFNOSUPPORT` for any other family.
pub fn from_sockaddr_storage(ss: &bindings::__kernel_sockaddr_storage) -> Result<SocketAddr> {
    let raw = RawSockAddr { storage: *ss };
    // CAST: The size of `sockaddr_storage` (128) fits.
    raw.decode(size_of::<bindings::__kernel_sockaddr_storage>() as c_int)
}

/// Encodes `addr` as a `struct sockaddr_storage`.
pub fn to_sockaddr_storage(addr: &SocketAddr) -> bindings::__kernel_sockaddr_storage {
    let (raw, _) = RawSockAddr::new(addr);
    // SAFETY: Every byte of the union is initialized (see `zeroed`), and `storage` is plain data.
    unsafe { raw.storage }
}
