// SPDX-License-Identifier: GPL-2.0
/*
 * Non-inline wrappers for the static inline RDMA core and netdev functions
 * that rsiw's Rust abstractions (kernel::rdma, kernel::netdev) call.
 */

#include <linux/completion.h>
#include <linux/mm.h>
#include <linux/netdevice.h>
#include <linux/overflow.h>
#include <net/addrconf.h>
#include <rdma/ib_verbs.h>

bool rust_helper_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

void rust_helper_ib_mark_name_assigned_by_user(struct ib_device *ibdev)
{
	ib_mark_name_assigned_by_user(ibdev);
}

enum ib_mtu rust_helper_ib_mtu_int_to_enum(int mtu)
{
	return ib_mtu_int_to_enum(mtu);
}

bool rust_helper_netif_running(const struct net_device *dev)
{
	return netif_running(dev);
}

bool rust_helper_netif_carrier_ok(const struct net_device *dev)
{
	return netif_carrier_ok(dev);
}

void rust_helper_dev_hold(struct net_device *dev)
{
	dev_hold(dev);
}

void rust_helper_dev_put(struct net_device *dev)
{
	dev_put(dev);
}

struct net_device *rust_helper_netdev_notifier_info_to_dev(const struct netdev_notifier_info *info)
{
	return netdev_notifier_info_to_dev(info);
}

void rust_helper_addrconf_addr_eui48(u8 *eui, const char *const addr)
{
	addrconf_addr_eui48(eui, addr);
}

void rust_helper_init_completion(struct completion *x)
{
	init_completion(x);
}

/*
 * Whether every page of the len bytes at addr lies in the kernel's direct
 * map: the only memory a virtual-DMA device's DMA address can name. It reads
 * nothing; a zero-length range names no memory and is accepted.
 */
bool rust_helper_rsiw_direct_map_valid(u64 addr, size_t len)
{
	unsigned long start = addr, last, page;

	if (len == 0)
		return true;
	if (start != addr || check_add_overflow(start, len - 1, &last))
		return false;
	for (page = start & PAGE_MASK;; page += PAGE_SIZE) {
		if (!virt_addr_valid((void *)page))
			return false;
		if (page >= (last & PAGE_MASK))
			return true;
	}
}
