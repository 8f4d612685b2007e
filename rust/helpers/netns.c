// SPDX-License-Identifier: GPL-2.0
/*
 * Non-inline wrappers for the static inline network namespace functions that
 * rsiw's kernel::netns calls.
 */

#include <linux/netdevice.h>
#include <linux/nsproxy.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <net/net_namespace.h>

struct net *rust_helper_get_net(struct net *net)
{
	return get_net(net);
}

void rust_helper_put_net(struct net *net)
{
	put_net(net);
}

/*
 * The namespace a netdev is in, with a reference, or NULL when that namespace
 * is being dismantled. A netdev can move to another namespace at any time
 * (under RTNL): the read is under RCU, and a namespace is freed only after a
 * grace period.
 */
struct net *rust_helper_netns_of_netdev(const struct net_device *dev)
{
	struct net *net;

	rcu_read_lock();
	net = maybe_get_net(dev_net(dev));
	rcu_read_unlock();
	return net;
}

/*
 * The calling task's network namespace, with a reference, or NULL once the
 * task has let go of its namespaces (while it exits).
 */
struct net *rust_helper_netns_of_current(void)
{
	struct nsproxy *ns = current->nsproxy;

	return ns ? get_net(ns->net_ns) : NULL;
}
