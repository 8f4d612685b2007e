// SPDX-License-Identifier: GPL-2.0
/*
 * A use-after-free for the selftest harness's canary (kernel::bug), in C: it
 * cannot be written in safe Rust, and must not be.
 */

#include <linux/delay.h>
#include <linux/jiffies.h>
#include <linux/kfence.h>
#include <linux/slab.h>

/*
 * Frees a small object and reads it, once one comes up that KFENCE guards (or
 * at once with KASAN, which guards them all). Tries for up to 5 s: KFENCE
 * hands out one guarded object per sample interval, to whichever allocation
 * comes first. Returns whether it read freed memory.
 */
bool rust_helper_canary_use_after_free(void)
{
	unsigned long deadline = jiffies + 5 * HZ;
	char *p;

	do {
		p = kmalloc(32, GFP_KERNEL);
		if (!p)
			return false;
		if (IS_ENABLED(CONFIG_KASAN) || is_kfence_address(p)) {
			kfree(p);
			(void)READ_ONCE(*p);
			return true;
		}
		kfree(p);
		usleep_range(200, 400);
	} while (time_before(jiffies, deadline));
	return false;
}
