# Shared settings for rsiw's build scripts. Sourced, not run.
# shellcheck shell=bash

RSIW_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RSIW_CACHE=${RSIW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rsiw}
VENV=$RSIW_CACHE/venv
VNG_VERSION=1.42
KERNEL_TARBALL=/usr/src/linux-source-6.12.tar.xz
JOBS=${JOBS:-$(nproc)}
export PATH="$HOME/.cargo/bin:$VENV/bin:$PATH"

progress() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# The Debian source package's upstream version, e.g. 6.12.117.
kernel_version() {
	dpkg-query -W -f='${Version}' linux-source-6.12 | sed 's/-.*//'
}

# The kernel config fragments, in the order they apply (a later one's line
# overrides an earlier one's): qemu/rsiw.config, and with KASAN=1 also
# qemu/rsiw-kasan.config.
kernel_fragments() {
	echo "$RSIW_ROOT/qemu/rsiw.config"
	if [ "${KASAN:-0}" = 1 ]; then
		echo "$RSIW_ROOT/qemu/rsiw-kasan.config"
	fi
}

# Where the configured and built tree lives: keyed by kernel version and config.
# RSIW_KDIR overrides it (e.g. to keep working on one tree while another builds).
kernel_dir() {
	local key f frags=()
	if [ -n "${RSIW_KDIR:-}" ]; then echo "$RSIW_KDIR"; return; fi
	while IFS= read -r f; do frags+=("$f"); done < <(kernel_fragments)
	key=$( { kernel_version; echo "vng $VNG_VERSION"; cat "${frags[@]}"; } | sha256sum | cut -c1-12)
	echo "$RSIW_CACHE/linux-$(kernel_version)-$key"
}

# Serializes everything that writes one cached kernel tree (wiring rust/, kernel
# and module builds), so parallel make invocations cannot interleave. Trees of
# other configurations keep their own lock.
lock_kernel_tree() {
	mkdir -p "$RSIW_CACHE"
	exec 9>"$(kernel_dir).lock"
	flock 9
}
