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
# install_module: put rsiw.ko into a module tree and run depmod there, so that
# modprobe rsiw, and rdma link add ... type rsiw (through the module's alias
# rdma-link-rsiw), find it. Without DESTDIR the tree is the one the VM boots
# with: virtme-ng's .virtme_mods in the kernel tree, release 0.0.0 (set up
# first, as vng would, so that it finds the tree current). With DESTDIR (/ for
# a host running this kernel) it is DESTDIR/lib/modules/RELEASE.
install_module() {
	local base rel PATH=$PATH:/sbin:/usr/sbin
	if [ -z "${DESTDIR:-}" ]; then
		# A VM run on this tree modprobes rsiw from it and checks that it is
		# the run's own build: wait until no run uses it (qemu/run-tests.sh
		# holds this lock shared).
		exec 7>"$KDIR.modules.lock"
		if ! flock -n -x 7; then
			progress "waiting for the VM run that uses $KDIR's module tree to finish"
			flock -x 7
		fi
		(cd "$KDIR" && virtme-prep-kdir-mods >/dev/null)
		base=$KDIR/.virtme_mods rel=0.0.0
	else
		base=$DESTDIR rel=$(make -s -C "$KDIR" kernelrelease)
	fi
	install -D -m 0644 "$RSIW_ROOT/drivers/rsiw/rsiw.ko" "$base/lib/modules/$rel/extra/rsiw.ko"
	local warn
	warn=$(depmod -a -b "$base" -F "$KDIR/System.map" "$rel" 2>&1)
	if grep -q "unknown symbol" <<<"$warn"; then
		printf '%s\n' "$warn" | head -n 5 >&2
		die "rsiw.ko does not match the built kernel (scripts/module.sh clean, then make module)"
	fi
	progress "installed rsiw.ko in $base/lib/modules/$rel/extra"
}

if [ "${1:-}" = install ]; then
	[ -f "$RSIW_ROOT/drivers/rsiw/rsiw.ko" ] || die "no rsiw.ko: run 'make module'"
	install_module
	exit 0
fi
# Kbuild does not see a rebuilt kernel crate as a change to a module's Rust
# objects: the modules would keep calling symbols that moved (depmod then warns
# of unknown symbols, and loading fails). Rebuild them from scratch then.
if [ "$KDIR/rust/libkernel.rmeta" -nt "$RSIW_ROOT/drivers/rsiw/rsiw.ko" ] &&
	[ -f "$RSIW_ROOT/drivers/rsiw/rsiw.ko" ]; then
	progress "the kernel crate changed: rebuilding the modules from scratch"
	make -s "${args[@]}" clean
fi
progress "building rsiw.ko"
make -s "${args[@]}" modules
# The user-space selftest programs, against the host's rdma-core (the VM runs
# the host's root file system): compiling in the VM takes 20 s under TCG.
for c in "$RSIW_ROOT"/selftests/user/*.c; do
	cc -O2 -Wall -Werror -o "${c%.c}" "$c" -libverbs -lrdmacm -lpthread
done
# The VM tests load rsiw with modprobe: the VM's module tree gets every build.
DESTDIR='' install_module
