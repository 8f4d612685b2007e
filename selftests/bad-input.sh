#!/usr/bin/env bash
# rdma link add with bad arguments fails with the right errno, a kernel log
# line from the driver saying why (naming the device and the netdev), no
# splat, and nothing registered:
#   a netdev that does not exist    ENODEV (the RDMA core, before the driver)
#   an RDMA device name in use      EEXIST
#   a netdev that already has one   EEXIST
#   a netdev that is not Ethernet   EINVAL (lo)
#   a link type no driver has       EINVAL (the RDMA core; modprobe finds none)
# Against the C siw (RSIW_MODULE=siw) the errno and log checks that are rsiw's
# own contract are skipped: siw returns ENFILE for a name in use, logs none of
# these, and accepts lo.
# timeout: 300
# Helpers are called through tap_check and wait_for:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma

type=$RSIW_LINK_TYPE
tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdevs rsiwd0, rsiwd1" eval 'netdev_dummy rsiwd0 02:52:53:49:57:01 198.18.0.1/24 &&
	netdev_dummy rsiwd1 02:52:53:49:57:02 198.18.2.1/24' || tap_bail "cannot create the netdevs"

# rejected WHAT NAME NETDEV ERRNO_TEXT: rdma link add NAME on NETDEV must fail
# with "error: ERRNO_TEXT" (when ERRNO_TEXT is not empty); sets LOG to the
# kernel log since.
rejected() {
	local what=$1 name=$2 nd=$3 errno=$4
	kmsg_mark
	tap_check_fails "$what: rdma link add $name netdev $nd fails" \
		rdma link add "$name" type "$type" netdev "$nd" || _links+=("$name")
	if [ -n "$errno" ]; then
		tap_match "$what: rdma says \"$errno\"" "^error: $errno\$" "$OUT"
	fi
	LOG=$(kmsg_since_mark)
	tap_no_match "$what: no kernel splat" "$VM_SPLAT_PATTERNS" "$LOG"
}

# logged WHAT NAME NETDEV: the driver logged a line naming both.
logged() {
	if rsiw_is_reference; then
		tap_skip "$1: the driver logs why, naming $2 and $3" "the C siw logs nothing"
		return
	fi
	if grep -E '^rsiw: ' <<<"$LOG" | grep -wF -- "$2" | grep -qwF -- "$3"; then
		tap_ok "$1: the driver logs why, naming $2 and $3"
	else
		tap_fail "$1: the driver logs why, naming $2 and $3" "no \"rsiw: \" line naming both in:" "$LOG"
	fi
}

# 0. A link type no driver has: the core asks modprobe for rdma-link-TYPE,
# finds no module and refuses.
kmsg_mark
tap_check_fails "unknown link type: rdma link add rsiwx type nosuchtype fails" \
	rdma link add rsiwx type nosuchtype netdev rsiwd0 || _links+=(rsiwx)
tap_match "unknown link type: rdma says \"Invalid argument\"" "^error: Invalid argument\$" "$OUT"
tap_no_match "unknown link type: no kernel splat" "$VM_SPLAT_PATTERNS" "$(kmsg_since_mark)"

# 0b. A device name that does not exist: rdma refuses it before the kernel
# would act.
tap_check_fails "unknown device: rdma link delete rsiwnone fails" rdma link delete rsiwnone
tap_match "unknown device: rdma names the problem" "[Ww]rong device name|No such device" "$OUT"
tap_check_fails "unknown device: rdma statistic show link rsiwnone/1 fails" \
	rdma statistic show link rsiwnone/1
tap_match "unknown device: rdma statistic names the problem" "[Ww]rong device name|No such device" "$OUT"

# 1. No such netdev: the core looks the name up before calling the driver.
rejected "no such netdev" rsiw0 rsiwnone0 "No such device"
tap_result "$(rdma_dev_gone rsiw0; echo $?)" "no such netdev: nothing registered" "$(rdma dev show 2>&1)"

# 2. A device name in use.
tap_check "rdma link add rsiw0 on rsiwd0" rdma_link_add rsiw0 rsiwd0 || tap_bail "cannot add rsiw0"
if rsiw_is_reference; then
	rejected "name in use" rsiw0 rsiwd1 ""
	tap_skip "name in use: rdma says \"File exists\"" "the C siw returns ENFILE"
else
	rejected "name in use" rsiw0 rsiwd1 "File exists"
fi
logged "name in use" rsiw0 rsiwd1
tap_match "name in use: rsiw0 still on rsiwd0 and ACTIVE" "^link rsiw0/1 state ACTIVE .*netdev rsiwd0( |$)" \
	"$(rdma link show rsiw0/1 2>&1)"
tap_no_match "name in use: no device on rsiwd1" "netdev rsiwd1( |$)" "$(rdma link show 2>&1)"

# 3. A netdev that already has a device.
rejected "netdev taken" rsiw1 rsiwd0 "File exists"
logged "netdev taken" rsiw1 rsiwd0
tap_result "$(rdma_dev_gone rsiw1; echo $?)" "netdev taken: rsiw1 not registered" "$(rdma dev show 2>&1)"

# 4. Not an Ethernet-like netdev.
if rsiw_is_reference; then
	tap_skip "loopback netdev: rejected with EINVAL" "the C siw accepts lo"
else
	rejected "loopback netdev" rsiw2 lo "Invalid argument"
	logged "loopback netdev" rsiw2 lo
	tap_result "$(rdma_dev_gone rsiw2; echo $?)" "loopback netdev: rsiw2 not registered" "$(rdma dev show 2>&1)"
fi

# After all that the driver still works: rsiwd1 takes a device.
tap_check "rdma link add rsiw1 on rsiwd1" rdma_link_add rsiw1 rsiwd1
tap_wait "rsiw1 ACTIVE" 1 port_state_is rsiw1 ACTIVE

tap_done
