#!/usr/bin/env bash
# rsiw's MPA connection manager against the kernel's C siw, in one VM: rsiw on
# one end of a veth pair (198.18.0.1), siw on the other end (198.18.0.2),
# which lives in a network namespace so that the connections really cross the
# veth (siw makes its sockets in the namespace of the process that drives it).
# Checks, with the MPA frames captured on the veth and decoded by tshark:
# - rsiw listens (test ULP server) and accepts an rping client on siw: MPA
#   rev 2 Request and Reply with CRC and RFC 6581 IRD/ORD, QP in RTS, the
#   server sees the connection and its close when rping goes away;
# - rsiw connects (test ULP client) to an rping server on siw;
# - a connect between two rsiw endpoints that the server rejects carries the
#   server's private data back (MPA Reply with R=1);
# - a TCP client that never sends an MPA Request is dropped after the MPA
#   timeout;
# - no splat, no leak once everything is torn down.
# timeout: 600
# Helpers are called through tap_check and trap:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma rping tshark dumpcap ss timeout

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"

if rsiw_is_reference; then
	tap_skip "rsiw connection manager against siw" "needs rsiw and siw side by side (RSIW_MODULE=$RSIW_MODULE)"
	tap_done
fi

a=198.18.0.1 b=198.18.0.2 port=20890 sport=20891
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
veth_ns() {
	ip netns add "$ns" || return
	ip link add cmv0 address 02:52:53:49:57:30 type veth peer name cmv1 \
		address 02:52:53:49:57:31 netns "$ns" || return
	_netdevs+=(cmv0)
	ip addr add "$a/24" dev cmv0 && ip link set cmv0 up &&
		inns ip addr add "$b/24" dev cmv1 && inns ip link set cmv1 up && inns ip link set lo up
}
tap_check "veth pair cmv0 ($a) / cmv1 ($b, namespace $ns)" veth_ns ||
	tap_bail "cannot create the veth pair"
tap_check "rdma link add rsiw0 on cmv0" rdma_link_add rsiw0 cmv0 || tap_bail "no rsiw0"
tap_check "rdma link add siw1 type siw on cmv1 (in $ns)" inns rdma link add siw1 type siw netdev cmv1 ||
	tap_bail "no siw1"

[ -f "$ULP_KO" ] || tap_bail "$ULP_KO does not exist (make module)"
kmemleak_forget
kmsg_mark
tap_check "insmod rsiw_ulp" insmod "$ULP_KO" || tap_bail "cannot load the ULP"
tap_check "ULP server listens on rsiw0 $a:$port" ulp_ctl "server addr=$a port=$port" ||
	tap_bail "cannot start the ULP server"

cap=$TEST_TMP/mpa.pcap
dumpcap -q -i cmv0 -f "tcp port $port or tcp port $sport" -w "$cap" >"$TEST_TMP/dumpcap.log" 2>&1 &
pids+=($!)
tap_wait "capture on cmv0 started" 60 test -s "$cap"

# 1. siw (rping client) connects to rsiw (ULP server), which rejects it with
# private data (rping sends no HELLO).
inns timeout 20 rping -c -a $a -p $port -C 1 -S 64 -v >"$TEST_TMP/rping-c" 2>&1
tap_match "rping on siw is rejected by the rsiw server" "RDMA_CM_EVENT_REJECTED" "$(cat "$TEST_TMP/rping-c")"
tap_match "the rsiw server counted the reject" "accepted=0 rejected=1 " "$(cat "$ULP/status")"

# 2. rsiw (ULP client) to rsiw (ULP server): both ends established.
ulp_ctl clear
ulp_ctl "client addr=$a port=$port test=send size=1" >/dev/null
res=$(cat "$ULP/result")
tap_match "the rsiw server accepted the rsiw client" "accepted=1 " "$(cat "$ULP/status")"
tap_no_match "the rsiw client got connected" "waiting for the connection|rejected" "$res"
tap_match "a SEND crosses the rsiw-rsiw connection" "^ok " "$res"
tap_wait "the server saw the connection close" 20 grep -Eq "closed=1 |failed=1 " "$ULP/status"
tap_diag "ULP status: $(cat "$ULP/status")"

# 3. rsiw (ULP client) connects to siw (rping server).
inns timeout 60 rping -s -a $b -p $sport -C 1 -S 64 -v >"$TEST_TMP/rping-s" 2>&1 &
pids+=($!)
tap_wait "the siw rping server listens on $b:$sport" 30 \
	sh -c "ip netns exec $ns ss -Hltn | grep -q '$b:$sport'"
ulp_ctl clear
ulp_ctl "client addr=$b port=$sport test=send size=1" >/dev/null
res=$(cat "$ULP/result")
tap_no_match "the rsiw client got connected to the siw server" "waiting for the connection|rejected" "$res"
tap_diag "ULP client: $res"
kill "${pids[-1]}" 2>/dev/null
tap_diag "rping -s: $(cat "$TEST_TMP/rping-s")"

# 4. rsiw to rsiw, rejected with private data.
ulp_ctl clear
ulp_ctl "client addr=$a port=$port test=reject" >/dev/null
tap_match "a rejected connect carries the server's private data" "^ok .*reject" "$(cat "$ULP/result")"

# 5. A TCP client that sends no MPA Request is dropped after the MPA timeout.
start=$(date +%s)
inns timeout 20 bash -c "exec 3<>/dev/tcp/$a/$port && cat <&3 >/dev/null"
took=$(($(date +%s) - start))
if ((took >= 8 && took < 20)); then
	tap_ok "a silent TCP client is dropped after the MPA timeout (${took} s)"
else
	tap_fail "a silent TCP client is dropped after the MPA timeout" "closed after ${took} s"
fi
tap_match "the timeout is logged" "no valid MPA Request from $b:[0-9]*: Failed\(Timeout\)" "$(kmsg_since_mark)"

sleep 2
stop_bg
# One line per MPA frame: source, destination port, Request key, Reply key,
# C, R, Rev, private data length, private data (RFC 6581 enhanced data first).
tshark -r "$cap" -Y iwarp_mpa -T fields -E separator=, -e ip.src -e tcp.dstport \
	-e iwarp_mpa.key.req -e iwarp_mpa.key.rep -e iwarp_mpa.crc_flag -e iwarp_mpa.rej_flag \
	-e iwarp_mpa.rev -e iwarp_mpa.pdlength -e iwarp_mpa.privatedata >"$TEST_TMP/mpa.txt" 2>"$TEST_TMP/tshark.err"
mpa=$(cat "$TEST_TMP/mpa.txt")
tap_diag "MPA frames:" "$mpa"
req=4d504120494420526571204672616d65 rep=4d504120494420526570204672616d65
y='(1|True)' n='(0|False)'
# 8 octets of "BADHELLO" after the 4 octets of enhanced data.
tap_match "rsiw rejects siw's Request: Reply rev 2, R=1, enhanced data + private data" \
	"^${a//./\\.},[0-9]+,,$rep,$y,$y,2,12,[0-9a-f]{8}42414448454c4c4f$" "$mpa"
tap_match "rsiw's Request to siw: rev 2, C=1, enhanced data + private data" \
	"^${a//./\\.},$sport,$req,,$y,$n,2,[0-9]+,[0-9a-f]{8}" "$mpa"
tap_match "siw accepts: Reply rev 2, C=1, R=0, with enhanced data" \
	"^${b//./\\.},[0-9]+,,$rep,$y,$n,2,[0-9]+,[0-9a-f]{8}" "$mpa"

tap_check "stop the ULP server" ulp_ctl stop
tap_check "rmmod rsiw_ulp" ulp_unload
tap_check "rdma link delete siw1" inns rdma link delete siw1
tap_check "rdma link delete rsiw0" rdma_link_del rsiw0
# After rsiw0 is gone: unloading siw unregisters every device with the siw driver id.
tap_check "unload siw" modprobe -r siw
check_no_splat "no kernel splat"
check_kmemleak "no leak"
tap_done
