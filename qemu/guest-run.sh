#!/usr/bin/env bash
# Runs inside the VM for `make run`: load rsiw, create rsiw0 on a dummy netdev, show it.
set -euo pipefail
cd "$(dirname "$0")/.."
KO=drivers/rsiw/rsiw.ko
NETDEV=rsiw-demo0
ADDR=198.18.0.1/24

step() { printf '\n### %s\n' "$*"; }

modprobe dummy
ip link add "$NETDEV" type dummy
ip addr add "$ADDR" dev "$NETDEV"
ip link set "$NETDEV" up

step "insmod $KO"
insmod "$KO"
step "rdma link add rsiw0 type rsiw netdev $NETDEV"
rdma link add rsiw0 type rsiw netdev "$NETDEV"
step "rdma dev show"
rdma dev show
step "rdma link show"
rdma link show
step "ibv_devices"
ibv_devices
step "ibv_devinfo -d rsiw0"
ibv_devinfo -d rsiw0
step "kernel log"
dmesg | grep -E '\] rsiw: ' || true

state=$(rdma link show rsiw0/1 | grep -o 'state [A-Z]*' | head -n1)
echo
if [ "$state" = "state ACTIVE" ]; then
	echo "rsiw0 is ACTIVE on $NETDEV ($ADDR)"
else
	echo "rsiw0 is not ACTIVE ($state)" >&2
	exit 1
fi
