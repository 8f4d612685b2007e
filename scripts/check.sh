#!/usr/bin/env bash
# make check: host-side tests, then the kernel build and the VM selftests.
# Ends with one line, "N passed, N failed", summed over both.
set -uo pipefail
. "$(dirname "$0")/common.sh"
cd "$RSIW_ROOT"

passed=0 failed=0
tally() { # file with a last line "<what>: N passed, N failed"
	local line
	line=$(grep -E '^[a-z-]+: [0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
	if [ -z "$line" ]; then
		failed=$((failed + 1))
		echo "not ok - $2 produced no result line" >&2
		return
	fi
	passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
	failed=$((failed + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")))
}

scripts/deps.sh || die "installing dependencies failed"
out=$(mktemp -d)

if [ "${TESTS:-*}" = "*" ]; then
	selftests/host-check.sh 2>&1 | tee "$out/host"
	tally "$out/host" "host-check"
fi

if scripts/kernel.sh >/dev/null && scripts/module.sh; then
	qemu/run-tests.sh 2>&1 | tee "$out/vm"
	tally "$out/vm" "vm selftests"
else
	echo "not ok - kernel or module build failed" >&2
	failed=$((failed + 1))
fi

rm -rf "$out"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
