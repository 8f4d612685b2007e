# Helpers for the selftests that drive the test ULP (selftests/ulp-*.sh).
# Sourced after selftests/lib.sh.
# shellcheck shell=bash

ULP_KO=${ULP_KO:-$RSIW_ROOT/selftests/ulp/rsiw_ulp.ko}
ULP=/sys/kernel/debug/rsiw_ulp

# ulp_unload: unload the ULP if it is loaded. It must go before the device
# and the driver, so it runs from the EXIT trap ahead of lib.sh's cleanup.
ulp_unload() {
	[ -d /sys/module/rsiw_ulp ] || return 0
	timeout 120 rmmod rsiw_ulp
}
trap 'ulp_unload; cleanup' EXIT

# ulp_ctl COMMAND: write COMMAND to the ULP's ctl file; its error (if any) is
# printed on stdout. Status of the write. The ULP runs a command in the
# network namespace of the process that writes it: with ULP_NETNS set, the
# write comes from that namespace (nsenter, not ip netns exec: that one mounts
# a sysfs of its own, without debugfs).
ulp_ctl() {
	if [ -n "${ULP_NETNS:-}" ]; then
		# shellcheck disable=SC2016 # expanded by the inner shell
		nsenter --net="/run/netns/$ULP_NETNS" sh -c 'printf "%s\n" "$1" 2>&1 >"$2"' ulp_ctl "$1" "$ULP/ctl"
	else
		printf '%s\n' "$1" 2>&1 >"$ULP/ctl"
	fi
}

# ulp_run DESC COMMAND: write COMMAND to ctl; one TAP line per test the ULP
# ran (from the result log), bench and caps lines and its "# " lines as
# diagnostics, plus one line for the command's own status.
ulp_run() {
	local desc=$1 cmd=$2 st out line
	ulp_ctl clear
	out=$(ulp_ctl "$cmd")
	st=$?
	while IFS= read -r line; do
		case $line in
		"ok "*) tap_ok "$desc: ${line#ok * - }" ;;
		"not ok "*) tap_fail "$desc: ${line#not ok * - }" ;;
		bench* | caps*) tap_diag "$line" ;;
		"# "*) tap_diag "${line#\# }" ;;
		esac
	done <"$ULP/result"
	tap_result "$st" "$desc: '$cmd' exit status" "$out"
}

# ulp_insmod: load the ULP (one TAP line). Each of its steps may take 10 s,
# times VM_TIMEOUT_SCALE on a kernel whose tests get more time (KASAN's), and
# three times that in a pair, whose guests have one vCPU each and share the
# host (a 4 MiB receive from the C siw took over 10 s on a slower host).
ulp_insmod() {
	tap_check "insmod rsiw_ulp" insmod "$ULP_KO" || return
	local f=${VM_TIMEOUT_SCALE:-1}
	[ -n "${PAIR_ROLE:-}" ] && f=$((f * 3))
	[ "$f" = 1 ] || tap_check "ULP steps may take $f times 10 s" ulp_ctl "timeouts factor=$f"
}

# ulp_setup DEV NETDEV MAC IP PORT: load the driver, make a dummy netdev with
# IP/24 and an RDMA link DEV on it, load the ULP and start its server on
# IP:PORT.
ulp_setup() {
	local dev=$1 nd=$2 mac=$3 ip=$4 port=$5 max_qp
	tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
	tap_check "dummy netdev $nd $ip" netdev_dummy "$nd" "$mac" "$ip/24" || tap_bail "cannot create $nd"
	tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $nd" rdma_link_add "$dev" "$nd" ||
		tap_bail "cannot add the link"
	max_qp=$(ibv_devinfo -v -d "$dev" 2>/dev/null | awk '$1 == "max_qp:" { print $2 }')
	tap_diag "$dev: max_qp ${max_qp:-unknown (no user-space provider)}"
	[ -f "$ULP_KO" ] || tap_bail "$ULP_KO does not exist (make module)"
	kmsg_mark
	ulp_insmod || tap_bail "cannot load the ULP"
	local err
	if ! err=$(ulp_ctl "server addr=$ip port=$port"); then
		tap_fail "start the ULP server on $ip:$port" "$err"
		tap_bail "cannot start the ULP server (rdma_bind_addr/rdma_listen on $dev)"
	fi
	tap_ok "start the ULP server on $ip:$port"
}
