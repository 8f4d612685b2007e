// SPDX-License-Identifier: GPL-2.0
/* Wrappers for the irq-saving spinlock macros used by kernel::irqlock. */

#include <linux/spinlock.h>

unsigned long rust_helper_spin_lock_irqsave(spinlock_t *lock)
{
	unsigned long flags;

	spin_lock_irqsave(lock, flags);
	return flags;
}

void rust_helper_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags)
{
	spin_unlock_irqrestore(lock, flags);
}
