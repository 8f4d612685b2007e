#!/usr/bin/env bash
# iSER (iSCSI Extensions for RDMA) through the device under test, target and
# initiator in this VM: the LIO target (made in its configfs) exports a ramdisk LUN on 198.18.0.1:3260 (a dummy netdev with the
# RDMA device on it) with iSER enabled, and open-iscsi logs in through its
# iser interface, so every SCSI command and its data go through the device
# (initiator QP to target QP).
#
# On a software iWARP device the iSER listener is a TCP socket of the host. LIO
# opens a portal's iSCSI/TCP listener first, on the same address and port, so
# enabling iSER on it must fail cleanly with EADDRINUSE (checked on port 3261).
# The portal is therefore created from another network namespace, which gets
# the TCP listener, and iSER is enabled from this one: isert listens in
# init_net, where the device is (see iser_portal in ulp-setup.sh).
#
# Then: SendTargets discovery over iSER; login, the session on the iser
# transport with both QPs in RTS on the device; fio with crc32c verification
# at 4 KiB, 64 KiB and 1 MiB blocks on the disk (direct I/O); ISER_CYCLES (3;
# make check-full: 20) logout/login cycles, each reading back what the
# previous session wrote and writing a new block. Then the session killed
# under traffic: its connection reset (ss -K) under fio with crc32c
# verification; the initiator logs in again and every block verifies. At the
# end: no QP, MR or CM id left on the device, the target cleared, its modules
# and the initiator's unloaded, no splat, no leak.
# timeout: 900
# tier: full (about 2 minutes; in make check, nfs-rdma and nvmeof-rdma run the
# kernel ULPs that use the same verbs, FRWR registration, Send with
# Invalidate and rdma_rw, on rsiw)
# Functions run through tap_check look unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma fio iscsiadm iscsid nsenter
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:26 ip=198.18.0.1 port=$ISER_PORT
iqn=iqn.2003-01.org.rsiw:selftest-iser
ISER_CYCLES=${ISER_CYCLES:-3}
ISER_FIO=${ISER_FIO:-randwrite:4k:2m write:64k:8m write:1m:16m}
# The cycles' 1 MiB blocks live past the fio jobs' range (room for 31 in 64 MiB).
cycle_base_mb=32

# check_session: the session to $iqn runs on the iser transport through $dev.
check_session() {
	local s qps
	s=$(iscsiadm -m session 2>&1)
	tap_result "$(grep -qE "^iser: \[[0-9]+\] $ip:$port,[0-9]+ $iqn( |\$)" <<<"$s"; echo $?)" \
		"iscsiadm -m session: the session to $iqn is on the iser transport" "$s"
	qps=$(timeout 20 rdma res show qp link "$dev/1" 2>&1)
	tap_result "$([ "$(grep -c " state RTS " <<<"$qps")" -ge 2 ]; echo $?)" \
		"rdma res show qp lists initiator and target QPs in RTS on $dev" "$qps"
}

# run_fio RW BS SIZE: write SIZE in BS blocks to the disk, read it back
# checking every block's crc32c.
run_fio() {
	fio_write_verify "fio $1 $2 x $3 on the iSER disk, read back, crc32c verified" "$disk" "$2" "$3" \
		--rw="$1" --unlink=0 --iodepth=8
}

# cycle I: log in, check the block cycle I-1 wrote, write block I, log out.
cycle() {
	local i=$1 blk=$TEST_TMP/cycle
	iser_login "$ip" "$port" "$iqn" || return
	disk=$(iser_disk "$iqn") || return
	if ((i > 1)); then
		dd if="$disk" of="$blk.read" bs=1M skip=$((cycle_base_mb + i - 1)) count=1 iflag=direct status=none &&
			cmp "$blk" "$blk.read" || return
	fi
	head -c 1M /dev/urandom >"$blk" &&
		dd if="$blk" of="$disk" bs=1M seek=$((cycle_base_mb + i)) count=1 oflag=direct conv=fsync status=none ||
		return
	iser_logout "$ip" "$port" "$iqn"
}

# conn_errors: how many connection failures libiscsi logged since the mark.
conn_errors() {
	kmsg_since_mark | grep -cE '^ *connection[0-9]+:[0-9]+: detected conn error'
}

# session_back: the session to $iqn is logged in again, on a new iSER
# connection whose initiator and target QPs are in RTS on $dev.
session_back() {
	timeout 20 iscsiadm -m session -P 1 2>/dev/null | grep -q 'iSCSI Session State: LOGGED_IN' &&
		[ "$(timeout 20 rdma res show qp link "$dev/1" 2>/dev/null | grep -c ' state RTS ')" -ge 2 ]
}

# kill_case: log in, fio writing the disk with crc32c verification, and the
# session's TCP connection (an iWARP connection is one) reset under it with
# ss -K, as a crashed switch or a firewall would. The initiator must see the
# connection fail and log in again on a new iSER connection (replacement
# timeout: the default 120 s), SCSI must retry what was in flight, and fio
# must end with every block it wrote read back and verified.
kill_case() {
	local b base killed st out errs desc race
	tap_check "kill: login to $iqn over iSER" iser_login "$ip" "$port" "$iqn" || return
	disk=$(iser_disk "$iqn") || { tap_fail "kill: the LUN appears as a disk"; return 1; }
	b=${disk#/dev/}
	base=$(ulp_block_writes "$b")
	fio --name=kill --filename="$disk" --rw=randwrite --bs=64k --size=60m --loops=2 --direct=1 \
		--ioengine=libaio --iodepth=16 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 >"$TEST_TMP/fio-kill" 2>&1 &
	fio_pid=$!
	if ! tap_wait "kill: fio randwrite 64k, iodepth 16, crc32c on $disk: writes complete, I/O in flight" \
		60 ulp_block_flowing "$b" "$base"; then
		tap_diag "$(cat "$TEST_TMP/fio-kill")"
		stop_fio
		return 1
	fi
	errs=$(conn_errors)
	killed=$(ss -K -tnH state established "( dport = :$port )" 2>&1)
	tap_result "$([ -n "$killed" ] && kill -0 "$fio_pid" 2>/dev/null; echo $?)" \
		"kill: ss -K resets the session's connection while fio runs" "$killed"
	tap_wait "kill: the initiator saw the connection fail" 30 eval '[ "$(conn_errors)" -gt "$errs" ]'
	tap_wait "kill: the session is logged in again over iSER, both QPs in RTS on $dev" 150 session_back ||
		tap_diag "$(iscsiadm -m session -P 1 2>&1)" "$(kmsg_since_mark | grep -iE 'iser|iscsi' | tail -n 20)"
	if ulp_wait 300 eval '! kill -0 "$fio_pid" 2>/dev/null'; then
		wait "$fio_pid"
		st=$?
		out=$(cat "$TEST_TMP/fio-kill")
		desc="kill: fio ends with every block written and verified (crc32c)"
		race=$(kmsg_since_mark | grep -E 'iscsi_iser_task_init: Failed to init task .*, err = -19')
		if ! fio_verified "$st" "$out" && [ -n "$race" ] && ! fio_verify_error "$out"; then
			# iser_conn_terminate marks the connection down before it
			# suspends libiscsi's queue: a command queued in between fails
			# iser's task init (ENODEV), and libiscsi fails it with DID_ABORT
			# instead of requeuing it for the new login (seen once in session
			# 38). An I/O error, not wrong data; the rest cannot be judged.
			tap_skip "$desc" "iSER's initiator failed a command queued while it was tearing the connection down (iscsi_iser_task_init: ENODEV, then an I/O error); no verify error: $(grep -m 1 -E 'err=|error' <<<"$out")"
		else
			tap_result "$(fio_verified "$st" "$out"; echo $?)" "$desc" "exit status $st" \
				"$(grep -m 5 -iE 'error|verify|bad magic' <<<"$out")" "$(tail -n 20 <<<"$out")"
		fi
		fio_pid=
	else
		tap_fail "kill: fio ends with every block written and verified (crc32c)" \
			"fio still runs 300 s after the reset" "$(ps -o pid,stat,wchan:32,cmd -p "$fio_pid")"
		stop_fio
	fi
	tap_check "kill: logout" iser_logout "$ip" "$port" "$iqn"
}

kmsg_mark
tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev $nd $ip" netdev_dummy "$nd" "$mac" "$ip/24" || tap_bail "cannot create $nd"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $nd" rdma_link_add "$dev" "$nd" ||
	tap_bail "cannot add the link"
tap_wait "$dev ACTIVE" 5 port_state_is "$dev" ACTIVE

tap_check "LIO target $iqn: a 64 MiB ramdisk LUN, no authentication (configfs)" \
	iser_target_create "$iqn" 64 || tap_bail "cannot configure the target"
out=$(iser_portal_same_ns "$ip" $((port + 1)) "$iqn" 2>&1)
st=$?
log=$(kmsg_since_mark | grep -E '^isert: ')
tap_result "$([ "$st" = 0 ] && grep -q '^enable iser: .*write error' <<<"$out" &&
	grep -q 'rdma_listen() failed: -98$' <<<"$log"; echo $?)" \
	"iSER on a portal whose iSCSI/TCP listener holds $ip:$((port + 1)) is refused (EADDRINUSE), the portal removed" \
	"status $st" "$out" "kernel log: $log"
tap_wait "and leaves no listener on $dev" 30 eval '[ "$(ulp_res_count "$dev" cm_id)" = 0 ]' ||
	tap_diag "$(timeout 20 rdma res show cm_id 2>&1)"
tap_check "portal $ip:$port, its iSCSI/TCP listener in another namespace, iSER enabled" \
	iser_portal "$ip" "$port" "$iqn" || tap_bail "cannot enable iSER"
tap_wait "isert listens on $ip:$port (a CM id on $dev)" 30 eval \
	"timeout 20 rdma res show cm_id | grep -qE '^link $dev/[-0-9]+ .*state LISTEN .*src-addr $ip:$port( |\$)'" ||
	tap_diag "$(timeout 20 rdma res show cm_id 2>&1)"

tap_check "open-iscsi initiator (iscsid)" iser_initiator_start || tap_bail "cannot start iscsid"
tap_check "SendTargets discovery over iSER finds $iqn" iser_discover "$ip" "$port" "$iqn" ||
	tap_diag "$(dmesg | grep -iE 'iser|iscsi' | tail -n 30)"
if ! tap_check "login to $iqn over iSER" iser_login "$ip" "$port" "$iqn"; then
	tap_diag "$(dmesg | grep -iE 'iser|iscsi' | tail -n 30)"
	tap_bail "cannot log in"
fi
check_session
disk=$(iser_disk "$iqn") && tap_ok "the LUN appears as $disk" || tap_bail "no disk for the session"
for f in $ISER_FIO; do
	IFS=: read -r rw bs size <<<"$f"
	run_fio "$rw" "$bs" "$size"
done
tap_check "logout" iser_logout "$ip" "$port" "$iqn"

ulp_cycles "$ISER_CYCLES" \
	"$ISER_CYCLES cycles of login, the previous session's 1 MiB read back, 1 MiB written, logout" cycle
kill_case
tap_wait "no QP, MR or CM id of a connection left on $dev" 30 \
	eval '[ "$(ulp_res_count "$dev" qp)" = 0 ] && [ "$(ulp_res_count "$dev" mr)" = 0 ]' ||
	tap_diag "$(ulp_res_summary "$dev")"
tap_check "stop the initiator" ulp_undo iser-initiator
tap_check "clear the target" ulp_undo iser-target
tap_wait "no CM id left on $dev" 30 eval '[ "$(ulp_res_count "$dev" cm_id)" = 0 ]' ||
	tap_diag "$(timeout 20 rdma res show cm_id 2>&1)"
tap_check "undo the setup: target and initiator modules" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
