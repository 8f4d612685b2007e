#!/usr/bin/env bash
# timeout: 1200
# tier: full (in make check, netns runs rsiw against the C siw over a veth
# pair in one VM, interop-siw the protocol matrix across two VMs, and the
# one-VM ULP tests each kernel ULP on rsiw)
# The kernel ULPs across two VMs, rsiw against the kernel's C siw, both ways
# (ULP_PHASES; by default nfs1 and nvme2, in make check-full all eight):
# VM a runs rsiw (rsiw0, 198.18.0.1), VM b the C siw (siw0, 198.18.0.2).
#   nfs1: NFSv4.2 over RPC/RDMA, rsiw client (a) -> siw server (b)
#   nfs2: the same, siw client (b) -> rsiw server (a)
#   nvme1: NVMe-oF RDMA, nvme-rdma host on rsiw (a) -> nvmet-rdma on siw (b)
#   nvme2: the same, host on siw (b) -> target on rsiw (a)
#   smb1: SMB Direct, cifs client on rsiw (a) -> ksmbd on siw (b)
#   smb2: the same, client on siw (b) -> server on rsiw (a)
#   iser1: iSER, open-iscsi initiator on rsiw (a) -> LIO isert on siw (b)
#   iser2: the same, initiator on siw (b) -> target on rsiw (a)
# NFS: mount -o vers=4.2,proto=rdma (port 20049); fio with crc32c verify at
# 4 KiB and 1 MiB (direct I/O); a 4 MiB stream copied in, its sha256
# compared with the server's copy and with a read back; 40 files created,
# renamed (the server checks its copy of the directory) and removed; umount.
# NVMe-oF: a subsystem with a memory-backed null_blk and a brd namespace;
# connect, fio with crc32c verify at 4 KiB and 1 MiB on both namespaces, 2
# connect/disconnect cycles each reading back a pattern written before them,
# disconnect.
# SMB Direct: mount -t cifs -o rdma,vers=3.1.1; fio with crc32c verify at 4
# KiB and 1 MiB; a 4 MiB stream copied in and compared as for NFS; umount.
# iSER: a 64 MiB ramdisk LUN (LIO configfs; the portal's TCP listener in another
# namespace, see iser_portal); SendTargets discovery over iSER, login, fio
# with crc32c verify at 4 KiB and 1 MiB, 2 login/logout cycles each reading
# back a pattern written before them (ISER_CYCLES).
# The sizes are small because two TCG guests of one vCPU each move about
# 1 MB/s between them; the full-size workloads (GiB copies, 10000 files, 50
# cycles) run in one VM (nfs-rdma.sh, nvmeof-rdma.sh, iser.sh). Per phase both
# VMs check their QPs were in RTS on their own device while connected, that no
# QP, MR or CM id is left afterwards, and no kernel splat; rsiw's counters on
# VM a must have grown by exactly the number of RDMA connections the client
# side made, every one with CRC (siw asks for none, rsiw asks for it by
# default) and revision 2.
# Helpers run through tap_check and the EXIT trap:
# shellcheck disable=SC2317
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
case ${PAIR_ROLE:-} in
a) RSIW_MODULE=rsiw RSIW_LINK_TYPE=rsiw dev=rsiw0 ;;
b) RSIW_MODULE=siw RSIW_LINK_TYPE=siw dev=siw0 ;;
esac
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=../ulp-setup.sh
. "$SELFTESTS/ulp-setup.sh"
# A pair_wait must outlast the peer's longest step (the copy and its
# checksums); the test's timeout bounds the whole anyway.
PAIR_WAIT=300
# shellcheck source=pair.sh
. "$SELFTESTS/pair/pair.sh"
require rdma timeout fio nvme mount.nfs rpc.nfsd rpc.mountd rpcbind exportfs python3 sha256sum \
	mount.cifs ksmbd.mountd ksmbd.adduser ksmbd.control iscsiadm iscsid nsenter

# Knobs for shorter runs while developing; the defaults are the test.
# fio jobs, BS:SIZE on NFS, RW:BS:SIZE on each NVMe namespace.
# Small: across the two TCG VMs 4 KiB direct I/O runs at 200-700 KiB/s and
# streams at 0.5-2 MB/s (nfs1 took 490 s with 8 times these sizes). The C
# siw is no faster there: siw to siw, 4 KiB writes at queue depth 1 ran at 17
# IOPS and 1 MiB reads at 0.6 MB/s, with iperf3 at 5 MB/s.
NFS_FIO=${NFS_FIO:-4k:512k 1m:2m}
NFS_COPY_MB=${NFS_COPY_MB:-4}
NFS_CHURN_FILES=${NFS_CHURN_FILES:-40}
NVME_FIO=${NVME_FIO:-randwrite:4k:512k write:1m:2m}
NVME_CYCLES=${NVME_CYCLES:-2}
NVME_NS_MB=64
SMB_FIO=${SMB_FIO:-4k:512k 1m:2m}
ISER_FIO=${ISER_FIO:-randwrite:4k:512k write:1m:2m}
ISER_CYCLES=${ISER_CYCLES:-2}
ISER_LUN_MB=64
# The phases run (ULP_PHASES; make check-full runs all eight). By default one
# of each of the first two ULPs, with rsiw in each role once: the rsiw NFS
# client and the rsiw NVMe target.
ULP_PHASES=${ULP_PHASES:-nfs1 nvme2}
nqn_base=nqn.2014-08.org.rsiw:pair-ulp-siw
iqn_base=iqn.2003-01.org.rsiw:pair-ulp-siw
smb_share=rsiw

declare -A MOD=([a]=rsiw [b]=siw)
SERVING=0

# On exit (normal or not): a server stays up until the client has cleaned up
# (its umount or disconnect needs the server); a client cleans up, then lets
# the peer go on.
on_exit() {
	if ((SERVING)); then
		pair_post exit "after $_tap_n checks, $_tap_failed failed"
		pair_wait exit 150 >/dev/null 2>&1
	fi
	ulp_cleanup
	pair_exit
	cleanup
}
trap on_exit EXIT

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", (s > 0 ? n / s / 1e6 : 0) }'; }

# post STEP [TEXT], peer_wait STEP: pair_post and pair_wait of the phase $PH's
# STEP; a peer gone away ends the test.
post() { pair_post "$PH.$1" "${2:-}" || tap_bail "cannot post $PH.$1 to the peer"; }
peer_wait() { pair_wait "$PH.$1" || tap_bail "$PAIR_MSG"; }

# peer_up WHAT END: wait for the peer's ready; when it is not up, a failed
# check "WHAT is up", END posted (the last step the peer waits for), and
# status 1.
peer_up() {
	peer_wait ready
	[ "$PAIR_MSG" = ok ] && return 0
	tap_fail "$L: the $1 is up" "$PAIR_MSG"
	post "$2"
	return 1
}

# ---------------------------------------------------------------- RDMA resources

# res_of SUMMARY KIND: the count of KIND in a ulp_res_summary line.
res_of() { awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' <<<"$1"; }

# res_zero KIND...: whether $dev has none of each KIND; RES is its summary.
res_zero() {
	local k
	RES=$(ulp_res_summary "$dev")
	[ -n "$RES" ] || return 1
	for k; do
		[ "$(res_of "$RES" "$k")" = 0 ] || return 1
	done
}

# check_res_zero DESC SECONDS KIND...: a check that $dev has no KIND within SECONDS.
check_res_zero() {
	local desc=$1 secs=$2
	shift 2
	if wait_for "$secs" res_zero "$@"; then
		tap_ok "$desc"
		tap_diag "$dev: $RES"
	else
		tap_fail "$desc" "$dev after ${secs}s: $RES" "$(timeout 20 rdma res show qp link "$dev/1" 2>&1)" \
			"$(timeout 20 rdma res show cm_id link "$dev/1" 2>&1)"
	fi
}

# check_rts DESC MIN: a check that $dev has at least MIN QPs in RTS.
check_rts() {
	local qps n
	qps=$(timeout 20 rdma res show qp link "$dev/1" 2>&1)
	n=$(grep -c " state RTS " <<<"$qps")
	tap_result "$((n >= $2 ? 0 : 1))" "$1: $n QP(s) in RTS on $dev" "want at least $2" "$qps"
}

# ---------------------------------------------------------------- rsiw counters

declare -A M0
mpa_save() {
	local k
	[ "$PAIR_ROLE" = a ] || return 0
	for k in established crc markers rev1; do
		M0[$k]=$(ulp_rsiw_mpa "$k")
	done
}

# check_mpa DESC CONNECTIONS: on VM a, since mpa_save rsiw established
# CONNECTIONS connections (at least one if CONNECTIONS is empty), all with CRC,
# at revision 2, without Markers.
check_mpa() {
	local desc=$1 want=$2 est crc rev1 markers ok
	[ "$PAIR_ROLE" = a ] || return 0
	est=$(($(ulp_rsiw_mpa established) - M0[established]))
	crc=$(($(ulp_rsiw_mpa crc) - M0[crc]))
	rev1=$(($(ulp_rsiw_mpa rev1) - M0[rev1]))
	markers=$(($(ulp_rsiw_mpa markers) - M0[markers]))
	ok=$((est > 0 && crc == est && rev1 == 0 && markers == 0))
	[ -n "$want" ] && ok=$((ok && est == want))
	tap_result "$((!ok))" \
		"$desc: rsiw established ${want:-some} connection(s), all with CRC, revision 2, no Markers" \
		"rsiw counters since the phase began: established +$est, crc +$crc, rev1 +$rev1, markers +$markers" \
		"connections the client side made: ${want:-unknown}" "$(cat /sys/kernel/debug/rsiw/mpa 2>&1)"
}

# Driver and ULP log lines of the phase (since kmsg_mark), as diagnostics.
show_log() {
	local lines
	lines=$(kmsg_since_mark | grep -E "^(rsiw|siw|$dev)[: ]|iw_cm|rdma_cm|rpcrdma|svcrdma|nvme|nvmet|ksmbd|CIFS|smbd|iser|isert" | head -n 20)
	[ -n "$lines" ] && tap_diag "kernel log:" "$lines"
	return 0
}

# ---------------------------------------------------------------- NFS

# mount_fio BS SIZE: on the NFS or SMB mount $mnt, write SIZE in BS blocks
# (direct I/O, queue depth 8), read back checking every block's crc32c.
mount_fio() {
	fio_write_verify "$L: fio $1 x $2 write, read back, crc32c verified" "$mnt/fio-$1" "$1" "$2" --iodepth=8
}

# stream_copy_out: stream NFS_COPY_MB MiB into $mnt/big (an NFS or SMB mount),
# checksumming the stream; sets SUM_SRC and BYTES. 1 MiB of random data,
# repeated, each copy after a distinct 16-byte header (no two copies at the
# same page offset).
stream_copy_out() {
	local blk=$TEST_TMP/block i t0 wsec chunks=$NFS_COPY_MB want
	head -c 1M /dev/urandom >"$blk"
	t0=$(date +%s.%N)
	SUM_SRC=$(for ((i = 0; i < chunks; i++)); do printf 'rsiw%011d\n' "$i"; cat "$blk"; done |
		tee "$mnt/big" | sha256sum | cut -d' ' -f1)
	sync "$mnt/big"
	wsec=$(elapsed "$t0")
	rm -f "$blk"
	BYTES=$(stat -c %s "$mnt/big")
	want=$((chunks * (1048576 + 16)))
	tap_result "$([ "$BYTES" = "$want" ]; echo $?)" "$L: streamed a file of $BYTES bytes in" "want $want bytes"
	tap_diag "write and sha256 in $wsec s ($(mbps "$BYTES" "$wsec") MB/s)"
}

# stream_read_back: the client's checksum of $mnt/big read from the server
# (cache dropped) must be SUM_SRC.
stream_read_back() {
	local t0 sum rsec
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(date +%s.%N)
	sum=$(sha256sum "$mnt/big" | cut -d' ' -f1)
	rsec=$(elapsed "$t0")
	tap_result "$([ -n "$sum" ] && [ "$sum" = "$SUM_SRC" ]; echo $?)" \
		"$L: read back over RDMA, same data (sha256)" "written $SUM_SRC, read ${sum:-none}"
	tap_diag "read and sha256 in $rsec s ($(mbps "$BYTES" "$rsec") MB/s)"
	rm -f "$mnt/big"
}

# client_stream_copy: the client's half of the stream check: stream_copy_out,
# posted to the server as copied, read back while the server checksums its
# copy, and the server's size and sha256 (copied.checked) must match.
client_stream_copy() {
	stream_copy_out
	post copied "$BYTES $SUM_SRC"
	stream_read_back
	peer_wait copied.checked
	tap_result "$([ "$PAIR_MSG" = "$BYTES $SUM_SRC" ]; echo $?)" \
		"$L: the server's copy has the same size and sha256 as the stream" \
		"client: $BYTES $SUM_SRC" "server: $PAIR_MSG"
}

# server_check_copy DIR: on the client's copied, DIR/big (the server's copy
# of what stream_copy_out wrote) must have the size and sha256 the client
# posted; posts copied.checked with the server's.
server_check_copy() {
	local t0 sum
	peer_wait copied
	t0=$(date +%s.%N)
	sum="$(stat -c %s "$1/big") $(sha256sum "$1/big" | cut -d' ' -f1)"
	tap_result "$([ "$sum" = "$PAIR_MSG" ]; echo $?)" \
		"$L: the server's copy has the size and sha256 the client streamed" \
		"client: $PAIR_MSG" "server: $sum"
	tap_diag "server sha256 in $(elapsed "$t0") s"
	post copied.checked "$sum"
}

# nfs_churn_client N: create N files (every tenth with its number as content:
# each write costs an RPC or two more), rename them all, check the listing and
# the contents (python3: no process per file).
nfs_churn_client() {
	mkdir -p "$mnt/churn" || return
	timeout 300 python3 - "$mnt/churn" "$1" <<'EOF'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
t = [time.monotonic()]
for i in range(n):
    fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    if i % 10 == 0:
        os.write(fd, b"%d\n" % i)
    os.close(fd)
t.append(time.monotonic())
for i in range(n):
    os.rename(f"{d}/f{i}", f"{d}/renamed-{i}")
t.append(time.monotonic())
names = set(os.listdir(d))
want = {f"renamed-{i}" for i in range(n)}
if names != want:
    sys.exit(f"client lists {len(names)} entries, {len(names ^ want)} differ from the expected")
for i in range(0, n, 10):
    with open(f"{d}/renamed-{i}", "rb") as f:
        if f.read() != b"%d\n" % i:
            sys.exit(f"renamed-{i}: wrong content")
print("create %.1f s, rename %.1f s" % (t[1] - t[0], t[2] - t[1]))
EOF
}

# nfs_unlink_client N: remove the N renamed files and the directory.
nfs_unlink_client() {
	timeout 300 python3 - "$mnt/churn" "$1" <<'EOF'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
t = time.monotonic()
for i in range(n):
    os.unlink(f"{d}/renamed-{i}")
if os.listdir(d):
    sys.exit(f"{len(os.listdir(d))} entries left after unlink")
os.rmdir(d)
print("unlink %.1f s" % (time.monotonic() - t))
EOF
}

# nfs_churn_server DIR N: DIR (the server's copy) holds exactly renamed-0 ..
# renamed-N-1, with their content.
nfs_churn_server() {
	local d=$1 n=$2 i got
	got=$(cd "$d" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort) || return
	if [ "$got" != "$(for ((i = 0; i < n; i++)); do echo "renamed-$i"; done | LC_ALL=C sort)" ]; then
		echo "the server has $(grep -c . <<<"$got") entries, not renamed-0..$((n - 1)):"
		head -n 5 <<<"$got"
		return 1
	fi
	for ((i = 0; i < n; i++)); do
		if ((i % 10 == 0)); then
			[ "$(<"$d/renamed-$i")" = "$i" ] || { echo "renamed-$i: wrong content on the server"; return 1; }
		else
			[ ! -s "$d/renamed-$i" ] || { echo "renamed-$i: not empty on the server"; return 1; }
		fi
	done
}

# nfs_client: this VM mounts the peer's export and runs the workload.
nfs_client() {
	local t0 xprt conns=
	mnt=$TEST_TMP/mnt-$PH
	peer_up server umounted || return
	t0=$(date +%s.%N)
	if ! tap_check "$L: mount -o vers=4.2,proto=rdma $PAIR_PEER_ADDR" \
		nfs_mount "$PAIR_PEER_ADDR" / 4.2 "$mnt"; then
		post mounted "mount failed"
		post umounted
		return
	fi
	tap_diag "mounted in $(elapsed "$t0") s: $(awk -v d="$mnt" '$2 == d { print $4 }' /proc/mounts)"
	xprt=$(nfs_mount_xprt "$mnt")
	tap_result "$([ "$xprt" = rdma ]; echo $?)" "$L: mountstats shows xprt rdma" "xprt: '${xprt:-none}'"
	check_rts "$L: client connection" 1
	post mounted ok
	peer_wait mounted.checked

	for f in $NFS_FIO; do
		mount_fio "${f%%:*}" "${f#*:}"
	done

	client_stream_copy

	t0=$(date +%s.%N)
	tap_check "$L: create and rename $NFS_CHURN_FILES files, list, read some" \
		nfs_churn_client "$NFS_CHURN_FILES" && tap_diag "$OUT"
	post churned "$NFS_CHURN_FILES"
	peer_wait churned.checked
	tap_check "$L: unlink the $NFS_CHURN_FILES files, directory empty" \
		nfs_unlink_client "$NFS_CHURN_FILES" && tap_diag "$OUT (churn $(elapsed "$t0") s in all)"

	conns=$(nfs_mount_connects "$mnt")
	tap_diag "RPC/RDMA transport: $(awk -v d="$mnt" '$1 == "device" { cur = ($5 == d) }
		cur && $1 == "xprt:" { print; exit }' /proc/self/mountstats)"
	tap_check "$L: umount" nfs_umount "$mnt"
	check_res_zero "$L: no QP, MR or CM id left on the client's $dev" 60 qp mr cm_id
	post umounted "$conns"
	PHASE_CONNS=$conns
}

# nfs_server: this VM serves a tmpfs export to the peer and checks its side.
nfs_server() {
	local exp=$TEST_TMP/export-$PH up=0
	if tap_check "$L: tmpfs to export" nfs_export_tmpfs "$exp" 512M &&
		SERVING=1 && tap_check "$L: knfsd on rdma port $NFS_RDMA_PORT" nfs_server_start "$exp"; then
		tap_diag "$(tr '\n' ' ' </proc/fs/nfsd/portlist), versions $(cat /proc/fs/nfsd/versions)"
		up=1
		post ready ok
	else
		post ready "the NFS server could not start on VM $PAIR_ROLE"
	fi
	# The client posts mounted (unless the server is not up), then, when it
	# mounted, copied and churned; umounted in any case.
	((up)) && peer_wait mounted
	if ((up)) && [ "$PAIR_MSG" = ok ]; then
		check_rts "$L: server connection" 1
		post mounted.checked
		server_check_copy "$exp"
		peer_wait churned
		tap_check "$L: the server's directory holds the $PAIR_MSG renamed files" \
			nfs_churn_server "$exp/churn" "$PAIR_MSG"
		post churned.checked
	fi
	peer_wait umounted
	PHASE_CONNS=$PAIR_MSG
	tap_check "$L: the export is empty again" test -z "$(ls -A "$exp" 2>&1)"
	check_res_zero "$L: the server's connection is gone from $dev" 60 qp
	tap_check "$L: stop the NFS server" nfs_server_stop
	tap_check "$L: unmount the export" ulp_undo "tmpfs:$exp"
	SERVING=0
	check_res_zero "$L: no QP, MR or CM id left on the server's $dev" 30 qp mr cm_id
}

# ---------------------------------------------------------------- NVMe-oF

# nvme_fio WHAT DEV RW BS SIZE: write, read back and verify (crc32c).
nvme_fio() {
	local what=$1 bdev=$2 rw=$3 bs=$4 size=$5 out st desc
	desc="$L: $what: fio $rw $bs x $size, read back, crc32c verified"
	out=$(timeout 300 fio --name="$PH-$bs" --filename="$bdev" --rw="$rw" --bs="$bs" --size="$size" \
		--direct=1 --ioengine=libaio --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 2>&1)
	st=$?
	if [ "$st" = 0 ] && grep -q 'err= 0' <<<"$out"; then
		tap_ok "$desc"
		tap_diag "$(grep -E '^ +(READ|WRITE): ' <<<"$out" | sed -E 's/^ +//; s/, [0-9.]+[KMG]?iB\/s-.*, io=/, io=/')"
	else
		tap_fail "$desc" "exit status $st" "$(tail -n 30 <<<"$out")"
	fi
}

# target_serve UP WHY WHAT MIN_QPS: the target's side of a block ULP's phase
# once set up (UP is 1 when it is; else WHY tells the peer why not): on the
# host's connected, at least MIN_QPS QPs (WHAT) in RTS on $dev; then wait for
# its disconnected (PHASE_CONNS: the connections it made) and for the
# target's QPs to go.
target_serve() {
	if (($1)); then post ready ok; else post ready "$2"; fi
	# The host posts connected (unless the target is not up), then
	# disconnected in any case.
	(($1)) && peer_wait connected
	if (($1)) && [ "$PAIR_MSG" = ok ]; then
		check_rts "$L: $3" "$4"
		post connected.checked
	fi
	peer_wait disconnected
	PHASE_CONNS=$PAIR_MSG
	check_res_zero "$L: the target's QPs are gone from $dev" 60 qp
}

# nvme_ctrl: the controller (/sys/class/nvme/nvmeX) of $nqn, if connected.
nvme_ctrl() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$nqn" ] && { echo "$c"; return 0; }
	done
	return 1
}

# nvme_count_queues: add the connected controller's queues (admin and I/O:
# one RDMA connection each) to CONNS.
nvme_count_queues() {
	local c q=
	c=$(nvme_ctrl) && q=$(cat "$c/queue_count" 2>/dev/null)
	if [ -z "$q" ]; then
		echo "no queue_count for the controller of $nqn"
		CONNS=
		return 1
	fi
	[ -n "$CONNS" ] && CONNS=$((CONNS + q))
	return 0
}

# nvme_patterns_write: write a random 1 MiB to the start of each namespace.
nvme_patterns_write() {
	local i
	for i in "${!ns[@]}"; do
		head -c 1M /dev/urandom >"$TEST_TMP/pattern$i" &&
			dd if="$TEST_TMP/pattern$i" of="${ns[$i]}" bs=1M count=1 oflag=direct status=none || return
	done
}

# nvme_patterns_check: each namespace's first MiB is its pattern.
nvme_patterns_check() {
	local i b
	mapfile -t b < <(nvme_namespaces "$nqn")
	((${#b[@]} == ${#ns[@]})) || { echo "${#b[@]} namespaces (${b[*]}), want ${#ns[@]}"; return 1; }
	for i in "${!b[@]}"; do
		dd if="${b[$i]}" bs=1M count=1 iflag=direct status=none | cmp -s - "$TEST_TMP/pattern$i" ||
			{ echo "${b[$i]} (ns $((i + 1))): the first MiB differs from what was written"; return 1; }
	done
}

# nvme_cycles N: N times connect, check both namespaces' patterns, disconnect.
nvme_cycles() {
	local i
	for ((i = 1; i <= $1; i++)); do
		nvme_connect "$PAIR_PEER_ADDR" "$NVME_RDMA_PORT" "$nqn" || { echo "cycle $i: connect failed"; return 1; }
		nvme_count_queues
		nvme_patterns_check || { echo "cycle $i: read back failed"; nvme_disconnect "$nqn"; return 1; }
		nvme_disconnect "$nqn" || { echo "cycle $i: disconnect failed"; return 1; }
	done
}

# nvme_host: this VM connects to the peer's subsystem and runs the workload.
nvme_host() {
	local t0 c i job rw bs size names
	names=(null_blk brd)
	CONNS=0
	peer_up target disconnected || return
	t0=$(date +%s.%N)
	if ! tap_check "$L: nvme connect -t rdma -a $PAIR_PEER_ADDR -s $NVME_RDMA_PORT" \
		nvme_connect "$PAIR_PEER_ADDR" "$NVME_RDMA_PORT" "$nqn"; then
		post connected "connect failed"
		post disconnected
		PHASE_CONNS=
		return
	fi
	tap_diag "connected in $(elapsed "$t0") s"
	c=$(nvme_ctrl)
	tap_result "$([ -n "$c" ] && [ "$(cat "$c/transport")" = rdma ] &&
		grep -q "traddr=$PAIR_PEER_ADDR,trsvcid=$NVME_RDMA_PORT" "$c/address"; echo $?)" \
		"$L: controller ${c##*/} transport rdma to $PAIR_PEER_ADDR:$NVME_RDMA_PORT" \
		"$([ -n "$c" ] && cat "$c/transport" "$c/address")" "$(nvme list-subsys 2>&1)"
	mapfile -t ns < <(nvme_namespaces "$nqn")
	tap_result "$([ "${#ns[@]}" = 2 ]; echo $?)" "$L: two namespaces (${ns[*]})" "$(nvme list 2>&1)"
	nvme_count_queues
	tap_diag "queues (admin and I/O): ${CONNS:-?}"
	check_rts "$L: host queues (admin and I/O)" 2
	post connected ok
	peer_wait connected.checked

	for i in "${!ns[@]}"; do
		for job in $NVME_FIO; do
			IFS=: read -r rw bs size <<<"$job"
			nvme_fio "ns $((i + 1)) (${names[$i]:-?})" "${ns[$i]}" "$rw" "$bs" "$size"
		done
	done

	tap_check "$L: write a 1 MiB pattern to each namespace" nvme_patterns_write
	tap_check "$L: nvme disconnect" nvme_disconnect "$nqn"
	t0=$(date +%s.%N)
	tap_check "$L: $NVME_CYCLES connect/disconnect cycles, each reading the patterns back" \
		nvme_cycles "$NVME_CYCLES"
	tap_diag "$NVME_CYCLES cycles in $(elapsed "$t0") s"
	check_res_zero "$L: no QP, MR or CM id left on the host's $dev" 60 qp mr cm_id
	post disconnected "$CONNS"
	PHASE_CONNS=$CONNS
}

# nvme_target: this VM offers a subsystem with two namespaces to the peer.
nvme_target() {
	local nb=rsiwnull$PH up=0
	if tap_check "$L: null_blk device (memory-backed, $NVME_NS_MB MiB)" nvmet_null_blk "$nb" "$NVME_NS_MB" &&
		tap_check "$L: brd device ($NVME_NS_MB MiB)" nvmet_brd "$NVME_NS_MB" &&
		tap_check "$L: nvmet subsystem: ns 1 /dev/$nb, ns 2 /dev/ram0" nvmet_subsys "$nqn" "/dev/$nb" /dev/ram0 &&
		SERVING=1 && tap_check "$L: nvmet-rdma port on $PAIR_ADDR:$NVME_RDMA_PORT" \
		nvmet_port 1 "$PAIR_ADDR" "$NVME_RDMA_PORT" "$nqn"; then
		up=1
	fi
	target_serve "$up" "the NVMe target could not start on VM $PAIR_ROLE" "target queues" 2
	tap_check "$L: remove the port" nvmet_port_del 1 "$nqn"
	tap_check "$L: remove the subsystem" nvmet_subsys_del "$nqn"
	SERVING=0
	check_res_zero "$L: no QP, MR or CM id left on the target's $dev" 30 qp mr cm_id
}

# ---------------------------------------------------------------- SMB Direct

# smb_client: this VM mounts the peer's share over SMB Direct and runs the
# workload.
smb_client() {
	local t0 f
	mnt=$TEST_TMP/mnt-$PH
	peer_up server umounted || return
	t0=$(date +%s.%N)
	if ! tap_check "$L: mount -t cifs -o rdma //$PAIR_PEER_ADDR/$smb_share" \
		smb_mount "$PAIR_PEER_ADDR" "$smb_share" "$mnt"; then
		post mounted "mount failed"
		post umounted
		return
	fi
	tap_diag "mounted in $(elapsed "$t0") s"
	tap_result "$(smb_direct_session; echo $?)" "$L: cifs's DebugData shows the SMBDirect transport" \
		"$(head -n 40 /proc/fs/cifs/DebugData 2>&1)"
	check_rts "$L: client connection" 1
	post mounted ok
	peer_wait mounted.checked

	for f in $SMB_FIO; do
		mount_fio "${f%%:*}" "${f#*:}"
	done

	client_stream_copy

	tap_check "$L: umount" smb_umount "$mnt"
	check_res_zero "$L: no QP, MR or CM id left on the client's $dev" 60 qp mr cm_id
	# One mount, one SMB Direct connection (no multichannel).
	post umounted 1
	PHASE_CONNS=1
}

# smb_server: this VM serves a tmpfs share to the peer with ksmbd.
smb_server() {
	local exp=$TEST_TMP/share-$PH up=0
	if tap_check "$L: tmpfs to share" ulp_mount_tmpfs "$exp" 256M && SERVING=1 &&
		tap_check "$L: ksmbd serving //$PAIR_ADDR/$smb_share" smb_server_start "$exp" "$smb_share" &&
		tap_wait "$L: ksmbd listens for SMB Direct on port 5445 (a CM id)" 30 smb_listening "$dev"; then
		up=1
		post ready ok
	else
		post ready "the SMB server could not start on VM $PAIR_ROLE"
	fi
	# The client posts mounted (unless the server is not up), then, when it
	# mounted, copied; umounted in any case.
	((up)) && peer_wait mounted
	if ((up)) && [ "$PAIR_MSG" = ok ]; then
		check_rts "$L: server connection" 1
		post mounted.checked
		server_check_copy "$exp"
	fi
	peer_wait umounted
	PHASE_CONNS=$PAIR_MSG
	check_res_zero "$L: the server's connection is gone from $dev" 60 qp
	tap_check "$L: stop ksmbd" ulp_undo smb-server
	tap_check "$L: unmount the share" ulp_undo "tmpfs:$exp"
	SERVING=0
	check_res_zero "$L: no QP, MR or CM id left on the server's $dev" 30 qp mr cm_id
}

# ---------------------------------------------------------------- iSER

# iser_pattern_write: write a random 1 MiB to the start of the disk.
iser_pattern_write() {
	head -c 1M /dev/urandom >"$TEST_TMP/iser-pattern" &&
		dd if="$TEST_TMP/iser-pattern" of="$disk" bs=1M count=1 oflag=direct conv=fsync status=none
}

# iser_cycles N: N times log in, check the pattern, log out.
iser_cycles() {
	local i d
	for ((i = 1; i <= $1; i++)); do
		iser_login "$PAIR_PEER_ADDR" "$ISER_PORT" "$iqn" || { echo "cycle $i: login failed"; return 1; }
		CONNS=$((CONNS + 1))
		d=$(iser_disk "$iqn") || { echo "cycle $i: no disk"; return 1; }
		dd if="$d" bs=1M count=1 iflag=direct status=none | cmp -s - "$TEST_TMP/iser-pattern" ||
			{ echo "cycle $i: the first MiB of $d differs from what was written"; return 1; }
		iser_logout "$PAIR_PEER_ADDR" "$ISER_PORT" "$iqn" || { echo "cycle $i: logout failed"; return 1; }
	done
}

# iser_initiator: this VM logs in to the peer's target and runs the workload.
# CONNS counts the RDMA connections it makes: discovery, then one a login.
iser_initiator() {
	local t0 s job rw bs size
	CONNS=0
	peer_up target disconnected || return
	if ! tap_check "$L: open-iscsi initiator (iscsid)" iser_initiator_start; then
		post connected "iscsid failed"
		post disconnected
		return
	fi
	tap_check "$L: SendTargets discovery over iSER at $PAIR_PEER_ADDR:$ISER_PORT finds $iqn" \
		iser_discover "$PAIR_PEER_ADDR" "$ISER_PORT" "$iqn" && CONNS=$((CONNS + 1))
	t0=$(date +%s.%N)
	if ! tap_check "$L: login to $iqn over iSER" iser_login "$PAIR_PEER_ADDR" "$ISER_PORT" "$iqn"; then
		post connected "login failed"
		post disconnected
		PHASE_CONNS=
		return
	fi
	CONNS=$((CONNS + 1))
	tap_diag "logged in in $(elapsed "$t0") s"
	s=$(iscsiadm -m session 2>&1)
	tap_result "$(grep -qE "^iser: \[[0-9]+\] $PAIR_PEER_ADDR:$ISER_PORT,[0-9]+ $iqn( |\$)" <<<"$s"; echo $?)" \
		"$L: the session is on the iser transport" "$s"
	check_rts "$L: initiator connection" 1
	post connected ok
	peer_wait connected.checked

	if disk=$(iser_disk "$iqn"); then
		for job in $ISER_FIO; do
			IFS=: read -r rw bs size <<<"$job"
			fio_write_verify "$L: fio $rw $bs x $size on $disk, read back, crc32c verified" "$disk" "$bs" "$size" \
				--rw="$rw" --unlink=0 --iodepth=8
		done
		tap_check "$L: write a 1 MiB pattern to the disk" iser_pattern_write
	else
		tap_fail "$L: the LUN appears as a disk" "$(iscsiadm -m session -P 3 2>&1 | tail -n 20)"
	fi
	tap_check "$L: logout" iser_logout "$PAIR_PEER_ADDR" "$ISER_PORT" "$iqn"
	t0=$(date +%s.%N)
	tap_check "$L: $ISER_CYCLES login/logout cycles, each reading the pattern back" iser_cycles "$ISER_CYCLES"
	tap_diag "$ISER_CYCLES cycles in $(elapsed "$t0") s"
	tap_check "$L: stop the initiator" ulp_undo iser-initiator
	check_res_zero "$L: no QP, MR or CM id left on the initiator's $dev" 60 qp mr cm_id
	post disconnected "$CONNS"
	PHASE_CONNS=$CONNS
}

# iser_target: this VM exports a ramdisk LUN to the peer over iSER.
iser_target() {
	local up=0
	if tap_check "$L: LIO target: a $ISER_LUN_MB MiB ramdisk LUN" \
		iser_target_create "$iqn" "$ISER_LUN_MB" && SERVING=1 &&
		tap_check "$L: portal $PAIR_ADDR:$ISER_PORT with iSER (its TCP listener in another namespace)" \
			iser_portal "$PAIR_ADDR" "$ISER_PORT" "$iqn"; then
		up=1
	fi
	target_serve "$up" "the iSER target could not start on VM $PAIR_ROLE" "target connection" 1
	tap_check "$L: clear the target" ulp_undo iser-target
	SERVING=0
	check_res_zero "$L: no QP, MR or CM id left on the target's $dev" 30 qp mr cm_id
}

# run_phase PH SERVER_ROLE CLIENT SERVER SERVER_FN CLIENT_FN: the pairing PH
# of a ULP. VM SERVER_ROLE runs SERVER_FN, the other VM CLIENT_FN (CLIENT and
# SERVER name the two sides in the checks); both set PHASE_CONNS to the RDMA
# connections the client side made (empty when not known). Then rsiw's
# counters, the kernel log, and a sync with the peer.
run_phase() {
	local t0 crole
	PH=$1
	crole=$([ "$2" = a ] && echo b || echo a)
	L="$PH, ${MOD[$crole]} $3 -> ${MOD[$2]} $4"
	kmsg_mark
	mpa_save
	t0=$(date +%s.%N)
	PHASE_CONNS=
	if [ "$PAIR_ROLE" = "$2" ]; then "$5"; else "$6"; fi
	check_mpa "$L" "$PHASE_CONNS"
	show_log
	check_no_splat "$L: no kernel splat"
	pair_sync "$PH.end" || tap_bail "$PAIR_MSG"
	tap_diag "$PH took $(elapsed "$t0") s"
}

# ---------------------------------------------------------------- setup

t_start=$(date +%s.%N)
tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "link up: NIC $PAIR_MAC with $PAIR_ADDR/24" pair_link_up || tap_bail "no link"
tap_diag "VM $PAIR_ROLE: $RSIW_MODULE on $PAIR_NETDEV, peer $PAIR_PEER_ADDR"
tap_check "rdma link add $dev type $RSIW_LINK_TYPE netdev $PAIR_NETDEV" rdma_link_add "$dev" "$PAIR_NETDEV" ||
	tap_bail "cannot add the link"
tap_wait "$dev is ACTIVE" 10 port_state_is "$dev" ACTIVE
[ "$PAIR_ROLE" = a ] && tap_check "rsiw MPA defaults: rev=2 crc=1 markers=0" \
	grep -qE '^rev=2 crc=1 markers=0 ' /sys/kernel/debug/rsiw/mpa
pair_sync ready || tap_bail "$PAIR_MSG"
tap_wait "the peer $PAIR_PEER_ADDR answers on the link" 10 pair_peer_reachable

for ph in $ULP_PHASES; do
	case $ph in
	nfs1) run_phase "$ph" b client server nfs_server nfs_client ;;
	nfs2) run_phase "$ph" a client server nfs_server nfs_client ;;
	nvme1) nqn=$nqn_base-$ph; run_phase "$ph" b host target nvme_target nvme_host ;;
	nvme2) nqn=$nqn_base-$ph; run_phase "$ph" a host target nvme_target nvme_host ;;
	smb1) run_phase "$ph" b client server smb_server smb_client ;;
	smb2) run_phase "$ph" a client server smb_server smb_client ;;
	iser1) iqn=$iqn_base-$ph; run_phase "$ph" b initiator target iser_target iser_initiator ;;
	iser2) iqn=$iqn_base-$ph; run_phase "$ph" a initiator target iser_target iser_initiator ;;
	*) tap_fail "ULP_PHASES: $ph is not a phase (nfs1 nfs2 nvme1 nvme2 smb1 smb2 iser1 iser2)" ;;
	esac
done

# Both halves stay up until both are done.
pair_sync finish || tap_fail "the peer finished" "$PAIR_MSG"
kmsg_mark
tap_check "undo the setup: NFS, nvmet, nvme, null_blk, brd, SMB, LIO and iSCSI modules" ulp_cleanup
check_no_splat "teardown: no kernel splat"
tap_diag "VM $PAIR_ROLE's half took $(elapsed "$t_start") s"
tap_done
