#!/usr/bin/env bash
# Type-check (and with CLIPPY=1, lint) rust/ and Rust module crates against the
# cached kernel's compiler flags, without touching the kernel tree: bindings and
# the kernel crate are regenerated into a private temporary directory.
#
#   scripts/typecheck.sh [CRATE_ROOT.rs ...]   default: drivers/rsiw/rsiw.rs
#
# RSIW_RUST_DIR points at another rust/ directory (e.g. a work-in-progress copy).
set -euo pipefail
. "$(dirname "$0")/common.sh"
export RUSTC_BOOTSTRAP=1
K=$(kernel_dir)
R=${RSIW_RUST_DIR:-$RSIW_ROOT/rust}
[ -f "$K/rust/libkernel.rmeta" ] || die "no built kernel in $K: run 'make kernel'"
crates=()
for c in "$@"; do
	crates+=("$(realpath "$c")")
done
T=$(mktemp -d "${TMPDIR:-/tmp}/rsiw-typecheck.XXXXXX")
trap 'rm -rf "$T"' EXIT
RUSTC=rustc
[ -n "${CLIPPY:-}" ] && RUSTC=clippy-driver
mkdir -p "$T/rust/bindings" "$T/src/helpers"
cd "$K"

savedcmd() { sed -n "s|^savedcmd_$1 := ||p" "$2"; }

# Helpers (static inline wrappers) with ours included.
cp rust/helpers/*.c "$T/src/helpers/"
sed -i '/^\/\/ rsiw begin$/,/^\/\/ rsiw end$/d' "$T/src/helpers/helpers.c"
for h in "$R"/helpers/*.c; do
	[ -e "$h" ] || continue
	cp "$h" "$T/src/helpers/"
	echo "#include \"$(basename "$h")\"" >> "$T/src/helpers/helpers.c"
done
cmd=$(savedcmd rust/bindings/bindings_helpers_generated.rs rust/bindings/.bindings_helpers_generated.rs.cmd)
cmd=${cmd/rust\/helpers\/helpers.c/$T/src/helpers/helpers.c}
cmd=$(sed "s| -o rust/bindings/bindings_helpers_generated.rs| -o $T/rust/bindings/bindings_helpers_generated.rs|; s|-Wp,-MMD,[^ ]*||; s|;.*||" <<<"$cmd")
eval "$cmd"
sed -Ei 's/pub fn rust_helper_([a-zA-Z0-9_]*)/#[link_name="rust_helper_\1"]\n    pub fn \1/g' "$T/rust/bindings/bindings_helpers_generated.rs"

# Bindings with our headers.
cp rust/bindings/bindings_helper.h "$T/src/bh.h"
sed -i '/^\/\/ rsiw begin$/,/^\/\/ rsiw end$/d' "$T/src/bh.h"
[ -f "$R/bindings_helper.h.in" ] && sed -i "/^#include <linux\/workqueue.h>/r $R/bindings_helper.h.in" "$T/src/bh.h"
cmd=$(savedcmd rust/bindings/bindings_generated.rs rust/bindings/.bindings_generated.rs.cmd)
cmd=${cmd/rust\/bindings\/bindings_helper.h/$T/src/bh.h}
cmd=$(sed "s| -o rust/bindings/bindings_generated.rs| -o $T/rust/bindings/bindings_generated.rs|; s|-Wp,-MMD,[^ ]*||; s|;.*||" <<<"$cmd")
eval "$cmd"
sed -Ei 's/pub const RUST_CONST_HELPER_([a-zA-Z0-9_]*)/pub const \1/g' "$T/rust/bindings/bindings_generated.rs"

flags=$(sed -n 's/^savedcmd_rust\/bindings.o := OBJTREE=[^ ]* rustc //p' rust/.bindings.o.cmd | sed 's/--emit=.*//')
# shellcheck disable=SC2086
OBJTREE=$T rustc $flags --extern ffi --emit=metadata="$T/libbindings.rmeta" --crate-type rlib \
	-L./rust --crate-name bindings rust/bindings/lib.rs --sysroot=/dev/null -Zunstable-options

# The kernel crate with our modules.
cp -r rust/kernel "$T/kernel"
[ -d "$R/kernel" ] && cp -r "$R/kernel/." "$T/kernel/"
sed -i '/^\/\/ rsiw begin$/,/^\/\/ rsiw end$/d' "$T/kernel/lib.rs"
[ -f "$R/lib.rs.in" ] && sed -i "/^pub mod workqueue;/r $R/lib.rs.in" "$T/kernel/lib.rs"
# shellcheck disable=SC2086
OBJTREE=$K $RUSTC $flags --extern ffi --extern build_error --extern macros \
	--extern bindings="$T/libbindings.rmeta" --extern uapi --emit=metadata="$T/libkernel.rmeta" \
	--crate-type rlib -L./rust --crate-name kernel "$T/kernel/lib.rs" --sysroot=/dev/null -Zunstable-options
progress "kernel crate (with rust/) OK"

features=arbitrary_self_types,lint_reasons,used_with_arg
((${#crates[@]})) || crates=("$RSIW_ROOT/drivers/rsiw/rsiw.rs")
for crate in "${crates[@]}"; do
	name=$(basename "$crate" .rs)
	# shellcheck disable=SC2086
	RUST_MODFILE=$name $RUSTC $flags -Zallow-features=$features -Zcrate-attr=no_std \
		-Zcrate-attr="feature($features)" --extern kernel="$T/libkernel.rmeta" --extern macros \
		--extern ffi --extern bindings="$T/libbindings.rmeta" -L "$T" -L./rust --crate-type rlib \
		--crate-name "$name" --emit=metadata="$T/lib$name.rmeta" "$crate" --sysroot=/dev/null \
		-Zunstable-options --cfg MODULE
	progress "$name OK"
done
