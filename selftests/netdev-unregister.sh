#!/usr/bin/env bash
# Deleting the netdev under an RDMA device removes that device (and only that
# one), also when a user holds it open through an RDMA CM listener; the names
# can then be used again.
# timeout: 300
# Helpers are called through tap_check and wait_for:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdevs rsiwd0, rsiwd1" eval 'netdev_dummy rsiwd0 02:52:53:49:57:01 198.18.0.1/24 &&
	netdev_dummy rsiwd1 02:52:53:49:57:02 198.18.2.1/24' || tap_bail "cannot create the netdevs"
tap_check "rdma link add rsiw0 on rsiwd0, rsiw1 on rsiwd1" eval 'rdma_link_add rsiw0 rsiwd0 &&
	rdma_link_add rsiw1 rsiwd1' || tap_bail "cannot add the links"

kmsg_mark
tap_check "ip link del rsiwd0" ip link del rsiwd0
tap_wait "rsiw0 is gone" 10 rdma_dev_gone rsiw0 && tap_diag "rsiw0 gone after ${WAITED_MS} ms"
tap_result "$(port_state_is rsiw1 ACTIVE; echo $?)" "rsiw1 is still there and ACTIVE" "$(rdma link show 2>&1)"
check_no_splat "no kernel splat"

# The same names again.
tap_check "re-create rsiwd0 and rsiw0" eval 'netdev_dummy rsiwd0 02:52:53:49:57:01 198.18.0.1/24 &&
	rdma_link_add rsiw0 rsiwd0'
tap_wait "the new rsiw0 is ACTIVE" 1 port_state_is rsiw0 ACTIVE

# The peer of a veth pair: deleting one end deletes both.
tap_check "veth pair rsiwv0/rsiwv1, rsiw2 on rsiwv1" eval 'netdev_veth rsiwv0 rsiwv1 \
	02:52:53:49:57:10 198.18.1.1/24 02:52:53:49:57:11 198.18.1.2/24 && rdma_link_add rsiw2 rsiwv1'
kmsg_mark
tap_check "ip link del rsiwv0 (takes rsiwv1 along)" ip link del rsiwv0
tap_wait "rsiw2 is gone" 10 rdma_dev_gone rsiw2
check_no_splat "no kernel splat"

# A user of the device: an RDMA CM listener bound to the netdev's address is
# told the device goes away (RDMA_CM_EVENT_DEVICE_REMOVAL), closes it, and
# only then can the unregistration finish.
if ! command -v rping >/dev/null; then
	tap_skip "netdev removal under an RDMA CM listener" "rping is not installed"
elif ! ibv_lists rsiw0; then
	tap_skip "netdev removal under an RDMA CM listener" \
		"no userspace provider claims rsiw0 (ibv_devices does not list it)"
else
	rping -s -v -a 198.18.0.1 -p 7174 >"$TEST_TMP/rping" 2>&1 &
	rping_pid=$!
	# Listening: the CM ID shows up in rdma resource show.
	listening() { timeout 10 rdma resource show cm_id 2>/dev/null | grep -q "^link rsiw0/1 .*state LISTEN"; }
	if wait_for 10 listening; then
		kmsg_mark
		# In the background: a netdev whose references are never dropped
		# keeps ip in the kernel for good, where no signal reaches it.
		ip link del rsiwd0 >"$TEST_TMP/del" 2>&1 &
		del_pid=$!
		returned() { ! kill -0 "$del_pid" 2>/dev/null; }
		if tap_wait "ip link del rsiwd0 under a listener returns" 60 returned; then
			wait "$del_pid"
			tap_result $? "ip link del rsiwd0 succeeded" "$(cat "$TEST_TMP/del")"
		fi
		tap_wait "rsiw0 is gone" 30 rdma_dev_gone rsiw0
		gone() { ! kill -0 "$rping_pid" 2>/dev/null; }
		wait_for 30 gone
		tap_result $? "rping saw the removal and exited" "$(cat "$TEST_TMP/rping")"
		check_no_splat "no kernel splat"
	else
		tap_fail "rping listens on rsiw0" "$(cat "$TEST_TMP/rping")" "$(rdma resource show cm_id 2>&1)"
	fi
	kill "$rping_pid" 2>/dev/null
	wait "$rping_pid" 2>/dev/null
fi

tap_check "rdma link delete rsiw1" rdma_link_del rsiw1
tap_done
