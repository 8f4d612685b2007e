#!/usr/bin/env bash
# Runs inside the VM for `make run`: load rsiw, create rsiw0 on a dummy netdev,
# export a tmpfs over NFS/RDMA (knfsd, port 20049) and mount it through rsiw0
# in the same VM, write a file and read it back, and summarize what the
# connections negotiated (from /sys/kernel/debug/rsiw/mpa) and how fast the
# data moved. RUN_MB sets the file size (MiB, default 256); RSIW_MODULE=siw
# RSIW_LINK_TYPE=siw run the same with the C siw.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
# shellcheck source-path=SCRIPTDIR source=../selftests/ulp-setup.sh
. selftests/ulp-setup.sh

RSIW_MODULE=${RSIW_MODULE:-rsiw}
RSIW_LINK_TYPE=${RSIW_LINK_TYPE:-rsiw}
KO=drivers/rsiw/rsiw.ko
DEV=rsiw0
NETDEV=rsiw-demo0
ADDR=198.18.0.1
MB=${RUN_MB:-256}
MPA=/sys/kernel/debug/rsiw/mpa
work=$(mktemp -d /tmp/rsiw-run.XXXXXX)
export_dir=$work/export
mnt=$work/mnt

step() { printf '\n### %s\n' "$*"; }
die() {
	printf '\nmake run: %s\n' "$*" >&2
	dmesg | grep -E '\] (rsiw|siw|rpcrdma|svcrdma|nfs|NFS|nfsd|NFSD)' | tail -n 20 >&2
	exit 1
}
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", (s > 0 ? n / s / 1e6 : 0) }'; }
# mpa_count KEY: a counter from the second line of $MPA.
mpa_count() {
	awk -v k="$1" 'NR == 2 { for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == k) print f[2] } }' "$MPA"
}

# mpa_delta KEY: how much counter KEY grew since $before (the counter line then).
mpa_delta() {
	local was
	was=$(awk -v k="$1" '{ for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == k) print f[2] } }' <<<"$before")
	echo $(($(mpa_count "$1") - was))
}
# share N OF YES NO: YES if all OF have it, NO if none, else how many.
share() {
	if (($1 == $2)); then echo "$3"; elif (($1 == 0)); then echo "$4"; else echo "$3 on $1 of $2, $4 on the rest"; fi
}

# Undo in reverse: the NFS side (ulp_cleanup), the link, the netdev, the driver.
teardown() {
	ulp_cleanup
	rdma link delete "$DEV" 2>/dev/null
	ip link delete "$NETDEV" 2>/dev/null
	if [ "$RSIW_MODULE" = rsiw ]; then rmmod rsiw 2>/dev/null; else modprobe -r "$RSIW_MODULE" 2>/dev/null; fi
	rm -rf "$work"
}
trap teardown EXIT

modprobe dummy
ip link add "$NETDEV" address 02:52:53:49:57:01 type dummy || die "cannot create $NETDEV"
{ ip addr add "$ADDR/24" dev "$NETDEV" && ip link set "$NETDEV" up; } || die "cannot configure $NETDEV"

if [ "$RSIW_MODULE" = rsiw ] && ! cmp -s "$(modinfo -n rsiw 2>/dev/null)" "$KO"; then
	die "modprobe would not load $KO: run make install"
fi
step "modprobe $RSIW_MODULE"
modprobe "$RSIW_MODULE" || die "modprobe failed"
step "rdma link add $DEV type $RSIW_LINK_TYPE netdev $NETDEV"
rdma link add "$DEV" type "$RSIW_LINK_TYPE" netdev "$NETDEV" || die "rdma link add failed"
rdma link show "$DEV/1"
state=$(rdma link show "$DEV/1" | grep -o 'state [A-Z]*' | head -n1)
[ "$state" = "state ACTIVE" ] || die "$DEV is not ACTIVE ($state)"

have_mpa=0
if [ -r "$MPA" ]; then
	have_mpa=1
	step "MPA settings ($MPA)"
	cat "$MPA"
	before=$(sed -n 2p "$MPA")
fi

step "NFS server: tmpfs exported on rdma port $NFS_RDMA_PORT"
nfs_export_tmpfs "$export_dir" "$((MB + 64))M" || die "cannot mount a tmpfs"
nfs_server_start "$export_dir" || die "cannot start the NFS server"
cat /proc/fs/nfsd/portlist

step "mount -t nfs -o vers=4.2,proto=rdma,port=$NFS_RDMA_PORT $ADDR:/ $mnt"
nfs_mount "$ADDR" "$export_dir" 4.2 "$mnt" || die "mount failed"
xprt=$(nfs_mount_xprt "$mnt")
[ "$xprt" = rdma ] || die "the mount uses '$xprt', not rdma"
grep " $mnt " /proc/mounts
rdma res show qp link "$DEV/1"

step "write $MB MiB, read it back"
head -c "${MB}M" /dev/urandom >"$work/data" || die "no room for the source file"
sum_src=$(md5sum <"$work/data" | cut -d' ' -f1)
t0=$(date +%s.%N)
dd if="$work/data" of="$mnt/data" bs=1M conv=fsync status=none || die "writing over NFS/RDMA failed"
wsec=$(elapsed "$t0")
rm -f "$work/data"
sum_srv=$(md5sum <"$export_dir/data" | cut -d' ' -f1)
# Drop the client's cached pages so that the read goes to the server.
echo 3 >/proc/sys/vm/drop_caches
t0=$(date +%s.%N)
dd if="$mnt/data" of=/dev/null bs=1M status=none || die "reading over NFS/RDMA failed"
rsec=$(elapsed "$t0")
sum_cli=$(md5sum <"$mnt/data" | cut -d' ' -f1)
bytes=$((MB * 1048576))
echo "md5: written $sum_src, server $sum_srv, read back $sum_cli"
if [ "$sum_srv" != "$sum_src" ] || [ "$sum_cli" != "$sum_src" ]; then
	die "checksum mismatch"
fi
rm -f "$mnt/data"
nfs_umount "$mnt" || die "umount failed"

step "summary"
echo "device:      $DEV ($RSIW_LINK_TYPE) on $NETDEV $ADDR, $(rdma link show "$DEV/1" | grep -o '^link [^ ]* state [A-Z]*' | cut -d" " -f3-)"
echo "NFS:         v4.2 over RPC/RDMA, client and server in this VM (loopback through $DEV)"
if ((have_mpa)); then
	# Each connection counts at both ends (client and server QPs).
	est=$(mpa_delta established) crc=$(mpa_delta crc) mk=$(mpa_delta markers) r1=$(mpa_delta rev1)
	if ((est == 0)); then
		die "rsiw's established counter did not move: the mount did not go through rsiw"
	fi
	echo "connections: $est QP(s) reached RTS during the mount (both ends count)"
	echo "MPA:         revision $(share "$((est - r1))" "$est" 2 1)"
	echo "CRC:         $(share "$crc" "$est" on off)"
	echo "Markers:     $(share "$mk" "$est" on off)"
else
	echo "MPA:         no $MPA (not rsiw): negotiation not shown"
fi
echo "data:        $bytes bytes written and $bytes read back, md5 matches on client and server"
echo "throughput:  write $(mbps "$bytes" "$wsec") MB/s ($wsec s), read $(mbps "$bytes" "$rsec") MB/s ($rsec s) (TCG guest)"
