#!/usr/bin/env bash
# The peer dies mid-transfer: VM a runs rsiw (rsiw0, 198.18.0.1), VM b the C
# siw (siw0, 198.18.0.2), and the runner kills VM b's qemu (SIGKILL) while the
# kernel ULPs move data both ways. No FIN, no RST: from a's side the link just
# goes silent, as when a host loses power.
# kills: b
# timeout: 420
# tier: full (about 180 s on two TCG guests, which make check's budget does not
# hold; make pair-check TESTS=peer-death runs it alone. In make check,
# iser resets a live connection under I/O and ulp-removal removes the device
# under the ULPs; nothing there goes silent)
#
# Before the kill, each VM serves an NVMe-oF subsystem (a memory-backed
# null_blk) to the other and writes the other's namespace with fio (crc32c
# verified as it goes); b also writes an NFSv4.2 mount served by rsiw on a.
# Then b asks to be killed. On a, with rsiw in every role:
#   - nvme-rdma host: its keep-alive fails, it tries to reconnect to the dead
#     target twice (ctrl_loss_tmo 4 s over reconnect_delay 2 s): connects
#     that never complete, which rsiw ends after its connect_timeout_ms (set
#     to 3 s here) with ETIMEDOUT (nvme-rdma itself waits for the CM without a limit); then
#     it gives up: fio ends with an I/O error, never a verify error, and the
#     controller is deleted;
#   - nvmet-rdma target: the dead host's keep-alive expires and nvmet drops
#     its controller and queues;
#   - NFS server: knfsd stops although its client's connection is silent with
#     RDMA work in flight (svcrdma drains the QPs: rsiw must flush them);
#   - then no QP and no connected CM id is left on rsiw0, and no TCP socket to
#     the dead peer but those the kernel's TCP finishes alone (FIN-WAIT, no
#     owner); rsiw still serves a new NVMe-oF connection (to itself) with
#     verified data; the device is deleted and the module unloaded.
# The killed half is judged on its checks before the kill and its console.
# Helpers run through tap_check and the EXIT trap:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
case ${PAIR_ROLE:-} in
a) RSIW_MODULE=rsiw RSIW_LINK_TYPE=rsiw dev=rsiw0 ;;
b) RSIW_MODULE=siw RSIW_LINK_TYPE=siw dev=siw0 ;;
esac
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=../ulp-setup.sh
. "$SELFTESTS/ulp-setup.sh"
PAIR_WAIT=180
# shellcheck source=pair.sh
. "$SELFTESTS/pair/pair.sh"
require rdma timeout fio nvme mount.nfs rpc.nfsd rpc.mountd rpcbind exportfs ss

# How long the host retries a dead target (s): the NVMe keep-alive (5 s)
# finds it dead, then it reconnects every 2 s, ctrl_loss_tmo / 2 times.
CTRL_LOSS_TMO=4
nqn_base=nqn.2014-08.org.rsiw:pair-peer-death
mnt=$TEST_TMP/mnt

on_exit() {
	stop_fio
	[ -z "${nfs_fio_pid:-}" ] || { kill -KILL "$nfs_fio_pid" && wait "$nfs_fio_pid"; } 2>/dev/null
	ulp_cleanup
	pair_exit
	cleanup
}
trap on_exit EXIT

# fio_start OUT FILE: fio writing FILE in the background (fio_pid, its output
# in OUT) until stopped or an error: 16 KiB random writes, each block's crc32c
# checked soon after (verify_backlog).
fio_start() {
	fio --name=peer-death --filename="$2" --rw=randwrite --bs=16k --size=8m --direct=1 \
		--ioengine=libaio --iodepth=8 --time_based --runtime=600 --verify=crc32c \
		--verify_backlog=64 --verify_fatal=1 --verify_state_save=0 >"$1" 2>&1 &
	fio_pid=$!
}

# writes_flowing BDEV BASE: fio runs, BDEV completed 8 more writes than BASE
# and has I/O in flight (a few writes: two TCG guests move little).
writes_flowing() {
	kill -0 "$fio_pid" 2>/dev/null && ulp_block_flowing "$1" "$2" 8
}

# nfs_writes_flowing BASE: the NFS fio runs and the mount sent 8 more WRITEs than BASE.
nfs_writes_flowing() {
	kill -0 "$nfs_fio_pid" 2>/dev/null && (($(nfs_mount_ops "$mnt" WRITE) >= $1 + 8))
}

# nvme_rdma_target: nvmet offering a null_blk on this VM's address.
nvme_rdma_target() {
	nvmet_null_blk pdnull 64 && nvmet_subsys "$nqn_base-$PAIR_ROLE" /dev/pdnull &&
		nvmet_port 1 "$PAIR_ADDR" "$NVME_RDMA_PORT" "$nqn_base-$PAIR_ROLE"
}

# connected_cm_ids: $dev's CM ids that are not listeners, one a line.
# Status 1 when rdma cannot tell.
connected_cm_ids() {
	local o
	o=$(timeout 20 rdma res show cm_id link "$dev/1") || return 1
	grep -v ' state LISTEN ' <<<"$o"
	return 0
}

# no_conns [MODULE]: $dev has no CM id but listeners (of the kernel module
# MODULE, if given), and rdma could tell.
no_conns() {
	local o
	o=$(connected_cm_ids) || return 1
	if [ -n "${1:-}" ]; then
		! grep -q "comm \\[$1\\]" <<<"$o"
	else
		[ -z "$o" ]
	fi
}

# has_conns MODULE: $dev has a CM id, not a listener, of the kernel module
# MODULE (what no_conns MODULE looks for, seen before it must be gone).
has_conns() {
	local o
	o=$(connected_cm_ids) && grep -q "comm \\[$1\\]" <<<"$o"
}

# res_none KIND...: $dev has none of each KIND (qp, mr, cm_id).
res_none() {
	local k n
	for k; do
		n=$(ulp_res_count "$dev" "$k")
		[ "$n" = 0 ] || return 1
	done
}

# peer_sockets: TCP sockets to the dead peer that a process or the driver
# still owns: anything but the kernel's orphans finishing a close
# (FIN-WAIT-1/2, CLOSING, LAST-ACK, TIME-WAIT).
peer_sockets() {
	ss -tanH state all "( dst $PAIR_PEER_ADDR )" 2>/dev/null |
		awk '$1 !~ /^(FIN-WAIT-1|FIN-WAIT-2|CLOSING|LAST-ACK|TIME-WAIT)$/'
}

# ---------------------------------------------------------------- both

# rsiw gives up a TCP connect after 3 s instead of 10: the host's reconnects
# to the dead target end sooner (the C siw has no such knob).
if [ "$PAIR_ROLE" = a ]; then
	tap_check "load rsiw connect_timeout_ms=3000" rsiw_load connect_timeout_ms=3000 ||
		tap_bail "cannot load the driver"
else
	tap_check "load siw" rsiw_load || tap_bail "cannot load the driver"
fi
tap_check "link up: NIC $PAIR_MAC with $PAIR_ADDR/24" pair_link_up || tap_bail "no link"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $PAIR_NETDEV" rdma_link_add "$dev" "$PAIR_NETDEV" ||
	tap_bail "cannot add the link"
tap_wait "$dev is ACTIVE" 10 port_state_is "$dev" ACTIVE
kmsg_mark
pair_sync ready || tap_bail "$PAIR_MSG"
tap_wait "the peer $PAIR_PEER_ADDR answers on the link" 10 pair_peer_reachable

tap_check "nvmet: a 64 MiB null_blk namespace offered on $PAIR_ADDR:$NVME_RDMA_PORT" \
	nvme_rdma_target || tap_bail "no NVMe-oF target"
if [ "$PAIR_ROLE" = a ]; then
	tap_check "knfsd exporting a tmpfs on rdma port $NFS_RDMA_PORT" \
		eval 'nfs_export_tmpfs "$TEST_TMP/export" 256M && nfs_server_start "$TEST_TMP/export"' ||
		tap_bail "no NFS server"
fi
pair_sync serving || tap_bail "$PAIR_MSG"

if [ "$PAIR_ROLE" = b ]; then
	# The NFS client, first: a mounts nothing meanwhile, but connects its NVMe-oF host.
	if tap_check "mount -o vers=4.2,proto=rdma,soft $PAIR_PEER_ADDR" \
		nfs_mount "$PAIR_PEER_ADDR" / 4.2 "$mnt" "" soft,timeo=100,retrans=2; then
		nfs_base=$(nfs_mount_ops "$mnt" WRITE)
		fio_start "$TEST_TMP/fio-nfs" "$mnt/f"
		nfs_fio_pid=$fio_pid
	fi
fi
tap_check "nvme connect to $PAIR_PEER_ADDR (keep-alive 5 s, ctrl_loss_tmo $CTRL_LOSS_TMO s)" \
	nvme_connect "$PAIR_PEER_ADDR" "$NVME_RDMA_PORT" "$nqn_base-$PAIR_PEER" --keep-alive-tmo=5 \
	--ctrl-loss-tmo="$CTRL_LOSS_TMO" --reconnect-delay=2 || tap_bail "no NVMe-oF host"
ns=$(nvme_namespaces "$nqn_base-$PAIR_PEER" | head -n 1)
bdev=${ns#/dev/}
base=$(ulp_block_writes "$bdev")
fio_start "$TEST_TMP/fio" "$ns"
tap_wait "fio writes $ns over the peer's NVMe-oF target" 60 writes_flowing "$bdev" "$base" ||
	tap_diag "$(cat "$TEST_TMP/fio")"

if [ "$PAIR_ROLE" = b ]; then
	if [ -n "${nfs_fio_pid:-}" ]; then
		tap_wait "fio writes the NFS mount" 60 nfs_writes_flowing "${nfs_base:-0}" ||
			tap_diag "$(cat "$TEST_TMP/fio-nfs")"
	fi
	pair_sync flowing || tap_bail "$PAIR_MSG"
	# a checked its QPs; both fios still run.
	pair_wait checked || tap_bail "$PAIR_MSG"
	tap_check "both fios still run" kill -0 "$fio_pid" "${nfs_fio_pid:-}"
	# The console may not carry every line of the log (its level, its lag) when the VM
	# dies: the runner judges this copy too.
	check_no_splat "no kernel splat before the kill"
	kmsg_since_mark >"${TEST_OUT:-$TEST_TMP}/dmesg-before-kill.txt"
	sync
	pair_post kill-me
	sleep 120
	tap_fail "the runner killed this VM within 120 s of kill-me"
	tap_done
fi

# ---------------------------------------------------------------- a: the survivor

pair_sync flowing || tap_bail "$PAIR_MSG"
# Host: admin + 1 I/O queue; target: the same from b; NFS: 1 (or more).
qps=$(timeout 20 rdma res show qp link "$dev/1" 2>&1)
n=$(grep -c " state RTS " <<<"$qps")
tap_result "$((n >= 5 ? 0 : 1))" "$n QPs in RTS on $dev: NVMe-oF host, target and NFS server" "$qps"
tap_check "nvmet's connections show as CM ids of nvmet_rdma" has_conns nvmet_rdma ||
	tap_diag "$(connected_cm_ids 2>&1)"
pair_post checked
tap_check "VM b is killed mid-transfer" pair_wait killed 120
tap_diag "$PAIR_MSG"
t0=$SECONDS

fio_fails "host: fio on the dead target's namespace ends with an I/O error" "$TEST_TMP/fio" 150
tap_diag "fio ended $((SECONDS - t0)) s after the kill"
tap_no_match "host: no verify error before the failure" 'verify.*fail|bad magic|crc32c.*wanted' \
	"$(cat "$TEST_TMP/fio")"
tap_wait "host: the controller of the dead target is deleted" 60 \
	eval '[ -z "$(nvme_ctrls "$nqn_base-b")" ]' && ulp_undo_drop "nvme:$nqn_base-b"
tap_diag "controller gone $((SECONDS - t0)) s after the kill"
tap_wait "target: nvmet drops the dead host's queues (keep-alive)" 60 no_conns nvmet_rdma ||
	tap_diag "$(connected_cm_ids 2>&1)"
tap_diag "nvmet's connections gone $((SECONDS - t0)) s after the kill"

tap_check "NFS server: knfsd stops with its client's connection silent" nfs_server_stop
tap_check "NFS server: unmount the export" ulp_undo "tmpfs:$TEST_TMP/export"
if wait_for 60 eval '[ "$(ulp_res_count "$dev" qp)" = 0 ] && no_conns'; then
	tap_ok "no QP and no connected CM id left on $dev"
	tap_diag "$(ulp_res_summary "$dev")"
else
	tap_fail "no QP and no connected CM id left on $dev" "$(ulp_res_summary "$dev")" \
		"$(timeout 20 rdma res show qp link "$dev/1" 2>&1)" "$(connected_cm_ids 2>&1)"
fi
tap_wait "no TCP socket to $PAIR_PEER_ADDR but the kernel's closing orphans" 30 \
	eval '[ -z "$(peer_sockets)" ]' || tap_diag "$(peer_sockets)"
tap_diag "$(ss -tanH "( dst $PAIR_PEER_ADDR )" 2>&1)"

# rsiw still serves: its own target, over its own device.
tap_check "nvme connect to this VM's own target ($PAIR_ADDR)" \
	nvme_connect "$PAIR_ADDR" "$NVME_RDMA_PORT" "$nqn_base-a"
ns=$(nvme_namespaces "$nqn_base-a" | head -n 1)
fio_write_verify "fio 1m x 8m to $ns, read back, crc32c verified" "${ns:-/nonexistent}" 1m 8m --unlink=0
tap_check "nvme disconnect" nvme_disconnect "$nqn_base-a"
tap_check "nvmet: remove the port and the subsystem" \
	eval 'nvmet_port_del 1 "$nqn_base-a" && nvmet_subsys_del "$nqn_base-a"'
check_no_splat "no kernel splat"
tap_check "undo the setup: nvmet, nvme, null_blk, NFS modules" ulp_cleanup
tap_wait "no QP, MR or CM id left on $dev" 30 res_none qp mr cm_id || tap_diag "$(ulp_res_summary "$dev")"
tap_check "rdma link delete $dev" rdma_link_del "$dev" && _links=()
tap_check "unload rsiw" rsiw_unload && _loaded=0
tap_done
