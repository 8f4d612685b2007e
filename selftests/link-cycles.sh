#!/usr/bin/env bash
# rdma link add/delete cycles on one netdev leak nothing: no slab cache grows
# steadily and kmemleak reports nothing.
#
# After WARMUP cycles come three measured rounds of CYCLES cycles (LINK_CYCLES:
# 60; make check-full: 200), with a slab snapshot before and after each
# (reclaimable caches dropped, RCU given time, every cache shrunk so per-CPU
# slabs do not blur the counts; kmemleak's own caches left out). A cache fails the test if it grew by CYCLES/4 objects
# or more in all three rounds: one object leaked per cycle, or even per four
# cycles, does that; caches that only warm up do not grow again in the second
# round (measured with the C siw: kmalloc-32 +190 in the first 200 cycles
# after a 10-cycle warm-up, then nothing), and the rest of the VM moves a
# cache by a few dozen objects in a round, now and then in two rounds running
# (kmalloc-16 +63 then +101 once, with kmemleak silent), not in three.
# vmap_area is not counted (see slab_snapshot in lib.sh): vmalloc frees its
# areas in batches, and it once grew by about 52 objects in three rounds
# running (each cycle kvmallocs a 512 KiB STag table).
#
# The cycles go through RDMA netlink from one process (rdma_link_cycles):
# a loop over the rdma tool forks twice per cycle, and process creation alone
# moves slab caches by hundreds of objects. link-basic covers the rdma tool.
# timeout: 900
# tier: full (in make check, link-basic, port-state and module-reload add and
# delete devices under the runner's kmemleak scan; this judges slab growth)
# Helpers are called through tap_check and wait_for:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma python3

# make check-full: 200.
CYCLES=${LINK_CYCLES:-60}
WARMUP=10
MIN=$((CYCLES / 4))
dev=rsiw0 nd=rsiwd0

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev $nd" netdev_dummy $nd 02:52:53:49:57:01 198.18.0.1/24 ||
	tap_bail "cannot create $nd"

tap_check "$WARMUP warm-up cycles" rdma_link_cycles $dev $nd $WARMUP || tap_bail "add/delete does not work"
slab_snapshot "$TEST_TMP/slab.0"
kmemleak_report "no leak before the measured rounds"

for round in 1 2 3; do
	start=$(date +%s)
	tap_check "round $round: $CYCLES add/delete cycles" rdma_link_cycles $dev $nd "$CYCLES" ||
		tap_bail "add/delete failed"
	tap_diag "round $round took $(($(date +%s) - start)) s"
	slab_snapshot "$TEST_TMP/slab.$round"
	tap_diag "round $round, caches grown by 10 objects or more:" \
		"$(slab_growth "$TEST_TMP/slab.$((round - 1))" "$TEST_TMP/slab.$round" 10)"
done

# A cache fails when it grew in all three rounds: rounds 1-2 and rounds 2-3.
grown=$(LC_ALL=C join \
	<(slab_steady_growth "$TEST_TMP/slab.0" "$TEST_TMP/slab.1" "$TEST_TMP/slab.2" $MIN | LC_ALL=C sort) \
	<(slab_steady_growth "$TEST_TMP/slab.1" "$TEST_TMP/slab.2" "$TEST_TMP/slab.3" $MIN | LC_ALL=C sort) |
	awk '{ printf "%s %s, %s, %s objects\n", $1, $2, $4, $8 }')
tap_result "$([ -z "$grown" ]; echo $?)" "no slab cache grew by $MIN objects or more in all three rounds" "$grown"

tap_result "$(rdma_dev_gone $dev; echo $?)" "no $dev left" "$(rdma dev show 2>&1)"

tap_done
