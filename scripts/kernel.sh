#!/usr/bin/env bash
# Configure and build rsiw's kernel in the cache, wiring rust/ into the kernel crate.
# Prints the kernel directory on stdout. Incremental: a second run rebuilds only what changed.
set -euo pipefail
. "$(dirname "$0")/common.sh"

[ -f "$KERNEL_TARBALL" ] || die "$KERNEL_TARBALL missing: run scripts/deps.sh"
KDIR=$(kernel_dir)
KVER=$(kernel_version)
lock_kernel_tree
# Logs per tree: the plain and the KASAN tree may build at once.
config_log=$KDIR.config.log

# A changed config fragment (or virtme-ng version) makes a new tree. Seeded with a copy of
# the newest tree built from the same source, it is reconfigured and rebuilt incrementally
# (kbuild rebuilds what the changed options touch) instead of from scratch. A tree of the
# same variant (KASAN or not) is preferred: KASAN instruments every object, so a seed of the
# other variant saves nothing.
built_trees() { # newest first
	find "$RSIW_CACHE" -maxdepth 1 -type d -name "linux-$KVER-*" -printf '%T@ %p\n' |
		sort -rn | cut -d' ' -f2- |
		while read -r d; do
			[ -f "$d/.unpacked" ] && [ -f "$d/arch/x86/boot/bzImage" ] && echo "$d"
		done
}
same_variant() { # tree
	local k=0
	grep -qx 'CONFIG_KASAN=y' "$1/.config" 2>/dev/null && k=1
	[ "$k" = "${KASAN:-0}" ]
}
if [ ! -f "$KDIR/.unpacked" ]; then
	seed=
	while read -r d; do
		[ -n "$seed" ] || seed=$d
		if same_variant "$d"; then seed=$d; break; fi
	done < <(built_trees)
	if [ -n "$seed" ] && [ "$seed" != "$KDIR" ]; then
		progress "seeding $KDIR from $seed (the config changed; rebuilding incrementally)"
		rm -rf "$KDIR.tmp"
		cp -a "$seed" "$KDIR.tmp"
		rm -f "$KDIR.tmp/.rsiw-configured"
		rm -rf "$KDIR"
		mv "$KDIR.tmp" "$KDIR"
	fi
fi
if [ ! -f "$KDIR/.unpacked" ]; then
	progress "unpacking Debian linux-source $KVER into $KDIR"
	rm -rf "$KDIR.tmp"
	mkdir -p "$KDIR.tmp"
	tar -xaf "$KERNEL_TARBALL" -C "$KDIR.tmp" --strip-components=1
	rm -rf "$KDIR"
	mv "$KDIR.tmp" "$KDIR"
	touch "$KDIR/.unpacked"
fi

cd "$KDIR"
if [ ! -f .config ] || [ ! -f .rsiw-configured ]; then
	mapfile -t frags < <(kernel_fragments)
	progress "configuring kernel $KVER (virtme-ng minimal config + ${frags[*]#"$RSIW_ROOT"/})"
	vng --kconfig --force >"$config_log" 2>&1
	cat "${frags[@]}" >> .config
	make -s LLVM=1 olddefconfig >>"$config_log" 2>&1
	# Every option the fragments set must have survived olddefconfig, at the
	# value of the last fragment that sets it.
	bad=0
	while IFS= read -r line; do
		case "$line" in CONFIG_*=*) ;; *) continue ;; esac
		opt=${line%%=*} val=${line#*=}
		if [ "$val" = n ]; then
			grep -q "^$opt=" .config && { echo "config: $opt should be off" >&2; bad=1; }
		else
			grep -qx "$opt=$val" .config || { echo "config: $opt=$val did not stick" >&2; bad=1; }
		fi
	done < <(cat "${frags[@]}" | awk -F= '/^CONFIG_[A-Z0-9_]+=/ {
		if (!($1 in val)) order[++n] = $1
		val[$1] = $0
	} END { for (i = 1; i <= n; i++) print val[order[i]] }')
	[ "$bad" = 0 ] || die "kernel config fragment did not apply (is rustc/bindgen/clang missing?)"
	touch .rsiw-configured
fi

"$RSIW_ROOT/scripts/wire-rust.sh" "$KDIR"
"$RSIW_ROOT/scripts/siw-crc-knob.sh" "$KDIR"

if [ ! -f arch/x86/boot/bzImage ]; then
	progress "building kernel $KVER with LLVM=1 (first time: ~30 min on 2 cores)"
else
	progress "rebuilding kernel $KVER incrementally"
fi
log=$KDIR.build.log
if ! make LLVM=1 -j"$JOBS" bzImage modules > "$log" 2>&1; then
	tail -n 60 "$log" >&2
	die "kernel build failed (full log: $log)"
fi
echo "$KDIR"
