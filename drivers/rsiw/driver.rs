// SPDX-License-Identifier: GPL-2.0

//! The module's lifetime: what loading registers and unloading takes down.

use kernel::{netdev::NotifierRegistration, prelude::*, rdma::link};

use crate::{device, knobs};

/// Module state. Fields drop in order: first the link type goes (no new devices), and with it
/// the device registry (every device is unregistered), then the netdev notifier.
pub(crate) struct RsiwModule {
    _debugfs: kernel::debugfs::Dir,
    _link: Pin<KBox<link::Registration<device::Links>>>,
    _netdev_events: Pin<KBox<NotifierRegistration<device::NetdevEvents>>>,
}

impl kernel::Module for RsiwModule {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let netdev_events =
            KBox::pin_init(NotifierRegistration::new(device::NetdevEvents), GFP_KERNEL)?;
        let link = KBox::pin_init(
            link::Registration::new(device::Links::new(module)),
            GFP_KERNEL,
        )?;
        let mut debugfs = kernel::debugfs::Dir::new(kernel::c_str!("rsiw"), module)?;
        debugfs.create_file(
            kernel::c_str!("mpa"),
            0o600,
            kernel::sync::Arc::new(knobs::MpaFile, GFP_KERNEL)?,
        )?;
        pr_info!("loaded; create devices with 'rdma link add NAME type rsiw netdev DEV'\n");
        Ok(Self {
            _debugfs: debugfs,
            _link: link,
            _netdev_events: netdev_events,
        })
    }
}
