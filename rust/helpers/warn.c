// SPDX-License-Identifier: GPL-2.0
/* WARN() for kernel::bug: the C macro behind a function, naming Rust's caller. */

#include <linux/bug.h>

void rust_helper_warn_at(const char *file, int len, unsigned int line)
{
	WARN(1, "warning at %.*s:%u\n", len, file, line);
}
