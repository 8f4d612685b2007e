#!/usr/bin/env bash
# make soak: SOAK_SECS (default 1800) of mixed traffic through rsiw while
# network faults cycle, then nothing may be left behind. Not in make check.
#
# Traffic, each a loop in the background for the whole soak:
# - NFS/RDMA: knfsd in the initial namespace on a device over sk0
#   (198.18.24.1), NFSv4.2 mounted from namespace rnsk through a device over
#   sk1 (198.18.24.2), the other end of the veth pair; fio writes 8 MiB
#   (64 KiB blocks, queue depth 4), reads it back, crc32c verified;
# - NVMe-oF/RDMA: nvmet-rdma on a device over the dummy netdev sd0
#   (198.18.25.1, a memory-backed null_blk namespace) and nvme-rdma to it;
#   fio writes 8 MiB of 4 KiB random blocks, reads them back, verified;
# - the test ULP: its server on 198.18.24.1, its client from rnsk: WRITE,
#   READ and SEND of 1 MiB + 1 with the data checked, in turn.
# Faults, SOAK_PHASE_SECS (default 60) each, in turn, SOAK_SECS /
# SOAK_PHASE_SECS phases (a phase may overrun a little):
# netem with delay, jitter, loss, duplication, reordering and corruption at
# once; netem with 5 % loss; TCP resets (ss -K) of the NFS client's and the
# NVMe host's connections every 15 s; sk1 down for 5 s; both veth MTUs at
# 1280; no fault.
# Expected: no fio run fails or reads back wrong data, no ULP run fails (the
# ULP client pauses while sk1 is down: it does not reconnect), the NFS client
# and the NVMe host reconnected after the resets, the mount still uses RDMA.
# Each phase's NFS and NVMe-oF throughput is shown. At the end: all ports
# ACTIVE, the ULPs stop, no QP or CM id left on any device, no socket on the
# ports but TIME-WAIT, no splat, and (the runner's scan) no leak.
# timeout: 3300
# Functions run through tap_check, wait_for and in the background look
# unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
require rdma ip tc ss nsenter fio nvme mount.nfs rpc.nfsd rpc.mountd rpcbind exportfs
# shellcheck source=../ulp/ulp.sh
. "$SELFTESTS/ulp/ulp.sh"
# shellcheck source=../ulp-setup.sh
. "$SELFTESTS/ulp-setup.sh"

SOAK_SECS=${SOAK_SECS:-1800}
SOAK_PHASE_SECS=${SOAK_PHASE_SECS:-60}
((SOAK_SECS >= 60 && SOAK_SECS <= 3000)) || tap_bail "SOAK_SECS=$SOAK_SECS: 60 to 3000 (the test's timeout is 3300 s)"
((SOAK_PHASE_SECS >= 20)) || tap_bail "SOAK_PHASE_SECS=$SOAK_PHASE_SECS: at least 20"
# Every fault at least once: six phases.
((SOAK_SECS >= 6 * SOAK_PHASE_SECS)) ||
	tap_bail "SOAK_SECS=$SOAK_SECS: at least six phases of SOAK_PHASE_SECS=$SOAK_PHASE_SECS"

ns=rnsk a=198.18.24.1 b=198.18.24.2 nvip=198.18.25.1
srv=rsiwk0 cli=rsiwk1 nvdev=rsiwk2 ulp_port=20895 svcid=$NVME_RDMA_PORT
nqn=nqn.2014-08.org.rsiw:selftest-soak
export_dir=/tmp/rsiw-soak-export mnt=/tmp/rsiw-soak-mnt
state=$TEST_TMP/state # the loops' counters and the fault driver's flags
mkdir -p "$state"
loop_pids=()
stop_loops() {
	((${#loop_pids[@]})) || return 0
	touch "$state/stop"
	local p
	for p in "${loop_pids[@]}"; do
		wait "$p" 2>/dev/null
	done
	loop_pids=()
}
trap 'stop_loops; ulp_cleanup; ulp_unload; ip netns del $ns 2>/dev/null; cleanup' EXIT

inns() { ip netns exec "$ns" "$@"; }

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "veth pair sk0 ($a) / sk1 ($b, namespace $ns)" \
	netdev_veth_ns "$ns" sk0 02:52:53:49:57:70 "$a/24" sk1 02:52:53:49:57:71 "$b/24" ||
	tap_bail "cannot create the veth pair"
tap_check "dummy netdev sd0 $nvip" netdev_dummy sd0 02:52:53:49:57:72 "$nvip/24" || tap_bail "no sd0"
tap_check "rdma link add $srv on sk0" rdma_link_add "$srv" sk0 || tap_bail "no $srv"
link_cli() {
	inns rdma link add "$cli" type "$RSIW_LINK_TYPE" netdev sk1 || return
	_links+=("$cli")
}
tap_check "rdma link add $cli on sk1, from $ns" link_cli || tap_bail "no $cli"
tap_check "rdma link add $nvdev on sd0" rdma_link_add "$nvdev" sd0 || tap_bail "no $nvdev"
all_active() {
	local d
	for d in "$srv" "$cli" "$nvdev"; do port_state_is "$d" ACTIVE || return; done
}
tap_wait "$srv, $cli and $nvdev ACTIVE" 5 all_active

kmsg_mark
tap_check "tmpfs to export" nfs_export_tmpfs "$export_dir" 512M || tap_bail "no export"
tap_check "knfsd on rdma port $NFS_RDMA_PORT" nfs_server_start "$export_dir" || tap_bail "knfsd did not start"
NFS_NETNS=$ns tap_check "NFSv4.2 mount of $a from $ns" nfs_mount "$a" "$export_dir" 4.2 "$mnt" ||
	tap_bail "cannot mount"
nb=nullb_soak
tap_check "null_blk device (memory-backed, 128 MiB)" nvmet_null_blk "$nb" 128 || tap_bail "no null_blk"
tap_check "nvmet subsystem on /dev/$nb" nvmet_subsys "$nqn" "/dev/$nb" || tap_bail "no subsystem"
tap_check "nvmet-rdma port on $nvip:$svcid" nvmet_port 1 "$nvip" "$svcid" "$nqn" || tap_bail "no port"
tap_check "nvme connect -t rdma -a $nvip (reconnect every 2 s)" \
	nvme_connect "$nvip" "$svcid" "$nqn" --reconnect-delay=2 --ctrl-loss-tmo=600 || tap_bail "cannot connect"
nvme_dev=$(nvme_namespaces "$nqn" | head -n 1)
[ -n "$nvme_dev" ] || tap_bail "no NVMe namespace"
[ -f "$ULP_KO" ] || tap_bail "$ULP_KO does not exist (make module)"
ulp_insmod || tap_bail "cannot load the ULP"
tap_check "ULP server on $a:$ulp_port" ulp_ctl "server addr=$a port=$ulp_port" || tap_bail "no ULP server"

established() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/cm_established"; }
# The NFS client's transport connects (nfs_mount_connects): the client
# device's counter also counts the ULP's.
nfs_conn0=$(nfs_mount_connects "$mnt") est_nv0=$(established "$nvdev")

# fio_loop NAME FIO-ARGS...: fio runs one after another until the stop flag.
# Each run's result goes to $state/NAME.log: "ok PHASE RATE K|M" (fio's write
# rate in KiB/s or MiB/s) or "fail PHASE STATUS", its output to
# $state/NAME.fail.N when it failed.
fio_loop() {
	local name=$1 n=0 st out bw
	shift
	while [ ! -e "$state/stop" ]; do
		n=$((n + 1))
		out=$(fio --name="$name" "$@" --verify=crc32c --do_verify=1 --verify_fatal=1 \
			--verify_state_save=0 --direct=1 --ioengine=libaio 2>&1)
		st=$?
		if fio_verified "$st" "$out"; then
			bw=$(sed -nE 's/^ +WRITE: bw=([0-9.]+)([KM])iB\/s.*/\1 \2/p' <<<"$out" | head -n 1)
			echo "ok $(cat "$state/phase") $bw" >>"$state/$name.log"
		else
			echo "fail $(cat "$state/phase") $st" >>"$state/$name.log"
			printf '%s\n' "$out" >"$state/$name.fail.$n"
		fi
	done
}
# ulp_loop: the test ULP's client from rnsk, one data test after another,
# waiting while the pause flag is set (it is "busy" while a test runs).
ulp_loop() {
	local t i=0 out st
	local tests=("write size=1048577 sge=2" "read size=1048577" "send size=1048577 sge=2")
	while [ ! -e "$state/stop" ]; do
		# Busy first, then the pause flag: ulp_pause sets the flag, then
		# waits for no busy, so no test starts after it returns.
		touch "$state/busy"
		if [ -e "$state/pause" ]; then
			rm -f "$state/busy"
			sleep 0.5
			continue
		fi
		t=${tests[$((i % ${#tests[@]}))]}
		i=$((i + 1))
		ulp_ctl clear
		out=$(ULP_NETNS=$ns ulp_ctl "client addr=$a port=$ulp_port test=$t" 2>&1)
		st=$?
		if [ "$st" = 0 ] && ! grep -q '^not ok' "$ULP/result"; then
			echo "ok $(cat "$state/phase") ${t%% *}" >>"$state/ulp.log"
		else
			{
				echo "fail $(cat "$state/phase") $t: status $st $out"
				grep '^not ok' "$ULP/result"
			} >>"$state/ulp.log"
		fi
		rm -f "$state/busy"
	done
}
# ulp_pause / ulp_resume: hold the ULP loop between tests.
ulp_pause() {
	touch "$state/pause"
	wait_for 120 eval "[ ! -e $state/busy ]"
}
ulp_resume() { rm -f "$state/pause"; }

echo start >"$state/phase"
fio_loop nfs --filename="$mnt/soak" --rw=write --bs=64k --size=8m --iodepth=4 --unlink=1 &
loop_pids+=($!)
fio_loop nvme --filename="$nvme_dev" --rw=randwrite --bs=4k --size=8m --iodepth=8 &
loop_pids+=($!)
ulp_loop &
loop_pids+=($!)

# The faults. Each function applies its fault for the phase and undoes it.
netem_phase() { # NETEM...
	tc qdisc add dev sk0 root netem "$@" && inns tc qdisc add dev sk1 root netem "$@" || return
	sleep "$SOAK_PHASE_SECS"
	tc qdisc del dev sk0 root && inns tc qdisc del dev sk1 root
}
reset_phase() {
	local end=$((SECONDS + SOAK_PHASE_SECS)) n=0
	while ((SECONDS < end)); do
		sleep 15
		inns ss -K -tnH state established "( dport = :$NFS_RDMA_PORT )" >/dev/null && n=$((n + 1))
		ss -K -tnH state established "( dport = :$svcid )" >/dev/null
	done
	((n > 0))
}
link_down_phase() {
	ulp_pause || return
	inns ip link set sk1 down && sleep 5 && inns ip link set sk1 up || return
	wait_for 30 eval "port_state_is $cli ACTIVE" || return
	ulp_resume
	sleep "$((SOAK_PHASE_SECS - 5))"
}
mtu_phase() {
	ip link set sk0 mtu 1280 && inns ip link set sk1 mtu 1280 || return
	sleep "$SOAK_PHASE_SECS"
	ip link set sk0 mtu 1500 && inns ip link set sk1 mtu 1500
}
calm_phase() { sleep "$SOAK_PHASE_SECS"; }
phases=("netem-mixed netem_phase delay 10ms 5ms loss 1% duplicate 1% reorder 25% corrupt 0.1%"
	"netem-loss5 netem_phase loss 5%"
	"resets reset_phase"
	"link-down link_down_phase"
	"mtu1280 mtu_phase"
	"calm calm_phase")
modprobe sch_netem 2>/dev/null
# counters DEV: the NFS client's connects and DEV's connection and CRC
# counters, for the phase diagnostics.
counters() {
	local d=/sys/class/infiniband/$1/ports/1/hw_counters c out
	out="nfs_connects $(nfs_mount_connects "$mnt") "
	for c in cm_established rx_crc_errors tx_terminate_llp rx_terminate_llp; do
		out+="$c $(cat "$d/$c") "
	done
	echo "$out"
}
t0=$SECONDS i=0 n_phases=$((SOAK_SECS / SOAK_PHASE_SECS))
declare -A ran
while ((i < n_phases)); do
	read -ra p <<<"${phases[$((i % ${#phases[@]}))]}"
	i=$((i + 1))
	echo "${p[0]}" >"$state/phase"
	before=$(counters "$cli")
	if ! "${p[@]:1}"; then
		tap_fail "phase $i (${p[0]}) at $((SECONDS - t0)) s: the fault was applied and undone" \
			"$(ip -br link show sk0; inns ip -br link show sk1; tc qdisc show dev sk0)"
		break
	fi
	tap_diag "phase $i (${p[0]}), $((SECONDS - t0)) s in: $cli's counters $before-> $(counters "$cli")"
	ran[${p[0]}]=$((${ran[${p[0]}]:-0} + 1))
done
echo end >"$state/phase"
ulp_resume
tap_diag "$i phases in $((SECONDS - t0)) s: $(for k in "${!ran[@]}"; do printf '%s x%s ' "$k" "${ran[$k]}"; done)"
stop_loops
tap_result "$( ((${#ran[@]} == ${#phases[@]})); echo $?)" "every kind of fault ran ($i phases)"

# results NAME WHAT: one check that every run of loop NAME passed, with its
# count, and its throughput per phase as diagnostics.
results() {
	local log=$state/$1.log ok fail
	ok=$(grep -c '^ok ' "$log" 2>/dev/null)
	fail=$(grep -c '^fail ' "$log" 2>/dev/null)
	tap_result "$( ((${ok:-0} >= i && ${fail:-0} == 0)); echo $?)" \
		"$2: ${ok:-0} runs passed, ${fail:-0} failed (at least one per phase expected)" \
		"$(grep '^fail' "$log" | head -n 5; for f in "$state/$1".fail.*; do [ -f "$f" ] && tail -n 15 "$f"; done | head -n 40)"
	[ "$1" = ulp ] && return
	tap_diag "$2 write throughput by phase: $(awk '$1 == "ok" && NF >= 4 {
		v = ($4 == "M") ? $3 * 1024 : $3; s[$2] += v; n[$2]++ }
		END { for (p in s) printf "%s %.0f KiB/s; ", p, s[p] / n[p] }' "$log")"
}
results nfs "NFS fio (8 MiB, 64 KiB, verified)"
results nvme "NVMe-oF fio (8 MiB, 4 KiB random, verified)"
results ulp "test ULP WRITE/READ/SEND of 1 MiB + 1 from $ns"
nfs_conn1=$(nfs_mount_connects "$mnt") est_nv1=$(established "$nvdev")
tap_result "$( ((${nfs_conn1:-0} > ${nfs_conn0:-0} + 1)); echo $?)" \
	"the NFS client reconnected after the resets (its transport's connects ${nfs_conn0:-?} -> ${nfs_conn1:-?})"
tap_result "$( ((est_nv1 > est_nv0 + 2)); echo $?)" \
	"the NVMe host reconnected after the resets (cm_established of $nvdev $est_nv0 -> $est_nv1)"
xprt=$(nfs_mount_xprt "$mnt")
tap_result "$([ "$xprt" = rdma ]; echo $?)" "the mount still uses RDMA (xprt $xprt)"

tap_wait "$srv, $cli and $nvdev ACTIVE" 10 all_active
tap_check "stop the ULP server" ulp_ctl "stop"
tap_check "unload the ULP" ulp_unload
tap_check "NVMe: disconnect" nvme_disconnect "$nqn"
tap_check "umount" nfs_umount "$mnt"
tap_check "stop the NFS server" nfs_server_stop
tap_check "remove the nvmet port" nvmet_port_del 1 "$nqn"
for d in "$srv" "$cli" "$nvdev"; do
	tap_wait "no QP or CM id left on $d" 30 eval "[ \"\$(ulp_res_count $d qp)\" = 0 ] && [ \"\$(ulp_res_count $d cm_id)\" = 0 ]"
done
# Sockets the ULPs closed may still finish their close (LAST-ACK) for a while.
left_sockets() {
	(ulp_tcp_sockets "$NFS_RDMA_PORT"; ulp_tcp_sockets "$svcid"; ulp_tcp_sockets "$ulp_port"
		inns ss -tanH state all "( sport = :$NFS_RDMA_PORT or dport = :$NFS_RDMA_PORT or dport = :$ulp_port )" |
			awk '$1 != "TIME-WAIT"') 2>&1
}
if wait_for 60 eval '[ -z "$(left_sockets)" ]'; then
	tap_ok "no socket on the NFS, NVMe or ULP port in either namespace but TIME-WAIT (after $((WAITED_MS / 1000)) s)"
else
	# With their timers, retransmission counts and inodes (ss -o -i -e; inode 0:
	# rsiw released the socket and TCP alone finishes it), both namespaces' TCP
	# abort counters, and whether TCP ends them within 4 more minutes.
	ports="( sport = :$NFS_RDMA_PORT or sport = :$svcid or sport = :$ulp_port or dport = :$NFS_RDMA_PORT or dport = :$svcid or dport = :$ulp_port )"
	aborts='TcpExtTCPAbortOnData|TcpExtTCPAbortOnClose|TcpExtTCPAbortOnTimeout|TcpExtTCPAbortOnLinger|TcpExtTCPAbortFailed|TcpOutRsts'
	tap_fail "no socket on the NFS, NVMe or ULP port in either namespace but TIME-WAIT (within 60 s)" \
		"$(left_sockets)" \
		"initial namespace:" "$(ss -taoenipH state all "$ports" | grep -v TIME-WAIT | head -n 40)" \
		"$(grep TCP: /proc/net/sockstat)" "$(nstat -asz 2>/dev/null | grep -E "$aborts")" \
		"namespace $ns:" "$(inns ss -taoenipH state all "$ports" | head -n 40)" \
		"$(inns grep TCP: /proc/net/sockstat)" "$(inns nstat -asz 2>/dev/null | grep -E "$aborts")"
	if wait_for 240 eval '[ -z "$(left_sockets)" ]'; then
		tap_diag "TCP ended them $((WAITED_MS / 1000)) s later"
	else
		tap_diag "still there 4 minutes later:" "$(left_sockets)"
	fi
fi
tap_check "undo the setup: export, null_blk, nvmet, NFS and NVMe modules" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
