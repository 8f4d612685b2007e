// SPDX-License-Identifier: GPL-2.0

//! The hand-off from the connection manager to the data path.
//!
//! When MPA negotiation succeeds, the connection manager ([`crate::cm`]) moves the QP to RTS
//! and stores a [`Link`] in it: the connected TCP socket, the negotiated MPA parameters, and the
//! endpoint that owns the connection's teardown. The link stays in the QP until the connection
//! ends; then it is taken out again ([`detach`]) and the QP is in ERROR.
//!
//! # Who does what
//!
//! - The connection manager owns the socket's upcall handler. Its `data_ready` upcall, once the
//!   link is attached, calls [`data_arrived`] here (softirq context, socket lock held): that is
//!   where the receive path hooks in. The transmit path never blocks in the socket: when TCP
//!   takes no more, its work item ends and `write_space` ([`tx_ready`]) queues it again. TCP
//!   state changes and socket errors stay with the connection manager, which reports them to
//!   `iw_cm`.
//! - The data path reports that TCP took its Terminate with [`terminated`], and any other fatal
//!   error (the peer's Terminate, a failed socket) with [`fatal`], from any context; the
//!   connection manager then moves the QP to ERROR, closes the socket (after a Terminate: once
//!   the peer acknowledged our FIN behind it, or the close timeout passed) and sends the
//!   `iw_cm` events.
//! - [`Negotiated`] says what the data path must do on the wire: CRC in both directions when
//!   `crc`, Markers on transmit when `markers_tx` and expected on receive when `markers_rx`,
//!   the ORD and IRD in force, whether FPDUs may be larger than one MSS (`large_fpdu`: up to
//!   one GSO packet, see [`crate::proto::fpdu::tx_budget`]), and for the peer-to-peer model:
//!   the initiator sends `rtr_send` as its first FPDU, the responder checks the first inbound
//!   FPDU against `rtr_accept` (see [`crate::proto::negotiate::check_first_fpdu`]) before it
//!   transmits anything.

#![deny(unsafe_code)]

use crate::{device::Rsiw, proto::negotiate::Negotiated};
use core::sync::atomic::Ordering;
use kernel::{
    ksock::{LockedSock, TcpSocket},
    prelude::*,
    rdma::{
        iwcm::CmIdKey,
        qp::{Qp, QpState},
    },
    sync::Arc,
};

/// Which side of the MPA exchange this end was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Sent the MPA Request (active side, `iw_connect`).
    Initiator,
    /// Answered it (passive side, `iw_accept`).
    Responder,
}

/// Whoever set a link up and tears it down (the connection manager): the data path and the
/// QP's state changes report to it. Called from any context; no call may block.
pub(crate) trait LinkOwner: Send + Sync {
    /// TCP took the connection's Terminate, or there was one to send and it could not be
    /// built: the connection closes once the Terminate is on the wire.
    fn terminated(&self);
    /// The data path hit a fatal error and sends no Terminate (it received one, or the socket
    /// failed): the connection is aborted.
    fn failed(&self);
    /// The ULP moved the QP to SQD (`graceful`) or ERROR, or destroyed it; the link is
    /// already detached.
    fn ulp_closed(&self, graceful: bool);
}

/// An established connection, stored in the QP while it is in RTS (or closing).
pub(crate) struct Link {
    /// The connected TCP socket.
    pub(crate) socket: Arc<TcpSocket>,
    /// What MPA negotiation agreed on.
    pub(crate) negotiated: Negotiated,
    /// Which side of the negotiation we were.
    pub(crate) role: Role,
    /// Who tears the connection down.
    pub(crate) owner: Arc<dyn LinkOwner>,
    /// The connection's `iw_cm` id, by which `rdma resource show cm_id -dd` finds the QP.
    pub(crate) cm_id: CmIdKey,
}

/// Attaches `link` to `qp` and moves it to RTS.
///
/// Fails with `ECONNABORTED` if the QP is not in INIT or RTR (the ULP moved it to ERROR or
/// destroyed it meanwhile) or already has a link.
pub(crate) fn attach(qp: &Qp<Rsiw>, link: Link) -> Result {
    let sess = KBox::new(
        super::Session {
            tx: super::tx::TxState::new(
                &link.negotiated,
                link.role == Role::Initiator,
                link.socket.mss(),
            ),
            rx: super::rx::RxState::new(&link.negotiated)?,
            term: None,
            term_sent: false,
            // Without it everything is sent as copies, which works as well. To a peer on this host
            // zero copy costs more than it saves (TCP copies such data on delivery anyway), so by
            // default loopback connections copy.
            zc: if crate::knobs::zerocopy(link.socket.route_is_loopback()) {
                super::tx::ZcSession::new(qp).ok()
            } else {
                None
            },
            tx_round: 1,
            tx_rounds_sent: 0,
        },
        GFP_KERNEL,
    )?;
    {
        let mut inner = super::lock(qp);
        if inner.conn.is_some() || !matches!(inner.state, QpState::Init | QpState::Rtr) {
            return Err(kernel::ksock::errno::econnaborted());
        }
        let n = &link.negotiated;
        inner.ord = u32::from(n.ord).min(super::MAX_IRD_ORD);
        inner.ird = u32::from(n.ird).min(super::MAX_IRD_ORD);
        qp.data()
            .cm_id
            .store(link.cm_id.as_raw(), Ordering::Relaxed);
        inner.conn = Some(super::Conn { link, sess });
        inner.state = QpState::Rts;
        // The initiator's RTR, or work posted while the connection was set up.
        super::tx::kick(qp);
    }
    Ok(())
}

/// Takes the link out of `qp` and moves the QP to ERROR (flushing its queues).
///
/// The caller drops the returned link in process context (it may hold the last reference on
/// the socket).
pub(crate) fn detach(qp: &Qp<Rsiw>) -> Option<Link> {
    let mut inner = super::lock(qp);
    let link = super::enter_error(qp, &mut inner);
    qp.data()
        .cm_id
        .store(CmIdKey::NONE.as_raw(), Ordering::Relaxed);
    // The transmit work drops a round TCP has not taken yet.
    super::tx::kick(qp);
    link
}

/// Data arrived on the socket of `qp`'s link (softirq context, socket locked): the receive
/// path reads it.
pub(crate) fn data_arrived(qp: &Qp<Rsiw>, sk: &LockedSock) {
    super::rx::receive_or_defer(qp, sk);
}

/// Receives what is queued on the socket of `qp`'s link now, in the caller's context (process
/// context, socket locked): the peer's FIN arrived, and the data before it must be placed
/// before the QP leaves RTS.
pub(crate) fn drain_inbound(qp: &Qp<Rsiw>, sk: &LockedSock) {
    super::rx::receive(qp, sk);
}

/// Whether `qp`'s connection has a Terminate queued or sent: its close is under way.
pub(crate) fn terminating(qp: &Qp<Rsiw>) -> bool {
    super::lock(qp)
        .sess()
        .is_some_and(super::Session::terminating)
}

/// Drops what is queued on the socket of a link [`detach`]ed from its QP while the connection
/// closes (process context, socket locked): the peer's FIN must not wait behind it.
pub(crate) fn discard_inbound(sk: &LockedSock) {
    super::rx::discard(sk);
}

/// The socket of `qp`'s link has room again after a send that TCP did not take all of (any
/// context up to softirq): the transmit path resumes.
pub(crate) fn tx_ready(qp: &Qp<Rsiw>) {
    super::tx::kick(qp);
}
