// SPDX-License-Identifier: GPL-2.0

//! debugfs control files: a directory whose files deliver writes to a Rust handler and return
//! Rust-produced text on reads.
//!
//! 6.12 has neither a debugfs abstraction nor module parameters, so this is how tests drive a
//! module: `echo "command" > /sys/kernel/debug/NAME/FILE` calls [`FileHandler::write`] with the
//! bytes written, and `cat /sys/kernel/debug/NAME/FILE` returns what [`FileHandler::read`]
//! produces.
//!
//! Lifetime: a [`Dir`] owns its files. Dropping it removes the directory and everything in it;
//! debugfs waits for reads and writes in progress to finish first, so no handler runs after
//! [`Dir`]'s `drop` returns. A file that is still open then returns `-EIO`. The file operations
//! name the owning module, so the module cannot be unloaded while a file is open.
//!
//! C header: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h).

use crate::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    bindings,
    error::{from_err_ptr, Result},
    prelude::*,
    str::CStr,
    sync::Arc,
    uaccess::UserSlice,
    ThisModule,
};
use core::ffi::c_void;

/// The largest write a control file accepts in one `write(2)`.
pub const MAX_WRITE: usize = 4096;

/// What a debugfs file does when it is written or read.
///
/// Both methods run in the context of the process doing the `write(2)` or `read(2)`: they may
/// sleep, and several may run at once.
pub trait FileHandler: Send + Sync + 'static {
    /// Handles one `write(2)` of at most [`MAX_WRITE`] bytes. An error is returned to the writer.
    fn write(&self, _data: &[u8]) -> Result {
        Err(EPERM)
    }

    /// Appends the file's contents to `out`. It is called for every `read(2)`; a reader that
    /// reads in pieces gets each piece from a fresh rendering.
    fn read(&self, _out: &mut KVec<u8>) -> Result {
        Err(EPERM)
    }
}

/// One file of a [`Dir`]: the C `file_operations` (which must outlive the file) and the handler.
struct FileInner<T: FileHandler> {
    fops: bindings::file_operations,
    handler: Arc<T>,
}

/// A file owned by a [`Dir`], with its type erased.
struct FileEntry {
    inner: *mut c_void,
    free: unsafe fn(*mut c_void),
}

/// A debugfs directory and the files created in it.
///
/// # Invariants
///
/// `dentry` is a directory created by `debugfs_create_dir` (or an error pointer when debugfs is
/// not available, in which case `files` is empty). Every entry of `files` is a leaked
/// `KBox<FileInner<T>>` of a file in that directory, freed with the matching `free`.
pub struct Dir {
    dentry: *mut bindings::dentry,
    module: &'static ThisModule,
    files: KVec<FileEntry>,
}

// SAFETY: The dentry pointer is only used to create files and remove the directory, which debugfs
// allows from any thread; the file entries hold `Send + Sync` handlers.
unsafe impl Send for Dir {}
// SAFETY: `&Dir` offers no methods.
unsafe impl Sync for Dir {}

impl Dir {
    /// Creates the directory `name` at the top of debugfs, for files owned by `module`.
    pub fn new(name: &CStr, module: &'static ThisModule) -> Result<Self> {
        // SAFETY: `name` is a valid C string; a NULL parent means the debugfs root.
        let dentry =
            unsafe { bindings::debugfs_create_dir(name.as_char_ptr(), core::ptr::null_mut()) };
        from_err_ptr(dentry)?;
        // INVARIANT: `dentry` is a debugfs directory and there are no files yet.
        Ok(Self {
            dentry,
            module,
            files: KVec::new(),
        })
    }

    /// Creates the file `name` with permissions `mode` (e.g. `0o600`), served by `handler`.
    pub fn create_file<T: FileHandler>(
        &mut self,
        name: &CStr,
        mode: u16,
        handler: Arc<T>,
    ) -> Result {
        self.files.reserve(1, GFP_KERNEL)?;
        // SAFETY: All-zero is a valid `file_operations` (every callback NULL).
        let mut fops: bindings::file_operations = unsafe { core::mem::zeroed() };
        fops.owner = self.module.as_ptr();
        fops.open = Some(bindings::simple_open);
        fops.llseek = Some(bindings::default_llseek);
        fops.read = Some(read_callback::<T>);
        fops.write = Some(write_callback::<T>);
        let inner = KBox::into_raw(KBox::new(FileInner { fops, handler }, GFP_KERNEL)?);
        // SAFETY: `inner` is valid; its `fops` and the handler stay alive until this `Dir` is
        // dropped, after the file is removed. `self.dentry` is a debugfs directory.
        let dentry = unsafe {
            bindings::debugfs_create_file(
                name.as_char_ptr(),
                mode,
                self.dentry,
                inner.cast(),
                core::ptr::addr_of!((*inner).fops),
            )
        };
        if let Err(e) = from_err_ptr(dentry) {
            // SAFETY: The file was not created, so nothing else refers to `inner`.
            drop(unsafe { KBox::from_raw(inner) });
            return Err(e);
        }
        // INVARIANT: `inner` is a leaked `FileInner<T>` of a file in this directory.
        self.files
            .push(
                FileEntry {
                    inner: inner.cast(),
                    free: free_inner::<T>,
                },
                GFP_KERNEL,
            )
            .map_err(|_| ENOMEM)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: By the type invariant `dentry` is our directory (or an error pointer, which
        // `debugfs_remove` ignores). This removes it recursively and waits for the files'
        // operations in progress, so no callback uses the file entries afterwards.
        unsafe { bindings::debugfs_remove(self.dentry) };
        for f in self.files.iter() {
            // SAFETY: By the type invariant `f.inner` is a leaked box matching `f.free`, and its
            // file is gone.
            unsafe { (f.free)(f.inner) };
        }
    }
}

/// Frees a [`FileInner<T>`] leaked by [`Dir::create_file`].
///
/// # Safety
///
/// `p` must come from `KBox::into_raw` of a `FileInner<T>` that nothing uses any more.
unsafe fn free_inner<T: FileHandler>(p: *mut c_void) {
    // SAFETY: Guaranteed by the caller.
    drop(unsafe { KBox::from_raw(p.cast::<FileInner<T>>()) });
}

/// Returns the handler of an open file.
///
/// # Safety
///
/// `file` must be an open file of [`Dir::create_file::<T>`], whose `private_data` was set by
/// `simple_open` to the `FileInner<T>`, used only while the file's operation is in progress.
unsafe fn handler_of<'a, T: FileHandler>(file: *mut bindings::file) -> &'a T {
    // SAFETY: The caller guarantees `file` is valid and `private_data` is our `FileInner<T>`,
    // which lives until the file is removed (after every operation in progress).
    unsafe { &(*(*file).private_data.cast::<FileInner<T>>()).handler }
}

/// `write` of a control file: copies the user's bytes and hands them to [`FileHandler::write`].
///
/// # Safety
///
/// Called by the VFS (through debugfs's proxy) on a file of [`Dir::create_file::<T>`].
unsafe extern "C" fn write_callback<T: FileHandler>(
    file: *mut bindings::file,
    buf: *const u8,
    count: usize,
    _ppos: *mut bindings::loff_t,
) -> isize {
    if count > MAX_WRITE {
        return EINVAL.to_errno() as isize;
    }
    let mut data = KVec::new();
    // CAST: A user pointer is passed on as an address, as `UserSlice` expects.
    if let Err(e) = UserSlice::new(buf as usize, count).read_all(&mut data, GFP_KERNEL) {
        return e.to_errno() as isize;
    }
    // SAFETY: This is a write on a file of `create_file::<T>`.
    let handler = unsafe { handler_of::<T>(file) };
    match handler.write(&data) {
        // CAST: `count <= MAX_WRITE`, far below `isize::MAX`.
        Ok(()) => count as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// `read` of a control file: renders [`FileHandler::read`] and copies the requested window.
///
/// # Safety
///
/// Called by the VFS (through debugfs's proxy) on a file of [`Dir::create_file::<T>`].
unsafe extern "C" fn read_callback<T: FileHandler>(
    file: *mut bindings::file,
    buf: *mut u8,
    count: usize,
    ppos: *mut bindings::loff_t,
) -> isize {
    // SAFETY: This is a read on a file of `create_file::<T>`.
    let handler = unsafe { handler_of::<T>(file) };
    let mut text = KVec::new();
    if let Err(e) = handler.read(&mut text) {
        return e.to_errno() as isize;
    }
    // SAFETY: `buf`/`count`/`ppos` come from the VFS for this read; `text` is valid for its
    // length. `simple_read_from_buffer` checks `*ppos` against the length and copies to user.
    unsafe {
        bindings::simple_read_from_buffer(buf.cast(), count, ppos, text.as_ptr().cast(), text.len())
    }
}
