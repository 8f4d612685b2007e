// SPDX-License-Identifier: GPL-2.0
/*
 * Non-inline wrappers for the static inline socket, TCP and locking functions
 * (and function-like macros) that kernel::ksock calls.
 */

#include <linux/bottom_half.h>
#include <linux/mm.h>
#include <linux/net.h>
#include <linux/rwlock.h>
#include <linux/vmalloc.h>
#include <net/ipv6.h>
#include <net/net_namespace.h>
#include <net/sock.h>
#include <net/tcp.h>

void rust_helper_read_lock(rwlock_t *lock)
{
	read_lock(lock);
}

void rust_helper_read_unlock(rwlock_t *lock)
{
	read_unlock(lock);
}

void rust_helper_write_lock_bh(rwlock_t *lock)
{
	write_lock_bh(lock);
}

void rust_helper_write_unlock_bh(rwlock_t *lock)
{
	write_unlock_bh(lock);
}

void rust_helper_local_bh_disable(void)
{
	local_bh_disable();
}

void rust_helper_local_bh_enable(void)
{
	local_bh_enable();
}

void rust_helper_lock_sock(struct sock *sk)
{
	lock_sock(sk);
}

int rust_helper_sock_error(struct sock *sk)
{
	return sock_error(sk);
}

bool rust_helper_sk_stream_is_writeable(const struct sock *sk)
{
	return sk_stream_is_writeable(sk);
}

struct tcp_sock *rust_helper_tcp_sk(struct sock *sk)
{
	return tcp_sk(sk);
}

int rust_helper_ip6_sock_set_v6only(struct sock *sk)
{
	return ip6_sock_set_v6only(sk);
}

bool rust_helper_sendpage_ok(struct page *page)
{
	return sendpage_ok(page);
}

/*
 * The page backing kernel address @addr, in the direct map or in vmalloc
 * space; NULL for other addresses.
 */
struct page *rust_helper_ksock_kernel_addr_page(const void *addr)
{
	if (virt_addr_valid(addr))
		return virt_to_page(addr);
	if (is_vmalloc_addr(addr))
		return vmalloc_to_page(addr);
	return NULL;
}

void *rust_helper_ksock_page_address(struct page *page)
{
	return page_address(page);
}

/*
 * Whether the caller's reference on @page is the only one. Acquire: what the
 * holders of the references dropped before did with the page happens before
 * the caller writes to it.
 */
bool rust_helper_ksock_page_only_ref(struct page *page)
{
	return atomic_read_acquire(&page->_refcount) == 1;
}

void rust_helper_get_page(struct page *page)
{
	get_page(page);
}

void rust_helper_put_page(struct page *page)
{
	put_page(page);
}

/*
 * Whether the socket's cached route leaves through a loopback device, where
 * MSG_ZEROCOPY data is copied on delivery (skb_orphan_frags_rx).
 */
bool rust_helper_ksock_route_is_loopback(struct sock *sk)
{
	struct dst_entry *dst = sk_dst_get(sk);
	bool loopback = dst && dst->dev && (dst->dev->flags & IFF_LOOPBACK);

	dst_release(dst);
	return loopback;
}

/* The bytes the peer may still send under the window advertised last. */
u32 rust_helper_ksock_receive_window(struct sock *sk)
{
	return tcp_receive_window(tcp_sk(sk));
}

int rust_helper_ksock_inq(struct sock *sk)
{
	return tcp_inq(sk);
}

/*
 * SO_RCVLOWAT without tcp_set_rcvlowat's side effects: that one calls
 * sk_data_ready (the caller may be inside it) and grows sk_rcvbuf.
 */
void rust_helper_ksock_set_rcvlowat(struct sock *sk, int val)
{
	WRITE_ONCE(sk->sk_rcvlowat, val ? : 1);
}

/*
 * What a TCP socket's upcalls do by default (sock_init_data, tcp_init_sock).
 * kernel::ksock's upcalls run these on a socket whose sk_user_data is not
 * theirs. sock_def_wakeup and sock_def_error_report are static in
 * net/core/sock.c: the last two are copies of them.
 */
void rust_helper_ksock_default_data_ready(struct sock *sk)
{
	sock_def_readable(sk);
}

void rust_helper_ksock_default_write_space(struct sock *sk)
{
	sk_stream_write_space(sk);
}

void rust_helper_ksock_default_state_change(struct sock *sk)
{
	struct socket_wq *wq;

	rcu_read_lock();
	wq = rcu_dereference(sk->sk_wq);
	if (skwq_has_sleeper(wq))
		wake_up_interruptible_all(&wq->wait);
	rcu_read_unlock();
}

void rust_helper_ksock_default_error_report(struct sock *sk)
{
	struct socket_wq *wq;

	rcu_read_lock();
	wq = rcu_dereference(sk->sk_wq);
	if (skwq_has_sleeper(wq))
		wake_up_interruptible_poll(&wq->wait, EPOLLERR);
	sk_wake_async_rcu(sk, SOCK_WAKE_IO, POLL_ERR);
	rcu_read_unlock();
}

/*
 * Makes a kernel socket hold a reference to its namespace, as a user socket
 * does, unless the namespace is already being dismantled. True if it holds one
 * now. Process context (the upgrade allocates a tracker with GFP_KERNEL),
 * without the socket lock, by the socket's only user.
 */
bool rust_helper_sk_hold_netns(struct sock *sk)
{
	struct net *net = sock_net(sk);

	if (sk->sk_net_refcnt)
		return true;
	if (!maybe_get_net(net))
		return false;
	sk_net_refcnt_upgrade(sk);
	put_net(net);
	return true;
}
