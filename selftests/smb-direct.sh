#!/usr/bin/env bash
# SMB Direct (SMB3 over RDMA) through the device under test, server and client
# in this VM: ksmbd serves a tmpfs share on 198.18.0.1 (a dummy netdev with the
# RDMA device on it) and the cifs client mounts it with -o rdma, so every SMB
# request goes through the device twice (client QP to server QP). ksmbd picks
# its RDMA port when a device appears (5445 for iWARP) and listens when it
# starts: the link comes first. The mount must use RDMA (cifs's DebugData
# shows the SMBDirect transport, client and server QPs in RTS on the device,
# and, with rsiw, its established counter grew). On it: fio with crc32c
# verification at 4 KiB, 64 KiB and 1 MiB blocks (direct I/O), written then
# read back; a streamed SMB_BIG_MB MiB copy (16) whose md5 the server's file
# and a read back after dropping caches must match; in make check-full,
# SMB_CHURN_FILES (250) files created, renamed, listed and removed, the server
# seeing the same (not in make check: there ksmbd leaked a ksmbd_inode, see
# Documentation/rsiw/testing.rst). Then SMB_CYCLES (3; make check-full: 20)
# mount, write and verify 1 MiB, umount cycles. Then ksmbd stopped under
# traffic (see stop_case): fio fails, the share unmounts, no QP, MR or CM id
# is left on the device. At the end ksmbd and cifs unload, no splat, no leak.
# timeout: 1200
# tier: full (about 2 minutes; in make check, nfs-rdma and nvmeof-rdma run the
# kernel ULPs that use the same verbs, FRWR registration, Send with
# Invalidate and rdma_rw, on rsiw)
# Functions run through tap_check look unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma fio python3 mount.cifs ksmbd.mountd ksmbd.adduser ksmbd.control md5sum
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:25 ip=198.18.0.1
SMB_BIG_MB=${SMB_BIG_MB:-16}
SMB_CHURN_FILES=${SMB_CHURN_FILES:-0}
SMB_CYCLES=${SMB_CYCLES:-3}
SMB_FIO=${SMB_FIO:-4k:2m 64k:8m 1m:16m}
share=rsiw
export_dir=$TEST_TMP/export
mnt=$TEST_TMP/mnt

# elapsed START: seconds since START (a date +%s.%N), two decimals.
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# check_rdma_mount: the mount on $mnt uses SMB Direct through $dev.
check_rdma_mount() {
	local dbg qps est
	dbg=$(cat /proc/fs/cifs/DebugData 2>&1)
	tap_result "$(smb_direct_session; echo $?)" \
		"cifs's DebugData shows the session on the SMBDirect transport" \
		"$(head -n 40 <<<"$dbg")"
	qps=$(timeout 20 rdma res show qp link "$dev/1" 2>&1)
	tap_result "$([ "$(grep -c " state RTS " <<<"$qps")" -ge 2 ]; echo $?)" \
		"rdma res show qp lists client and server QPs in RTS on $dev" "$qps"
	if rsiw_is_reference; then
		tap_skip "rsiw's established counter grew" "rsiw's own counters; not the C siw"
		return
	fi
	est=$(rdma statistic show link "$dev/1" 2>&1)
	[[ $est =~ \ cm_established\ ([0-9]+) ]] && est=${BASH_REMATCH[1]}
	tap_result "$([ "${est:-0}" -gt "$est0" ]; echo $?)" \
		"rsiw's established counter grew (rdma statistic)" "cm_established $est0 -> ${est:-?}"
}

# run_fio BS SIZE: write SIZE in BS blocks with direct I/O, then read it back
# checking every block's crc32c.
run_fio() {
	fio_write_verify "fio $1 x $2 write, read back, crc32c verified" "$mnt/fio-$1" "$1" "$2"
}

# big_copy MB: stream MB MiB of random data into a file over SMB Direct,
# checksumming the stream; compare the server's copy and a read back.
big_copy() {
	local mb=$1 sum_src sum_srv sum_cli t0
	t0=$(date +%s.%N)
	sum_src=$(head -c "${mb}M" /dev/urandom | tee "$mnt/big" | md5sum | cut -d' ' -f1)
	sync "$mnt/big"
	tap_diag "wrote $mb MiB in $(elapsed "$t0") s"
	sum_srv=$(md5sum "$export_dir/big" | cut -d' ' -f1)
	tap_result "$([ "$sum_srv" = "$sum_src" ]; echo $?)" "$mb MiB copy: the server's file has the written data (md5)" \
		"written $sum_src, server $sum_srv"
	echo 3 >/proc/sys/vm/drop_caches
	sum_cli=$(md5sum "$mnt/big" | cut -d' ' -f1)
	tap_result "$([ "$sum_cli" = "$sum_src" ]; echo $?)" "$mb MiB copy: read back over SMB Direct, same data (md5)" \
		"written $sum_src, read $sum_cli"
	rm -f "$mnt/big"
}

# cycle I: mount, write 1 MiB and compare it through the server and a read
# back, umount.
cycle() {
	local i=$1 blk=$TEST_TMP/cycle
	head -c 1M /dev/urandom >"$blk"
	smb_mount "$ip" "$share" "$mnt" || return
	cp "$blk" "$mnt/cycle-$i" && sync "$mnt/cycle-$i" || return
	cmp "$blk" "$export_dir/cycle-$i" || return
	echo 3 >/proc/sys/vm/drop_caches
	cmp "$blk" "$mnt/cycle-$i" && rm -f "$mnt/cycle-$i" || return
	smb_umount "$mnt"
}

# stop_case: ksmbd stopped under traffic. fio writes a file on the mount in
# 1 KiB blocks with direct I/O, one at a time (below cifs's RDMA read/write
# threshold, so that no write holds an MR: see testing.rst for what cifs 6.12
# does then), and ksmbd is stopped under it: the server's connections go,
# cifs's reconnect finds no server, the soft mount fails the write after
# waiting 10 s for it, fio ends with an I/O error (within 60 s), the share
# unmounts, and nothing of the connection stays on the device.
stop_case() {
	local t0
	tap_check "stop: mount -t cifs -o rdma //$ip/$share" smb_mount "$ip" "$share" "$mnt" || return
	smb_writer stop "$mnt/stop" "$TEST_TMP/fio-stop" || return
	tap_check "stop: ksmbd.control -s stops the server under the writes" ulp_undo smb-server
	t0=$(date +%s.%N)
	fio_fails "stop: fio ends with an I/O error" "$TEST_TMP/fio-stop" 60
	tap_diag "fio ended $(elapsed "$t0") s after ksmbd stopped"
	tap_check "stop: umount" timeout 60 umount "$mnt" && ulp_undo_drop "smb:$mnt"
	tap_wait "stop: cifs's connection thread ends" 30 smb_client_idle ||
		tap_diag "$(ps -eo pid,stat,wchan:32,comm | grep -w cifsd)"
	tap_wait "stop: no QP, MR or CM id of a connection left on $dev" 30 \
		eval '[ "$(ulp_res_count "$dev" qp)" = 0 ] && [ "$(ulp_res_count "$dev" mr)" = 0 ] &&
			[ "$(ulp_res_count "$dev" cm_id)" = 0 ]' || tap_diag "$(ulp_res_summary "$dev")"
}

kmsg_mark
tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev $nd $ip" netdev_dummy "$nd" "$mac" "$ip/24" || tap_bail "cannot create $nd"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $nd" rdma_link_add "$dev" "$nd" ||
	tap_bail "cannot add the link"
tap_wait "$dev ACTIVE" 5 port_state_is "$dev" ACTIVE
est0=$(rdma statistic show link "$dev/1" 2>&1)
[[ $est0 =~ \ cm_established\ ([0-9]+) ]] && est0=${BASH_REMATCH[1]} || est0=0

tap_check "tmpfs to share on $export_dir" ulp_mount_tmpfs "$export_dir" 512M || tap_bail "no tmpfs"
tap_check "ksmbd serving //$ip/$share" smb_server_start "$export_dir" "$share" || tap_bail "cannot start ksmbd"
tap_wait "ksmbd listens for SMB Direct on port 5445 (a CM id)" 30 smb_listening "$dev" ||
	tap_diag "$(timeout 20 rdma res show cm_id 2>&1)" "$(dmesg | grep -i ksmbd | tail -n 20)"
if ! tap_check "mount -t cifs -o rdma //$ip/$share" smb_mount "$ip" "$share" "$mnt"; then
	tap_diag "$(dmesg | grep -iE 'cifs|smb|ksmbd' | tail -n 30)"
	tap_bail "cannot mount"
fi
check_rdma_mount
for f in $SMB_FIO; do
	run_fio "${f%%:*}" "${f#*:}"
done
big_copy "$SMB_BIG_MB"
if ((SMB_CHURN_FILES > 0)); then
	fs_churn "create, rename, list, unlink $SMB_CHURN_FILES files (the server sees the same)" \
		"$mnt/churn" "$SMB_CHURN_FILES" "$export_dir/churn"
fi
tap_check "umount" smb_umount "$mnt"

ulp_cycles "$SMB_CYCLES" "$SMB_CYCLES cycles of mount, 1 MiB written and read back, umount" cycle
tap_wait "no QP, MR or CM id of a connection left on $dev" 30 \
	eval '[ "$(ulp_res_count "$dev" qp)" = 0 ] && [ "$(ulp_res_count "$dev" mr)" = 0 ]' ||
	tap_diag "$(ulp_res_summary "$dev")"
stop_case
tap_check "undo the setup: tmpfs, ksmbd and cifs modules" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
