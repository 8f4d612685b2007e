# Shared by the harness's canary tests (selftests/canary/N-WHAT.sh): each loads
# rsiw_canary and has it provoke one fault, which the harness must fail the
# test for (qemu/run-canary.sh checks the verdicts and their reasons).
# shellcheck shell=bash

CANARY_KO=${CANARY_KO:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/rsiw_canary.ko}
PROVOKE=/sys/kernel/debug/rsiw_canary/provoke

# provoke WHAT: TAP for loading the module and writing WHAT to its provoke
# file, from a child process (a Rust panic oopses the writer). The checks
# pass: the fault is for the harness to see.
provoke() {
	local st
	echo "TAP version 13"
	if lsmod | grep -q '^rsiw_canary '; then
		echo "ok 1 - rsiw_canary is loaded"
	elif insmod "$CANARY_KO"; then
		echo "ok 1 - insmod rsiw_canary"
	else
		echo "not ok 1 - insmod $CANARY_KO"
	fi
	(echo "$1" >"$PROVOKE")
	st=$?
	echo "ok 2 - provoked $1 (write status $st)"
	echo "1..2"
}
