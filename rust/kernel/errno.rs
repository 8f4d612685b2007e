// SPDX-License-Identifier: GPL-2.0

//! Error codes that [`crate::error::code`] does not declare in this kernel (6.12), each defined
//! once here for every abstraction and driver. Newer kernels declare them in
//! `kernel::error::code`; see `Documentation/rsiw/design.rst` (shims).

use crate::{bindings, error::Error};

macro_rules! declare_errno {
    ($($(#[$meta:meta])* $name:ident => $code:ident;)*) => {
        $(
            $(#[$meta])*
            pub fn $name() -> Error {
                // CAST: Errno values are small positive integers.
                Error::from_errno(-(bindings::$code as i32))
            }
        )*
    };
}

declare_errno! {
    /// `EINPROGRESS`: operation now in progress.
    einprogress => EINPROGRESS;
    /// `EALREADY`: operation already in progress.
    ealready => EALREADY;
    /// `EISCONN`: the socket is already connected.
    eisconn => EISCONN;
    /// `ENOTCONN`: the socket is not connected.
    enotconn => ENOTCONN;
    /// `ECONNREFUSED`: connection refused.
    econnrefused => ECONNREFUSED;
    /// `ECONNRESET`: connection reset by peer.
    econnreset => ECONNRESET;
    /// `ECONNABORTED`: connection aborted.
    econnaborted => ECONNABORTED;
    /// `ETIMEDOUT`: connection timed out.
    etimedout => ETIMEDOUT;
    /// `EPIPE`: the connection was shut down for writing.
    epipe => EPIPE;
    /// `EADDRINUSE`: address already in use.
    eaddrinuse => EADDRINUSE;
    /// `EADDRNOTAVAIL`: cannot assign the requested address.
    eaddrnotavail => EADDRNOTAVAIL;
    /// `EAFNOSUPPORT`: address family not supported.
    eafnosupport => EAFNOSUPPORT;
    /// `ENETUNREACH`: network is unreachable.
    enetunreach => ENETUNREACH;
    /// `EHOSTUNREACH`: no route to host.
    ehostunreach => EHOSTUNREACH;
    /// `EPROTO`: protocol error.
    eproto => EPROTO;
    /// `EOPNOTSUPP`: operation not supported (what verbs return for a feature a device lacks).
    eopnotsupp => EOPNOTSUPP;
    /// `EMSGSIZE`: message too long.
    emsgsize => EMSGSIZE;
}
