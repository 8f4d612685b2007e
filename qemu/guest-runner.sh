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
#   kmemleak.txt  the leaks allocated while the test was the latest to run
#                 (empty when none); written last of all, a test or more
#                 later (see leak_scan)
#   taint         /proc/sys/kernel/tainted before and after
#   debug_locks   lockdep's debug_locks before and after (0: lockdep is off)
#   leftover.txt  processes, RDMA links, netdevs and modules the test left
#                 behind (they are removed so the next test starts clean)
#   after-test    seconds the runner spent after the test: leftovers and
#                 the kmemleak scan
#   ended         when the checks after the test were done
#   exit          the test's exit status, 124 when it timed out
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
# kmemleak never reports an object younger than 5 s.
KMEMLEAK_MIN_AGE=${KMEMLEAK_MIN_AGE:-5}

kmsg() { echo "rsiw-selftest: $*" >/dev/kmsg; }
# elapsed T0 T1: seconds from one $EPOCHREALTIME to another, to 0.1 s.
# Integer arithmetic on the microseconds: no fork (forks are slow under TCG).
elapsed() {
	local d=$(((10#${2/./} - 10#${1/./}) / 100000))
	echo "$((d / 10)).$((d % 10))"
}

# kmemleak_scan OUT [SINCE]: the boot's leak check: scan, wait until
# KMEMLEAK_MIN_AGE s have passed since SINCE (a $SECONDS value; default now),
# scan again, save the report and forget it. Two scans: the first notes each
# unreferenced object's checksum; the second reports the objects it finds
# still unreferenced, unchanged and old enough. Once kmemleak has switched
# itself off (out of metadata, or an error), it refuses the scan: that is a
# failure, not silence.
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

# After a test, one kmemleak scan, not two (each takes seconds under TCG).
# A leak is reported by the second scan that sees it (the first notes its
# checksum) once it is 5 s old, so a test's leaks show up in a later test's
# scan. kmemleak prints each object's allocation time in jiffies; each test
# owns a window of jiffies, from the start of the scan before it to the start
# of its own, and every reported object goes to the test whose window holds
# its allocation. A test's kmemleak.txt is written once a scan has started at
# least KMEMLEAK_MIN_AGE + 1 s after its own: every object of its window has
# then been seen by two scans at the age kmemleak reports. An object that
# turns unreferenced only after that is blamed on the test that just ran,
# with the test it was allocated in. The last test gets a scan of its own, as
# does the test before one that has the host kill this VM (close_leaks).
#
# Per test index K: test_dir[K]; window_start[K] (jiffies); scan_us[K], when
# its scan started (microseconds). leak_open: the indices whose kmemleak.txt
# is not written yet.
declare -a test_dir=() window_start=() scan_us=() leak_open=()
JIFFIES=

# jiffies_now: set JIFFIES to the kernel's jiffies, from /proc/schedstat's
# "timestamp" line (CONFIG_SCHEDSTATS). Status 1 without it.
jiffies_now() {
	local key value
	JIFFIES=
	[ -r /proc/schedstat ] || return 1
	while read -r key value _; do
		[ "$key" = timestamp ] && { JIFFIES=$value; return 0; }
	done </proc/schedstat
	return 1
}

# leak_object CURRENT JIFFIES TEXT: append one reported object to the
# kmemleak.part of the test whose window holds JIFFIES, or, when that test's
# report is already written or the time is unknown, to CURRENT's with a note.
leak_object() {
	local cur=$1 at=$2 k owner=
	if [ -n "$at" ]; then
		for ((k = cur; k >= 0; k--)); do
			((at >= window_start[k])) && { owner=$k; break; }
		done
	fi
	if [ -n "$owner" ] && [ -e "${test_dir[owner]}/kmemleak.part" ]; then
		printf '%s' "$3" >>"${test_dir[owner]}/kmemleak.part"
	elif [ -n "$owner" ]; then
		{
			echo "(allocated during ${test_dir[owner]##*/}, unreferenced since its leak check closed)"
			printf '%s' "$3"
		} >>"${test_dir[cur]}/kmemleak.part"
	else
		{
			echo "(allocated before the first test, jiffies ${at:-unknown})"
			printf '%s' "$3"
		} >>"${test_dir[cur]}/kmemleak.part"
	fi
}

# leak_scan CURRENT: the scan after test CURRENT (an index): hand each
# reported object to its test, forget the report (so each object is reported
# once), then write the kmemleak.txt of each test whose window is covered.
# Sets scan_times for the test's after-test file.
leak_scan() {
	local cur=$1 line obj="" at="" k t0=$EPOCHREALTIME
	local -a still=()
	# kmemleak reads every object it tracks: the dentries and inodes of the
	# files a test touched (the guest's root is the host's, over 9p) made a
	# scan take 15 s against 2.5 s idle in a 4 GiB guest. Reclaimable caches
	# go first (0.3 s).
	sync
	echo 3 >/proc/sys/vm/drop_caches
	jiffies_now
	scan_us[cur]=${t0/./}
	if [ -z "$JIFFIES" ] || ! [ -w "$kmemleak" ] || ! echo scan 2>/dev/null >"$kmemleak"; then
		for k in "${leak_open[@]}"; do
			{
				if [ -z "$JIFFIES" ]; then
					echo "no jiffies (/proc/schedstat): leaks cannot be attributed to tests"
				else
					echo "kmemleak is off ($kmemleak refuses a scan): leaks cannot be seen"
				fi
				dmesg | grep -m 3 'kmemleak:'
			} >>"${test_dir[k]}/kmemleak.part"
			mv "${test_dir[k]}/kmemleak.part" "${test_dir[k]}/kmemleak.txt"
		done
		leak_open=()
		scan_times="scan=refused"
		return
	fi
	# The scan is synchronous: the report is complete when the write returns.
	while IFS= read -r line; do
		if [[ $line == "unreferenced object "* ]]; then
			[ -z "$obj" ] || leak_object "$cur" "$at" "$obj"
			obj=$line$'\n' at=""
		elif [ -n "$obj" ]; then
			obj+=$line$'\n'
			[[ $line =~ ^\ +comm\ .*\ jiffies\ ([0-9]+) ]] && at=${BASH_REMATCH[1]}
		fi
	done <"$kmemleak"
	[ -z "$obj" ] || leak_object "$cur" "$at" "$obj"
	echo clear >"$kmemleak"
	for k in "${leak_open[@]}"; do
		if ((k < cur && scan_us[cur] - scan_us[k] >= (KMEMLEAK_MIN_AGE + 1) * 1000000)); then
			mv "${test_dir[k]}/kmemleak.part" "${test_dir[k]}/kmemleak.txt"
		else
			still+=("$k")
		fi
	done
	leak_open=("${still[@]}")
	scan_times="scan=$(elapsed "$t0" "$EPOCHREALTIME")"
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
# Loaded modules have an initstate (a built-in one has none). The test ULP
# first: a test that timed out leaves it loaded, and the next test's insmod
# would fail for it ("File exists").
rdma_modules() {
	local m
	for m in rsiw_ulp rsiw siw; do [ -e "/sys/module/$m/initstate" ] && echo "$m"; done
}

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
jiffies_now
boot_done=$JIFFIES
dmesg >"$results/boot-dmesg.txt"
uname -r >"$results/kernel"

# close_leaks LAST: the leak reports still open, once LAST (the newest test
# run) is done: one more scan when LAST's is old enough, objects allocated
# since then going to LAST, then every open report written. After the last
# test, and before a test that has the host kill this VM (vm_test_kills): its
# scans die with it.
close_leaks() {
	local last=$1 wait_us k
	((${#leak_open[@]})) || return 0
	wait_us=$((scan_us[last] + (KMEMLEAK_MIN_AGE + 1) * 1000000 - 10#${EPOCHREALTIME/./}))
	((wait_us > 0)) && sleep "$((wait_us / 1000000)).$(printf '%06d' $((wait_us % 1000000)))"
	test_dir[last + 1]=${test_dir[last]}
	window_start[last + 1]=$last_scan_jiffies
	leak_scan $((last + 1))
	last_scan_jiffies=$JIFFIES
	# What this scan leaves open (kmemleak was off, or a clock jump) is closed as it is.
	for k in "${leak_open[@]}"; do
		mv "${test_dir[k]}/kmemleak.part" "${test_dir[k]}/kmemleak.txt"
	done
	leak_open=()
	sync
}

for index in "${!tests[@]}"; do
	test=${tests[index]}
	((index > 0)) && [ -n "$(vm_test_kills "$test")" ] && close_leaks $((index - 1))
	name=${test##*/}
	name=${name%.sh}
	dir=$results/$name
	mkdir -p "$dir"
	test_dir[index]=$dir
	# The window opens where the scan before it started.
	if ((index == 0)); then
		window_start[index]=${boot_done:-0}
	else
		window_start[index]=$last_scan_jiffies
	fi
	: >"$dir/kmemleak.part"
	leak_open+=("$index")
	# A test's own leak checks (selftests/lib.sh, kmemleak_report) look at its window only.
	export RSIW_LEAK_SINCE=${window_start[index]}
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
	t_end=$EPOCHREALTIME
	leftovers "$dir/.netdevs" "$dir/leftover.txt" $session
	rm -f "$dir/.netdevs"
	t_left=$EPOCHREALTIME
	scan_times=
	leak_scan "$index"
	last_scan_jiffies=$JIFFIES
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

close_leaks "${index:-0}"
