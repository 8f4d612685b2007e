# Shared helpers for booting rsiw's kernel with virtme-ng. Sourced, not run.
#
# The guest sees the host's root filesystem read-only (so this checkout is at
# the same path inside), runs under TCG (a nested KVM guest hangs on the CI
# machines) and gets read-write access only to the directories passed with
# --rwdir. See Documentation/rsiw/testing.rst.
# shellcheck shell=bash

# shellcheck source-path=SCRIPTDIR source=../scripts/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

VM_CPUS=${VM_CPUS:-2}
VM_MEMORY=${VM_MEMORY:-4G}
# The guest CPU: vng's "max" without FSRM and ERMS. With them the kernel
# copies with rep movsb, which TCG runs a byte at a time; without them, rep
# movsq and unrolled loops (a 256 MiB pipe copy 20 % faster, loopback TCP
# 30 %).
VM_QEMU_CPU=${VM_QEMU_CPU:-max,fsrm=off,erms=off}
# The root (the host's, read-only over 9p) with cache=loose: the guest keeps
# what it read instead of asking the host again (a dynamically linked exec
# 25 % faster, a python3 start twice as fast). A file the host changes during
# a run may look stale in the guest: scripts/module.sh installs modules only
# between runs (it waits for the run's lock). The results directories are
# mounts of their own, uncached.
# VM_ROOT_CACHE=none keeps vng's uncached mount.
VM_ROOT_CACHE=${VM_ROOT_CACHE:-loose}

# Kernel command line for every boot:
#   loglevel=4           only warnings and worse reach the (slow, emulated)
#                        serial console; the ring buffer still has everything
#   log_buf_len=8M       a long test's dmesg must not wrap before it is read
#   slab_nomerge         one slab cache per kmem_cache, so slab growth points
#                        at the cache that leaks
#   hung_task_timeout_secs=60  "INFO: task ... blocked" well within a test
#   module_blacklist=crc32c_intel  CRC32c stays on the table code (see
#                        qemu/rsiw.config: the LIO target forces the SSE4.2
#                        driver in as a module, and udev would load it)
VM_APPEND=(loglevel=4 log_buf_len=8M slab_nomerge hung_task_timeout_secs=60
	module_blacklist=crc32c_intel)
# vng sets rootflags first; the kernel keeps the last.
[ "$VM_ROOT_CACHE" = none ] ||
	VM_APPEND+=("rootflags=version=9p2000.L,trans=virtio,access=any,msize=524288,cache=$VM_ROOT_CACHE")
# The KASAN kernel (KASAN=1, qemu/rsiw-kasan.config) also gets SLUB's own
# checks: sanity checks (F), red zones (Z), poisoning (P) and the owner of
# each object (U), for its reports. Both slow the guest, so tests get
# VM_TIMEOUT_SCALE times their timeouts (3 there, 1 otherwise), and twice
# that on one vCPU, as each guest of a pair has (a 4 MiB Read from the C siw
# between two such guests took 27 s of a 30 s ULP step at 3).
# It boots with 4-level paging (no5lvl): the guest CPU offers LA57, and with
# 5-level paging 6.12 reports a false wild-memory-access when an interrupt
# takes a lock while identify_cpu has cleared the boot CPU's feature bits
# (pgtable_l5_enabled() reads them, and KASAN's shadow bounds follow it).
if [ "${KASAN:-0}" = 1 ]; then
	VM_APPEND+=(slub_debug=FZPU no5lvl)
	VM_TIMEOUT_SCALE=${VM_TIMEOUT_SCALE:-$((VM_CPUS > 1 ? 3 : 6))}
fi
VM_TIMEOUT_SCALE=${VM_TIMEOUT_SCALE:-1}

# vm_lock: wait until no other rsiw VM run on this host holds the VM lock, then
# hold it until this shell exits. TCG guests are CPU-bound; two runs sharing a
# small host slow each other past their test budgets. Nested callers (a runner
# started by a runner) see RSIW_VM_LOCK_HELD and do not lock again.
vm_lock() {
	[ -n "${RSIW_VM_LOCK_HELD:-}" ] && return 0
	mkdir -p "$RSIW_CACHE"
	exec 8>"$RSIW_CACHE/vm.lock"
	if ! flock -n 8; then
		progress "waiting for another rsiw VM run on this host to finish"
		flock 8
	fi
	export RSIW_VM_LOCK_HELD=1
}

# The built kernel tree; fails when it has no bzImage yet.
vm_kernel_dir() {
	local kdir
	kdir=$(kernel_dir)
	[ -f "$kdir/arch/x86/boot/bzImage" ] || {
		echo "vm: no built kernel in $kdir (run 'make kernel')" >&2
		return 1
	}
	echo "$kdir"
}

# vm_vng_args ARRAY [--rwdir DIR]... [--name NAME] [--qemu-opts OPTS]...
# [--verbose]: store in ARRAY the vng options that boot the built kernel,
# without the command to run. NAME is the guest's host name (default rsiw-vm);
# OPTS are extra qemu arguments, split at blanks by vng (e.g. a NIC for a
# second VM to talk to, see qemu/run-tests.sh --pair).
vm_vng_args() {
	local -n _out=$1
	shift
	local kdir a name=rsiw-vm extra=()
	kdir=$(vm_kernel_dir) || return 1
	while (($#)); do
		case $1 in
		--rwdir) extra+=(--rwdir "$2"); shift 2 ;;
		--name) name=$2; shift 2 ;;
		--qemu-opts) extra+=("--qemu-opts=$2"); shift 2 ;;
		--verbose) extra+=(--verbose); shift ;;
		*) echo "vm_vng_args: unknown option $1" >&2; return 1 ;;
		esac
	done
	_out=(--run "$kdir" --disable-kvm --cpus "$VM_CPUS" --memory "$VM_MEMORY"
		--cwd "$RSIW_ROOT" --name "$name" "--qemu-opts=-cpu $VM_QEMU_CPU")
	for a in "${VM_APPEND[@]}"; do
		_out+=(--append "$a")
	done
	_out+=("${extra[@]}")
}

# vm_exec [--rwdir DIR]... [--name NAME] [--qemu-opts OPTS]... [--verbose] [--]
# COMMAND [ARG]...: boot the built kernel, run COMMAND with its arguments
# inside the guest (as root, in the repository root), power off. Returns the
# command's exit status (255 when the guest died first). With no COMMAND,
# starts an interactive shell.
vm_exec() {
	local opts=() args=() a
	while (($#)); do
		case $1 in
		--rwdir | --name | --qemu-opts) opts+=("$1" "$2"); shift 2 ;;
		--verbose) opts+=("$1"); shift ;;
		--) shift; break ;;
		*) break ;;
		esac
	done
	vm_vng_args args "${opts[@]}" || return 1
	if (($#)); then
		a=$(vm_quote "$@") || return 1
		args+=(--exec "$a")
	fi
	if [ -t 1 ] && [ -t 2 ]; then
		vng "${args[@]}"
	else
		# qemu opens the guest's stdout and stderr anew (/proc/self/fd/1 and 2), truncating
		# a file they were redirected to: make run > run.log kept only the guest's last lines.
		# Through pipes the log keeps everything.
		vng "${args[@]}" 2> >(cat >&2) | cat
		return "${PIPESTATUS[0]}"
	fi
}

# vm_start LOG [--rwdir DIR]... [--name NAME] [--qemu-opts OPTS]... [--]
# COMMAND [ARG]...: like vm_exec, but in the background, in a session of its
# own, with the kernel console and the command's output going to LOG. Sets
# VM_PID, which is also the id of the session and process group that vm_stop
# kills (to run several VMs, save it for vm_alive_pid and vm_stop_pid). Call
# it from a script, not an interactive shell: there a background job does not
# lead a process group, so setsid makes vng itself the leader instead of
# forking first.
vm_start() {
	local log=$1 opts=() args=() cmd
	shift
	while (($#)); do
		case $1 in
		--rwdir | --name | --qemu-opts) opts+=("$1" "$2"); shift 2 ;;
		--) shift; break ;;
		*) break ;;
		esac
	done
	vm_vng_args args --verbose "${opts[@]}" || return 1
	cmd=$(vm_quote "$@") || return 1
	# Through a pipe: qemu reopens /proc/self/fd/1 and 2, which for a regular
	# file means two offsets into one file, overwriting each other.
	setsid vng "${args[@]}" --exec "$cmd" </dev/null > >(cat >"$log") 2>&1 &
	VM_PID=$!
}

# vm_alive: whether the VM started by vm_start still runs (an exited, not yet
# reaped vng is a zombie, which kill -0 would still find).
vm_alive() {
	vm_alive_pid "${VM_PID:-}"
}

# vm_alive_pid PID: vm_alive for the VM whose VM_PID was PID (when a script
# runs several).
vm_alive_pid() {
	local stat
	[ -n "$1" ] && stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}

# vm_stop: kill the VM started by vm_start (vng and its qemu), then reap it.
vm_stop() {
	vm_stop_pid "${VM_PID:-}"
	VM_PID=
}

# vm_stop_pid PID: vm_stop for the VM whose VM_PID was PID.
vm_stop_pid() {
	local _
	[ -n "$1" ] || return 0
	kill -TERM -- "-$1" 2>/dev/null
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		vm_alive_pid "$1" || break
		sleep 0.5
	done
	kill -KILL -- "-$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

# vm_quote ARG...: one shell command line that runs ARG... as given. vng
# passes it base64-encoded on the kernel command line, which x86 cuts at 2048
# bytes: a cut line loses init= and the guest panics at boot. A command longer
# than VM_EXEC_MAX bytes is refused here (the runners pass their test list and
# environment in files instead; virtme-ng's own arguments take about 850).
VM_EXEC_MAX=600
vm_quote() {
	local out='' a
	for a in "$@"; do
		out+="$(printf '%q' "$a") "
	done
	out=${out% }
	if ((${#out} > VM_EXEC_MAX)); then
		echo "vm: the guest command is ${#out} bytes, over $VM_EXEC_MAX (the kernel command line would overflow): ${out:0:120}..." >&2
		return 1
	fi
	echo "$out"
}

# vm_test_selected FILE NAME: whether a run picks the selftest FILE (NAME is
# its name without .sh): NAME matches TESTS (a glob, default *). A test whose
# header says "# tier: full" is left to make check-full (CHECK_FULL=1) unless
# TESTS names it: make check has a time budget, and such a test's coverage is
# mostly had by the others (its header says which). Prints a diagnostic line
# for a test left out, so that the run says what it did not run.
vm_test_selected() {
	# shellcheck disable=SC2053 # a pattern
	[[ $2 == ${TESTS:-*} ]] || return 1
	if [ "${CHECK_FULL:-0}" != 1 ] && [ "${TESTS:-*}" = "*" ] &&
		grep -qE '^# tier: full( |$)' "$1"; then
		echo "# $2: in make check-full only (its header: tier: full)"
		return 1
	fi
	return 0
}

# vm_test_kills FILE: the VM of a pair (a or b) that the selftest FILE has the
# runner kill mid-test, from its "# kills: ROLE" line; nothing if none. The
# runner kills that VM's qemu (SIGKILL) once its half posts kill-me, runs such
# a test last, and judges the killed half on what it printed before.
vm_test_kills() {
	sed -nE 's/^# kills: *([ab]) *$/\1/p' "$1" | head -n 1
}

# vm_test_timeout FILE: the seconds a selftest may run, from its first
# "# timeout: N" line (anywhere: a header that grew past a fixed number of
# lines once silently dropped a test to the default); 300 without one.
vm_test_timeout() {
	local t
	t=$(sed -nE 's/^# timeout: *([0-9]+) *$/\1/p' "$1" | head -n 1)
	echo "$((${t:-300} * VM_TIMEOUT_SCALE))"
}

# Kernel log lines that fail the test during which they appear. Extended
# regular expressions, one per line. See Documentation/rsiw/testing.rst.
VM_SPLAT_PATTERNS='WARNING:
-----*\[ cut here \]
(^|[^A-Za-z_])BUG[: ]
kernel BUG at
Oops
general protection fault
Kernel panic
Unable to handle kernel
invalid opcode:
stack segment:
double fault
Call Trace:
KASAN:
UBSAN:
KFENCE:
possible circular locking
inconsistent lock state
possible recursive locking
suspicious RCU usage
possible irq lock inversion
bad unlock balance
held lock freed
lock held when returning to user space
lock held at task exit
INFO: task .* blocked for more than
detected stall
soft lockup
hard LOCKUP
rust_panic
panicked at
refcount_t:
list_add corruption
list_del corruption
[Cc]orruption
Poison overwritten
Redzone overwritten
Object already free
Freepointer corrupt
Padding overwritten
ODEBUG
leaked reference
reference already released
unregister_netdevice: waiting for'

# The patterns as grep arguments (-e each), made once: tests call
# vm_splat_lines after every case, and a process substitution forks.
VM_SPLAT_ARGS=()
while IFS= read -r _re; do
	VM_SPLAT_ARGS+=(-e "$_re")
done <<<"$VM_SPLAT_PATTERNS"
unset _re

# vm_splat_lines FILE [EXPECTED_FAULTS]: print FILE's lines that match a splat
# pattern (ignoring the selftest runner's own "rsiw-selftest:" markers).
# Status 0 if any did. EXPECTED_FAULTS, when it exists, names user processes
# the test expected to die of a fault ("PID COMM REASON" a line, see
# testing.rst): the kernel's reports of those faults ("traps: COMM[PID] ..."
# for a general protection fault, "COMM[PID]: segfault at ...") are left out.
vm_splat_lines() {
	local pid comm _ skip=(-e 'rsiw-selftest:')
	if [ -n "${2:-}" ] && [ -f "$2" ]; then
		while read -r pid comm _; do
			[ -n "$comm" ] && skip+=(-e "traps: $comm[$pid] " -e "$comm[$pid]: segfault at ")
		done <"$2"
	fi
	grep -v -F "${skip[@]}" "$1" | grep -E "${VM_SPLAT_ARGS[@]}"
}

# vm_console_excerpt CONSOLE TEST: print the part of a VM's console worth
# reading after TEST died: from the test's start on (the guest runner announces
# it), or the whole console. A splat's first lines name the fault and its stack
# dump fills the tail, so with a splat this is its start (and the 3 lines before)
# plus the last lines; without one, the last 30 lines.
vm_console_excerpt() {
	local since first at="" total
	since=$(sed -n "/^guest-runner: begin $2\$/,\$p" "$1")
	[ -n "$since" ] || since=$(grep -v '^\s*$' "$1")
	first=$(vm_splat_lines <(printf '%s\n' "$since") | head -n 1)
	[ -z "$first" ] || at=$(grep -F -x -n -m 1 -- "$first" <<<"$since" | cut -d: -f1)
	total=$(wc -l <<<"$since")
	if [ -z "$at" ]; then
		tail -n 30 <<<"$since"
	elif ((total > at + 40)); then
		sed -n "$((at > 3 ? at - 3 : 1)),$((at + 20))p" <<<"$since"
		echo "[...]"
		tail -n 15 <<<"$since"
	else
		sed -n "$((at > 3 ? at - 3 : 1)),\$p" <<<"$since"
	fi
}

# Taint flags (bit numbers) that a test must not set: B bad page (5), D died
# (7), W warning (9), L soft lockup (14).
VM_BAD_TAINT_BITS=(5 7 9 14)

# vm_new_taint BEFORE AFTER: print the bad taint bits set in AFTER but not in
# BEFORE (both /proc/sys/kernel/tainted values). Status 0 if there are any.
vm_new_taint() {
	local b found=1
	for b in "${VM_BAD_TAINT_BITS[@]}"; do
		if (((${2:-0} >> b) & 1)) && ! (((${1:-0} >> b) & 1)); then
			echo "$b"
			found=0
		fi
	done
	return $found
}

# vm_host_part ARRAY SKIPS SCRIPT OUT LABEL [VAR=VALUE]...: run a test's host
# part SCRIPT (NAME.host beside NAME.sh) on the host, in an environment with
# the VAR=VALUE given, its output in OUT; show that TAP as a subtest headed
# LABEL, append to the array named ARRAY what fails it and to the array named
# SKIPS the checks it skipped. Host parts check artifacts with tools too slow
# under TCG (tshark on captures); they must not touch the host's network or
# modules.
vm_host_part() {
	local -n _hskips=$2
	local script=$3 out=$4 label=$5 rc skip
	env "${@:6}" timeout -k 10 300 bash "$script" >"$out" 2>&1
	rc=$?
	echo "# Subtest: $label"
	sed 's/^/    /' "$out"
	vm_tap_diags "$1" "$out" "$rc" 300 host
	while IFS= read -r skip; do
		_hskips+=("$label: $skip")
	done < <(vm_skips "$out")
}

# vm_tap_diags ARRAY TAP STATUS TIMEOUT [PREFIX]: append to the array named
# ARRAY what fails a test that printed TAP and exited with STATUS (124: it
# ran out of its TIMEOUT s): failed subtests, a bail-out, a missing or unmet
# plan.
vm_tap_diags() {
	local -n _tdiags=$1
	local out=$2 rc=$3 p=${5:+$5: } nok plan count
	[ "$rc" = 0 ] || _tdiags+=("${p}exit status $rc$([ "$rc" = 124 ] && echo " (timed out after $4s)")")
	nok=$(grep -cE '^not ok ' "$out")
	plan=$(sed -nE 's/^1\.\.([0-9]+)$/\1/p' "$out" | tail -n 1)
	count=$(grep -cE '^(not )?ok ' "$out")
	[ "$nok" = 0 ] || _tdiags+=("${p}$nok subtest(s) failed")
	grep -q '^Bail out!' "$out" && _tdiags+=("${p}$(grep -m1 '^Bail out!' "$out")")
	if [ -z "$plan" ]; then
		_tdiags+=("${p}no TAP plan (1..N) in the output")
	elif [ "$plan" != "$count" ]; then
		_tdiags+=("${p}planned $plan subtests, ran $count")
	fi
}

# vm_test_diags ARRAY DIR TEST [PREFIX]: append to the array named ARRAY what
# fails a test that the guest runner (qemu/guest-runner.sh) finished in DIR,
# each diagnostic led by PREFIX: its exit status, its TAP (failed subtests, a
# bail-out, a missing or unmet plan), and what the runner saw around it. The
# runner's detectors fail closed: a kernel log without the test's begin
# marker (the ring buffer wrapped), kmemleak refusing to scan, or lockdep
# switched off all fail the test, since its splats and leaks would pass
# unseen otherwise.
vm_test_diags() {
	local -n _diags=$1
	local dir=$2 test=$3 p=${4:+$4: } rc out splat chain leak taint locks
	rc=$(cat "$dir/exit")
	# Older guests wrote the file in place; give a half-written one a moment.
	[ -n "$rc" ] || { sleep 1; rc=$(cat "$dir/exit"); }
	out=$dir/output.tap
	vm_tap_diags "$1" "$out" "$rc" "$(vm_test_timeout "$test")" "${4:-}"
	if ! head -n 1 "$dir/dmesg.txt" | grep -q "rsiw-selftest: begin $(basename "$test" .sh) "; then
		_diags+=("${p}the kernel log lost the test's begin marker (did the ring buffer wrap?): its splats cannot be judged")
	fi
	if splat=$(vm_splat_lines "$dir/dmesg.txt" "$dir/expected-faults"); then
		_diags+=("${p}kernel splat during the test (full log: $dir/dmesg.txt):" "$(head -n 20 <<<"$splat")")
		chain=$(vm_lockdep_chain "$dir/dmesg.txt" | head -n 40)
		[ -z "$chain" ] || _diags+=("${p}lockdep's report, its locks and where they were taken:" "$chain")
	fi
	# The runner writes a test's leak report a test or more later (qemu/guest-runner.sh).
	if ! [ -f "$dir/kmemleak.txt" ]; then
		_diags+=("${p}kmemleak: no report: the run stopped before the scan that covers this test")
	elif [ -s "$dir/kmemleak.txt" ]; then
		leak=$(grep -c '^unreferenced object' "$dir/kmemleak.txt")
		if ((leak)); then
			_diags+=("${p}kmemleak: $leak leak(s) (see $dir/kmemleak.txt):" "$(head -n 12 "$dir/kmemleak.txt")")
		else
			_diags+=("${p}kmemleak: $(head -n 3 "$dir/kmemleak.txt")")
		fi
	fi
	read -r -a locks <"$dir/debug_locks" 2>/dev/null
	if [ "${locks[0]:-}" != 1 ]; then
		_diags+=("${p}lockdep was off when the test began (debug_locks ${locks[0]:-unknown}): its lock checks did not run")
	elif [ "${locks[1]:-}" != 1 ]; then
		_diags+=("${p}lockdep switched itself off during the test (debug_locks ${locks[1]:-unknown}; its report is in $dir/dmesg.txt)")
	fi
	# shellcheck disable=SC2046
	if taint=$(vm_new_taint $(cat "$dir/taint")); then
		_diags+=("${p}kernel taint bits newly set: ${taint//$'\n'/ }")
	fi
	if [ -s "$dir/leftover.txt" ]; then
		_diags+=("${p}left behind (now removed):" "$(cat "$dir/leftover.txt")")
	fi
}

# vm_lockdep_chain FILE: the locks of the first lockdep report in FILE (a
# kernel log) and where each was taken: the lock wanted and the lock held,
# then each link of the dependency chain with its first 5 frames past
# lockdep's own. Its splat lines alone ("possible circular locking
# dependency", "Call Trace:") do not say which locks; a report seen only
# in CI must be readable from CI's output.
vm_lockdep_chain() {
	sed -E 's/^\[ *[0-9.]+\] ?//; s/^ +//' "$1" | awk '
		/^WARNING: (possible circular locking|possible recursive locking|inconsistent lock state|possible irq lock inversion)/ { on = 1; print; next }
		!on { next }
		/^(stack backtrace:|\*\*\* DEADLOCK \*\*\*)/ { exit }
		want { print "  " $0; want = 0; next }
		/is trying to acquire lock:|is already holding lock:/ { print; want = 1; next }
		/^-> #[0-9]+ / { print; frames = 5; next }
		frames && /^(lock_acquire|validate_chain|__lock_acquire|check_prev_add|check_noncircular|print_circular_bug|lock_release|_raw_spin|__raw_spin|__mutex_lock|mutex_lock_nested|down_|__down|rwsem_|__flush_work|touch_work_lockdep|touch_wq_lockdep)/ { next }
		frames && /\+0x/ { print "    " $0; frames--; next }'
}

# vm_boot_diags ARRAY DIR [PREFIX]: append to ARRAY a splat in the boot log
# (DIR/boot-dmesg.txt) of the guest, before its first test. Lockdep already
# off at boot fails the first test through its debug_locks.
vm_boot_diags() {
	local -n _bdiags=$1
	local dir=$2 p=${3:+$3: } splat
	if splat=$(vm_splat_lines "$dir/boot-dmesg.txt"); then
		_bdiags+=("${p}kernel splat while the VM booted (full log: $dir/boot-dmesg.txt):" "$(head -n 20 <<<"$splat")")
	fi
}

# vm_skips TAP: print each skipped check of a test's TAP as "DESC (REASON)".
vm_skips() {
	sed -nE 's/^ok [0-9]+ - (.*) # SKIP (.*)$/\1 (\2)/p' "$1"
}
