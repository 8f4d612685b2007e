#!/usr/bin/env bash
# Build rsiw.ko (and the selftest modules) out of tree against the cached kernel.
# CLIPPY=1 runs clippy as kbuild does for in-tree Rust.
set -euo pipefail
. "$(dirname "$0")/common.sh"
KDIR=$(kernel_dir)
lock_kernel_tree
[ -f "$KDIR/vmlinux" ] || die "no kernel build in $KDIR: run 'make kernel'"
args=(-C "$KDIR" M="$RSIW_ROOT" LLVM=1 -j"$JOBS")
[ -n "${CLIPPY:-}" ] && args+=(CLIPPY=1)
if [ "${1:-}" = clean ]; then
	make -s "${args[@]}" clean
	exit 0
fi
progress "building rsiw.ko"
make -s "${args[@]}" modules
