#!/usr/bin/env bash
# make fmt: rustfmt every Rust file of the repository (kernel side and host crate).
set -euo pipefail
. "$(dirname "$0")/common.sh"
cd "$RSIW_ROOT"
git ls-files -co --exclude-standard '*.rs' | xargs -r rustfmt --edition 2021 ${CHECK:+--check}
