// SPDX-License-Identifier: GPL-2.0

//! Workqueues owned by a module.
//!
//! 6.12's `kernel::workqueue` only offers the system workqueues. A module cannot drain those
//! before it is unloaded, and a work item that blocks in one of them holds up every other user
//! of the queue. An [`OwnedQueue`] is the module's own: dropping it waits for every queued and
//! running item (`destroy_workqueue` drains the queue first), so no work item runs module code
//! after the module's exit. With [`QueueFlags::MEM_RECLAIM`] the queue has a rescuer thread and
//! makes progress when no new worker can be created, as work on a storage I/O path must.
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h).

use crate::{
    bindings,
    prelude::*,
    str::CStr,
    sync::{Arc, LockClassKey},
    time::Jiffies,
    types::Opaque,
    workqueue::Queue,
};
use core::{marker::PhantomData, ptr::NonNull};

/// Flags of a new [`OwnedQueue`] (`WQ_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct QueueFlags(u32);

impl QueueFlags {
    /// Items run on per-CPU workers of the CPU that queued them.
    pub const PER_CPU: Self = Self(0);
    /// Items may run on any CPU (`WQ_UNBOUND`).
    pub const UNBOUND: Self = Self(bindings::wq_flags_WQ_UNBOUND);
    /// A rescuer guarantees progress under memory pressure (`WQ_MEM_RECLAIM`).
    pub const MEM_RECLAIM: Self = Self(bindings::wq_flags_WQ_MEM_RECLAIM);
    /// Workers run at high priority (`WQ_HIGHPRI`).
    pub const HIGHPRI: Self = Self(bindings::wq_flags_WQ_HIGHPRI);
    /// Items are CPU-bound: on a per-CPU queue, a running item does not hold back the CPU's
    /// other work items (`WQ_CPU_INTENSIVE`).
    pub const CPU_INTENSIVE: Self = Self(bindings::wq_flags_WQ_CPU_INTENSIVE);
}

impl core::ops::BitOr for QueueFlags {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A CPU whose workers run an item queued on a per-CPU queue ([`QueueFlags::PER_CPU`]).
///
/// # Invariants
///
/// The CPU was online when the value was made. It may go offline later: an item queued on it
/// then runs on another CPU (`queue_work_on`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Cpu(core::ffi::c_int);

impl Cpu {
    /// One of the online CPUs other than the caller's, chosen by `spread` modulo their number
    /// (equal values choose the same CPU while the caller's CPU and the online ones stay the
    /// same), or `None` if the caller's CPU is the only one online. Any context; the caller may
    /// run on another CPU by the time it uses the value.
    pub fn other(spread: u32) -> Option<Self> {
        // SAFETY: The helper only reads the online mask and the current CPU's number.
        let cpu = unsafe { bindings::owned_queue_other_cpu(spread) };
        // INVARIANT: The helper picks from the online CPUs, or returns -1.
        (cpu >= 0).then_some(Self(cpu))
    }

    /// The CPU's number, for `queue_work_on`.
    pub(crate) fn as_raw(self) -> core::ffi::c_int {
        self.0
    }
}

/// An allocated workqueue, destroyed (after draining) on drop.
///
/// It must not be dropped from one of its own work items (draining would wait for itself).
///
/// # Invariants
///
/// `wq` was returned by `alloc_workqueue` and is destroyed only in `drop`.
pub struct OwnedQueue {
    wq: NonNull<bindings::workqueue_struct>,
}

// SAFETY: Workqueues are used from any thread.
unsafe impl Send for OwnedQueue {}
// SAFETY: Queueing work is thread-safe.
unsafe impl Sync for OwnedQueue {}

impl OwnedQueue {
    /// Allocates a workqueue called `name` (as `ps` shows its workers), with the default limit
    /// of items running at once.
    pub fn new(name: &'static CStr, flags: QueueFlags) -> Result<Self> {
        // SAFETY: The format is "%s" with one C string argument; flags are `WQ_*` bits and
        // max_active 0 asks for the default.
        let wq = unsafe {
            bindings::alloc_workqueue(
                crate::c_str!("%s").as_char_ptr(),
                flags.0,
                0,
                name.as_char_ptr(),
            )
        };
        let wq = NonNull::new(wq).ok_or(ENOMEM)?;
        // INVARIANT: `wq` was just allocated.
        Ok(Self { wq })
    }

    /// Waits until every work item queued so far has run (`flush_workqueue`). Must not be
    /// called from one of this queue's work items.
    pub fn flush(&self) {
        // SAFETY: By the type invariant the workqueue is live.
        unsafe { bindings::__flush_workqueue(self.wq.as_ptr()) };
    }

    /// The queue, to enqueue work items on.
    pub fn queue(&self) -> &Queue {
        // SAFETY: By the type invariant the workqueue is live as long as `self`.
        unsafe { Queue::from_raw(self.wq.as_ptr()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the workqueue is live; this drains it first. Work items
        // hold their own references, so this only waits for them.
        unsafe { bindings::destroy_workqueue(self.wq.as_ptr()) };
    }
}

/// A delayed work item embedded in an object that lives in an [`Arc`].
///
/// Queueing it hands the queued item a reference to the object, which its
/// [`DelayedWorkItem::run`] receives, so the object outlives every queued or running item and a
/// queueing never allocates. One item runs at a time; an item queued while it runs runs once
/// more afterwards. Use [`impl_has_delayed_work!`](crate::impl_has_delayed_work) to declare the
/// field and [`new_delayed_work!`](crate::new_delayed_work) to initialise it.
///
/// A timer that is pending when the queue is destroyed would queue the item on a dead queue:
/// the owner cancels it ([`DelayedWork::cancel`]) or lets it run before the queue goes.
///
/// # Invariants
///
/// `dwork` was initialised with [`DelayedWork::run`] for `T` as its function; it lies at
/// `T::OFFSET` in a `T` (see [`HasDelayedWork`]).
#[pin_data]
#[repr(transparent)]
pub struct DelayedWork<T> {
    #[pin]
    dwork: Opaque<bindings::delayed_work>,
    _owner: PhantomData<T>,
}

// SAFETY: Work items are used from any thread; the item holds no `T`, only references made
// through `Arc<T>`, which `DelayedWorkItem` requires to be `Send + Sync`.
unsafe impl<T> Send for DelayedWork<T> {}
// SAFETY: See above.
unsafe impl<T> Sync for DelayedWork<T> {}

/// Declares where a type keeps its [`DelayedWork`].
///
/// # Safety
///
/// `OFFSET` is the offset of a field of type `DelayedWork<Self>` in `Self`. Use
/// [`impl_has_delayed_work!`](crate::impl_has_delayed_work), which checks that.
pub unsafe trait HasDelayedWork: Sized {
    /// The offset of the `DelayedWork<Self>` field.
    const OFFSET: usize;
}

/// An object with a [`DelayedWork`] that runs `run`.
pub trait DelayedWorkItem: HasDelayedWork + Send + Sync + 'static {
    /// The work: runs in process context on the queue the item was queued on.
    fn run(this: Arc<Self>);
}

/// Implements [`HasDelayedWork`] for a type from the name of its `DelayedWork<Self>` field.
#[macro_export]
macro_rules! impl_has_delayed_work {
    (impl HasDelayedWork for $ty:ty { self.$field:ident }) => {
        // SAFETY: The offset is that of `$field`, which the function below checks to be a
        // `DelayedWork<Self>`.
        unsafe impl $crate::owned_queue::HasDelayedWork for $ty {
            const OFFSET: usize = ::core::mem::offset_of!($ty, $field);
        }
        const _: () = {
            #[allow(dead_code)]
            fn field_type(x: &$ty) -> &$crate::owned_queue::DelayedWork<$ty> {
                &x.$field
            }
        };
    };
}

/// Creates a [`DelayedWork`] initialiser with a new lock class (named after the source
/// location, or `name`).
#[macro_export]
macro_rules! new_delayed_work {
    ($($name:literal)?) => {
        $crate::owned_queue::DelayedWork::new(
            $crate::optional_name!($($name)?),
            $crate::static_lock_class!(),
        )
    };
}

impl<T: DelayedWorkItem> DelayedWork<T> {
    /// A delayed work item of `T`, named `name` for lockdep.
    pub fn new(name: &'static CStr, key: &'static LockClassKey) -> impl PinInit<Self> {
        pin_init!(Self {
            dwork <- Opaque::ffi_init(|slot| {
                // SAFETY: `slot` is valid for writes; `run` is the function for `T`.
                // INVARIANT: Initialised with `run`; `HasDelayedWork` places it in a `T`.
                unsafe {
                    bindings::owned_queue_init_delayed_work(
                        slot,
                        Some(Self::run),
                        name.as_char_ptr(),
                        key.as_ptr(),
                    )
                }
            }),
            _owner: PhantomData,
        })
    }

    /// The `delayed_work` of `this`.
    fn raw(this: &Arc<T>) -> *mut bindings::delayed_work {
        let base = core::ptr::from_ref::<T>(this).cast::<u8>();
        // CAST: `DelayedWork<T>` is a transparent wrapper of `delayed_work`.
        // SAFETY: `T::OFFSET` is the offset of a `DelayedWork<T>` within the `T` (trait
        // contract), so the result stays inside the object.
        unsafe {
            base.add(T::OFFSET)
                .cast::<bindings::delayed_work>()
                .cast_mut()
        }
    }

    /// Queues `this`'s item to run after `delay` jiffies (0: now), unless it is queued already
    /// (then its time stays). Any context.
    pub fn enqueue(this: &Arc<T>, queue: &Queue, delay: Jiffies) {
        let r = this.clone().into_raw();
        // SAFETY: The item was initialised for `run` (type invariant) and lives as long as the
        // reference handed over with it; `queue` is a live workqueue.
        let queued = unsafe {
            bindings::queue_delayed_work_on(
                bindings::wq_misc_consts_WORK_CPU_UNBOUND as _,
                queue_raw(queue),
                Self::raw(this),
                delay,
            )
        };
        if !queued {
            // SAFETY: Not queued: the reference made above was not handed over.
            drop(unsafe { Arc::from_raw(r) });
        }
    }

    /// Queues `this`'s item to run after `delay` jiffies, or moves it to that time if it is
    /// queued already. Any context.
    pub fn reschedule(this: &Arc<T>, queue: &Queue, delay: Jiffies) {
        let r = this.clone().into_raw();
        // SAFETY: As in `enqueue`. `mod_delayed_work_on` queues an idle item (then the reference
        // is handed over) or moves a pending one (which holds a reference already).
        let was_pending = unsafe {
            bindings::mod_delayed_work_on(
                bindings::wq_misc_consts_WORK_CPU_UNBOUND as _,
                queue_raw(queue),
                Self::raw(this),
                delay,
            )
        };
        if was_pending {
            // SAFETY: The pending item already had its reference; this one was not handed over.
            drop(unsafe { Arc::from_raw(r) });
        }
    }

    /// Takes `this`'s item off its queue if it is pending (a running one goes on). Any context.
    pub fn cancel(this: &Arc<T>) {
        // SAFETY: The item was initialised (type invariant).
        if unsafe { bindings::cancel_delayed_work(Self::raw(this)) } {
            // SAFETY: A pending item owned one reference, which is not needed any more.
            drop(unsafe { Arc::from_raw(core::ptr::from_ref::<T>(this)) });
        }
    }

    /// Like [`Self::cancel`], and waits for a running item to finish. Process context; not from
    /// the item itself.
    pub fn cancel_sync(this: &Arc<T>) {
        // SAFETY: The item was initialised (type invariant).
        if unsafe { bindings::cancel_delayed_work_sync(Self::raw(this)) } {
            // SAFETY: As in `cancel`.
            drop(unsafe { Arc::from_raw(core::ptr::from_ref::<T>(this)) });
        }
    }

    /// The work function.
    ///
    /// # Safety
    ///
    /// Called by the workqueue for an item initialised in [`Self::new`] and queued with a
    /// reference handed over.
    unsafe extern "C" fn run(work: *mut bindings::work_struct) {
        // SAFETY: `work` is the `work` field of a `delayed_work`, which lies at `T::OFFSET` in a
        // live `T` (type invariant); the queued item's reference keeps it alive.
        let this = unsafe {
            let dwork = crate::container_of!(work, bindings::delayed_work, work);
            Arc::from_raw(dwork.cast::<u8>().sub(T::OFFSET).cast::<T>())
        };
        T::run(this);
    }
}

/// The C workqueue of `queue`.
fn queue_raw(queue: &Queue) -> *mut bindings::workqueue_struct {
    // CAST: `Queue` is a transparent wrapper of `workqueue_struct`.
    core::ptr::from_ref(queue)
        .cast::<bindings::workqueue_struct>()
        .cast_mut()
}
