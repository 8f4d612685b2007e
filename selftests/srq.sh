#!/usr/bin/env bash
# Shared receive queues through the kernel test ULP (selftests/ulp/rsiw_ulp.ko),
# server and client in this VM over one dummy netdev. A server started with
# srq=1 gives all its connections one SRQ (on a PD of its own): SENDs of 0 to
# 65537 bytes with 1 or 6 SGEs, SEND_WITH_INV, WRITE and READ (whose control
# messages land in the SRQ too), and SENDs to 8 and 16 QPs at once,
# interleaved, each checked byte for byte in the SRQ slot it took. On the
# client side, a client SRQ with a direct CQ: a limit above the SRQ's size is
# refused and a post beyond it fails with ENOMEM; IB_EVENT_SRQ_LIMIT_REACHED
# comes exactly when fewer work requests than the limit remain, once, and again
# after re-arming; a QP's error flushes none of the SRQ's work requests (the
# next QP receives into them, in order); ib_drain_qp returns within 5 s for a
# QP in error and for one in RTS (it waits up to 60 s for
# IB_EVENT_QP_LAST_WQE_REACHED). Last, the SRQ server's counters: messages
# received, none flushed, no SRQ event, no failed connection.
# timeout: 900
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma ibv_devinfo

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:33 ip=198.18.0.1 port=20886 srqport=20887

# srq_status KEY: the value of KEY in the SRQ server's status line.
srq_status() {
	awk -v p="port=$srqport" -v k="$1" '$0 ~ p {
		for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == k) print f[2] } }' "$ULP/status"
}

ulp_setup $dev $nd $mac $ip $port

limits=$(ibv_devinfo -v -d $dev 2>/dev/null | grep -E '^[[:space:]]*max_srq(_wr|_sge)?:')
if [ -n "$limits" ]; then
	tap_match "$dev reports SRQ limits (max_srq, max_srq_wr, max_srq_sge)" \
		"max_srq:[[:space:]]+[1-9]" "$limits"
	tap_diag "$(tr -s ' \t\n' ' ' <<<"$limits")"
else
	tap_skip "$dev reports SRQ limits" "ibv_devinfo cannot open $dev (no user-space provider)"
fi

if err=$(ulp_ctl "server addr=$ip port=$srqport srq=1"); then
	tap_ok "start an SRQ server on $ip:$srqport"
else
	tap_fail "start an SRQ server on $ip:$srqport" "$err"
	tap_bail "cannot start the SRQ server"
fi

srv="client addr=$ip port=$srqport"
cl="client addr=$ip port=$port"
for size in 0 1 4095 4096 65537; do
	ulp_run "SRQ server: send $size" "$srv test=send size=$size"
done
ulp_run "SRQ server: send, 6 SGEs" "$srv test=send size=65537 sge=6"
ulp_run "SRQ server: send_inv" "$srv test=send_inv size=4096"
ulp_run "SRQ server: write" "$srv test=write size=65537 sge=2"
ulp_run "SRQ server: read" "$srv test=read size=65537"
ulp_run "SRQ server: 8 QPs" "$srv test=srq_many qps=8 size=65537 sge=3"
ulp_run "SRQ server: 16 QPs" "$srv test=srq_many qps=16 size=4096"

ulp_run "client SRQ: limit" "$cl test=srq_limit size=4096"
ulp_run "client SRQ: limit, SRQ server" "$srv test=srq_limit size=65537"
# The C siw never raises IB_EVENT_QP_LAST_WQE_REACHED, so ib_drain_qp of a QP
# on an SRQ waits its full 60 s there.
if rsiw_is_reference; then
	tap_skip "client SRQ: QP error, ib_drain_qp" "the C siw never raises IB_EVENT_QP_LAST_WQE_REACHED"
else
	ulp_run "client SRQ: QP error, ib_drain_qp" "$cl test=srq_drain size=4096"
	ulp_run "client SRQ: QP error, ib_drain_qp, SRQ server" "$srv test=srq_drain size=65537"
fi
# The SRQ server's earlier connections ended (one abortively): its SRQ still
# serves new ones.
ulp_run "SRQ server: send after closed connections" "$srv test=send size=65537 sge=2"
ulp_run "SRQ server: 8 QPs after closed connections" "$srv test=srq_many qps=8 size=4096"

out=$(cat "$ULP/status" 2>&1)
tap_diag "$out"
recvs=$(srq_status srq_recvs) flushed=$(srq_status srq_flushed) events=$(srq_status srq_events)
tap_result "$([ "${recvs:-0}" -gt 0 ] && [ "$flushed" = 0 ] && [ "$events" = 0 ]; echo $?)" \
	"the SRQ server received into its SRQ, flushed none of it, saw no SRQ event" \
	"srq_recvs=$recvs srq_flushed=$flushed srq_events=$events"
tap_match "the SRQ server's connections did not fail" "port=$srqport accepted=[1-9][0-9]* .*failed=0 " "$out"
tap_check "stop the servers" ulp_ctl stop
tap_check "rmmod rsiw_ulp" ulp_unload
check_no_splat "no kernel splat"
tap_done
