#!/usr/bin/env bash
# A connection flood must not stall connection setup. A peer
# (selftests/hostile/flood.py) opens FLOOD_IDLE TCP connections to a listener
# from a second address, none of which sends an MPA Request, then FLOOD_MPA
# connections that complete MPA (the ULP accepts them: a QP each) and then
# stay silent. Twice: against the test ULP's rdma_cm listener, and against
# knfsd's NFS/RDMA listener (port 20049) with FLOOD_NFS_MPA (default 25)
# silent connections: knfsd sets each up and tears it down one at a time,
# about 0.45 s each under TCG. Meanwhile a normal connection must
# be up within 10 s, twice: an rdma_cm connect with a Write through the test
# ULP's own client, and an NFS/RDMA mount with a file written and read back.
# (10 s times VM_TIMEOUT_SCALE: a KASAN guest takes over 10 s for a mount
# without any flood.)
# The listener must have refused the idle connections beyond its per-source
# limit (its log line says so), and those it let wait must have timed out. At
# the end of each, with the flood reset: no QP and no connection left on the
# port, no leak, no splat.
# timeout: 1200
# Functions run through tap_check, tap_wait and flood look unreachable, and
# the eval'd strings expand when evaluated:
# shellcheck disable=SC2317,SC2016
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma python3 ss mount.nfs rpc.nfsd rpc.mountd rpcbind exportfs

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:51 ip=198.18.0.1 src=198.18.0.2 ulp_port=20890
# make check's sizes (IDLE still well past the per-source limit of 64);
# make check-full runs 1000, 300 and 300.
IDLE=${FLOOD_IDLE:-150}
MPA=${FLOOD_MPA:-50}
NFS_MPA=${FLOOD_NFS_MPA:-25}
# The bound on a new connection, in ms and in words.
SETUP_MS=$((10000 * ${VM_TIMEOUT_SCALE:-1}))
SETUP_IN="$((SETUP_MS / 1000)) s"
FLOOD=$SELFTESTS/hostile/flood.py
export_dir=$TEST_TMP/export
# shellcheck disable=SC2034 # used in timed_mount's eval
mnt=$TEST_TMP/mnt

trap 'coproc_end FLOOD_PROC; ulp_cleanup; ulp_unload; cleanup' EXIT

# timed_write DESC: a Write of 64 KiB + 1 through the test ULP's client (a new
# rdma_cm connection), which must pass within SETUP_MS.
timed_write() {
	local t0 ms err st
	ulp_ctl clear
	t0=$(date +%s%3N)
	err=$(ulp_ctl "client addr=$ip port=$ulp_port test=write size=65537")
	st=$?
	ms=$(($(date +%s%3N) - t0))
	tap_diag "$1: the connect and Write took $ms ms"
	tap_result "$([ "$st" = 0 ] && ((ms <= SETUP_MS)) && echo 0 || echo 1)" \
		"$1: a new connection and a Write within $SETUP_IN" "exit status $st after $ms ms" "$err" \
		"$(cat "$ULP/result")"
}

qp_count() {
	timeout 20 rdma res show 2>/dev/null |
		awk -v d="$dev:" '$2 == d { for (i = 3; i < NF; i++) if ($i == "qp") print $(i + 1) }'
}

# shellcheck disable=SC2317 # called through tap_wait
no_qps() {
	[ "$(qp_count)" = 0 ]
}

# port_conns: the connected TCP sockets on the port, one a line.
port_conns() {
	ss -tanH state all "( sport = :$port or dport = :$port )" 2>/dev/null |
		awk '$1 != "TIME-WAIT" && $1 != "LISTEN"'
}

# shellcheck disable=SC2317 # called through tap_wait
no_port_conns() {
	[ -z "$(port_conns)" ]
}

# idle_admitted: the device-side connections from the flood's address.
idle_admitted() {
	ss -tnH state established "( sport = :$port )" 2>/dev/null | awk -v s="$src:" 'index($4, s) == 1' | wc -l
}

# shellcheck disable=SC2317 # called through tap_wait
accept_queue_empty() {
	[ "$(ss -ltnH "( sport = :$port )" 2>/dev/null | awk '{ n += $2 } END { print n + 0 }')" = 0 ]
}

# timed_mount DESC: an NFSv3 mount over RDMA (a new connection to knfsd), which
# must be up within SETUP_MS; then a file written and read back, and the umount.
timed_mount() {
	local t0 ms st
	t0=$(date +%s%3N)
	_run nfs_mount "$ip" "$export_dir" 3 "$mnt"
	st=$?
	ms=$(($(date +%s%3N) - t0))
	tap_diag "$1: the mount took $ms ms"
	tap_result "$([ "$st" = 0 ] && ((ms <= SETUP_MS)) && echo 0 || echo 1)" \
		"$1: an NFS/RDMA mount within $SETUP_IN" "exit status $st after $ms ms" "$OUT" || return
	tap_check "$1: 64 KiB + 1 written and read back over it, umount" eval \
		'head -c 65537 /dev/urandom >"$TEST_TMP/file" && cp "$TEST_TMP/file" "$mnt/file" &&
		echo 3 >/proc/sys/vm/drop_caches && cmp "$TEST_TMP/file" "$mnt/file" && rm "$mnt/file" &&
		nfs_umount "$mnt"'
}

# flood WHAT PORT CHECK KEEPS [FLOOD-OPTION]...: the flood against the listener
# on PORT; CHECK DESC is the normal connection that must get through. KEEPS is
# "all" when the ULP keeps every connection it accepted (knfsd keeps at most
# 64 that have not sent a valid RPC, sv_maxconn, and closes the oldest).
flood() {
	local what=$1 check=$3 keeps=$4 admitted refused
	port=$2
	shift 4
	kmsg_mark
	refused=0
	if ! rsiw_is_reference && hw_read "$dev" cm_handshakes_refused; then
		refused=${HW_NOW#*=}
	fi
	# shellcheck disable=SC2034 # read through coproc_line's and coproc_end's namerefs
	coproc FLOOD_PROC { exec python3 "$FLOOD" --addr "$ip" --port "$port" --source "$src" \
		--idle "$IDLE" --mpa "$MPA" "$@" 2>&1; }
	coproc_line FLOOD_PROC 400
	tap_result "$([[ $LINE == "idle $IDLE "* ]] && echo 0 || echo 1)" \
		"$what: $IDLE idle TCP connects from $src" "$LINE"
	"$check" "$what: under $IDLE idle connections"
	# Connections still in the listener's accept queue are established but not
	# yet the device's: count once it is empty.
	tap_wait "$what: the device took every connection from the accept queue" 30 accept_queue_empty
	admitted=$(idle_admitted)
	tap_diag "$what: the device holds $admitted of the idle connections"
	tap_result "$((admitted <= 64 ? 0 : 1))" \
		"$what: the listener lets at most 64 connections from $src wait for their MPA Request" \
		"$admitted established"
	tap_match "$what: $dev logged the connections it reset" \
		"$dev: too many MPA handshakes in progress: connection from $src:[0-9]+ reset" "$(kmsg_since_mark)"
	if rsiw_is_reference; then
		tap_skip "$what: rdma statistic counts the connections reset" "rsiw's counters"
	else
		# Each idle connection the listener did not let wait was reset.
		hw_read "$dev" cm_handshakes_refused
		refused=$((${HW_NOW#*=} - refused))
		tap_result "$((refused > 0 && refused <= IDLE && refused + admitted <= IDLE ? 0 : 1))" \
			"$what: cm_handshakes_refused counts the connections reset ($refused)" \
			"$refused reset, $admitted waiting, of $IDLE"
	fi
	coproc_line FLOOD_PROC 400
	tap_result "$([[ $LINE == "mpa $MPA" ]] && echo 0 || echo 1)" \
		"$what: $MPA more connections complete MPA and stay silent" "$LINE"
	if [ "$keeps" = all ]; then
		tap_result "$(($(qp_count) >= MPA ? 0 : 1))" "$what: the server holds a QP for each" "$(qp_count) QPs"
	else
		tap_diag "$what: the server holds $(qp_count) QPs"
	fi
	"$check" "$what: under $MPA silent connections"
	tap_wait "$what: the idle connections it let wait time out (MPA, 10 s)" 60 eval '(($(idle_admitted) == 0))'
	coproc_end FLOOD_PROC
	tap_wait "$what: the flood's connections are gone: no QP left on $dev" 120 no_qps
	tap_wait "$what: no connection left on port $port" 60 no_port_conns || tap_diag "$(port_conns | head -n 20)"
}

ulp_setup $dev $nd $mac $ip $ulp_port
tap_check "second address $src on $nd" ip addr add "$src/24" dev "$nd"
flood "rdma_cm listener" "$ulp_port" timed_write all
tap_check "stop the server" ulp_ctl stop
tap_check "rmmod rsiw_ulp" ulp_unload

tap_check "tmpfs to export on $export_dir" nfs_export_tmpfs "$export_dir" 64M || tap_bail "no tmpfs"
tap_check "knfsd on rdma port $NFS_RDMA_PORT" nfs_server_start "$export_dir" ||
	tap_bail "cannot start the NFS server"
timed_mount "knfsd: before the flood"
MPA=$NFS_MPA flood "knfsd" "$NFS_RDMA_PORT" timed_mount its-own --any-ulp
tap_check "stop the NFS server" nfs_server_stop
tap_check "undo the NFS setup" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
