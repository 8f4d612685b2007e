#!/usr/bin/env bash
# make bench: benchmarks, printed as ratios measured side by side in one run.
#
# Today: the protocol core's FPDU TX/RX (segmentation/parsing plus CRC32c) against a plain
# memcpy+crc32c of the same bytes (criterion, on the host). The in-VM comparisons with the C
# siw and iperf3 come with the data path.
set -euo pipefail
. "$(dirname "$0")/../scripts/common.sh"
cd "$RSIW_ROOT/selftests/proto"
progress "protocol core: FPDU TX/RX vs memcpy+crc32c (criterion)"
cargo bench --bench fpdu
