#!/usr/bin/env bash
# Kernel ULPs through allocation failures and memory pressure, in this VM: an
# NFSv4.2 mount over RPC/RDMA and an NVMe-oF/RDMA connection (a memory-backed
# null_blk namespace), both through the device under test on 198.18.0.1.
#
# Allocation failure: while fio writes and verifies data on both (direct I/O,
# crc32c, one job after another), failslab and fail_page_alloc fail
# FAULT_PERCENT % of the allocations, sleeping or not, whose call chain passes
# through the driver's module text (the stack-trace filter), for FAULT_SECS
# seconds (default 15; make check-full: 120). The ULPs may see I/O errors or
# retry; no job may read back wrong data, and faults must have been injected.
# Afterwards both ULPs recover (the NVMe controller is live again), new jobs
# verify, and a file written before the faults reads back unchanged.
#
# Memory pressure: a hog takes memory (huge pages, then a process) until the
# guest has about HOG_AVAIL_MB MiB available and holds it there, while fio
# writes PRESSURE_MB MiB through the NFS client's page cache (writeback over
# RPC/RDMA under reclaim) and verifies it, and NVMe fio runs beside it. The kernel must have reclaimed
# (pgscan in /proc/vmstat grew), the data must verify, and no task may hang
# (hung_task_timeout_secs=60 is a splat).
#
# At the end: nothing left on the device, no splat, no leak.
# timeout: 1500
# Functions run through tap_check and wait_for look unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma nvme fio python3 mount.nfs rpc.nfsd rpc.mountd rpcbind exportfs
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:61 ip=198.18.0.1 svcid=$NVME_RDMA_PORT
nqn=nqn.2014-08.org.rsiw:selftest-faults
vers=4.2
FAULT_SECS=${FAULT_SECS:-15}
FAULT_PERCENT=${FAULT_PERCENT:-10}
PRESSURE_MB=${PRESSURE_MB:-128}
HOG_AVAIL_MB=${HOG_AVAIL_MB:-96}
FI=/sys/kernel/debug
export_dir=$TEST_TMP/export
mnt=$TEST_TMP/mnt

# ---------------------------------------------------------------- fault injection

# driver_text_range: "START END" (hex) of the driver's module text: its lowest
# text symbol and the end of the page of its highest (module text is page
# aligned), from /proc/kallsyms.
driver_text_range() {
	local addrs first last
	addrs=$(awk -v m="[$RSIW_MODULE]" '$4 == m && ($2 == "t" || $2 == "T") { print $1 }' /proc/kallsyms |
		LC_ALL=C sort)
	first=$(head -n 1 <<<"$addrs")
	last=$(tail -n 1 <<<"$addrs")
	[ -n "$first" ] && [ "$first" != 0000000000000000 ] || return 1
	printf '%s %x\n' "$first" $(((16#$last | 0xfff) + 1))
}

# fault_set ATTR-DIR NAME VALUE...: write each VALUE to ATTR-DIR/NAME.
fault_set() {
	local d=$FI/$1
	shift
	while (($# >= 2)); do
		echo "$2" >"$d/$1" || { echo "cannot set $d/$1 to $2"; return 1; }
		shift 2
	done
}

# faults_on START END: fail FAULT_PERCENT % of slab and page allocations whose
# stack passes through [START, END), sleeping ones too, from any task or
# context. The filter goes in before the probability.
faults_on() {
	local f
	for f in failslab fail_page_alloc; do
		fault_set "$f" probability 0 task-filter N ignore-gfp-wait N space 0 interval 1 \
			stacktrace-depth 32 require-start "0x$1" require-end "0x$2" reject-start 0 reject-end 0 \
			verbose 1 verbose_ratelimit_interval_ms 1000 verbose_ratelimit_burst 50 times -1 || return
	done
	fault_set fail_page_alloc ignore-gfp-highmem N min-order 0 || return
	for f in failslab fail_page_alloc; do
		fault_set "$f" probability "$FAULT_PERCENT" || return
	done
}

# faults_off: no more injected failures.
faults_off() {
	local f st=0
	for f in failslab fail_page_alloc; do
		[ -d "$FI/$f" ] || continue
		fault_set "$f" probability 0 || st=1
	done
	return "$st"
}

# ---------------------------------------------------------------- fio

# fio_job FILE BS SIZE [FIO-OPTION]...: write SIZE in BS blocks, read it back
# and check every block's crc32c.
fio_job() {
	local file=$1 bs=$2 size=$3
	shift 3
	timeout -k 10 300 fio --name=faults --filename="$file" --rw=write --bs="$bs" --size="$size" \
		--ioengine=libaio --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 "$@" 2>&1
}

# fio_verdict OUTPUT STATUS: "ok", "ioerror" (the job failed on an I/O error,
# without reading back wrong data) or "bad" (wrong data, or a failure that is
# not an I/O error).
fio_verdict() {
	if grep -qiE 'verify: bad|bad magic|verify failed|verify type mismatch|, wanted ' <<<"$1"; then
		echo bad
	elif [ "$2" = 0 ] && grep -q 'err= 0' <<<"$1"; then
		echo ok
	elif grep -qiE 'Input/output error|No space|Cannot allocate memory|Connection|timed out|err=[ ]*(5|12|28|107|110|121)[^0-9]' <<<"$1"; then
		echo ioerror
	else
		echo bad
	fi
}

# fio_loop NAME FILE BS SIZE [FIO-OPTION]...: run fio_job until $TEST_TMP/stop
# exists; each job's verdict a line of $TEST_TMP/NAME.log, and the output of a
# bad one in $TEST_TMP/NAME.bad.
fio_loop() {
	local name=$1 out st v
	shift
	while [ ! -e "$TEST_TMP/stop" ]; do
		out=$(fio_job "$@")
		st=$?
		v=$(fio_verdict "$out" "$st")
		echo "$v" >>"$TEST_TMP/$name.log"
		[ "$v" = bad ] && printf '%s\n' "$out" >>"$TEST_TMP/$name.bad"
		# An I/O error comes at once while a controller reconnects: do not spin.
		[ "$v" = ok ] || sleep 1
	done
}

declare -A loops=()

# loop_start NAME FILE BS SIZE [FIO-OPTION]...: fio_loop in the background.
loop_start() {
	rm -f "$TEST_TMP/stop" "$TEST_TMP/$1".{log,bad}
	fio_loop "$@" &
	loops[$1]=$!
}

# loops_running: whether a loop is still running.
loops_running() {
	local pid
	for pid in "${loops[@]}"; do
		kill -0 "$pid" 2>/dev/null && return 0
	done
	return 1
}

# loops_stop WHAT: stop the loops (their jobs finish first; a job that hangs
# fails here) and check their verdicts: no bad job, at least one job ran.
loops_stop() {
	local what=$1 name n ok ioerr bad
	touch "$TEST_TMP/stop"
	if ! wait_for 360 eval '! loops_running'; then
		tap_fail "$what: the fio jobs end" "$(pgrep -a fio | head)"
		echo w >/proc/sysrq-trigger
		trap - EXIT
		tap_bail "fio hangs"
	fi
	for name in "${!loops[@]}"; do
		n=$(wc -l <"$TEST_TMP/$name.log" 2>/dev/null || echo 0)
		ok=$(grep -c '^ok$' "$TEST_TMP/$name.log" 2>/dev/null)
		ioerr=$(grep -c '^ioerror$' "$TEST_TMP/$name.log" 2>/dev/null)
		bad=$(grep -c '^bad$' "$TEST_TMP/$name.log" 2>/dev/null)
		tap_result "$( ((n > 0 && bad == 0)) && echo 0 || echo 1)" \
			"$what: $name fio jobs: none read back wrong data or failed otherwise than with an I/O error" \
			"$n jobs: $ok verified, $ioerr I/O errors, $bad bad" "$(tail -n 40 "$TEST_TMP/$name.bad" 2>/dev/null)"
		tap_diag "$what: $name: $n jobs, $ok verified, $ioerr ended on an I/O error"
	done
	loops=()
}

# ---------------------------------------------------------------- recovery

# nvme_live: whether the controller of $nqn is live.
nvme_live() {
	local c
	c=$(nvme_ctrls "$nqn" | head -n 1)
	[ -n "$c" ] && [ "$(cat "/sys/class/nvme/$c/state" 2>/dev/null)" = live ]
}

# check_recovered WHAT: the NVMe controller is live again, and fresh jobs on
# both ULPs verify.
check_recovered() {
	local what=$1 out st
	tap_wait "$what: the NVMe controller is live" 180 nvme_live ||
		tap_diag "$(for c in $(nvme_ctrls "$nqn"); do echo "$c: $(cat "/sys/class/nvme/$c/state")"; done)"
	ns=$(nvme_namespaces "$nqn" | head -n 1)
	out=$(fio_job "$mnt/after" 1m 16m --direct=1)
	st=$?
	tap_result "$([ "$(fio_verdict "$out" "$st")" = ok ]; echo $?)" \
		"$what: NFS: 16 MiB written, read back, verified" "$(tail -n 20 <<<"$out")"
	out=$(fio_job "$ns" 64k 16m --direct=1)
	st=$?
	tap_result "$([ "$(fio_verdict "$out" "$st")" = ok ]; echo $?)" \
		"$what: NVMe: 16 MiB written, read back, verified" "$(tail -n 20 <<<"$out")"
	rm -f "$mnt/after"
}

# ---------------------------------------------------------------- memory hog

# The memory hog: takes memory (8 MiB at a time, each page written) until
# MemAvailable is down to FLOOR MiB and holds it there, giving back at once
# what it takes to stay above half of that; prints "held N" once there, and
# ends at the end of its input. It locks its pages: its own code must not be
# evicted, or it cannot run to give back (then the OOM killer ends it).
HOG='
import sys, time, select, ctypes
ctypes.CDLL(None).mlockall(3)
floor = int(sys.argv[1]) << 20
step = 8 << 20
def avail():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
held, told = [], False
while True:
    a = avail()
    if a > floor + step:
        held.append(b"\x5a" * step)
        continue
    if a < floor // 2 and held:
        held.pop()
        continue
    if not told:
        print("held %d" % (len(held) * step >> 20), flush=True)
        told = True
    r, _, _ = select.select([sys.stdin], [], [], 0.2)
    if r and not sys.stdin.read(1):
        break
'

# hog_start: the memory hog, as coprocess HOG_PROC, down to HOG_AVAIL_MB. Most
# of the memory goes first to the kernel's pool of huge pages (HOG_HUGE_MB):
# the pool takes free pages without writing them, where writing a page at a
# time runs at about 36 MB/s under TCG. The hog takes the rest, and gives back
# if need be. Neither can be reclaimed (the VM has no swap).
HOG_HUGE_MB=0
hog_start() {
	local avail huge_kb
	avail=$(awk '$1 == "MemAvailable:" { print int($2 / 1024) }' /proc/meminfo)
	huge_kb=$(awk '$1 == "Hugepagesize:" { print $2 }' /proc/meminfo)
	if [ -w /proc/sys/vm/nr_hugepages ] && ((${huge_kb:-0} > 0 && avail > HOG_AVAIL_MB + 256)); then
		echo $(((avail - HOG_AVAIL_MB - 256) * 1024 / huge_kb)) >/proc/sys/vm/nr_hugepages
		HOG_HUGE_MB=$(($(cat /proc/sys/vm/nr_hugepages) * huge_kb / 1024))
	fi
	# shellcheck disable=SC2034 # read through coproc_line's and coproc_end's namerefs
	coproc HOG_PROC { exec python3 -c "$HOG" "$HOG_AVAIL_MB"; }
}

# hog_stop: end the hog and empty the huge page pool.
hog_stop() {
	coproc_end HOG_PROC
	[ "$HOG_HUGE_MB" = 0 ] || echo 0 >/proc/sys/vm/nr_hugepages
	HOG_HUGE_MB=0
}

# reclaim_scanned: pages the kernel scanned for reclaim so far.
reclaim_scanned() {
	awk '$1 ~ /^pgscan_(kswapd|direct)$/ { n += $2 } END { print n + 0 }' /proc/vmstat
}

# res_clear: the ULPs left nothing on $dev (rdma res) but the CQs of the
# device's CQ pool (ib_cq_pool_get, nvmet-rdma's), which the RDMA core keeps,
# unused, until the device goes.
res_clear() {
	[[ $(ulp_res_summary "$dev") =~ ^"pd 0 cq "[0-9]+" qp 0 cm_id 0 mr 0 " ]] &&
		! timeout 20 rdma res show cq dev "$dev" | grep -v ' users 0 .*comm \[ib_core\]' | grep -q .
}

# ---------------------------------------------------------------- setup

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev $nd $ip" netdev_dummy "$nd" "$mac" "$ip/24" || tap_bail "cannot create $nd"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $nd" rdma_link_add "$dev" "$nd" ||
	tap_bail "cannot add the link"
tap_wait "$dev ACTIVE" 5 port_state_is "$dev" ACTIVE
trap 'faults_off; hog_stop; ulp_cleanup; cleanup' EXIT
for f in failslab fail_page_alloc; do
	[ -d "$FI/$f" ] || tap_bail "$FI/$f is missing (CONFIG_FAILSLAB, CONFIG_FAIL_PAGE_ALLOC, CONFIG_FAULT_INJECTION_DEBUG_FS)"
done
[ -f "$FI/failslab/require-start" ] ||
	tap_bail "no stack-trace filter for fault injection (CONFIG_FAULT_INJECTION_STACKTRACE_FILTER)"
kmsg_mark
kmemleak_report "no leak from the setup"
tap_check "tmpfs to export on $export_dir" nfs_export_tmpfs "$export_dir" 1G || tap_bail "no tmpfs"
tap_check "knfsd on rdma port $NFS_RDMA_PORT" nfs_server_start "$export_dir" ||
	tap_bail "cannot start the NFS server"
tap_check "NFSv$vers: mount -o proto=rdma $ip" nfs_mount "$ip" "$export_dir" "$vers" "$mnt" ||
	tap_bail "cannot mount"
tap_check "NVMe-oF over $dev: a 128 MiB null_blk namespace, nvmet-rdma on $ip:$svcid, nvme connect" \
	nvme_rdma_loop rsiwnull2 128 "$nqn" "$ip" "$svcid" || tap_bail "cannot set up NVMe-oF"
ns=$(tail -n 1 <<<"$OUT")

# A file written before the faults, to read back after them.
head -c 8M /dev/urandom >"$TEST_TMP/before"
tap_check "NFS: 8 MiB file written before the faults" cp "$TEST_TMP/before" "$mnt/before"

# ---------------------------------------------------------------- allocation failure

range=$(driver_text_range) || tap_bail "no text symbols of $RSIW_MODULE in /proc/kallsyms"
tap_diag "driver text: ${range% *} .. ${range#* }"
waits0=$(ulp_rsiw_mpa tx_memory_waits)
loop_start nfs "$mnt/fio" 1m 16m --direct=1
loop_start nvme "$ns" 4k 4m --direct=1 --rw=randwrite
sleep 5
tap_check "faults on: failslab and fail_page_alloc, $FAULT_PERCENT % of the allocations through $RSIW_MODULE" \
	faults_on "${range% *}" "${range#* }"
sleep "$FAULT_SECS"
tap_check "faults off" faults_off
loops_stop "allocation failure"
injected=$(kmsg_since_mark | grep -c 'FAULT_INJECTION: forcing a failure')
tap_result "$((injected > 0 ? 0 : 1))" "faults were injected into allocations through $RSIW_MODULE" \
	"no 'FAULT_INJECTION: forcing a failure' line in the kernel log"
tap_diag "$injected injected failures logged (rate-limited to 50 a second)"
rsiw_is_reference ||
	tap_diag "rsiw's transmit path waited for memory $(($(ulp_rsiw_mpa tx_memory_waits) - ${waits0:-0})) times"
check_recovered "after the faults"
echo 3 >/proc/sys/vm/drop_caches
tap_check "NFS: the file written before the faults reads back unchanged" cmp "$TEST_TMP/before" "$mnt/before"

# ---------------------------------------------------------------- memory pressure

scan0=$(reclaim_scanned)
hog_start
if coproc_line HOG_PROC 300; then
	tap_ok "memory hog holds memory, $HOG_AVAIL_MB MiB left available ($HOG_HUGE_MB MiB in huge pages, $LINE MiB)"
else
	tap_fail "memory hog holds memory, $HOG_AVAIL_MB MiB left available" "$(grep -E 'Mem|Cached' /proc/meminfo)"
fi
scan1=$(reclaim_scanned)
loop_start nvme "$ns" 64k 16m --direct=1
out=$(fio_job "$mnt/pressure" 1m "${PRESSURE_MB}m" --direct=0 --end_fsync=1 --invalidate=1)
st=$?
tap_result "$([ "$(fio_verdict "$out" "$st")" = ok ]; echo $?)" \
	"under memory pressure: NFS: $PRESSURE_MB MiB written through the page cache, read back, verified" \
	"exit status $st" "$(tail -n 30 <<<"$out")"
tap_diag "$(grep -E '^ +(READ|WRITE): ' <<<"$out" | sed -E 's/^ +//; s/, [0-9.]+[KMG]?iB\/s-.*, io=/, io=/')"
tap_diag "$(grep -E '^(MemAvailable|MemFree|Dirty|Writeback):' /proc/meminfo | tr -s ' ' | paste -sd ' ')"
scan2=$(reclaim_scanned)
loops_stop "under memory pressure"
hog_stop
tap_result "$((scan2 > scan1 ? 0 : 1))" "the kernel reclaimed memory during the writes (pgscan grew)" \
	"pgscan: $scan0 before the hog, $scan1 once it held its memory, $scan2 after the writes"
tap_diag "pages scanned for reclaim: $((scan1 - scan0)) while the hog took memory, $((scan2 - scan1)) during the writes"
rm -f "$mnt/pressure"
check_recovered "after the pressure"

# ---------------------------------------------------------------- teardown

tap_check "NVMe: disconnect" nvme_disconnect "$nqn"
tap_check "NFS: umount" nfs_umount "$mnt"
tap_check "stop the NFS server" nfs_server_stop
tap_check "remove the nvmet port" nvmet_port_del 1 "$nqn"
tap_check "remove the subsystem" nvmet_subsys_del "$nqn"
# nvmet-rdma and the RPC client free their queues from work items of their own.
tap_wait "no PD, CQ, QP, MR or CM id left on $dev (unused pooled CQs stay)" 60 res_clear ||
	tap_diag "$(ulp_res_summary "$dev")" "$(timeout 20 rdma res show cq dev "$dev" 2>&1)"
tap_check "undo the setup: exports, tmpfs, null_blk, nvmet, NFS and NVMe modules" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
