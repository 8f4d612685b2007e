#!/usr/bin/env bash
# rsiw's MPA connection manager against the kernel's C siw, in one VM: rsiw on
# one end of a veth pair (198.18.0.1), siw on the other end (198.18.0.2),
# which lives in a network namespace so that the connections really cross the
# veth (siw makes its sockets in the namespace of the process that drives it).
# Checks, with the MPA frames captured on the veth (decoded by tshark on the
# host afterwards: cm-basic.host):
# - an rping client on siw connects to rsiw's test ULP server: MPA rev 2
#   Request and Reply with CRC and RFC 6581 IRD/ORD; the server rejects it
#   (rping sends no HELLO), rping sees REJECTED and the server counts it;
# - rsiw to rsiw (test ULP client and server): ESTABLISHED at both ends, a
#   SEND crosses, and the server sees both connections close;
# - rsiw connects (test ULP client) to an rping server on siw (ESTABLISHED);
# - a connect between two rsiw endpoints that the server rejects carries the
#   server's private data back (MPA Reply with R=1);
# - the timeouts, set to 3 s through the module parameters mpa_timeout_ms
#   and connect_timeout_ms (a value out of range is refused with EINVAL and
#   a log line): a TCP client that never sends an MPA Request is dropped
#   after the MPA timeout; a connect to a TCP listener that never sends an
#   MPA Reply, and a connect whose SYNs go unanswered, each end in
#   RDMA_CM_EVENT_UNREACHABLE (ETIMEDOUT) after the timeout, and leave no
#   socket, CM id or QP behind;
# - RFC 6581 section 8: an enhanced Reply rsiw cannot comply with (ORD above
#   its IRD, no RTR type it can send) gets a Terminate 2/0/0x06 or 2/0/0x07
#   as rsiw's only FPDU, RDMA_CM_EVENT_CONNECT_ERROR (-EPROTO) for the ULP;
# - a flood of TCP connections that send no MPA Request does not flood the
#   kernel log: rsiw's line for them is rate-limited, and the count of the
#   lines dropped is logged later;
# - no splat, no leak once everything is torn down.
# timeout: 600
# Helpers are called through tap_check and trap:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma rping dumpcap ss timeout

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"

if rsiw_is_reference; then
	tap_skip "rsiw connection manager against siw" "needs rsiw and siw side by side (RSIW_MODULE=$RSIW_MODULE)"
	tap_done
fi

a=198.18.0.1 b=198.18.0.2 port=20890 sport=20891 silent=20892
# Nobody owns $nobody: a static neighbour entry sends its frames to a MAC
# that no interface has, so the SYNs vanish on the veth.
nobody=198.18.0.3
pids=()
stop_bg() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	pids=()
}
ns=cmns
inns() { ip netns exec $ns "$@"; }
trap 'stop_bg; ulp_unload; inns rdma link delete siw1 2>/dev/null; ip netns del $ns 2>/dev/null; cleanup; modprobe -r siw 2>/dev/null' EXIT

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "load siw" modprobe siw || tap_bail "cannot load siw"
# Shorter connection timeouts (10 s by default), checked below; a value out of
# range is refused with EINVAL and a log line.
params=/sys/module/rsiw/parameters
kmsg_mark
out=$(echo 50 2>&1 >"$params/mpa_timeout_ms")
st=$?
tap_result "$( ((st != 0)) && grep -q 'Invalid argument' <<<"$out" && [ "$(cat "$params/mpa_timeout_ms")" = 10000 ]; echo $?)" \
	"mpa_timeout_ms=50 is refused with EINVAL, the value stays 10000" "status $st: $out"
tap_match "the refusal is logged" "parameter mpa_timeout_ms: '50' refused" "$(kmsg_since_mark)"
TIMEOUT_MS=3000
tap_check "connect_timeout_ms and mpa_timeout_ms set to $TIMEOUT_MS" \
	eval "echo $TIMEOUT_MS >$params/connect_timeout_ms && echo $TIMEOUT_MS >$params/mpa_timeout_ms"
tap_check "veth pair cmv0 ($a) / cmv1 ($b, namespace $ns)" \
	netdev_veth_ns "$ns" cmv0 02:52:53:49:57:30 "$a/24" cmv1 02:52:53:49:57:31 "$b/24" ||
	tap_bail "cannot create the veth pair"
tap_check "rdma link add rsiw0 on cmv0" rdma_link_add rsiw0 cmv0 || tap_bail "no rsiw0"
tap_check "rdma link add siw1 type siw on cmv1 (in $ns)" inns rdma link add siw1 type siw netdev cmv1 ||
	tap_bail "no siw1"

[ -f "$ULP_KO" ] || tap_bail "$ULP_KO does not exist (make module)"
kmemleak_report "no leak from the setup"
kmsg_mark
ulp_insmod || tap_bail "cannot load the ULP"
tap_check "ULP server listens on rsiw0 $a:$port" ulp_ctl "server addr=$a port=$port" ||
	tap_bail "cannot start the ULP server"

cap=$TEST_TMP/mpa.pcap
dumpcap -q -i cmv0 -f "tcp port $port or tcp port $sport" -w "$cap" >"$TEST_TMP/dumpcap.log" 2>&1 &
pids+=($!)
tap_wait "capture on cmv0 started" 60 test -s "$cap"

# rsiw0's connection counters (rdma statistic): each case below must move
# exactly the ones it names.
CM_NAMES=(cm_established cm_rejected cm_failed cm_mpa_timeouts cm_handshakes_refused)
# cm_mark: remember the counters.
cm_mark() {
	rsiw_is_reference || { hw_read rsiw0 "${CM_NAMES[@]}"; cm0=$HW_NOW; }
}
# cm_counted DESC WANT: since cm_mark they moved by WANT ("name+n ...", in
# CM_NAMES order) and no other.
cm_counted() {
	local got
	if rsiw_is_reference; then
		tap_skip "$1: rsiw0 counted $2" "rsiw's own counters"
		return
	fi
	hw_read rsiw0 "${CM_NAMES[@]}"
	got=$(hw_deltas "$cm0" "$HW_NOW")
	tap_result "$([ "$got" = "$2" ]; echo $?)" "$1: rsiw0 counted $2" "they moved by: ${got:-nothing}"
}

# 1. siw (rping client) connects to rsiw (ULP server), which rejects it with
# private data (rping sends no HELLO).
cm_mark
inns timeout 20 rping -c -a $a -p $port -C 1 -S 64 -v >"$TEST_TMP/rping-c" 2>&1
tap_match "rping on siw is rejected by the rsiw server" "RDMA_CM_EVENT_REJECTED" "$(cat "$TEST_TMP/rping-c")"
tap_match "the rsiw server counted the reject" "accepted=0 rejected=1 " "$(cat "$ULP/status")"
cm_counted "reject of siw's connect" "cm_rejected+1"

# closed_total N: whether the ULP server counted N connections closed or failed.
closed_total() {
	awk -v n="$1" '{ for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == "closed" || f[1] == "failed") t += f[2] } }
		END { exit t != n }' "$ULP/status"
}

# 2. rsiw (ULP client) to rsiw (ULP server): both ends established. The ULP's
# connect test passes only on RDMA_CM_EVENT_ESTABLISHED.
cm_mark
ulp_ctl clear
ulp_ctl "client addr=$a port=$port test=connect" >/dev/null
res=$(cat "$ULP/result")
tap_diag "ULP client: $res"
tap_match "the rsiw client got connected to the rsiw server (ESTABLISHED)" "^ok [0-9]+ - connect " "$res"
tap_match "the rsiw server accepted the rsiw client" "accepted=1 " "$(cat "$ULP/status")"
ulp_ctl clear
ulp_ctl "client addr=$a port=$port test=send size=1" >/dev/null
res=$(cat "$ULP/result")
tap_match "a SEND crosses the rsiw-rsiw connection" "^ok [0-9]+ - send " "$res"
tap_wait "the server saw both connections close" 20 closed_total 2
tap_diag "ULP status: $(cat "$ULP/status")"
cm_counted "two rsiw-rsiw connections, both ends on rsiw0" "cm_established+4"

# 3. rsiw (ULP client) connects to siw (rping server).
inns timeout 60 rping -s -a $b -p $sport -C 1 -S 64 -v >"$TEST_TMP/rping-s" 2>&1 &
pids+=($!)
tap_wait "the siw rping server listens on $b:$sport" 30 \
	sh -c "ip netns exec $ns ss -Hltn | grep -q '$b:$sport'"
cm_mark
ulp_ctl clear
ulp_ctl "client addr=$b port=$sport test=connect" >/dev/null
res=$(cat "$ULP/result")
tap_diag "ULP client: $res"
tap_match "the rsiw client got connected to the siw server (ESTABLISHED)" "^ok [0-9]+ - connect " "$res"
kill "${pids[-1]}" 2>/dev/null
tap_diag "rping -s: $(cat "$TEST_TMP/rping-s")"
cm_counted "connection to siw" "cm_established+1"

# 4. rsiw to rsiw, rejected with private data.
cm_mark
ulp_ctl clear
ulp_ctl "client addr=$a port=$port test=reject" >/dev/null
tap_match "a rejected connect carries the server's private data" "^ok .*reject" "$(cat "$ULP/result")"
cm_counted "rsiw-rsiw reject (the server's and the client's end)" "cm_rejected+2"

# 5. A TCP client that sends no MPA Request is dropped after the MPA timeout.
cm_mark
start=$(date +%s)
inns timeout 20 bash -c "exec 3<>/dev/tcp/$a/$port && cat <&3 >/dev/null"
took=$(($(date +%s) - start))
if ((took >= TIMEOUT_MS / 1000 - 1 && took < TIMEOUT_MS / 1000 + 10)); then
	tap_ok "a silent TCP client is dropped after the MPA timeout (${took} s)"
else
	tap_fail "a silent TCP client is dropped after the MPA timeout" "closed after ${took} s"
fi
tap_match "the timeout is logged" "no valid MPA Request from $b:[0-9]*: Failed\(Timeout\)" "$(kmsg_since_mark)"
cm_counted "silent TCP client" "cm_failed+1 cm_mpa_timeouts+1"

# qp_count: how many QPs rsiw0 has.
qp_count() { rdma res show qp link rsiw0/1 2>/dev/null | grep -c "lqpn"; }
# connect_error DESC DST PORT: the ULP connects to DST:PORT, which never
# answers; the connect must end in RDMA_CM_EVENT_UNREACHABLE (7) with
# -ETIMEDOUT after rsiw's timeout (TIMEOUT_MS), within 10 s of slack, and
# leave no socket, CM id or QP.
connect_error() {
	local desc=$1 dst=$2 dport=$3 qps res ev st ms left
	qps=$(qp_count)
	ulp_ctl clear
	ulp_ctl "client addr=$dst port=$dport test=connect_error" >/dev/null
	res=$(cat "$ULP/result")
	tap_diag "ULP client: $res"
	tap_match "$desc: the connect fails" "^ok [0-9]+ - connect_error " "$res"
	ev=$(sed -nE 's/^# connect_error: event=([0-9]+) .*/\1/p' <<<"$res")
	st=$(sed -nE 's/^# connect_error: .* status=(-?[0-9]+) .*/\1/p' <<<"$res")
	ms=$(sed -nE 's/^# connect_error: .* ms=([0-9]+)$/\1/p' <<<"$res")
	tap_result "$([ "$ev" = 7 ] && [ "$st" = -110 ] && echo 0 || echo 1)" \
		"$desc: RDMA_CM_EVENT_UNREACHABLE with -ETIMEDOUT" "event ${ev:-none} status ${st:-none}"
	tap_result "$((${ms:-0} >= TIMEOUT_MS - 500 && ${ms:-0} <= TIMEOUT_MS + 10000 ? 0 : 1))" \
		"$desc: after the $TIMEOUT_MS ms timeout (${ms:-?} ms)" "${ms:-no} ms from rdma_connect to the event"
	# A released socket may linger orphaned in FIN-WAIT (the peer never
	# closes); one still connecting or connected would be rsiw's.
	left=$(ss -Htan state syn-sent state established state close-wait dst "$dst:$dport" 2>&1)
	tap_result "$([ -z "$left" ] && echo 0 || echo 1)" "$desc: no socket left connecting or connected" "$left"
	left=$(rdma res show cm_id 2>&1 | grep -F "dst-addr $dst:$dport")
	tap_result "$([ -z "$left" ] && echo 0 || echo 1)" "$desc: no CM id left" "$left"
	tap_result "$([ "$(qp_count)" = "$qps" ] && echo 0 || echo 1)" "$desc: no QP left" \
		"QPs on rsiw0 before $qps, now $(qp_count)" "$(rdma res show qp link rsiw0/1 2>&1)"
}

# 6. rsiw connects to a TCP listener that never sends an MPA Reply.
# ip netns exec execs python3: $! is the listener itself, which stop_bg ends.
ip netns exec "$ns" python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(4)
held = []
while True:
    c, _ = s.accept()
    held.append(c)  # never read, never answered
' "$b" "$silent" >"$TEST_TMP/silent.log" 2>&1 &
pids+=($!)
tap_wait "a silent TCP listener runs on $b:$silent" 30 \
	sh -c "ip netns exec $ns ss -Hltn | grep -q '$b:$silent'"
cm_mark
connect_error "MPA Reply timeout" "$b" "$silent"
cm_counted "MPA Reply timeout" "cm_failed+1 cm_mpa_timeouts+1"
tap_match "rsiw logs the MPA Reply timeout" "MPA negotiation with $b:$silent failed: Timeout" "$(kmsg_since_mark)"

# 7. rsiw connects to an address nobody owns: the SYNs get no answer.
tap_check "static neighbour for $nobody (MAC nobody has)" \
	ip neigh replace "$nobody" lladdr 02:52:53:49:57:3f dev cmv0 nud permanent
cm_mark
connect_error "TCP connect timeout" "$nobody" "$port"
cm_counted "TCP connect timeout" "cm_failed+1"

# 8. RFC 6581 section 8: rsiw connects to a responder (hostile/peer.py) whose
# enhanced Reply it cannot comply with. rsiw must send one Terminate, its
# first FPDU, with the RFC's Layer/EType/Code and close; the ULP gets
# RDMA_CM_EVENT_CONNECT_ERROR (6) with -EPROTO, and nothing is left.
# setup_terminate KIND EXPECT PORT WHAT
setup_terminate() {
	local kind=$1 expect=$2 dport=$3 desc="enhanced Reply with $4" log=$TEST_TMP/respond-$1.log
	local qps res ev st pid pst left
	qps=$(qp_count)
	cm_mark
	inns python3 "$SELFTESTS/hostile/peer.py" --addr "$b" --port "$dport" --respond "$kind" \
		--expect "$expect" >"$log" 2>&1 &
	pid=$!
	if ! wait_for 30 grep -q '^listening' "$log"; then
		tap_fail "$desc: the responder listens on $b:$dport" "$(cat "$log")"
		kill "$pid" 2>/dev/null
		return
	fi
	ulp_ctl clear
	ulp_ctl "client addr=$b port=$dport test=connect_error" >/dev/null
	res=$(cat "$ULP/result")
	ev=$(sed -nE 's/^# connect_error: event=([0-9]+) .*/\1/p' <<<"$res")
	st=$(sed -nE 's/^# connect_error: .* status=(-?[0-9]+) .*/\1/p' <<<"$res")
	tap_result "$([ "$ev" = 6 ] && [ "$st" = -71 ] && echo 0 || echo 1)" \
		"$desc: RDMA_CM_EVENT_CONNECT_ERROR with -EPROTO" "$res"
	wait "$pid"
	pst=$?
	tap_result "$pst" "$desc: rsiw sends Terminate $expect as its only FPDU, then closes" "$(cat "$log")"
	tap_match "$desc: rsiw logs the Terminate, naming the device" \
		"rsiw0: sent Terminate layer 2 etype 0 code ${expect##*/} to ${b//./\\.}:$dport" "$(dmesg)"
	left=$(ss -Htan state syn-sent state established state close-wait dst "$b:$dport" 2>&1)
	left+=$(rdma res show cm_id 2>&1 | grep -F "dst-addr $b:$dport")
	tap_result "$([ -z "$left" ] && [ "$(qp_count)" = "$qps" ] && echo 0 || echo 1)" \
		"$desc: no socket, CM id or QP left" "$left" "QPs on rsiw0 before $qps, now $(qp_count)"
	cm_counted "$desc" "cm_failed+1"
}
setup_terminate ird 2/0/0x06 20893 "an ORD above rsiw's IRD"
# An RTR needs peer-to-peer mode, which rsiw asks for only when told which RTR.
mpa=/sys/kernel/debug/rsiw/mpa
tap_check "rsiw asks for a Write RTR" sh -c "echo rtr=write >$mpa"
setup_terminate rtr 2/0/0x07 20894 "no RTR type rsiw can send"
tap_check "rsiw back to no RTR" sh -c "echo rtr=none >$mpa"

sleep 2
stop_bg
# The host decodes the capture (cm-basic.host): tshark takes seconds there,
# close to a minute under TCG.
tap_check "capture kept for the host's check" cp "$cap" "$TEST_OUT/mpa.pcap"
echo "$a $b $sport" >"$TEST_OUT/mpa.addrs"

# 9. A peer that opens connections as fast as it can, each sending garbage
# instead of an MPA Request, cannot flood the kernel log: rsiw logs at most 10
# of them in 5 s (the kernel's default rate limit for each line of code; one
# window may have begun before the flood), then how many it dropped.
flood=50
# A mark of its own; the splat check at the end goes back to the first one.
first_mark=$KMSG_MARK
kmsg_mark
start=$(date +%s%3N)
inns bash -c 'for ((i = 0; i < $2; i++)); do
	exec 3<>"/dev/tcp/$1/$3" && printf "not an MPA Request frame" >&3
	exec 3>&-
done' flood "$a" "$flood" "$port"
flood_done() { ! ss -Htan state established state close-wait "( sport = :$port )" dst "$b" | grep -q .; }
tap_wait "rsiw closed all $flood connections" 60 flood_done
ms=$(($(date +%s%3N) - start))
lines=$(kmsg_since_mark | grep -c "rsiw0: no valid MPA Request from ${b//./\\.}:")
tap_result "$((lines >= 1 && lines <= 10 * (ms / 5000 + 2) ? 0 : 1))" \
	"$flood failed setups in $ms ms: rsiw logged at most 10 lines per 5 s" "$lines lines"
if ((lines < flood)); then
	# The count of dropped lines comes with the first line of the next window.
	sleep 6
	inns bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "not an MPA Request frame" >&3' _ "$a" "$port"
	suppressed() { kmsg_since_mark | grep -qE '^rsiw::cm: [0-9]+ callbacks suppressed$'; }
	tap_wait "rsiw logs how many lines it dropped" 20 suppressed
fi
KMSG_MARK=$first_mark

tap_check "stop the ULP server" ulp_ctl stop
tap_check "rmmod rsiw_ulp" ulp_unload
tap_check "rdma link delete siw1" inns rdma link delete siw1
tap_check "rdma link delete rsiw0" rdma_link_del rsiw0
# After rsiw0 is gone: unloading siw unregisters every device with the siw driver id.
tap_check "unload siw" modprobe -r siw
check_no_splat "no kernel splat"
tap_done
