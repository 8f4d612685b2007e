# rsiw: soft-iWARP RDMA provider in Rust-for-Linux.
#
#   make run            boot the VM, bring up rsiw0, NFS over RDMA through it, a summary
#   make check          every test: host-side Rust, then the VM selftests
#   make check-full     the same at full sizes (about 2 hours; not in CI)
#   make soak           30 minutes of NFS, NVMe-oF and test-ULP traffic through
#                       cycling network faults (SOAK_SECS; not in CI)
#   make check KASAN=1  make check on the KASAN kernel (qemu/rsiw-kasan.config;
#                       its own tree; KASAN=1 works with any target)
#   make check TESTS=G  only the VM selftests whose name matches glob G
#   make pair-check     only the two-VM selftests (interop with the C siw; also in check)
#   make bench          side-by-side benchmarks (see README.md)
#   make fuzz           longer fuzzing runs of the protocol core
#   make module         build rsiw.ko against the cached kernel (and install it
#                       in the VM's module tree, for modprobe)
#   make install        install rsiw.ko in the VM's module tree; with DESTDIR=/
#                       in /lib/modules/RELEASE of a host running that kernel
#   make kernel         bootstrap and build the cached kernel only
#
# Out-of-tree kbuild (make -C KDIR M=...) re-enters this Makefile with
# KERNELRELEASE set; then only Kbuild matters.

ifneq ($(KERNELRELEASE),)
include $(src)/Kbuild
else

TESTS ?= *
export TESTS

.PHONY: all run check check-full soak bench fuzz module install kernel deps host-check vm-check pair-check clippy fmt clean

all: module

deps:
	@scripts/deps.sh

kernel: deps
	@scripts/kernel.sh >/dev/null

module: kernel
	@scripts/module.sh

install: module
	@scripts/module.sh install

run: module
	@qemu/run.sh

check:
	@scripts/check.sh

check-full:
	@CHECK_FULL=1 scripts/check.sh

soak: module
	@SELFTESTS_DIR=selftests/soak TESTS='*' qemu/run-tests.sh

host-check:
	@selftests/host-check.sh

vm-check: module
	@qemu/run-tests.sh

pair-check: module
	@qemu/run-tests.sh --pair

bench: module
	@qemu/bench.sh

fuzz:
	@selftests/proto/fuzz.sh $${FUZZ_SECONDS:-600}

fmt:
	@scripts/fmt.sh

clean:
	rm -rf selftests/proto/target results selftests/user/hostile_user
	@scripts/module.sh clean

endif
