#!/usr/bin/env bash
# Wire rsiw's kernel-crate extensions (rust/) into an unpacked kernel tree.
#
# New files are copied in (only when their content changed, so make stays
# incremental); the few lines they need in existing kernel files are kept
# between "rsiw" marker comments and rewritten on every run. Nothing of the
# kernel's own is copied into this repository.
set -euo pipefail
. "$(dirname "$0")/common.sh"

KDIR=${1:?usage: wire-rust.sh KDIR}
SRC=$RSIW_ROOT/rust
manifest=$KDIR/.rsiw-wired-files

sync_file() { # src dst
	if ! cmp -s "$1" "$2"; then
		mkdir -p "$(dirname "$2")"
		cp "$1" "$2"
	fi
}

# Replace the block between "<comment> rsiw begin" and "<comment> rsiw end"
# in FILE (appending it after ANCHOR's line, or at the end, the first time).
set_block() { # file comment-prefix anchor-regex content
	local file=$1 c=$2 anchor=$3 content=$4 tmp
	tmp=$(mktemp)
	# With a block already there, rewrite it in place and ignore the anchor.
	grep -qxF "$c rsiw begin" "$file" && anchor=""
	awk -v c="$c" -v anchor="$anchor" -v content="$content" '
		BEGIN { begin = c " rsiw begin"; end = c " rsiw end"; done = 0 }
		$0 == begin { skip = 1; next }
		$0 == end { skip = 0; print begin; printf "%s", content; print end; done = 1; next }
		skip { next }
		{ print }
		!done && anchor != "" && $0 ~ anchor { print begin; printf "%s", content; print end; done = 1 }
		END { if (!done) { print begin; printf "%s", content; print end } }
	' "$file" > "$tmp"
	if cmp -s "$tmp" "$file"; then rm -f "$tmp"; else mv "$tmp" "$file"; fi
}

new_manifest=$(mktemp)
if [ -d "$SRC/kernel" ]; then
	(cd "$SRC" && find kernel helpers -type f \( -name '*.rs' -o -name '*.c' \) 2>/dev/null | sort) |
	while read -r rel; do
		dst=$KDIR/rust/$rel
		if [ -e "$dst" ] && ! grep -qxF "$rel" "$manifest" 2>/dev/null; then
			die "rust/$rel would overwrite a kernel file"
		fi
		sync_file "$SRC/$rel" "$dst"
		echo "$rel" >> "$new_manifest"
	done
fi
# Drop files wired by an earlier run that the repository no longer has.
if [ -f "$manifest" ]; then
	comm -23 <(sort "$manifest") <(sort "$new_manifest") | while read -r rel; do rm -f "$KDIR/rust/$rel"; done
fi
mv "$new_manifest" "$manifest"

mods=""; headers=""; helpers=""
[ -f "$SRC/lib.rs.in" ] && mods=$(grep -v '^//' "$SRC/lib.rs.in" | sed '/^$/d')$'\n'
[ -f "$SRC/bindings_helper.h.in" ] && headers=$(grep -v '^/\*' "$SRC/bindings_helper.h.in" | sed '/^$/d')$'\n'
for h in "$SRC"/helpers/*.c; do
	[ -e "$h" ] && helpers+="#include \"$(basename "$h")\""$'\n'
done
[ "$mods" = $'\n' ] && mods=""
[ "$headers" = $'\n' ] && headers=""

set_block "$KDIR/rust/kernel/lib.rs" "//" '^pub mod workqueue;' "$mods"
set_block "$KDIR/rust/bindings/bindings_helper.h" "//" '^#include <linux/workqueue.h>' "$headers"
set_block "$KDIR/rust/helpers/helpers.c" "//" '^#include "workqueue.c"' "$helpers"
