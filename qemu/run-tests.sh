#!/usr/bin/env bash
# make vm-check: boot the built kernel once under virtme-ng (TCG) and run the
# selected selftests/*.sh in it, one after another, judging each on its TAP
# output, its exit status and the kernel log it caused.
#
#   qemu/run-tests.sh                  every selftest matching $TESTS (default *)
#   qemu/run-tests.sh --check-matcher  host-only check of the splat matcher
#
# Prints TAP; each test's own TAP is shown as an indented subtest. The last
# lines name each check a test skipped, and the last is "vm: N passed, M
# failed, K skipped", counting test files and skipped checks. Exits non-zero
# on any failure. Logs stay in results/<run>/ (results/latest points at the newest).
# Environment: TESTS (glob on the test name without .sh), RSIW_MODULE,
# RSIW_LINK_TYPE, RSIW_KO and the tests' size knobs NFS_*, NVME_*, FLOOD_*, USER_*,
# ZERO_WINDOW_*, UNLOAD_*, FAULT_*, HOG_* and PRESSURE_* (passed to the tests), SELFTESTS_DIR (where the
# tests are, default selftests/), VM_BOOT_TIMEOUT (s, default 300),
# VM_TEST_SLACK (s a test may overrun its own timeout before the VM is
# killed, default 120), VM_TOTAL_TIMEOUT (s, default: boot + the sum of the
# tests' timeouts and slacks).
# See Documentation/rsiw/testing.rst.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=vm.sh
. "$(dirname "$0")/vm.sh"
cd "$RSIW_ROOT" || exit

passed=0 failed=0 skipped=()
result() { # ok|not-ok NUMBER NAME [DIAGNOSTIC]...
	local verdict=$1 n=$2 name=$3
	shift 3
	if [ "$verdict" = ok ]; then
		echo "ok $n $name"
		passed=$((passed + 1))
	else
		echo "not ok $n $name"
		failed=$((failed + 1))
	fi
	local d
	for d in "$@"; do
		printf '# %s\n' "${d//$'\n'/$'\n'# }"
	done
}

finish() {
	local skip
	for skip in "${skipped[@]}"; do
		echo "# skipped: $skip"
	done
	echo "vm: $passed passed, $failed failed, ${#skipped[@]} skipped"
	[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
	exit
}

# Canned kernel logs: what the matcher must flag and what it must let pass.
check_matcher() {
	local n=0 bad=0 line
	local positive=(
		'[   12.345678] WARNING: CPU: 1 PID: 230 at drivers/rsiw/device.rs:88 rsiw_newlink+0x1c/0x40 [rsiw]'
		'[   12.345678] ------------[ cut here ]------------'
		'[    3.100000] BUG: kernel NULL pointer dereference, address: 0000000000000008'
		'[    3.100000] BUG: sleeping function called from invalid context at kernel/locking/mutex.c:585'
		'[    3.100000] BUG kmalloc-64 (Tainted: G           O      ): Redzone overwritten'
		'[    3.100000] kernel BUG at drivers/infiniband/core/device.c:1400!'
		'[    3.100000] Oops: general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] PREEMPT SMP'
		'[    3.100000] Oops: 0000 [#1] PREEMPT SMP NOPTI'
		'[    3.100000] general protection fault: 0000 [#1] SMP'
		'[    3.100000] WARNING: possible circular locking dependency detected'
		'[    3.100000] WARNING: inconsistent lock state'
		'[    3.100000] WARNING: possible recursive locking detected'
		'[    3.100000] WARNING: suspicious RCU usage'
		'[    3.100000] INFO: task rdma:311 blocked for more than 61 seconds.'
		'[    3.100000] rcu: INFO: rcu_preempt self-detected stall on CPU'
		'[    3.100000] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [kworker/0:1:12]'
		'[    3.100000] rust_kernel: panicked at drivers/rsiw/qp.rs:120:9:'
		'[    3.100000]  rust_panic+0x2c/0x30'
		'[    3.100000] refcount_t: underflow; use-after-free.'
		'[    3.100000] list_add corruption. prev->next should be next (ffff888004a0c3a8), but was 0000000000000000.'
		'[    3.100000] list_del corruption, ffff888004a0c3a8->next is LIST_POISON1 (dead000000000100)'
		'[    3.100000] UBSAN: array-index-out-of-bounds in drivers/infiniband/sw/siw/siw_qp_rx.c:100:5'
		'[    3.100000] BUG: KASAN: slab-use-after-free in siw_qp_llp_data_ready+0x30/0x60'
		'[    3.100000] BUG: KFENCE: use-after-free read in rust_helper_canary_use_after_free+0x4c/0x80'
		'[    3.100000] ODEBUG: free active (active state 0) object: ffff888004a0c3a8 object type: timer_list hint: 0x0'
		'[    3.100000] ODEBUG: Out of memory. ODEBUG disabled'
		'[    3.100000] leaked reference.'
		'[    3.100000] unregister_netdevice: waiting for rsiwd0 to become free. Usage count = 2'
		'[    3.100000] Call Trace:'
		'[    3.100000] Kernel panic - not syncing: Fatal exception'
	)
	local negative=(
		'[    3.100000] rsiw-selftest: begin link-basic 1700000000123456789'
		'[    3.100000] rsiw-selftest: end bad-input rc=0'
		'[    3.100000] rsiw: rsiw0: netdev lo is not an Ethernet device'
		'[    3.100000] rsiw: rsiw0: rsiwd0 already has an RDMA link'
		'[    3.100000] siw: device registration error -23'
		'[    3.100000] SoftiWARP attached'
		'[    3.100000] dummy: loading out-of-tree module taints kernel.'
		'[    3.100000] IPv6: ADDRCONF(NETDEV_CHANGE): rsiwv0: link becomes ready'
		'[    3.100000] kmemleak: Automatic memory scanning thread ended'
		'[    3.100000] kmemleak: 2 new suspected memory leaks (see /sys/kernel/debug/kmemleak)'
		'[    3.100000] debugfs: Directory '"'"'rsiw0'"'"' with parent '"'"'rsiw'"'"' already present!'
	)
	local f
	f=$(mktemp)
	for line in "${positive[@]}"; do
		n=$((n + 1))
		printf '%s\n' "$line" >"$f"
		if vm_splat_lines "$f" >/dev/null; then
			echo "ok $n - flags: ${line:15:60}"
		else
			echo "not ok $n - flags: ${line:15:60}"
			bad=$((bad + 1))
		fi
	done
	for line in "${negative[@]}"; do
		n=$((n + 1))
		printf '%s\n' "$line" >"$f"
		if vm_splat_lines "$f" >/dev/null; then
			echo "not ok $n - passes: ${line:15:60}"
			bad=$((bad + 1))
		else
			echo "ok $n - passes: ${line:15:60}"
		fi
	done
	# Taint: W newly set is bad, O (12, out-of-tree module) is not.
	n=$((n + 1))
	if [ "$(vm_new_taint 4096 $((4096 | 512)))" = 9 ] && ! vm_new_taint 0 4096 >/dev/null; then
		echo "ok $n - taint W flagged, taint O not"
	else
		echo "not ok $n - taint W flagged, taint O not"
		bad=$((bad + 1))
	fi
	# The console excerpt after a crash: a splat's first line and the console's end, or,
	# without a splat, the end.
	{
		echo "guest-runner: begin other"
		echo "[    1.000000] early noise"
		echo "guest-runner: begin crasher"
		seq -f '[    2.%06g] noise' 1 50
		echo "[    3.000000] BUG: kernel NULL pointer dereference, address: 0000000000000008"
		seq -f '[    3.%06g]  frame' 1 60
		echo "[    4.000000] Kernel Offset: disabled"
	} >"$f"
	local excerpt
	excerpt=$(vm_console_excerpt "$f" crasher)
	n=$((n + 1))
	if grep -q 'noise$' <<<"$excerpt" && grep -q 'BUG: kernel NULL' <<<"$excerpt" &&
		grep -q 'Kernel Offset' <<<"$excerpt" && ! grep -q 'early noise' <<<"$excerpt" &&
		(($(wc -l <<<"$excerpt") < 45)); then
		echo "ok $n - console excerpt: the splat's start and the console's end"
	else
		echo "not ok $n - console excerpt: the splat's start and the console's end"
		bad=$((bad + 1))
	fi
	sed -i '/BUG: kernel NULL/d' "$f"
	excerpt=$(vm_console_excerpt "$f" crasher)
	n=$((n + 1))
	if [ "$(wc -l <<<"$excerpt")" = 30 ] && [ "$(tail -n 1 <<<"$excerpt")" = "$(tail -n 1 "$f")" ]; then
		echo "ok $n - console excerpt without a splat: the last 30 lines"
	else
		echo "not ok $n - console excerpt without a splat: the last 30 lines"
		bad=$((bad + 1))
	fi
	rm -f "$f"
	echo "1..$n"
	echo "matcher: $((n - bad)) passed, $bad failed"
	[ "$bad" = 0 ]
}

if [ "${1:-}" = --check-matcher ]; then
	check_matcher
	exit
fi

# judge NUMBER NAME DIR: print the verdict of a test that finished in the VM.
# The first test also answers for the boot.
judge() {
	local n=$1 name=$2 dir=$3 diags=() skip
	echo "# Subtest: $name"
	sed 's/^/    /' "$dir/output.tap"
	echo "# $name took $(($(cat "$dir/ended") - $(cat "$dir/started")))s"
	((n == 1)) && vm_boot_diags diags "$run" boot
	vm_test_diags diags "$dir" "$SELFTESTS_DIR/$name.sh"
	while IFS= read -r skip; do
		skipped+=("$name: $skip")
	done < <(vm_skips "$dir/output.tap")
	# The host part, if any, judges what the test left in its directory.
	[ ! -f "$SELFTESTS_DIR/$name.host" ] ||
		vm_host_part diags skipped "$SELFTESTS_DIR/$name.host" "$dir/host.tap" "$name (host)" TEST_OUT="$dir"
	if ((${#diags[@]})); then
		result not-ok "$n" "$name" "${diags[@]}"
	else
		result ok "$n" "$name"
	fi
}

SELFTESTS_DIR=$(cd "${SELFTESTS_DIR:-selftests}" && pwd)
tests=() left_out=()
for t in "$SELFTESTS_DIR"/*.sh; do
	name=$(basename "$t" .sh)
	# lib.sh and ulp-setup.sh are libraries; host-*.sh run on the host, not here.
	case $name in lib | ulp-setup | host-*) continue ;; esac
	if note=$(vm_test_selected "$t" "$name"); then
		tests+=("$t")
	elif [ -n "$note" ]; then
		left_out+=("$note")
	fi
done

echo "TAP version 13"
((${#left_out[@]})) && printf '%s\n' "${left_out[@]}"
if ((${#tests[@]} == 0)); then
	echo "1..1"
	result not-ok 1 "selection" "no selftest in $SELFTESTS_DIR matches TESTS='${TESTS:-*}'"
	finish
fi
echo "1..${#tests[@]}"

if ! kdir=$(vm_kernel_dir); then
	for i in "${!tests[@]}"; do
		result not-ok $((i + 1)) "$(basename "${tests[$i]}" .sh)" "no built kernel"
	done
	finish
fi

run=results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$run"
run=$(cd "$run" && pwd)
ln -sfn "$(basename "$run")" results/latest

boot_timeout=${VM_BOOT_TIMEOUT:-300}
# After a test, the guest waits for kmemleak and scans: allow that much more.
slack=${VM_TEST_SLACK:-120}
total=$boot_timeout
for t in "${tests[@]}"; do
	total=$((total + $(vm_test_timeout "$t") + slack))
done
total=${VM_TOTAL_TIMEOUT:-$total}

echo "# vm: $(basename "$kdir"), TCG, $VM_CPUS cpus, $VM_MEMORY; ${#tests[@]} test(s); module ${RSIW_MODULE:-rsiw}, link type ${RSIW_LINK_TYPE:-rsiw}; logs in ${run#"$RSIW_ROOT"/}"
env_args=()
# The tests' size knobs (NFS_*, NVME_*, FLOOD_*, ZERO_WINDOW_*, UNLOAD_*,
# FAULT_*, HOG_*, PRESSURE_*, LINK_*, SOAK_*, USER_*: see the tests) go along too.
for v in RSIW_MODULE RSIW_LINK_TYPE RSIW_KO VM_TIMEOUT_SCALE \
	$(compgen -v | grep -E '^(NFS|NVME|FLOOD|ZERO_WINDOW|UNLOAD|FAULT|HOG|PRESSURE|LINK|SOAK|USER)_'); do
	[ -n "${!v:-}" ] && env_args+=("$v=${!v}")
done
vm_lock
start=$(date +%s)
printf '%s\n' "${tests[@]}" >"$run/tests"
printf '%s\n' "${env_args[@]}" >"$run/env"
boot() {
	vm_start "$run/console.log" --rwdir "$run" -- "$RSIW_ROOT/qemu/guest-runner.sh" "$run"
}
boot
boots=1
trap 'vm_stop; exit 130' INT TERM

# Follow the guest through the results directory: each test's "started" and
# "exit" files. Kill the VM when a test or the whole run takes too long. A
# test is judged once its leak report (kmemleak.txt) is there too, which the
# runner writes a test or more later (after the last test, one scan about
# 6 s on).
i=0 judged=0 reason="" seen=-1
phase_start=$start
while ((judged < ${#tests[@]})); do
	now=$(date +%s)
	if ((judged < i)) && [ -f "$run/$(basename "${tests[$judged]}" .sh)/kmemleak.txt" ]; then
		judge $((judged + 1)) "$(basename "${tests[$judged]}" .sh)" "$run/$(basename "${tests[$judged]}" .sh)"
		judged=$((judged + 1))
		continue
	fi
	if ((i == ${#tests[@]})); then
		name=$(basename "${tests[$judged]}" .sh)
		dir=$run/$name
		limit=$slack
		what="the leak check after the last test did not finish within ${limit}s"
	else
		t=${tests[$i]}
		name=$(basename "$t" .sh)
		dir=$run/$name
		if [ -f "$dir/exit" ]; then
			i=$((i + 1))
			phase_start=$now
			continue
		fi
		if [ -f "$dir/started" ]; then
			limit=$(($(vm_test_timeout "$t") + slack))
			what="$name did not finish within ${limit}s"
		elif ((i == 0)); then
			limit=$boot_timeout
			what="the VM did not boot and start the first test within ${limit}s"
		else
			limit=$slack
			what="$name did not start within ${limit}s of the previous test"
		fi
	fi
	if ((now - phase_start > limit)); then
		reason=$what
	elif ((now - start > total)); then
		reason="the whole run exceeded ${total}s"
	elif ! vm_alive; then
		# The guest may finish writing just as it exits.
		sleep 1
		[ -f "$dir/exit" ] && [ -f "$run/$(basename "${tests[$judged]}" .sh)/kmemleak.txt" ] && continue
		reason="the VM exited (crash or panic?) before $name finished"
	fi
	if [ -n "$reason" ] && ((i == 0 && boots == 1)) && [ ! -f "$dir/started" ]; then
		# Under TCG the guest very rarely dies while booting (seen once: an int3 oops in
		# early text patching). Nothing of ours ran yet, so boot once more; the first
		# console stays in console.boot1.log.
		echo "# the VM failed before the first test started ($reason); booting once more"
		vm_stop
		mv "$run/console.log" "$run/console.boot1.log"
		boot
		boots=2 reason="" phase_start=$(date +%s)
		continue
	fi
	if [ -n "$reason" ]; then
		break
	fi
	if ((i < ${#tests[@]})) && [ -f "$dir/started" ] && ((seen < i)); then
		seen=$i
		phase_start=$now
	fi
	sleep 1
done

if [ -n "$reason" ]; then
	vm_alive && reason+="; VM killed"
	vm_stop
	# The tests that finished but whose leak report never came fail on that.
	for ((j = judged; j < i; j++)); do
		judge $((j + 1)) "$(basename "${tests[$j]}" .sh)" "$run/$(basename "${tests[$j]}" .sh)"
	done
	((i < ${#tests[@]})) || echo "# $reason"
	for ((j = i; j < ${#tests[@]}; j++)); do
		name=$(basename "${tests[$j]}" .sh)
		if ((j == i)); then
			console=$(vm_console_excerpt "$run/console.log" "$name")
			[ -f "$run/$name/output.tap" ] && { echo "# Subtest: $name"; sed 's/^/    /' "$run/$name/output.tap"; }
			result not-ok $((j + 1)) "$name" "$reason" "console (full: $run/console.log):" "$console"
		else
			result not-ok $((j + 1)) "$name" "not run: $reason"
		fi
	done
else
	# The guest powers off once the runner is done.
	for ((j = 0; j < 60; j++)); do
		vm_alive || break
		sleep 1
	done
	vm_stop
fi
trap - INT TERM
echo "# vm: run took $(($(date +%s) - start))s"
finish
