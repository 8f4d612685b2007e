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

# kmemleak_scan OUT [SINCE]: scan, wait until KMEMLEAK_MIN_AGE s have passed
# since SINCE (a $SECONDS value; default now), scan again, save the report and
# forget it (so it is reported once). Two scans: the first notes each
# unreferenced object's checksum; the second reports the objects it finds
# still unreferenced, unchanged and old enough. The wait runs after the first
# scan, which takes seconds of its own. Once kmemleak has switched itself off
# (out of metadata, or an error), it refuses the scan: that is a failure, not
# silence.
kmemleak_scan() {
	local wait
	if [ -w "$kmemleak" ] && echo scan 2>/dev/null >"$kmemleak"; then
		# $SECONDS counts whole seconds: one more makes the age certain.
		wait=$((${2:-$SECONDS} + KMEMLEAK_MIN_AGE + 1 - SECONDS))
		((wait > 0)) && sleep "$wait"
		if echo scan 2>/dev/null >"$kmemleak"; then
			cat "$kmemleak" >"$1"
			echo clear >"$kmemleak"
			return
		fi
	fi
	echo "kmemleak is off ($kmemleak refuses a scan): leaks cannot be seen" >"$1"
	dmesg | grep -m 3 'kmemleak:' >>"$1"
}

# debug_locks: 1 while lockdep checks, 0 once it has switched itself off (after
# its first report, for the rest of the boot).
debug_locks() {
	[ -r /proc/lockdep_stats ] || { echo none; return; }
	awk '$1 == "debug_locks:" { print $2; found = 1 } END { if (!found) print "none" }' /proc/lockdep_stats
}

netdevs() { ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort; }
rdma_links() { ls /sys/class/infiniband 2>/dev/null; }
rdma_modules() { lsmod | awk '$1 == "rsiw" || $1 == "siw" { print $1 }'; }

leftovers() { # NETDEVS_BEFORE OUT SESSION: report and remove what the test left behind
	local dev mod pid
	: >"$2"
	for dev in $(rdma_links); do
		echo "rdma device $dev" >>"$2"
		rdma link delete "$dev" >>"$2" 2>&1
	done
	for dev in $(comm -13 "$1" <(netdevs)); do
		echo "netdev $dev" >>"$2"
		ip link delete "$dev" >>"$2" 2>&1
	done
	for pid in $(ps -o pid= -s "$3" 2>/dev/null); do
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
	name=$(basename "$test" .sh)
	dir=$results/$name
	mkdir -p "$dir"
	netdevs >"$dir/.netdevs"
	tainted_before=$(cat /proc/sys/kernel/tainted)
	locks_before=$(debug_locks)
	echo "guest-runner: begin $name"
	marker="begin $name $(date +%s%N)"
	kmsg "$marker"
	date +%s >"$dir/started"
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
	leftovers "$dir/.netdevs" "$dir/leftover.txt" $session
	rm -f "$dir/.netdevs"
	kmemleak_scan "$dir/kmemleak.txt" "$test_end"
	dmesg | sed -n "/rsiw-selftest: $marker\$/,\$p" >"$dir/dmesg.txt"
	echo "$tainted_before $(cat /proc/sys/kernel/tainted)" >"$dir/taint"
	echo "$locks_before $(debug_locks)" >"$dir/debug_locks"
	date +%s >"$dir/ended"
	sync
	# Renamed into place: the host polls for this file and must never read it half-written.
	echo "$rc" >"$dir/exit.tmp"
	sync
	mv "$dir/exit.tmp" "$dir/exit"
	sync
done
