#!/usr/bin/env bash
# Install everything rsiw's build and tests need, from the registries only.
# Idempotent: each step is skipped when its result is already present.
set -euo pipefail
. "$(dirname "$0")/common.sh"

apt_packages=(
	linux-source-6.12 clang lld llvm bc bison flex libelf-dev libssl-dev cpio kmod
	dwarves pahole zstd xz-utils python3-venv qemu-system-x86 busybox-static iproute2
	rdma-core ibverbs-utils rdmacm-utils perftest libibverbs-dev librdmacm-dev python3-pyverbs tshark python3-crcmod
	nfs-kernel-server nfs-common rpcbind nvme-cli fio iperf3 ksmbd-tools cifs-utils
	open-iscsi
)

# bindgen-cli compiles for ~3 min: build it while apt downloads and installs.
bindgen_pid=
if ! command -v bindgen >/dev/null 2>&1; then
	progress "installing bindgen-cli from crates.io (~3 min, beside apt)"
	cargo install --locked --quiet bindgen-cli --version "~0.73" &
	bindgen_pid=$!
fi

missing=()
for p in "${apt_packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	progress "installing ${#missing[@]} Debian packages (${missing[*]})"
	sudo_if_needed apt-get update -qq
	echo "wireshark-common wireshark-common/install-setuid boolean false" | sudo_if_needed debconf-set-selections
	DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# The NFS, SMB and iSCSI daemons must not run on the host: the VM starts its own.
	sudo_if_needed systemctl disable --now nfs-server rpcbind rpcbind.socket ksmbd \
		iscsid iscsid.socket open-iscsi >/dev/null 2>&1 || true
fi

if [ -n "$bindgen_pid" ] && ! wait "$bindgen_pid"; then
	die "cargo install bindgen-cli failed"
fi

if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
	progress "adding rustup component rust-src"
	rustup component add rust-src >/dev/null
fi

if [ ! -x "$VENV/bin/vng" ]; then
	progress "installing virtme-ng from PyPI"
	python3 -m venv "$VENV"
	"$VENV/bin/pip" install -q "virtme-ng==$VNG_VERSION"
fi
