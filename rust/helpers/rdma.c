// SPDX-License-Identifier: GPL-2.0
/*
 * Non-inline wrappers for the static inline RDMA core, netdev and memory-map
 * functions that rsiw's Rust abstractions (kernel::rdma, kernel::netdev) call.
 */

#include <linux/completion.h>
#include <linux/mm.h>
#include <linux/netdevice.h>
#include <linux/set_memory.h>
#include <net/addrconf.h>
#include <net/netlink.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>

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

bool rust_helper_virt_addr_valid(unsigned long addr)
{
	return virt_addr_valid((void *)addr);
}

/*
 * The page behind kernel virtual address addr if addr lies in the kernel's
 * linear map of RAM (not in the kernel image's own mapping, vmalloc or module
 * space) and has a struct page; NULL otherwise. Reads nothing at addr.
 */
struct page *rust_helper_linear_map_page(unsigned long addr)
{
	if (addr < PAGE_OFFSET || addr >= (unsigned long)high_memory ||
	    !virt_addr_valid((void *)addr))
		return NULL;
	return virt_to_page((void *)addr);
}

/*
 * Whether the linear map maps addr, a linear-map address, present and
 * writable now: set_direct_map_invalid_noflush() (secretmem), set_memory_np()
 * (pages with memory errors) and set_memory_ro() (of the page, or of its
 * vmalloc alias, such as a module's read-only sections) change that. Reads
 * nothing at addr. Only x86 lets its page tables be asked here; elsewhere a
 * present page counts as writable.
 */
bool rust_helper_linear_map_writable(unsigned long addr)
{
#ifdef CONFIG_X86
	unsigned int level;
	pte_t *pte = lookup_address(addr, &level);
	unsigned long want = _PAGE_PRESENT | _PAGE_RW;

	return pte && (pte_flags(ptep_get(pte)) & want) == want;
#else
	return kernel_page_present(virt_to_page((void *)addr));
#endif
}

bool rust_helper_PageReserved(struct page *page)
{
	return PageReserved(page);
}

bool rust_helper_PageHWPoison(struct page *page)
{
	return PageHWPoison(page);
}

bool rust_helper_PageOffline(struct page *page)
{
	return PageOffline(page);
}

bool rust_helper_is_zero_page(struct page *page)
{
	return is_zero_page(page);
}

struct nlattr *rust_helper_nla_nest_start_noflag(struct sk_buff *skb, int attrtype)
{
	return nla_nest_start_noflag(skb, attrtype);
}

int rust_helper_nla_nest_end(struct sk_buff *skb, struct nlattr *start)
{
	return nla_nest_end(skb, start);
}

void rust_helper_nla_nest_cancel(struct sk_buff *skb, struct nlattr *start)
{
	nla_nest_cancel(skb, start);
}

/* The user context of a uverbs call, from the driver udata it carries. */
struct ib_ucontext *rust_helper_rdma_udata_ucontext(struct ib_udata *udata)
{
	return container_of(udata, struct uverbs_attr_bundle, driver_udata)->context;
}

/* The driver udata of a uverbs call (create_cq gets the whole bundle). */
struct ib_udata *rust_helper_rdma_bundle_udata(struct uverbs_attr_bundle *attrs)
{
	return &attrs->driver_udata;
}

u64 rust_helper_rdma_user_mmap_get_offset(const struct rdma_user_mmap_entry *entry)
{
	return rdma_user_mmap_get_offset(entry);
}

dma_addr_t rust_helper_sg_dma_address(struct scatterlist *sg)
{
	return sg_dma_address(sg);
}

unsigned int rust_helper_sg_dma_len(struct scatterlist *sg)
{
	return sg_dma_len(sg);
}
