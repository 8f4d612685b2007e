#!/usr/bin/env bash
# The style make check enforces: rustfmt over every Rust file of the
# repository, and clippy, with the kernel's lint flags, over rust/ and every
# module crate (the roots the Kbuild files name). Needs a built kernel. Ends
# with "style: N passed, N failed, 0 skipped".
set -uo pipefail
. "$(dirname "$0")/common.sh"
cd "$RSIW_ROOT" || exit

passed=0 failed=0
# verdict STATUS DESC OUTPUT: ok when STATUS is 0 and OUTPUT has no finding.
verdict() {
	if [ "$1" = 0 ] && ! grep -qE '^(warning|error)(\[|:)' <<<"$3"; then
		passed=$((passed + 1))
		echo "ok - $2"
	else
		failed=$((failed + 1))
		echo "not ok - $2"
		head -n 60 <<<"$3" | sed 's/^/# /'
	fi
}

out=$(CHECK=1 scripts/fmt.sh 2>&1)
verdict $? "rustfmt: every .rs file is formatted (make fmt)" "$out"

crates=()
while IFS= read -r kbuild; do
	dir=$(dirname "$kbuild")
	while read -r obj; do
		crates+=("$dir/${obj%.o}.rs")
	done < <(sed -nE 's/^obj-m \+= ([A-Za-z0-9_]+\.o)$/\1/p' "$kbuild")
done < <(git ls-files '*Kbuild')
out=$(CLIPPY=1 scripts/typecheck.sh "${crates[@]}" 2>&1)
verdict $? "clippy: rust/ and ${#crates[@]} module crates (${crates[*]}) have no finding" "$out"

echo "style: $passed passed, $failed failed, 0 skipped"
