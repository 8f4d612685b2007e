#!/usr/bin/env bash
# rsiw's receive path refuses hostile FPDUs. A peer written in Python
# (selftests/hostile/peer.py) connects to the test ULP's server over plain TCP,
# does the MPA exchange (revision 2, enhanced IRD/ORD, CRC, a zero-length Write
# as its RTR), asks the server for a target region through the ULP's control
# protocol, and sends one FPDU that breaks a rule: an RDMA Write or Read
# outside the region, under a wrong key, an invalidated key, an STag of another
# connection's PD or without the right; a Read Request more than the IRD; a
# Read Response with no Read outstanding; a Send with a bad CRC, too long for
# the receive, out of MSN order or with no receive posted; a Send with
# Invalidate of another PD's STag or of one that does not exist; a Write or
# Read under a PD's global rkey at an address with no memory, of kernel text,
# rodata or a vmalloc area, or of 4 GiB; a Read Request whose sink Tagged
# Offset wraps; ULPDU_Lengths
# that contradict the headers. Each case (a fresh connection) expects a Terminate
# with the exact Layer/EType/Code (RFC 5040 4.8, RFC 5041 7.2, RFC 5044 8),
# nothing else, the TCP connection closed, the server's connection ended in
# error, no placement (the server audits its regions at teardown: sealed
# targets still hold their pattern, receives that never completed their
# initial fill, every guard byte is intact), a log line of rsiw naming the
# device, and no splat. Two cases check the checks: an allowed Write, Read and
# Send (the peer's framing is right; an orderly close is no error) and an
# allowed Write into a sealed region (the audit sees placement).
# The peer runs once, as a coprocess. A run takes minutes under TCG, and more
# than 300 s on a slow host (session 44's AMD EPYC timed out at 300).
# timeout: 900
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma python3

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:31 ip=198.18.0.1 port=20887
PEER=$SELFTESTS/hostile/peer.py

# Under TCG every process started costs a good part of a second (Python
# several seconds), so the peer runs once, as a coprocess serving the cases,
# and the server's counters are read with shell builtins.

# status: read the ULP server's counters (its line in $ULP/status) into ST.
declare -A ST
status() {
	local line kv
	ST=()
	read -r line <"$ULP/status" || return
	for kv in $line; do
		[[ $kv == *=* ]] && ST[${kv%%=*}]=${kv#*=}
	done
}

# closed_at_least N: whether the server has seen N connections close.
# shellcheck disable=SC2317 # called through tap_wait
closed_at_least() {
	status && ((${ST[closed]:-0} >= $1))
}

# kernel_addrs: set KADDRS to the peer's options naming the kernel addresses
# the global-rkey cases aim at (root sees them unmasked): kernel text
# (_stext), kernel rodata (linux_banner), the zero page and the first page of a
# vmalloc area. grep stops at the matches: kallsyms is long under TCG.
KADDRS=()
kernel_addrs() {
	local addr sym vm
	while read -r addr _ sym; do
		case $sym in
		_stext) KADDRS+=(--kernel-text "0x$addr") ;;
		linux_banner) KADDRS+=(--kernel-rodata "0x$addr") ;;
		empty_zero_page) KADDRS+=(--kernel-zero-page "0x$addr") ;;
		esac
	done < <(grep -m 3 -E ' (_stext|linux_banner|empty_zero_page)$' /proc/kallsyms)
	vm=$(grep -m 1 -E 'pages=[0-9]+ vmalloc' /proc/vmallocinfo) && KADDRS+=(--vmalloc "${vm%%-*}")
}

# peer_start: start the peer (coprocess PEER_PROC).
peer_start() {
	coproc PEER_PROC { exec python3 "$PEER" --addr "$ip" --port "$port" "${KADDRS[@]}" --serve 2>&1; }
}

# peer_stop: end the peer (it exits at the end of its input) and reap it.
peer_stop() {
	local pid=${PEER_PROC_PID:-} fd=${PEER_PROC[1]:-}
	[ -n "$pid" ] || return 0
	[ -n "$fd" ] && exec {fd}>&-
	wait "$pid" 2>/dev/null
	PEER_PROC_PID=
}
trap 'peer_stop; ulp_unload; cleanup' EXIT

# peer CASE EXPECT: run a case in the peer; its output in OUT, its status
# returned.
peer() {
	local line in=${PEER_PROC[1]:-} out=${PEER_PROC[0]:-}
	OUT=
	[[ -n $in && -n $out ]] || { OUT="the peer is gone"; return 2; }
	printf '%s %s\n' "$1" "$2" >&"$in" || { OUT="the peer is gone"; return 2; }
	while IFS= read -r -t 180 line <&"$out"; do
		if [[ $line == "done "* ]]; then
			return "${line#done }"
		fi
		OUT+=$line$'\n'
	done
	OUT+="no answer from the peer within 180 s"
	return 2
}

# Where the C siw departs from what the cases expect (RSIW_MODULE=siw runs the
# test against it to check the test itself): those cases and checks are
# skipped there, with the reason.
siw_unbounded_hdr="the C siw reads an opcode's whole header whatever the ULPDU_Length says (siw_get_hdr()) and waits for octets that never come"
declare -A SIW_SKIPS=(
	[read-write-only]="the C siw serves a Read Request of a region without remote read: siw_qp_sq_proc_tx() checks the Read Response's source with no access right (siw_check_sgl_tx(pd, wqe, 0))"
	[ulpdu-short]=$siw_unbounded_hdr
	[read-request-short]=$siw_unbounded_hdr
	[read-request-long]="the C siw closes without a Terminate (siw_proc_rreq() returns -EPROTO)"
	[peer-terminate-short]=$siw_unbounded_hdr
	[global-write-wild]="not run against the C siw: its DMA region (siw_get_dma_mr) takes any address, so the kernel would fault"
	[global-read-wild]="not run against the C siw: its DMA region (siw_get_dma_mr) takes any address, so the kernel would fault"
	[global-write-text]="not run against the C siw: its DMA region takes any address, so the kernel would fault"
	[global-write-rodata]="not run against the C siw: its DMA region takes any address, so the kernel would fault"
	[global-write-rodata-alias]="not run against the C siw: its DMA region takes any address, so the kernel would fault"
	[global-write-vmalloc]="not run against the C siw: its DMA region takes any address, so the kernel would fault"
	[global-read-rodata-alias]="the C siw's DMA region takes any address: it serves the Read"
	[global-read-huge]="not run against the C siw: its DMA region has no size limit, it would read 4 GiB from the address on"
	[read-sink-wrap]="the C siw does not check the sink: it sends Read Responses whose Tagged Offsets wrap (siw_init_rresp)"
)
SIW_CRC_PLACES="the C siw places payload before it checks the CRC (siw_rx_kva() copies, then updates the CRC)"
SIW_CLOSE_STATUS="the C siw reports every close with status 0 (siw_cm_upcall(cep, IW_CM_EVENT_CLOSE, 0)) and the ULP cannot see QP events"

# rsiw rate-limits the log lines a peer can cause: at most 10 in 5 s from each
# line of code (the kernel's default burst and interval). A case starts at
# least LOG_GAP_MS after the previous one read its log, so that every case
# gets its line.
LOG_GAP_MS=550
log_read_ms=0
# now_ms: the time in ms, in NOW_MS (builtins: no exec per case).
now_ms() { NOW_MS=$((${EPOCHREALTIME/./} / 1000)); }
log_gap() {
	local left secs
	now_ms
	left=$((log_read_ms + LOG_GAP_MS - NOW_MS))
	if ((left > 0)); then
		printf -v secs '%d.%03d' $((left / 1000)) $((left % 1000))
		nap "$secs"
	fi
}

# rsiw's port counters for Terminates and CRC errors (what `rdma statistic show
# link rsiw0/1` shows), read from sysfs with builtins: each case must move
# exactly the counter of its Terminate's layer, and a bad CRC rx_crc_errors.
HW_NAMES=(tx_terminate_rdmap tx_terminate_ddp tx_terminate_llp rx_terminate_rdmap
	rx_terminate_ddp rx_terminate_llp rx_crc_errors)
LAYER_NAMES=(rdmap ddp llp)

# check_case NAME EXPECT HOSTILE CONNS DESC [TAMPERED]: run case NAME of the
# peer, which opens CONNS connections of which HOSTILE get a hostile FPDU, and
# check: the Terminate (EXPECT is LAYER/ETYPE/CODE, "none" when the peer
# expects none) and the close, the server's view (every connection ended,
# HOSTILE of them in error, TAMPERED regions tampered with, default 0), rsiw's
# log line and no splat.
check_case() {
	local name=$1 expect=$2 hostile=$3 conns=$4 desc=$5 tampered=${6:-0} st c0 q0 t0 q t log what
	local pexpect=$expect layer etype code hw0 want=
	if rsiw_is_reference && [ -n "${SIW_SKIPS[$name]:-}" ]; then
		tap_skip "$name: $desc" "${SIW_SKIPS[$name]}"
		return
	fi
	if [[ $expect == none || $expect == peer:* || $expect == malformed ]]; then
		pexpect=any
	elif rsiw_is_reference; then
		# The C siw picks its own codes (and swaps the nibbles on little-endian hosts).
		pexpect=any
	fi
	status
	c0=${ST[closed]} q0=${ST[qp_errors]} t0=${ST[tampered]}
	rsiw_is_reference || { hw_read "$dev" "${HW_NAMES[@]}"; hw0=$HW_NOW; }
	log_gap
	kmsg_mark
	peer "$name" "$pexpect"
	st=$?
	if [ "$expect" = none ]; then
		tap_result "$st" "$name: $desc" "$OUT" "exit status $st"
	elif [[ $expect == peer:* || $expect == malformed ]]; then
		tap_result "$st" "$name: $desc: no Terminate back, the connection closes" \
			"$OUT" "exit status $st"
	else
		tap_result "$st" "$name: $desc: Terminate $expect, then the connection closes" \
			"$OUT" "exit status $st"
	fi
	[[ $st == 0 && $OUT =~ verdict:\ ([^$'\n']*) ]] && tap_diag "$name: ${BASH_REMATCH[1]}"
	tap_wait "$name: the server saw its $conns connection(s) close" 30 \
		closed_at_least $((c0 + conns))
	status
	q=${ST[qp_errors]} t=${ST[tampered]}
	log=$(kmsg_since_mark)
	now_ms
	log_read_ms=$NOW_MS
	if ((hostile > 0)) && rsiw_is_reference; then
		tap_skip "$name: $hostile of the server's connections ended in error" "$SIW_CLOSE_STATUS"
	elif ((q - q0 == hostile)); then
		tap_ok "$name: $hostile of the server's connections ended in error"
	else
		tap_fail "$name: $hostile of the server's connections ended in error" \
			"qp_errors went from $q0 to $q" "$(cat "$ULP/status")"
	fi
	if [ "$tampered" = 0 ]; then
		what="no placement: sealed targets and undelivered receives unchanged, guards intact"
	else
		what="the server's audit found $tampered region(s) tampered with"
	fi
	if [[ $name == *-bad-crc ]] && rsiw_is_reference; then
		tap_skip "$name: $what" "$SIW_CRC_PLACES"
	elif ((t - t0 == tampered)); then
		tap_ok "$name: $what"
	else
		tap_fail "$name: $what" "tampered went from $t0 to $t" "$(cat "$ULP/status")" \
			"$(grep 'rsiw_ulp: server:' <<<"$log")"
	fi
	if [ "$expect" = none ]; then
		tap_no_match "$name: $dev logged no protocol error" "$dev: .*(Terminate|protocol error)" "$log"
	elif rsiw_is_reference; then
		tap_skip "$name: $dev logged the protocol error" "the log line is rsiw's own contract"
	elif [[ $expect == peer:* ]]; then
		IFS=/ read -r layer etype code <<<"${expect#peer:}"
		tap_match "$name: $dev logged the peer's Terminate" \
			"$dev: .*peer sent Terminate layer $layer etype $etype code $(printf '0x%02x' "$code")" "$log"
	elif [ "$expect" = malformed ]; then
		tap_match "$name: $dev logged the malformed Terminate" \
			"$dev: .*malformed Terminate from the peer" "$log"
	else
		IFS=/ read -r layer etype code <<<"$expect"
		tap_match "$name: $dev logged the protocol error" \
			"$dev: .*protocol error.*layer $layer etype $etype code $(printf '0x%02x' "$code")" "$log"
	fi
	if ! rsiw_is_reference; then
		case $expect in
		none | malformed) ;;
		peer:*) want="rx_terminate_${LAYER_NAMES[${expect:5:1}]}+1" ;;
		*) want="tx_terminate_${LAYER_NAMES[${expect:0:1}]}+1" ;;
		esac
		[[ $name == *-bad-crc ]] && want+=" rx_crc_errors+1"
		hw_read "$dev" "${HW_NAMES[@]}"
		if [ "$(hw_deltas "$hw0" "$HW_NOW")" = "${want# }" ]; then
			tap_ok "$name: port counters moved by: ${want:-nothing}"
		else
			tap_fail "$name: port counters moved by: ${want:-nothing}" \
				"they moved by: $(hw_deltas "$hw0" "$HW_NOW")"
		fi
	fi
	check_no_splat "$name: no kernel splat"
}

ulp_setup $dev $nd $mac $ip $port
kernel_addrs
tap_diag "kernel addresses for the peer: ${KADDRS[*]}"
peer_start

# Layer/EType/Code: Layer 0 RDMAP, 1 DDP, 2 LLP (MPA). RDMAP EType 1 is a
# remote protection error (codes 0 invalid STag, 1 base or bounds, 2 access
# rights, 3 STag not associated with the stream, 4 TO wrap), EType 2 a remote
# operation error (7 catastrophic, stream). DDP EType 1 is a tagged buffer error (0
# invalid STag, 1 base or bounds, 2 STag not associated, 3 TO wrap), EType 2
# an untagged one (2 no buffer, 3 MSN out of range, 5 message too long), EType
# 0 with code 0 a local catastrophic error. LLP EType 0 code 2 is an MPA CRC
# error.
check_case control none 0 1 "allowed Writes, a Read and a Send, then an orderly close"
check_case audit-check none 0 1 "an allowed Write into a sealed region, then an orderly close" 1

# Tagged placement (RFC 5041 7.2; a missing right is RDMAP's, RFC 5040 7.1).
check_case write-beyond 1/1/0x01 1 1 "RDMA Write past the end of the region"
check_case write-before 1/1/0x01 1 1 "RDMA Write starting before the region"
check_case write-to-wrap 1/1/0x03 1 1 "RDMA Write whose TO wraps"
check_case write-bad-key 1/1/0x00 1 1 "RDMA Write under a wrong key"
check_case write-no-stag 1/1/0x00 1 1 "RDMA Write under an STag that does not exist"
check_case write-invalidated 1/1/0x00 1 1 "RDMA Write under an invalidated key"
check_case write-read-only 0/1/0x02 1 1 "RDMA Write into a region without remote write"
check_case write-wrong-pd 1/1/0x02 1 2 "RDMA Write under another connection's STag (wrong PD)"
# RFC 5044 4.4: a receiver "MUST first" check an FPDU's CRC; Appendix B: "If
# no FPDU CRC errors, placement is allowed". rsiw checks the CRC ahead of
# placement (Documentation/rsiw/design.rst, Receive).
check_case write-bad-crc 2/0/0x02 1 1 "RDMA Write inside the region with a bad CRC"

# RDMA Read Requests name their source region (RFC 5040 4.8, 7.1).
check_case read-beyond 0/1/0x01 1 1 "RDMA Read Request past the end of the region"
check_case read-bad-key 0/1/0x00 1 1 "RDMA Read Request under a wrong key"
check_case read-write-only 0/1/0x02 1 1 "RDMA Read Request of a region without remote read"
check_case read-wrong-pd 0/1/0x03 1 2 "RDMA Read Request of another connection's region (wrong PD)"
check_case read-invalidated 0/1/0x00 1 1 "RDMA Read Request under an invalidated key"
# Inbound Reads are bounded by the responder's IRD (RFC 6581 9.1: the
# initiator's ORD at most the responder's IRD); Read Requests are untagged
# messages on queue 1, and one beyond the IRD finds no buffer: DDP "Invalid
# MSN - no buffer available" (RFC 5041 7.2, as the C siw reports it too).
check_case read-ird-overflow 1/2/0x02 1 1 "one RDMA Read Request more than the server's IRD"
# A Read Response that answers no outstanding Read is an unexpected opcode
# (RFC 5040 4.8: RDMAP remote operation error 0x06).
check_case read-response-unsolicited 0/2/0x06 1 1 "RDMA Read Response with no RDMA Read outstanding"
# A Read Request whose sink Tagged Offset plus size wraps 2^64: its Read
# Response could never be sent (RFC 5041 7.1: TO plus length must not wrap),
# so it is refused at once with RDMAP's remote protection "TO wrap" (RFC 5040
# 4.8, 0x04), the request's DDP and Read Request headers copied; before, the
# transmit path waited on it for good. The peer checks every octet.
check_case read-sink-wrap 0/1/0x04 1 1 "RDMA Read Request whose sink Tagged Offset wraps"

# A PD with IB_PD_UNSAFE_GLOBAL_RKEY (nvme-rdma's register_always=N) gives
# the peer an rkey for all kernel memory by DMA address. The consumer chose
# that, but an address where no memory is must still be refused, not
# dereferenced: a base or bounds violation (RFC 5041 7.2, RFC 5040 7.1).
check_case global-rkey none 0 1 "Write and Read back under the PD's global rkey, then an orderly close"
check_case global-write-wild 1/1/0x01 1 1 "RDMA Write under the global rkey at an address with no memory"
check_case global-read-wild 0/1/0x01 1 1 "RDMA Read Request under the global rkey from a non-canonical address"
# It reaches RAM pages of the direct map only, not reserved ones (the kernel
# image, firmware's) and only where the direct map maps them writable: kernel
# text, rodata and a vmalloc area are out of reach by any address, and no
# single access under it covers more than 16 MiB. The zero page is the one
# reserved page a peer may read.
check_case global-write-text 1/1/0x01 1 1 "RDMA Write under the global rkey to kernel text"
check_case global-write-rodata 1/1/0x01 1 1 "RDMA Write under the global rkey to kernel rodata"
check_case global-write-rodata-alias 1/1/0x01 1 1 "RDMA Write under the global rkey to kernel rodata by its direct-map address"
check_case global-write-vmalloc 1/1/0x01 1 1 "RDMA Write under the global rkey to a vmalloc area"
check_case global-read-rodata-alias 0/1/0x01 1 1 "RDMA Read Request under the global rkey of kernel rodata by its direct-map address"
check_case global-read-huge 0/1/0x01 1 1 "RDMA Read Request of 4 GiB under the global rkey"
check_case global-read-zero-page none 0 1 "Read of the zero page under the global rkey, then an orderly close"

# Untagged Sends and framing (RFC 5041 7.2, RFC 5044 8).
check_case send-bad-crc 2/0/0x02 1 1 "Send into a data receive with a bad CRC"
check_case send-too-long 1/2/0x05 1 1 "Send longer than the posted data receive"
check_case send-wrong-msn 1/2/0x03 1 1 "Send into a data receive with the wrong MSN"
check_case send-no-buffer 1/2/0x02 1 1 "Send with no receive posted"
# Send with Invalidate of an STag the receiver may not invalidate: RDMAP
# remote protection error "STag cannot be invalidated" (RFC 5040 4.8, 0x09).
# The other connection's STag stays valid. The Sends carry no payload: rsiw
# places a Send's payload into the receive before it checks the STag to
# invalidate (drivers/rsiw/qp/rx.rs on_done), so the audit would count the
# flushed receive as tampered with.
check_case send-inv-wrong-pd 0/1/0x09 1 2 "Send with Invalidate of another connection's STag (wrong PD)"
check_case send-inv-no-stag 0/1/0x09 1 2 "Send with Invalidate of an STag that does not exist"
# Lengths that contradict the headers, framed consistently with a valid CRC:
# rsiw raises the header error at the end of the FPDU (a damaged header would
# be a CRC error): shorter than any DDP header is DDP's local catastrophic
# error, a Read Request cut short RDMAP's catastrophic stream error, one with
# octets after its header DDP's "message too long".
check_case ulpdu-short 1/0/0x00 1 1 "ULPDU_Length shorter than the DDP header"
check_case read-request-short 0/2/0x07 1 1 "ULPDU_Length ending inside the Read Request header"
check_case read-request-long 1/2/0x05 1 1 "ULPDU_Length beyond the Read Request header"

# The peer's own Terminates end the connection and are never answered with
# one (RFC 5040 5.3): RFC layout, the C siw's layout (Layer and EType nibbles
# swapped, M/D/R in the low bits, R set with only the DDP header copied), and
# one too short to hold its control field.
check_case peer-terminate peer:0/2/0xff 1 1 "our Terminate (RDMAP 0/2/0xff, no headers)"
check_case peer-terminate-siw peer:0/1/0x02 1 1 "our Terminate laid out as the C siw sends it"
check_case peer-terminate-short malformed 1 1 "our Terminate without its control field"

tap_diag "ULP status: $(cat "$ULP/status")"
peer_stop
tap_check "stop the server" ulp_ctl stop
# The same counters through netlink, the way an administrator reads them:
# every counter rsiw names, with the values sysfs shows (no traffic now).
if rsiw_is_reference; then
	tap_skip "rdma statistic show link $dev/1 agrees with sysfs" "rsiw's own counters"
else
	hw_read "$dev" "${HW_NAMES[@]}"
	stat_out=$(rdma statistic show link "$dev/1" 2>&1)
	bad=
	for kv in $HW_NOW; do
		[[ " $stat_out " == *" ${kv%%=*} ${kv#*=} "* ]] || bad+="${kv%%=*} "
	done
	for n in tx_fpdus rx_fpdus tx_payload_bytes rx_payload_bytes \
		tx_payload_by_reference_bytes tx_payload_copied_bytes rx_payload_bounced_bytes \
		tx_crc_bytes rx_crc_bytes tx_tcp_copied_bytes tx_batches \
		cm_established cm_rejected cm_failed cm_mpa_timeouts cm_handshakes_refused; do
		[[ " $stat_out " == *" $n "[0-9]* ]] || bad+="$n(missing) "
	done
	# The connections had CRC (rsiw asks for it by default) and sent data.
	for n in tx_fpdus cm_established tx_crc_bytes rx_crc_bytes tx_batches; do
		[[ $stat_out =~ \ $n\ ([0-9]+) ]] && ((BASH_REMATCH[1] > 0)) || bad+="$n(zero) "
	done
	if [ -z "$bad" ]; then
		tap_ok "rdma statistic show link $dev/1 agrees with sysfs"
	else
		tap_fail "rdma statistic show link $dev/1 agrees with sysfs" "differs: $bad" "$stat_out" "sysfs: $HW_NOW"
	fi
	tap_diag "$stat_out"
fi

tap_check "rmmod rsiw_ulp" ulp_unload
tap_done
