#!/usr/bin/env bash
# The port is ACTIVE exactly when its netdev is up and has carrier, and
# follows changes within 1 s: ip link set down/up, carrier off/on on a dummy,
# and the carrier loss a veth sees when its peer goes down.
# timeout: 300
# Helpers are called through tap_check and wait_for:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma

LIMIT=1

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev rsiwd0" netdev_dummy rsiwd0 02:52:53:49:57:01 198.18.0.1/24 ||
	tap_bail "cannot create rsiwd0"
tap_check "veth pair rsiwv0/rsiwv1" netdev_veth rsiwv0 rsiwv1 \
	02:52:53:49:57:10 198.18.1.1/24 02:52:53:49:57:11 198.18.1.2/24 ||
	tap_bail "cannot create the veth pair"

# expect DESC DEV STATE CMD [ARG]...: run CMD, then the port of DEV must reach
# STATE within LIMIT seconds.
expect() {
	local desc=$1 dev=$2 state=$3 out
	shift 3
	if ! out=$("$@" 2>&1); then
		tap_fail "$desc" "\$ $*" "$out"
		return 1
	fi
	if wait_for $LIMIT port_state_is "$dev" "$state"; then
		tap_ok "$desc"
		tap_diag "$dev: $state after ${WAITED_MS} ms"
	else
		tap_fail "$desc" "after ${WAITED_MS} ms:" "$(rdma link show "$dev/1" 2>&1)" "$(ip link show "$(port_netdev "$dev")" 2>&1)"
	fi
}

port_netdev() {
	rdma link show "$1/1" 2>/dev/null | sed -nE 's/.* netdev ([^ ]+).*/\1/p'
}

tap_check "rdma link add rsiw0 on rsiwd0" rdma_link_add rsiw0 rsiwd0 || tap_bail "cannot add rsiw0"
tap_wait "rsiw0 ACTIVE after add" $LIMIT port_state_is rsiw0 ACTIVE

expect "rsiwd0 down: rsiw0 DOWN" rsiw0 DOWN ip link set dev rsiwd0 down
expect "rsiwd0 up: rsiw0 ACTIVE" rsiw0 ACTIVE ip link set dev rsiwd0 up
expect "rsiwd0 carrier off: rsiw0 DOWN" rsiw0 DOWN ip link set dev rsiwd0 carrier off
expect "rsiwd0 carrier on: rsiw0 ACTIVE" rsiw0 ACTIVE ip link set dev rsiwd0 carrier on
expect "rsiwd0 down, carrier off: rsiw0 DOWN" rsiw0 DOWN ip link set dev rsiwd0 down carrier off
tap_check "ip link set rsiwd0 up (no carrier)" ip link set dev rsiwd0 up
sleep $LIMIT
tap_result "$(port_state_is rsiw0 DOWN; echo $?)" "rsiwd0 up without carrier: rsiw0 stays DOWN" \
	"$(rdma link show rsiw0/1 2>&1)" "$(ip link show rsiwd0 2>&1)"
expect "rsiwd0 carrier on: rsiw0 ACTIVE again" rsiw0 ACTIVE ip link set dev rsiwd0 carrier on

tap_check "rdma link add rsiw1 on rsiwv0" rdma_link_add rsiw1 rsiwv0 || tap_bail "cannot add rsiw1"
tap_wait "rsiw1 ACTIVE after add" $LIMIT port_state_is rsiw1 ACTIVE
expect "peer rsiwv1 down (rsiwv0 loses carrier): rsiw1 DOWN" rsiw1 DOWN ip link set dev rsiwv1 down
tap_match "rsiwv0 reports NO-CARRIER" 'NO-CARRIER' "$(ip link show rsiwv0)"
expect "peer rsiwv1 up: rsiw1 ACTIVE" rsiw1 ACTIVE ip link set dev rsiwv1 up
tap_result "$(port_state_is rsiw0 ACTIVE; echo $?)" "rsiw0 unaffected by rsiwv0's changes" \
	"$(rdma link show 2>&1)"

# A link added on a netdev that is down starts DOWN.
tap_check "rdma link delete rsiw1" rdma_link_del rsiw1
tap_check "ip link set rsiwv0 down" ip link set dev rsiwv0 down
tap_check "rdma link add rsiw1 on rsiwv0 while it is down" rdma_link_add rsiw1 rsiwv0 ||
	tap_bail "cannot add rsiw1"
tap_result "$(port_state_is rsiw1 DOWN; echo $?)" "rsiw1 DOWN after add" "$(rdma link show rsiw1/1 2>&1)"
expect "rsiwv0 up: rsiw1 ACTIVE" rsiw1 ACTIVE ip link set dev rsiwv0 up

tap_done
