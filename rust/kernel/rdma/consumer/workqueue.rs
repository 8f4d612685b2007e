// SPDX-License-Identifier: GPL-2.0

//! A workqueue owned by the ULP.
//!
//! A ULP that processes completions in work items (queued from a [`super::cq::CqHandler`])
//! queues them on its own [`OwnedQueue`]: dropping it waits for every queued and running item,
//! so none outlives the module. See [`crate::owned_queue`].

pub use crate::owned_queue::{OwnedQueue, QueueFlags};
