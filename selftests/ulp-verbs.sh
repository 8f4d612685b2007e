#!/usr/bin/env bash
# The kernel test ULP (selftests/ulp/rsiw_ulp.ko) against the device under test:
# a server and a client in this VM, connected through rdma_cm over one dummy
# netdev, run every work request type (SEND, solicited SEND, SEND_WITH_INV,
# multi-SGE RDMA WRITE, RDMA READ, READ_WITH_INV, inline, zero-length,
# REG_MR with key rotation, LOCAL_INV; signaled and unsignaled) at sizes 0, 1,
# 4095, 4096, 65537 and 4 MiB with byte-exact data and guard checks, 64 QPs at
# once, 4 MiB WRITE, READ and SEND while CPU 1 goes offline and back, a
# reject with private data, teardown with traffic in flight, STag
# indexes not allocated in sequence (32 MRs in a row), the peer's FIN right
# behind bulk data (which must still complete), an orderly close with
# READs in flight (no reset on either side), and the MPA modes
# (Markers, CRC off, revision 1, each RTR type). The device's limits, read
# from its attributes (rsiw: 8 SGEs, 1 READ sink SGE, IRD/ORD 128, 32768 work
# requests; the C siw: 6 SGEs): SEND, receive, WRITE and READ at the SGE
# limit, one SGE more refused with EINVAL, as many READs at once as the
# negotiated ORD, and a QP of max_qp_wr (one deeper refused). Last, SEND,
# WRITE and READ over IPv6 to a second server. Each ULP test is one TAP line.
# timeout: 1500
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma ibv_devinfo ss nstat

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:11 ip=198.18.0.1 port=20886

ulp_setup $dev $nd $mac $ip $port
mpa=/sys/kernel/debug/rsiw/mpa
# The connection settings are module parameters (the debugfs file shows them,
# and what the connections negotiated).
P=/sys/module/rsiw/parameters
# Both ends are in this VM: by default (zerocopy=auto) rsiw copies payload to a
# peer on this host, where TCP would copy zero-copy data on delivery anyway.
# zerocopy=on sends it by reference all the same, so that this test exercises
# zero copy; the default is checked (and restored) at the end.
if ! rsiw_is_reference; then
	tap_check "zero copy to peers on this host too (zerocopy=on)" sh -c "echo on > $P/zerocopy"
fi

client="client addr=$ip port=$port"
for t in send recv write read read_inv send_inv recv_inv; do
	ulp_run "$t" "$client test=$t"
done
# The device's limits, as the ULP reads them from the device's attributes.
ulp_ctl clear
err=$(ulp_ctl "caps addr=$ip")
caps=$(grep '^caps ' "$ULP/result")
tap_match "the ULP reads the device's limits" "^caps max_send_sge=[0-9]+ " "$caps${err:+ ($err)}"
tap_diag "$caps"
cap() { sed -nE "s/.* $1=([0-9]+).*/\1/p" <<<"$caps"; }
send_sge=$(cap max_send_sge) recv_sge=$(cap max_recv_sge) read_sge=$(cap max_sge_rd)
# rsiw reports 8 SGEs (drivers/rsiw/qp/mod.rs MAX_SGE), the C siw 6 (SIW_MAX_SGE).
if rsiw_is_reference; then want_sge=6; else want_sge=8; fi
tap_result "$([ "$send_sge" = $want_sge ] && [ "$recv_sge" = $want_sge ] && echo 0 || echo 1)" \
	"$RSIW_MODULE reports $want_sge send and receive SGEs" "max_send_sge ${send_sge:-?} max_recv_sge ${recv_sge:-?}"
# sge=max: exactly the device's limit (the ULP fails the test if it cannot
# build that many SGEs).
for t in send recv write; do
	ulp_run "$t, device's SGE limit (send $send_sge, receive $recv_sge)" "$client test=$t size=65537 sge=max"
	ulp_run "$t, device's SGE limit, 4 MiB" "$client test=$t size=4194304 sge=max"
done
ulp_run "read, device's READ sink SGE limit ($read_sge)" "$client test=read size=65537 sge=max"
# One SGE over the limit: the post fails with EINVAL and the QP goes on.
for t in send recv write read; do
	# The C siw refuses a READ with two sink SGEs only after it has marked
	# the send queue slot (siw_post_send() in drivers/infiniband/sw/siw/
	# siw_verbs.c sets SIW_WQE_SIGNALLED, then checks num_sge != 1): every
	# later post finds the slot taken and fails with ENOMEM.
	if [ $t = read ] && rsiw_is_reference; then
		tap_skip "read with one SGE more than the device allows" \
			"the C siw's send queue is stuck after it refuses a signaled READ with 2 SGEs"
		continue
	fi
	ulp_run "$t with one SGE more than the device allows" "$client test=sge_over_$t"
done
# The device's largest IRD/ORD negotiated, and that many READs in flight.
ulp_run "READs up to the device's ORD at once" "$client test=rd_max"
# A QP of the device's max_qp_wr send and receive depth; one deeper fails.
ulp_run "QP of max_qp_wr work requests" "$client test=qp_max_wr"
ulp_run "write, unsignaled" "$client test=write size=65537 sge=3 signaled=0"
ulp_run "send, unsignaled" "$client test=send size=4096 signaled=0"
ulp_run "solicited SEND" "$client test=solicited_send size=4096"
for t in unsolicited_quiet unsignaled inline local_inv stag_random reg_mr reject; do
	ulp_run "$t" "$client test=$t"
done
# A solicited SEND wakes a CQ armed for solicited completions. The C siw
# never does: siw_rqe_complete() in drivers/infiniband/sw/siw/siw_qp.c tests
# SIW_WQE_SIGNALLED instead of the receive's solicited flag.
if rsiw_is_reference; then
	tap_skip "solicited: a solicited SEND raises a solicited-only CQ event" \
		"the C siw ignores the solicited flag of receive completions"
else
	ulp_run "solicited" "$client test=solicited"
fi
# An STag is an index and a key (RFC 5040 section 2.1); after LOCAL_INV and
# REG_MR under a new key the old key must be refused. The C siw compares only
# the index (siw_check_mem() in drivers/infiniband/sw/siw/siw_mem.c).
if rsiw_is_reference; then
	tap_skip "stale_key: a WRITE under an invalidated key fails" \
		"the C siw does not check the STag key byte"
else
	ulp_run "stale_key" "$client test=stale_key"
fi
# Zero-copy transmit: the payload of the tests above (4 MiB in ordinary
# pages, among others) went by reference, and TCP's release of it came back
# (every byte was verified by the receiver all the same).
tx_count() { awk -v k="$1" 'NR == 3 { for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == k) print f[2] } }' /sys/kernel/debug/rsiw/mpa; }
if rsiw_is_reference; then
	tap_skip "zero-copy transmit counters" "rsiw's debugfs"
else
	zc_ref=$(tx_count tx_payload_by_reference) zc_copied=$(tx_count tx_payload_copied)
	zc_sends=$(tx_count zc_sends) zc_rel=$(tx_count zc_released)
	tap_result "$((${zc_ref:-0} >= 4194304 && ${zc_sends:-0} > 0 && ${zc_rel:-0} > 0 ? 0 : 1))" \
		"payload went by reference (zero copy) and TCP released it" \
		"by reference $zc_ref bytes, copied $zc_copied bytes; zero-copy sends $zc_sends, released $zc_rel"
	tap_diag "payload by reference $zc_ref bytes, copied $zc_copied bytes; zero-copy sends $zc_sends, released $zc_rel"
	# The default leaves loopback connections out: the same 4 MiB WRITE goes
	# to TCP by reference without a zero-copy send, and TCP copies it
	# (tx_tcp_copied_bytes, a port counter of the device).
	tap_check "default zero-copy mode (zerocopy=auto)" sh -c "echo auto > $P/zerocopy"
	tcp_copied() { cat "/sys/class/infiniband/$dev/ports/1/hw_counters/tx_tcp_copied_bytes"; }
	tcp1=$(tcp_copied)
	ulp_run "write, zerocopy=auto" "$client test=write size=4194304 sge=1"
	tcp2=$(tcp_copied) zc_sends2=$(tx_count zc_sends) zc_ref2=$(tx_count tx_payload_by_reference)
	# (Pieces under 1 KiB, at page boundaries, are copied by rsiw.)
	tap_result "$((${tcp2:-0} - ${tcp1:-0} >= 4194304 && zc_sends2 == zc_sends && zc_ref2 - zc_ref >= 4194304 - 4096 ? 0 : 1))" \
		"zerocopy=auto: TCP copies the payload to a peer on this host" \
		"TCP copied +$((tcp2 - tcp1)) bytes, by reference +$((zc_ref2 - zc_ref)), zero-copy sends +$((zc_sends2 - zc_sends))"
fi
# MPA modes, set through the module parameters (which apply to both ends here):
# Markers, CRC off, revision 1, and each peer-to-peer RTR type. The counters
# in rsiw's debugfs file show that the connections really negotiated the mode.
# set_mode [rev=1] [crc=0] [markers=1] [rtr=TYPE]: the defaults (RTR type
# first: revision 1 refuses one), then these.
set_mode() {
	local kv
	echo none >$P/rtr && echo 2 >$P/rev && echo Y >$P/crc && echo N >$P/markers || return
	for kv in "$@"; do
		case $kv in
		crc=0) echo N >$P/crc ;;
		markers=1) echo Y >$P/markers ;;
		*) echo "${kv#*=}" >"$P/${kv%%=*}" ;;
		esac || return
	done
}
mpa_count() { awk -v k="$1" 'NR == 2 { for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == k) print f[2] } }' "$mpa"; }
if rsiw_is_reference; then
	tap_skip "MPA modes (Markers, CRC off, rev 1, RTR types)" "rsiw's module parameters"
else
	for mode in "markers=1" "crc=0" "rev=1" "rtr=write" "rtr=read" "rtr=send" "markers=1 crc=0 rtr=read"; do
		# shellcheck disable=SC2086 # one word per setting
		tap_check "set MPA mode '$mode' (module parameters)" set_mode $mode
		case $mode in
		markers=1*) key=markers want=more ;;
		crc=0) key=crc want=same ;;
		rev=1) key=rev1 want=more ;;
		rtr=*) key=rtr_${mode#rtr=} want=more ;;
		esac
		est0=$(mpa_count established) k0=$(mpa_count "$key")
		for t in send write read; do
			ulp_run "$mode: $t" "$client test=$t size=65537 sge=2"
		done
		est1=$(mpa_count established) k1=$(mpa_count "$key")
		if [ "$want" = more ]; then
			tap_result "$((k1 - k0 > 0 && k1 - k0 == est1 - est0 ? 0 : 1))" \
				"'$mode': every connection negotiated $key" "established +$((est1 - est0)), $key +$((k1 - k0))"
		else
			tap_result "$((est1 > est0 && k1 == k0 ? 0 : 1))" \
				"'$mode': connections established without $key" "established +$((est1 - est0)), $key +$((k1 - k0))"
		fi
	done
	tap_check "restore the default MPA mode" set_mode
fi
ulp_run "64 QPs" "$client test=qps qps=64 size=65537 sge=2"
# A CPU going offline and back under bulk traffic. Bulk receive work is queued
# on another CPU than the upcall's, so it may be queued for a CPU on its way
# out (it then runs on one that stays) or find no other CPU online. Every byte
# is still checked.
cpu1=/sys/devices/system/cpu/cpu1/online
if [ -w "$cpu1" ]; then
	stop_toggling=$TEST_TMP/stop-toggling
	toggles=$TEST_TMP/toggles
	# Whatever happens, the CPU comes back for the tests after this one.
	trap 'touch "$stop_toggling"; echo 1 >"$cpu1" 2>/dev/null; ulp_unload; cleanup' EXIT
	(
		n=0
		while [ ! -e "$stop_toggling" ]; do
			echo 0 >"$cpu1" && echo 1 >"$cpu1" && n=$((n + 1))
			nap 0.1
		done
		echo "$n" >"$toggles"
	) &
	toggler=$!
	for t in write read send; do
		ulp_run "$t, 4 MiB, while CPU 1 goes offline and back" "$client test=$t size=4194304 sge=2"
	done
	touch "$stop_toggling"
	wait "$toggler"
	tap_check "CPU 1 went offline and back during the transfers (times: $(cat "$toggles" 2>/dev/null))" \
		test "$(cat "$toggles" 2>/dev/null || echo 0)" -gt 0
	tap_check "CPU 1 is online again" grep -qx 1 "$cpu1"
	trap 'ulp_unload; cleanup' EXIT
else
	tap_skip "bulk traffic while a CPU goes offline" "no CPU 1 that can go offline"
fi
ulp_run "teardown in flight" "$client test=teardown"
# The server's FIN right behind 1 MiB of SENDs, on 32 connections: the data
# must complete at the client before the disconnect, however far its receive
# path was behind when the FIN arrived.
ulp_run "the peer's FIN right behind bulk data: nothing before it is lost" "$client test=fin_after_data"

# An orderly close while Read Responses still stream in: the closing side
# drops what arrives after its QP left RTS, so the peer's FIN gets through and
# the close ends in order on both sides. Without that the FIN waits behind a
# full receive window until rsiw's close timeout (5 s), and the socket is
# released with unread data, which TCP answers with a reset
# (TcpExtTCPAbortOnClose; data arriving after the close resets too:
# TcpExtTCPAbortOnData). The C siw does not read a closing connection's
# socket: on it the counts are only shown.
tcp_resets() {
	nstat -asz TcpExtTCPAbortOnClose TcpExtTCPAbortOnData |
		awk '{ n[$1] = $2 } END { print "TcpExtTCPAbortOnClose=" n["TcpExtTCPAbortOnClose"] + 0, "TcpExtTCPAbortOnData=" n["TcpExtTCPAbortOnData"] + 0 }'
}
port_busy() { ss -tanH state connected "( sport = :$port or dport = :$port )" | awk '$1 != "TIME-WAIT"'; }
# Small receive buffers for the connection made here, so that the Read
# Responses in flight fill the client's window.
rmem=$(sysctl -n net.ipv4.tcp_rmem)
trap 'sysctl -qw net.ipv4.tcp_rmem="$rmem"; ulp_unload; cleanup' EXIT
tap_wait "no connection left on port $port before the busy close" 30 eval '[ -z "$(port_busy)" ]'
tap_check "receive buffers of at most 32 KiB (tcp_rmem)" sysctl -qw net.ipv4.tcp_rmem="4096 16384 32768"
resets0=$(tcp_resets)
ulp_run "orderly close with READs in flight" "$client test=close_busy"
tap_wait "no connection left on port $port after the busy close" 30 eval '[ -z "$(port_busy)" ]'
resets1=$(tcp_resets)
tap_check "restore tcp_rmem ($rmem)" sysctl -qw net.ipv4.tcp_rmem="$rmem"
if rsiw_is_reference; then
	tap_diag "busy close on $RSIW_MODULE: $resets0 -> $resets1"
else
	tap_result "$([ -n "$resets0" ] && [ "$resets0" = "$resets1" ]; echo $?)" \
		"busy close: no reset on either side ($resets0 -> $resets1)"
fi

# IPv6: a second server on the netdev's IPv6 address, and SEND, WRITE and READ
# to it: rdma_cm over IPv6, the device's listener and both ends of each
# connection on IPv6 sockets.
ip6=fd00:5253:4957::11 port6=20896
if tap_check "IPv6: address $ip6 on $nd" ip -6 addr add "$ip6/64" dev "$nd" nodad &&
	tap_check "IPv6: a second ULP server on [$ip6]:$port6" ulp_ctl "server addr=$ip6 port=$port6"; then
	for t in send write read; do
		ulp_run "IPv6: $t" "client addr=$ip6 port=$port6 test=$t size=65537 sge=2"
	done
	tap_match "IPv6: the server on $ip6 accepted connections and none failed" \
		"^server addr=$ip6 port=$port6 accepted=[1-9][0-9]* .*failed=0 " "$(cat $ULP/status 2>&1)"
fi

out=$(cat $ULP/status 2>&1)
tap_match "the server accepted connections and none failed" "accepted=[1-9][0-9]* rejected=[1-9][0-9]* .*failed=0 " "$out"
tap_check "stop the server" ulp_ctl stop
tap_check "rmmod rsiw_ulp" ulp_unload
check_no_splat "no kernel splat"
tap_done
