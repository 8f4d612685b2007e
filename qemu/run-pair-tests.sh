#!/usr/bin/env bash
# make pair-check: boot two VMs (TCG) joined by one virtual Ethernet link and
# run the selected selftests/pair/*.sh in both at once, one test after
# another; each test's two halves coordinate through a shared directory (see
# selftests/pair/pair.sh). A test passes when both halves pass on their TAP
# output, their exit status and the kernel log they caused, as in
# qemu/run-tests.sh.
#
#   VM a: NIC 02:52:53:49:57:a1, 198.18.0.1/24 (set up by the tests)
#   VM b: NIC 02:52:53:49:57:b2, 198.18.0.2/24
#   link: a QEMU socket netdev on host loopback (a listens, b connects); no
#         other network, so the traffic never leaves the two VMs.
#
# A test NAME.sh may have a host part, NAME.host, which runs on the host once
# both halves are done, with PAIR_RUN set to the run directory, and prints TAP
# too: checks of what the halves left (e.g. tshark on their captures, which
# takes minutes under TCG and seconds here).
#
# Prints TAP, each half's TAP (and the host part's) as an indented subtest.
# Then a line for each check a half skipped, and last "pair: N passed, M
# failed, K skipped", counting tests and skipped checks. Exits non-zero on
# any failure. Logs stay in results/pair-<run>/ (results/pair-latest
# points at the newest): a/ and b/ hold each VM's console.log and, per test,
# what qemu/guest-runner.sh collects (output.tap, dmesg.txt, kmemleak.txt,
# ...) plus the test's own files; host/NAME/ the host part's output; sync/
# the files the halves exchanged; modules/ the modules both VMs loaded.
# Environment: TESTS (glob on the test name, default *), PAIR_SELFTESTS_DIR
# (where the tests are, default selftests/pair), RSIW_KO and ULP_KO
# (the modules; copied into the run directory first), the tests' knobs
# INTEROP_*, NFS_*, NVME_*, ULP_* and USER_* (passed to both halves), PAIR_VM_CPUS (vCPUs per
# VM, default 1: two TCG guests share the host), PAIR_VM_MEMORY (default 4G,
# as for one VM: with 2G the tests ran slower), VM_BOOT_TIMEOUT (s, default 300),
# VM_TEST_SLACK (s a test may overrun its own timeout, default 120),
# VM_TOTAL_TIMEOUT (s, default: boot + the sum of the tests' timeouts and
# slacks).
# See Documentation/rsiw/testing.rst.
set -uo pipefail
VM_CPUS=${PAIR_VM_CPUS:-1}
VM_MEMORY=${PAIR_VM_MEMORY:-4G}
# shellcheck source-path=SCRIPTDIR source=vm.sh
. "$(dirname "$0")/vm.sh"
cd "$RSIW_ROOT" || exit

ROLES=(a b)
declare -A MAC=([a]=02:52:53:49:57:a1 [b]=02:52:53:49:57:b2)
declare -A ADDR=([a]=198.18.0.1 [b]=198.18.0.2)
declare -A PID=([a]="" [b]="")

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
	echo "pair: $passed passed, $failed failed, ${#skipped[@]} skipped"
	[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
	exit
}

# half_diags ROLE DIR TEST: show one half's TAP as a subtest; add to DIAGS
# what fails it (the checks of run-tests.sh's judge) and to skipped what it
# skipped. The first test also answers for its VM's boot.
half_diags() {
	local role=$1 dir=$2 test=$3 name skip
	name=$(basename "$test" .sh)
	echo "# Subtest: $name ($role)"
	sed 's/^/    /' "$dir/output.tap"
	echo "# $name ($role) took $(($(cat "$dir/ended") - $(cat "$dir/started")))s"
	[ "$test" = "${tests[0]}" ] && vm_boot_diags DIAGS "$run/$role" "$role: boot"
	vm_test_diags DIAGS "$dir" "$test" "$role"
	while IFS= read -r skip; do
		skipped+=("$name ($role): $skip")
	done < <(vm_skips "$dir/output.tap")
}

# host_part TEST: run TEST's host part (NAME.host beside NAME.sh, if there
# is one) on what both halves left (vm_host_part).
host_part() {
	local name
	name=$(basename "$1" .sh)
	[ -f "${1%.sh}.host" ] || return 0
	mkdir -p "$run/host/$name"
	vm_host_part DIAGS skipped "${1%.sh}.host" "$run/host/$name/output.tap" "$name (host)" PAIR_RUN="$run"
}

# judge NUMBER TEST: the verdict of a test both halves finished.
judge() {
	local n=$1 test=$2 role
	DIAGS=()
	for role in "${ROLES[@]}"; do
		half_diags "$role" "$run/$role/$(basename "$test" .sh)" "$test"
	done
	host_part "$test"
	if ((${#DIAGS[@]})); then
		result not-ok "$n" "$(basename "$test" .sh)" "${DIAGS[@]}"
	else
		result ok "$n" "$(basename "$test" .sh)"
	fi
}

tests_dir=$(cd "${PAIR_SELFTESTS_DIR:-selftests/pair}" && pwd)
tests=() left_out=()
for t in "$tests_dir"/*.sh; do
	name=$(basename "$t" .sh)
	# pair.sh is the library.
	[ "$name" = pair ] && continue
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
	result not-ok 1 "selection" "no pair selftest in $tests_dir matches TESTS='${TESTS:-*}'"
	finish
fi
echo "1..${#tests[@]}"

if ! kdir=$(vm_kernel_dir); then
	for i in "${!tests[@]}"; do
		result not-ok $((i + 1)) "$(basename "${tests[$i]}" .sh)" "no built kernel"
	done
	finish
fi

run=results/pair-$(date +%Y%m%d-%H%M%S)
mkdir -p "$run/a" "$run/b" "$run/sync"
run=$(cd "$run" && pwd)
ln -sfn "$(basename "$run")" results/pair-latest
printf '%s\n' "${tests[@]}" >"$run/a/tests"
cp "$run/a/tests" "$run/b/tests"

boot_timeout=${VM_BOOT_TIMEOUT:-300}
slack=${VM_TEST_SLACK:-120}
total=$boot_timeout
for t in "${tests[@]}"; do
	total=$((total + $(vm_test_timeout "$t") + slack))
done
total=${VM_TOTAL_TIMEOUT:-$total}

echo "# pair: $(basename "$kdir"), TCG, 2 VMs of $VM_CPUS cpu(s), $VM_MEMORY; ${#tests[@]} test(s); logs in ${run#"$RSIW_ROOT"/}"

# A free port on host loopback for the link (a bind to port 0 picks one; the
# kernel does not hand it out again at once).
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# boot_vm ROLE NETDEV_OPT: start one VM running the guest runner with the
# tests; NETDEV_OPT is the socket netdev's listen= or connect= part.
boot_vm() {
	local role=$1 env_args
	env_args=(PAIR_ROLE="$role" PAIR_MAC="${MAC[$role]}" PAIR_ADDR="${ADDR[$role]}"
		PAIR_PEER_ADDR="${ADDR[$([ "$role" = a ] && echo b || echo a)]}"
		PAIR_SYNC="$run/sync" PAIR_RESULTS="$run/$role")
	env_args+=(RSIW_KO="$RSIW_KO" ULP_KO="$ULP_KO" VM_TIMEOUT_SCALE="$VM_TIMEOUT_SCALE")
	# The tests' knobs (INTEROP_MODES, NFS_*, NVME_*, ULP_*, USER_*: see the tests), to both
	# halves alike.
	local v
	for v in $(compgen -v | grep -E '^(INTEROP|NFS|NVME|ULP|USER)_' | grep -vx ULP_KO); do
		env_args+=("$v=${!v}")
	done
	printf '%s\n' "${env_args[@]}" >"$run/$role/env"
	vm_start "$run/$role/console.log" --rwdir "$run" --name "rsiw-$role" \
		--qemu-opts "-netdev socket,id=pair0,$2 -device virtio-net-pci,netdev=pair0,mac=${MAC[$role]}" -- \
		"$RSIW_ROOT/qemu/guest-runner.sh" "$run/$role"
	PID[$role]=$VM_PID
}

# boot: start VM a listening on the link, then VM b connecting to it (qemu
# exits at once if nothing listens yet). Status 1 with BOOT_ERROR if a never
# listened.
boot() {
	local port _
	port=$(free_port) || { BOOT_ERROR="no free port on 127.0.0.1"; return 1; }
	boot_vm a "listen=127.0.0.1:$port"
	for _ in $(seq 1 120); do
		ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
		vm_alive_pid "${PID[a]}" || break
		sleep 0.5
	done
	if ! ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
		BOOT_ERROR="VM a's qemu did not listen on 127.0.0.1:$port (console: $run/a/console.log)"
		return 1
	fi
	boot_vm b "connect=127.0.0.1:$port"
	echo "# link: socket netdev on 127.0.0.1:$port"
}

stop_all() {
	local role
	for role in "${ROLES[@]}"; do
		vm_stop_pid "${PID[$role]}"
		PID[$role]=
	done
}

# One pair run at a time on this host, and none beside other VM runs.
vm_lock
# Both VMs load the same modules, even if a build replaces them meanwhile
# (copied only now: the wait for the lock can be long, and a module must
# match the kernel that boots; Rust modules have no modversions).
mkdir -p "$run/modules"
RSIW_KO=${RSIW_KO:-$RSIW_ROOT/drivers/rsiw/rsiw.ko}
ULP_KO=${ULP_KO:-$RSIW_ROOT/selftests/ulp/rsiw_ulp.ko}
for v in RSIW_KO ULP_KO; do
	if [ "${!v}" -ot "$kdir/vmlinux" ]; then
		echo "# warning: ${!v} is older than the kernel (make module)"
	fi
	cp "${!v}" "$run/modules/" 2>/dev/null || echo "# cannot copy ${!v} (make module)"
	printf -v "$v" '%s' "$run/modules/$(basename "${!v}")"
done
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

# Follow both guests through the results directory: each half's "started"
# and "exit" files. Kill both VMs when a test or the run takes too long, or
# when either VM dies. A test is judged once both halves' leak reports
# (kmemleak.txt, written a test or more later: see qemu/guest-runner.sh) are
# there too.
leaks_done() { # NAME: both halves' leak reports for NAME are written
	[ -f "$run/a/$1/kmemleak.txt" ] && [ -f "$run/b/$1/kmemleak.txt" ]
}
i=0 judged=0 reason="" seen=-1
phase_start=$start
while ((judged < ${#tests[@]})); do
	now=$(date +%s)
	if ((judged < i)) && leaks_done "$(basename "${tests[$judged]}" .sh)"; then
		judge $((judged + 1)) "${tests[$judged]}"
		judged=$((judged + 1))
		continue
	fi
	started=0
	if ((i == ${#tests[@]})); then
		name=$(basename "${tests[$judged]}" .sh)
		limit=$slack
		what="the leak check after the last test did not finish within ${limit}s"
	else
		t=${tests[$i]}
		name=$(basename "$t" .sh)
		if [ -f "$run/a/$name/exit" ] && [ -f "$run/b/$name/exit" ]; then
			i=$((i + 1))
			phase_start=$now
			continue
		fi
		[ -f "$run/a/$name/started" ] || [ -f "$run/b/$name/started" ] && started=1
		if ((started)); then
			limit=$(($(vm_test_timeout "$t") + slack))
			what="$name did not finish within ${limit}s"
			for role in "${ROLES[@]}"; do
				[ -f "$run/$role/$name/exit" ] || what+=" (VM $role still running it)"
			done
		elif ((i == 0)); then
			limit=$boot_timeout
			what="the VMs did not boot and start the first test within ${limit}s"
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
			if ! vm_alive_pid "${PID[$role]}"; then
				# The guest may finish writing just as it exits.
				sleep 1
				[ -f "$run/$role/$name/exit" ] && [ -f "$run/$role/$(basename "${tests[$judged]}" .sh)/kmemleak.txt" ] && continue
				reason="VM $role exited (crash or panic?) before $name finished"
				break
			fi
		done
	fi
	if [ -n "$reason" ] && ((i == 0 && boots == 1 && !started)); then
		# As in run-tests.sh: a TCG guest very rarely dies while booting; nothing
		# of ours ran yet, so boot both once more (first consoles kept as
		# console.boot1.log).
		echo "# a VM failed before the first test started ($reason); booting both once more"
		stop_all
		for role in "${ROLES[@]}"; do
			mv "$run/$role/console.log" "$run/$role/console.boot1.log"
		done
		rm -rf "$run/sync" && mkdir -p "$run/sync"
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
		vm_alive_pid "${PID[$role]}" && reason+="; VM $role killed"
	done
	stop_all
	# The tests both halves finished but whose leak reports never came fail on that.
	for ((j = judged; j < i; j++)); do
		judge $((j + 1)) "${tests[$j]}"
	done
	if ((i == ${#tests[@]})); then
		echo "# $reason"
	else
		name=$(basename "${tests[$i]}" .sh)
		diags=("$reason")
		for role in "${ROLES[@]}"; do
			[ -f "$run/$role/$name/output.tap" ] && {
				echo "# Subtest: $name ($role)"
				sed 's/^/    /' "$run/$role/$name/output.tap"
			}
			console=$(vm_console_excerpt "$run/$role/console.log" "$name")
			diags+=("VM $role console (full: $run/$role/console.log):" "$console")
		done
		result not-ok $((i + 1)) "$name" "${diags[@]}"
		for ((j = i + 1; j < ${#tests[@]}; j++)); do
			result not-ok $((j + 1)) "$(basename "${tests[$j]}" .sh)" "not run: $reason"
		done
	fi
else
	# The guests power off once their runners are done.
	for ((j = 0; j < 60; j++)); do
		vm_alive_pid "${PID[a]}" || vm_alive_pid "${PID[b]}" || break
		sleep 1
	done
	stop_all
fi
trap - INT TERM
echo "# pair: run took $(($(date +%s) - start))s"
finish
