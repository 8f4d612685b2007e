// SPDX-License-Identifier: GPL-2.0

//! Driver details of resources: what `rdma resource show qp -dd` prints after the core's own
//! attributes of a QP.
//!
//! C header: [`include/rdma/rdma_netlink.h`](srctree/include/rdma/rdma_netlink.h).

use crate::{bindings, error::to_result, error::Result, ffi::c_int, str::CStr};
use core::{fmt, marker::PhantomData};

/// The driver-details table (`RDMA_NLDEV_ATTR_DRIVER`) of one resource in a netlink message
/// being built. Each entry is a name and a value.
pub struct ResDetails<'a> {
    msg: *mut bindings::sk_buff,
    _msg: PhantomData<&'a mut bindings::sk_buff>,
}

impl ResDetails<'_> {
    /// Adds `name` with the number `value`.
    pub fn put_u32(&mut self, name: &CStr, value: u32) -> Result {
        // SAFETY: `msg` is the message being built, exclusively ours during the fill.
        to_result(unsafe { bindings::rdma_nl_put_driver_u32(self.msg, name.as_char_ptr(), value) })
    }

    /// Adds `name` with the number `value`, shown in hex.
    pub fn put_u32_hex(&mut self, name: &CStr, value: u32) -> Result {
        // SAFETY: As in `put_u32`.
        to_result(unsafe {
            bindings::rdma_nl_put_driver_u32_hex(self.msg, name.as_char_ptr(), value)
        })
    }

    /// Adds `name` with the text `args` formats to (at most 63 bytes; longer text is cut).
    pub fn put_fmt(&mut self, name: &CStr, args: fmt::Arguments<'_>) -> Result {
        let mut buf = Text {
            bytes: [0; 64],
            len: 0,
        };
        // A text too long is cut where it stopped fitting.
        let _ = fmt::write(&mut buf, args);
        // INVARIANT of `Text`: `len` < 64 and the rest of `bytes` is zero, so it ends in a NUL.
        // SAFETY: As in `put_u32`; `buf.bytes` is NUL-terminated.
        to_result(unsafe {
            bindings::rdma_nl_put_driver_string(
                self.msg,
                name.as_char_ptr(),
                buf.bytes.as_ptr().cast(),
            )
        })
    }
}

/// A formatting buffer that keeps a NUL at its end.
///
/// # Invariants
///
/// `len` < `bytes.len()`, and `bytes[len..]` is zero.
struct Text {
    bytes: [u8; 64],
    len: usize,
}

impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.bytes.len() - 1 - self.len;
        if s.len() > room {
            return Err(fmt::Error);
        }
        let end = self.len + s.len();
        // A NUL inside would end the text early; the invariant still holds.
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Opens the driver-details table in `msg`, has `fill` add to it, and closes it; if `fill`
/// fails (the message is full), takes the table out again. Returns the errno for the core.
///
/// # Safety
///
/// `msg` is a netlink message the core is building and hands to the driver for this call.
pub(crate) unsafe fn fill_details(
    msg: *mut bindings::sk_buff,
    fill: impl FnOnce(&mut ResDetails<'_>) -> Result,
) -> c_int {
    // CAST: The attribute number is small.
    let attr = bindings::rdma_nldev_attr_RDMA_NLDEV_ATTR_DRIVER as c_int;
    // SAFETY: `msg` is a message being built, as the caller promised.
    let table = unsafe { bindings::nla_nest_start_noflag(msg, attr) };
    if table.is_null() {
        return crate::errno::emsgsize().to_errno();
    }
    let mut details = ResDetails {
        msg,
        _msg: PhantomData,
    };
    match fill(&mut details) {
        Ok(()) => {
            // SAFETY: `table` was opened in `msg` above and is the innermost open table.
            unsafe { bindings::nla_nest_end(msg, table) };
            0
        }
        Err(e) => {
            // SAFETY: As above.
            unsafe { bindings::nla_nest_cancel(msg, table) };
            e.to_errno()
        }
    }
}
