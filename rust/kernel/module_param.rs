// SPDX-License-Identifier: GPL-2.0

//! Module parameters: settings given at load time (`modprobe NAME param=value`, or
//! `/etc/modprobe.d/`) and read and written later in `/sys/module/NAME/parameters/`.
//!
//! A driver keeps each value in a `static` of its own type, implementing [`ParamValue`] (how
//! text becomes a value, and back), and declares it with [`module_param!`]. The kernel parses
//! the load-time values before the module's `init` runs, and serializes every later write and
//! read of one module's parameters; the driver reads the values from any context, so they are
//! kept in atomics or the like.
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h).

use crate::{bindings, error::Result, ffi::c_char, str::CStr};
use core::fmt;

/// A parameter's value.
pub trait ParamValue: Sync + 'static {
    /// The type `modinfo` shows (`parmtype`), such as `bool`, `uint` or `charp`.
    const TYPE: &'static str;

    /// Whether the bare name, with no `=value`, is a setting (as for the kernel's booleans):
    /// then [`ParamValue::set`] gets an empty text. Otherwise the kernel refuses it.
    const NOARG: bool = false;

    /// Parses `text` and stores it, or refuses it (`EINVAL`: `modprobe` then fails, a write to
    /// sysfs returns the error). `text` comes without the newline a shell's `echo` adds; it is
    /// empty for a bare `NAME` on the command line (see [`ParamValue::NOARG`]).
    fn set(&self, text: &str) -> Result;

    /// Writes the current value, as `set` would take it.
    fn show(&self, f: &mut dyn fmt::Write) -> fmt::Result;
}

/// A parameter, as the kernel finds it in the module's `__param` section. Made by
/// [`module_param!`].
///
/// # Invariants
///
/// `name` points to a static string, `mod_` to the module, `ops` to [`Adapter::<T>::OPS`] of the
/// `T` that `arg` points to, a static.
#[repr(transparent)]
pub struct KernelParam(bindings::kernel_param);

// SAFETY: The kernel reads the descriptor, which nobody writes; the value it points to is `Sync`.
unsafe impl Sync for KernelParam {}

impl KernelParam {
    /// A parameter named `name` with mode `perm` in sysfs (0 for none), its value in `value`.
    ///
    /// # Safety
    ///
    /// `module` is the module this parameter belongs to, and `ops` is `Adapter::<T>::OPS`.
    #[doc(hidden)]
    pub const unsafe fn new<T: ParamValue>(
        name: &'static CStr,
        module: *mut bindings::module,
        ops: &'static bindings::kernel_param_ops,
        perm: u16,
        value: &'static T,
    ) -> Self {
        // INVARIANT: As the caller promised; `name` and `value` are static.
        Self(bindings::kernel_param {
            name: name.as_char_ptr(),
            mod_: module,
            ops,
            perm,
            level: -1,
            flags: 0,
            __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 {
                arg: (value as *const T).cast_mut().cast(),
            },
        })
    }
}

/// The C operations of a [`ParamValue`].
#[doc(hidden)]
pub struct Adapter<T: ParamValue>(core::marker::PhantomData<T>);

impl<T: ParamValue> Adapter<T> {
    /// The operations table.
    pub const OPS: bindings::kernel_param_ops = bindings::kernel_param_ops {
        flags: if T::NOARG {
            bindings::KERNEL_PARAM_OPS_FL_NOARG
        } else {
            0
        },
        set: Some(Self::set),
        get: Some(Self::get),
        free: None,
    };

    /// # Safety
    ///
    /// `kp` is a parameter made by [`KernelParam::new`] with these operations.
    unsafe fn value<'a>(kp: *const bindings::kernel_param) -> &'a T {
        // SAFETY: By the type invariant of `KernelParam`, `arg` points to a static `T`.
        unsafe { &*(*kp).__bindgen_anon_1.arg.cast::<T>() }
    }

    /// Callback for the C side.
    ///
    /// # Safety
    ///
    /// `val` is null or a NUL-terminated string; `kp` is one of this parameter type's.
    unsafe extern "C" fn set(val: *const c_char, kp: *const bindings::kernel_param) -> i32 {
        let text = if val.is_null() {
            ""
        } else {
            // SAFETY: The kernel passes a NUL-terminated string, valid for the call.
            let s = unsafe { CStr::from_char_ptr(val) };
            match core::str::from_utf8(s.as_bytes()) {
                Ok(t) => t.strip_suffix('\n').unwrap_or(t),
                Err(_) => return crate::error::code::EINVAL.to_errno(),
            }
        };
        // SAFETY: `kp` is this type's.
        match unsafe { Self::value(kp) }.set(text) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    /// Callback for the C side.
    ///
    /// # Safety
    ///
    /// `buffer` has room for `PAGE_SIZE` bytes; `kp` is one of this parameter type's.
    unsafe extern "C" fn get(buffer: *mut c_char, kp: *const bindings::kernel_param) -> i32 {
        // SAFETY: The kernel passes a page-sized buffer that nothing else uses during the call.
        let buf =
            unsafe { core::slice::from_raw_parts_mut(buffer.cast::<u8>(), crate::page::PAGE_SIZE) };
        let mut w = Cursor { buf, len: 0 };
        // SAFETY: `kp` is this type's.
        let value = unsafe { Self::value(kp) };
        if value.show(&mut w).is_err() || fmt::Write::write_str(&mut w, "\n").is_err() {
            return crate::error::code::EINVAL.to_errno();
        }
        i32::try_from(w.len).unwrap_or(0)
    }
}

/// Writes into a buffer, refusing what does not fit.
struct Cursor<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The length of a `modinfo` string made of `parts`, with its NUL.
#[doc(hidden)]
pub const fn modinfo_len(parts: &[&str]) -> usize {
    let mut n = 1;
    let mut i = 0;
    while i < parts.len() {
        n += parts[i].len();
        i += 1;
    }
    n
}

/// The `modinfo` string made of `parts`, NUL-terminated; `N` is [`modinfo_len`] of them.
#[doc(hidden)]
pub const fn modinfo<const N: usize>(parts: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    let mut i = 0;
    while i < parts.len() {
        let b = parts[i].as_bytes();
        let mut j = 0;
        while j < b.len() && at + 1 < N {
            out[at] = b[j];
            at += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

/// Declares a parameter `$name` of a loadable module, its value in the static `$value` of type
/// `$ty`, with mode `$perm` in `/sys/module/MODULE/parameters/` (0: not there) and the
/// description `$desc` for `modinfo`:
///
/// ```ignore
/// static CRC: Switch = Switch::new(true);
/// kernel::module_param!(CRC: Switch, "crc", 0o644, "Ask for MPA CRCs (default: 1)");
/// ```
#[macro_export]
macro_rules! module_param {
    ($value:ident: $ty:ty, $name:literal, $perm:expr, $desc:literal) => {
        const _: () = {
            #[cfg(not(MODULE))]
            compile_error!("module_param! serves loadable modules only");

            extern "C" {
                static __this_module: $crate::types::Opaque<$crate::bindings::module>;
            }

            static OPS: $crate::bindings::kernel_param_ops =
                $crate::module_param::Adapter::<$ty>::OPS;

            #[link_section = "__param"]
            #[used(compiler)]
            static PARAM: $crate::module_param::KernelParam =
                // SAFETY: `__this_module` is this module (only its address is taken), and `OPS`
                // are the operations of `$ty`.
                unsafe {
                    $crate::module_param::KernelParam::new::<$ty>(
                        $crate::c_str!($name),
                        $crate::types::Opaque::raw_get(::core::ptr::addr_of!(__this_module)),
                        &OPS,
                        $perm,
                        &$value,
                    )
                };

            const TYPE_PARTS: &[&str] = &[
                "parmtype=",
                $name,
                ":",
                <$ty as $crate::module_param::ParamValue>::TYPE,
            ];
            #[link_section = ".modinfo"]
            #[used(compiler)]
            static TYPE_INFO: [u8; $crate::module_param::modinfo_len(TYPE_PARTS)] =
                $crate::module_param::modinfo(TYPE_PARTS);

            const DESC_PARTS: &[&str] = &["parm=", $name, ":", $desc];
            #[link_section = ".modinfo"]
            #[used(compiler)]
            static DESC_INFO: [u8; $crate::module_param::modinfo_len(DESC_PARTS)] =
                $crate::module_param::modinfo(DESC_PARTS);
        };
    };
}
