// SPDX-License-Identifier: GPL-2.0

//! The rsiw device: creation through `rdma link`, attributes, ports, and netdev tracking.

#![deny(unsafe_code)]

use crate::{
    cq::{self, CqData},
    mem::{self, MrData, StagTable},
    qp::{self, QpData},
    srq::{self, SrqData},
    stats::{self, Counters, QpCounters},
    wqe,
};
use core::{
    num::NonZeroU32,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};
use kernel::{
    c_str,
    irqlock::SpinLockIrq,
    netdev::{self, NetDevice},
    new_mutex, new_spinlock_irq,
    owned_queue::{OwnedQueue, QueueFlags},
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    rdma::{
        device::{
            self as rdma_dev, Device, DeviceAttr, DeviceInfo, DriverId, PortAttr, PortEvent,
            PortPhysState, PortState, Registry,
        },
        iwcm::CmIdKey,
        link::{HandlerSlot, LinkHandler},
        mr::{AllMemory, KernelRange, Mr, MrKeys, MrType},
        qp::{Qp, QpInitAttr, QpModify, QpQuery, QpRef, RecvWr, SendWr},
        res::ResDetails,
        srq::{Srq, SrqAttr, SrqInitAttr, SrqModify},
        stats::StatDesc,
        udata::UserData,
        umem::UserMemory,
        verbs::{Cq, CqInitAttr, NotifyRequest, Pd, WcArray},
    },
    str::CString,
    sync::{Arc, Mutex},
    workqueue::Queue,
};

/// Vendor id reported in device attributes ("rsi").
const VENDOR_ID: u32 = 0x0072_7369;

/// The only port of an rsiw device.
pub(crate) const PORT: u32 = 1;

/// IB speed and width reported when the netdev cannot tell (`IB_SPEED_SDR`, `IB_WIDTH_1X`).
const FALLBACK_SPEED_WIDTH: (u16, u8) = (1, 1);

/// Queue pairs by number, and the next number to try, behind [`DeviceData::qps`]. Taken by QP
/// creation and destruction and `get_hw_stats` (process context), and by `get_qp`, which `iw_cm`
/// calls with interrupts disabled. No other lock is taken under it (statistics are atomics).
struct QpTable {
    by_qpn: RBTree<u32, QpRef<Rsiw>>,
    next_qpn: u32,
}

/// Most protection domains per device.
const MAX_PD: u32 = 1 << 16;
/// Most completion queues per device.
const MAX_CQ: u32 = 1 << 16;

/// Takes one of `limit` slots counted by `counter`, or fails with `ENOSPC`.
fn take_slot(counter: &AtomicU32, limit: u32) -> Result {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .map(|_| ())
        .map_err(|_| ENOSPC)
}

/// Source of per-device `vendor_part_id`s, which libsiw also uses as its device id.
static NEXT_PART_ID: AtomicU32 = AtomicU32::new(0);

/// Per-device state.
#[pin_data(PinnedDrop)]
pub(crate) struct DeviceData {
    /// Live queue pairs by number, for the connection manager's lookups. A spinlock: iw_cm
    /// looks QPs up with interrupts disabled.
    #[pin]
    qps: SpinLockIrq<QpTable>,
    /// Live memory regions by STag index ([`StagTable`] says who takes it).
    #[pin]
    pub(crate) stags: SpinLockIrq<StagTable>,
    /// Set once the netdev's unregistration started the device's own.
    removing: AtomicBool,
    /// Live queue pairs, bounded by [`qp::MAX_QP`].
    num_qp: AtomicU32,
    /// Live memory regions, bounded by [`mem::MAX_MR`].
    num_mr: AtomicU32,
    /// Live protection domains, bounded by [`MAX_PD`].
    num_pd: AtomicU32,
    /// Live completion queues, bounded by [`MAX_CQ`].
    num_cq: AtomicU32,
    /// Live shared receive queues, bounded by [`srq::MAX_SRQ`].
    num_srq: AtomicU32,
    /// `vendor_part_id`, unique per device while the module is loaded.
    part_id: u32,
    /// Node GUID, an EUI-64 of the netdev's MAC at creation time.
    node_guid: u64,
    /// The name the device was created with, for the removal message.
    name: CString,
    /// The module's workqueues, where the device's QPs transmit and receive.
    wq: Arc<WorkQueues>,
    /// The connection manager's counts, and those of QPs already destroyed ([`crate::stats`]).
    pub(crate) counters: Counters,
    /// The QP counters (`rdma statistic qp`). Taken in process context by the core's counter
    /// calls (under the core's lock of the counter); `qps` may nest inside it, never the reverse.
    #[pin]
    qp_counters: Mutex<QpCounters>,
}

/// The module's workqueues (see `Execution model` in `Documentation/rsiw/design.rst`).
pub(crate) struct WorkQueues {
    /// Unbound: transmit work and the connection manager's.
    general: OwnedQueue,
    /// Per CPU: receive work, each item queued on a CPU other than the `data_ready` upcall's
    /// (on a loopback route, the sender's). CPU intensive: an item places up to a socket's
    /// worth of data, and must not hold back the CPU's other per-CPU work meanwhile.
    receive: OwnedQueue,
}

impl WorkQueues {
    fn new() -> Result<Self> {
        // Reclaim, both: NFS and NVMe-oF writeback go through them.
        let reclaim = QueueFlags::MEM_RECLAIM;
        Ok(Self {
            general: OwnedQueue::new(c_str!("rsiw"), QueueFlags::UNBOUND | reclaim)?,
            receive: OwnedQueue::new(
                c_str!("rsiw_rx"),
                QueueFlags::PER_CPU | QueueFlags::CPU_INTENSIVE | reclaim,
            )?,
        })
    }
}

/// The workqueue that runs `dev`'s transmit and connection work.
pub(crate) fn workqueue(dev: &Device<Rsiw>) -> &Queue {
    dev.data().wq.general.queue()
}

/// The per-CPU workqueue that runs `dev`'s receive work.
pub(crate) fn receive_workqueue(dev: &Device<Rsiw>) -> &Queue {
    dev.data().wq.receive.queue()
}

#[pinned_drop]
impl PinnedDrop for DeviceData {
    /// The core releases the device (its `dealloc_driver`): the last step of every removal, once
    /// each ULP let go of the device and every object on it was destroyed.
    fn drop(self: Pin<&mut Self>) {
        let counts = [
            self.num_qp.load(Ordering::Acquire),
            self.num_cq.load(Ordering::Acquire),
            self.num_mr.load(Ordering::Acquire),
            self.num_pd.load(Ordering::Acquire),
            self.num_srq.load(Ordering::Acquire),
        ];
        if counts == [0; 5] {
            pr_info!("{}: removed\n", &*self.name);
        } else {
            // The core destroyed everything on the device, so a count left is a driver bug.
            pr_err!(
                "{}: removed with {} QPs, {} CQs, {} MRs, {} PDs, {} SRQs still counted\n",
                &*self.name,
                counts[0],
                counts[1],
                counts[2],
                counts[3],
                counts[4]
            );
        }
    }
}

/// The rsiw RDMA driver: answers the RDMA core's device-level verbs.
pub(crate) struct Rsiw;

#[vtable]
impl rdma_dev::Driver for Rsiw {
    type Data = DeviceData;
    // libsiw (rdma-core) serves user-space verbs for devices with the siw driver id and ABI.
    const DRIVER_ID: DriverId = DriverId::Siw;
    const ABI_VERSION: u32 = 1;
    type Pd = ();
    type Cq = CqData;
    type IwCm = crate::cm::RsiwCm;
    type Qp = QpData;
    type Mr = MrData;
    type Srq = SrqData;

    fn create_qp(
        pd: &Pd<Self>,
        attr: &mut QpInitAttr,
        srq: Option<&Srq<Self>>,
        udata: &mut UserData<'_>,
    ) -> Result<(impl PinInit<QpData, Error>, u32)> {
        let dev = pd.device();
        take_slot(&dev.data().num_qp, qp::MAX_QP)?;
        let res = qp::create(attr, srq, udata).and_then(|(init, response)| {
            let qpn = {
                let mut table = dev.data().qps.lock();
                // QPN 0 and 1 are special in the verbs API; wrap past them and skip live ones.
                let mut qpn = table.next_qpn.max(2);
                while table.by_qpn.get(&qpn).is_some() {
                    qpn = qpn.checked_add(1).unwrap_or(2);
                }
                table.next_qpn = qpn.checked_add(1).unwrap_or(2);
                qpn
            };
            if let Some(r) = response {
                udata.respond(&r.bytes(qpn))?;
            }
            Ok((init, qpn))
        });
        if res.is_err() {
            dev.data().num_qp.fetch_sub(1, Ordering::AcqRel);
        }
        res
    }

    fn qp_created(qp: &Qp<Self>) -> Result {
        let res = qp.get_ref().ok_or(EINVAL).and_then(|r| {
            // Allocate the node before taking the (spin) lock.
            let node = RBTreeNode::new(qp.qpn(), r, GFP_KERNEL)?;
            let old = qp.device().data().qps.lock().by_qpn.insert(node);
            // `create_qp` picked a free number under the same lock discipline; a clash would be a
            // driver bug, and dropping the old entry only releases a reference.
            drop(old);
            Ok(())
        });
        if res.is_err() {
            qp.device().data().num_qp.fetch_sub(1, Ordering::AcqRel);
        }
        res
    }

    fn destroy_qp(qp: &Qp<Self>) {
        qp::destroy(qp);
        let dev = qp.device();
        let entry = {
            let mut table = dev.data().qps.lock();
            // Under the table's lock, which readers of the counters hold: the QP's counts move
            // to the device's as it leaves the table, so they are summed once.
            // (The core unbound it from any QP counter first.)
            dev.data()
                .counters
                .add_values(&qp::unbound_counts(qp.data()));
            table.by_qpn.remove(&qp.qpn())
        };
        // Dropping the table's reference (outside the lock) lets destruction complete.
        drop(entry);
        dev.data().num_qp.fetch_sub(1, Ordering::AcqRel);
    }

    fn modify_qp(qp: &Qp<Self>, m: &QpModify, _udata: &mut UserData<'_>) -> Result {
        qp::modify(qp, m)
    }

    fn query_qp(qp: &Qp<Self>) -> Result<QpQuery> {
        Ok(qp::query(qp))
    }

    fn fill_res_qp(qp: &Qp<Self>, details: &mut ResDetails<'_>) -> Result {
        qp::fill_res(qp, details)
    }

    fn fill_res_cm_id(dev: &Device<Self>, id: CmIdKey, details: &mut ResDetails<'_>) -> Result {
        // A connected id's details are its QP's; a listener or an id still connecting has none.
        let qp = dev
            .data()
            .qps
            .lock()
            .by_qpn
            .iter()
            .find(|(_, qp)| qp.data().cm_id.load(Ordering::Relaxed) == id.as_raw())
            .map(|(_, qp)| qp.clone());
        match qp {
            Some(qp) => qp::fill_res(&qp, details),
            None => Ok(()),
        }
    }

    fn post_send(qp: &Qp<Self>, wr: &SendWr<'_, Self>) -> Result {
        qp::post_send(qp, wr)
    }

    fn post_recv(qp: &Qp<Self>, wr: &RecvWr<'_>) -> Result {
        qp::post_recv(qp, wr)
    }

    fn doorbell(qp: &Qp<Self>) -> Result {
        qp::doorbell(qp)
    }

    const HW_STATS: &'static [StatDesc] = &stats::NAMES;

    fn get_hw_stats(dev: &Device<Self>, _port: u32, values: &mut [u64]) {
        values.fill(0);
        let table = dev.data().qps.lock();
        dev.data().counters.sum_into(values);
        // The core adds the QP counters (`rdma statistic qp`) to these values: what a QP counted
        // while bound to one is theirs, not the port's.
        for (_, qp) in table.by_qpn.iter() {
            stats::add_into(values, &qp::unbound_counts(qp.data()));
        }
    }

    fn counter_bind_qp(
        qp: &Qp<Self>,
        counter: Option<NonZeroU32>,
        _port: u32,
    ) -> Result<NonZeroU32> {
        let dev = qp.device();
        let id = match counter {
            Some(id) => id,
            None => dev.data().qp_counters.lock().alloc(qp::MAX_QP as usize)?,
        };
        let d = qp.data();
        // Under the table's lock, which the readers of the counters hold: they see the QP bound
        // with its base, or not bound.
        let _table = dev.data().qps.lock();
        d.counter_base.store(&d.counters.snapshot());
        d.counter_id.store(id.get(), Ordering::Relaxed);
        Ok(id)
    }

    fn counter_unbind_qp(qp: &Qp<Self>, counter: NonZeroU32) -> Result {
        let dev = qp.device();
        let d = qp.data();
        let mut counters = dev.data().qp_counters.lock();
        let _table = dev.data().qps.lock();
        // What the QP counted while bound stays the counter's, and leaves the port's own. (The
        // core unbinds a QP it destroys even if this fails, so it does not: a counter unknown
        // here would be a driver bug, and its QP's counts then stay the port's.)
        if let Some(history) = counters.get_mut(counter) {
            let gain = stats::difference(&d.counters.snapshot(), &d.counter_base.snapshot());
            stats::add_into(history, &gain);
            d.counted_bound.add_values(&gain);
        }
        d.counter_id.store(0, Ordering::Relaxed);
        Ok(())
    }

    fn counter_dealloc(dev: &Device<Self>, counter: NonZeroU32) {
        dev.data().qp_counters.lock().free(counter);
    }

    fn counter_update_stats(dev: &Device<Self>, counter: NonZeroU32, values: &mut [u64]) -> Result {
        values.fill(0);
        {
            let mut counters = dev.data().qp_counters.lock();
            stats::add_into(values, counters.get_mut(counter).ok_or(EINVAL)?);
        }
        // The core holds the counter's lock: no QP binds to it or leaves it meanwhile.
        let table = dev.data().qps.lock();
        for (_, qp) in table.by_qpn.iter() {
            let d = qp.data();
            if d.counter_id.load(Ordering::Relaxed) == counter.get() {
                let gain = stats::difference(&d.counters.snapshot(), &d.counter_base.snapshot());
                stats::add_into(values, &gain);
            }
        }
        Ok(())
    }

    fn get_qp(dev: &Device<Self>, qpn: u32) -> Option<QpRef<Self>> {
        dev.data().qps.lock().by_qpn.get(&qpn).cloned()
    }

    fn get_dma_mr(
        pd: &Pd<Self>,
        access: u32,
        memory: AllMemory,
    ) -> Result<(impl PinInit<MrData, Error>, MrKeys)> {
        take_slot(&pd.device().data().num_mr, mem::MAX_MR)?;
        mem::get_dma_mr(pd, access, memory).inspect_err(|_| {
            pd.device().data().num_mr.fetch_sub(1, Ordering::AcqRel);
        })
    }

    fn alloc_mr(
        pd: &Pd<Self>,
        ty: MrType,
        max_num_sg: u32,
    ) -> Result<(impl PinInit<MrData, Error>, MrKeys)> {
        take_slot(&pd.device().data().num_mr, mem::MAX_MR)?;
        mem::alloc_mr(pd, ty, max_num_sg).inspect_err(|_| {
            pd.device().data().num_mr.fetch_sub(1, Ordering::AcqRel);
        })
    }

    fn reg_user_mr(
        pd: &Pd<Self>,
        mem: UserMemory,
        iova: u64,
        access: u32,
        udata: &mut UserData<'_>,
    ) -> Result<(impl PinInit<MrData, Error>, MrKeys)> {
        take_slot(&pd.device().data().num_mr, mem::MAX_MR)?;
        mem::reg_user_mr(pd, mem, iova, access, udata).inspect_err(|_| {
            pd.device().data().num_mr.fetch_sub(1, Ordering::AcqRel);
        })
    }

    fn dereg_mr(mr: &Mr<Self>) {
        mem::dereg_mr(mr);
        mr.device().data().num_mr.fetch_sub(1, Ordering::AcqRel);
    }

    fn mr_map_begin(mr: &Mr<Self>) -> Result {
        mem::map_begin(mr)
    }

    fn mr_set_page(mr: &Mr<Self>, page: KernelRange) -> Result {
        mem::set_page(mr, page)
    }

    fn alloc_pd(dev: &Device<Self>, _udata: &mut UserData<'_>) -> Result<impl PinInit<(), Error>> {
        take_slot(&dev.data().num_pd, MAX_PD)?;
        Ok(())
    }

    fn dealloc_pd(pd: &Pd<Self>) {
        pd.device().data().num_pd.fetch_sub(1, Ordering::AcqRel);
    }

    fn create_cq(
        dev: &Device<Self>,
        attr: &CqInitAttr,
        udata: &mut UserData<'_>,
    ) -> Result<(impl PinInit<CqData, Error>, u32)> {
        take_slot(&dev.data().num_cq, MAX_CQ)?;
        CqData::new(attr, udata).inspect_err(|_| {
            dev.data().num_cq.fetch_sub(1, Ordering::AcqRel);
        })
    }

    fn destroy_cq(cq: &Cq<Self>) {
        cq.device().data().num_cq.fetch_sub(1, Ordering::AcqRel);
    }

    fn poll_cq(cq: &Cq<Self>, out: &mut WcArray<'_>) {
        cq::poll(cq, out);
    }

    fn req_notify_cq(cq: &Cq<Self>, req: NotifyRequest) -> bool {
        cq::arm(cq, req)
    }

    fn create_srq(
        pd: &Pd<Self>,
        attr: &mut SrqInitAttr,
        udata: &mut UserData<'_>,
    ) -> Result<impl PinInit<SrqData, Error>> {
        let dev = pd.device();
        take_slot(&dev.data().num_srq, srq::MAX_SRQ)?;
        srq::create(pd, attr, udata).inspect_err(|_| {
            dev.data().num_srq.fetch_sub(1, Ordering::AcqRel);
        })
    }

    fn destroy_srq(s: &Srq<Self>) {
        s.device().data().num_srq.fetch_sub(1, Ordering::AcqRel);
    }

    fn modify_srq(s: &Srq<Self>, m: &SrqModify) -> Result {
        srq::queue(s).modify(m)
    }

    fn query_srq(s: &Srq<Self>) -> Result<SrqAttr> {
        Ok(srq::queue(s).query())
    }

    fn post_srq_recv(s: &Srq<Self>, wr: &RecvWr<'_>) -> Result {
        srq::queue(s).post(wr)
    }

    fn query_device(dev: &Device<Self>) -> Result<DeviceAttr> {
        let data = dev.data();
        Ok(DeviceAttr {
            max_qp: qp::MAX_QP,
            max_qp_wr: wqe::MAX_QP_WR,
            max_send_sge: wqe::MAX_SGE,
            max_recv_sge: wqe::MAX_SGE,
            max_sge_rd: wqe::MAX_SGE_RD,
            max_qp_rd_atom: qp::MAX_IRD_ORD,
            max_qp_init_rd_atom: qp::MAX_IRD_ORD,
            max_res_rd_atom: qp::MAX_QP.saturating_mul(qp::MAX_IRD_ORD),
            max_mr: mem::MAX_MR,
            max_mr_size: u64::MAX,
            max_fast_reg_page_list_len: mem::MAX_FRWR_PAGES,
            device_cap_flags: rdma_dev::DEVICE_MEM_MGT_EXTENSIONS,
            max_pd: MAX_PD,
            max_cq: MAX_CQ,
            max_cqe: cq::MAX_CQE,
            max_srq: srq::MAX_SRQ,
            max_srq_wr: srq::MAX_SRQ_WR,
            max_srq_sge: wqe::MAX_SGE,
            vendor_id: VENDOR_ID,
            vendor_part_id: data.part_id,
            sys_image_guid: data.node_guid,
            page_size_cap: kernel::page::PAGE_SIZE as u64,
            kernel_cap_flags: rdma_dev::KERNEL_CAP_ALLOW_USER_UNREG,
            ..DeviceAttr::default()
        })
    }

    fn query_port(dev: &Device<Self>, port: u32) -> Result<PortAttr> {
        if port != PORT {
            return Err(EINVAL);
        }
        let ndev = dev.netdev(port).ok_or(ENODEV)?;
        let link_up = ndev.is_running() && ndev.has_carrier();
        let (active_speed, active_width) = dev.eth_speed(port).unwrap_or(FALLBACK_SPEED_WIDTH);
        Ok(PortAttr {
            state: if link_up {
                PortState::Active
            } else {
                PortState::Down
            },
            phys_state: if link_up {
                PortPhysState::LinkUp
            } else {
                PortPhysState::Disabled
            },
            // A max_mtu of zero means the netdev sets no limit (e.g. dummy).
            max_mtu: match ndev.max_mtu() {
                0 => u32::MAX,
                max => max.max(ndev.mtu()),
            },
            active_mtu: ndev.mtu(),
            active_speed,
            active_width,
            gid_tbl_len: 1,
            max_msg_sz: u32::MAX,
        })
    }

    fn query_gid(dev: &Device<Self>, port: u32, _index: u32) -> Result<[u8; 16]> {
        if port != PORT {
            return Err(EINVAL);
        }
        // iWARP has no GIDs on the wire; the convention (shared with C siw) is the MAC address.
        let mac = dev
            .netdev(port)
            .ok_or(ENODEV)?
            .mac_address()
            .ok_or(ENODEV)?;
        let mut gid = [0u8; 16];
        gid[..netdev::ETH_ALEN].copy_from_slice(&mac);
        Ok(gid)
    }

    fn alloc_ucontext(dev: &Device<Self>, udata: &mut UserData<'_>) -> Result {
        // `struct siw_uresp_alloc_ctx { __u32 dev_id; __u32 pad; }` of the siw user ABI.
        let mut resp = [0u8; 8];
        resp[..4].copy_from_slice(&dev.data().part_id.to_ne_bytes());
        udata.respond(&resp)
    }
}

/// Serves `rdma link add NAME type rsiw netdev DEV`, and owns every device it created.
#[pin_data]
pub(crate) struct Links {
    #[pin]
    registry: Registry<Rsiw>,
    /// Serializes device creation, so two requests for one netdev or name cannot both pass the
    /// duplicate checks. Taken only by `newlink` (`rdma link add`, process context), and held
    /// across the device's registration, which may sleep: hence a mutex.
    #[pin]
    create_lock: Mutex<()>,
    /// The module's workqueues, shared by every device. Dropped after `registry`, which removed
    /// every device, so the drains wait only for items finishing: none runs module code later.
    wq: Arc<WorkQueues>,
}

static LINK_SLOT: HandlerSlot<Links> = HandlerSlot::new();

impl Links {
    pub(crate) fn new(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            registry <- Registry::new(module),
            create_lock <- new_mutex!((), "rsiw::Links::create_lock"),
            wq: Arc::new(WorkQueues::new()?, GFP_KERNEL)?,
        })
    }

    fn check_netdev(name: &CStr, ndev: &NetDevice) -> Result {
        let ty = ndev.hw_type();
        if ty != netdev::ARPHRD_ETHER && ty != netdev::ARPHRD_IEEE802 {
            pr_err!(
                "{}: netdev {} is not Ethernet-like (ARPHRD type {})\n",
                name,
                ndev.name(),
                ty
            );
            return Err(EINVAL);
        }
        if ndev.mac_address().is_none() {
            pr_err!("{}: netdev {} has no MAC address\n", name, ndev.name());
            return Err(EINVAL);
        }
        Ok(())
    }
}

impl LinkHandler for Links {
    const TYPE: &'static CStr = c_str!("rsiw");

    fn slot() -> &'static HandlerSlot<Self> {
        &LINK_SLOT
    }

    fn newlink(&self, name: &CStr, ndev: &NetDevice) -> Result {
        Self::check_netdev(name, ndev)?;
        let _guard = self.create_lock.lock();
        if rdma_dev::name_in_use(name) {
            pr_err!(
                "{}: an RDMA device with this name already exists (requested on netdev {})\n",
                name,
                ndev.name()
            );
            return Err(EEXIST);
        }
        if rdma_dev::netdev_has_device(ndev, DriverId::Siw) {
            pr_err!(
                "{}: netdev {} already has a soft-iWARP device\n",
                name,
                ndev.name()
            );
            return Err(EEXIST);
        }
        let eui = ndev.eui64().ok_or(EINVAL)?;
        let node_guid = u64::from_be_bytes(eui);
        let info = DeviceInfo {
            node_guid,
            node_desc: c_str!("rsiw software iWARP"),
            num_comp_vectors: 1,
        };
        let stag_table = StagTable::new()?;
        let dev_name = CString::try_from_fmt(kernel::fmt!("{}", name))?;
        let data = try_pin_init!(DeviceData {
            qps <- new_spinlock_irq!(
                QpTable {
                    by_qpn: RBTree::new(),
                    next_qpn: 2,
                },
                "rsiw::DeviceData::qps"
            ),
            stags <- new_spinlock_irq!(stag_table, "rsiw::DeviceData::stags"),
            removing: AtomicBool::new(false),
            num_qp: AtomicU32::new(0),
            num_mr: AtomicU32::new(0),
            num_pd: AtomicU32::new(0),
            num_cq: AtomicU32::new(0),
            num_srq: AtomicU32::new(0),
            part_id: NEXT_PART_ID.fetch_add(1, Ordering::Relaxed),
            node_guid,
            name: dev_name,
            wq: self.wq.clone(),
            counters: Counters::new(),
            qp_counters <- new_mutex!(QpCounters::new(), "rsiw::DeviceData::qp_counters"),
        });
        if let Err(e) = self.registry.register(name, ndev, &info, data) {
            pr_err!(
                "{}: registering on netdev {} failed: {:?}\n",
                name,
                ndev.name(),
                e
            );
            return Err(e);
        }
        pr_info!("{}: created on netdev {}\n", name, ndev.name());
        Ok(())
    }
}

/// Follows netdev events for netdevs that carry an rsiw device.
pub(crate) struct NetdevEvents;

impl netdev::Notifier for NetdevEvents {
    fn event(&self, ndev: &NetDevice, event: netdev::Event) {
        let Some(dev) = Device::<Rsiw>::lookup_by_netdev(ndev) else {
            return;
        };
        match event {
            netdev::Event::Up | netdev::Event::Down | netdev::Event::Change => {
                let up = ndev.is_running() && ndev.has_carrier();
                dev.dispatch_port_event(
                    PORT,
                    if up {
                        PortEvent::Active
                    } else {
                        PortEvent::Error
                    },
                );
            }
            netdev::Event::ChangeAddr => {
                dev.dispatch_port_event(PORT, PortEvent::AddressChange);
                dev.dispatch_port_event(PORT, PortEvent::GidChange);
            }
            netdev::Event::Unregister => {
                // The kernel repeats this event while the netdev still has references (the
                // device's own until its unregistration finishes): act on the first only.
                if !dev.data().removing.swap(true, Ordering::AcqRel) {
                    pr_info!(
                        "{}: netdev {} is going away, removing device\n",
                        dev.name(),
                        ndev.name()
                    );
                    Device::unregister_queued(dev);
                }
            }
            _ => {}
        }
    }
}
