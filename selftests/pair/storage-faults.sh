#!/usr/bin/env bash
# NFS/RDMA and NVMe-oF across two VMs through faults on the link between
# them, with rsiw and then with the C siw, so that each fault's throughput
# stands next to the C siw's. VM b serves (knfsd on a tmpfs export, nvmet-rdma
# on a memory-backed null_blk), VM a is the client (NFSv4.2 mount, nvme-rdma
# host reconnecting every 2 s) and injects the faults.
#
# Rounds (FAULT_PAIR_ROUNDS, "A:B" the drivers of VM a and VM b; default
# "rsiw:rsiw siw:siw", make it "rsiw:siw siw:rsiw" for the two mixed pairings):
# each loads its drivers, adds a device on the link's NIC, sets both ULPs up,
# runs every case, tears everything down and unloads the drivers. The C siw
# asks for MPA CRC (the tree's siw has that knob, see scripts/siw-crc-knob.sh;
# FAULT_PAIR_SIW_CRC=0 leaves it off), so that every pairing moves the same
# bytes with the same CRC work.
# Cases, each run first with NFS (fio writes FAULT_PAIR_MB MiB of 64 KiB blocks
# at queue depth 4 to a file, reads them back, crc32c verified), then with
# NVMe-oF (the same on the namespace):
# - no fault;
# - netem on both VMs' NICs (both directions), one case per entry of
#   FAULT_PAIR_NETEM (';'-separated): by default loss 1 %, loss 5 %, reorder
#   25 % (with a 10 ms delay), duplication 1 %, delay 20 ms +- 10 ms and
#   corruption 0.1 %, each alone;
# - the client's TCP connections to the ULP's port reset mid-transfer (ss -K on
#   a: RST; the ULP reconnects);
# - a's NIC down for 5 s mid-transfer, then up;
# - both NICs' MTU 1280 mid-transfer (1500 again after).
# FAULT_PAIR_CASES picks the kinds (base netem reset down mtu; all by default).
# Each case also shows, for both VMs, what TCP did (segments sent and resent,
# timeouts, fast retransmits, loss probes) and, per connection, how long it had
# data to send and whether the receive window or the send buffer held it.
# Expected in each: fio ends with every block written and verified, and the
# mount still uses RDMA and the NVMe controller is live again. After the
# resets the NFS transport and the NVMe host connected again. At the end of
# each round: no QP or CM id left on either device, no socket on the ULPs'
# ports but TIME-WAIT, the drivers unload, no splat; the runner's kmemleak
# scan covers both VMs. VM a prints the table: per case and ULP, each round's
# write and read throughput and the first round's over the second's, and
# keeps it in $PAIR_RESULTS/storage-faults/throughput.tsv.
# The peer VM killed mid-transfer is peer-death.
# timeout: 3000
# tier: full (about 20 minutes for the two rounds on two TCG guests; in make
# check, netns runs the test ULP through netem across namespaces, ulp-removal
# removes the device under NVMe-oF I/O, and interop-siw and the one-VM ULP
# tests cover the drivers and ULPs themselves)
# Helpers run through tap_check and the EXIT trap:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=../ulp-setup.sh
. "$SELFTESTS/ulp-setup.sh"
# shellcheck source=pair.sh
. "$SELFTESTS/pair/pair.sh"
require rdma timeout fio nvme mount.nfs rpc.nfsd rpc.mountd rpcbind exportfs tc ss

FAULT_PAIR_ROUNDS=${FAULT_PAIR_ROUNDS:-rsiw:rsiw siw:siw}
FAULT_PAIR_MB=${FAULT_PAIR_MB:-4}
FAULT_PAIR_SIW_CRC=${FAULT_PAIR_SIW_CRC:-1}
# Which kinds of case run (all by default): base (no fault), netem, reset,
# down, mtu.
FAULT_PAIR_CASES=${FAULT_PAIR_CASES:-base netem reset down mtu}
FAULT_PAIR_NETEM=${FAULT_PAIR_NETEM:-loss 1%;loss 5%;delay 10ms reorder 25%;duplicate 1%;delay 20ms 10ms;corrupt 0.1%}
# A's longest step between two of its requests to b is a case's fio (up to
# 600 s each for NFS and NVMe-oF).
PAIR_WAIT=1300
nqn=nqn.2014-08.org.rsiw:pair-storage-faults
# The NVMe host's keep-alive and reconnects: a dead queue is noticed within
# 5 s and retried every 2 s, for up to 10 minutes.
NVME_OPTS=(--keep-alive-tmo=5 --reconnect-delay=2 --ctrl-loss-tmo=600)
table=$PAIR_OUT/throughput.tsv

fio_pid=
on_exit() {
	stop_fio
	ulp_cleanup
	pair_exit
	cleanup
}
trap on_exit EXIT

# use_driver NAME: the driver (rsiw or siw) of this VM for the round.
use_driver() {
	case $1 in
	rsiw) RSIW_MODULE=rsiw RSIW_LINK_TYPE=rsiw dev=rsiw0 load_args=() ;;
	siw)
		RSIW_MODULE=siw RSIW_LINK_TYPE=siw dev=siw0 load_args=()
		((FAULT_PAIR_SIW_CRC)) && load_args=(mpa_crc_required=1)
		;;
	*) return 1 ;;
	esac
}
for c in $FAULT_PAIR_CASES; do
	[[ $c =~ ^(base|netem|reset|down|mtu)$ ]] ||
		tap_bail "FAULT_PAIR_CASES: '$c' is none of base netem reset down mtu"
done
for r in $FAULT_PAIR_ROUNDS; do
	[[ $r =~ ^(rsiw|siw):(rsiw|siw)$ ]] ||
		tap_bail "FAULT_PAIR_ROUNDS: '$r' is not A:B with A and B each rsiw or siw"
done

tap_check "link up: NIC $PAIR_MAC with $PAIR_ADDR/24" pair_link_up || tap_bail "no link"
pair_sync ready || tap_bail "$PAIR_MSG"
tap_wait "the peer $PAIR_PEER_ADDR answers on the link" 10 pair_peer_reachable

# ---------------------------------------------------------------- faults

# tcp_counters: this VM's TCP segments sent, retransmitted, retransmission
# timeouts, fast retransmits and tail loss probes, in that order.
tcp_counters() {
	awk '($1 == "Tcp:" || $1 == "TcpExt:") && !($1 in hdr) { hdr[$1] = 1; for (i = 2; i <= NF; i++) name[$1, i] = $i; next }
		$1 in hdr { for (i = 2; i <= NF; i++) v[name[$1, i]] = $i }
		END { print v["OutSegs"], v["RetransSegs"], v["TCPTimeouts"], v["TCPFastRetrans"], v["TCPLossProbes"] }' \
		/proc/net/snmp /proc/net/netstat
}

# tcp_delta BEFORE AFTER: what TCP did between two tcp_counters.
tcp_delta() {
	local -a b a
	read -ra b <<<"$1"
	read -ra a <<<"$2"
	((${#a[@]} == 5 && ${#b[@]} == 5)) || { echo "no counters ('$1' -> '$2')"; return; }
	awk -v o=$((a[0] - b[0])) -v r=$((a[1] - b[1])) -v t=$((a[2] - b[2])) -v f=$((a[3] - b[3])) \
		-v p=$((a[4] - b[4])) 'BEGIN { printf "%d segments sent, %d resent (%.1f %%), %d timeouts, %d fast retransmits, %d loss probes",
			o, r, (o > 0 ? 100 * r / o : 0), t, f, p }'
}

# tcp_chrono PORT: per established connection on PORT, "LOCAL>PEER BUSY RWND
# SNDBUF ACKED": how long (ms) TCP had data to send, how much of that it was
# held by the peer's receive window and by its own send buffer (tcp_info's
# chrono times; busy time not held by either is congestion-window bound), and
# the bytes acked.
tcp_chrono() {
	ss -tinH state established "( sport = :$1 or dport = :$1 )" | awk '
		/^[^ \t]/ { key = $(NF - 1) ">" $NF; next }
		{
			b = r = s = a = 0
			for (i = 1; i <= NF; i++) {
				if ($i ~ /^busy:/) { b = $i; gsub(/[^0-9]/, "", b) }
				if ($i ~ /^rwnd_limited:/) { r = $i; sub(/ms.*/, "", r); gsub(/[^0-9]/, "", r) }
				if ($i ~ /^sndbuf_limited:/) { s = $i; sub(/ms.*/, "", s); gsub(/[^0-9]/, "", s) }
				if ($i ~ /^bytes_acked:/) { a = $i; gsub(/[^0-9]/, "", a) }
			}
			print key, b + 0, r + 0, s + 0, a + 0
		}'
}

# chrono_delta BEFORE AFTER MS: per connection of AFTER (tcp_chrono), what
# changed since BEFORE, over a case of MS milliseconds.
chrono_delta() {
	awk -v ms="$3" 'NR == FNR { b[$1] = $2; r[$1] = $3; s[$1] = $4; a[$1] = $5; next }
		$5 > a[$1] {
			printf "%s%s busy %d of %d ms (rwnd %d, sndbuf %d), %d KiB acked", sep, $1, $2 - b[$1], ms,
				$3 - r[$1], $4 - s[$1], ($5 - a[$1]) / 1024
			sep = "; "
		}' <(printf '%s\n' "$1") <(printf '%s\n' "$2")
}

# fault_action ACTION [ARG]...: one step on this VM: netem NETEM..., clear
# (the NIC's root qdisc back), mtu N, stats (netem's counters), tcp
# (tcp_counters) or chrono PORT (tcp_chrono).
fault_action() {
	case $1 in
	netem) shift; modprobe sch_netem 2>/dev/null; tc qdisc add dev "$PAIR_NETDEV" root netem "$@" ;;
	clear) tc qdisc del dev "$PAIR_NETDEV" root ;;
	mtu) ip link set dev "$PAIR_NETDEV" mtu "$2" ;;
	stats) tc -s qdisc show dev "$PAIR_NETDEV" | grep -o 'Sent.*)' ;;
	tcp) tcp_counters ;;
	chrono) tcp_chrono "$2" ;;
	*) echo "no fault action '$1'"; return 1 ;;
	esac
}

# remote ACTION [ARG]...: have VM b run fault_action ACTION (one request of a
# numbered series, see serve_requests) and wait for it; its status, and its
# output on stdout.
req=0
remote() {
	req=$((req + 1))
	pair_post "req.$req" "$*" || return
	pair_wait "req.$req.done" 120 || { echo "$PAIR_MSG"; return 1; }
	printf '%s\n' "${PAIR_MSG#* }"
	[ "${PAIR_MSG%% *}" = 0 ]
}

# both ACTION [ARG]...: fault_action on both VMs, this one first.
both() {
	fault_action "$@" && remote "$@"
}

# serve_requests: on VM b, run VM a's requests until it sends "end" (or
# goes away).
serve_requests() {
	local out st
	while :; do
		req=$((req + 1))
		pair_wait "req.$req" || { echo "$PAIR_MSG"; return 1; }
		if [ "$PAIR_MSG" = end ]; then
			pair_post "req.$req.done" 0
			return 0
		fi
		# shellcheck disable=SC2086 # the request's words
		out=$(fault_action $PAIR_MSG 2>&1)
		st=$?
		pair_post "req.$req.done" "$st $out"
	done
}

# ---------------------------------------------------------------- VM a: the cases

# The case's ULP: FILE (NFS file or NVMe namespace), PORT (the server's),
# WHAT.
ulp_nfs() { file=$mnt/fault port=$NFS_RDMA_PORT what=NFS; }
ulp_nvme() { file=$nvme_dev port=$NVME_RDMA_PORT what=NVMe-oF; }

# start_fio NAME: fio in the background on $file: write, then read back and
# verify; its output in $TEST_TMP/fio.
start_fio() {
	local keep=()
	[ "$what" = NFS ] && keep=(--unlink=1)
	fio --name="$1" --filename="$file" --rw=write --bs=64k --size="${FAULT_PAIR_MB}m" --direct=1 \
		--ioengine=libaio --iodepth=4 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 "${keep[@]}" >"$TEST_TMP/fio" 2>&1 &
	fio_pid=$!
}

# mid_transfer: 1 s into fio's run, a check that it still runs, so that the
# fault comes under I/O.
mid_transfer() {
	sleep 1
	tap_result "$(kill -0 "$fio_pid" 2>/dev/null; echo $?)" "$L: fio still runs when the fault comes" \
		"$(tail -n 5 "$TEST_TMP/fio")"
}

# kib_s OUT OP: fio's aggregate bandwidth of OP (READ or WRITE) in KiB/s.
kib_s() {
	sed -nE "s/^ +$2: bw=([0-9.]+)([KMG]?)iB\/s.*/\1 \2/p" <<<"$1" | head -n 1 |
		awk '{ m = ($2 == "G") ? 1048576 : ($2 == "M") ? 1024 : 1
			printf "%.0f", $1 * m }'
}

# end_fio: wait for fio (at most 600 s); one check for its result; the
# throughput goes to the table.
end_fio() {
	local st out w=- r=- desc="$L: fio writes $FAULT_PAIR_MB MiB, reads it back, crc32c verified"
	if ! wait_for 600 eval "! kill -0 $fio_pid 2>/dev/null"; then
		tap_fail "$desc" "fio still runs after 600 s" "$(tail -n 5 "$TEST_TMP/fio")"
		stop_fio
	else
		wait "$fio_pid"
		st=$?
		fio_pid=
		out=$(cat "$TEST_TMP/fio")
		if fio_verified "$st" "$out"; then
			tap_ok "$desc"
			w=$(kib_s "$out" WRITE) r=$(kib_s "$out" READ)
			tap_diag "$L: write ${w:-?} KiB/s, read ${r:-?} KiB/s"
		else
			tap_fail "$desc" "exit status $st" "$(grep -iE 'error|verify' <<<"$out" | head -n 5)" \
				"$(tail -n 25 <<<"$out")"
		fi
	fi
	printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$case" "$what" "${w:--}" "${r:--}" >>"$table"
}

# ulp_healthy: the ULP is usable again: the mount on RDMA, or the NVMe
# controller live (it may still be reconnecting after the fault).
ulp_healthy() {
	if [ "$what" = NFS ]; then
		[ "$(nfs_mount_xprt "$mnt")" = rdma ]
	else
		[ "$(cat "/sys/class/nvme/$nvme_ctrl/state" 2>/dev/null)" = live ]
	fi
}

# ulp_state: what ulp_healthy looked at.
ulp_state() {
	if [ "$what" = NFS ]; then
		echo "xprt $(nfs_mount_xprt "$mnt")"
	else
		echo "$nvme_ctrl state $(cat "/sys/class/nvme/$nvme_ctrl/state" 2>&1)"
	fi
}

# one_case INJECT: the case $case on the ULP $what: fio through it, INJECT
# (a function, or : for none) run 1 s into the transfer, then the ULP must be
# healthy within 60 s.
one_case() {
	local a0 b0 ac0 bc0 t0
	L="$round, $case, $what"
	# How hard TCP worked on each side, and what held it: not in $(...),
	# remote counts its requests.
	a0=$(tcp_counters) ac0=$(tcp_chrono "$port")
	remote tcp >"$TEST_TMP/b-tcp" 2>&1
	b0=$(<"$TEST_TMP/b-tcp")
	remote chrono "$port" >"$TEST_TMP/b-chrono" 2>&1
	bc0=$(<"$TEST_TMP/b-chrono")
	t0=$(date +%s%3N)
	start_fio "${case// /-}"
	if [ "$1" != : ] && mid_transfer; then
		"$1"
	fi
	end_fio
	t0=$(($(date +%s%3N) - t0))
	remote tcp >"$TEST_TMP/b-tcp" 2>&1
	remote chrono "$port" >"$TEST_TMP/b-chrono" 2>&1
	tap_diag "$L: TCP on a: $(tcp_delta "$a0" "$(tcp_counters)"); on b: $(tcp_delta "$b0" "$(<"$TEST_TMP/b-tcp")")" \
		"$L: sending on a: $(chrono_delta "$ac0" "$(tcp_chrono "$port")" "$t0")" \
		"$L: sending on b: $(chrono_delta "$bc0" "$(<"$TEST_TMP/b-chrono")" "$t0")"
	if wait_for 60 ulp_healthy; then
		tap_ok "$L: $(ulp_state) afterwards"
	else
		tap_fail "$L: the ULP is usable afterwards" "$(ulp_state)" "$(kmsg_since_mark | tail -n 15)"
	fi
}

# each_ulp INJECT: one_case INJECT with NFS, then with NVMe-oF.
each_ulp() {
	ulp_nfs
	one_case "$1"
	ulp_nvme
	one_case "$1"
}

# The faults injected mid-transfer.
inject_reset() {
	local open
	open=$(ss -tnH state established "( dport = :$port )" | wc -l)
	tap_check "$L: ss -K kills the client's $open connection(s) to port $port" \
		ss -K -tnH state established "( dport = :$port )"
}
inject_link_down() {
	tap_check "$L: $PAIR_NETDEV down for 5 s, then up" \
		eval "ip link set dev $PAIR_NETDEV down && sleep 5 && ip link set dev $PAIR_NETDEV up"
}
inject_mtu() {
	tap_check "$L: both NICs to MTU 1280 under traffic" both mtu 1280
}

# nvme_reconnects: how often nvme-rdma reported a reconnect since kmsg_mark.
nvme_reconnects() {
	kmsg_since_mark | grep -c "$nvme_ctrl: Successfully reconnected"
}

# wants KIND: whether FAULT_PAIR_CASES has KIND.
wants() {
	[[ " $FAULT_PAIR_CASES " == *" $1 "* ]]
}

# client_round: VM a's cases of the round.
client_round() {
	local n netems c0 c1
	pair_wait "$step.ready" || { tap_fail "$round: the servers on VM b are up" "$PAIR_MSG"; return 1; }
	if [ "$PAIR_MSG" != ok ]; then
		tap_fail "$round: the servers on VM b are up" "$PAIR_MSG"
		return 1
	fi
	mnt=$TEST_TMP/mnt
	tap_check "$round: NFSv4.2 mount of $PAIR_PEER_ADDR over RDMA" \
		nfs_mount "$PAIR_PEER_ADDR" / 4.2 "$mnt" || return
	tap_check "$round: nvme connect -t rdma -a $PAIR_PEER_ADDR (keep-alive 5 s, reconnect every 2 s)" \
		nvme_connect "$PAIR_PEER_ADDR" "$NVME_RDMA_PORT" "$nqn" "${NVME_OPTS[@]}" || return
	nvme_dev=$(nvme_namespaces "$nqn" | head -n 1)
	nvme_ctrl=$(nvme_ctrls "$nqn" | head -n 1)
	[ -n "$nvme_dev" ] && [ -n "$nvme_ctrl" ] || { tap_fail "$round: the NVMe namespace appears"; return 1; }

	if wants base; then
		case="no fault"
		each_ulp :
	fi

	netems=()
	wants netem && IFS=';' read -ra netems <<<"$FAULT_PAIR_NETEM"
	for n in "${netems[@]}"; do
		case="netem $n"
		# shellcheck disable=SC2086 # netem's words
		if ! tap_check "$round: netem on both NICs: $n" both netem $n; then
			both clear >/dev/null 2>&1
			continue
		fi
		each_ulp :
		# Not in $(...): remote counts its requests in this shell.
		remote stats >"$TEST_TMP/b-stats" 2>&1
		tap_diag "$round, $case: a's NIC: $(fault_action stats); b's: $(cat "$TEST_TMP/b-stats")"
		tap_check "$round: netem off" both clear
	done

	if wants reset; then
		case="TCP reset"
		kmsg_mark
		c0=$(nfs_mount_connects "$mnt")
		each_ulp inject_reset
		c1=$(nfs_mount_connects "$mnt")
		tap_result "$( ((${c1:-0} > ${c0:-0})); echo $?)" \
			"$round: after the reset the NFS transport connected again (connects ${c0:-?} -> ${c1:-?})"
		c1=$(nvme_reconnects)
		tap_result "$( ((c1 > 0)); echo $?)" "$round: after the reset the NVMe host reconnected ($c1 time(s))" \
			"$(kmsg_since_mark | grep -E "$nvme_ctrl|nvme" | tail -n 10)"
	fi

	if wants down; then
		case="link down 5 s"
		each_ulp inject_link_down
	fi

	if wants mtu; then
		case="MTU 1500 to 1280"
		each_ulp inject_mtu
		tap_check "$round: MTU back to 1500 on both NICs" both mtu 1500
	fi

	tap_wait "$round: $dev is ACTIVE" 30 port_state_is "$dev" ACTIVE
	tap_check "$round: umount" nfs_umount "$mnt"
	tap_check "$round: nvme disconnect" nvme_disconnect "$nqn"
}

# ---------------------------------------------------------------- VM b: the servers

server_up() {
	local nb=rsiwfaultnb
	tap_check "$round: tmpfs to export" nfs_export_tmpfs "$TEST_TMP/export" 256M &&
		tap_check "$round: knfsd on rdma port $NFS_RDMA_PORT" nfs_server_start "$TEST_TMP/export" &&
		tap_check "$round: null_blk device (memory-backed, 64 MiB)" nvmet_null_blk "$nb" 64 &&
		tap_check "$round: nvmet subsystem on /dev/$nb" nvmet_subsys "$nqn" "/dev/$nb" &&
		tap_check "$round: nvmet-rdma port on $PAIR_ADDR:$NVME_RDMA_PORT" \
			nvmet_port 1 "$PAIR_ADDR" "$NVME_RDMA_PORT" "$nqn"
}

# ---------------------------------------------------------------- rounds

# left_sockets: TCP sockets on the ULPs' ports but TIME-WAIT.
left_sockets() {
	ulp_tcp_sockets "$NFS_RDMA_PORT"
	ulp_tcp_sockets "$NVME_RDMA_PORT"
}

# round_end: both VMs: nothing left on the device, the device deleted and
# the driver unloaded.
round_end() {
	tap_wait "$round: no QP or CM id left on $dev" 60 \
		eval "[ \"\$(ulp_res_count $dev qp)\" = 0 ] && [ \"\$(ulp_res_count $dev cm_id)\" = 0 ]"
	if wait_for 60 eval '[ -z "$(left_sockets)" ]'; then
		tap_ok "$round: no socket on ports $NFS_RDMA_PORT and $NVME_RDMA_PORT but TIME-WAIT"
	else
		tap_fail "$round: no socket on ports $NFS_RDMA_PORT and $NVME_RDMA_PORT but TIME-WAIT (within 60 s)" \
			"$(left_sockets)"
	fi
	tap_check "$round: undo the ULPs' setup and unload their modules" ulp_cleanup
	tap_check "$round: rdma link delete $dev" rdma_link_del "$dev"
	_links=()
	tap_check "$round: unload $RSIW_MODULE" rsiw_unload
	_loaded=0
}

rounds=0
for round in $FAULT_PAIR_ROUNDS; do
	rounds=$((rounds + 1))
	step=round$rounds # the round's sync steps
	if [ "$PAIR_ROLE" = a ]; then use_driver "${round%%:*}"; else use_driver "${round#*:}"; fi
	kmsg_mark
	tap_check "$round: load $RSIW_MODULE${load_args[*]:+ ${load_args[*]}}" rsiw_load "${load_args[@]}" ||
		tap_bail "cannot load $RSIW_MODULE"
	tap_check "$round: rdma link add $dev type $RSIW_LINK_TYPE netdev $PAIR_NETDEV" \
		rdma_link_add "$dev" "$PAIR_NETDEV" || tap_bail "cannot add the link"
	tap_wait "$round: $dev is ACTIVE" 10 port_state_is "$dev" ACTIVE
	pair_sync "$step.up" || tap_bail "$PAIR_MSG"
	if [ "$PAIR_ROLE" = a ]; then
		client_round
		remote end >/dev/null || tap_fail "$round: VM b took the end of the requests" "$PAIR_MSG"
		pair_post "$step.done"
	else
		if server_up; then pair_post "$step.ready" ok; else pair_post "$step.ready" "VM b's servers did not start"; fi
		tap_check "$round: serve VM a's fault requests" serve_requests
		pair_wait "$step.done" || tap_fail "$round: VM a finished the round" "$PAIR_MSG"
		tap_check "$round: remove the nvmet port" nvmet_port_del 1 "$nqn"
		tap_check "$round: stop the NFS server" nfs_server_stop
	fi
	round_end
	check_no_splat "$round: no kernel splat"
	pair_sync "$step.end" || tap_bail "$PAIR_MSG"
done

# The table: per case and ULP, each round's write/read KiB/s, and the first
# round's over the second's.
if [ "$PAIR_ROLE" = a ] && [ -s "$table" ]; then
	tap_diag "throughput in KiB/s, write/read, per round (drivers of VM a:VM b; fio ${FAULT_PAIR_MB} MiB, 64 KiB, QD 4), then the first round's over the second's:" \
		"$(awk -F'\t' -v rounds="$FAULT_PAIR_ROUNDS" '
			BEGIN { nr = split(rounds, r, " ") }
			!(($2 SUBSEP $3) in seen) { seen[$2, $3] = 1; key[++n] = $2 SUBSEP $3 }
			{ w[$1, $2, $3] = $4; rd[$1, $2, $3] = $5 }
			function ratio(a, b) { return (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/ && b > 0) ? sprintf("%.2f", a / b) : "-" }
			END {
				for (i = 1; i <= n; i++) {
					split(key[i], k, SUBSEP)
					line = sprintf("%-24s %-8s", k[1], k[2])
					for (j = 1; j <= nr; j++)
						line = line sprintf(" %s %s/%s", r[j], w[r[j], k[1], k[2]], rd[r[j], k[1], k[2]])
					if (nr >= 2)
						line = line sprintf("  ratio %s/%s", ratio(w[r[1], k[1], k[2]], w[r[2], k[1], k[2]]),
							ratio(rd[r[1], k[1], k[2]], rd[r[2], k[1], k[2]]))
					print line
				}
			}' "$table")"
fi
tap_result "$( ((rounds > 0)); echo $?)" "ran $rounds round(s): $FAULT_PAIR_ROUNDS"
tap_done
