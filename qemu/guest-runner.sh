#!/usr/bin/env bash
# Runs inside the VM: each selftest in turn, collecting what the host needs to
# judge it. Started by qemu/run-tests.sh; not meant to be run on the host.
#
#   guest-runner.sh RESULTS
#
# RESULTS/tests lists the selftests to run, one path per line, and RESULTS/env
# the variables to export to them, one NAME=VALUE a line (files, not
# arguments: the guest's command travels on the kernel command line, which has
# room for about 20 paths).
#
# For each test NAME it writes, in RESULTS/NAME/ (the test gets the directory
# as TEST_OUT, for what it leaves to its host part, NAME.host):
#   started       when the test begins (the host's per-test timeout starts)
#   output.tap    the test's stdout and stderr
#   check-times   "SECOND CHECK": the second of the test each check ended in
#                 (selftests/lib.sh writes it): where the test spent its time
#   dmesg.txt     the kernel log from the test's start marker on, after a
#                 kmemleak scan
#   kmemleak.txt  what that scan reported (empty when nothing leaked)
#   taint         /proc/sys/kernel/tainted before and after
#   debug_locks   lockdep's debug_locks before and after (0: lockdep is off)
#   leftover.txt  processes, RDMA links, netdevs and modules the test left
#                 behind (they are removed so the next test starts clean)
#   after-test    seconds the runner spent after the test: leftovers, the
#                 two kmemleak scans and the wait between them
#   ended         when the checks after the test were done
#   exit          the test's exit status, 124 when it timed out; written last
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=vm.sh
. "$(dirname "$0")/vm.sh"

results=$1
mapfile -t tests <"$results/tests"
if [ -f "$results/env" ]; then
	while IFS= read -r kv; do
		[ -n "$kv" ] && export "${kv?}"
	done <"$results/env"
fi
kmemleak=/sys/kernel/debug/kmemleak
# kmemleak never reports an object younger than 5 s: the scan that closes a
# test starts that long after the test ended, so its late leaks are not blamed
# on the next.
KMEMLEAK_MIN_AGE=${KMEMLEAK_MIN_AGE:-5}

kmsg() { echo "rsiw-selftest: $*" >/dev/kmsg; }
# elapsed T0 T1: seconds from one $EPOCHREALTIME to another, to 0.1 s.
# Integer arithmetic on the microseconds: no fork (forks are slow under TCG).
elapsed() {
	local d=$(((10#${2/./} - 10#${1/./}) / 100000))
	echo "$((d / 10)).$((d % 10))"
}

# kmemleak_scan OUT [SINCE]: scan, wait until KMEMLEAK_MIN_AGE s have passed
# since SINCE (a $SECONDS value; default now), scan again, save the report and
# forget it (so it is reported once). Two scans: the first notes each
# unreferenced object's checksum; the second reports the objects it finds
# still unreferenced, unchanged and old enough. The wait runs after the first
# scan, which takes seconds of its own. Once kmemleak has switched itself off
# (out of metadata, or an error), it refuses the scan: that is a failure, not
# silence.
kmemleak_scan() {
	local wait t0=$EPOCHREALTIME t1 t2
	if [ -w "$kmemleak" ] && echo scan 2>/dev/null >"$kmemleak"; then
		t1=$EPOCHREALTIME
		# $SECONDS counts whole seconds: one more makes the age certain.
		wait=$((${2:-$SECONDS} + KMEMLEAK_MIN_AGE + 1 - SECONDS))
		((wait > 0)) && sleep "$wait"
		t2=$EPOCHREALTIME
		if echo scan 2>/dev/null >"$kmemleak"; then
			cat "$kmemleak" >"$1"
			echo clear >"$kmemleak"
			scan_times="scan1=$(elapsed "$t0" "$t1") wait=$(elapsed "$t1" "$t2") scan2=$(elapsed "$t2" "$EPOCHREALTIME")"
			return
		fi
	fi
	echo "kmemleak is off ($kmemleak refuses a scan): leaks cannot be seen" >"$1"
	dmesg | grep -m 3 'kmemleak:' >>"$1"
}

# What runs between two tests reads /proc and /sys with shell builtins: every
# fork costs tens of milliseconds under TCG, and the old ps/awk/comm pipelines
# here took 2 s per test.

# debug_locks: 1 while lockdep checks, 0 once it has switched itself off (after
# its first report, for the rest of the boot).
debug_locks() {
	local key value
	if [ -r /proc/lockdep_stats ]; then
		while read -r key value _; do
			[ "$key" = debug_locks: ] && { echo "$value"; return; }
		done </proc/lockdep_stats
	fi
	echo none
}

netdevs() { local d; for d in /sys/class/net/*; do echo "${d##*/}"; done; }
rdma_links() { local d; for d in /sys/class/infiniband/*; do [ -e "$d" ] && echo "${d##*/}"; done; }
# Loaded modules have an initstate (a built-in one has none).
rdma_modules() { local m; for m in rsiw siw; do [ -e "/sys/module/$m/initstate" ] && echo "$m"; done; }

new_netdevs() { # BEFORE: the netdevs not listed in file BEFORE
	local -A had=()
	local d
	while read -r d; do had[$d]=1; done <"$1"
	for d in $(netdevs); do [ -n "${had[$d]:-}" ] || echo "$d"; done
}

session_pids() { # SID: the processes of session SID
	local f line
	local -a rest
	for f in /proc/[0-9]*/stat; do
		read -r line 2>/dev/null <"$f" || continue
		# pid (comm) state ppid pgrp session ...: comm may hold spaces and
		# parentheses; the fields after it are numbers and a state letter,
		# split without a here-string (which writes a temporary file).
		# shellcheck disable=SC2206
		rest=(${line##*) })
		[ "${rest[3]:-}" = "$1" ] && echo "${line%% *}"
	done
}

leftovers() { # NETDEVS_BEFORE OUT SESSION: report and remove what the test left behind
	local dev mod pid
	: >"$2"
	for dev in $(rdma_links); do
		echo "rdma device $dev" >>"$2"
		rdma link delete "$dev" >>"$2" 2>&1
	done
	for dev in $(new_netdevs "$1"); do
		echo "netdev $dev" >>"$2"
		ip link delete "$dev" >>"$2" 2>&1
	done
	for pid in $(session_pids "$3"); do
		echo "process $(ps -o pid=,stat=,args= -p "$pid")" >>"$2"
		kill -KILL "$pid" 2>/dev/null
	done
	for mod in $(rdma_modules); do
		echo "module $mod" >>"$2"
		rmmod "$mod" >>"$2" 2>&1
	done
}

mount | grep -q ' /sys/kernel/debug ' || mount -t debugfs debugfs /sys/kernel/debug
# No udevd: for every RDMA device it runs rdma-core's rules (a fork and exec
# of rdma_rename), which under TCG takes long enough to lag behind a test by
# minutes and shows up as slab noise; devtmpfs makes the device nodes anyway.
if command -v udevadm >/dev/null; then
	udevadm settle --timeout=60
	udevadm control --exit
fi
echo 60 >/proc/sys/kernel/hung_task_timeout_secs 2>/dev/null
# Boot-time leak suspects are not any test's fault.
kmemleak_scan "$results/boot-kmemleak.txt" 0
dmesg >"$results/boot-dmesg.txt"
uname -r >"$results/kernel"

for test in "${tests[@]}"; do
	name=${test##*/}
	name=${name%.sh}
	dir=$results/$name
	mkdir -p "$dir"
	netdevs >"$dir/.netdevs"
	read -r tainted_before </proc/sys/kernel/tainted
	locks_before=$(debug_locks)
	echo "guest-runner: begin $name"
	marker="begin $name ${EPOCHREALTIME/./}"
	kmsg "$marker"
	printf '%(%s)T\n' -1 >"$dir/started"
	sync
	# In a session of its own (this script leads no process group, so setsid
	# does not fork): whatever the test started and left running can be found.
	TEST_OUT=$dir setsid timeout -k 10 "$(vm_test_timeout "$test")" bash "$test" >"$dir/output.tap" 2>&1 &
	session=$!
	wait $session
	rc=$?
	echo "guest-runner: end $name rc=$rc"
	kmsg "end $name rc=$rc"
	test_end=$SECONDS
	t_end=$EPOCHREALTIME
	leftovers "$dir/.netdevs" "$dir/leftover.txt" $session
	rm -f "$dir/.netdevs"
	t_left=$EPOCHREALTIME
	scan_times=
	kmemleak_scan "$dir/kmemleak.txt" "$test_end"
	echo "leftovers=$(elapsed "$t_end" "$t_left") $scan_times" >"$dir/after-test"
	dmesg | sed -n "/rsiw-selftest: $marker\$/,\$p" >"$dir/dmesg.txt"
	read -r tainted_after </proc/sys/kernel/tainted
	echo "$tainted_before $tainted_after" >"$dir/taint"
	echo "$locks_before $(debug_locks)" >"$dir/debug_locks"
	printf '%(%s)T\n' -1 >"$dir/ended"
	sync
	# Renamed into place: the host polls for this file and must never read it half-written.
	echo "$rc" >"$dir/exit.tmp"
	sync
	mv "$dir/exit.tmp" "$dir/exit"
	sync
done
