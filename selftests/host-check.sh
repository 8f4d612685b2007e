#!/usr/bin/env bash
# The host half of `make check`: the protocol core's lints, unit, property,
# negative and tshark tests, a bounded run of each fuzz target, and the VM
# runner's splat matcher.
# Ends with a line for each ignored test and then "host: N passed, M failed,
# K skipped"; exits non-zero if anything failed. FUZZ_SECONDS (default 30)
# bounds each fuzz target and PROPTEST_CASES (default 1000) sizes the property
# tests.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CRATE=$ROOT/selftests/proto
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR=$CRATE/target
export PROPTEST_CASES=${PROPTEST_CASES:-1000}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
passed=0 failed=0
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

ok() { passed=$((passed + 1)); echo "ok - $*"; }
notok() { failed=$((failed + 1)); echo "not ok - $*"; }

cd "$CRATE" || exit 1

if ! command -v cargo-fuzz >/dev/null 2>&1; then
	echo "==> installing cargo-fuzz from crates.io" >&2
	cargo install --locked --quiet cargo-fuzz || notok "installing cargo-fuzz"
fi

# Formatting and the kernel's lint set (src/lib.rs mirrors it).
if rustfmt --edition 2021 --check "$ROOT"/drivers/rsiw/proto/*.rs src/lib.rs >"$log/fmt" 2>&1 &&
	cargo clippy --locked --quiet --lib -- -D warnings >"$log/clippy" 2>&1; then
	ok "proto core: rustfmt and clippy clean"
else
	cat "$log/fmt" "$log/clippy"
	notok "proto core: rustfmt or clippy"
fi

# Unit, property, negative and tshark tests: one result per test.
cargo test --locked --no-fail-fast 2>&1 | tee "$log/test" | grep -E '^test .* \.\.\. |^error' || true
t_ok=$(grep -cE '^test .* \.\.\. ok$' "$log/test")
t_bad=$(grep -cE '^test .* \.\.\. FAILED$' "$log/test")
mapfile -t skipped < <(sed -nE 's/^test (.*) \.\.\. ignored(, (.*))?$/cargo test \1 (\3)/p' "$log/test")
passed=$((passed + t_ok))
failed=$((failed + t_bad))
if grep -qE '^error(\[|:)' "$log/test" && [ "$t_bad" = 0 ]; then
	notok "cargo test did not build or run"
fi

# Each fuzz target for a bounded time (libFuzzer via cargo-fuzz; nightly
# flags are unlocked with RUSTC_BOOTSTRAP on the stable toolchain).
fuzz_one() { # target seconds
	local t=$1 s=$2
	RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$CRATE/target/fuzz cargo fuzz run --fuzz-dir fuzz \
		"$t" -- -max_total_time="$s" >"$log/fuzz-$t" 2>&1 && return 0
	# Without an ASan runtime, fall back to an uninstrumented build.
	grep -q 'sanitizer' "$log/fuzz-$t" && ! grep -q 'ERROR: libFuzzer\|panicked' "$log/fuzz-$t" &&
		RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$CRATE/target/fuzz cargo fuzz run --fuzz-dir fuzz \
			--sanitizer none "$t" -- -max_total_time="$s" >"$log/fuzz-$t" 2>&1
}
# Both at once: each is bounded in time, not in runs, and this saves
# FUZZ_SECONDS of the wait a warm machine's make check has for these tests.
# (cargo builds one target at a time: the second waits for the build lock.)
fuzz_targets=(rx_parser mpa_negotiation)
fuzz_pids=()
for t in "${fuzz_targets[@]}"; do
	fuzz_one "$t" "$FUZZ_SECONDS" &
	fuzz_pids+=($!)
done
for i in "${!fuzz_targets[@]}"; do
	t=${fuzz_targets[i]}
	if wait "${fuzz_pids[i]}"; then
		ok "fuzz $t (${FUZZ_SECONDS}s, $(grep -oE 'Done [0-9]+ runs' "$log/fuzz-$t" | tail -1))"
	else
		tail -n 30 "$log/fuzz-$t"
		notok "fuzz $t"
	fi
done

# The VM runner's splat matcher and crash excerpt, on canned kernel logs.
if "$ROOT"/qemu/run-tests.sh --check-matcher >"$log/matcher" 2>&1; then
	ok "VM runner: $(tail -n 1 "$log/matcher")"
else
	grep -v '^ok ' "$log/matcher"
	notok "VM runner: splat matcher or console excerpt"
fi

# The hostile peer's own CRC32c and framing (selftests/hostile/peer.py, which
# the VM tests' hostile peers share): pure Python, so checked here rather than
# in the VM, where it took 9 s.
if python3 "$ROOT"/selftests/hostile/peer.py --self-test >"$log/peer" 2>&1; then
	ok "hostile peer: CRC32c and framing match the known vectors"
else
	cat "$log/peer"
	notok "hostile peer: CRC32c and framing against the known vectors"
fi

for skip in "${skipped[@]}"; do
	echo "# skipped: $skip"
done
echo "host: $passed passed, $failed failed, ${#skipped[@]} skipped"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
