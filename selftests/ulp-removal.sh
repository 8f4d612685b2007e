#!/usr/bin/env bash
# Removing the RDMA device while kernel ULPs move data over it, in this VM.
# NVMe-oF (nvmet-rdma target and nvme-rdma host on 198.18.0.1, a dummy netdev
# with the device on it, a null_blk namespace) with fio writing 64 KiB blocks
# at queue depth 16: first `rdma link delete`, then `rmmod` of the driver.
# Then, for the ULPs REMOVAL_ULPS names (make check: none; make check-full:
# nfs iser smb), NFS over RDMA (knfsd on rdma port 20049 and an NFSv3
# proto=rdma mount) with fio writing through it, and `rdma link delete`. Then
# iSER (the LIO target and an open-iscsi session, replacement timeout 5 s)
# with fio writing to the disk, and `rdma link delete`. Each removal must
# return within REMOVAL_MAX seconds, with the ULPs letting go of the device:
# the NVMe host deletes its controller and the iSER session fails, and fio
# fails with an I/O error instead of hanging; the NFS writer ends or can be
# killed, the mount can be forced off and knfsd stops; the iSER session logs
# out and the target clears. Nothing of the device may stay behind (rdma res,
# CM ids, the connections' TCP sockets), and rsiw logs the removal with
# nothing still counted. Then SMB Direct (ksmbd and a cifs mount) with fio
# writing 1 KiB blocks through it (larger writes hold MRs, and then cifs 6.12
# blocks the removal: see testing.rst), and `rdma link delete`: fio fails with
# an I/O error, the share unmounts and ksmbd stops. After each removal the
# device is added again and a new NVMe connection writes and verifies data.
# Last, the test ULP's server listening on the device (with a shared receive
# queue) and `rdma link delete`.
# timeout: 900
# Functions run through tap_check and wait_for look unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma nvme fio ss mount.nfs rpc.nfsd rpc.mountd rpcbind exportfs \
	iscsiadm iscsid nsenter mount.cifs ksmbd.mountd ksmbd.adduser ksmbd.control
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"
# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"
trap 'ulp_unload; ulp_cleanup; cleanup' EXIT

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:23 ip=198.18.0.1 svcid=$NVME_RDMA_PORT ulp_port=20899
nqn=nqn.2014-08.org.rsiw:selftest-removal
iqn=iqn.2003-01.org.rsiw:selftest-removal
share=rsiw
# How long a removal may take, and a writer may go on after it.
REMOVAL_MAX=${REMOVAL_MAX:-60}
WRITER_MAX=${WRITER_MAX:-60}
# The NFS version of the NFS case. NFSv4.x keeps its client (and with it the
# nfsv4 and rpcrdma modules) after the umount, for minutes, while it tries to
# end its session with a server it cannot reach.
NFS_VERS=${NFS_VERS:-3}
# The ULPs whose removal cases run after NVMe-oF's: any of nfs, iser and smb
# (make check: none; make check-full: all).
REMOVAL_ULPS=${REMOVAL_ULPS-}
export_dir=$TEST_TMP/export
share_dir=$TEST_TMP/share
mnt=$TEST_TMP/mnt

# elapsed START: seconds since START (a date +%s.%N), two decimals.
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# ended PID: whether the background process PID has exited.
ended() { ! kill -0 "$1" 2>/dev/null; }

# add_device: add $dev on $nd and wait until its port is ACTIVE.
add_device() {
	rdma_link_add "$dev" "$nd" && wait_for 5 port_state_is "$dev" ACTIVE
}

# serve: offer $nqn on a fresh nvmet-rdma port (a port's listener goes with
# the device it was bound to, and nvmet-rdma does not listen again by itself).
serve() {
	nvmet_port_del 1 "$nqn" && nvmet_port 1 "$ip" "$svcid" "$nqn"
}

# nfs_flowing BASE: the mount on $mnt sent 32 WRITEs more than BASE.
nfs_flowing() {
	local n
	n=$(nfs_mount_ops "$mnt" WRITE)
	((${n:-0} >= $1 + 32))
}

# no_sockets PORT: no TCP socket but in TIME-WAIT on PORT.
no_sockets() {
	[ -z "$(ulp_tcp_sockets "$1")" ]
}

# no_ctrl: the host has no controller of $nqn.
no_ctrl() {
	[ -z "$(nvme_ctrls "$nqn")" ]
}

# start_fio FILE FIO_ARG...: fio writing FILE in 64 KiB blocks (FIO_ARGs come
# last and override) with direct I/O until it fails or is killed, in the
# background: sets fio_pid.
start_fio() {
	local file=$1
	shift
	fio --name=removal --filename="$file" --rw=randwrite --bs=64k --direct=1 --ioengine=libaio \
		--time_based --runtime=3600 "$@" >"$TEST_TMP/fio" 2>&1 &
	fio_pid=$!
}

# run_fio WHAT BDEV: write 16 MiB in 64 KiB blocks, read back, crc32c verified.
run_fio() {
	local what=$1 bdev=$2 out st desc
	desc="$what: fio writes 16 MiB to $bdev, reads it back, crc32c verified"
	out=$(timeout 300 fio --name=again --filename="$bdev" --rw=write --bs=64k --size=16m --direct=1 \
		--ioengine=libaio --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 2>&1)
	st=$?
	if [ "$st" = 0 ] && grep -q 'err= 0' <<<"$out"; then
		tap_ok "$desc"
	else
		tap_fail "$desc" "exit status $st" "$(tail -n 30 <<<"$out")"
	fi
}

# removal WHAT HOW: remove the device with `rdma link delete` (HOW link) or by
# unloading the driver (rmmod), in the background; it must return within
# REMOVAL_MAX s and succeed. A removal stuck in the kernel ends the test.
removal() {
	local what=$1 how=$2 desc pid st t0
	case $how in
	link) desc="rdma link delete $dev" ;;
	rmmod) desc="rmmod $RSIW_MODULE" ;;
	esac
	kmsg_mark
	t0=$(date +%s.%N)
	if [ "$how" = link ]; then
		rdma link delete "$dev" >"$TEST_TMP/removal" 2>&1 &
	else
		rmmod "$RSIW_MODULE" >"$TEST_TMP/removal" 2>&1 &
	fi
	pid=$!
	if ! wait_for "$REMOVAL_MAX" ended "$pid"; then
		# Where everyone waits, into the kernel log (for dmesg.txt).
		echo w >/proc/sysrq-trigger
		tap_fail "$what: $desc returns within $REMOVAL_MAX s" "$(kmsg_since_mark | tail -n 60)"
		# Cleaning up would wait for the removal too: leave it to the harness.
		trap - EXIT
		tap_bail "$desc hangs in the kernel"
	fi
	tap_ok "$what: $desc returns within $REMOVAL_MAX s"
	wait "$pid"
	st=$?
	tap_result "$st" "$what: $desc succeeded" "$(cat "$TEST_TMP/removal")" "exit status $st"
	tap_diag "$desc returned after $(elapsed "$t0") s"
	tap_wait "$what: $dev is gone" 10 rdma_dev_gone "$dev"
	if [ "$how" = rmmod ]; then
		tap_result "$(! rsiw_loaded; echo $?)" "$what: $RSIW_MODULE is unloaded" "$(lsmod 2>&1 | head)"
	fi
}

# leftovers WHAT PORT: nothing of the device is left: not in rdma res, no CM
# id on it, no TCP socket of its connections or listeners on PORT, and (rsiw)
# its removal logged with no QP, CQ, MR, PD or SRQ still counted.
leftovers() {
	local what=$1 port=$2 res socks log
	res=$( (timeout 20 rdma res show; timeout 20 rdma res show cm_id) 2>&1 | grep -E "(^[0-9]+: $dev:| $dev/)")
	tap_result "$([ -z "$res" ]; echo $?)" "$what: rdma res lists nothing of $dev (resources, CM ids)" "$res"
	wait_for 10 no_sockets "$port"
	socks=$(ulp_tcp_sockets "$port")
	tap_result "$([ -z "$socks" ]; echo $?)" "$what: no TCP socket on port $port left (but TIME-WAIT)" "$socks"
	if rsiw_is_reference; then
		tap_skip "$what: rsiw logged the removal of $dev, nothing still counted" "rsiw's log; not the C siw"
	else
		log=$(kmsg_since_mark)
		tap_match "$what: rsiw logged the removal of $dev, nothing still counted" "^rsiw: $dev: removed\$" \
			"$(grep -E "^rsiw: $dev: " <<<"$log")" || tap_diag "$(grep -E '^rsiw: ' <<<"$log")"
	fi
}

# block_writer WHAT BDEV BASE: fio writing BDEV in 64 KiB blocks at queue
# depth 16 in the background (fio_pid), once BDEV completed 32 writes more
# than BASE with I/O in flight; else fio stopped and status 1.
block_writer() {
	start_fio "/dev/$2" --iodepth=16
	tap_wait "$1: fio randwrite 64k, iodepth 16 on /dev/$2: writes complete, I/O in flight" \
		60 ulp_block_flowing "$2" "${3:-0}" && return 0
	tap_diag "$(cat "$TEST_TMP/fio")"
	stop_fio
	return 1
}

# block_writer_fails WHAT: after the removal, the block writer ends with an
# I/O error within WRITER_MAX s (else it is killed).
block_writer_fails() {
	fio_fails "$1: fio ends with an I/O error" "$TEST_TMP/fio" "$WRITER_MAX"
}

# nvme_case WHAT HOW: connect, fio writing, remove the device (see removal)
# under it, and check that host and target let go.
nvme_case() {
	local what=$1 how=$2 b base qps
	tap_check "$what: nvmet-rdma port on $ip:$svcid" serve || return
	tap_check "$what: nvme connect -t rdma -a $ip -s $svcid" nvme_connect "$ip" "$svcid" "$nqn" || return
	b=$(nvme_namespaces "$nqn" | head -n 1)
	b=${b#/dev/}
	base=$(ulp_block_writes "$b")
	block_writer "$what" "$b" "$base" || return
	qps=$(timeout 20 rdma res show qp link "$dev/1" 2>&1)
	tap_result "$([ "$(grep -c " state RTS " <<<"$qps")" -ge 4 ]; echo $?)" \
		"$what: host and target QPs in RTS on $dev" "$qps"
	tap_diag "before the removal: $(($(ulp_block_writes "$b") - base)) writes done, $(tr -s ' ' <"/sys/block/$b/inflight") (reads, writes) in flight"
	removal "$what" "$how"
	block_writer_fails "$what"
	tap_wait "$what: nvme-rdma deleted its controller of $nqn" 30 no_ctrl
	tap_match "$what: nvme-rdma logged the controller's removal" "Removing ctrl: NQN \"$nqn\"" \
		"$(kmsg_since_mark)"
	tap_diag "$(kmsg_since_mark | grep -E 'nvmet|nvme' | head -n 12)"
	ulp_undo_drop "nvme:$nqn"
	leftovers "$what" "$svcid"
}

# again WHAT: the device (and, after an rmmod, the driver) back; a new NVMe
# connection verifies data, then disconnects.
again() {
	local what=$1 b
	if ! rsiw_loaded; then
		tap_check "$what: load $RSIW_MODULE again" rsiw_load || tap_bail "cannot load the driver again"
	fi
	tap_check "$what: rdma link add $dev again, ACTIVE" add_device || tap_bail "cannot add $dev again"
	tap_check "$what: nvmet-rdma port again" serve || return
	tap_check "$what: nvme connect again" nvme_connect "$ip" "$svcid" "$nqn" || return
	b=$(nvme_namespaces "$nqn" | head -n 1)
	run_fio "$what" "$b"
	tap_check "$what: nvme disconnect" nvme_disconnect "$nqn"
	tap_wait "$what: no QP left on $dev" 60 ulp_no_qps "$dev"
}

# force_umount: umount -f $mnt. The killed writer's asynchronous WRITEs
# still hold the file (EBUSY): the first umount -f aborts them, a later one
# then finds the file system unused.
force_umount() {
	local i
	for i in 1 2 3 4 5; do
		timeout 60 umount -f "$mnt" && return 0
		sleep "$i"
	done
	return 1
}

# no_nfs_volumes: the NFS client has no superblock (volume) left.
no_nfs_volumes() {
	[ "$(tail -n +2 /proc/fs/nfsfs/volumes 2>/dev/null | wc -l)" = 0 ]
}

# no_nfs_servers: the NFS client has no server (nfs_client) left.
no_nfs_servers() {
	[ "$(tail -n +2 /proc/fs/nfsfs/servers 2>/dev/null | wc -l)" = 0 ]
}

# nfs_case WHAT: knfsd and an NFS mount over the device, fio writing through
# it; rdma link delete.
nfs_case() {
	local what=$1 base xprt t0
	tap_check "$what: knfsd on rdma port $NFS_RDMA_PORT" nfs_server_start "$export_dir" || return
	tap_check "$what: mount -o vers=$NFS_VERS,proto=rdma $ip" nfs_mount "$ip" "$export_dir" "$NFS_VERS" "$mnt" ||
		return
	xprt=$(nfs_mount_xprt "$mnt")
	tap_result "$([ "$xprt" = rdma ]; echo $?)" "$what: the mount uses RDMA (mountstats xprt $xprt)"
	base=$(nfs_mount_ops "$mnt" WRITE)
	start_fio "$mnt/writer" --size=64m --iodepth=8 --fallocate=none
	if ! tap_wait "$what: fio randwrite 64k, iodepth 8 to $mnt/writer: WRITE RPCs complete" \
		60 nfs_flowing "${base:-0}"; then
		tap_diag "$(cat "$TEST_TMP/fio")"
		stop_fio
		return 1
	fi
	tap_diag "before the removal: $(($(nfs_mount_ops "$mnt" WRITE) - base)) WRITEs"
	removal "$what" link
	# On a hard mount the writer waits for the server to come back; it must go
	# with SIGKILL.
	stop_writer "$what"
	t0=$(date +%s.%N)
	if tap_check "$what: umount -f $mnt" force_umount; then
		tap_diag "unmounted in $(elapsed "$t0") s"
	else
		tap_check "$what: umount -l $mnt" timeout 60 umount -l "$mnt"
	fi
	tap_result "$(! grep -qF " $mnt " /proc/mounts; echo $?)" "$what: $mnt is no longer mounted" \
		"$(grep -F " $mnt " /proc/mounts)"
	ulp_undo_drop "nfs:$mnt"
	# A lazily unmounted file system stays until its last file and request go.
	tap_wait "$what: the NFS client has no volume left (/proc/fs/nfsfs/volumes)" 30 no_nfs_volumes
	tap_wait "$what: the NFS client let go of the server (/proc/fs/nfsfs/servers)" 30 no_nfs_servers
	if [ -z "$fio_pid" ]; then
		t0=$(date +%s.%N)
		tap_check "$what: knfsd stops" nfs_server_stop
		tap_diag "knfsd stopped in $(elapsed "$t0") s"
	fi
	leftovers "$what" "$NFS_RDMA_PORT"
}

# stop_writer WHAT: the writer on a network file system ends by itself within
# 5 s of the removal (an I/O error comes at once or never), or on SIGKILL;
# fio_pid is cleared once it has ended.
stop_writer() {
	local what=$1 st
	if wait_for 5 ended "$fio_pid"; then
		wait "$fio_pid"
		st=$?
		tap_ok "$what: the writer ended by itself (exit status $st)"
		tap_diag "$(grep -iE 'error' "$TEST_TMP/fio" | head -n 3)"
	else
		kill -KILL "$fio_pid"
		if tap_wait "$what: the writer, still waiting after 5 s, exits on SIGKILL" 30 ended "$fio_pid"; then
			wait "$fio_pid" 2>/dev/null
		else
			tap_diag "$(ps -o pid,stat,wchan:32,cmd -p "$fio_pid")"
		fi
	fi
	ended "$fio_pid" && fio_pid=
}

# iser_node_fail_fast: the node record of $iqn, with a replacement timeout of
# 5 s: SCSI fails the I/O of a session that lost its connection after it.
iser_node_fail_fast() {
	iscsiadm -m node -o new -T "$iqn" -p "$ip:$ISER_PORT" -I iser >/dev/null &&
		iscsiadm -m node -T "$iqn" -p "$ip:$ISER_PORT" -I iser -o update \
			-n node.session.timeo.replacement_timeout -v 5
}

# iser_case WHAT: the LIO target and an open-iscsi session over iSER, fio
# writing to the disk; rdma link delete. The session's replacement timeout is
# cut to 5 s (120 s by default), after which SCSI fails the I/O.
iser_case() {
	local what=$1 b base
	tap_check "$what: LIO target, 64 MiB ramdisk LUN" iser_target_create "$iqn" 64 || return
	tap_check "$what: portal $ip:$ISER_PORT with iSER" iser_portal "$ip" "$ISER_PORT" "$iqn" || return
	tap_check "$what: open-iscsi initiator (iscsid)" iser_initiator_start || return
	tap_check "$what: node record, replacement timeout 5 s" iser_node_fail_fast || return
	tap_check "$what: login over iSER" iser_login "$ip" "$ISER_PORT" "$iqn" || return
	b=$(iser_disk "$iqn") || { tap_fail "$what: the LUN appears as a disk"; return 1; }
	b=${b#/dev/}
	base=$(ulp_block_writes "$b")
	block_writer "$what" "$b" "$base" || return
	removal "$what" link
	block_writer_fails "$what"
	tap_check "$what: log out, stop iscsid" ulp_undo iser-initiator
	tap_check "$what: clear the target" ulp_undo iser-target
	leftovers "$what" "$ISER_PORT"
}

# smb_case WHAT: ksmbd and an SMB Direct mount over the device, fio writing 1
# KiB blocks through it, one at a time; rdma link delete: fio must end with an
# I/O error and the share unmount. The blocks are smaller than cifs's RDMA
# read/write threshold, so no write holds an MR: with MRs in use, cifs 6.12
# blocks the removal (see testing.rst).
smb_case() {
	local what=$1 t0
	tap_check "$what: ksmbd serving //$ip/$share" smb_server_start "$share_dir" "$share" || return
	tap_wait "$what: ksmbd listens for SMB Direct on port 5445" 30 smb_listening "$dev" || return
	tap_check "$what: mount -t cifs -o rdma //$ip/$share" smb_mount "$ip" "$share" "$mnt" || return
	smb_writer "$what" "$mnt/writer" "$TEST_TMP/fio" || return
	removal "$what" link
	# The soft mount fails a write once its reconnect has waited 10 s for it
	# (with 8 writes in flight fio took 40 to 60 s to end); until then the
	# write holds the file, and even a killed writer would keep the mount
	# busy.
	t0=$(date +%s.%N)
	block_writer_fails "$what"
	tap_diag "the writer ended $(elapsed "$t0") s after the removal"
	tap_check "$what: umount $mnt" timeout 60 umount "$mnt"
	ulp_undo_drop "smb:$mnt"
	tap_wait "$what: cifs's connection thread ends" 30 smb_client_idle ||
		tap_diag "$(ps -eo pid,stat,wchan:32,comm | grep -w cifsd)"
	tap_check "$what: ksmbd stops" ulp_undo smb-server
	leftovers "$what" 5445
}

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev $nd $ip" netdev_dummy "$nd" "$mac" "$ip/24" || tap_bail "cannot create $nd"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $nd, ACTIVE" add_device || tap_bail "cannot add the link"
kmsg_mark
tap_check "null_blk namespace device (memory-backed, 256 MiB)" nvmet_null_blk rsiwnull1 256 ||
	tap_bail "no null_blk device"
tap_check "nvmet subsystem $nqn: ns 1 /dev/rsiwnull1" nvmet_subsys "$nqn" /dev/rsiwnull1 ||
	tap_bail "cannot set up the subsystem"

nvme_case "NVMe, link delete" link
again "NVMe, after link delete"
if rsiw_is_reference; then
	# siw_exit_module() stops siw's transmit threads before it unregisters the
	# devices: a QP with work queued for them keeps a reference for good, and
	# siw_destroy_qp() (nvme-rdma deleting its controller) waits forever.
	tap_skip "NVMe, rmmod: the removal under I/O" \
		"the C siw hangs: it stops its transmit threads before it unregisters its devices"
else
	nvme_case "NVMe, rmmod" rmmod
	again "NVMe, after rmmod"
fi

# The other ULPs' cases (REMOVAL_ULPS), each followed by a new NVMe
# connection. The NVMe port's listener is not part of them.
if [[ " $REMOVAL_ULPS " == *" nfs "* ]]; then
	tap_check "tmpfs to export on $export_dir" nfs_export_tmpfs "$export_dir" 256M
	tap_check "remove the nvmet-rdma port" nvmet_port_del 1 "$nqn"
	nfs_case "NFSv$NFS_VERS, link delete"
	again "NVMe, after the NFS case"
fi
if [[ " $REMOVAL_ULPS " == *" iser "* ]]; then
	tap_check "remove the nvmet-rdma port" nvmet_port_del 1 "$nqn"
	iser_case "iSER, link delete"
	again "NVMe, after the iSER case"
fi
if [[ " $REMOVAL_ULPS " == *" smb "* ]]; then
	tap_check "tmpfs to share on $share_dir" ulp_mount_tmpfs "$share_dir" 256M
	tap_check "remove the nvmet-rdma port" nvmet_port_del 1 "$nqn"
	smb_case "SMB Direct, link delete"
	again "NVMe, after the SMB Direct case"
fi

tap_check "remove the port" nvmet_port_del 1 "$nqn"
tap_check "remove the subsystem" nvmet_subsys_del "$nqn"
tap_check "undo the setup: null_blk, nvmet, nvme, NFS, LIO and iSCSI modules" ulp_cleanup

# The test ULP's server, listening on the device with a shared receive queue
# (made by a first connection): on DEVICE_REMOVAL it lets go of its listener
# and of the SRQ, so the removal does not wait for them.
[ -f "$ULP_KO" ] || tap_bail "$ULP_KO does not exist (make module)"
ulp_insmod || tap_bail "cannot load the ULP"
tap_check "test ULP server (srq=1) on $ip:$ulp_port" ulp_ctl "server addr=$ip port=$ulp_port srq=1" ||
	tap_bail "cannot start the ULP server"
ulp_run "test ULP, one connection" "client addr=$ip port=$ulp_port test=send size=4096"
removal "test ULP listener" link
leftovers "test ULP listener" "$ulp_port"
tap_check "stop the test ULP server" ulp_ctl stop
tap_check "rmmod rsiw_ulp" ulp_unload
tap_done
