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

# rdma link add loads the driver through the alias (modprobe rdma-link-TYPE).
_loaded=1
tap_check "rdma link add rsiw0 type $RSIW_LINK_TYPE, driver not loaded" rdma_link_add rsiw0 rsiwd0
tap_result "$(rsiw_loaded; echo $?)" "the link type's alias loaded $RSIW_MODULE" "$(lsmod 2>&1 | head)"
tap_check "rdma link delete rsiw0" rdma_link_del rsiw0
tap_check "rmmod $RSIW_MODULE" rsiw_unload

# Module parameters: the connection settings, at load time and in sysfs.
P=/sys/module/rsiw/parameters MPA_FILE=/sys/kernel/debug/rsiw/mpa
if rsiw_is_reference; then
	tap_skip "module parameters" "rsiw's own parameters"
	tap_done
fi
params=$(modinfo -F parm "$RSIW_KO" 2>&1)
for p in rev crc markers rtr large_fpdu zerocopy; do
	tap_match "modinfo describes parameter $p" "^$p:.+" "$params"
done
# param NAME: the value in sysfs (read with a builtin).
param() {
	local v
	read -r v <"$P/$1" && echo "$v"
}
tap_check "modprobe rsiw crc=N rtr=write zerocopy=off" rsiw_load crc=N rtr=write zerocopy=off
tap_result "$([ "$(param crc) $(param rtr) $(param zerocopy) $(param rev) $(param large_fpdu)" = \
	"N write off 2 Y" ]; echo $?)" "sysfs shows crc N, rtr write, zerocopy off and the defaults" \
	"$(grep -H . "$P"/* 2>&1)"
tap_match "the debugfs diagnostics show the same settings" \
	"^rev=2 crc=0 markers=0 rtr=write large_fpdu=1 zerocopy=off\$" "$(head -n 1 "$MPA_FILE" 2>&1)"
tap_check "echo Y > $P/crc" eval "echo Y > $P/crc"
tap_result "$([ "$(param crc)" = Y ]; echo $?)" "crc reads Y" "$(param crc)"
kmsg_mark
tap_check_fails "echo maybe > $P/crc is refused" eval "echo maybe > $P/crc"
tap_match "with EINVAL" "Invalid argument" "$OUT"
tap_check_fails "echo 1 > $P/rev is refused while rtr is write" eval "echo 1 > $P/rev"
tap_result "$([ "$(param crc) $(param rev) $(param rtr)" = "Y 2 write" ]; echo $?)" \
	"the refused values changed nothing" "$(grep -H . "$P"/* 2>&1)"
log=$(kmsg_since_mark)
tap_match "the refusal is logged, naming the parameter and the value" \
	"rsiw: parameter crc: 'maybe' refused: it takes Y or N" "$log"
tap_check "rmmod rsiw" rsiw_unload
kmsg_mark
tap_check_fails "modprobe rsiw rtr=bogus fails" rsiw_load rtr=bogus
tap_match "with EINVAL" "Invalid argument" "$OUT"
tap_result "$(! rsiw_loaded; echo $?)" "rsiw is not loaded" "$(lsmod 2>&1 | head)"
tap_match "the refusal is logged" "rsiw: parameter rtr: 'bogus' refused" "$(kmsg_since_mark)"
# A bare boolean means Y, as for the kernel's own boolean parameters.
tap_check "modprobe rsiw markers (no value)" rsiw_load markers
tap_result "$([ "$(param markers)" = Y ]; echo $?)" "markers reads Y" "$(param markers)"
tap_check "rmmod rsiw" rsiw_unload
_loaded=0
check_no_splat "parameters: no kernel splat"

tap_done
