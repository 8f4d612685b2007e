#!/usr/bin/env bash
# make check: host-side tests, then the kernel build, the style checks
# (rustfmt, clippy: scripts/style-check.sh), then the harness's canaries, the
# VM selftests and the two-VM selftests, in VM_LANES lanes at once (below).
# Ends with one line, "N passed, N failed, N skipped", summed over all.
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

# shellcheck source=../qemu/vm.sh
. qemu/vm.sh
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

# The VM runs go in VM_LANES lanes (default 2) that run at the same time.
# Under TCG a guest keeps this host's two cores about two thirds busy: the
# rest of the time it waits on timers and on the other end of a connection,
# so two lanes get through the same tests in well under the time of one.
# Each lane runs its jobs one after another: lane 0 starts with the
# canaries, lane 1 with the two-VM tests, and the single-VM tests are spread
# over the lanes by their measured runtimes ("# runtime: N" in each test's
# header), longest first, each to the lane with the least work so far; each
# lane boots one VM for its share. VM_LANES=1 runs everything in one lane:
# the canaries, the single-VM tests, the two-VM tests.
VM_LANES=${VM_LANES:-2}
((VM_LANES >= 1 && VM_LANES <= 4)) || die "VM_LANES must be 1 to 4"
LANE_JOBS=() LANE_LOAD=() LANE_TESTS=() LANE_VM_LOAD=()

# runtime FILE: the seconds FILE took in a measured run under TCG, from its
# "# runtime: N" header line; 120 without one.
runtime() {
	local t
	t=$(sed -nE 's/^# runtime: *([0-9]+) *$/\1/p' "$1" | head -n 1)
	echo "${t:-120}"
}

# plan_lanes: fill LANE_JOBS (each lane's jobs: canary, pair, vm-LANE),
# LANE_TESTS (the single-VM tests of vm-LANE, as NAME|NAME...), LANE_LOAD
# (the seconds each lane is expected to take) and LANE_VM_LOAD (of that, its
# single-VM tests).
plan_lanes() {
	local i t best pair_lane=$((VM_LANES > 1 ? 1 : 0)) sorted
	for ((i = 0; i < VM_LANES; i++)); do
		LANE_JOBS[i]="" LANE_LOAD[i]=0 LANE_TESTS[i]="" LANE_VM_LOAD[i]=0
	done
	if ((canary)); then
		LANE_JOBS[0]=canary
		LANE_LOAD[0]=$(runtime qemu/run-canary.sh)
	fi
	if ((pair && VM_LANES > 1)); then
		LANE_JOBS[pair_lane]+=" pair"
		for t in selftests/pair/*.sh; do
			# shellcheck disable=SC2053 # a pattern
			[[ $(basename "$t" .sh) == ${TESTS:-*} ]] || continue
			LANE_LOAD[pair_lane]=$((LANE_LOAD[pair_lane] + $(runtime "$t")))
		done
	fi
	sorted=$(for t in "${singles[@]}"; do
		echo "$( [ -f "selftests/$t.sh" ] && runtime "selftests/$t.sh" || echo 0) $t"
	done | sort -k1,1nr -k2)
	while read -r secs t; do
		[ -n "$t" ] || continue
		best=0
		for ((i = 1; i < VM_LANES; i++)); do
			((LANE_LOAD[i] < LANE_LOAD[best])) && best=$i
		done
		LANE_TESTS[best]+="${LANE_TESTS[best]:+|}$t"
		LANE_LOAD[best]=$((LANE_LOAD[best] + secs))
		LANE_VM_LOAD[best]=$((LANE_VM_LOAD[best] + secs))
	done <<<"$sorted"
	for ((i = 0; i < VM_LANES; i++)); do
		[ -n "${LANE_TESTS[i]}" ] && LANE_JOBS[i]+=" vm-$i"
	done
	if ((pair && VM_LANES == 1)); then
		LANE_JOBS[0]+=" pair"
	fi
	for ((i = 0; i < VM_LANES; i++)); do
		[ -n "${LANE_JOBS[i]}" ] &&
			echo "# check: lane $i:${LANE_JOBS[i]}${LANE_TESTS[i]:+ (${LANE_TESTS[i]//|/ })}, about ${LANE_LOAD[i]} s"
	done
}

# run_lane LANE: the lane's jobs one after another, each job's output shown
# whole once it is done (lanes finish jobs in any order). A job may run until
# the budget is spent, less what the lane's later jobs are expected to take.
run_lane() {
	local lane=$1 job t0 later reserve=0
	local -a jobs
	read -ra jobs <<<"${LANE_JOBS[lane]}"
	for ((j = 0; j < ${#jobs[@]}; j++)); do
		job=${jobs[j]} reserve=30
		for later in "${jobs[@]:j+1}"; do
			case $later in
			vm-*) reserve=$((reserve + LANE_VM_LOAD[lane])) ;;
			*) reserve=$((reserve + 600)) ;;
			esac
		done
		t0=$SECONDS
		case $job in
		canary) VM_TOTAL_TIMEOUT=${VM_TOTAL_TIMEOUT:-$(left "$reserve")} qemu/run-canary.sh ;;
		pair) VM_TOTAL_TIMEOUT=${VM_TOTAL_TIMEOUT:-$(left "$reserve")} qemu/run-pair-tests.sh ;;
		vm-*)
			TESTS="@(${LANE_TESTS[lane]})" VM_TOTAL_TIMEOUT=${VM_TOTAL_TIMEOUT:-$(left "$reserve")} \
				qemu/run-tests.sh
			;;
		esac >"$out/$job" 2>&1
		flock "$out/.print" cat "$out/$job" - <<<"# check: lane $lane: $job took $((SECONDS - t0)) s"
	done
}

run_lanes() {
	local i
	for ((i = 0; i < VM_LANES; i++)); do
		[ -n "${LANE_JOBS[i]}" ] && run_lane "$i" &
	done
	wait
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
	pair=0 canary=0 singles=()
	selected selftests/pair pair && pair=1
	# shellcheck disable=SC2053 # a pattern
	[[ canary == ${TESTS:-*} ]] && canary=1
	for t in selftests/*.sh; do
		name=$(basename "$t" .sh)
		case $name in lib | ulp-setup | host-*) continue ;; esac
		# shellcheck disable=SC2053 # a pattern
		[[ $name == ${TESTS:-*} ]] && singles+=("$name")
	done
	# With nothing selected, run-tests.sh reports the empty selection.
	((${#singles[@]} || pair || canary)) || singles=("${TESTS:-*}")
	plan_lanes
	vm_lock
	run_lanes
	took "VM runs (canaries, selftests, two-VM selftests) in $VM_LANES lane(s)"
	for job in canary vm-0 vm-1 vm-2 vm-3 pair; do
		[ -f "$out/$job" ] || continue
		case $job in
		canary) tally "$out/$job" "harness canaries" ;;
		pair) tally "$out/$job" "pair selftests" ;;
		*) tally "$out/$job" "vm selftests ($job)" ;;
		esac
	done
else
	host_done
	echo "not ok - kernel or module build failed" >&2
	failed=$((failed + 1))
fi

rm -rf "$out"
echo "# check: $SECONDS s in all"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
