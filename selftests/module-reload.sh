#!/usr/bin/env bash
# Unloading the driver removes every device it has (two here, one of them on
# a netdev that is down) and leaves the netdevs alone; loading it again
# brings back a working driver. The module carries the rdma-link-TYPE alias.
# timeout: 300
# Helpers are called through tap_check and wait_for:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma

# rdma link add ... type T asks for module rdma-link-T when no driver has T.
if rsiw_is_reference; then mod=$RSIW_MODULE; else mod=$RSIW_KO; fi
tap_match "the module has alias rdma-link-$RSIW_LINK_TYPE" "^rdma-link-$RSIW_LINK_TYPE\$" \
	"$(modinfo -F alias "$mod" 2>&1)"
tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdevs rsiwd0, rsiwd1" eval 'netdev_dummy rsiwd0 02:52:53:49:57:01 198.18.0.1/24 &&
	netdev_dummy rsiwd1 02:52:53:49:57:02 198.18.2.1/24' || tap_bail "cannot create the netdevs"

# add_both: add rsiw0 on rsiwd0 and rsiw1 on rsiwd1 and see them ACTIVE.
add_both() {
	tap_check "rdma link add rsiw0 on rsiwd0, rsiw1 on rsiwd1" eval 'rdma_link_add rsiw0 rsiwd0 &&
		rdma_link_add rsiw1 rsiwd1' || return
	tap_wait "both ACTIVE" 1 eval 'port_state_is rsiw0 ACTIVE && port_state_is rsiw1 ACTIVE'
}

# unload DESC: rmmod with the devices present; both must be gone after it.
unload() {
	kmsg_mark
	tap_check "$1" rsiw_unload
	tap_result "$(! rsiw_loaded; echo $?)" "$RSIW_MODULE is no longer loaded" "$(lsmod 2>&1 | head)"
	tap_result "$(rdma_dev_gone rsiw0 && rdma_dev_gone rsiw1; echo $?)" "rsiw0 and rsiw1 are gone" \
		"$(rdma dev show 2>&1)" "$(ls /sys/class/infiniband 2>&1)"
	tap_result "$([ -e /sys/class/net/rsiwd0 ] && [ -e /sys/class/net/rsiwd1 ]; echo $?)" \
		"rsiwd0 and rsiwd1 are still there" "$(ip -br link 2>&1)"
	check_no_splat "no kernel splat"
}

add_both
unload "rmmod $RSIW_MODULE with two devices"

tap_check "load $RSIW_MODULE again" rsiw_load || tap_bail "cannot load the driver again"
add_both
tap_check "rdma link delete rsiw1, rsiw0" eval 'rdma_link_del rsiw1 && rdma_link_del rsiw0'
tap_result "$(rdma_dev_gone rsiw0 && rdma_dev_gone rsiw1; echo $?)" "both deleted" "$(rdma dev show 2>&1)"

# Once more, with one netdev down (its port DOWN).
add_both
tap_check "ip link set rsiwd1 down" ip link set dev rsiwd1 down
tap_wait "rsiw1 DOWN" 1 port_state_is rsiw1 DOWN
unload "rmmod $RSIW_MODULE with two devices, one DOWN"

tap_check "load $RSIW_MODULE a third time, no devices" rsiw_load
tap_check "rmmod $RSIW_MODULE with no devices" rsiw_unload

tap_done
