#!/usr/bin/env bash
# User-space verbs across two VMs: VM a runs rsiw (rsiw0, 198.18.0.1), VM b
# the C siw (siw0, 198.18.0.2), both through rdma-core's unmodified libsiw.
# First b serves and a connects, then the other way: rping (data validated) at
# 65535 bytes and ib_write_bw and ib_send_bw over rdma_cm at 64 KiB;
# USER_FULL=1 (make check-full) adds rping at 64 bytes and ib_read_bw. A
# tool's server side must exit 0 as well as its client. At the end, no QP is
# left on either device.
# timeout: 600
# tier: full (in make check, user-verbs runs the same tools and more between
# rsiw and the C siw in one VM, both ways; this adds a link between two
# kernels and takes about 70 s with the boot of its pair)
set -uo pipefail
case ${PAIR_ROLE:-} in
a) RSIW_MODULE=rsiw RSIW_LINK_TYPE=rsiw dev=rsiw0 ;;
b) RSIW_MODULE=siw RSIW_LINK_TYPE=siw dev=siw0 ;;
esac
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=pair.sh
. "$SELFTESTS/pair/pair.sh"
require rdma rping ib_write_bw ib_read_bw ib_send_bw

USER_PERF_ITERS=${USER_PERF_ITERS:-100}
USER_PING_COUNT=${USER_PING_COUNT:-20}
USER_FULL=${USER_FULL:-0}

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "link up ($PAIR_ADDR)" pair_link_up || tap_bail "no link"
tap_check "rdma link add $dev" rdma_link_add $dev "$PAIR_NETDEV" || tap_bail "no device"
tap_wait "the peer's address resolves" 30 pair_peer_reachable
pair_sync ready || tap_bail "$PAIR_MSG"

# The tools, each "SERVER_ARGS | CLIENT_ARGS" (the client's end with the
# server's address).
tools=(
	"rping -s -a ADDR -p PORT -S 65535 -C $USER_PING_COUNT -V | rping -c -a ADDR -p PORT -S 65535 -C $USER_PING_COUNT -V"
	"ib_write_bw -R -F -d DEV -p PORT -s 65536 -n $USER_PERF_ITERS | ib_write_bw -R -F -d DEV -p PORT -s 65536 -n $USER_PERF_ITERS ADDR"
	"ib_send_bw -R -F -d DEV -p PORT -s 65536 -n $USER_PERF_ITERS | ib_send_bw -R -F -d DEV -p PORT -s 65536 -n $USER_PERF_ITERS ADDR"
)
((USER_FULL)) && tools+=(
	"rping -s -a ADDR -p PORT -S 64 -C $USER_PING_COUNT -V | rping -c -a ADDR -p PORT -S 64 -C $USER_PING_COUNT -V"
	"ib_read_bw -R -F -d DEV -p PORT -s 65536 -n $USER_PERF_ITERS | ib_read_bw -R -F -d DEV -p PORT -s 65536 -n $USER_PERF_ITERS ADDR"
)

# expand TEMPLATE ADDR PORT: TEMPLATE with ADDR, PORT and DEV filled in.
expand() {
	local t=${1//ADDR/$2}
	t=${t//PORT/$3}
	echo "${t//DEV/$dev}"
}

# serve_all STEP: run each tool's server on this VM's address, one at a time:
# start it, tell the peer, wait for the peer's client, judge the server.
serve_all() {
	local step=$1 i port srv st pid
	for i in "${!tools[@]}"; do
		port=$((21000 + i))
		read -ra srv <<<"$(expand "${tools[$i]%% | *}" "$PAIR_ADDR" $port)"
		timeout 120 "${srv[@]}" >"$TEST_TMP/server" 2>&1 &
		pid=$!
		wait_for 30 tcp_listening $port
		pair_post "$step.$i.listening" || tap_bail "cannot post to the peer"
		pair_wait "$step.$i.done" 180 || tap_diag "$PAIR_MSG"
		wait $pid
		st=$?
		tap_result "$st" "$RSIW_MODULE server for ${srv[0]} $i (client on the peer): exit 0" \
			"\$ ${srv[*]}" "$(tail -n 15 "$TEST_TMP/server")"
	done
}

# connect_all STEP: run each tool's client against the peer's server.
connect_all() {
	local step=$1 i port cli
	for i in "${!tools[@]}"; do
		port=$((21000 + i))
		read -ra cli <<<"$(expand "${tools[$i]#* | }" "$PAIR_PEER_ADDR" $port)"
		if pair_wait "$step.$i.listening" 180; then
			tap_check "$RSIW_MODULE client ${cli[0]} $i against the peer's server" timeout 120 "${cli[@]}"
			[ "${cli[0]}" = rping ] || tap_diag "$(grep -E '^[[:space:]]*65536' <<<"$OUT")"
		else
			tap_fail "$RSIW_MODULE client ${cli[0]} $i" "$PAIR_MSG"
		fi
		pair_post "$step.$i.done" || tap_bail "cannot post to the peer"
	done
}

if [ "$PAIR_ROLE" = b ]; then
	serve_all siw-serves
	connect_all rsiw-serves
else
	connect_all siw-serves
	serve_all rsiw-serves
fi
pair_sync finished || tap_diag "$PAIR_MSG"

left=$(rdma resource show qp 2>&1 | grep -E "^link $dev/")
tap_result "$([ -z "$left" ]; echo $?)" "no QP left on $dev" "$left"
tap_done
