#!/usr/bin/env bash
# Interop with the kernel's C siw across two VMs: VM a runs rsiw (rsiw0,
# 198.18.0.1), VM b the C siw (siw0, 198.18.0.2); both run the test ULP with
# a server on their own address. In each MPA mode set on rsiw (revision 2
# with CRC and revision 1 without; INTEROP_MODES adds the other two) the rsiw
# client runs the ULP's data tests against the siw
# server, then the siw client against the rsiw server: SEND and
# SEND_WITH_INV both ways, RDMA WRITE, READ and READ_WITH_INV, each at 0, 1,
# 4095, 4096, 65537 bytes and 4 MiB (READs of 0 bytes only towards rsiw, see
# workload_to_siw), byte-exact, more of the ULP's tests in the first mode;
# after each test the server's VM checks its connections ended cleanly, and
# rsiw's counters show what every connection negotiated.
# Two modes are captured on VM a's NIC and decoded by tshark on the host
# (interop-siw.host). Details below.
# timeout: 900
#
# The C siw of 6.12 has no MPA knobs (mpa_version, mpa_crc_required are
# fixed in siw_main.c): it initiates revision 2 with RFC 6581 enhanced data
# and C=0, and answers a Request with its own revision and C bit. CRC is used
# when either side asks (RFC 5044 section 7.1.1), so every connection has CRC
# exactly when rsiw asks for it. With rsiw at revision 1 only the rsiw client
# gets a revision 1 connection; as responder rsiw must close on siw's enhanced
# Request (RFC 6581 section 10), which is checked too. So is Markers: siw
# refuses a Request asking for them and a Reply granting them.
# Helpers run through tap_check and the EXIT trap:
# shellcheck disable=SC2317
set -uo pipefail
case ${PAIR_ROLE:-} in
a) RSIW_MODULE=rsiw RSIW_LINK_TYPE=rsiw dev=rsiw0 ;;
b) RSIW_MODULE=siw RSIW_LINK_TYPE=siw dev=siw0 ;;
esac
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=../ulp/ulp.sh
. "$SELFTESTS/ulp/ulp.sh"
# shellcheck source=pair.sh
. "$SELFTESTS/pair/pair.sh"
require rdma timeout
[ "$PAIR_ROLE" = a ] && require dumpcap

port=20886
mpa=/sys/kernel/debug/rsiw/mpa
# Modes by index: "REV CRC". The captured ones (indexes) are decoded on the
# host (interop-siw.host reads $PAIR_OUT/captures).
modes=("2 1" "2 0" "1 1" "1 0")
capture_modes=" 0 3 "
# Which modes run (indices into modes): make check runs revision 2 with CRC
# and revision 1 without, both captured, which covers both revisions and
# both CRC settings within CI's time; INTEROP_MODES="0 1 2 3" runs all four.
INTEROP_MODES=${INTEROP_MODES:-0 3}
# The ULP's data tests; without size= each runs at 0, 1, 4095, 4096, 65537
# and 4 MiB.
workload=(send recv write read read_inv send_inv recv_inv)
# Against the siw server, READs of 0 bytes are left out: the C siw answers a
# zero-length Read Request that arrives while its transmitter is busy with
# the data of its previous work request's first SGE (siw_activate_tx() in
# siw_qp.c leaves sqe.sge[0] as it was when the IRQ entry has no SGE, and
# siw_qp_sq_process() in siw_qp_tx.c sets num_sge = 1 for every Read
# Response), and rsiw rightly answers that with a Terminate (DDP, tagged
# buffer, base or bounds violation). Seen under TCG now and then.
workload_to_siw=(send recv write)
for t in read read_inv; do
	for size in 1 4095 4096 65537 4194304; do
		workload_to_siw+=("$t size=$size")
	done
done
workload_to_siw+=(send_inv recv_inv)
# More of the ULP's tests, in the first mode only: several SGEs, unsignaled
# and inline work requests, a solicited SEND, key rotation with LOCAL_INV and
# REG_MR, a reject with private data, 8 connections at once. Not "solicited"
# and "stale_key": the C siw fails them (see ulp-verbs.sh).
extras=("send size=65537 sge=6" "recv size=65537 sge=6" "write size=65537 sge=6"
	"send size=4096 signaled=0" unsignaled inline "solicited_send size=4096"
	local_inv reg_mr reject "qps qps=8 size=65537 sge=2")

bg_pids=()
stop_bg() {
	local p
	for p in "${bg_pids[@]}"; do
		kill -INT "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	bg_pids=()
}
trap 'stop_bg; pair_exit; ulp_unload; cleanup' EXIT

# ulp_refused DESC COMMAND: COMMAND's connection must fail (and nothing else).
ulp_refused() {
	local desc=$1 cmd=$2 st out
	ulp_ctl clear
	out=$(ulp_ctl "$cmd")
	st=$?
	if [ "$st" != 0 ] && grep -q '^not ok ' "$ULP/result"; then
		tap_ok "$desc"
		tap_diag "$(cat "$ULP/result")"
	else
		tap_fail "$desc" "'$cmd' exit status $st, expected a failed connection" "$out" "$(cat "$ULP/result")"
	fi
}

# mpa_count KEY: a counter of rsiw's MPA file (line 2, KEY=N).
mpa_count() {
	awk -v k="$1" 'NR == 2 { for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == k) print f[2] } }' "$mpa"
}
declare -A C0
counters_save() {
	local k
	for k in established crc rev1 markers; do
		C0[$k]=$(mpa_count $k)
	done
}
# check_negotiated DESC CRC REV1: every connection since counters_save
# reached RTS with CRC (1) or without (0), at revision 1 (1) or 2 (0); at
# least one did. DESC says which.
check_negotiated() {
	local desc=$1 est crc rev1 markers
	est=$(($(mpa_count established) - C0[established]))
	crc=$(($(mpa_count crc) - C0[crc]))
	rev1=$(($(mpa_count rev1) - C0[rev1]))
	markers=$(($(mpa_count markers) - C0[markers]))
	tap_result "$((est > 0 && crc == $2 * est && rev1 == $3 * est && markers == 0 ? 0 : 1))" \
		"$desc: all $est connection(s) with CRC $([ "$2" = 1 ] && echo on || echo off), revision $((2 - $3)), no Markers" \
		"rsiw counters since the step: established +$est, crc +$crc, rev1 +$rev1, markers +$markers" "$(cat "$mpa")"
}
# check_none_established DESC: no connection reached RTS since counters_save.
check_none_established() {
	local est
	est=$(($(mpa_count established) - C0[established]))
	tap_result "$((est == 0 ? 0 : 1))" "$1" "rsiw counters: established +$est" "$(cat "$mpa")"
}

# server_count KEY: a counter of this VM's ULP server (its status line).
server_count() {
	sed -nE "s/.* $1=([0-9]+).*/\1/p" "$ULP/status" | head -n 1
}
declare -A S0
server_save() {
	local k
	for k in accepted rejected failed tampered qp_errors; do
		S0[$k]=$(server_count $k)
	done
}
# check_server DESC: since server_save, this VM's ULP server saw connections
# (accepted or rejected), and none failed, had its regions written outside
# what the client asked for or (on rsiw) ended with an error.
check_server() {
	local acc rej failed tampered qperr
	acc=$(($(server_count accepted) - S0[accepted]))
	rej=$(($(server_count rejected) - S0[rejected]))
	failed=$(($(server_count failed) - S0[failed]))
	tampered=$(($(server_count tampered) - S0[tampered]))
	qperr=$(($(server_count qp_errors) - S0[qp_errors]))
	# A siw server connection that ends with an error (qp_errors) while the
	# rsiw client saw nothing wrong has been seen without anything on the wire
	# (no Terminate, no reset): siw's own accounting. Its own check, skipped
	# by name when it happens, so that the summary shows it.
	if [ "$RSIW_MODULE" = siw ]; then
		if ((qperr > 0)); then
			tap_skip "$1: no siw server connection ended with an error" \
				"$qperr did (qp_errors), with no Terminate or reset on the wire: siw's own accounting"
		else
			tap_ok "$1: no siw server connection ended with an error"
		fi
		qperr=0
	fi
	tap_result "$((acc + rej > 0 && failed == 0 && tampered == 0 && qperr == 0 ? 0 : 1))" \
		"$1: the $RSIW_MODULE server's $((acc + rej)) connection(s) ended cleanly" \
		"since the step: accepted +$acc, rejected +$rej, failed +$failed, tampered +$tampered, qp_errors +$qperr" \
		"$(cat "$ULP/status")"
}

# A phase: one VM's client runs its tests against the other VM's server, then
# tells it so; the server's VM then checks its server. STEP names the phase in
# the shared directory.

# drive DESC TEST...: run each ULP TEST against the peer's server. End the
# phase with drive_end.
drive() {
	local desc=$1 t
	shift
	for t in "$@"; do
		ulp_run "$desc, $t" "$peer test=$t"
	done
}
drive_end() {
	pair_post "$STEP.done" || tap_bail "cannot post to the peer"
}

# serve DESC: wait until the peer ended the phase, then check this VM's
# server. Call server_save before the peer can connect.
serve() {
	pair_wait "$STEP.done" || tap_bail "$PAIR_MSG"
	# The server may see the last close a little after the client.
	wait_for 15 grep -q ' open=0 ' "$ULP/status"
	check_server "$1"
	server_save
}

# Driver log lines of the step (since kmsg_mark), as diagnostics.
show_driver_log() {
	local lines
	lines=$(kmsg_since_mark | grep -E "^(rsiw|siw|$dev)[: ]|iw_cm|rdma_cm" | head -n 20)
	[ -n "$lines" ] && tap_diag "$RSIW_MODULE log:" "$lines"
	return 0
}

# ---------------------------------------------------------------- capture

# capture_start FILE: capture the link's RDMA traffic into FILE. dumpcap is
# tshark's capture engine; tshark itself maps a 110 MB library, which over
# the guest's 9p root takes minutes under TCG, so the host decodes.
capture_start() {
	CAP=$1
	dumpcap -q -i "$PAIR_NETDEV" -f "tcp port $port" -B 32 -w "$CAP" >"$CAP.log" 2>&1 &
	CAP_PID=$!
	bg_pids+=("$CAP_PID")
	tap_wait "capture on $PAIR_NETDEV started" 60 test -s "$CAP"
}

# capture_stop DESC REV CRC: stop the capture, check that dumpcap lost
# nothing, keep the file in the results and list it for the host part.
capture_stop() {
	kill -INT "$CAP_PID" 2>/dev/null
	wait "$CAP_PID" 2>/dev/null
	tap_diag "dumpcap: $(tr '\n' ' ' <"$CAP.log")"
	if ! grep -q 'Packets received/dropped' "$CAP.log" ||
		grep -qE "dropped on interface [^:]*: *[0-9]+/[1-9]|(pcap|dumpcap|flushed|ps_ifdrop):[1-9]" "$CAP.log"; then
		tap_fail "$1: capture complete (no drops)" "$(cat "$CAP.log")"
	else
		tap_ok "$1: capture complete (no drops)"
	fi
	if tap_check "$1: keep the capture in the results" cp "$CAP" "$PAIR_OUT/"; then
		echo "$(basename "$CAP")|$1|$2|$3|$PAIR_ADDR|$PAIR_PEER_ADDR" >>"$PAIR_OUT/captures"
	fi
}

# ---------------------------------------------------------------- setup

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "link up: NIC $PAIR_MAC with $PAIR_ADDR/24" pair_link_up || tap_bail "no link"
tap_diag "VM $PAIR_ROLE: $RSIW_MODULE on $PAIR_NETDEV, peer $PAIR_PEER_ADDR"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $PAIR_NETDEV" rdma_link_add "$dev" "$PAIR_NETDEV" ||
	tap_bail "cannot add the link"
tap_wait "$dev is ACTIVE" 10 port_state_is "$dev" ACTIVE
[ -f "$ULP_KO" ] || tap_bail "$ULP_KO does not exist (make module)"
ulp_insmod || tap_bail "cannot load the ULP"
if ! err=$(ulp_ctl "server addr=$PAIR_ADDR port=$port"); then
	tap_fail "start the ULP server on $PAIR_ADDR:$port" "$err"
	tap_bail "cannot start the ULP server"
fi
tap_ok "start the ULP server on $PAIR_ADDR:$port"
if [ "$PAIR_ROLE" = a ]; then
	tap_check "rsiw MPA defaults: rev=2 crc=1 markers=0 rtr=none" \
		grep -qE '^rev=2 crc=1 markers=0 rtr=none( |$)' "$mpa"
	rm -f "$PAIR_OUT/captures"
fi
server_save
pair_sync ready || tap_bail "$PAIR_MSG"
tap_wait "the peer $PAIR_PEER_ADDR answers on the link" 10 pair_peer_reachable

# ---------------------------------------------------------------- modes

peer="client addr=$PAIR_PEER_ADDR port=$port"
for k in $INTEROP_MODES; do
	read -r rev crc <<<"${modes[$k]}"
	m="rev $rev, CRC $([ "$crc" = 1 ] && echo on || echo off)"
	tests=("${workload[@]}") tests_to_siw=("${workload_to_siw[@]}")
	((k == 0)) && tests+=("${extras[@]}") tests_to_siw+=("${extras[@]}")
	kmsg_mark
	if [ "$PAIR_ROLE" = a ]; then
		tap_check "$m: set rsiw's MPA settings" sh -c "echo 'rev=$rev crc=$crc markers=0 rtr=none' >$mpa"
		[[ $capture_modes == *" $k "* ]] && capture_start "$TEST_TMP/mode$k.pcapng"
		counters_save
		tap_skip "$m, rsiw -> siw: READ and READ_WITH_INV of 0 bytes" \
			"the C siw may answer them with stale data (see workload_to_siw)"
		STEP=mode$k.ab drive "$m, rsiw -> siw" "${tests_to_siw[@]}"
		check_negotiated "$m, rsiw -> siw" "$crc" $((rev == 1))
		counters_save
		server_save
		STEP=mode$k.ab drive_end
		if [ "$rev" = 2 ]; then
			STEP=mode$k.ba serve "$m, siw -> rsiw"
			# siw asks for no CRC: CRC is on exactly when rsiw asks for it.
			check_negotiated "$m, siw -> rsiw" "$crc" 0
		else
			pair_wait "mode$k.ba.refused" || tap_bail "$PAIR_MSG"
			check_none_established "$m, siw -> rsiw: rsiw (revision 1) accepted none of siw's enhanced Requests"
		fi
		[[ $capture_modes == *" $k "* ]] && capture_stop "$m" "$rev" "$crc"
	else
		STEP=mode$k.ab serve "$m, rsiw -> siw"
		if [ "$rev" = 2 ]; then
			STEP=mode$k.ba drive "$m, siw -> rsiw" "${tests[@]}"
			server_save
			STEP=mode$k.ba drive_end
		else
			# siw always sends an enhanced revision 2 Request; a revision 1
			# responder must close the connection (RFC 6581 section 10).
			ulp_refused "$m, siw -> rsiw: refused by rsiw at revision 1" "$peer test=send size=1"
			server_save
			pair_post "mode$k.ba.refused" || tap_bail "cannot post to the peer"
		fi
	fi
	show_driver_log
	check_no_splat "$m: no kernel splat"
done

# Markers: rsiw asks for them. siw refuses such a Request as responder (Reply
# with R=1); as initiator it drops the connection when the Reply grants them,
# after rsiw has sent that Reply and so reached RTS: rsiw must just see the
# connection close.
m="Markers"
kmsg_mark
if [ "$PAIR_ROLE" = a ]; then
	tap_check "$m: set rsiw's MPA settings" sh -c "echo 'rev=2 crc=1 markers=1 rtr=none' >$mpa"
	counters_save
	ulp_refused "$m, rsiw -> siw: siw rejects a Request asking for Markers" "$peer test=send size=1"
	check_none_established "$m, rsiw -> siw: no connection established"
	counters_save
	pair_post markers.a || tap_bail "cannot post to the peer"
	pair_wait markers.b || tap_bail "$PAIR_MSG"
	est=$(($(mpa_count established) - C0[established]))
	mk=$(($(mpa_count markers) - C0[markers]))
	tap_result "$((est <= 1 && mk == est ? 0 : 1))" \
		"$m, siw -> rsiw: at most the one connection reached RTS on rsiw, with Markers" \
		"established +$est, markers +$mk" "$(cat "$mpa")"
	tap_wait "$m, siw -> rsiw: the rsiw server saw the connection close" 30 \
		grep -q ' open=0 ' "$ULP/status"
	tap_diag "ULP server: $(cat "$ULP/status")"
	tap_check "restore rsiw's MPA defaults" sh -c "echo 'rev=2 crc=1 markers=0 rtr=none' >$mpa"
else
	pair_wait markers.a || tap_bail "$PAIR_MSG"
	ulp_refused "$m, siw -> rsiw: siw refuses a Reply granting Markers" "$peer test=send size=1"
	pair_post markers.b || tap_bail "cannot post to the peer"
fi
show_driver_log
check_no_splat "$m: no kernel splat"

# Both halves stay up until both are done: the peer's last connections must
# not see this side go away.
pair_sync finish || tap_fail "the peer finished" "$PAIR_MSG"
out=$(cat "$ULP/status" 2>&1)
tap_diag "ULP server: $out"
tap_match "the ULP server accepted connections" "accepted=[1-9]" "$out"
tap_check "stop the ULP server" ulp_ctl stop
tap_check "rmmod rsiw_ulp" ulp_unload
tap_done
