#!/usr/bin/env bash
# A peer that stops reading must not hold the device's workers. A peer
# (selftests/hostile/stall.py) opens CONNS (200) connections to the test ULP's
# server with a receive buffer of a few kilobytes, asks each for a Read
# Response of SIZE (256 KiB) and never reads: its window closes, and the
# device's send buffer for each connection fills. Checked: every connection's
# socket on the device side has data queued (the stall is real); no task
# sleeps in TCP's wait for send-buffer room (sk_stream_wait_memory: a
# transmit that blocks holds its worker for as long as the peer likes); other
# connections still move data: a Write, a Read and a Send through the test
# ULP's own client (data checked), and NVMe-oF (nvmet-rdma and nvme-rdma in
# this VM, a null_blk namespace) fio with crc32c verification, its rate
# before and during the stall shown; then half the stalled connections are
# reset by the peer and the other half torn down by the device's side (the
# server stops with Read Responses still queued), and nothing is left: no QP,
# no socket on the port, no leak, no splat.
# timeout: 900
# Functions run through tap_wait look unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma python3 ss nvme fio

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:41 ip=198.18.0.1 port=20889 svcid=$NVME_RDMA_PORT
nqn=nqn.2014-08.org.rsiw:selftest-zero-window
# make check-full: 600.
CONNS=${ZERO_WINDOW_CONNS:-200}
SIZE=${ZERO_WINDOW_SIZE:-262144}
STALL=$SELFTESTS/hostile/stall.py

trap 'coproc_end STALL_PROC; ulp_cleanup; ulp_unload; cleanup' EXIT

# nvme_fio WHAT: 4 MiB of 4 KiB random writes on the NVMe namespace, read back
# and verified (crc32c); its write rate as diagnostics.
nvme_fio() {
	local out st
	out=$(timeout -k 10 300 fio --name=zw --filename="$ns" --rw=randwrite --bs=4k --size=4m --direct=1 \
		--ioengine=libaio --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 2>&1)
	st=$?
	tap_result "$([ "$st" = 0 ] && grep -q 'err= 0' <<<"$out"; echo $?)" \
		"$1: NVMe-oF fio 4 KiB random writes, read back, crc32c verified" "exit status $st" \
		"$(tail -n 20 <<<"$out")"
	tap_diag "$1: $(grep -E '^ +WRITE: ' <<<"$out" | sed -E 's/^ +//; s/ \(.*//')"
}

# stalled_sockets: how many of the device's connections on the port have at
# least 4 KiB they could not send.
stalled_sockets() {
	ss -tnH state established "( sport = :$port )" 2>/dev/null | awk '$2 >= 4096 { n++ } END { print n + 0 }'
}

# all_stalled: whether every stalled connection has data queued.
# shellcheck disable=SC2317 # called through tap_wait
all_stalled() {
	(($(stalled_sockets) >= CONNS))
}

# blocked_in_send: the tasks sleeping for send-buffer room, "pid comm" a line.
blocked_in_send() {
	local f pid
	for f in /proc/[0-9]*/stack; do
		grep -qs sk_stream_wait_memory "$f" || continue
		pid=${f#/proc/}
		pid=${pid%/stack}
		echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null)"
	done
}

# port_sockets: the TCP sockets on the port (not in TIME-WAIT), one a line.
port_sockets() {
	ss -tanH state all "( sport = :$port or dport = :$port )" 2>/dev/null | awk '$1 != "TIME-WAIT"'
}

# shellcheck disable=SC2317 # called through tap_wait
no_port_sockets() {
	[ -z "$(port_sockets)" ]
}

# shellcheck disable=SC2317 # called through tap_wait
no_qps() {
	[ "$(timeout 20 rdma res show 2>/dev/null |
		awk -v d="$dev:" '$2 == d { for (i = 3; i < NF; i++) if ($i == "qp") print $(i + 1) }')" = 0 ]
}

ulp_setup $dev $nd $mac $ip $port
tap_check "NVMe-oF over $dev: a 64 MiB null_blk namespace, nvmet-rdma on $ip:$svcid, nvme connect" \
	nvme_rdma_loop rsiwnull4 64 "$nqn" "$ip" "$svcid" || tap_bail "cannot set up NVMe-oF"
ns=$(tail -n 1 <<<"$OUT")
nvme_fio "before the stall"
kmsg_mark
ulimit -n $((CONNS + 256))
t0=$(date +%s)
coproc STALL_PROC { exec python3 "$STALL" --addr "$ip" --port "$port" --conns "$CONNS" --size "$SIZE" 2>&1; }
coproc_line STALL_PROC 600
tap_result "$([[ $LINE == "stalled $CONNS" ]] && echo 0 || echo 1)" \
	"the peer stalls $CONNS connections with a Read Request for $SIZE octets each" "$LINE"
tap_diag "$CONNS connections stalled in $(($(date +%s) - t0)) s"
tap_wait "the device has data queued on all $CONNS connections (zero window)" 120 all_stalled ||
	tap_diag "$(ss -tnH state established "( sport = :$port )")"
blocked=$(blocked_in_send)
tap_result "$([ -z "$blocked" ] && echo 0 || echo 1)" \
	"no task waits for send-buffer room (no worker held by the stalled peer)" \
	"sleeping in sk_stream_wait_memory:" "$blocked"

# The stalled peer costs other connections nothing.
for t in write read send; do
	ulp_ctl clear
	err=$(ulp_ctl "client addr=$ip port=$port test=$t size=65537")
	tap_result $? "meanwhile, a $t of 64 KiB + 1 through the test ULP" "$err" "$(cat "$ULP/result")"
done
nvme_fio "during the stall"

printf 'close %d\n' $((CONNS / 2)) >&"${STALL_PROC[1]}"
coproc_line STALL_PROC
tap_result "$([[ $LINE == "open $((CONNS - CONNS / 2))" ]] && echo 0 || echo 1)" \
	"the peer resets $((CONNS / 2)) stalled connections" "$LINE"
# shellcheck disable=SC2016 # evaluated by tap_wait
tap_wait "their sockets are gone on the device's side" 60 \
	eval '(($(stalled_sockets) <= CONNS - CONNS / 2))'
# The rest are torn down from the device's side, with their Read Responses
# still queued.
tap_check "stop the server with $((CONNS - CONNS / 2)) connections stalled" ulp_ctl stop
tap_check "nvme disconnect" nvme_disconnect "$nqn"
tap_wait "no QP left on $dev" 120 no_qps
coproc_end STALL_PROC
tap_wait "no TCP socket left on port $port" 60 no_port_sockets || tap_diag "$(port_sockets)"
tap_check "rmmod rsiw_ulp" ulp_unload
tap_check "undo the NVMe-oF setup" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
