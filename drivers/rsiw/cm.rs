// SPDX-License-Identifier: GPL-2.0

//! The iWARP connection manager: MPA connection setup over kernel TCP sockets.
//!
//! Connection establishment is not implemented yet. Until it is, every request fails cleanly
//! with `EOPNOTSUPP`, so that rdma_cm (which listens on every iWARP device when a ULP listens
//! on a wildcard address) sees a clear error instead of a missing operation.

#![deny(unsafe_code)]

use crate::device::Rsiw;
use kernel::{
    prelude::*,
    rdma::{
        device::Device,
        eopnotsupp,
        iwcm::{
            Accepting, ConnParam, ConnectInfo, Connecting, Failed, IwCm, ListenId, ListenInfo,
            PrivateData,
        },
    },
    sync::Arc,
};

/// A passive-side connection endpoint (one TCP connection awaiting accept or reject).
pub(crate) struct Endpoint;

/// A listening endpoint.
pub(crate) struct Listener;

/// rsiw's iw_cm operations.
pub(crate) struct RsiwCm;

#[vtable]
impl IwCm for RsiwCm {
    type Driver = Rsiw;
    type Endpoint = Arc<Endpoint>;
    type Listener = KBox<Listener>;

    fn connect(
        _dev: &Device<Rsiw>,
        conn: Connecting<Self>,
        _info: &ConnectInfo,
        _param: &ConnParam<'_>,
    ) -> Result<(), Failed<Connecting<Self>>> {
        Err(Failed::new(eopnotsupp(), conn))
    }

    fn accept(
        _dev: &Device<Rsiw>,
        conn: Accepting<Self>,
        _endpoint: Arc<Endpoint>,
        _param: &ConnParam<'_>,
    ) -> Result<(), Failed<Accepting<Self>>> {
        // No listener ever produces an endpoint yet, so iw_cm cannot get here.
        Err(Failed::new(eopnotsupp(), conn))
    }

    fn reject(_dev: &Device<Rsiw>, _endpoint: Arc<Endpoint>, _pd: PrivateData<'_>) -> Result {
        Ok(())
    }

    fn create_listen(
        _dev: &Device<Rsiw>,
        _listener: ListenId<Self>,
        _info: &ListenInfo,
        _backlog: u32,
    ) -> Result<KBox<Listener>> {
        Err(eopnotsupp())
    }

    fn destroy_listen(_dev: &Device<Rsiw>, _listener: KBox<Listener>) -> Result {
        Ok(())
    }
}
