#!/usr/bin/env bash
# FPDU sizes: rsiw cuts messages into FPDUs of at most one MSS, read from the
# socket at every transmit round; when both ends set the large-FPDU bit in
# their MPA frames (the C siw's MPA_RR_FLAG_GSO_EXP; rsiw's setting
# large_fpdu=0|1 in /sys/kernel/debug/rsiw/mpa, on by default), up to one TCP
# GSO packet, at most 64 KiB. The test ULP moves 4 MiB by RDMA WRITE, RDMA
# READ and SEND (every byte checked) between two rsiw QPs in this VM, over a
# route with MTU 1500 (MSS at most 1460; the loopback's own MTU would make
# every FPDU 64 KiB anyway), with large FPDUs off, on, and with Markers on
# and off. rsiw's counters show what was negotiated (second line of the mpa
# file: large_fpdu) and how big the FPDUs were (third line: tx_fpdus,
# tx_fpdus_over_mss, tx_fpdu_max). A short 1 MiB WRITE bench with large
# FPDUs off and on is reported as diagnostics.
# timeout: 1500
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"

if rsiw_is_reference; then
	tap_skip "FPDU sizes" "read from rsiw's debugfs counters; the C siw has none (and never sets the bit)"
	tap_done
fi

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:14 ip=198.18.0.1 port=20888
mtu=1500
mss_max=$((mtu - 40))
large_max=65536
size=4194304
mpa=/sys/kernel/debug/rsiw/mpa
base="rev=2 crc=1 markers=0 rtr=none"
client="client addr=$ip port=$port"

# counters: "ESTABLISHED LARGE FPDUS OVER_MSS FPDU_MAX MARKERS" from the mpa
# file (keys, not positions, so fields appended later do not matter).
counters() {
	awk 'NR == 2 || NR == 3 {
		for (i = 1; i <= NF; i++) { split($i, f, "="); v[NR, f[1]] = f[2] }
	} END {
		print v[2, "established"], v[2, "large_fpdu"], v[3, "tx_fpdus"],
			v[3, "tx_fpdus_over_mss"], v[3, "tx_fpdu_max"], v[2, "markers"]
	}' "$mpa"
}

# ulp_cmd DESC COMMAND: one TAP line: COMMAND (written to the ULP's ctl)
# succeeded and every test it ran passed. Sets RES to the ULP's result log.
ulp_cmd() {
	local out st
	ulp_ctl clear
	out=$(ulp_ctl "$2")
	st=$?
	RES=$(cat "$ULP/result")
	if [ "$st" = 0 ] && grep -qE '^(ok|bench) ' <<<"$RES" && ! grep -q '^not ok' <<<"$RES"; then
		tap_ok "$1"
	else
		tap_fail "$1" "\$ echo '$2' > $ULP/ctl: exit status $st $out" "$RES"
	fi
}

# phase MODE: set MODE (on top of $base), run the 4 MiB WRITE, READ and SEND,
# and set the counter deltas d_est, d_large, d_fpdus, d_over, d_markers and
# the current maximum fpdu_max.
phase() {
	local e0 l0 f0 o0 m0 k0 e1 l1 f1 o1 k1 t
	tap_check "set MPA mode '$1'" sh -c "echo '$base $1' > $mpa"
	read -r e0 l0 f0 o0 m0 k0 < <(counters)
	for t in write read send; do
		ulp_cmd "'$1': $t of $size bytes, data verified" "$client test=$t size=$size"
	done
	read -r e1 l1 f1 o1 fpdu_max k1 < <(counters)
	d_est=$((e1 - e0)) d_large=$((l1 - l0)) d_fpdus=$((f1 - f0)) d_over=$((o1 - o0)) d_markers=$((k1 - k0))
	tap_diag "'$1': connections +$d_est (large FPDUs +$d_large, Markers +$d_markers), FPDUs sent +$d_fpdus," \
		"  of them longer than the MSS +$d_over, longest FPDU so far $fpdu_max (was $m0) octets"
}

# bench MODE: a 1 MiB WRITE bench for 2 s with MODE; its MB/s as diagnostics.
bench() {
	tap_check "set MPA mode '$1'" sh -c "echo '$base $1' > $mpa"
	ulp_cmd "'$1': 1 MiB WRITE bench" "bench addr=$ip port=$port op=write size=1048576 secs=2"
	tap_diag "'$1': $(grep '^bench' <<<"$RES")"
}

ulp_setup $dev $nd $mac $ip $port
# Both ends of every connection use the local route to $ip; with an MTU on
# it, TCP's MSS is at most MTU - 40 (1448 with timestamps).
tap_check "route to $ip with MTU $mtu" \
	ip route replace local $ip dev $nd table local proto kernel scope host src $ip mtu $mtu
tap_match "the route to $ip has MTU $mtu" "mtu $mtu" "$(ip route get $ip)"

# Large FPDUs off first: then the longest FPDU since the module was loaded is
# that of this phase.
phase "large_fpdu=0"
off_fpdus=$d_fpdus
tap_result "$((d_est > 0 && d_large == 0 ? 0 : 1))" \
	"large_fpdu=0: connections established without large FPDUs" "established +$d_est, large_fpdu +$d_large"
tap_result "$((d_over == 0 && fpdu_max > 0 && fpdu_max <= mss_max ? 0 : 1))" \
	"large_fpdu=0: no FPDU longer than the MSS" \
	"longer than the MSS: $d_over, longest $fpdu_max octets, MSS at most $mss_max"
# Each 4 MiB message needs at least 4 MiB / MSS FPDUs of at most one MSS.
tap_result "$((d_fpdus >= 3 * size / mss_max ? 0 : 1))" \
	"large_fpdu=0: at least 3 x 4 MiB / MSS FPDUs sent" "$d_fpdus FPDUs, want >= $((3 * size / mss_max))"

phase "large_fpdu=1"
tap_result "$((d_est > 0 && d_large == d_est ? 0 : 1))" \
	"large_fpdu=1: every connection negotiated large FPDUs" "established +$d_est, large_fpdu +$d_large"
tap_result "$((d_over > 0 && fpdu_max > mss_max && fpdu_max <= large_max ? 0 : 1))" \
	"large_fpdu=1: FPDUs longer than the MSS, none above 64 KiB" \
	"longer than the MSS: $d_over, longest $fpdu_max octets (MSS at most $mss_max, cap $large_max)"
tap_result "$((d_fpdus > 0 && 4 * d_fpdus < off_fpdus ? 0 : 1))" \
	"large_fpdu=1: under a quarter as many FPDUs as with large_fpdu=0" "$d_fpdus FPDUs, $off_fpdus before"

# Markers with large FPDUs: each FPDU leaves room for its Markers.
phase "markers=1 large_fpdu=1"
tap_result "$((d_est > 0 && d_large == d_est && d_markers == d_est ? 0 : 1))" \
	"markers=1 large_fpdu=1: every connection negotiated Markers and large FPDUs" \
	"established +$d_est, large_fpdu +$d_large, markers +$d_markers"
tap_result "$((d_over > 0 && fpdu_max <= large_max ? 0 : 1))" \
	"markers=1 large_fpdu=1: FPDUs longer than the MSS, none above 64 KiB" \
	"longer than the MSS: $d_over, longest $fpdu_max octets (cap $large_max)"

phase "markers=1 large_fpdu=0"
tap_result "$((d_est > 0 && d_large == 0 && d_markers == d_est ? 0 : 1))" \
	"markers=1 large_fpdu=0: Markers without large FPDUs" \
	"established +$d_est, large_fpdu +$d_large, markers +$d_markers"
tap_result "$((d_fpdus > 0 && d_over == 0 ? 0 : 1))" \
	"markers=1 large_fpdu=0: no FPDU longer than the MSS" "FPDUs +$d_fpdus, longer than the MSS +$d_over"

bench "large_fpdu=0"
bench "large_fpdu=1"

tap_check "restore the default MPA mode" sh -c "echo '$base large_fpdu=1' > $mpa"
tap_match "the mpa file shows the defaults on its first line, large_fpdu=1 among them" \
	"^rev=2 crc=1 markers=0 rtr=none large_fpdu=1 zerocopy=auto$" "$(head -n 1 $mpa)"
tap_check_fails "large_fpdu=2 is refused" sh -c "echo 'large_fpdu=2' > $mpa"
tap_check "stop the server" ulp_ctl stop
tap_check "rmmod rsiw_ulp" ulp_unload
check_no_splat "no kernel splat"
tap_done
