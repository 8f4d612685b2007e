#!/usr/bin/env bash
# kernel::ksock works: ksock_test.ko runs its checks in module init over
# loopback TCP (IPv4 and IPv6): connect/accept, 4 MiB copied and 4 MiB
# zero-copy sends verified byte by byte by a read_sock receiver driven from
# data_ready, callbacks installed and removed, half-close, reset, refused and
# timed-out connects, and sockets someone else claimed through sk_user_data (as
# a BPF sockmap does): refused with EBUSY, the claim left alone, and blocked
# readers still woken by data and FIN. Each of its KTAP lines becomes a check here; insmod must
# succeed exactly when all passed, and rmmod must leave no splat behind.
# timeout: 300
# Helpers are called through tap_check and trap:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require insmod rmmod ip

KO=$RSIW_ROOT/selftests/ksock/ksock_test.ko

ksock_loaded() {
	[ -d /sys/module/ksock_test ]
}

ksock_unload() {
	if ksock_loaded; then
		timeout 60 rmmod ksock_test
	fi
}
trap 'ksock_unload; cleanup' EXIT

[ -f "$KO" ] || tap_bail "$KO does not exist (make module)"
# The module connects to 127.0.0.1 and ::1, and to 198.18.0.2, which this dummy
# netdev swallows (its connect must time out).
tap_check "loopback up" ip link set dev lo up || tap_bail "no loopback"
tap_check "dummy netdev ksockd0 with 198.18.0.1/24" \
	netdev_dummy ksockd0 02:52:53:49:57:20 198.18.0.1/24 || tap_bail "cannot create ksockd0"

kmsg_mark
_run insmod "$KO"
st=$?
insmod_out=$OUT
log=$(kmsg_since_mark | sed -n 's/^ksock_test: //p')

# Re-emit the module's results as checks of this test.
results=0 failed=0
while IFS= read -r line; do
	case $line in
	"ok "*)
		results=$((results + 1))
		tap_ok "ksock_test: ${line#ok * - }"
		;;
	"not ok "*)
		results=$((results + 1)) failed=$((failed + 1))
		tap_fail "ksock_test: ${line#not ok * - }"
		;;
	"# "*) tap_diag "ksock_test: ${line#\# }" ;;
	esac
done <<<"$log"

plan=$(sed -nE 's/^1\.\.([0-9]+)$/\1/p' <<<"$log")
tap_result "$([ -n "$plan" ] && [ "$plan" = "$results" ] && [ "$results" -gt 0 ]; echo $?)" \
	"ksock_test printed its plan and $results results" "plan: ${plan:-none}" "$(head -n 40 <<<"$log")"
if ((failed == 0)); then
	tap_result "$st" "insmod succeeds when every check passed" "$insmod_out" "exit status $st"
else
	tap_result "$([ "$st" != 0 ]; echo $?)" "insmod fails when a check failed" "exit status $st"
fi

if ksock_loaded; then
	tap_check "rmmod ksock_test" ksock_unload
fi
tap_result "$(! ksock_loaded; echo $?)" "ksock_test is not loaded" "$(lsmod 2>&1 | head)"
check_no_splat "no kernel splat while the module ran and unloaded"

tap_done
