#!/usr/bin/env bash
# rdma link add: the device appears everywhere a user looks (rdma, sysfs,
# libibverbs) as an iWARP RNIC bound to its netdev, with a GID and node GUID
# derived from the MAC; rdma link delete removes it; the same name and netdev
# can be used again.
# timeout: 300
# Helpers are called through tap_check and wait_for:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma ibv_devices ibv_devinfo

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:01
gid=$(mac_gid $mac) guid=$(mac_eui64 $mac)

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev $nd with MAC $mac" netdev_dummy $nd $mac 198.18.0.1/24 ||
	tap_bail "cannot create $nd"

# show_device: every query of a freshly added device.
show_device() {
	local out
	out=$(rdma dev show $dev 2>&1)
	tap_match "rdma dev show: $dev is an RNIC" "^[0-9]+: $dev: node_type rnic " "$out"
	tap_match "rdma dev show: node GUID $guid from the MAC" " node_guid $guid( |$)" "$out"
	out=$(rdma link show $dev/1 2>&1)
	tap_match "rdma link show: $dev/1 ACTIVE on netdev $nd" "^link $dev/1 state ACTIVE .*netdev $nd( |$)" "$out"
	out=$(cat /sys/class/infiniband/$dev/node_type 2>&1)
	tap_match "sysfs node_type is RNIC" '^4: RNIC$' "$out"
	out=$(cat /sys/class/infiniband/$dev/ports/1/gids/0 2>&1)
	tap_match "sysfs GID 0 is $gid, from the MAC" "^$gid\$" "$out"
	out=$(ibv_devices 2>&1)
	tap_match "ibv_devices lists $dev with GUID ${guid//:/}" "^\s+$dev\s+${guid//:/}\s*$" "$out"
	out=$(ibv_devinfo -v -d $dev 2>&1)
	tap_match "ibv_devinfo: transport iWARP" '^\s*transport:\s+iWARP \(1\)' "$out"
	tap_match "ibv_devinfo: port 1 PORT_ACTIVE" '^\s*state:\s+PORT_ACTIVE \(4\)' "$out"
	tap_match "ibv_devinfo: link layer Ethernet" '^\s*link_layer:\s+Ethernet' "$out"
}

tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $nd" rdma_link_add $dev $nd ||
	tap_bail "cannot add the link"
show_device

tap_check "rdma link delete $dev" rdma_link_del $dev
tap_result "$(rdma_dev_gone $dev; echo $?)" "$dev is gone from rdma dev and sysfs" "$(rdma dev show 2>&1)"
out=$(ibv_devices 2>&1)
tap_no_match "ibv_devices no longer lists $dev" "^\s+$dev\s" "$out"
tap_result "$([ -e /sys/class/net/$nd ]; echo $?)" "netdev $nd is still there"

tap_check "re-add $dev on $nd" rdma_link_add $dev $nd || tap_bail "cannot re-add the link"
show_device
tap_check "rdma link delete $dev again" rdma_link_del $dev
tap_result "$(rdma_dev_gone $dev; echo $?)" "$dev is gone again" "$(rdma dev show 2>&1)"

tap_done
