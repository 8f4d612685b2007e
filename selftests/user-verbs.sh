#!/usr/bin/env bash
# User-space verbs through rdma-core's unmodified libsiw, between processes of
# this VM: rping (data validated), ucmatose, rdma_server/rdma_client, rsockets
# (riostream at 64 bytes to 1 MiB, data verified) and perftest over rdma_cm
# (ib_write_bw, ib_read_bw, ib_send_bw, with a shared receive queue too,
# ib_send_lat). Each runs for rsiw with itself, and rping, rsockets at 64 KiB,
# the bandwidth tests and ib_send_lat for rsiw-siw and siw-rsiw (server
# first); USER_FULL=1 runs every tool for those pairs and for siw-siw, the
# reference. The device under test sits on one
# dummy netdev, a C siw device on another; a client binds the address of its
# device, and the TCP connection crosses loopback.
# Then selftests/user/hostile_user.c, which writes libsiw's rings behind its
# back: bad send entries (opcode, 7 and 255 SGEs, lengths that overflow, 81
# inline bytes, inline Read, unknown lkey) each complete with their error and
# the QP works on; entries flipped by a thread under the doorbell (every
# completion well-formed, the peer's QP still answered); a receive entry with
# 9 SGEs; completion slots marked valid by user space (the CQ overflows:
# IBV_EVENT_CQ_ERR); a CQ control word rewritten with garbage under traffic
# (every completion arrives, in order); an SRQ entry with 9 SGEs, and SRQ
# entries flipped while Sends take them; rings unmapped under traffic; exit
# with work in flight; fork; a registered buffer unmapped while the peer
# writes to it. Then QP counters: in auto mode the two QPs of one
# process share a counter (rdma statistic qp), which has exactly their
# Writes' payload, the port's counters count it once, and the counter goes
# with the QPs. Then
# no QP, CQ, MR or PD may be left on either device. Last, rdma link delete and
# modprobe -r while rping processes hold the device: they exit, and the
# removal completes.
# timeout: 900
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma rping ucmatose rdma_server rdma_client riostream \
	ib_write_bw ib_read_bw ib_send_bw ib_send_lat

# Sizes (make check-full raises them). USER_FULL=1 runs every tool for every
# pair; by default the cross pairs run rping, rsockets and the bandwidth tests,
# and siw-siw (the reference) does not run.
USER_PERF_ITERS=${USER_PERF_ITERS:-100}
USER_PING_COUNT=${USER_PING_COUNT:-20}
USER_FULL=${USER_FULL:-0}

dut=uv0 dutnd=uvd0 dutmac=02:52:53:49:57:50 dutip=198.18.50.1
ref=uvsiw0 refnd=uvd1 refmac=02:52:53:49:57:51 refip=198.18.51.1

beside_siw $dut $dutnd $dutmac $dutip $ref $refnd $refmac $refip
tap_check "ibv_devinfo opens $dut through libsiw" ibv_devinfo -d $dut
tap_match "$dut is an iWARP device with an active port" "transport:[[:space:]]+iWARP" "$OUT"

# The pairs: NAME SERVER_DEV SERVER_IP CLIENT_DEV CLIENT_IP.
pairs=(
	"$RSIW_MODULE-$RSIW_MODULE $dut $dutip $dut $dutip"
	"$RSIW_MODULE-siw $dut $dutip $ref $refip"
	"siw-$RSIW_MODULE $ref $refip $dut $dutip"
)
((USER_FULL)) && pairs+=("siw-siw $ref $refip $ref $refip")
port=20950

# serve DESC -- SERVER_CMD... -- CLIENT_CMD...: start the server, wait until
# it listens on $port for $serve_ip (on $serve_nd), run the client; ok when both
# exit 0 within 120 s. The commands may use $port. Moves $port on.
#
# perftest over rdma_cm (-R) races with itself: its server listens on the port
# twice, for the exchange of parameters and then for the test's QPs, and its
# client can connect the second time before the second listen (rarely, under
# TCG). TCP refuses that connection (the client reports ECONNREFUSED: as an
# error, or as the status of a REJECTED event when rsiw connects), and the
# client's own retry crashes in librdmacm. A perftest client refused that way
# is run again with a fresh server, at most twice, and says so. A refused
# client that died of a signal is named in TEST_OUT/expected-faults, so that
# the kernel's report of its fault ("traps: ib_send_bw[PID] general
# protection fault ... in librdmacm") does not fail the test as a kernel
# splat; any other process's fault still does.
serve() {
	local desc=$1 srv=() cli=() pid cpid st_s st_c stuck try
	shift 2
	while [ "$1" != -- ]; do
		srv+=("$1")
		shift
	done
	shift
	cli=("$@")
	for try in 1 2 3; do
		timeout 120 "${srv[@]}" >"$TEST_TMP/server" 2>&1 &
		pid=$!
		if ! wait_for 30 tcp_listening "$port" "$serve_ip" "$serve_nd"; then
			kill "$pid" 2>/dev/null
			wait "$pid"
			tap_fail "$desc" "the server did not listen on $serve_ip:$port within 30 s" "\$ ${srv[*]}" \
				"$(ss -Hltn "sport = :$port" 2>&1)" \
				"$(tail -n 20 "$TEST_TMP/server")"
			port=$((port + 1))
			return 1
		fi
		"${cli[@]}" >"$TEST_TMP/client" 2>&1 &
		cpid=$!
		# A client still running after 120 s hangs: what its QPs, sockets and threads
		# were doing is taken before it is killed (status 124, as timeout gives).
		stuck=
		if ! wait_for 120 client_done "$cpid"; then
			stuck=$(hang_state "$cpid")
			kill -KILL "$cpid" 2>/dev/null
		fi
		wait "$cpid"
		st_c=$?
		[ -z "$stuck" ] || st_c=124
		if [ "$st_c" != 0 ] && [ -z "$stuck" ] && ((try < 3)) && [[ ${cli[0]} == ib_* ]] &&
			grep -qE 'Connection refused|REJECTED; error: -111\.' "$TEST_TMP/client"; then
			# The server waits for the connection that was refused.
			kill "$pid" 2>/dev/null
			wait "$pid"
			tap_diag "$desc: perftest's connection was refused (try $try of 3, client exit $st_c), again:" \
				"$(tail -n 4 "$TEST_TMP/client")"
			if ((st_c > 128)) && [ -n "${TEST_OUT:-}" ]; then
				echo "$cpid ${cli[0]:0:15} refused by perftest's own race, then died of signal $((st_c - 128))" \
					>>"$TEST_OUT/expected-faults"
			fi
			continue
		fi
		wait "$pid"
		st_s=$?
		break
	done
	port=$((port + 1))
	if [ "$st_s" = 0 ] && [ "$st_c" = 0 ]; then
		tap_ok "$desc"
		return 0
	fi
	tap_fail "$desc" "server exit $st_s: ${srv[*]}" "$(tail -n 20 "$TEST_TMP/server")" \
		"client exit $st_c: ${cli[*]}" "$(tail -n 20 "$TEST_TMP/client")" ${stuck:+"$stuck"} \
		"$dut's connection counters:" \
		"$(grep -H . /sys/class/infiniband/$dut/ports/1/hw_counters/cm_* 2>&1 | sed 's|.*/||')"
	return 1
}

# client_done PID: whether the process PID has exited (a zombie counts).
client_done() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }
	[ "${stat%% *}" = Z ]
}

# hang_state PID: the RDMA QPs, TCP sockets and kernel stacks of PID's threads.
hang_state() {
	local t
	echo "the client hung; its state before the kill:"
	timeout 10 rdma resource show qp -dd 2>&1
	timeout 10 ss -tnoi state all 2>&1 | head -n 40
	for t in /proc/"$1"/task/*; do
		echo "thread ${t##*/} ($(cat "$t/comm" 2>/dev/null)):"
		cat "$t/stack" 2>/dev/null | head -n 12
	done
}

for p in "${pairs[@]}"; do
	read -r name sdev sip cdev cip <<<"$p"
	# Where serve waits for the server's listener.
	serve_ip=$sip serve_nd=$refnd
	[ "$sdev" = "$dut" ] && serve_nd=$dutnd
	# all: whether this pair runs every tool.
	all=0
	if ((USER_FULL)) || [ "$sdev" = "$cdev" ]; then
		all=1
	fi
	for size in 64 65535; do
		((all)) || [ $size != 64 ] || continue
		serve "$name: rping, $USER_PING_COUNT pings of $size bytes, validated" -- \
			rping -s -a "$sip" -p "$port" -S $size -C "$USER_PING_COUNT" -V -- \
			rping -c -a "$sip" -I "$cip" -p "$port" -S $size -C "$USER_PING_COUNT" -V
	done
	if ((all)); then
		serve "$name: ucmatose, 2 connections, 10 messages of 4096 bytes" -- \
			ucmatose -b "$sip" -p "$port" -c 2 -C 10 -S 4096 -- \
			ucmatose -s "$sip" -b "$cip" -p "$port" -c 2 -C 10 -S 4096
		serve "$name: rdma_server and rdma_client (inline send)" -- \
			rdma_server -s "$sip" -p "$port" -- \
			rdma_client -s "$sip" -p "$port"
	fi
	# rsockets: a pair that runs every tool at 64 bytes to 1 MiB, the others at
	# 64 KiB.
	rsizes="65536:100"
	((all)) && rsizes="64:100 4096:100 65536:100 1048576:10"
	for rs in $rsizes; do
		serve "$name: rsockets (riostream), ${rs#*:} transfers of ${rs%:*} bytes, verified" -- \
			riostream -b "$sip" -p "$port" -S "${rs%:*}" -C "${rs#*:}" -T v -- \
			riostream -s "$sip" -p "$port" -S "${rs%:*}" -C "${rs#*:}" -T v
	done
	for t in ib_write_bw ib_read_bw ib_send_bw; do
		serve "$name: $t -R, $USER_PERF_ITERS x 65536 bytes" -- \
			$t -R -F -d "$sdev" -p "$port" -s 65536 -n "$USER_PERF_ITERS" -- \
			$t -R -F -d "$cdev" -p "$port" -s 65536 -n "$USER_PERF_ITERS" --source_ip "$cip" "$sip"
		tap_diag "$(grep -E '^[[:space:]]*65536' "$TEST_TMP/client")"
	done
	serve "$name: ib_send_lat -R, 64 bytes" -- \
		ib_send_lat -R -F -d "$sdev" -p "$port" -s 64 -n "$USER_PERF_ITERS" -- \
		ib_send_lat -R -F -d "$cdev" -p "$port" -s 64 -n "$USER_PERF_ITERS" --source_ip "$cip" "$sip"
	tap_diag "$(grep -E '^[[:space:]]*64[[:space:]]' "$TEST_TMP/client")"
	((all)) || continue
	serve "$name: ib_send_bw -R --use-srq (a shared receive queue), $USER_PERF_ITERS x 4096 bytes" -- \
		ib_send_bw -R -F --use-srq -r 64 -d "$sdev" -p "$port" -s 4096 -n "$USER_PERF_ITERS" -- \
		ib_send_bw -R -F --use-srq -r 64 -d "$cdev" -p "$port" -s 4096 -n "$USER_PERF_ITERS" \
		--source_ip "$cip" "$sip"
done

# The hostile program, built by make module against the system's rdma-core.
hostile=$SELFTESTS/user/hostile_user
[ "$hostile" -nt "$hostile.c" ] || tap_bail "$hostile is missing or older than its source (make module)"
# hostile CASE WANT: run a case against $dut; WANT is "exit 0" or "SIGSEGV or
# exit 0" (the case makes the process touch rings it unmapped).
hostile() {
	local c=$1 want=$2 st
	timeout 60 "$hostile" "$c" $dutip $port >"$TEST_TMP/hostile" 2>&1
	st=$?
	port=$((port + 1))
	if [ "$st" = 0 ] || { [ "$want" = segv ] && [ "$st" = 139 ]; }; then
		tap_ok "hostile user: $c"
	else
		tap_fail "hostile user: $c" "exit status $st" "$(tail -n 10 "$TEST_TMP/hostile")"
	fi
}
hostile_cases=(sqe-opcode sqe-nsge7 sqe-nsge255 sqe-len-overflow sqe-inline-81 sqe-read-inline
	sqe-bad-lkey sqe-flip rqe-nsge9 cq-overflow cq-ctrl-garbage srqe-nsge9 srqe-flip exit-inflight
	fork munmap-mr)
for c in "${hostile_cases[@]}"; do
	if rsiw_is_reference; then
		tap_skip "hostile user: $c" "the completion statuses are rsiw's contract"
	else
		hostile "$c" exit
	fi
done
if rsiw_is_reference; then
	tap_skip "hostile user: unmap-rings" "rsiw's contract"
else
	hostile unmap-rings segv
fi

# QP counters (rdma statistic qp). In auto mode by QP type, the core binds each
# new user QP of the port to a counter as it enters INIT: the client and server
# QPs of "hold" share one, which must count exactly their 16 Writes of 64 KiB
# each way, and which goes with the QPs.
# counter_of QPN: the JSON object of the QP counter that lists QPN, from $OUT.
counter_of() {
	python3 -c '
import json, sys
for c in json.loads(sys.argv[1]):
    if int(sys.argv[2]) in c.get("lqpn", []):
        print(json.dumps(c))' "$OUT" "$1"
}
if rsiw_is_reference; then
	tap_skip "rdma statistic qp: a QP counter counts its QPs' payload" "rsiw's counters"
else
	tap_check "rdma statistic qp set link $dut/1 auto type on" \
		rdma statistic qp set link $dut/1 auto type on
	# The port's counters (which the core sums with the QP counters) must count the Writes
	# once, whether their QPs are bound or gone.
	port_tx=/sys/class/infiniband/$dut/ports/1/hw_counters/tx_payload_bytes
	read -r tx_before <"$port_tx"
	clqpn=
	mkfifo "$TEST_TMP/hold-in"
	timeout 120 "$hostile" hold $dutip $port <"$TEST_TMP/hold-in" >"$TEST_TMP/hold" 2>&1 &
	hold_pid=$!
	# The write end stays open, and the program with its QPs, until it is closed.
	exec 9>"$TEST_TMP/hold-in"
	port=$((port + 1))
	if wait_for 60 grep -q '^held ' "$TEST_TMP/hold"; then
		read -r _ clqpn svqpn < <(grep '^held ' "$TEST_TMP/hold")
		tap_check "rdma statistic qp show link $dut/1" rdma -j statistic qp show link $dut/1
		counter=$(counter_of "$clqpn")
		tap_result "$([ -n "$counter" ] && [ "$counter" = "$(counter_of "$svqpn")" ]; echo $?)" \
			"one QP counter holds the client QP $clqpn and the server QP $svqpn" "$OUT"
		tap_result "$(python3 -c '
import json, sys
c = json.loads(sys.argv[1])
sys.exit(0 if c["tx_payload_bytes"] == c["rx_payload_bytes"] == 16 * 65536 else 1)' "$counter"; echo $?)" \
			"the counter has the Writes' payload sent and received: 1048576 bytes each" "$counter"
		read -r tx_now <"$port_tx"
		tap_result "$([ $((tx_now - tx_before)) = 1048576 ]; echo $?)" \
			"the port counted them once while the QPs are bound" "tx_payload_bytes grew by $((tx_now - tx_before))"
	else
		tap_fail "the hold program connected and wrote" "$(tail -n 5 "$TEST_TMP/hold")"
	fi
	exec 9>&-
	wait "$hold_pid"
	tap_result $? "the hold program exited cleanly" "$(tail -n 5 "$TEST_TMP/hold")"
	tap_check "rdma statistic qp show link $dut/1 after the QPs are gone" \
		rdma -j statistic qp show link $dut/1
	tap_result "$([ -n "$clqpn" ] && [ -z "$(counter_of "$clqpn")" ]; echo $?)" \
		"the counter went with its QPs" "$OUT"
	read -r tx_now <"$port_tx"
	tap_result "$([ $((tx_now - tx_before)) = 1048576 ]; echo $?)" \
		"the port counted them once after the QPs are gone" "tx_payload_bytes grew by $((tx_now - tx_before))"
	tap_check "rdma statistic qp set link $dut/1 auto off" rdma statistic qp set link $dut/1 auto off
fi

# Every process exited: nothing of theirs is left on either device.
for d in $dut $ref; do
	for r in qp cq mr pd; do
		left=$(rdma resource show "$r" 2>&1 | grep -E "^(dev|link) $d[/ ]")
		tap_result "$([ -z "$left" ]; echo $?)" "no $r left on $d" "$left"
	done
done

# Device removal while processes hold contexts, QPs and mappings: rping pairs
# in mid-ping get the device's removal, exit, and the removal completes.
# rping_pair: start a long rping server and client on $dut; $srv_pid and
# $cli_pid name them.
rping_pair() {
	rping -s -a $dutip -p $port -S 64 -C 1000000 >"$TEST_TMP/rs" 2>&1 &
	srv_pid=$!
	wait_for 30 tcp_listening $port
	rping -c -a $dutip -p $port -S 64 -C 1000000 >"$TEST_TMP/rc" 2>&1 &
	cli_pid=$!
	port=$((port + 1))
	# Connected once the device has both QPs.
	wait_for 30 qps_on $dut 2
}

# qps_on DEV N: whether DEV has at least N QPs.
qps_on() {
	[ "$(rdma resource show qp 2>/dev/null | grep -cE "^link $1/")" -ge "$2" ]
}

# exited PID...: whether none of the processes runs any more.
exited() {
	local p
	for p in "$@"; do
		kill -0 "$p" 2>/dev/null && return 1
	done
	return 0
}

rping_pair
tap_check "rdma link delete $dut with two rping processes on it" timeout 60 rdma link delete $dut
tap_wait "both rping processes exit" 30 exited $srv_pid $cli_pid
kill $srv_pid $cli_pid 2>/dev/null
wait $srv_pid $cli_pid 2>/dev/null
tap_check "rdma link add $dut again" rdma link add $dut type "$RSIW_LINK_TYPE" netdev $dutnd
if rsiw_is_reference; then
	tap_skip "modprobe -r with rping processes on a device" "siw serves the reference device too"
else
	rping_pair
	tap_check "modprobe -r $RSIW_MODULE with two rping processes on $dut" timeout 120 modprobe -r "$RSIW_MODULE"
	tap_wait "both rping processes exit" 30 exited $srv_pid $cli_pid
	kill $srv_pid $cli_pid 2>/dev/null
	wait $srv_pid $cli_pid 2>/dev/null
fi

tap_done
