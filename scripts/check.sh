#!/usr/bin/env bash
# make check: host-side tests, then the kernel build, the style checks
# (rustfmt, clippy: scripts/style-check.sh), the VM selftests and the
# two-VM selftests. Ends with one line, "N passed, N failed, N skipped", summed
# over all.
set -uo pipefail
. "$(dirname "$0")/common.sh"
cd "$RSIW_ROOT" || exit

passed=0 failed=0 skipped=0
tally() { # file with a last line "<what>: N passed, N failed, N skipped"
	local line
	line=$(grep -E '^[a-z-]+: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$1" | tail -n 1)
	if [ -z "$line" ]; then
		failed=$((failed + 1))
		echo "not ok - $2 produced no result line" >&2
		return
	fi
	passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
	failed=$((failed + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")))
	skipped=$((skipped + $(sed -E 's/.* ([0-9]+) skipped$/\1/' <<<"$line")))
}

# make check-full (CHECK_FULL=1): the ULP, flood, cycle and unload workloads at
# full size, each knob the caller did not set, a budget to match, and the
# tests whose header says "# tier: full" (qemu/vm.sh, vm_test_selected).
if [ "${CHECK_FULL:-0}" = 1 ]; then
	export NFS_BIG_MB=${NFS_BIG_MB:-2048} NFS_CHURN_FILES=${NFS_CHURN_FILES:-10000}
	export NFS_VERSIONS=${NFS_VERSIONS:-3 4.0 4.1 4.2} NFS_FIO=${NFS_FIO:-4k:4m 1m:64m}
	export NFS_CYCLES=${NFS_CYCLES:-50} NVME_CYCLES=${NVME_CYCLES:-50} SMB_CYCLES=${SMB_CYCLES:-20}
	export SMB_CHURN_FILES=${SMB_CHURN_FILES:-250} ISER_CYCLES=${ISER_CYCLES:-20}
	export REMOVAL_ULPS=${REMOVAL_ULPS-nfs iser smb}
	export NVME_FIO=${NVME_FIO:-randwrite:4k:4m write:1m:64m}
	export UNLOAD_ROUNDS=${UNLOAD_ROUNDS:-50} LINK_CYCLES=${LINK_CYCLES:-200}
	export FLOOD_IDLE=${FLOOD_IDLE:-1000} FLOOD_MPA=${FLOOD_MPA:-300} FLOOD_NFS_MPA=${FLOOD_NFS_MPA:-300}
	export ZERO_WINDOW_CONNS=${ZERO_WINDOW_CONNS:-600}
	export FAULT_SECS=${FAULT_SECS:-120}
	export NFS_FAULT_NETEM=${NFS_FAULT_NETEM:-loss 1%;loss 5%;delay 10ms reorder 25%;duplicate 1%;delay 20ms 10ms;corrupt 0.1%}
	export FAULT_MB=${FAULT_MB:-64} FAULT_PAIR_ROUNDS=${FAULT_PAIR_ROUNDS:-rsiw:rsiw siw:siw rsiw:siw siw:rsiw}
	export USER_FULL=${USER_FULL:-1} USER_PERF_ITERS=${USER_PERF_ITERS:-1000}
	export USER_PING_COUNT=${USER_PING_COUNT:-200}
	export ULP_PHASES=${ULP_PHASES:-nfs1 nfs2 nvme1 nvme2 smb1 smb2 iser1 iser2}
	CHECK_BUDGET=${CHECK_BUDGET:-14400}
fi

# make check KASAN=1: the same tests on the KASAN kernel (its own tree in the
# cache; qemu/rsiw-kasan.config), which runs them several times slower (the
# canaries: 493 s against 142).
if [ "${KASAN:-0}" = 1 ]; then
	CHECK_BUDGET=${CHECK_BUDGET:-14400}
fi

# A budget for the whole run, CHECK_BUDGET s (default 88 minutes, inside CI's
# 90-minute limit), so that a hang still ends with the summary line: the
# build gets what is left, and each VM run what is left less a reserve for
# the runs after it (a VM run that overruns reports its remaining tests as
# failed, not run).
CHECK_BUDGET=${CHECK_BUDGET:-5280}
left() { # RESERVE: seconds of the budget left, less RESERVE (at least 60)
	local s=$((CHECK_BUDGET - SECONDS - ${1:-0}))
	echo $((s > 60 ? s : 60))
}

# Where the time goes, for CI logs: "# check: WHAT took N s".
phase_t0=$SECONDS
took() {
	echo "# check: $1 took $((SECONDS - phase_t0)) s"
	phase_t0=$SECONDS
}

scripts/deps.sh || die "installing dependencies failed"
took "dependencies"
out=$(mktemp -d)

# The host tests run beside the kernel build: on a fresh machine they spend
# much of their time fetching crates and in timed fuzz runs. Their output is
# shown once they are done.
host_pid=
if [ "${TESTS:-*}" = "*" ]; then
	timeout "$(left)" selftests/host-check.sh >"$out/host" 2>&1 &
	host_pid=$!
fi
host_done() {
	[ -n "$host_pid" ] || return 0
	wait "$host_pid"
	host_pid=
	cat "$out/host"
	tally "$out/host" "host-check"
}

# selected DIR SKIP: whether TESTS matches a test DIR/NAME.sh (NAME not
# matching the extended glob SKIP).
shopt -s extglob
# shellcheck disable=SC2053 # both are patterns
selected() {
	local t name
	for t in "$1"/*.sh; do
		name=$(basename "$t" .sh)
		[[ $name == $2 ]] && continue
		[[ $name == ${TESTS:-*} ]] && return 0
	done
	return 1
}

if timeout "$(left)" scripts/kernel.sh >/dev/null && timeout "$(left)" scripts/module.sh; then
	took "kernel and module build"
	if [ "${TESTS:-*}" = "*" ]; then
		timeout "$(left)" scripts/style-check.sh 2>&1 | tee "$out/style"
		tally "$out/style" "style"
		took "style (rustfmt, clippy)"
	fi
	host_done
	took "rest of the host tests"
	pair=0 canary=0
	selected selftests/pair pair && pair=1
	# shellcheck disable=SC2053 # a pattern
	[[ canary == ${TESTS:-*} ]] && canary=1
	# The harness's own test first: the canaries of selftests/canary/, in a VM
	# of their own, must each fail for their fault (TESTS=canary: only this).
	if ((canary)); then
		VM_TOTAL_TIMEOUT=${VM_TOTAL_TIMEOUT:-$(left $((pair ? 900 : 30)))} qemu/run-canary.sh 2>&1 | tee "$out/canary"
		tally "$out/canary" "harness canaries"
		took "harness canaries"
	fi
	# With no single-VM test selected but a pair test or the canaries, not the
	# single-VM run; with none of them, run-tests.sh reports the empty selection.
	if selected selftests '@(lib|ulp-setup|host-*)' || ((!pair && !canary)); then
		VM_TOTAL_TIMEOUT=${VM_TOTAL_TIMEOUT:-$(left $((pair ? 900 : 30)))} qemu/run-tests.sh 2>&1 | tee "$out/vm"
		tally "$out/vm" "vm selftests"
		took "vm selftests"
	fi
	# The two-VM tests (interop with the C siw): qemu/run-tests.sh --pair.
	if ((pair)); then
		VM_TOTAL_TIMEOUT=${VM_TOTAL_TIMEOUT:-$(left 30)} qemu/run-tests.sh --pair 2>&1 | tee "$out/pair"
		tally "$out/pair" "pair selftests"
		took "pair selftests"
	fi
else
	host_done
	echo "not ok - kernel or module build failed" >&2
	failed=$((failed + 1))
fi

# Each failed check again, with its diagnostics (at most 25 lines each, 8
# checks): CI logs keep the end of the output. Not the canaries, whose checks
# fail on purpose.
for f in "$out/vm" "$out/pair"; do
	[ -f "$f" ] && cat "$f"
done | awk '
	/^ *not ok / { n++; if (n > 8) exit; print "# failed again: " $0; ind = match($0, /[^ ]/); keep = 25; next }
	keep > 0 && match($0, /[^ ]/) == ind && substr($0, ind, 1) == "#" { print "# failed again: " $0; keep--; next }
	{ keep = 0 }'
rm -rf "$out"
echo "# check: $SECONDS s in all"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
