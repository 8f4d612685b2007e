#!/usr/bin/env bash
# The harness's own test: runs selftests/canary/ through qemu/run-tests.sh in
# a VM of its own (lockdep and an oops leave a boot unfit for other tests) and
# checks each verdict: the control passes, and every canary that provokes a
# fault fails, for that fault.
#
# Prints TAP, the runner's output indented as a subtest. The last line is
# "canary: N passed, M failed, 0 skipped". See Documentation/rsiw/testing.rst.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=vm.sh
. "$(dirname "$0")/vm.sh"
cd "$RSIW_ROOT" || exit

# Each canary: the verdict the runner must give, and an extended regular
# expression its diagnostics must match.
EXPECT=(
	"0-clean ok"
	"1-leak not-ok kmemleak: [0-9]+ leak\(s\)"
	"2-warn not-ok WARNING: CPU: [0-9]+ PID: [0-9]+ at .*warn\.c:[0-9]+ .*warn_at"
	"2-warn not-ok kernel taint bits newly set: 9"
	"3-abba not-ok possible circular locking dependency"
	"3-abba not-ok -> #[0-9]+ \(rsiw_canary::[ab]\)"
	"3-abba not-ok lockdep switched itself off"
	"4-sleep-in-atomic not-ok BUG: sleeping function called from invalid context"
	"5-overflow not-ok panicked at .*rsiw_canary\.rs"
	"5-overflow not-ok kernel taint bits newly set: .*7"
	"6-use-after-free not-ok BUG: (KFENCE: use-after-free read|KASAN: slab-use-after-free) in .*canary_use_after_free"
)

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# A guest of 1 GiB (CANARY_VM_MEMORY): the canaries need little, and the run
# took 134 s against 185-189 s with 4 GiB.
VM_MEMORY=${CANARY_VM_MEMORY:-1G} SELFTESTS_DIR=selftests/canary TESTS='*' qemu/run-tests.sh >"$out" 2>&1
echo "TAP version 13"
echo "# Subtest: the runner on selftests/canary"
sed 's/^/    /' "$out"

# verdict NAME: the runner's verdict line for NAME and the diagnostics after it.
verdict() {
	awk -v name="$1" '
		$0 ~ "^(not )?ok [0-9]+ " name "$" { on = 1; print; next }
		on && /^# Subtest:|^(not )?ok [0-9]+ |^vm: / { exit }
		on { print }' "$out"
}

n=0 passed=0 failed=0
for e in "${EXPECT[@]}"; do
	read -r name want re <<<"$e"
	n=$((n + 1))
	v=$(verdict "$name")
	if [ -z "$v" ]; then
		got="no verdict"
	elif [[ $v == "not ok "* ]]; then
		got=not-ok
	else
		got=ok
	fi
	desc="$name: $want${re:+, for: $re}"
	if [ "$got" = "$want" ] && { [ -z "$re" ] || grep -qE -- "$re" <<<"$v"; }; then
		echo "ok $n - $desc"
		passed=$((passed + 1))
	else
		echo "not ok $n - $desc"
		printf '# %s\n' "runner's verdict ($got):" "${v//$'\n'/$'\n'# }"
		failed=$((failed + 1))
	fi
done
echo "1..$n"
echo "canary: $passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
