#!/usr/bin/env bash
# NFS/RDMA through network faults: knfsd in the initial namespace on a device
# over fv0 (198.18.22.1), the client in namespace rnsf on a device over fv1
# (198.18.22.2), the two ends of a veth pair, so that every packet crosses the
# veth and can be shaped there. NFSv4.2 is mounted from rnsf (the client's
# connection is made there). Each case runs fio (FAULT_MB MiB of 64 KiB writes
# at queue depth 4, then read back, crc32c verified) through one fault:
# - netem on both veth ends, one case per entry of NFS_FAULT_NETEM
#   (';'-separated; make check runs one case with delay, jitter, loss,
#   duplication, reordering and corruption at once, make check-full each
#   alone);
# - the client's TCP connection reset mid-transfer (ss -K in rnsf: RST, the
#   QP goes to error, RPC/RDMA reconnects: the client device counts another
#   connection established);
# - the client's netdev down for 5 s mid-transfer, then up;
# - the MTU of both ends dropped to 1280 mid-transfer (and back after).
# Expected in each: fio exits 0 with no verify error (the ULP finishes, after
# reconnecting where the connection was lost), and the mount still uses RDMA.
# Each case's throughput is shown. At the end: both ports ACTIVE, umount, no
# QP or CM id left on either device, no socket on the NFS port in either
# namespace but TIME-WAIT, no splat, no leak.
# timeout: 1500
# tier: full (make soak puts NFS/RDMA through the same faults, netem, resets,
# link down and MTU changes, for 30 minutes; in make check, netns runs the test
# ULP through netem across namespaces)
# Functions run through tap_check look unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma ip tc ss nsenter fio
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"

ns=rnsf a=198.18.22.1 b=198.18.22.2 srv=rsiwf0 cli=rsiwf1
export_dir=/tmp/rsiw-nfs-faults mnt=/tmp/rsiw-nfs-faults-mnt
FAULT_MB=${FAULT_MB:-8}
NFS_FAULT_NETEM=${NFS_FAULT_NETEM:-delay 10ms 5ms loss 1% duplicate 1% reorder 25% corrupt 0.1%}
trap 'stop_fio; ulp_cleanup; ip netns del $ns 2>/dev/null; cleanup' EXIT

inns() { ip netns exec "$ns" "$@"; }

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "veth pair fv0 ($a) / fv1 ($b, namespace $ns)" \
	netdev_veth_ns "$ns" fv0 02:52:53:49:57:50 "$a/24" fv1 02:52:53:49:57:51 "$b/24" ||
	tap_bail "cannot create the veth pair"
tap_check "rdma link add $srv on fv0" rdma_link_add "$srv" fv0 || tap_bail "no $srv"
link_cli() {
	inns rdma link add "$cli" type "$RSIW_LINK_TYPE" netdev fv1 || return
	_links+=("$cli")
}
tap_check "rdma link add $cli on fv1, from $ns" link_cli || tap_bail "no $cli"
tap_wait "$srv and $cli ACTIVE" 5 eval "port_state_is $srv ACTIVE && port_state_is $cli ACTIVE"

kmsg_mark
tap_check "tmpfs to export" nfs_export_tmpfs "$export_dir" 512M || tap_bail "no export"
tap_check "knfsd on rdma port $NFS_RDMA_PORT" nfs_server_start "$export_dir" || tap_bail "knfsd did not start"
NFS_NETNS=$ns tap_check "NFSv4.2 mount of $a from $ns" nfs_mount "$a" "$export_dir" 4.2 "$mnt" ||
	tap_bail "cannot mount"
xprt=$(nfs_mount_xprt "$mnt")
tap_result "$([ "$xprt" = rdma ]; echo $?)" "the mount uses RDMA (xprt $xprt)"
# The client's QP is on the device in its namespace, the server's on fv0's.
qps_on() { [ "$(ulp_res_count "$1" qp)" -ge 1 ]; }
tap_wait "client QP on $cli, server QP on $srv" 20 eval "qps_on $cli && qps_on $srv"

# start_fio CASE: fio in the background: write, then read back and verify.
start_fio() {
	fio --name="$1" --filename="$mnt/$1" --rw=write --bs=64k --size="${FAULT_MB}m" --direct=1 \
		--ioengine=libaio --iodepth=4 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 --unlink=1 >"$TEST_TMP/fio" 2>&1 &
	fio_pid=$!
}
# mid_transfer WHAT: 1 s into fio's run (its write and read back take several
# seconds), one check that it still runs, so that the fault comes under I/O.
mid_transfer() {
	sleep 1
	tap_result "$(kill -0 "$fio_pid" 2>/dev/null; echo $?)" "$1: fio still runs when the fault comes" \
		"$(tail -n 5 "$TEST_TMP/fio")"
}
# end_fio DESC: wait for fio (at most 600 s); one check for its result.
end_fio() {
	local st out
	if ! wait_for 600 eval "! kill -0 $fio_pid 2>/dev/null"; then
		tap_fail "$1: fio writes ${FAULT_MB} MiB, reads it back, crc32c verified" "fio still runs after 600 s" \
			"$(tail -n 5 "$TEST_TMP/fio")"
		stop_fio
		return 1
	fi
	wait "$fio_pid"
	st=$?
	fio_pid=
	out=$(cat "$TEST_TMP/fio")
	if fio_verified "$st" "$out"; then
		tap_ok "$1: fio writes ${FAULT_MB} MiB, reads it back, crc32c verified"
		tap_diag "$1: $(grep -E '^ +(READ|WRITE): ' <<<"$out" | sed -E 's/^ +//; s/ \(.*//' | paste -sd ';')"
	else
		tap_fail "$1: fio writes ${FAULT_MB} MiB, reads it back, crc32c verified" "exit status $st" \
			"$(tail -n 30 <<<"$out")"
	fi
	xprt=$(nfs_mount_xprt "$mnt")
	tap_result "$([ "$xprt" = rdma ]; echo $?)" "$1: the mount still uses RDMA (xprt $xprt)"
}

start_fio baseline
end_fio "no fault"

# netem: the whole transfer shaped, both directions.
IFS=';' read -ra netems <<<"$NFS_FAULT_NETEM"
modprobe sch_netem 2>/dev/null
for n in "${netems[@]}"; do
	# shellcheck disable=SC2086 # netem's words
	if ! tap_check "netem on fv0 and fv1: $n" eval "tc qdisc add dev fv0 root netem $n &&
		inns tc qdisc add dev fv1 root netem $n"; then
		tc qdisc del dev fv0 root 2>/dev/null
		continue
	fi
	start_fio netem
	end_fio "netem $n"
	tap_diag "netem $n: fv0: $(tc -s qdisc show dev fv0 | grep -o 'Sent.*)'); fv1: $(inns tc -s qdisc show dev fv1 | grep -o 'Sent.*)')"
	tap_check "netem off" eval "tc qdisc del dev fv0 root && inns tc qdisc del dev fv1 root"
done

# A TCP reset of the client's connection mid-transfer.
conns() { inns ss -tnH state established "( dport = :$NFS_RDMA_PORT )"; }
established() { # the client device's count of connections established
	rsiw_is_reference || cat "/sys/class/infiniband/$cli/ports/1/hw_counters/cm_established"
}
est0=$(established)
start_fio reset
if mid_transfer reset; then
	open=$(conns | wc -l)
	tap_check "reset: ss -K kills the client's connection ($open open)" \
		inns ss -K -tnH state established "( dport = :$NFS_RDMA_PORT )"
fi
end_fio "TCP reset"
if rsiw_is_reference; then
	tap_skip "reset: the client connected again" "rsiw's own counter (cm_established)"
else
	est1=$(established)
	tap_result "$( ((${est1:-0} > ${est0:-0})); echo $?)" \
		"reset: the client connected again (cm_established of $cli ${est0:-?} -> ${est1:-?})" "$(conns)"
fi

# The client's netdev down for 5 s.
start_fio down
if mid_transfer "link down"; then
	tap_check "link down: fv1 down for 5 s, then up" eval 'inns ip link set fv1 down && sleep 5 && inns ip link set fv1 up'
fi
end_fio "fv1 down 5 s"

# The MTU of both ends lowered under traffic.
start_fio mtu
if mid_transfer MTU; then
	tap_check "MTU: fv0 and fv1 to 1280 under traffic" eval 'ip link set fv0 mtu 1280 && inns ip link set fv1 mtu 1280'
fi
end_fio "MTU 1500 to 1280"
tap_check "MTU back to 1500" eval 'ip link set fv0 mtu 1500 && inns ip link set fv1 mtu 1500'

tap_wait "$srv and $cli ACTIVE" 10 eval "port_state_is $srv ACTIVE && port_state_is $cli ACTIVE"
tap_check "umount" nfs_umount "$mnt"
tap_check "stop the NFS server" nfs_server_stop
for d in "$srv" "$cli"; do
	tap_wait "no QP or CM id left on $d" 30 eval "[ \"\$(ulp_res_count $d qp)\" = 0 ] && [ \"\$(ulp_res_count $d cm_id)\" = 0 ]"
done
left=$( (ulp_tcp_sockets "$NFS_RDMA_PORT"; inns ss -tanH state all "( sport = :$NFS_RDMA_PORT or dport = :$NFS_RDMA_PORT )" |
	awk '$1 != "TIME-WAIT"') 2>&1)
tap_result "$([ -z "$left" ]; echo $?)" "no socket on port $NFS_RDMA_PORT in either namespace but TIME-WAIT" "$left"
tap_check "undo the setup: export, NFS modules" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
