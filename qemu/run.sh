#!/usr/bin/env bash
# make run: boot the built kernel, bring up an rsiw device and show it.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
vm_lock
progress "booting the VM (TCG, ~15 s) and creating rsiw0"
vm_exec -- qemu/guest-run.sh
