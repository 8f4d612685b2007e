#!/usr/bin/env bash
# NVMe over Fabrics through the device under test, target and host in this VM:
# nvmet-rdma (configfs) offers a subsystem with a memory-backed null_blk
# namespace and a brd RAM disk namespace on 198.18.0.1:4420 (a dummy netdev
# with the RDMA device on it) and nvme-rdma connects to it. fio with crc32c
# verification on both namespaces (4 KiB random and 1 MiB sequential,
# direct I/O); 2 connect/disconnect cycles with I/O (NVME_CYCLES; make
# check-full runs 50, and judges slab growth a cycle too: see
# slab_rate_judged), then no QP, MR or CQ left on the device and no kmemleak
# report. Last,
# nvmet-rdma reloaded with use_srq=1: the target's queues must use shared
# receive queues on the device, I/O must verify, and a disconnect must free the
# target's QPs within 20 s (ib_drain_qp waits 60 s for
# IB_EVENT_QP_LAST_WQE_REACHED when a provider never raises it). Then
# nvme-rdma reloaded with register_always=N: the target reaches the host's
# buffers through the host PD's global rkey (the device's DMA region with
# remote rights), and I/O must verify.
# timeout: 1800
# Functions run through tap_check look unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma nvme fio
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:22 ip=198.18.0.1 svcid=$NVME_RDMA_PORT
nqn=nqn.2014-08.org.rsiw:selftest-nvmeof
# make check's sizes; make check-full's are bigger (scripts/check.sh).
NVME_CYCLES=${NVME_CYCLES:-2}
# fio jobs: rw:bs:size, on each namespace.
NVME_FIO=${NVME_FIO:-randwrite:4k:2m write:1m:16m}
# How long a disconnect may take to free the target's QPs with SRQs.
NVME_SRQ_DRAIN_MAX=${NVME_SRQ_DRAIN_MAX:-20}

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# run_fio WHAT DEV RW BS SIZE: write, read back and verify (crc32c).
run_fio() {
	local what=$1 bdev=$2 rw=$3 bs=$4 size=$5 out st desc
	desc="$what: fio $rw $bs x $size on $bdev, read back, crc32c verified"
	out=$(timeout 600 fio --name="$what-$bs" --filename="$bdev" --rw="$rw" --bs="$bs" --size="$size" \
		--direct=1 --ioengine=libaio --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 2>&1)
	st=$?
	if [ "$st" = 0 ] && grep -q 'err= 0' <<<"$out"; then
		tap_ok "$desc"
		tap_diag "$(grep -E '^ +(READ|WRITE): ' <<<"$out" | sed -E 's/^ +//; s/, [0-9.]+[KMG]?iB\/s-.*, io=/, io=/')"
	else
		tap_fail "$desc" "exit status $st" "$(tail -n 30 <<<"$out")"
	fi
}

# check_connected WHAT: the controller of $nqn uses RDMA to $ip:$svcid, has both
# namespaces, and its queues are QPs in RTS on $dev.
check_connected() {
	local what=$1 c ctrl="" qps
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$nqn" ] && ctrl=$c
	done
	tap_result "$([ -n "$ctrl" ] && [ "$(cat "$ctrl/transport")" = rdma ] &&
		grep -q "traddr=$ip,trsvcid=$svcid" "$ctrl/address"; echo $?)" \
		"$what: controller ${ctrl##*/} transport rdma to $ip:$svcid" \
		"$([ -n "$ctrl" ] && cat "$ctrl/transport" "$ctrl/address")" "$(nvme list-subsys 2>&1)"
	mapfile -t ns < <(nvme_namespaces "$nqn")
	tap_result "$([ "${#ns[@]}" = 2 ]; echo $?)" "$what: two namespaces (${ns[*]})" "$(nvme list 2>&1)"
	qps=$(timeout 20 rdma res show qp link "$dev/1" 2>&1)
	# An admin queue and at least one I/O queue, each a host and a target QP.
	tap_result "$([ "$(grep -c " state RTS " <<<"$qps")" -ge 4 ]; echo $?)" \
		"$what: rdma res show qp lists host and target QPs in RTS on $dev" "$qps"
}

# read_namespaces: read 1 MiB of each namespace of $nqn (direct I/O).
read_namespaces() {
	local b n=0
	for b in $(nvme_namespaces "$nqn"); do
		dd if="$b" of=/dev/null bs=1M count=1 iflag=direct status=none || { echo "reading $b failed"; return 1; }
		n=$((n + 1))
	done
	[ "$n" = 2 ] || { echo "$n namespaces"; return 1; }
}

# cycle I: connect, read both namespaces, disconnect.
cycle() {
	local i=$1
	nvme_connect "$ip" "$svcid" "$nqn" || { echo "cycle $i: connect failed"; return 1; }
	read_namespaces || { echo "cycle $i: I/O failed"; nvme_disconnect "$nqn"; return 1; }
	nvme_disconnect "$nqn" || { echo "cycle $i: disconnect failed"; return 1; }
}

cycles() {
	local i
	for ((i = $1; i <= $2; i++)); do
		cycle "$i" || return
	done
}

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev $nd $ip" netdev_dummy "$nd" "$mac" "$ip/24" || tap_bail "cannot create $nd"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $nd" rdma_link_add "$dev" "$nd" ||
	tap_bail "cannot add the link"
tap_wait "$dev ACTIVE" 5 port_state_is "$dev" ACTIVE
kmsg_mark

tap_check "null_blk namespace device (memory-backed, 512 MiB)" nvmet_null_blk rsiwnull0 512 ||
	tap_bail "no null_blk device"
tap_check "brd namespace device (256 MiB)" nvmet_brd 256 || tap_bail "no brd device"
tap_check "nvmet subsystem $nqn: ns 1 /dev/rsiwnull0, ns 2 /dev/ram0" \
	nvmet_subsys "$nqn" /dev/rsiwnull0 /dev/ram0 || tap_bail "cannot set up the subsystem"
tap_check "nvmet-rdma port on $ip:$svcid" nvmet_port 1 "$ip" "$svcid" "$nqn" || tap_bail "cannot add the port"

est0=$(ulp_rsiw_mpa established)
t0=$(date +%s.%N)
tap_check "nvme connect -t rdma -a $ip -s $svcid -n $nqn" nvme_connect "$ip" "$svcid" "$nqn" ||
	tap_bail "cannot connect"
tap_diag "connected in $(elapsed "$t0") s"
check_connected "connected"
if rsiw_is_reference; then
	tap_skip "rsiw's established counter grew" "rsiw's debugfs counters; not the C siw"
else
	est=$(ulp_rsiw_mpa established)
	tap_result "$([ "${est:-0}" -gt "${est0:-0}" ]; echo $?)" "rsiw's established counter grew" \
		"established ${est0:-?} -> ${est:-?}"
fi
names=(null_blk brd)
# check_both_namespaces [WHAT]: a check that the host sees both namespaces
# (in ns), so that the fio checks after it cannot pass by running none.
check_both_namespaces() {
	tap_result "$( ((${#ns[@]} == ${#names[@]})); echo $?)" "${1:+$1: }the host sees both namespaces" \
		"namespaces: ${ns[*]:-none}"
}
mapfile -t ns < <(nvme_namespaces "$nqn")
check_both_namespaces
for i in "${!ns[@]}"; do
	for job in $NVME_FIO; do
		IFS=: read -r rw bs size <<<"$job"
		run_fio "ns $((i + 1)) (${names[$i]:-?})" "${ns[$i]}" "$rw" "$bs" "$size"
	done
done
t0=$(date +%s.%N)
tap_check "nvme disconnect" nvme_disconnect "$nqn"
tap_wait "the QPs of host and target are gone from $dev" 60 ulp_no_qps "$dev"
tap_diag "disconnected, QPs gone in $(elapsed "$t0") s"

# Leaks: the device's resources after the cycles must be as before them, and
# kmemleak must stay quiet. With enough cycles (make check-full), also a
# warm-up cycle, then two halves with a slab snapshot after each; a leak grows
# its cache in both. Each connect makes six QPs (admin and two I/O queues,
# host and target) with their MRs and buffers; a cache must grow by 4 objects
# a cycle in both halves to fail (the kernel's own noise stays below). Not
# counted: vmap_area (freed lazily, in batches).
if ((NVME_CYCLES > 0)); then
	res0=$(ulp_res_summary "$dev")
	half=$((NVME_CYCLES / 2))
	t0=$(date +%s.%N)
	if slab_rate_judged "$half"; then
		tap_check "connect/disconnect warm-up cycle" cycles 0 0
		kmemleak_report "no leak before the measured cycles"
		slab_snapshot "$TEST_TMP/slab0"
		tap_check "connect, read both namespaces, disconnect: cycles 1-$half" cycles 1 "$half"
		wait_for 60 ulp_no_qps "$dev"
		slab_snapshot "$TEST_TMP/slab1"
		tap_check "connect, read both namespaces, disconnect: cycles $((half + 1))-$NVME_CYCLES" \
			cycles $((half + 1)) "$NVME_CYCLES"
		wait_for 60 ulp_no_qps "$dev"
		slab_snapshot "$TEST_TMP/slab2"
		tap_diag "$NVME_CYCLES cycles in $(elapsed "$t0") s"
		grow=$(slab_steady_growth "$TEST_TMP/slab0" "$TEST_TMP/slab1" "$TEST_TMP/slab2" $((half * 4)) |
			grep -vE '^vmap_area ')
		tap_result "$([ -z "$grow" ]; echo $?)" "no slab cache grows by 4 objects a cycle in both halves" "$grow"
		tap_diag "$(slab_steady_growth "$TEST_TMP/slab0" "$TEST_TMP/slab1" "$TEST_TMP/slab2" "$half" |
			sed 's/^/growing by 1 a cycle or more (not failed): /')"
		check_kmemleak "kmemleak: nothing leaked by the cycles"
	else
		# Few cycles: the runner's kmemleak scan after the test sees their leaks.
		tap_check "connect, read both namespaces, disconnect: cycles 1-$NVME_CYCLES" cycles 1 "$NVME_CYCLES"
		wait_for 60 ulp_no_qps "$dev"
		tap_diag "$NVME_CYCLES cycles in $(elapsed "$t0") s"
	fi
	res1=$(ulp_res_summary "$dev")
	tap_result "$([ "$res1" = "$res0" ]; echo $?)" "$dev resources after the cycles are as before them" \
		"before: $res0" "after:  $res1" "$(timeout 20 rdma res show qp link "$dev/1" 2>&1)"
fi

# Shared receive queues: nvmet-rdma with use_srq=1 posts its receives to one
# SRQ per completion vector instead of each queue's RQ. Without SRQs in the
# device (max_srq 0) it falls back to RQs and says so; that is a failure here.
tap_check "remove the port" nvmet_port_del 1 "$nqn"
tap_check "unload nvmet-rdma" timeout 60 modprobe -r nvmet-rdma
tap_check "load nvmet-rdma use_srq=1" ulp_modprobe nvmet-rdma use_srq=1
tap_diag "$dev: $(ibv_devinfo -v -d "$dev" 2>/dev/null | grep -E '^\s+max_srq' | tr -s ' \t' ' ' | tr '\n' ';')"
tap_check "nvmet-rdma port on $ip:$svcid (SRQ)" nvmet_port 1 "$ip" "$svcid" "$nqn"
kmsg_mark
t0=$(date +%s.%N)
if tap_check "SRQ: nvme connect" nvme_connect "$ip" "$svcid" "$nqn"; then
	tap_diag "connected in $(elapsed "$t0") s"
	check_connected "SRQ"
	srqs=$(ulp_res_count "$dev" srq)
	log=$(kmsg_since_mark)
	if [ "${srqs:-0}" -gt 0 ] && ! grep -q 'SRQ requested but not supported' <<<"$log"; then
		tap_ok "SRQ: nvmet-rdma uses shared receive queues on $dev ($srqs)"
	else
		tap_fail "SRQ: nvmet-rdma uses shared receive queues on $dev" \
			"rdma res: $(ulp_res_summary "$dev")" "$(grep -i srq <<<"$log")" \
			"$dev reports no SRQ support or refused ib_create_srq: nvmet-rdma fell back to per-queue RQs"
	fi
	mapfile -t ns < <(nvme_namespaces "$nqn")
	check_both_namespaces SRQ
	for i in "${!ns[@]}"; do
		for job in $NVME_FIO; do
			IFS=: read -r rw bs size <<<"$job"
			run_fio "SRQ: ns $((i + 1)) (${names[$i]:-?})" "${ns[$i]}" "$rw" "$bs" "$size"
		done
	done
	t0=$(date +%s.%N)
	tap_check "SRQ: nvme disconnect" nvme_disconnect "$nqn"
	tdisc=$(elapsed "$t0")
	wait_for 120 ulp_no_qps "$dev"
	tgone=$(elapsed "$t0")
	desc="SRQ: the target's QPs are gone within $NVME_SRQ_DRAIN_MAX s of the disconnect (no ib_drain_qp stall)"
	diag="nvme disconnect took $tdisc s, the last QP went after $tgone s"
	if awk -v t="$tgone" -v m="$NVME_SRQ_DRAIN_MAX" 'BEGIN { exit !(t <= m) }'; then
		tap_ok "$desc"
		tap_diag "$diag"
	elif rsiw_is_reference && [ "${srqs:-0}" -gt 0 ]; then
		# siw_qp_modify() never raises IB_EVENT_QP_LAST_WQE_REACHED, so
		# __ib_drain_srq() waits out its 60 s for each target queue.
		tap_skip "$desc" "the C siw never raises IB_EVENT_QP_LAST_WQE_REACHED: $diag"
	else
		tap_fail "$desc" "$diag" "$(timeout 20 rdma res show qp link "$dev/1" 2>&1)" \
			"$(kmsg_since_mark | grep -iE 'nvmet|drain|srq|blocked' | tail -n 20)"
	fi
	if tap_check "SRQ: connect again" nvme_connect "$ip" "$svcid" "$nqn"; then
		tap_check "SRQ: read both namespaces" read_namespaces
		tap_check "SRQ: disconnect again" nvme_disconnect "$nqn"
		tap_wait "SRQ: QPs gone" 120 ulp_no_qps "$dev"
	fi
fi

# No memory registration on the host: nvme-rdma with register_always=N
# allocates its PD with IB_PD_UNSAFE_GLOBAL_RKEY and hands the target its
# buffers' kernel addresses under the PD's DMA region rkey when a request
# fits one SGE, so the target's RDMA Writes and Reads go through the device's
# DMA MR with remote rights (anchor row 29).
tap_check "unload nvme-rdma" timeout 60 modprobe -r nvme-rdma
tap_check "load nvme-rdma register_always=N" ulp_modprobe nvme-rdma register_always=N
if tap_check "no host MRs: nvme connect" nvme_connect "$ip" "$svcid" "$nqn"; then
	pds=$(timeout 20 rdma res show pd dev "$dev" 2>&1)
	tap_match "no host MRs: a PD on $dev has an unsafe global rkey" "unsafe_global_rkey 0x" "$pds"
	mapfile -t ns < <(nvme_namespaces "$nqn")
	check_both_namespaces "no host MRs"
	for i in "${!ns[@]}"; do
		run_fio "no host MRs: ns $((i + 1)) (${names[$i]:-?})" "${ns[$i]}" randwrite 4k 2m
		run_fio "no host MRs: ns $((i + 1)) (${names[$i]:-?})" "${ns[$i]}" write 64k 8m
	done
	tap_check "no host MRs: nvme disconnect" nvme_disconnect "$nqn"
	tap_wait "no host MRs: QPs gone" 120 ulp_no_qps "$dev"
fi

tap_check "remove the port" nvmet_port_del 1 "$nqn"
tap_check "remove the subsystem" nvmet_subsys_del "$nqn"
# nvmet-rdma's CQs come from the device's CQ pool (ib_cq_pool_get), which
# keeps them until the device goes.
res=$(ulp_res_summary "$dev")
tap_match "no PD, QP, MR, CM id or SRQ left on $dev (pooled CQs stay)" "^pd 0 cq [0-9]+ qp 0 cm_id 0 mr 0 .*srq 0" "$res"
tap_check "undo the setup: null_blk, brd, nvmet and nvme modules" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
