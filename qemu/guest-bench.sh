#!/usr/bin/env bash
# Runs inside the VM for `make bench` (qemu/bench.sh): the same workloads on
# the C siw and on rsiw, each with CRC and without, one driver after the
# other for each workload, plus
# iperf3 as the TCP ceiling. Writes OUT/raw.csv (one line a measurement:
# workload,size,driver,crc,round,MBps), OUT/cpu.csv (one line per family,
# round and driver: family,round,driver,busy %,idle %,steal % of the guest's
# CPU time meanwhile, from /proc/stat), OUT/counters.csv (for each rsiw
# measurement, the growth of the device's counters of work per payload byte)
# and OUT/env (kernel, CPU, settings).
# Progress goes to stdout.
#
# Usage: guest-bench.sh OUT_DIR
# Environment: BENCH_SECS (seconds per measurement, default 4), BENCH_ROUNDS
# (rounds over all drivers, alternating them, default 3; the report gives each
# ratio's median and range over the rounds),
# BENCH_ONLY (a regular expression on workload names: ulp-*, perf-*, nfs-*,
# nvme-*, smb-*, iser-*, iperf3), BENCH_DRIVERS (default "siw rsiw siw-nocrc rsiw-nocrc"),
# BENCH_PROFILE=1 (a CPU profile of every test ULP and perftest measurement:
# OUT/profile/<workload>-<size>-<driver>-round<N>.txt, from perf record -a).
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
RSIW_ROOT=$(pwd)
OUT=$1
SECS=${BENCH_SECS:-4}
ROUNDS=${BENCH_ROUNDS:-3}
# The round being measured (from 1), recorded with each measurement.
ROUND=0
ONLY=${BENCH_ONLY:-.}
RSIW_KO=$RSIW_ROOT/drivers/rsiw/rsiw.ko
ULP_KO=$RSIW_ROOT/selftests/ulp/rsiw_ulp.ko
ULP=/sys/kernel/debug/rsiw_ulp
ND=bench0 IP=198.18.0.1
# Each driver with CRC and without. The C siw never asks for CRC upstream;
# scripts/siw-crc-knob.sh gives our kernel's siw the module parameter
# mpa_crc_required for its CRC runs (default off, as upstream).
read -ra DRIVERS <<<"${BENCH_DRIVERS:-siw rsiw siw-nocrc rsiw-nocrc}"

# shellcheck source=../selftests/ulp-setup.sh
. "$RSIW_ROOT/selftests/ulp-setup.sh"
trap 'ulp_cleanup; link_down' EXIT

say() { printf '[bench] %s\n' "$*"; }
record() { # WORKLOAD SIZE DRIVER MBPS
	local crc=1
	[[ $3 == *-nocrc || $3 == tcp ]] && crc=0
	printf '%s,%s,%s,%s,%s,%s\n' "$1" "$2" "$3" "$crc" "$ROUND" "$4" >>"$OUT/raw.csv"
	say "$1 $2 $3: $4 MB/s"
	work_record "$1" "$2" "$3"
	sched_record "$1" "$2" "$3"
}

# The device's counters that measure the work per payload byte (rsiw's; the C
# siw has none), in counters.csv's column order.
WORK_COUNTERS=(tx_payload_bytes rx_payload_bytes tx_payload_copied_bytes
	tx_payload_by_reference_bytes rx_payload_bounced_bytes tx_tcp_copied_bytes
	tx_crc_bytes rx_crc_bytes tx_batches tx_fpdus rx_fpdus)
# work_snapshot: the counters of $LINK now, in WORK_COUNTERS order (empty
# without them).
work_snapshot() {
	local d=/sys/class/infiniband/${LINK:-none}/ports/1/hw_counters n v out=()
	[ -r "$d/tx_crc_bytes" ] || return 0
	for n in "${WORK_COUNTERS[@]}"; do
		read -r v <"$d/$n" || v=0
		out+=("$v")
	done
	echo "${out[*]}"
}
# work_record WORKLOAD SIZE DRIVER: one line of counters.csv, the counters'
# growth since the last measurement on this device (the measurement's work:
# both ends are on the device).
work_record() {
	local now i row a b
	now=$(work_snapshot)
	[ -n "$now" ] && [ -n "${WORK_LAST:-}" ] || { WORK_LAST=$now; return 0; }
	read -ra a <<<"$WORK_LAST"
	read -ra b <<<"$now"
	row="$1,$2,$3,$ROUND"
	for i in "${!b[@]}"; do
		row+=",$((b[i] - a[i]))"
	done
	echo "$row" >>"$OUT/counters.csv"
	WORK_LAST=$now
}
# sched_snapshot: "TID COMM RUN_NS WAIT_NS" for every thread now (/proc's
# schedstat: time on a CPU and time runnable but waiting for one), then a
# "cpu TOTAL IDLE STEAL SOFTIRQ" line (cpu_times).
sched_snapshot() {
	local d c r w
	for d in /proc/[0-9]*/task/[0-9]*; do
		{ read -r c <"$d/comm" && read -r r w _ <"$d/schedstat"; } 2>/dev/null &&
			echo "${d##*/} ${c// /_} $r $w"
	done
	echo "cpu $(cpu_times)"
}
# sched_record WORKLOAD SIZE DRIVER: lines of sched.csv, where the guest's CPU
# time went since the last measurement: run and wait (runnable, not running)
# milliseconds of the unbound workers (rsiw's transmit work), the per-CPU
# workers (rsiw's receive work), the C siw's transmit threads, ksoftirqd and
# the rest, and
# the share of CPU time spent idle and in softirq. Threads that exited
# meanwhile (perftest's) are not in it: they are the busy time left over.
sched_record() {
	local now
	now=$(sched_snapshot)
	[ -n "${SCHED_LAST:-}" ] || { SCHED_LAST=$now; return 0; }
	awk -v w="$1" -v s="$2" -v d="$3" -v r="$ROUND" '
		function class(c) {
			if (c ~ /^kworker\/u/) return "unbound-workers"
			if (c ~ /^kworker\//) return "cpu-workers"
			if (c ~ /^siw_tx/) return "siw-tx"
			if (c ~ /^ksoftirqd/) return "ksoftirqd"
			if (c ~ /^ib_/) return "perftest"
			return "other"
		}
		FNR == 1 { f++ }
		$1 == "cpu" { ct[f] = $2; ci[f] = $3; cs[f] = $5; next }
		f == 1 { r0[$1] = $3; w0[$1] = $4; next }
		{ k = class($2); run[k] += $3 - r0[$1]; wait[k] += $4 - w0[$1] }
		END {
			t = ct[2] - ct[1]; if (t <= 0) t = 1
			for (k in run)
				printf "%s,%s,%s,%s,%s,%.0f,%.0f\n", w, s, d, r, k, run[k] / 1e6, wait[k] / 1e6
			printf "%s,%s,%s,%s,idle%%,%.1f,\n", w, s, d, r, 100 * (ci[2] - ci[1]) / t
			printf "%s,%s,%s,%s,softirq%%,%.1f,\n", w, s, d, r, 100 * (cs[2] - cs[1]) / t
		}' <(echo "$SCHED_LAST") <(echo "$now") >>"$OUT/sched.csv"
	SCHED_LAST=$now
}
wanted() { [[ $1 =~ $ONLY ]]; }

# profile_start NAME: with BENCH_PROFILE=1, samples every CPU (kernel and user,
# no call chains) until profile_stop, which writes OUT/profile/NAME.txt: the
# symbols by share of the samples, the threads, and each thread's symbols.
# Under TCG the sampling timer waits while interrupts are off, so work done
# under an irq-safe spinlock shows up at the unlock that enables them again.
profile_start() {
	[ "${BENCH_PROFILE:-0}" = 1 ] || return 0
	mkdir -p "$OUT/profile"
	PROFILE_NAME=$1
	perf record -q -a -F 499 -o "$OUT/profile/$1.data" >/dev/null 2>&1 &
	PROFILE_PID=$!
}
profile_stop() {
	[ -n "${PROFILE_PID:-}" ] || return 0
	kill -INT "$PROFILE_PID"
	wait "$PROFILE_PID"
	local data=$OUT/profile/$PROFILE_NAME.data
	{
		perf report -i "$data" --stdio -q --sort sym --percent-limit 0.5
		echo
		perf report -i "$data" --stdio -q --sort comm --percent-limit 0.5
		echo
		perf report -i "$data" --stdio -q --sort comm,sym --percent-limit 0.3
	} >"$OUT/profile/$PROFILE_NAME.txt" 2>&1
	rm -f "$data"
	PROFILE_PID=
}
WORKLOADS=(ulp-write ulp-read ulp-send ulp-ping perf-write perf-read perf-send perf-send-ev
	perf-lat
	nfs-seqwrite nfs-seqread nfs-randread nvme-seqwrite nvme-seqread nvme-randread
	smb-seqwrite smb-seqread smb-randread iser-seqwrite iser-seqread iser-randread iperf3)
# family_wanted ulp|perf|nfs|nvme|smb|iser: some workload of the family is wanted.
family_wanted() {
	local w
	for w in "${WORKLOADS[@]}"; do
		[[ $w == "$1"-* ]] && wanted "$w" && return 0
	done
	return 1
}

modprobe dummy
ip link add "$ND" type dummy && ip addr add "$IP/24" dev "$ND" && ip link set "$ND" up || exit 1
modprobe siw || exit 1
[ -w /sys/module/siw/parameters/mpa_crc_required ] || {
	say "siw has no mpa_crc_required parameter (scripts/siw-crc-knob.sh did not run on this kernel)"
	exit 1
}
insmod "$RSIW_KO" || exit 1
mount -t debugfs none /sys/kernel/debug 2>/dev/null

# link_up DRIVER: the RDMA device of DRIVER (siw, rsiw, rsiw-nocrc) on $ND.
link_up() {
	local type=${1%-nocrc} crc=1
	[[ $1 == *-nocrc ]] && crc=0
	if [ "$type" = rsiw ]; then
		echo "rev=2 crc=$crc markers=0 rtr=write" >/sys/kernel/debug/rsiw/mpa || return
	else
		echo "$crc" >/sys/module/siw/parameters/mpa_crc_required || return
	fi
	rdma link add "${type}0" type "$type" netdev "$ND" || return
	LINK=${type}0
	WORK_LAST=$(work_snapshot)
	SCHED_LAST=$(sched_snapshot)
}
link_down() {
	[ -n "${LINK:-}" ] || return 0
	rdma link delete "$LINK"
	LINK=
}

{
	echo "kernel=$(uname -r)"
	echo "guest_cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
	echo "guest_cpus=$(nproc)"
	echo "secs=$SECS"
	echo "rounds=$ROUNDS"
	echo "rsiw_mpa=$(head -n 1 /sys/kernel/debug/rsiw/mpa 2>/dev/null)"
	echo "crc=siw and rsiw with CRC (siw.mpa_crc_required=1), and both without (-nocrc)"
} >"$OUT/env"
: >"$OUT/raw.csv"
: >"$OUT/cpu.csv"
echo "workload,size,driver,round,class,run_ms,wait_ms" >"$OUT/sched.csv"
echo "workload,size,driver,round,${WORK_COUNTERS[*]}" | tr ' ' , >"$OUT/counters.csv"

# cpu_times: the guest's CPU time so far, "TOTAL IDLE STEAL SOFTIRQ" in ticks
# (the first line of /proc/stat: user nice system idle iowait irq softirq steal).
cpu_times() {
	awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $5 + $6, $9, $8; exit }' /proc/stat
}
# cpu_record FAMILY DRIVER BEFORE: one line of cpu.csv, the shares of the CPU
# time since BEFORE (a cpu_times line) that were busy, idle and stolen. A
# guest whose host is busy elsewhere shows steal (where the hypervisor counts
# it) or runs slow with the same shares: compare rounds.
cpu_record() {
	local t0 i0 s0 t1 i1 s1
	read -r t0 i0 s0 _ <<<"$3"
	read -r t1 i1 s1 _ < <(cpu_times)
	awk -v f="$1" -v r="$ROUND" -v d="$2" -v t=$((t1 - t0)) -v i=$((i1 - i0)) -v s=$((s1 - s0)) \
		'BEGIN { if (t <= 0) t = 1; printf "%s,%d,%s,%.1f,%.1f,%.1f\n", f, r, d, 100 * (t - i - s) / t, 100 * i / t, 100 * s / t }' \
		>>"$OUT/cpu.csv"
}

# ------------------------------------------------------------ kernel verbs

ulp_bench() { # DRIVER
	local op size res mbps
	insmod "$ULP_KO" || return
	echo "server addr=$IP port=20887" >"$ULP/ctl" || { rmmod rsiw_ulp; return 1; }
	for op in write read send; do
		for size in 4096 65536 1048576; do
			wanted "ulp-$op" || continue
			echo clear >"$ULP/ctl"
			profile_start "ulp-$op-$size-$1-round$ROUND"
			if echo "bench addr=$IP port=20887 op=$op size=$size secs=$SECS" >"$ULP/ctl"; then
				res=$(cat "$ULP/result")
				mbps=$(sed -nE 's/.* MBps=([0-9.]+)$/\1/p' <<<"$res")
			else
				mbps=
			fi
			profile_stop
			[ -n "$mbps" ] || { say "ulp-$op $size $1: failed: $(cat "$ULP/result" 2>/dev/null)"; mbps=0; }
			record "ulp-$op" "$size" "$1" "$mbps"
		done
	done
	# Latency: 48-byte control messages, one round trip at a time; its MB/s
	# counts one message per round trip, so the ratio is the inverse of the
	# latency ratio.
	if wanted ulp-ping; then
		echo clear >"$ULP/ctl"
		if echo "bench addr=$IP port=20887 op=ping secs=$SECS" >"$ULP/ctl"; then
			res=$(cat "$ULP/result")
			mbps=$(sed -nE 's/.* MBps=([0-9.]+)$/\1/p' <<<"$res")
			say "ulp-ping $1: $(sed -nE 's/.* (us_per_op=[0-9.]+) .*/\1/p' <<<"$res") us per round trip"
		else
			mbps=
		fi
		[ -n "$mbps" ] || { say "ulp-ping $1: failed: $(cat "$ULP/result" 2>/dev/null)"; mbps=0; }
		record ulp-ping 48 "$1" "$mbps"
	fi
	echo stop >"$ULP/ctl"
	rmmod rsiw_ulp
}

# ------------------------------------------------------------ user verbs

# perf_run TOOL PORT ARGS...: run perftest TOOL (over rdma_cm) as server and
# client on $LINK with ARGS; prints the client's output.
perf_run() {
	local tool=$1 port=$2 pid
	shift 2
	timeout $((SECS + 60)) "$tool" -R -F -d "$LINK" -p "$port" "$@" >/dev/null 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		ss -Hltn "sport = :$port" | grep -q . && break
		sleep 0.1
	done
	timeout $((SECS + 60)) "$tool" -R -F -d "$LINK" -p "$port" "$@" "$IP" 2>&1
	wait "$pid"
}

# perf_try TOOL ARGS...: perf_run on the next port, its output in out; again
# (at most 3 times) when perftest could not calibrate its clock. It regresses
# rdtsc against gettimeofday over a short loop, which TCG's scheduling can
# spoil (r^2 under 0.9): it then takes the CPU for 0 MHz and prints 0.00 for
# every rate (about one measurement in seven in session 38, either driver).
perf_try() {
	local tool=$1 try p
	shift
	for try in 1 2 3; do
		# Counted here: an expansion inside $(...) happens in the subshell.
		p=$port port=$((port + 1))
		out=$(perf_run "$tool" "$p" "$@")
		grep -q 'Correlation coefficient r^2' <<<"$out" || return 0
		say "$tool $*: perftest could not calibrate its clock (try $try of 3)"
	done
}

# perf_bw WORKLOAD DRIVER OP SIZE [ARG]...: ib_OP_bw at SIZE (average MB/s)
# with ARGS, recorded as WORKLOAD. A fixed count of messages (about SECS/2 of
# work under TCG), so that both drivers move the same bytes; session 37's
# duration runs (-D) had even more zeros, not told apart from the calibration's.
perf_bw() {
	local workload=$1 drv=$2 op=$3 size=$4 mbps
	local -A per_sec=([4096]=250 [65536]=200 [1048576]=20)
	shift 4
	profile_start "$workload-$size-$drv-round$ROUND"
	perf_try "ib_${op}_bw" "$@" -s "$size" -n $((per_sec[$size] * SECS))
	profile_stop
	mbps=$(awk -v s="$size" '$1 == s && NF >= 4 { print $4 }' <<<"$out" | tail -n 1)
	[ -n "$mbps" ] || { say "$workload $size $drv: failed: $(tail -n 3 <<<"$out")"; mbps=0; }
	# A zero is no measurement either (bench-report.py leaves it out): keep
	# what perftest printed.
	awk -v m="$mbps" 'BEGIN { exit !(m + 0 == 0) }' &&
		printf '%s\n' "$out" >"$OUT/$workload-$size-$drv-round$ROUND.txt"
	record "$workload" "$size" "$drv" "$mbps"
}

# perf_bench DRIVER: perftest's ib_write_bw, ib_read_bw and ib_send_bw at 4 KiB,
# 64 KiB and 1 MiB, polling their completion queues without sleeping as
# perftest does by default; ib_send_bw at 64 KiB and 1 MiB waiting for
# completion events instead (-e, perf-send-ev; perftest refuses -e for Write),
# as kernel ULPs do, which leaves the CPU the poller took to the drivers'
# threads; and ib_send_lat at 64 bytes (recorded as 64 bytes per average round
# trip, so that higher is better as for the others).
perf_bench() {
	local op size port=20900 out lat mbps
	for op in write read send; do
		wanted "perf-$op" || continue
		for size in 4096 65536 1048576; do
			perf_bw "perf-$op" "$1" "$op" "$size"
		done
	done
	if wanted perf-send-ev; then
		# A completion signalled every 20 Sends (which divides every count):
		# with events perftest keeps its default of one in 100, and hung when
		# the count was not a multiple of it (80 at 1 MiB).
		for size in 65536 1048576; do
			perf_bw perf-send-ev "$1" send "$size" -e -Q 20
		done
	fi
	if wanted perf-lat; then
		# Iterations, not a duration: only then does it print the average.
		perf_try ib_send_lat -s 64 -n $((SECS * 1000))
		lat=$(awk '$1 == 64 && NF >= 6 { print $6 }' <<<"$out" | tail -n 1)
		if [ -n "$lat" ]; then
			say "perf-lat $1: $lat us average"
			mbps=$(awk -v l="$lat" 'BEGIN { printf "%.3f", 64 / l }')
		else
			say "perf-lat $1: failed: $(tail -n 3 <<<"$out")"
			mbps=0
		fi
		record perf-lat 64 "$1" "$mbps"
	fi
}

# ------------------------------------------------------------ fio helpers

# fio_mbps FIO_ARGS...: run fio for SECS and print the job's MB/s (read plus
# write bandwidth, in 10^6 bytes per second).
fio_mbps() {
	local json
	json=$(timeout $((SECS * 4 + 120)) fio --output-format=json --time_based --runtime="$SECS" \
		--ramp_time=1 --group_reporting "$@" 2>/dev/null) || { echo 0; return; }
	python3 - "$json" <<'EOF'
import json, sys
text = sys.argv[1]
j = json.loads(text[text.find("{"):])
job = j["jobs"][0]
bw = (job["read"]["bw_bytes"] + job["write"]["bw_bytes"]) / 1e6
print("%.1f" % bw)
EOF
}

# fio_patterns WORKLOAD DRIVER TARGET_ARGS...: sequential write and read at
# 1 MiB, random read at 4 KiB.
fio_patterns() {
	local w=$1 drv=$2 v
	shift 2
	local -a pats=("seqwrite 1048576 --rw=write --bs=1M --iodepth=8"
		"seqread 1048576 --rw=read --bs=1M --iodepth=8"
		"randread 4096 --rw=randread --bs=4k --iodepth=32")
	local p name size args
	for p in "${pats[@]}"; do
		read -r name size args <<<"$p"
		wanted "$w-$name" || continue
		# shellcheck disable=SC2086 # args are fio options
		v=$(fio_mbps --name="$w-$name" --ioengine=libaio --direct=1 $args "$@")
		record "$w-$name" "$size" "$drv" "$v"
	done
}

# ------------------------------------------------------------ NFS over RDMA

nfs_bench() { # DRIVER
	local mnt=/tmp/bench-nfs
	nfs_server_start /srv/bench || return
	nfs_mount "$IP" /srv/bench 4.2 "$mnt" || { nfs_server_stop; return 1; }
	# Write the file once so that reads have data to read.
	dd if=/dev/zero of="$mnt/f" bs=1M count=256 oflag=direct status=none
	fio_patterns nfs "$1" --filename="$mnt/f" --size=256M
	rm -f "$mnt/f"
	nfs_umount "$mnt"
	nfs_server_stop
}

# ------------------------------------------------------------ NVMe-oF

nvme_bench() { # DRIVER
	local nqn=nqn.2026-11.io.rsiw:bench dev
	nvmet_port 1 "$IP" 4420 "$nqn" || return
	nvme_connect "$IP" 4420 "$nqn" || { nvmet_port_del 1 "$nqn"; return 1; }
	dev=$(nvme_namespaces "$nqn" | head -n 1)
	fio_patterns nvme "$1" --filename="$dev"
	nvme_disconnect "$nqn"
	nvmet_port_del 1 "$nqn"
}

# ------------------------------------------------------------ SMB Direct

smb_bench() { # DRIVER
	local mnt=/tmp/bench-smb
	smb_server_start /srv/bench-smb bench || return
	ulp_wait 30 smb_listening "$LINK" || { say "ksmbd does not listen on $LINK"; ulp_undo smb-server; return 1; }
	smb_mount "$IP" bench "$mnt" || { ulp_undo smb-server; return 1; }
	dd if=/dev/zero of="$mnt/f" bs=1M count=256 oflag=direct status=none
	fio_patterns smb "$1" --filename="$mnt/f" --size=256M
	rm -f "$mnt/f"
	smb_umount "$mnt"
	ulp_undo smb-server
}

# ------------------------------------------------------------ iSER

# A target per driver: isert's listener goes with the device it listened on.
iser_bench() { # DRIVER
	local iqn=iqn.2026-11.io.rsiw:bench disk st=0
	if iser_target_create "$iqn" 256 && iser_portal "$IP" "$ISER_PORT" "$iqn" &&
		iser_initiator_start && iser_login "$IP" "$ISER_PORT" "$iqn" && disk=$(iser_disk "$iqn"); then
		fio_patterns iser "$1" --filename="$disk" --size=256M
	else
		st=1
	fi
	ulp_undo iser-initiator
	ulp_undo iser-target
	return $st
}

# ------------------------------------------------------------ main

if family_wanted nfs; then
	nfs_export_tmpfs /srv/bench 400M || exit 1
fi
if family_wanted nvme; then
	nvmet_null_blk bench0 1024 && nvmet_subsys nqn.2026-11.io.rsiw:bench /dev/bench0 || exit 1
fi
if family_wanted smb; then
	ulp_mount_tmpfs /srv/bench-smb 400M || exit 1
fi

# Rounds alternate the drivers, every other round in reverse order, so that a
# drift of the host's speed during the run hits each driver alike; the report
# takes each ratio round by round.
for w in ulp perf nfs nvme smb iser; do
	family_wanted "$w" || continue
	for ((round = 0; round < ROUNDS; round++)); do
		ROUND=$((round + 1))
		order=("${DRIVERS[@]}")
		if ((round % 2)); then
			order=()
			for ((i = ${#DRIVERS[@]} - 1; i >= 0; i--)); do order+=("${DRIVERS[$i]}"); done
		fi
		for drv in "${order[@]}"; do
			say "$w on $drv (round $((round + 1)) of $ROUNDS)"
			link_up "$drv" || { say "cannot bring up $drv"; continue; }
			cpu_before=$(cpu_times)
			"${w}_bench" "$drv" || say "$w on $drv failed"
			cpu_record "$w" "$drv" "$cpu_before"
			if [[ $drv == rsiw* ]]; then
				# What the connections negotiated and how payload went out.
				{ echo "# after $w on $drv"; cat /sys/kernel/debug/rsiw/mpa; } >>"$OUT/rsiw-counters"
			fi
			link_down
			# Let the RDMA core finish removing the device before the next one.
			sleep 1
		done
	done
done

if wanted iperf3; then
	ROUND=1
	iperf3 -s -D -B "$IP" -1 >/dev/null 2>&1
	sleep 1
	mbps=$(timeout $((SECS + 30)) iperf3 -c "$IP" -t "$SECS" -J 2>/dev/null |
		python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6))' 2>/dev/null)
	record iperf3 1048576 tcp "${mbps:-0}"
fi
say "done"
