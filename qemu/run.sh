#!/usr/bin/env bash
# make run: boot the built kernel, bring up an rsiw device, mount an NFS export
# over RDMA through it and move a file both ways (qemu/guest-run.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=vm.sh
. "$(dirname "$0")/vm.sh"
vm_lock
progress "booting the VM (TCG, ~15 s), creating rsiw0, NFS over RDMA through it (~1-2 min)"
vm_exec -- qemu/guest-run.sh
