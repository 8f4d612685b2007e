// SPDX-License-Identifier: GPL-2.0
/* Wrapper for INIT_DELAYED_WORK, used by kernel::owned_queue::DelayedWork and
 * kernel::rdma::qp::QpWork, and the CPU choice of kernel::owned_queue::Cpu. */

#include <linux/cpumask.h>
#include <linux/smp.h>
#include <linux/workqueue.h>

void rust_helper_owned_queue_init_delayed_work(struct delayed_work *dwork,
					       work_func_t func,
					       const char *name,
					       struct lock_class_key *key)
{
	__init_work(&dwork->work, false);
	dwork->work.data = (atomic_long_t)WORK_DATA_INIT();
	lockdep_init_map(&dwork->work.lockdep_map, name, key, 0);
	INIT_LIST_HEAD(&dwork->work.entry);
	dwork->work.func = func;
	__init_timer(&dwork->timer, delayed_work_timer_fn, TIMER_IRQSAFE);
}

/*
 * One of the online CPUs other than the caller's, picked by spread modulo
 * their number; -1 when the caller's is the only one. The caller may move
 * meanwhile, and the CPU may go offline: work queued on it then runs on some
 * other CPU, as queue_work_on() documents.
 */
int rust_helper_owned_queue_other_cpu(unsigned int spread)
{
	unsigned int others = num_online_cpus() - 1;
	int self = raw_smp_processor_id();
	unsigned int cpu;

	if (!others)
		return -1;
	cpu = cpumask_nth_andnot(spread % others, cpu_online_mask,
				 cpumask_of(self));
	return cpu < nr_cpu_ids ? cpu : -1;
}
