# Helpers for the two-VM selftests (selftests/pair/*.sh), sourced after
# selftests/lib.sh. qemu/run-tests.sh --pair boots two VMs, "a" and "b", joined
# by one virtual Ethernet link, and runs each test in both at once; the two
# halves of a test agree on what to do through files in a directory both VMs
# can write.
#
# The runner passes, in the environment:
#   PAIR_ROLE       a or b: which half this is
#   PAIR_MAC        the MAC of this VM's NIC on the link
#   PAIR_ADDR       this VM's address on the link (198.18.0.1 for a, .2 for b)
#   PAIR_PEER_ADDR  the other VM's address
#   PAIR_SYNC       the shared directory for pair_post and pair_wait
#   PAIR_RESULTS    this VM's results directory (the test writes what it wants
#                   kept, e.g. captures, to $PAIR_RESULTS/$TEST_NAME)
# shellcheck shell=bash
# The PAIR_* variables come from the environment:
# shellcheck disable=SC2153

case ${PAIR_ROLE:-} in
a) PAIR_PEER=b ;;
b) PAIR_PEER=a ;;
*)
	echo "Bail out! PAIR_ROLE is not set: run the pair tests with qemu/run-tests.sh --pair"
	exit 1
	;;
esac
for _v in PAIR_MAC PAIR_ADDR PAIR_PEER_ADDR PAIR_SYNC PAIR_RESULTS; do
	[ -n "${!_v:-}" ] || { echo "Bail out! $_v is not set (qemu/run-tests.sh --pair sets it)"; exit 1; }
done
unset _v

# Per test, so a late file of one test never satisfies a wait of the next.
PAIR_DIR=$PAIR_SYNC/$TEST_NAME
PAIR_OUT=$PAIR_RESULTS/$TEST_NAME
mkdir -p "$PAIR_DIR" "$PAIR_OUT"
# How long pair_wait waits by default (s): long enough for the peer's longest
# step; the test's own timeout and the host runner bound it anyway.
PAIR_WAIT=${PAIR_WAIT:-600}
PAIR_NETDEV=

# pair_post NAME [TEXT]: tell the peer that step NAME is done, with TEXT.
# Written aside and renamed: the peer never reads a half-written file.
pair_post() {
	printf '%s\n' "${2:-}" >"$PAIR_DIR/.$PAIR_ROLE.$1.tmp" &&
		mv "$PAIR_DIR/.$PAIR_ROLE.$1.tmp" "$PAIR_DIR/$PAIR_ROLE.$1"
}

# pair_wait NAME [SECONDS]: wait until the peer posts NAME; sets PAIR_MSG to
# its TEXT. Fails at once when the peer's test has exited without posting it
# (see pair_exit), or after SECONDS (default PAIR_WAIT); PAIR_MSG says why.
# shellcheck disable=SC2034 # PAIR_MSG is for the caller
pair_wait() {
	local f=$PAIR_DIR/$PAIR_PEER.$1 limit=$((SECONDS + ${2:-$PAIR_WAIT}))
	PAIR_MSG=
	while [ ! -e "$f" ]; do
		if [ -e "$PAIR_DIR/$PAIR_PEER.exit" ] && [ ! -e "$f" ]; then
			PAIR_MSG="VM $PAIR_PEER's half exited before posting '$1': $(cat "$PAIR_DIR/$PAIR_PEER.exit")"
			return 1
		fi
		if ((SECONDS > limit)); then
			PAIR_MSG="VM $PAIR_PEER did not post '$1' within ${2:-$PAIR_WAIT}s"
			return 1
		fi
		nap 0.2
	done
	PAIR_MSG=$(cat "$f")
}

# pair_sync NAME: a barrier: post NAME, then wait for the peer's NAME.
pair_sync() {
	pair_post "$1" && pair_wait "$1" "${2:-$PAIR_WAIT}"
}

# pair_exit: tell the peer this half is done (a waiting peer stops waiting),
# and take the link address down again. From the EXIT trap, before cleanup.
pair_exit() {
	# shellcheck disable=SC2154 # lib.sh's counters
	pair_post exit "after $_tap_n checks, $_tap_failed failed"
	if [ -n "$PAIR_NETDEV" ]; then
		ip addr flush dev "$PAIR_NETDEV" 2>/dev/null
		ip link set dev "$PAIR_NETDEV" down 2>/dev/null
	fi
}
trap 'pair_exit; cleanup' EXIT

# pair_find_netdev: set PAIR_NETDEV to the netdev with PAIR_MAC (udev names it
# by its PCI slot, so look for the MAC).
pair_find_netdev() {
	local f
	for f in /sys/class/net/*/address; do
		if [ "$(cat "$f")" = "$PAIR_MAC" ]; then
			PAIR_NETDEV=$(basename "$(dirname "$f")")
			return 0
		fi
	done
	echo "no netdev has MAC $PAIR_MAC"
	ip -o link show
	return 1
}

# pair_link_up: bring the link up with PAIR_ADDR/24. Taken down again at exit.
pair_link_up() {
	pair_find_netdev || return
	ip addr add "$PAIR_ADDR/24" dev "$PAIR_NETDEV" && ip link set dev "$PAIR_NETDEV" up
}

# pair_peer_reachable: whether the peer's address resolves on the link (a
# neighbour entry in REACHABLE state, probed once if needed).
pair_peer_reachable() {
	ip neigh show "$PAIR_PEER_ADDR" dev "$PAIR_NETDEV" | grep -q REACHABLE && return 0
	# No ping in the image: a TCP connect to a closed port resolves ARP too.
	# The probe's bash gets VM_TIMEOUT_SCALE seconds: on KASAN guests of one
	# vCPU no 1 s probe resolved the peer within a minute; 6 s ones did.
	timeout "${VM_TIMEOUT_SCALE:-1}" bash -c "exec 3<>/dev/tcp/$PAIR_PEER_ADDR/9" 2>/dev/null
	ip neigh show "$PAIR_PEER_ADDR" dev "$PAIR_NETDEV" | grep -qE 'REACHABLE|STALE|DELAY'
}
