#!/usr/bin/env bash
# make bench: a benchmark, not a test. One VM boot runs the same workloads on
# the C siw and on rsiw (with and without CRC), one after the other per
# workload: the test ULP's bandwidth mode (Write, Read, Send at 4 KiB, 64 KiB,
# 1 MiB), perftest over rdma_cm from user space, fio over NFSv4.2/RDMA,
# NVMe-oF/RDMA, SMB Direct and iSER (sequential write and read at 1 MiB,
# random read at 4 KiB), and iperf3 over the same netdev as the
# TCP ceiling (qemu/guest-bench.sh). Prints a table with the ratios rsiw/siw and
# rsiw/TCP and writes results.csv, results.json and results.png into
# results/bench-<time>/ (git ignores results/), with the kernel, the CPU models
# and the CRC settings beside the numbers (qemu/bench-report.py).
#
# Environment: BENCH_SECS (per measurement, default 4), BENCH_ROUNDS (rounds
# alternating the drivers, default 3: each ratio's median and range), BENCH_ONLY (regular expression on workload names),
# BENCH_DRIVERS (which of siw rsiw siw-nocrc rsiw-nocrc, default all),
# BENCH_CORE=1 also runs the protocol core's host microbenchmark (criterion).
# BENCH_PROFILE=1 writes a CPU profile of each test ULP and perftest
# measurement (perf record in the guest) into profile/.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=vm.sh
. "$(dirname "$0")/vm.sh"
cd "$RSIW_ROOT"

out=results/bench-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
out=$(cd "$out" && pwd)
ln -sfn "$(basename "$out")" results/bench-latest

# The chart needs matplotlib (PyPI, into the tools' venv; the table and the
# CSV/JSON do not).
if ! "$VENV/bin/python3" -c 'import matplotlib' 2>/dev/null; then
	progress "installing matplotlib into $VENV for the chart"
	"$VENV/bin/pip" install -q matplotlib || progress "no matplotlib: the report will have no PNG"
fi

vm_lock
progress "benchmark VM (TCG): siw and rsiw, with CRC and without, then iperf3; about 10 minutes a round"
env_args=()
for v in BENCH_SECS BENCH_ROUNDS BENCH_ONLY BENCH_DRIVERS BENCH_PROFILE; do
	[ -n "${!v:-}" ] && env_args+=("$v=${!v}")
done
vm_exec --rwdir "$out" -- env "${env_args[@]}" "$RSIW_ROOT/qemu/guest-bench.sh" "$out" |
	tee "$out/guest.log" | grep --line-buffered '^\[bench\]' || true
[ -s "$out/raw.csv" ] || die "the benchmark VM produced no results (see $out/guest.log)"

host_cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
echo
"$VENV/bin/python3" qemu/bench-report.py "$out" "$host_cpu" | tee "$out/report.txt"

if [ "${BENCH_CORE:-0}" = 1 ]; then
	progress "protocol core: FPDU TX/RX vs memcpy+crc32c (criterion, host)"
	(cd selftests/proto && cargo bench --bench fpdu)
fi
