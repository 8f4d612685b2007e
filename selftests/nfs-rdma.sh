#!/usr/bin/env bash
# NFS over RDMA through the device under test, server and client in this VM:
# knfsd listens for RPC/RDMA on 198.18.0.1:20049 (a dummy netdev with the RDMA
# device on it) and the client mounts it with proto=rdma, so every RPC goes
# through the device twice (client QP to server QP). For NFSv3, 4.0, 4.1 and
# 4.2: the mount uses RDMA (mountstats, QPs on the device, rsiw's connection
# counter), fio with crc32c verification at 4 KiB and 1 MiB (direct
# I/O: every I/O is one RPC of that size). On one version, 100 files are
# created, renamed and removed (NFS_CHURN_FILES; make check-full: 10000, 11
# minutes under TCG); on one, a 16 MiB file (NFS_BIG_MB) is written from a
# stream and its checksum compared with the server's copy and with a read back
# over RDMA, and a sparse file gets 4 MiB written across its 2 GiB and its
# 4 GiB offsets (32-bit offset wrap), each read back with direct I/O and
# compared on both sides. NFSv4.2 over IPv6 (proto=rdma6), fio verified. Then
# 2 mount/umount cycles with I/O (5 s each under TCG; NFS_CYCLES; make
# check-full runs 50, and judges slab growth a cycle too: see
# slab_rate_judged): no QP, MR or CQ left on the device, no kmemleak report.
# A streamed copy moves about 3.5 MB/s under TCG: NFS_BIG_MB=2048 (a 2 GiB
# copy, 4 GiB of VM memory for the server's tmpfs) takes 15 minutes, too long
# for make check; make check-full runs it.
# timeout: 2700
# Functions run through tap_check look unreachable to shellcheck:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma fio mount.nfs rpc.nfsd rpc.mountd rpcbind exportfs python3
# shellcheck source=ulp-setup.sh
. "$(dirname "$0")/ulp-setup.sh"

dev=rsiw0 nd=rsiwd0 mac=02:52:53:49:57:21 ip=198.18.0.1
# The defaults are make check's sizes; make check-full (scripts/check.sh) runs
# all four versions (4.0 has no sessions, 4.1 is 4.2's session code) and
# bigger sizes.
NFS_VERSIONS=${NFS_VERSIONS:-3 4.2}
NFS_CHURN_VERSION=${NFS_CHURN_VERSION:-4.2}
NFS_CHURN_FILES=${NFS_CHURN_FILES:-100}
NFS_BIG_VERSION=${NFS_BIG_VERSION:-3}
NFS_BIG_MB=${NFS_BIG_MB:-16}
NFS_CYCLES=${NFS_CYCLES:-2}
# fio sizes per block size: a few seconds each under TCG.
NFS_FIO=${NFS_FIO:-4k:2m 1m:16m}

export_dir=$TEST_TMP/export
mnt=$TEST_TMP/mnt

# elapsed START: seconds since START (a date +%s.%N), two decimals.
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
# mbps BYTES SECONDS
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", (s > 0 ? n / s / 1e6 : 0) }'; }

# check_rdma_mount VERS: the mount on $mnt is RPC/RDMA and the device carries
# it: client and server QPs on $dev, and (rsiw) new connections since est0.
check_rdma_mount() {
	local vers=$1 xprt qps ids est
	xprt=$(nfs_mount_xprt "$mnt")
	tap_result "$([ "$xprt" = rdma ]; echo $?)" "NFSv$vers: mountstats shows xprt rdma" \
		"xprt: '${xprt:-none}'" "$(grep -A3 "$mnt" /proc/self/mountstats)"
	qps=$(timeout 20 rdma res show qp link "$dev/1" 2>&1)
	tap_result "$([ "$(grep -c " state RTS " <<<"$qps")" -ge 2 ]; echo $?)" \
		"NFSv$vers: rdma res show qp lists client and server QPs in RTS on $dev" "$qps"
	if rsiw_is_reference; then
		tap_skip "NFSv$vers: rsiw's established counter grew" "rsiw's own counters; not the C siw"
		tap_skip "NFSv$vers: rdma res show qp -dd shows what each connection negotiated" \
			"rsiw's own details; not the C siw"
		tap_skip "NFSv$vers: rdma res show cm_id -dd shows the same for the connections' CM ids" \
			"rsiw's own details; not the C siw"
		return
	fi
	est=$(rdma statistic show link "$dev/1" 2>&1)
	[[ $est =~ \ cm_established\ ([0-9]+) ]] && est=${BASH_REMATCH[1]}
	tap_result "$([ "${est:-0}" -gt "$est0" ]; echo $?)" \
		"NFSv$vers: rsiw's established counter grew (rdma statistic)" "cm_established $est0 -> ${est:-?}"
	# The client's QP (initiator) and the server's (responder) on port $NFS_RDMA_PORT.
	qps=$(timeout 20 rdma res show qp link "$dev/1" -dd 2>&1)
	# iproute2 prints driver details with a drv_ prefix.
	local re=" drv_mpa_rev 2 drv_crc 1 drv_markers_tx 0 drv_markers_rx 0 drv_rtr none"
	re+=" drv_large_fpdu 1 drv_ird [0-9]+ drv_ord [0-9]+ drv_mss [0-9]+ drv_mulpdu [0-9]+"
	tap_result "$(grep -qE "drv_role initiator$re drv_laddr $ip:[0-9]+ drv_raddr $ip:$NFS_RDMA_PORT" <<<"$qps" &&
		grep -qE "drv_role responder$re drv_laddr $ip:$NFS_RDMA_PORT drv_raddr $ip:[0-9]+" <<<"$qps"
		echo $?)" \
		"NFSv$vers: rdma res show qp -dd shows what each connection negotiated" "$qps"
	# The same details on the connections' CM ids (fill_res_cm_id_entry).
	ids=$(timeout 20 rdma res show cm_id link "$dev/1" -dd 2>&1)
	tap_result "$(grep -qE " state CONNECT .*drv_role initiator$re drv_laddr $ip:[0-9]+ drv_raddr $ip:$NFS_RDMA_PORT" <<<"$ids" &&
		grep -qE " state CONNECT .*drv_role responder$re drv_laddr $ip:$NFS_RDMA_PORT drv_raddr $ip:[0-9]+" <<<"$ids"
		echo $?)" \
		"NFSv$vers: rdma res show cm_id -dd shows the same for the connections' CM ids" "$ids"
}

# run_fio VERS BS SIZE: write SIZE in BS blocks with direct I/O, then read it
# back checking every block's crc32c.
run_fio() {
	fio_write_verify "NFSv$1: fio $2 x $3 write, read back, crc32c verified" "$mnt/fio-$2" "$2" "$3"
}

# churn VERS N: create N files (with content), rename, list, remove them (8
# threads), and check the server's view of the export in between.
churn() {
	fs_churn "NFSv$1: create, rename, list, unlink $2 files (server sees the same)" \
		"$mnt/churn" "$2" "$export_dir/churn"
}

# big_copy VERS MB: stream MB MiB (a multiple of 16) and a little of data into
# a file over NFS, checksumming the stream; compare the server's checksum of
# its copy and the client's of a read back over RDMA after dropping its cache.
big_copy() {
	local vers=$1 mb=$2 blk=$TEST_TMP/block sum_src sum_srv sum_cli t0 wsec rsec bytes want need have
	need=$(((mb + 1536) * 1024))
	have=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
	if ((have < need)); then
		tap_fail "NFSv$vers: $mb MiB file copy" "the VM has $((have / 1024)) MiB of memory, the server's tmpfs copy needs about $((need / 1024)) MiB (VM_MEMORY)"
		return
	fi
	if ((mb < 16 || mb % 16)); then
		tap_fail "NFSv$vers: $mb MiB file copy" "NFS_BIG_MB=$mb: a multiple of 16, at least 16"
		return
	fi
	# 16 MiB of random data, repeated, each copy after a distinct 16-byte
	# header, so that no two copies sit at the same page offset (a misplaced
	# page changes the checksum). Cheaper under TCG than MB MiB of urandom.
	head -c 16M /dev/urandom >"$blk"
	want=$((mb * (16 * 1048576 + 16) / 16))
	t0=$(date +%s.%N)
	sum_src=$(for ((i = 0; i < mb / 16; i++)); do printf 'rsiw%011d\n' "$i"; cat "$blk"; done |
		tee "$mnt/big" | md5sum | cut -d' ' -f1)
	# close() flushes; sync makes the timing include the last COMMIT.
	sync "$mnt/big"
	wsec=$(elapsed "$t0")
	rm -f "$blk"
	bytes=$(stat -c %s "$mnt/big")
	tap_result "$([ "$bytes" = "$want" ]; echo $?)" "NFSv$vers: wrote a file of $bytes bytes$( ((bytes > 2147483648)) && echo ", past 2 GiB")" \
		"want $want bytes" "$(ls -l "$mnt/big" "$export_dir/big" 2>&1)"
	sum_srv=$(md5sum "$export_dir/big" | cut -d' ' -f1)
	tap_result "$([ "$sum_srv" = "$sum_src" ]; echo $?)" "NFSv$vers: the server's copy has the written data (md5)" \
		"written $sum_src, server $sum_srv"
	# Read back from the server, not the client's page cache.
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(date +%s.%N)
	sum_cli=$(md5sum "$mnt/big" | cut -d' ' -f1)
	rsec=$(elapsed "$t0")
	tap_result "$([ "$sum_cli" = "$sum_src" ]; echo $?)" "NFSv$vers: read back over RDMA, same data (md5)" \
		"written $sum_src, read $sum_cli"
	tap_diag "$bytes bytes: write $wsec s ($(mbps "$bytes" "$wsec") MB/s), read $rsec s ($(mbps "$bytes" "$rsec") MB/s)"
	rm -f "$mnt/big"
}

# straddle VERS: 4 MiB of random data written into a sparse file across its
# 2 GiB and its 4 GiB offsets (2 MiB on each side of both), read back over
# RDMA with direct I/O; the server's file must have the size and the data.
straddle() {
	local vers=$1 blk=$TEST_TMP/straddle f=$mnt/sparse at sum_src sum_cli sum_srv size
	head -c 4M /dev/urandom >"$blk"
	sum_src=$(md5sum <"$blk" | cut -d' ' -f1)
	for at in 2046 4094; do
		if ! dd if="$blk" of="$f" bs=1M seek="$at" conv=notrunc,fsync oflag=direct status=none; then
			tap_fail "NFSv$vers: 4 MiB written across offset $(((at + 2) / 1024)) GiB of a sparse file" "dd failed"
			continue
		fi
		sum_cli=$(dd if="$f" bs=1M skip="$at" count=4 iflag=direct status=none | md5sum | cut -d' ' -f1)
		sum_srv=$(dd if="$export_dir/sparse" bs=1M skip="$at" count=4 status=none | md5sum | cut -d' ' -f1)
		tap_result "$([ "$sum_cli" = "$sum_src" ] && [ "$sum_srv" = "$sum_src" ]; echo $?)" \
			"NFSv$vers: 4 MiB across offset $(((at + 2) / 1024)) GiB of a sparse file, read back over RDMA and on the server" \
			"written $sum_src, read back $sum_cli, server $sum_srv"
	done
	size=$(stat -c %s "$export_dir/sparse")
	tap_result "$([ "$size" = $(((4094 + 4) * 1048576)) ]; echo $?)" \
		"NFSv$vers: the server's sparse file is 4 GiB and 2 MiB long" "size $size"
	rm -f "$f" "$blk"
}

# cycle VERS I: mount, write and read back 64 KiB, unmount.
cycle() {
	local vers=$1 i=$2
	nfs_mount "$ip" "$export_dir" "$vers" "$mnt" || { echo "cycle $i: mount NFSv$vers failed"; return 1; }
	if ! head -c 65536 /dev/urandom >"$TEST_TMP/cycle" || ! cp "$TEST_TMP/cycle" "$mnt/cycle-$i"; then
		echo "cycle $i: write failed"
		nfs_umount "$mnt"
		return 1
	fi
	echo 3 >/proc/sys/vm/drop_caches
	if ! cmp -s "$TEST_TMP/cycle" "$mnt/cycle-$i" || ! rm "$mnt/cycle-$i"; then
		echo "cycle $i: NFSv$vers read back differs"
		nfs_umount "$mnt"
		return 1
	fi
	nfs_umount "$mnt" || { echo "cycle $i: umount NFSv$vers failed"; return 1; }
}

# cycles FROM TO: mount/umount cycles FROM..TO, NFS versions in turn.
cycles() {
	local i vers
	read -ra vers <<<"$NFS_VERSIONS"
	for ((i = $1; i <= $2; i++)); do
		cycle "${vers[$((i % ${#vers[@]}))]}" "$i" || return
	done
}

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "dummy netdev $nd $ip" netdev_dummy "$nd" "$mac" "$ip/24" || tap_bail "cannot create $nd"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $nd" rdma_link_add "$dev" "$nd" ||
	tap_bail "cannot add the link"
tap_wait "$dev ACTIVE" 5 port_state_is "$dev" ACTIVE
kmsg_mark
tap_check "tmpfs to export on $export_dir" nfs_export_tmpfs "$export_dir" 3G || tap_bail "no tmpfs"
t0=$(date +%s.%N)
tap_check "knfsd on rdma port $NFS_RDMA_PORT" nfs_server_start "$export_dir" ||
	tap_bail "cannot start the NFS server"
tap_diag "server up in $(elapsed "$t0") s: $(tr '\n' ' ' </proc/fs/nfsd/portlist), versions $(cat /proc/fs/nfsd/versions)"

for vers in $NFS_VERSIONS; do
	est0=$(rdma statistic show link "$dev/1" 2>&1)
	[[ $est0 =~ \ cm_established\ ([0-9]+) ]] && est0=${BASH_REMATCH[1]} || est0=0
	t0=$(date +%s.%N)
	if ! tap_check "NFSv$vers: mount -o proto=rdma $ip" nfs_mount "$ip" "$export_dir" "$vers" "$mnt"; then
		continue
	fi
	tap_diag "mounted in $(elapsed "$t0") s: $(awk -v d="$mnt" '$2 == d { print $4 }' /proc/mounts)"
	check_rdma_mount "$vers"
	for f in $NFS_FIO; do
		run_fio "$vers" "${f%%:*}" "${f#*:}"
	done
	[ "$vers" = "$NFS_CHURN_VERSION" ] && churn "$vers" "$NFS_CHURN_FILES"
	if [ "$vers" = "$NFS_BIG_VERSION" ]; then
		big_copy "$vers" "$NFS_BIG_MB"
		straddle "$vers"
	fi
	tap_check "NFSv$vers: umount" nfs_umount "$mnt"
done

# IPv6: NFSv4.2 over RPC/RDMA on the device's IPv6 address (proto=rdma6; knfsd
# listens on IPv6 as well), so that rsiw's active and passive sides both run
# on IPv6 sockets. rdma res -dd must show the connection's IPv6 addresses.
ipv6_mount() {
	local qps vers=4.2 t0
	tap_check "IPv6: address $ip6 on $nd" ip -6 addr add "$ip6/64" dev "$nd" nodad || return
	t0=$(date +%s.%N)
	tap_check "IPv6: NFSv$vers mount -o proto=rdma6 [$ip6]" \
		nfs_mount "[$ip6]" "$export_dir" "$vers" "$mnt" || return
	tap_diag "mounted in $(elapsed "$t0") s: $(awk -v d="$mnt" '$2 == d { print $4 }' /proc/mounts)"
	tap_match "IPv6: mountstats shows xprt rdma" "^rdma$" "$(nfs_mount_xprt "$mnt")"
	qps=$(timeout 20 rdma res show qp link "$dev/1" -dd 2>&1)
	if rsiw_is_reference; then
		tap_result "$([ "$(grep -c " state RTS " <<<"$qps")" -ge 2 ]; echo $?)" \
			"IPv6: client and server QPs in RTS on $dev" "$qps"
	else
		tap_result "$(grep -qE "drv_role initiator .* drv_raddr \[$ip6\]:$NFS_RDMA_PORT" <<<"$qps" &&
			grep -qE "drv_role responder .* drv_laddr \[$ip6\]:$NFS_RDMA_PORT" <<<"$qps"
			echo $?)" "IPv6: rdma res show qp -dd shows both ends of the connection on $ip6" "$qps"
	fi
	run_fio "$vers over IPv6" 4k 1m
	run_fio "$vers over IPv6" 1m 16m
	tap_check "IPv6: umount" nfs_umount "$mnt"
}
ip6=fd00:5253:4957::1
ipv6_mount

# Leaks: the device's resources after the cycles must be as before them, and
# kmemleak must stay quiet. With enough cycles (make check-full), also a
# warm-up cycle, then two halves with a slab snapshot after each; a leak grows
# its cache in both halves. Each mount makes two QPs, four CQs and about 200
# MRs on the device. NFS itself keeps a few objects per mount (with the C siw
# as with rsiw: kmalloc-16 about 4 a cycle in both halves, kernfs_node_cache
# about 1), so a cache must grow by 6 a cycle in both halves to fail; slower
# growth is shown. Not counted: vmap_area (freed lazily, in batches) and
# nfsd_cacherep (knfsd's reply cache fills up to its limit).
if ((NFS_CYCLES > 0)); then
	res0=$(ulp_res_summary "$dev")
	half=$((NFS_CYCLES / 2))
	t0=$(date +%s.%N)
	if slab_rate_judged "$half"; then
		tap_check "mount/umount warm-up cycle" cycles 0 0
		kmemleak_report "no leak before the measured cycles"
		slab_snapshot "$TEST_TMP/slab0"
		tap_check "mount, 64 KiB written and read back, umount: cycles 1-$half" cycles 1 "$half"
		slab_snapshot "$TEST_TMP/slab1"
		tap_check "mount, 64 KiB written and read back, umount: cycles $((half + 1))-$NFS_CYCLES" \
			cycles $((half + 1)) "$NFS_CYCLES"
		slab_snapshot "$TEST_TMP/slab2"
		tap_diag "$NFS_CYCLES cycles in $(elapsed "$t0") s"
		grow=$(slab_steady_growth "$TEST_TMP/slab0" "$TEST_TMP/slab1" "$TEST_TMP/slab2" $((half * 6)) |
			grep -vE '^(vmap_area|nfsd_cacherep) ')
		tap_result "$([ -z "$grow" ]; echo $?)" "no slab cache grows by 6 objects a cycle in both halves" "$grow"
		tap_diag "$(slab_steady_growth "$TEST_TMP/slab0" "$TEST_TMP/slab1" "$TEST_TMP/slab2" "$half" |
			sed 's/^/growing by 1 a cycle or more (not failed): /')"
		check_kmemleak "kmemleak: nothing leaked by the cycles"
	else
		# Few cycles: the runner's kmemleak scan after the test sees their leaks.
		tap_check "mount, 64 KiB written and read back, umount: cycles 1-$NFS_CYCLES" cycles 1 "$NFS_CYCLES"
		tap_diag "$NFS_CYCLES cycles in $(elapsed "$t0") s"
	fi
	res1=$(ulp_res_summary "$dev")
	tap_result "$([ "$res1" = "$res0" ]; echo $?)" "$dev resources after the cycles are as before them" \
		"before: $res0" "after:  $res1" "$(timeout 20 rdma res show qp link "$dev/1" 2>&1)"
fi

tap_check "stop the NFS server" nfs_server_stop
res=$(ulp_res_summary "$dev")
tap_match "no PD, CQ, QP, MR or CM id left on $dev" "^pd 0 cq 0 qp 0 cm_id 0 mr 0 " "$res"
tap_check "undo the setup: exports, tmpfs, NFS modules" ulp_cleanup
check_no_splat "no kernel splat"
tap_done
