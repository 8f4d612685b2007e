#!/usr/bin/env bash
# `make fuzz`: run every fuzz target of the protocol core for $1 seconds
# (default 600). Crashes land in selftests/proto/fuzz/artifacts/<target>/.
set -euo pipefail
secs=${1:-600}
cd "$(dirname "$0")"
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked --quiet cargo-fuzz
export CARGO_TARGET_DIR=$PWD/target/fuzz RUSTC_BOOTSTRAP=1
status=0
for t in $(cargo fuzz list --fuzz-dir fuzz); do
	echo "==> fuzzing $t for ${secs}s" >&2
	cargo fuzz run --fuzz-dir fuzz "$t" -- -max_total_time="$secs" -print_final_stats=1 || status=1
done
exit $status
