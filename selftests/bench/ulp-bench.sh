#!/usr/bin/env bash
# The test ULP's bandwidth mode, briefly: RDMA WRITE, RDMA READ and SEND of
# 4 KiB, 64 KiB and 1 MiB for one second each between a server and a client
# in this VM; each run must move data and report its bytes and MB/s (shown as
# diagnostics). make bench runs the same command for longer. Skipped when the
# device has no QPs (max_qp 0).
# timeout: 600
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
require rdma ibv_devinfo

# shellcheck source=../ulp/ulp.sh
. "$(dirname "$0")/../ulp/ulp.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:12 ip=198.18.0.1 port=20887
BENCH_SECS=${BENCH_SECS:-1}

ulp_setup $dev $nd $mac $ip $port

for op in write read send; do
	for size in 4096 65536 1048576; do
		ulp_ctl clear
		cmd="bench addr=$ip port=$port op=$op size=$size secs=$BENCH_SECS"
		out=$(ulp_ctl "$cmd")
		st=$?
		res=$(cat "$ULP/result")
		if [ "$st" = 0 ] && grep -qE "^bench op=$op size=$size .* bytes=[1-9][0-9]* ms=[0-9]+ MBps=[0-9]+\.[0-9]{3}$" <<<"$res"; then
			tap_ok "bench $op $size: $(sed -nE 's/.* (bytes=[0-9]+) .* (MBps=[0-9.]+)$/\1 \2/p' <<<"$res")"
		else
			tap_fail "bench $op $size" "\$ $cmd: exit status $st $out" "$res"
		fi
	done
done
tap_check "rmmod rsiw_ulp" ulp_unload
check_no_splat "no kernel splat"
tap_done
