#!/usr/bin/env bash
# make vm-check and make pair-check: boot the built kernel under virtme-ng
# (TCG) and run the selected selftests in it, one after another, judging each
# on its TAP output, its exit status and the kernel log it caused.
#
#   qemu/run-tests.sh                  one VM: the selftests/*.sh matching $TESTS
#   qemu/run-tests.sh --pair           two VMs joined by one virtual Ethernet
#                                      link: the selftests/pair/*.sh matching
#                                      $TESTS, run in both at once
#   qemu/run-tests.sh --check-matcher  host-only check of the splat matcher
#
# Each VM runs qemu/guest-runner.sh on the list of tests. A pair test's two
# halves coordinate through a shared directory (selftests/pair/pair.sh), and
# the test passes when both halves pass:
#   VM a: NIC 02:52:53:49:57:a1, 198.18.0.1/24 (set up by the tests)
#   VM b: NIC 02:52:53:49:57:b2, 198.18.0.2/24
#   link: a QEMU socket netdev on host loopback (a listens, b connects); no
#         other network, so the traffic never leaves the two VMs.
# A test NAME.sh may have a host part, NAME.host, which runs on the host once
# the VM(s) finished the test, with TEST_OUT set to a directory of its own
# (one VM: the test's results directory; a pair: host/NAME/, and PAIR_RUN set
# to the run directory), and prints TAP too: checks of what the test left
# (e.g. tshark on captures, which takes minutes under TCG and seconds here).
#
# Prints TAP; each test's own TAP (each half's, and the host part's) is shown
# as an indented subtest. The last lines name each check a test skipped, and
# the last is "vm: N passed, M failed, K skipped" ("pair: ..."), counting test
# files and skipped checks. Exits non-zero on any failure. Logs stay in
# results/<run>/ (results/latest points at the newest) or results/pair-<run>/
# (results/pair-latest): a pair run keeps a/ and b/, each with its VM's
# console.log and the tests' results, host/NAME/ for the host parts, sync/
# for the files the halves exchanged and modules/ for the modules both VMs
# loaded.
# Environment: TESTS (glob on the test name without .sh), SELFTESTS_DIR
# (default selftests/, or selftests/pair with --pair), RSIW_MODULE,
# RSIW_LINK_TYPE, RSIW_KO and ULP_KO (a pair run copies both into the run
# directory first), and the tests' knobs NFS_*, NVME_*, FLOOD_*, USER_*,
# ZERO_WINDOW_*, UNLOAD_*, FAULT_*, HOG_*, PRESSURE_*, LINK_*, SOAK_*,
# INTEROP_*, ULP_*, SMB_*, ISER_* and REMOVAL_* (passed to every VM); VM_CPUS and
# VM_MEMORY (one VM: 2 and 4G), PAIR_VM_CPUS and PAIR_VM_MEMORY (each of a
# pair: 1, since two TCG guests share the host, and 4G: with 2G the tests ran
# slower),
# VM_BOOT_TIMEOUT (s, default 300), VM_TEST_SLACK (s a test may overrun its
# own timeout before the VMs are killed, default 120), both times
# VM_TIMEOUT_SCALE (see vm.sh: 3 on KASAN, 6 for a KASAN pair), VM_TOTAL_TIMEOUT (s,
# default: boot + the sum of the tests' timeouts and slacks).
# See Documentation/rsiw/testing.rst.
set -uo pipefail
PAIR=0
if [ "${1:-}" = --pair ]; then
	PAIR=1
	VM_CPUS=${PAIR_VM_CPUS:-1}
	VM_MEMORY=${PAIR_VM_MEMORY:-4G}
fi
# shellcheck source-path=SCRIPTDIR source=vm.sh
. "$(dirname "$0")/vm.sh"
cd "$RSIW_ROOT" || exit

if ((PAIR)); then
	KIND=pair ROLES=(a b)
else
	KIND=vm ROLES=(vm)
fi
declare -A MAC=([a]=02:52:53:49:57:a1 [b]=02:52:53:49:57:b2)
declare -A ADDR=([a]=198.18.0.1 [b]=198.18.0.2)
declare -A PID=()

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
	echo "$KIND: $passed passed, $failed failed, ${#skipped[@]} skipped"
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
	# A user process's fault report fails a test unless the test named that
	# process in its expected-faults file ("PID COMM REASON").
	local faults
	faults=$(mktemp)
	printf '%s\n' '[  975.188043] traps: ib_send_bw[5200] general protection fault ip:7f4071995472 sp:7ffc4a21a0b0 error:0 in librdmacm.so.1.3.44.0[a472,7f407198f000+15000]' >"$f"
	n=$((n + 1))
	: >"$faults"
	if vm_splat_lines "$f" "$faults" >/dev/null &&
		echo "5201 ib_send_bw refused" >"$faults" && vm_splat_lines "$f" "$faults" >/dev/null &&
		echo "5200 ib_send_bw refused" >"$faults" && ! vm_splat_lines "$f" "$faults" >/dev/null; then
		echo "ok $n - a user fault report fails unless the test expected that process's fault"
	else
		echo "not ok $n - a user fault report fails unless the test expected that process's fault"
		bad=$((bad + 1))
	fi
	rm -f "$faults"
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

# role_dir ROLE: where a VM's runner writes (one VM: the run directory).
role_dir() {
	if ((PAIR)); then echo "$run/$1"; else echo "$run"; fi
}
# role_label ROLE: how a VM is named after a test's name (one VM: not at all).
role_label() {
	((PAIR)) && echo " ($1)"
}

# judge NUMBER TEST: print the verdict of a test that every VM finished, with
# its host part's. The first test also answers for the boot.
judge() {
	local n=$1 test=$2 name role dir label p skip hostdir diags=()
	name=$(basename "$test" .sh)
	for role in "${ROLES[@]}"; do
		dir=$(role_dir "$role")/$name
		label=$(role_label "$role")
		p=${label:+$role}
		echo "# Subtest: $name$label"
		sed 's/^/    /' "$dir/output.tap"
		((n == 1)) && vm_boot_diags diags "$(role_dir "$role")" "${p:+$p: }boot"
		while IFS= read -r skip; do
			skipped+=("$name$label: $skip")
		done < <(vm_skips "$dir/output.tap")
		if [ "${KILLED[$role]:-}" = "$name" ]; then
			echo "# $name$label: killed at its request $(($(cat "$dir/killed") - $(cat "$dir/started")))s in; judged on its checks and kernel log until then (no leak scan)"
			killed_diags diags "$dir" "$name" "$role"
			continue
		fi
		echo "# $name$label took $(($(cat "$dir/ended") - $(cat "$dir/started")))s"
		vm_test_diags diags "$dir" "$test" "$p"
	done
	if [ -f "${test%.sh}.host" ]; then
		if ((PAIR)); then
			hostdir=$run/host/$name
			mkdir -p "$hostdir"
			vm_host_part diags skipped "${test%.sh}.host" "$hostdir/host.tap" "$name (host)" TEST_OUT="$hostdir" PAIR_RUN="$run"
		else
			vm_host_part diags skipped "${test%.sh}.host" "$run/$name/host.tap" "$name (host)" TEST_OUT="$run/$name"
		fi
	fi
	if ((${#diags[@]})); then
		result not-ok "$n" "$name" "${diags[@]}"
	else
		result ok "$n" "$name"
	fi
}

# in_all NAME FILE: every VM's runner wrote FILE for test NAME (a VM the
# test had killed writes nothing more).
in_all() {
	local role
	for role in "${ROLES[@]}"; do
		[ -n "${KILLED[$role]:-}" ] && continue
		[ -f "$(role_dir "$role")/$1/$2" ] || return 1
	done
}
# in_any NAME FILE: some VM's runner wrote FILE for test NAME.
in_any() {
	local role
	for role in "${ROLES[@]}"; do
		[ -f "$(role_dir "$role")/$1/$2" ] && return 0
	done
	return 1
}

# Pair VMs killed at a test's request (see vm_test_kills): ROLE -> the test.
declare -A KILLED=()

# kill_on_request TEST: kill the VM that TEST says it kills, once that VM's
# half has posted kill-me; tell the other half by posting ROLE.killed in the
# test's sync directory, as if the killed half had.
kill_on_request() {
	local name role sync
	name=$(basename "$1" .sh)
	role=$(vm_test_kills "$1")
	sync=$run/sync/$name
	[ -n "$role" ] && [ -z "${KILLED[$role]:-}" ] && [ -e "$sync/$role.kill-me" ] || return 0
	kill -KILL -- "-${PID[$role]}" 2>/dev/null
	wait "${PID[$role]}" 2>/dev/null
	PID[$role]=
	KILLED[$role]=$name
	printf '%(%s)T\n' -1 >"$(role_dir "$role")/$name/killed"
	printf 'killed by the runner at %s\n' "$(date +%T)" >"$sync/.$role.killed.tmp" &&
		mv "$sync/.$role.killed.tmp" "$sync/$role.killed"
	echo "# $name: VM $role killed at its request (SIGKILL to its qemu)"
}

# killed_diags ARRAY DIR NAME ROLE: what fails the half of test NAME that ran
# in the killed VM ROLE, judged on what it left: failed checks or a bail-out
# before it asked to be killed; a splat in the kernel log it saved just before
# (dmesg-before-kill.txt) or in its console since the test began (the console
# shows errors only, and may lag). Its leak scan and exit status died with it.
killed_diags() {
	local -n _kdiags=$1
	local dir=$2 name=$3 p="$4: " nok splat console since
	nok=$(grep -cE '^not ok ' "$dir/output.tap")
	[ "$nok" = 0 ] || _kdiags+=("${p}$nok subtest(s) failed before the VM was killed")
	grep -q '^Bail out!' "$dir/output.tap" && _kdiags+=("${p}$(grep -m1 '^Bail out!' "$dir/output.tap")")
	if ! [ -f "$dir/dmesg-before-kill.txt" ]; then
		_kdiags+=("${p}no kernel log saved before the kill (dmesg-before-kill.txt): its splats cannot be judged")
	elif splat=$(vm_splat_lines "$dir/dmesg-before-kill.txt"); then
		_kdiags+=("${p}kernel splat before the kill (log: $dir/dmesg-before-kill.txt):" "$(head -n 20 <<<"$splat")")
	fi
	console=$(dirname "$dir")/console.log
	since=$(tr -d '\r' <"$console" | sed -n "/^guest-runner: begin $name\$/,\$p")
	if [ -z "$since" ]; then
		_kdiags+=("${p}the console ($console) lacks the test's begin line: its splats cannot be judged")
	elif splat=$(vm_splat_lines <(printf '%s\n' "$since")); then
		_kdiags+=("${p}kernel splat on the console before the VM was killed ($console):" "$(head -n 20 <<<"$splat")")
	fi
}

if ((PAIR)); then
	SELFTESTS_DIR=${SELFTESTS_DIR:-selftests/pair}
fi
SELFTESTS_DIR=$(cd "${SELFTESTS_DIR:-selftests}" && pwd)
tests=() left_out=()
for t in "$SELFTESTS_DIR"/*.sh; do
	name=$(basename "$t" .sh)
	# lib.sh, ulp-setup.sh and pair.sh are libraries; host-*.sh run on the host.
	case $name in lib | ulp-setup | pair | host-*) continue ;; esac
	if note=$(vm_test_selected "$t" "$name"); then
		tests+=("$t")
	elif [ -n "$note" ]; then
		left_out+=("$note")
	fi
done

# A test that kills a VM of the pair runs last: the VM is gone after it.
if ((PAIR)); then
	last=()
	for i in "${!tests[@]}"; do
		[ -n "$(vm_test_kills "${tests[$i]}")" ] && last+=("${tests[$i]}") && unset "tests[$i]"
	done
	tests=("${tests[@]}" "${last[@]}")
fi

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

run=results/$( ((PAIR)) && echo pair-)$(date +%Y%m%d-%H%M%S)
mkdir -p "$run"
run=$(cd "$run" && pwd)
ln -sfn "$(basename "$run")" "results/$( ((PAIR)) && echo pair-)latest"
for role in "${ROLES[@]}"; do
	mkdir -p "$(role_dir "$role")"
done

# A slower kernel (VM_TIMEOUT_SCALE, see vm.sh) boots and cleans up more slowly
# too: two KASAN guests of one vCPU each took over 300 s to start their test.
boot_timeout=${VM_BOOT_TIMEOUT:-$((300 * VM_TIMEOUT_SCALE))}
# After a test, the guest removes leftovers and scans for leaks: allow that much more.
slack=${VM_TEST_SLACK:-$((120 * VM_TIMEOUT_SCALE))}
total=$boot_timeout
for t in "${tests[@]}"; do
	total=$((total + $(vm_test_timeout "$t") + slack))
done
total=${VM_TOTAL_TIMEOUT:-$total}

if ((PAIR)); then
	echo "# pair: $(basename "$kdir"), TCG, 2 VMs of $VM_CPUS cpu(s), $VM_MEMORY; ${#tests[@]} test(s); logs in ${run#"$RSIW_ROOT"/}"
else
	echo "# vm: $(basename "$kdir"), TCG, $VM_CPUS cpus, $VM_MEMORY; ${#tests[@]} test(s); module ${RSIW_MODULE:-rsiw}, link type ${RSIW_LINK_TYPE:-rsiw}; logs in ${run#"$RSIW_ROOT"/}"
fi

# One VM run at a time on this host. The guests modprobe rsiw from the kernel
# tree's module tree: no install may replace it during the run
# (scripts/module.sh takes this lock exclusively).
vm_lock
exec 7>"$kdir.modules.lock"
flock -s 7
if ((PAIR)); then
	# Both VMs load the same modules, even if a build replaces them meanwhile
	# (copied only now: the wait for the lock can be long, and a module must
	# match the kernel that boots; Rust modules have no modversions).
	mkdir -p "$run/modules" "$run/sync"
	RSIW_KO=${RSIW_KO:-$RSIW_ROOT/drivers/rsiw/rsiw.ko}
	ULP_KO=${ULP_KO:-$RSIW_ROOT/selftests/ulp/rsiw_ulp.ko}
	for v in RSIW_KO ULP_KO; do
		if [ "${!v}" -ot "$kdir/vmlinux" ]; then
			echo "# warning: ${!v} is older than the kernel (make module)"
		fi
		cp "${!v}" "$run/modules/" 2>/dev/null || echo "# cannot copy ${!v} (make module)"
		printf -v "$v" '%s' "$run/modules/$(basename "${!v}")"
	done
fi
# What every VM's runner gets (RESULTS/tests, RESULTS/env: files, not
# arguments, as the kernel command line is short): the tests, and one rule for
# the environment: rsiw's module settings and the tests' size knobs.
forwarded=()
declare -A named=()
for v in RSIW_MODULE RSIW_LINK_TYPE RSIW_KO ULP_KO VM_TIMEOUT_SCALE \
	$(compgen -v | grep -E '^(NFS|NVME|FLOOD|ZERO_WINDOW|UNLOAD|FAULT|HOG|PRESSURE|LINK|SOAK|USER|INTEROP|ULP|SMB|ISER|REMOVAL)_'); do
	[ -n "${!v:-}" ] && [ -z "${named[$v]:-}" ] && forwarded+=("$v=${!v}")
	named[$v]=1
done
# (A pair's env files also get each VM's role: boot_half writes them.)
for role in "${ROLES[@]}"; do
	printf '%s\n' "${tests[@]}" >"$(role_dir "$role")/tests"
done
((PAIR)) || printf '%s\n' "${forwarded[@]}" >"$run/env"

# A free port on host loopback for the link (a bind to port 0 picks one; the
# kernel does not hand it out again at once).
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# boot_half ROLE NETDEV_OPT: start one VM of a pair; NETDEV_OPT is the socket
# netdev's listen= or connect= part.
boot_half() {
	local role=$1 peer=a
	[ "$role" = a ] && peer=b
	printf '%s\n' PAIR_ROLE="$role" PAIR_MAC="${MAC[$role]}" PAIR_ADDR="${ADDR[$role]}" \
		PAIR_PEER_ADDR="${ADDR[$peer]}" PAIR_SYNC="$run/sync" PAIR_RESULTS="$run/$role" \
		"${forwarded[@]}" >"$run/$role/env"
	vm_start "$run/$role/console.log" --rwdir "$run" --name "rsiw-$role" \
		--qemu-opts "-netdev socket,id=pair0,$2 -device virtio-net-pci,netdev=pair0,mac=${MAC[$role]}" -- \
		"$RSIW_ROOT/qemu/guest-runner.sh" "$run/$role"
	PID[$role]=$VM_PID
}

# boot: start the VM, or VM a listening on the link and then VM b connecting
# to it (qemu exits at once if nothing listens yet). Status 1 with
# BOOT_ERROR if a never listened.
boot() {
	local port _
	if ! ((PAIR)); then
		vm_start "$run/console.log" --rwdir "$run" -- "$RSIW_ROOT/qemu/guest-runner.sh" "$run"
		PID[vm]=$VM_PID
		return 0
	fi
	port=$(free_port) || { BOOT_ERROR="no free port on 127.0.0.1"; return 1; }
	boot_half a "listen=127.0.0.1:$port"
	for _ in $(seq 1 120); do
		ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
		vm_alive_pid "${PID[a]}" || break
		sleep 0.5
	done
	if ! ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
		BOOT_ERROR="VM a's qemu did not listen on 127.0.0.1:$port (console: $run/a/console.log)"
		return 1
	fi
	boot_half b "connect=127.0.0.1:$port"
	echo "# link: socket netdev on 127.0.0.1:$port"
}

stop_all() {
	local role
	for role in "${ROLES[@]}"; do
		vm_stop_pid "${PID[$role]:-}"
		PID[$role]=
	done
}

start=$(date +%s)
trap 'stop_all; exit 130' INT TERM
boots=1
if ! boot; then
	stop_all
	for i in "${!tests[@]}"; do
		result not-ok $((i + 1)) "$(basename "${tests[$i]}" .sh)" "not run: $BOOT_ERROR"
	done
	finish
fi

# Follow the guests through the results directories: each test's "started"
# and "exit" files. Kill the VMs when a test or the whole run takes too long,
# or when a VM dies. A test is judged once its leak reports (kmemleak.txt)
# are there too, which a runner writes a test or more later (after the last
# test, one scan about 6 s on; see qemu/guest-runner.sh).
i=0 judged=0 reason="" seen=-1
phase_start=$start
while ((judged < ${#tests[@]})); do
	now=$(date +%s)
	if ((judged < i)) && in_all "$(basename "${tests[$judged]}" .sh)" kmemleak.txt; then
		judge $((judged + 1)) "${tests[$judged]}"
		judged=$((judged + 1))
		continue
	fi
	started=0
	if ((i == ${#tests[@]})); then
		name=$(basename "${tests[$judged]}" .sh)
		limit=$slack
		what="the leak check after the last test did not finish within ${limit}s"
		file=kmemleak.txt
	else
		t=${tests[$i]}
		name=$(basename "$t" .sh)
		file=exit
		if in_all "$name" exit; then
			i=$((i + 1))
			phase_start=$now
			if ((${#KILLED[@]} && i < ${#tests[@]})); then
				reason="VM ${!KILLED[*]} was killed by ${KILLED[*]}, which should have run last"
				break
			fi
			continue
		fi
		in_any "$name" started && started=1
		((started && PAIR)) && kill_on_request "$t"
		if ((started)); then
			limit=$(($(vm_test_timeout "$t") + slack))
			what="$name did not finish within ${limit}s"
			if ((PAIR)); then
				for role in "${ROLES[@]}"; do
					[ -f "$run/$role/$name/exit" ] || [ -n "${KILLED[$role]:-}" ] ||
						what+=" (VM $role still running it)"
				done
			fi
		elif ((i == 0)); then
			limit=$boot_timeout
			what="the VM(s) did not boot and start the first test within ${limit}s"
		else
			limit=$slack
			what="$name did not start within ${limit}s of the previous test"
		fi
	fi
	if ((now - phase_start > limit)); then
		reason=$what
	elif ((now - start > total)); then
		reason="the whole run exceeded ${total}s"
	else
		for role in "${ROLES[@]}"; do
			[ -n "${KILLED[$role]:-}" ] && continue
			if ! vm_alive_pid "${PID[$role]}"; then
				# The guest may finish writing just as it exits.
				sleep 1
				[ -f "$(role_dir "$role")/$name/$file" ] && continue
				reason="VM$(role_label "$role") exited (crash or panic?) before $name finished"
				break
			fi
		done
	fi
	if [ -n "$reason" ] && ((i == 0 && boots == 1 && !started)); then
		# Under TCG a guest very rarely dies while booting (seen once: an int3
		# oops in early text patching). Nothing of ours ran yet, so boot once
		# more; the first consoles stay in console.boot1.log.
		echo "# a VM failed before the first test started ($reason); booting once more"
		stop_all
		for role in "${ROLES[@]}"; do
			mv "$(role_dir "$role")/console.log" "$(role_dir "$role")/console.boot1.log"
		done
		((PAIR)) && rm -rf "$run/sync" && mkdir -p "$run/sync"
		boots=2 reason="" phase_start=$(date +%s)
		if ! boot; then
			reason=$BOOT_ERROR
			break
		fi
		continue
	fi
	[ -n "$reason" ] && break
	if ((started)) && ((seen < i)); then
		seen=$i
		phase_start=$now
	fi
	sleep 1
done

if [ -n "$reason" ]; then
	for role in "${ROLES[@]}"; do
		vm_alive_pid "${PID[$role]}" && reason+="; VM$(role_label "$role") killed"
	done
	stop_all
	# The tests that finished but whose leak reports never came fail on that.
	for ((j = judged; j < i; j++)); do
		judge $((j + 1)) "${tests[$j]}"
	done
	if ((i == ${#tests[@]})); then
		echo "# $reason"
	else
		name=$(basename "${tests[$i]}" .sh)
		diags=("$reason")
		for role in "${ROLES[@]}"; do
			dir=$(role_dir "$role")
			[ -f "$dir/$name/output.tap" ] && {
				echo "# Subtest: $name$(role_label "$role")"
				sed 's/^/    /' "$dir/$name/output.tap"
			}
			diags+=("console$(role_label "$role") (full: $dir/console.log):" "$(vm_console_excerpt "$dir/console.log" "$name")")
		done
		result not-ok $((i + 1)) "$name" "${diags[@]}"
		for ((j = i + 1; j < ${#tests[@]}; j++)); do
			result not-ok $((j + 1)) "$(basename "${tests[$j]}" .sh)" "not run: $reason"
		done
	fi
else
	# The guests power off once their runners are done.
	for ((j = 0; j < 60; j++)); do
		alive=0
		for role in "${ROLES[@]}"; do
			vm_alive_pid "${PID[$role]}" && alive=1
		done
		((alive)) || break
		sleep 1
	done
	stop_all
fi
trap - INT TERM
echo "# $KIND: run took $(($(date +%s) - start))s"
finish
