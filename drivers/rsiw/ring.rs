// SPDX-License-Identifier: GPL-2.0

//! A fixed-capacity FIFO ring, for completion, send and receive queues.

#![deny(unsafe_code)]

use kernel::prelude::*;

/// A FIFO of at most `capacity` entries, allocated once.
pub(crate) struct Ring<T: Clone> {
    slots: KVVec<Option<T>>,
    head: usize,
    len: usize,
}

impl<T: Clone> Ring<T> {
    /// An empty ring with room for `capacity` (at least one) entries.
    pub(crate) fn new(capacity: u32) -> Result<Self> {
        let slots = KVVec::from_elem(None, capacity.max(1) as usize, GFP_KERNEL)?;
        Ok(Self {
            slots,
            head: 0,
            len: 0,
        })
    }

    /// How many entries are queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The oldest entry.
    pub(crate) fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.slots.get(self.head).and_then(Option::as_ref)
    }

    /// The oldest entry, mutable.
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        if self.len == 0 {
            return None;
        }
        self.slots.get_mut(self.head).and_then(Option::as_mut)
    }

    /// Drops every entry.
    pub(crate) fn clear(&mut self) {
        while self.pop().is_some() {}
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `index` reduced into the ring, for `index < 2 * capacity` (no division on this path).
    fn wrap(&self, index: usize) -> usize {
        let cap = self.slots.len();
        if index >= cap {
            index - cap
        } else {
            index
        }
    }

    /// Appends `v`; gives it back if the ring is full.
    pub(crate) fn push(&mut self, v: T) -> Result<(), T> {
        if self.len == self.slots.len() {
            return Err(v);
        }
        let tail = self.wrap(self.head + self.len);
        match self.slots.get_mut(tail) {
            Some(slot) => *slot = Some(v),
            None => return Err(v),
        }
        self.len += 1;
        Ok(())
    }

    /// Appends the entry `make` returns, once `fill` completed it in its slot: a large entry is
    /// built where it stays rather than on the caller's stack. If `fill` fails, nothing is
    /// appended; `ENOMEM` if the ring is full.
    #[inline(always)]
    pub(crate) fn push_with(
        &mut self,
        make: impl FnOnce() -> T,
        fill: impl FnOnce(&mut T) -> Result,
    ) -> Result {
        if self.len == self.slots.len() {
            return Err(ENOMEM);
        }
        let tail = self.wrap(self.head + self.len);
        let slot = self.slots.get_mut(tail).ok_or(ENOMEM)?;
        if let Err(e) = fill(slot.insert(make())) {
            *slot = None;
            return Err(e);
        }
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the oldest entry.
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.slots.get_mut(self.head).and_then(Option::take)?;
        self.head = self.wrap(self.head + 1);
        self.len -= 1;
        Some(v)
    }
}
