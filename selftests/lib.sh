# Helpers for rsiw's VM selftests. Sourced by selftests/*.sh, which run as
# root inside the VM (see qemu/run-tests.sh and Documentation/rsiw/testing.rst).
#
# A test prints TAP: one "ok N - ..." or "not ok N - ..." line per check, "#"
# diagnostics, and the plan "1..N" at the end (tap_done). Resources made with
# the helpers below (driver load, netdevs, RDMA links, temp files) are undone
# when the test exits, however it exits.
# shellcheck shell=bash
set -uo pipefail

SELFTESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../qemu/vm.sh
. "$SELFTESTS/../qemu/vm.sh"

# The driver under test. RSIW_MODULE=siw RSIW_LINK_TYPE=siw run the tests
# against the kernel's C siw, to check the tests themselves.
RSIW_MODULE=${RSIW_MODULE:-rsiw}
RSIW_LINK_TYPE=${RSIW_LINK_TYPE:-rsiw}
RSIW_KO=${RSIW_KO:-$RSIW_ROOT/drivers/rsiw/rsiw.ko}

TEST_NAME=$(basename "$0" .sh)
TEST_TMP=$(mktemp -d "/tmp/rsiw-$TEST_NAME.XXXXXX")

# ---------------------------------------------------------------- TAP output

_tap_n=0
_tap_failed=0

# tap_diag TEXT...: print each non-empty TEXT as TAP diagnostics, one "# "
# line per line.
tap_diag() {
	local t l
	for t in "$@"; do
		[ -n "$t" ] || continue
		while IFS= read -r l; do echo "# $l"; done <<<"$t"
	done
}

# _tap_next: count a check, and note in TEST_OUT/check-times (when the runner
# gives a results directory) the second of the test it ended in.
_tap_next() {
	_tap_n=$((_tap_n + 1))
	[ -z "${TEST_OUT:-}" ] || echo "$SECONDS $_tap_n" >>"$TEST_OUT/check-times"
}

# tap_ok DESC: a passing check.
tap_ok() {
	_tap_next
	echo "ok $_tap_n - $*"
}

# tap_fail DESC [DIAG]...: a failing check, with diagnostics.
tap_fail() {
	_tap_next
	_tap_failed=$((_tap_failed + 1))
	echo "not ok $_tap_n - $1"
	shift
	(($#)) && tap_diag "$@"
	return 0
}

# tap_skip DESC REASON: a check that does not apply here (counts as passing).
tap_skip() {
	_tap_next
	echo "ok $_tap_n - $1 # SKIP $2"
}

# tap_result STATUS DESC [DIAG]...: ok when STATUS is 0, else not ok with DIAG.
# Returns STATUS.
tap_result() {
	local st=$1 desc=$2
	shift 2
	if [ "$st" = 0 ]; then tap_ok "$desc"; else tap_fail "$desc" "$@"; fi
	return "$st"
}

# _run CMD [ARG]...: run CMD in this shell (so the helpers below can record
# what they create), its output captured in OUT. Returns CMD's status.
_run() {
	local st
	"$@" >"$TEST_TMP/out" 2>&1
	st=$?
	OUT=$(<"$TEST_TMP/out")
	return "$st"
}

# tap_check DESC CMD [ARG]...: run CMD; ok when it succeeds, else not ok with
# its output and status. Sets OUT to the output. Returns CMD's status. The
# diagnostics are made only for a failure (head is an exec).
tap_check() {
	local desc=$1 st
	shift
	_run "$@"
	st=$?
	if [ "$st" = 0 ]; then
		tap_ok "$desc"
	else
		tap_fail "$desc" "\$ $*" "$(head -n 30 <<<"$OUT")" "exit status $st"
	fi
	return "$st"
}

# tap_check_fails DESC CMD [ARG]...: run CMD; ok when it fails. Sets OUT.
tap_check_fails() {
	local desc=$1 st
	shift
	_run "$@"
	st=$?
	if [ "$st" != 0 ]; then
		tap_ok "$desc"
	else
		tap_fail "$desc" "\$ $*" "succeeded but should have failed" "$(head -n 30 <<<"$OUT")"
		return 1
	fi
}

# tap_match DESC REGEX TEXT: ok when TEXT has a line matching the extended
# REGEX; else not ok, showing TEXT.
tap_match() {
	if grep -qE -- "$2" <<<"$3"; then
		tap_ok "$1"
	else
		tap_fail "$1" "no line matches /$2/ in:" "$(head -n 30 <<<"$3")"
		return 1
	fi
}

# tap_no_match DESC REGEX TEXT: ok when no line of TEXT matches REGEX.
tap_no_match() {
	local hits
	if hits=$(grep -E -- "$2" <<<"$3"); then
		tap_fail "$1" "unexpected lines matching /$2/:" "$(head -n 30 <<<"$hits")"
		return 1
	fi
	tap_ok "$1"
}

# tap_bail REASON: stop the test: nothing after this could mean anything.
tap_bail() {
	echo "Bail out! $*"
	exit 1
}

# tap_done: undo the test's resources, print the plan, exit 0 if every check passed.
tap_done() {
	cleanup
	echo "1..$_tap_n"
	exit $((_tap_failed > 0))
}

# require CMD...: bail unless every CMD is installed.
require() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null || tap_bail "$c is not installed (scripts/deps.sh installs it)"
	done
}

# ---------------------------------------------------------------- cleanup

_links=()
_netdevs=()
_loaded=0

# cleanup: delete the RDMA links and netdevs this test made, unload the driver
# if this test loaded it, remove TEST_TMP. Runs at exit; safe to call twice.
cleanup() {
	local i out
	for ((i = ${#_links[@]} - 1; i >= 0; i--)); do
		if rdma_dev_exists "${_links[$i]}"; then
			out=$(rdma link delete "${_links[$i]}" 2>&1) || tap_diag "cleanup: rdma link delete ${_links[$i]}: $out"
		fi
	done
	_links=()
	for ((i = ${#_netdevs[@]} - 1; i >= 0; i--)); do
		if [ -e "/sys/class/net/${_netdevs[$i]}" ]; then
			out=$(ip link delete "${_netdevs[$i]}" 2>&1) || tap_diag "cleanup: ip link delete ${_netdevs[$i]}: $out"
		fi
	done
	_netdevs=()
	if ((_loaded)) && rsiw_loaded; then
		out=$(rsiw_unload 2>&1) || tap_diag "cleanup: unloading $RSIW_MODULE: $out"
	fi
	_loaded=0
	rm -rf "$TEST_TMP"
}
trap cleanup EXIT

# ---------------------------------------------------------------- driver

# rsiw_is_reference: whether the tests run against the C siw (RSIW_MODULE=siw)
# rather than rsiw. Checks of rsiw's own contract are skipped then.
rsiw_is_reference() {
	[ "$RSIW_MODULE" != rsiw ]
}

# rsiw_loaded: whether the driver module is loaded.
rsiw_loaded() {
	[ -d "/sys/module/$RSIW_MODULE" ]
}

_rsiw_install_checked=0
# rsiw_installed: whether modprobe finds rsiw as $RSIW_KO (make module installs
# each build in the VM's module tree); else says why.
rsiw_installed() {
	local path
	path=$(modinfo -n rsiw 2>&1) || { echo "modprobe finds no rsiw: $path (make install)"; return 1; }
	cmp -s "$path" "$RSIW_KO" || { echo "modprobe finds $path, not $RSIW_KO (make install)"; return 1; }
}

# rsiw_load [PARAM=VALUE]...: load the driver the way users do, with modprobe
# (rsiw from the module tree, checked to be $RSIW_KO); it is unloaded again at
# exit.
rsiw_load() {
	if [ "$RSIW_MODULE" = rsiw ] && ((!_rsiw_install_checked)); then
		[ -f "$RSIW_KO" ] || { echo "$RSIW_KO does not exist (make module)"; return 1; }
		rsiw_installed || return
		# Once per test: tests that load rsiw every round should not read the
		# module files twice more each time.
		_rsiw_install_checked=1
	fi
	modprobe "$RSIW_MODULE" "$@" || return
	_loaded=1
}

# hw_read DEV NAME...: port counters NAME of DEV (what rdma statistic shows; read
# from sysfs with builtins), as "name=value ..." in HW_NOW.
hw_read() {
	local dev=$1 n v
	shift
	HW_NOW=
	for n in "$@"; do
		read -r v <"/sys/class/infiniband/$dev/ports/1/hw_counters/$n" || return 1
		HW_NOW+="$n=$v "
	done
}

# hw_deltas BEFORE AFTER: the counters that moved between two hw_read results,
# as "name+delta ..." in their order.
hw_deltas() {
	local -A before
	local kv out=
	for kv in $1; do before[${kv%%=*}]=${kv#*=}; done
	for kv in $2; do
		((${kv#*=} != ${before[${kv%%=*}]:-0})) &&
			out+="${kv%%=*}+$((${kv#*=} - ${before[${kv%%=*}]:-0})) "
	done
	echo "${out% }"
}

# rsiw_unload: unload the driver, waiting at most 60 s.
rsiw_unload() {
	timeout 60 rmmod "$RSIW_MODULE"
}

# ---------------------------------------------------------------- netdevs

# Test addresses come from 198.18.0.0/15 (RFC 2544, benchmarking), MACs are
# locally administered 02:52:53:49:57:xx ("RSIW").

# netdev_dummy NAME MAC ADDR/PREFIX: create a dummy netdev, up, with that MAC
# and IPv4 address. Deleted at exit.
netdev_dummy() {
	modprobe dummy 2>/dev/null
	ip link add "$1" address "$2" type dummy || return
	_netdevs+=("$1")
	ip addr add "$3" dev "$1" && ip link set dev "$1" up
}

# netdev_veth NAME PEER MAC ADDR/PREFIX PEER_MAC PEER_ADDR/PREFIX: create a
# veth pair, both ends up. Deleted at exit.
netdev_veth() {
	modprobe veth 2>/dev/null
	ip link add "$1" address "$3" type veth peer name "$2" address "$5" || return
	_netdevs+=("$1" "$2")
	ip addr add "$4" dev "$1" && ip addr add "$6" dev "$2" &&
		ip link set dev "$1" up && ip link set dev "$2" up
}

# netdev_veth_ns NS NAME MAC ADDR/PREFIX PEER PEER_MAC PEER_ADDR/PREFIX: make
# network namespace NS and a veth pair, NAME here and PEER in NS, both ends
# up, and NS's loopback up. NAME is deleted at exit (PEER with it); NS is the
# caller's to delete.
netdev_veth_ns() {
	modprobe veth 2>/dev/null
	ip netns add "$1" || return
	ip link add "$2" address "$3" type veth peer name "$5" address "$6" netns "$1" || return
	_netdevs+=("$2")
	ip addr add "$4" dev "$2" && ip link set dev "$2" up &&
		ip -n "$1" addr add "$7" dev "$5" && ip -n "$1" link set dev "$5" up &&
		ip -n "$1" link set lo up
}

# netdev_mac NAME: the netdev's MAC address.
netdev_mac() {
	cat "/sys/class/net/$1/address"
}

# mac_gid MAC: the GID derived from MAC as sysfs and ibv_devinfo print it: the
# six MAC bytes followed by zeros (as the C siw does).
mac_gid() {
	local h=${1//:/}
	echo "${h:0:4}:${h:4:4}:${h:8:4}:0000:0000:0000:0000:0000"
}

# mac_eui64 MAC: the node GUID derived from MAC (modified EUI-64: ff:fe in the
# middle, universal/local bit flipped), as rdma and sysfs print it.
mac_eui64() {
	local h=${1//:/} b0
	b0=$(printf '%02x' $((0x${h:0:2} ^ 2)))
	echo "$b0${h:2:2}:${h:4:2}ff:fe${h:6:2}:${h:8:4}"
}

# ---------------------------------------------------------------- RDMA

# rdma_link_add NAME NETDEV: rdma link add NAME type $RSIW_LINK_TYPE netdev
# NETDEV. Deleted at exit.
rdma_link_add() {
	rdma link add "$1" type "$RSIW_LINK_TYPE" netdev "$2" || return
	_links+=("$1")
}

# beside_siw DEV ND MAC IP SIW_DEV SIW_ND SIW_MAC SIW_IP: load the driver under
# test and the C siw, and make DEV (type $RSIW_LINK_TYPE) on dummy netdev ND
# and SIW_DEV (type siw) on dummy SIW_ND, each with its address (/24), as
# checks; bails out if any step fails. siw is unloaded at exit, after the
# devices (this sets the EXIT trap).
beside_siw() {
	trap 'cleanup; modprobe -r siw 2>/dev/null' EXIT
	tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
	if ! rsiw_is_reference; then
		tap_check "load siw" modprobe siw || tap_bail "cannot load siw"
	fi
	tap_check "dummy $2 ($4)" netdev_dummy "$2" "$3" "$4/24" || tap_bail "no netdev"
	tap_check "dummy $6 ($8)" netdev_dummy "$6" "$7" "$8/24" || tap_bail "no netdev"
	tap_check "rdma link add $1 type $RSIW_LINK_TYPE" rdma_link_add "$1" "$2" || tap_bail "no device"
	tap_check "rdma link add $5 type siw" rdma link add "$5" type siw netdev "$6" ||
		tap_bail "no siw device"
	_links+=("$5")
}

# tcp_listening PORT [ADDR NETDEV]: whether a TCP socket listens on PORT (an
# iWARP listener is one); with ADDR, one that takes connections to ADDR: bound
# to it, or to a wildcard address on NETDEV (ADDR's) or on no device. A wildcard
# rdma_listen makes one listener per iWARP device, one after another.
tcp_listening() {
	local port=$1 addr=${2:-} nd=${3:-}
	if [ -z "$addr" ]; then
		ss -Hltn "sport = :$port" 2>/dev/null | grep -q .
		return
	fi
	ss -Hltn "sport = :$port" 2>/dev/null | awk -v want="$addr:$port" -v port="$port" -v nd="$nd" '
		{ a = $4 }
		a == want || a == "0.0.0.0:" port || a == "*:" port || a == "[::]:" port ||
			a == "0.0.0.0%" nd ":" port || a == "*%" nd ":" port || a == "[::]%" nd ":" port { found = 1 }
		END { exit !found }'
}

# rdma_link_del NAME: rdma link delete NAME.
rdma_link_del() {
	rdma link delete "$1"
}

# rdma_dev_exists NAME: whether the RDMA device NAME is registered.
rdma_dev_exists() {
	[ -e "/sys/class/infiniband/$1" ]
}

# rdma_dev_gone NAME: whether NAME is neither registered nor listed by rdma.
rdma_dev_gone() {
	! rdma_dev_exists "$1" && ! timeout 10 rdma dev show 2>/dev/null | grep -qE "^[0-9]+: $1:"
}

# port_state DEV [PORT]: the port state rdma link show reports (ACTIVE, DOWN...).
port_state() {
	timeout 10 rdma link show "$1/${2:-1}" 2>/dev/null | sed -nE 's/.* state ([A-Z_]+) .*/\1/p'
}

# port_state_is DEV STATE: whether port 1 of DEV is in STATE.
port_state_is() {
	[ "$(port_state "$1")" = "$2" ]
}

# ibv_lists DEV: whether ibv_devices lists DEV (it needs a userspace provider
# library that claims the device).
ibv_lists() {
	ibv_devices 2>/dev/null | awk -v d="$1" '$1 == d { f = 1 } END { exit !f }'
}

# rdma_link_cycles NAME NETDEV N: add and delete link NAME (type
# $RSIW_LINK_TYPE) on NETDEV N times, talking RDMA netlink from one process
# (python3), and check after each step that the device is listed, then not.
# Unlike a loop over the rdma tool it starts no process per cycle, so slab
# counts taken around it move only with what the kernel does for the links.
rdma_link_cycles() {
	python3 - "$1" "$RSIW_LINK_TYPE" "$2" "$3" <<'EOF'
import os, socket, struct, sys

name, link_type, netdev, cycles = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
# From <linux/netlink.h> and <rdma/rdma_netlink.h> (stable uapi).
NETLINK_RDMA, NLDEV = 20, 5
CMD_GET, CMD_NEWLINK, CMD_DELLINK = 1, 3, 4
ATTR_DEV_INDEX, ATTR_DEV_NAME, ATTR_NDEV_NAME, ATTR_LINK_TYPE = 1, 2, 51, 65
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 1, 4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3

sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA)
seq = 0

def attr(kind, payload):
    a = struct.pack("HH", 4 + len(payload), kind) + payload
    return a + b"\0" * (-len(a) % 4)

def string(kind, s):
    return attr(kind, s.encode() + b"\0")

def request(cmd, attrs=b"", flags=NLM_F_ACK):
    """Send one request; return the payloads of its replies, raise on error."""
    global seq
    seq += 1
    sock.send(struct.pack("IHHII", 16 + len(attrs), (NLDEV << 10) + cmd,
                          NLM_F_REQUEST | flags, seq, 0) + attrs)
    replies = []
    while True:
        data = sock.recv(65536)
        off = 0
        while off + 16 <= len(data):
            length, kind, _, rseq, _ = struct.unpack_from("IHHII", data, off)
            body = data[off + 16:off + length]
            off += (length + 3) & ~3
            if rseq != seq:
                continue
            if kind == NLMSG_ERROR:
                err = -struct.unpack_from("i", body)[0]
                if err:
                    raise OSError(err, os.strerror(err))
                return replies
            if kind == NLMSG_DONE:
                return replies
            replies.append(body)

def devices():
    """Map device name to index, from a dump of all RDMA devices."""
    found = {}
    for body in request(CMD_GET, flags=NLM_F_DUMP):
        attrs, off = {}, 0
        while off + 4 <= len(body):
            length, kind = struct.unpack_from("HH", body, off)
            attrs[kind & 0x3fff] = body[off + 4:off + length]
            off += (length + 3) & ~3
        found[attrs[ATTR_DEV_NAME].rstrip(b"\0").decode()] = struct.unpack("I", attrs[ATTR_DEV_INDEX])[0]
    return found

for i in range(1, cycles + 1):
    try:
        request(CMD_NEWLINK, string(ATTR_DEV_NAME, name) + string(ATTR_LINK_TYPE, link_type)
                + string(ATTR_NDEV_NAME, netdev))
    except OSError as e:
        sys.exit(f"cycle {i}: adding {name}: {e}")
    index = devices().get(name)
    if index is None:
        sys.exit(f"cycle {i}: {name} not listed after adding it")
    try:
        request(CMD_DELLINK, attr(ATTR_DEV_INDEX, struct.pack("I", index)))
    except OSError as e:
        sys.exit(f"cycle {i}: deleting {name}: {e}")
    if name in devices():
        sys.exit(f"cycle {i}: {name} still listed after deleting it")
EOF
}

# ---------------------------------------------------------------- coprocesses

# coproc_line NAME [SECONDS]: the next line of coprocess NAME that is not a
# "# " comment (those become diagnostics) into LINE; status 1 at its end or
# after SECONDS (default 180).
coproc_line() {
	local -n _co=$1
	LINE=
	[ -n "${_co[0]:-}" ] || return 1
	while IFS= read -r -t "${2:-180}" LINE <&"${_co[0]}"; do
		[[ $LINE == "# "* ]] && { tap_diag "${LINE#\# }"; continue; }
		return 0
	done
	return 1
}

# coproc_end NAME: close coprocess NAME's input (the peers here end at the end
# of their input) and reap it.
coproc_end() {
	local -n _co=$1
	local pidvar=${1}_PID fd=${_co[1]:-}
	[ -n "${!pidvar:-}" ] || return 0
	[ -n "$fd" ] && exec {fd}>&-
	wait "${!pidvar}" 2>/dev/null
	printf -v "$pidvar" '%s' ""
}

# ---------------------------------------------------------------- waiting

# wait_for SECONDS CMD [ARG]...: run CMD every 20 ms until it succeeds; fail
# once a try that started after SECONDS (may be fractional) times
# VM_TIMEOUT_SCALE has failed: a slower kernel (KASAN's) gets more time here
# as the test does. Sets WAITED_MS to when the successful try started: under
# TCG one run of a tool like rdma takes a good part of a second, which is not
# the kernel's delay. Call it in the test's shell, not in $(...), to see
# WAITED_MS.
# The loop takes no exec of its own (no date, no sleep): under TCG each costs
# about 0.1 s, so a poll was a quarter of a second, not 20 ms.
wait_for() {
	local limit_ms start_us
	seconds_to_ms "$1"
	limit_ms=$((MS * ${VM_TIMEOUT_SCALE:-1}))
	shift
	start_us=${EPOCHREALTIME/./}
	while :; do
		WAITED_MS=$(((${EPOCHREALTIME/./} - start_us) / 1000))
		"$@" && return 0
		((WAITED_MS > limit_ms)) && return 1
		nap 0.02
	done
}

# seconds_to_ms SECONDS: SECONDS (whole, or with a decimal fraction) in
# milliseconds, in MS.
seconds_to_ms() {
	local whole=${1%%.*} frac=
	[[ $1 == *.* ]] && frac=${1#*.}
	frac=${frac}000
	MS=$((10#${whole:-0} * 1000 + 10#${frac:0:3}))
}

# nap SECONDS: sleep in this shell, without an exec: read's timeout on a pipe
# this shell holds both ends of, so nothing ever arrives.
exec {_nap_fd}<> <(:)
nap() {
	read -rt "$1" -u "$_nap_fd" _
	return 0
}

# tap_wait DESC SECONDS CMD [ARG]...: a check that CMD succeeds within SECONDS
# (see wait_for); shows the RDMA devices and links when it does not.
tap_wait() {
	local desc=$1 secs=$2
	shift 2
	if wait_for "$secs" "$@"; then
		tap_ok "$desc"
	else
		tap_fail "$desc" "\$ $* did not succeed within $secs s (times ${VM_TIMEOUT_SCALE:-1})" \
			"$(timeout 10 rdma dev show 2>&1)" "$(timeout 10 rdma link show 2>&1)"
		return 1
	fi
}

# ---------------------------------------------------------------- kernel log

# kmsg_mark: put a marker into the kernel log; kmsg_since_mark reads from it.
# The helpers here run for every case of a test (hostile-peer marks the log
# about 50 times), and every exec costs about 0.1 s under TCG: the mark takes
# none, reading the log two.
kmsg_mark() {
	KMSG_MARK="rsiw-selftest: mark $TEST_NAME ${EPOCHREALTIME/./}"
	echo "$KMSG_MARK" >/dev/kmsg
}

# kmsg_since_mark: the kernel log after the last kmsg_mark, without timestamps.
# Status 1 when the mark is no longer in the log (the ring buffer wrapped).
kmsg_since_mark() {
	dmesg -t | awk -v mark="$KMSG_MARK" 'found { print } $0 == mark { found = 1 } END { exit !found }'
}

# check_no_splat DESC: a check that the kernel logged no splat since kmsg_mark.
check_no_splat() {
	local log splat
	log=$TEST_TMP/kmsg
	if ! kmsg_since_mark >"$log"; then
		tap_fail "$1" "the kernel log no longer holds the mark '$KMSG_MARK': what came after it cannot be judged"
		return 1
	fi
	if splat=$(vm_splat_lines "$log"); then
		tap_fail "$1" "kernel splat:" "$(head -n 20 <<<"$splat")"
		return 1
	fi
	tap_ok "$1"
}

# ---------------------------------------------------------------- leaks

KMEMLEAK=/sys/kernel/debug/kmemleak

# kmemleak_report DESC: a check that kmemleak reports no leak of this test
# now (a test calls it before a measured phase: what leaked so far fails DESC
# instead of being blamed on the phase; objects younger than 5 s are not
# reported yet, a later check sees them). It looks only at objects allocated
# since RSIW_LEAK_SINCE (jiffies: where the guest runner opened this test's
# window; the runner attributes older ones to the tests before) and not
# reported by an earlier check of this test. It does not clear the report:
# the runner reads it after the test. Status 1 on a leak, or when kmemleak
# refuses to scan (it has switched itself off).
KMEMLEAK_SEEN=" "
kmemleak_report() {
	local report
	# Reclaimable caches first: kmemleak reads every object it tracks, and
	# the dentries and inodes of files read over 9p made a scan 6 times slower
	# (qemu/guest-runner.sh does the same).
	sync
	echo 3 >/proc/sys/vm/drop_caches
	if ! [ -w "$KMEMLEAK" ] || ! echo scan 2>/dev/null >"$KMEMLEAK" || ! echo scan 2>/dev/null >"$KMEMLEAK"; then
		tap_fail "$1" "kmemleak is off ($KMEMLEAK refuses a scan): leaks cannot be seen" \
			"$(dmesg | grep -m 3 'kmemleak:')"
		return 1
	fi
	# Two scans: the first only notes a new object's checksum; a leak is
	# reported when a later scan finds it unreferenced and unchanged. Each
	# object is keyed by its address and allocation time (an address is reused).
	# An object whose allocation time cannot be read counts as this test's.
	report=$(awk -v since="${RSIW_LEAK_SINCE:-0}" -v seen="$KMEMLEAK_SEEN" -v keyfile="$TEST_TMP/kmemleak-keys" '
		function flush() {
			if (obj != "" && (at == "" || at + 0 >= since + 0) && index(seen, " " key " ") == 0) {
				printf "%s", obj
				keys = keys key " "
			}
			obj = ""
		}
		/^unreferenced object / { flush(); obj = $0 "\n"; key = $3 "@?"; at = ""; next }
		obj != "" {
			obj = obj $0 "\n"
			if ($0 ~ /^ +comm .* jiffies [0-9]+/) {
				at = $0
				sub(/.* jiffies /, "", at)
				sub(/[^0-9].*/, "", at)
				sub(/@.*/, "@" at, key)
			}
		}
		END { flush(); printf "%s", keys >keyfile }' "$KMEMLEAK")
	KMEMLEAK_SEEN+=$(cat "$TEST_TMP/kmemleak-keys")
	if [ -n "$report" ]; then
		tap_fail "$1" "$(grep -c '^unreferenced object' <<<"$report") leak(s):" "$(head -n 40 <<<"$report")"
		return 1
	fi
	tap_ok "$1"
}

# check_kmemleak DESC: a check that kmemleak finds no new leak. Waits 5 s
# first: kmemleak does not report younger objects.
check_kmemleak() {
	sleep 5
	kmemleak_report "$1"
}

# slab_snapshot FILE: write "cache active_objects object_size" for every slab
# cache to FILE, after dropping reclaimable caches, giving RCU 2 s to free
# what waits for a grace period, and shrinking every slab cache (which empties
# the per-CPU slabs, so counts are exact). Leaves out kmemleak's own caches:
# they hold the leak detector's bookkeeping (one kmemleak_object per tracked
# object, and a kmemleak_scan_area each time vmalloc reuses a vmap_area), not
# kernel objects. Leaves out vmap_area too: vfree only queues a range, and the
# queue is purged in batches (64 MiB of pages here), so the count saw-tooths
# with whatever vmalloc churns (a device's 512 KiB STag table is kvmalloc'd;
# link-cycles once saw +52, +53, +51 in three rounds running); kmemleak
# tracks vmalloc memory itself, so a vmalloc leak still shows there.
slab_snapshot() {
	local f
	sync
	echo 3 >/proc/sys/vm/drop_caches
	sleep 2
	for f in /sys/kernel/slab/*/shrink; do
		echo 1 >"$f" 2>/dev/null
	done
	awk 'NR > 2 && $1 !~ /^kmemleak_/ && $1 != "vmap_area" { print $1, $2, $4 }' /proc/slabinfo |
		LC_ALL=C sort >"$1"
}

# slab_growth BEFORE AFTER MIN: print "cache +objects (+bytes)" for each cache
# whose active objects grew by MIN or more between two snapshots. Status 0 if
# any did.
slab_growth() {
	LC_ALL=C join "$1" "$2" | awk -v min="$3" '
		$4 - $2 >= min { printf "%s +%d objects (+%d bytes)\n", $1, $4 - $2, ($4 - $2) * $5; n++ }
		END { exit n == 0 }'
}

# slab_rate_judged HALF: whether cycles in halves of HALF are enough to judge
# slab growth a cycle (SLAB_RATE_MIN_HALF, default 15). Over shorter halves,
# objects the kernel frees lazily (TIME_WAIT sockets, RCU, per-CPU caches)
# outweigh a per-cycle threshold: nvmeof-rdma's kmalloc-16 grew by 226, then
# 88 objects in 5-cycle halves with kmemleak clean. make check runs a few
# cycles for what they always show (resources back where they were, no
# kmemleak report); make check-full runs enough to judge the growth too.
SLAB_RATE_MIN_HALF=${SLAB_RATE_MIN_HALF:-15}
slab_rate_judged() {
	(($1 >= SLAB_RATE_MIN_HALF))
}

# slab_steady_growth S0 S1 S2 MIN: print the caches that grew by MIN objects
# or more both from S0 to S1 and from S1 to S2: a leak grows its cache every
# round, a cache warming up or a lazily freed one does not. Status 0 if any.
slab_steady_growth() {
	LC_ALL=C join "$1" "$2" | LC_ALL=C join - "$3" | awk -v min="$4" '
		$4 - $2 >= min && $6 - $4 >= min {
			printf "%s +%d then +%d objects\n", $1, $4 - $2, $6 - $4; n++
		}
		END { exit n == 0 }'
}
