# Setup and teardown of the kernel ULPs that run over an RDMA device: the NFS
# server (knfsd on an RDMA port) and client (mount -o proto=rdma), the NVMe-oF
# target (nvmet-rdma through configfs) and host (nvme connect -t rdma), the
# SMB Direct server (ksmbd) and client (mount -t cifs -o rdma), the iSER
# target (LIO's isert, through its configfs) and initiator (open-iscsi's iser
# interface). Sourced, not run (the selftest runner skips it): by
# selftests/nfs-rdma.sh, nvmeof-rdma.sh, smb-direct.sh and iser.sh (server
# and client in one VM), by qemu/guest-run.sh, and by tests and benchmarks
# that put the server in one VM and the client in another, so the two halves
# are separate functions, parameterized by address and port. The RDMA device
# and its netdev are the caller's.
#
# Every function returns non-zero with a message on stderr when it fails, and
# prints nothing else unless it says so. What a function creates is recorded and
# undone, newest first, by the matching down function or by ulp_cleanup, which
# also unloads the modules loaded through ulp_modprobe. This file sets the EXIT
# trap to 'ulp_cleanup; cleanup' when lib.sh's cleanup exists; a test calls
# ulp_cleanup itself before tap_done (whose cleanup removes the RDMA device and
# the driver, which must go last).
#
# server (knfsd)                         client
#   nfs_export_tmpfs DIR SIZE              nfs_mount ADDR EXPORT VERS DIR [PORT] [OPTS]
#   nfs_server_start EXPORT [PORT]         nfs_umount DIR
#   nfs_server_stop                        nfs_mount_xprt DIR, nfs_mount_connects DIR
#                                          nfs_mount_ops DIR OP
# target (nvmet)                         host (nvme)
#   nvmet_null_blk NAME SIZE_MB            nvme_connect ADDR SVCID NQN [OPTION]...
#   nvmet_brd SIZE_MB                      nvme_disconnect NQN
#   nvmet_subsys NQN DEV...                nvme_namespaces NQN
#   nvmet_port ID ADDR SVCID NQN           nvme_ctrls NQN
#   nvmet_port_del ID NQN, nvmet_subsys_del NQN
# both, in one VM
#   nvme_rdma_loop NAME SIZE_MB NQN ADDR SVCID
# server (ksmbd)                         client (cifs)
#   smb_server_start EXPORT SHARE          smb_mount ADDR SHARE DIR, smb_umount DIR
#   smb_server_stop, smb_listening DEV     smb_direct_session
# target (LIO, configfs)                 initiator (open-iscsi)
#   iser_target_create IQN SIZE_MB         iser_initiator_start, iser_initiator_stop
#   iser_portal ADDR PORT IQN              iser_discover ADDR PORT IQN
#   iser_portal_same_ns ADDR PORT IQN      iser_login ADDR PORT IQN, iser_logout ADDR PORT IQN
#   iser_target_clear                      iser_disk IQN
# either side
#   ulp_modprobe MODULE [PARAM=VALUE]..., ulp_cleanup, ulp_wait SECONDS CMD [ARG]...
#   ulp_cycles N DESC CMD [ARG]... (TAP: lib.sh's callers only)
#   ulp_res_count DEV KIND, ulp_res_summary DEV, ulp_no_qps DEV (rdma res)
#   ulp_rsiw_mpa KEY (rsiw's connection counters)
#   ulp_tcp_sockets PORT (a port's TCP sockets but TIME-WAIT)
#   stop_fio (a background fio in fio_pid), fio_verified STATUS OUTPUT
# shellcheck shell=bash

NFS_RDMA_PORT=${NFS_RDMA_PORT:-20049}
NVME_RDMA_PORT=${NVME_RDMA_PORT:-4420}
# Fixed host identity: nvme connect must not depend on /etc/nvme of the host.
NVME_HOSTNQN=${NVME_HOSTNQN:-nqn.2014-08.org.nvmexpress:uuid:72736977-0000-4000-8000-000000000001}
NVME_HOSTID=${NVME_HOSTID:-72736977-0000-4000-8000-000000000001}
NVMET_CFS=/sys/kernel/config/nvmet
ISER_PORT=${ISER_PORT:-3260}
ISER_INITIATOR=${ISER_INITIATOR:-iqn.2003-01.org.rsiw:selftest-initiator}
# Where LIO's iSCSI/TCP listeners go (see iser_portal).
ISER_TCP_NETNS=rsiw-iscsi-tcp
NULLB_CFS=/sys/kernel/config/nullb

# ---------------------------------------------------------------- undo list

_ulp_undo_keys=()
declare -A _ulp_undo=()
_ulp_mods=()

# ulp_undo_add KEY COMMAND: run COMMAND (a shell string) at ulp_cleanup, unless
# ulp_undo_drop KEY comes first. Newest first.
ulp_undo_add() {
	_ulp_undo_keys+=("$1")
	_ulp_undo[$1]=$2
}

# ulp_undo_drop KEY: forget KEY's command (its thing was undone explicitly).
ulp_undo_drop() {
	unset "_ulp_undo[$1]"
}

# ulp_undo KEY: run KEY's undo command now and forget it.
ulp_undo() {
	local cmd=${_ulp_undo[$1]:-}
	ulp_undo_drop "$1"
	[ -z "$cmd" ] || eval "$cmd"
}

# ulp_cleanup: undo everything still recorded, newest first, then unload the
# modules ulp_modprobe loaded. Safe to call twice. Failures go to stderr and
# make the status non-zero. A test calls it before tap_done, whose cleanup
# removes the RDMA device and the driver first.
ulp_cleanup() {
	local i key st=0
	for ((i = ${#_ulp_undo_keys[@]} - 1; i >= 0; i--)); do
		key=${_ulp_undo_keys[$i]}
		[ -n "${_ulp_undo[$key]:-}" ] || continue
		ulp_undo "$key" || { echo "ulp_cleanup: undoing $key failed" >&2; st=1; }
	done
	_ulp_undo_keys=()
	for ((i = ${#_ulp_mods[@]} - 1; i >= 0; i--)); do
		[ -d "/sys/module/${_ulp_mods[$i]//-/_}" ] || continue
		timeout 60 modprobe -r "${_ulp_mods[$i]}" || { echo "ulp_cleanup: cannot unload ${_ulp_mods[$i]}" >&2; st=1; }
	done
	_ulp_mods=()
	return $st
}
if declare -F cleanup >/dev/null; then
	trap 'ulp_cleanup; cleanup' EXIT
else
	trap ulp_cleanup EXIT
fi

# ulp_modprobe MODULE [PARAM=VALUE]...: load MODULE unless loaded; unloaded
# again at ulp_cleanup if this call loaded it.
ulp_modprobe() {
	[ -d "/sys/module/${1//-/_}" ] && return 0
	modprobe "$@" || return
	_ulp_mods+=("$1")
}

# ulp_wait SECONDS CMD [ARG]...: run CMD every 0.1 s until it succeeds, for at
# most SECONDS (whole seconds). For callers without lib.sh's wait_for.
ulp_wait() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < end)) || return 1
		sleep 0.1
	done
}

# ulp_cycles N DESC CMD [ARG]...: run CMD [ARG]... I for I = 1..N; one TAP
# line DESC, with how many passed, and each failed cycle's output.
ulp_cycles() {
	local n=$1 desc=$2 i ok=0 fails=()
	shift 2
	for ((i = 1; i <= n; i++)); do
		if _run "$@" "$i"; then
			ok=$((ok + 1))
		else
			fails+=("cycle $i: $OUT")
		fi
	done
	tap_result "$((ok == n ? 0 : 1))" "$desc ($ok of $n passed)" "${fails[@]}"
}

# ulp_mount_tmpfs DIR SIZE: mount a tmpfs of SIZE (e.g. 3G) on DIR, creating
# DIR; unmounted at cleanup.
ulp_mount_tmpfs() {
	mkdir -p "$1" && mount -t tmpfs -o "size=$2,mode=0755" tmpfs "$1" || return
	ulp_undo_add "tmpfs:$1" "umount $(printf '%q' "$1")"
}

# ---------------------------------------------------------------- RDMA resources

# ulp_res_count DEV KIND: how many KIND (qp, mr, cq, pd, cm_id, srq) the RDMA
# core tracks on DEV, from rdma res show.
ulp_res_count() {
	timeout 20 rdma res show 2>/dev/null | awk -v d="$1:" -v k="$2" '
		$2 == d { for (i = 3; i < NF; i++) if ($i == k) print $(i + 1) }'
}

# ulp_res_summary DEV: DEV's line of rdma res show ("pd 0 cq 0 qp 0 ...").
ulp_res_summary() {
	timeout 20 rdma res show 2>/dev/null | awk -v d="$1:" '$2 == d { $1 = $2 = ""; sub(/^ +/, ""); print }'
}

# ulp_no_qps DEV: whether DEV has no QPs (for waiting after a teardown).
ulp_no_qps() {
	[ "$(ulp_res_count "$1" qp)" = 0 ]
}

# ulp_rsiw_mpa KEY: rsiw's counter KEY (established, crc, markers, rev1,
# rtr_*, tx_*, rx_*, ...) from /sys/kernel/debug/rsiw/mpa; empty without rsiw.
ulp_rsiw_mpa() {
	awk -v k="$1" 'NR >= 2 { for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == k) print f[2] } }' \
		/sys/kernel/debug/rsiw/mpa 2>/dev/null
}

# ulp_tcp_sockets PORT: the TCP sockets (listening or connected, not in
# TIME-WAIT) whose local or remote port is PORT, one a line, from ss. An iWARP
# device's connections and listeners are kernel TCP sockets: none of a
# ULP's may outlive its device.
ulp_tcp_sockets() {
	ss -tanH state all "( sport = :$1 or dport = :$1 )" 2>/dev/null | awk '$1 != "TIME-WAIT"'
}

# ---------------------------------------------------------------- block devices

# ulp_block_writes BDEV: the write I/Os the block device BDEV (nvme0n1, sda)
# completed.
ulp_block_writes() {
	local s
	read -ra s <"/sys/block/$1/stat" && echo "${s[4]}"
}

# ulp_block_flowing BDEV BASE [MORE]: BDEV completed MORE (default 32) writes
# more than BASE, and I/O is in flight on it.
ulp_block_flowing() {
	local s
	read -ra s <"/sys/block/$1/stat" || return
	((s[4] >= $2 + ${3:-32} && s[8] > 0))
}

# ---------------------------------------------------------------- fio

# The fio a test runs in the background (or empty), for stop_fio.
fio_pid=

# stop_fio: kill the background fio, if any, and reap it.
stop_fio() {
	[ -n "$fio_pid" ] || return 0
	kill -KILL "$fio_pid" 2>/dev/null
	wait "$fio_pid" 2>/dev/null
	fio_pid=
}

# fio_fails DESC OUT MAX: one TAP line DESC for the background fio (fio_pid,
# its output in OUT) ending with an I/O error within MAX s; killed if not.
fio_fails() {
	local desc=$1 out=$2 max=$3 st
	if ulp_wait "$max" eval '! kill -0 "$fio_pid" 2>/dev/null'; then
		wait "$fio_pid"
		st=$?
		tap_result "$([ "$st" != 0 ] && grep -qiE 'error' "$out"; echo $?)" "$desc" \
			"exit status $st" "$(tail -n 20 "$out")"
		tap_diag "$(grep -iE 'error' "$out" | head -n 3)"
		fio_pid=
	else
		tap_fail "$desc" "fio still runs after $max s" "$(ps -o pid,stat,wchan:32,cmd -p "$fio_pid")"
		stop_fio
	fi
}

# fio_verified STATUS OUTPUT: whether a fio run that verifies (crc32c) passed:
# exit status 0, no error, and no verify failure in its output.
fio_verified() {
	[ "$1" = 0 ] && grep -q 'err= 0' <<<"$2" && ! fio_verify_error "$2"
}

# fio_verify_error OUTPUT: whether fio's OUTPUT reports a block that read back
# wrong.
fio_verify_error() {
	grep -qi 'verify.*fail\|bad magic\|crc32c.*wanted' <<<"$1"
}

# fio_write_verify DESC FILE BS SIZE [FIO_ARG...]: one TAP line DESC for
# writing SIZE in BS blocks to FILE with direct I/O (queue depth 4; FIO_ARGs
# come last, so they override), then reading it back checking every block's
# crc32c; the throughput as diagnostics. FILE is removed.
fio_write_verify() {
	local desc=$1 file=$2 bs=$3 size=$4 out st
	shift 4
	out=$(timeout 600 fio --name="$(basename "$file")" --filename="$file" --rw=write --bs="$bs" \
		--size="$size" --direct=1 --ioengine=libaio --iodepth=4 --verify=crc32c --do_verify=1 \
		--verify_fatal=1 --verify_state_save=0 --unlink=1 "$@" 2>&1)
	st=$?
	if fio_verified "$st" "$out"; then
		tap_ok "$desc"
		tap_diag "$(grep -E '^ +(READ|WRITE): ' <<<"$out" | sed -E 's/^ +//; s/, [0-9.]+[KMG]?iB\/s-.*, io=/, io=/')"
	else
		tap_fail "$desc" "exit status $st" "$(tail -n 30 <<<"$out")"
	fi
}

# ---------------------------------------------------------------- file churn

# fs_churn DESC DIR N SERVER_DIR: one TAP line DESC for creating N files (with
# content) in DIR, renaming, listing and removing them (8 threads), checking
# SERVER_DIR, the server's view of DIR, in between; the phases' times as
# diagnostics. DIR is made and removed.
fs_churn() {
	local desc=$1 dir=$2 n=$3 server=$4 out st
	mkdir -p "$dir" || return
	out=$(timeout 1200 python3 "$SELFTESTS/churn.py" "$dir" "$n" "$server" 2>&1)
	st=$?
	tap_result "$st" "$desc" "$out"
	[ "$st" = 0 ] && tap_diag "$out"
	rmdir "$dir"
}

# ---------------------------------------------------------------- NFS server

# nfs_export_tmpfs DIR SIZE: a tmpfs on DIR to export; unmounted at cleanup.
nfs_export_tmpfs() {
	ulp_mount_tmpfs "$1" "$2"
}

_nfs_export=
_nfs_pids=()

# nfs_server_start EXPORT [PORT]: export the directory EXPORT to everyone as
# the NFSv4 root (fsid=0; NFSv3 mounts it by its path) and start knfsd (8
# threads, NFSv3, 4.0, 4.1, 4.2) listening for RPC/RDMA on PORT (default
# NFS_RDMA_PORT) of every address, plus rpcbind and mountd. The root file
# system may be read-only: /var/lib/nfs becomes a tmpfs, /etc/exports is not
# used. The NFSv4 grace period is cut to 10 s. nfs_server_stop undoes it all.
nfs_server_start() {
	local export=$1 port=${2:-$NFS_RDMA_PORT}
	[ -d "$export" ] || { echo "nfs_server_start: $export is not a directory" >&2; return 1; }
	ulp_modprobe nfsd || return
	ulp_modprobe rpcrdma || return
	ulp_undo_add nfs-server nfs_server_stop
	_nfs_export=$export
	mount -t tmpfs -o size=16M,mode=0755 nfs-state /var/lib/nfs || return
	mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak /var/lib/nfs/v4recovery &&
		: >/var/lib/nfs/etab && : >/var/lib/nfs/rmtab || return
	if ! grep -q '^nfsd /proc/fs/nfsd ' /proc/mounts; then
		mount -t nfsd nfsd /proc/fs/nfsd || return
	fi
	# The v4 grace period (90 s by default) delays the first OPEN.
	echo 10 >/proc/fs/nfsd/nfsv4gracetime && echo 30 >/proc/fs/nfsd/nfsv4leasetime || return
	# In the foreground, in the background: the daemons stay in the caller's
	# session (where the selftest runner looks for leftovers) and their PIDs known.
	# Their output to a log of their own: an inherited stdout could be a file
	# the caller truncates and rewrites.
	mkdir -p /run/rsiw-nfs || return
	rpcbind -w -f >>/run/rsiw-nfs/rpcbind.log 2>&1 &
	_nfs_pids+=($!)
	_ulp_wait_rpcbind || return
	exportfs -i -o rw,insecure,no_root_squash,no_subtree_check,fsid=0,sync "*:$export" || return
	rpc.mountd -F --no-nfs-version 2 >>/run/rsiw-nfs/mountd.log 2>&1 &
	_nfs_pids+=($!)
	# For an nfs_server_stop from another shell (a two-VM harness).
	printf '%s\n' "${_nfs_pids[@]}" >/run/rsiw-nfs/pids
	printf '%s\n' "$export" >/run/rsiw-nfs/export
	rpc.nfsd 8 || return
	echo "rdma $port" >/proc/fs/nfsd/portlist || {
		echo "nfs_server_start: cannot add an RDMA listener on port $port" >&2
		return 1
	}
	grep -qx "rdma $port" /proc/fs/nfsd/portlist || {
		echo "nfs_server_start: rdma $port missing from /proc/fs/nfsd/portlist:" >&2
		cat /proc/fs/nfsd/portlist >&2
		return 1
	}
}

# nfs_server_stop: stop knfsd, mountd and rpcbind, unexport, drop the state.
nfs_server_stop() {
	local st=0
	ulp_undo_drop nfs-server
	((${#_nfs_pids[@]})) || mapfile -t _nfs_pids 2>/dev/null </run/rsiw-nfs/pids
	[ -n "$_nfs_export" ] || _nfs_export=$(cat /run/rsiw-nfs/export 2>/dev/null)
	if [ -e /proc/fs/nfsd/threads ]; then
		timeout 120 rpc.nfsd 0 || { echo "nfs_server_stop: rpc.nfsd 0 failed" >&2; st=1; }
	fi
	[ -z "$_nfs_export" ] || exportfs -u "*:$_nfs_export" 2>/dev/null
	_nfs_export=
	_ulp_kill "${_nfs_pids[@]}"
	_nfs_pids=()
	rm -rf /run/rsiw-nfs
	if grep -q '^nfsd /proc/fs/nfsd ' /proc/mounts; then
		umount /proc/fs/nfsd || st=1
	fi
	if grep -q ' /var/lib/nfs tmpfs ' /proc/mounts; then
		umount /var/lib/nfs || st=1
	fi
	return $st
}

# _ulp_kill PID...: stop these processes (newest first) and reap them.
_ulp_kill() {
	local i
	for ((i = $#; i > 0; i--)); do
		kill "${!i}" 2>/dev/null || continue
		timeout 10 tail --pid="${!i}" -f /dev/null || kill -KILL "${!i}" 2>/dev/null
		wait "${!i}" 2>/dev/null
	done
	return 0
}

# _ulp_wait_rpcbind: wait until rpcbind answers (mountd and nfsd register with it).
_ulp_wait_rpcbind() {
	local _
	for _ in $(seq 100); do
		rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "rpcbind does not answer" >&2
	return 1
}

# ---------------------------------------------------------------- NFS client

# nfs_mount ADDR EXPORT VERS DIR [PORT] [OPTS]: mount the server ADDR's export
# over RPC/RDMA (proto=rdma, or rdma6 for an IPv6 ADDR in brackets; port PORT,
# default NFS_RDMA_PORT) on DIR, creating DIR. VERS is 3, 4.0, 4.1 or 4.2;
# NFSv3 mounts EXPORT by path (MOUNT over TCP, no locking), NFSv4 mounts "/"
# (nfs_server_start exports EXPORT as the v4 root). OPTS are more mount
# options. Unmounted at cleanup. With NFS_NETNS set, the client mounts from
# that network namespace (its RPC/RDMA transport resolves and connects there).
nfs_mount() {
	local addr=$1 export=$2 vers=$3 dir=$4 port=${5:-$NFS_RDMA_PORT} extra=${6:-} opts path
	# Loaded here rather than by mount, so that ulp_cleanup unloads them.
	ulp_modprobe rpcrdma && ulp_modprobe "nfsv${vers%%.*}" || return
	# An IPv6 server address comes in brackets: RPC/RDMA over IPv6 is rdma6.
	opts="vers=$vers,proto=$([[ $addr == \[* ]] && echo rdma6 || echo rdma),port=$port"
	if [ "$vers" = 3 ]; then
		opts+=",mountproto=tcp,nolock"
		path=$export
	else
		path=/
	fi
	[ -z "$extra" ] || opts+=",$extra"
	mkdir -p "$dir" || return
	if [ -n "${NFS_NETNS:-}" ]; then
		nsenter --net="/run/netns/$NFS_NETNS" timeout 120 mount -t nfs -o "$opts" "$addr:$path" "$dir"
	else
		timeout 120 mount -t nfs -o "$opts" "$addr:$path" "$dir"
	fi || return
	ulp_undo_add "nfs:$dir" "nfs_umount $(printf '%q' "$dir") || umount -f -l $(printf '%q' "$dir")"
}

# nfs_umount DIR: unmount the NFS mount on DIR.
nfs_umount() {
	ulp_undo_drop "nfs:$1"
	timeout 120 umount "$1"
}

# nfs_mount_xprt DIR: the transport (rdma, tcp) of the NFS mount on DIR, from
# /proc/self/mountstats.
nfs_mount_xprt() {
	awk -v d="$1" '
		$1 == "device" { cur = ($5 == d) }
		cur && $1 == "xprt:" { print $2; exit }' /proc/self/mountstats
}

# nfs_mount_connects DIR: how often the RPC/RDMA transport of the NFS mount on
# DIR connected (mountstats "xprt: rdma PORT BINDS CONNECTS ..."); empty if
# DIR is no NFS mount over RDMA.
nfs_mount_connects() {
	awk -v d="$1" '
		$1 == "device" { cur = ($5 == d) }
		cur && $1 == "xprt:" && $2 == "rdma" { print $5; exit }' /proc/self/mountstats
}

# nfs_mount_ops DIR OP: how many OP RPCs (WRITE, READ, ...) the NFS mount on
# DIR sent, from /proc/self/mountstats; empty if DIR is no NFS mount.
nfs_mount_ops() {
	awk -v d="$1" -v op="$2:" '
		$1 == "device" { cur = ($5 == d) }
		cur && $1 == op { print $2; exit }' /proc/self/mountstats
}

# ---------------------------------------------------------------- NVMe-oF target

# nvmet_null_blk NAME SIZE_MB: a memory-backed null_blk device /dev/NAME (the
# default null_blk keeps no data) through null_blk's configfs; removed at cleanup.
nvmet_null_blk() {
	local d=$NULLB_CFS/$1
	ulp_modprobe null_blk nr_devices=0 || return
	mkdir "$d" || return
	ulp_undo_add "nullb:$1" "rmdir $(printf '%q' "$d")"
	echo "$2" >"$d/size" && echo 1 >"$d/memory_backed" && echo 4096 >"$d/blocksize" &&
		echo 1 >"$d/power" || return
	ulp_undo_add "nullb-power:$1" "echo 0 >$(printf '%q' "$d/power")"
	_ulp_wait_block "/dev/$1"
}

# nvmet_brd SIZE_MB: one brd RAM disk, /dev/ram0; the module is unloaded at
# cleanup (brd has no other way to remove a disk). Fails if brd is loaded.
nvmet_brd() {
	[ -d /sys/module/brd ] && { echo "nvmet_brd: brd is already loaded" >&2; return 1; }
	ulp_modprobe brd rd_nr=1 rd_size=$(($1 * 1024)) max_part=0 || return
	_ulp_wait_block /dev/ram0
}

_ulp_wait_block() {
	local _
	for _ in $(seq 100); do
		[ -b "$1" ] && return 0
		sleep 0.1
	done
	echo "no block device $1" >&2
	return 1
}

# nvmet_subsys NQN DEV...: an NVMe subsystem NQN open to any host, with
# namespace 1 on the first block device DEV, 2 on the next, ...; removed at
# cleanup or by nvmet_subsys_del.
nvmet_subsys() {
	local nqn=$1 s nsid=0 dev
	shift
	ulp_modprobe nvmet || return
	s=$NVMET_CFS/subsystems/$nqn
	mkdir "$s" || return
	ulp_undo_add "subsys:$nqn" "nvmet_subsys_del $(printf '%q' "$nqn")"
	echo 1 >"$s/attr_allow_any_host" || return
	for dev in "$@"; do
		nsid=$((nsid + 1))
		mkdir "$s/namespaces/$nsid" && echo "$dev" >"$s/namespaces/$nsid/device_path" &&
			echo 1 >"$s/namespaces/$nsid/enable" || return
	done
}

# nvmet_subsys_del NQN: disable and remove the subsystem's namespaces, then it.
nvmet_subsys_del() {
	local s=$NVMET_CFS/subsystems/$1 ns st=0
	ulp_undo_drop "subsys:$1"
	[ -d "$s" ] || return 0
	for ns in "$s"/namespaces/*; do
		[ -d "$ns" ] || continue
		echo 0 >"$ns/enable"
		rmdir "$ns" || st=1
	done
	rmdir "$s" || st=1
	return $st
}

# nvmet_port ID ADDR SVCID NQN: an RDMA port (IPv4 ADDR, service SVCID)
# offering the subsystem NQN; removed at cleanup or by nvmet_port_del.
nvmet_port() {
	local id=$1 addr=$2 svcid=$3 nqn=$4 p
	ulp_modprobe nvmet-rdma || return
	p=$NVMET_CFS/ports/$id
	mkdir "$p" || return
	ulp_undo_add "port:$id" "nvmet_port_del $id $(printf '%q' "$nqn")"
	echo rdma >"$p/addr_trtype" && echo ipv4 >"$p/addr_adrfam" &&
		echo "$addr" >"$p/addr_traddr" && echo "$svcid" >"$p/addr_trsvcid" || return
	# Linking the subsystem makes nvmet-rdma listen (rdma_listen on ADDR).
	ln -s "$NVMET_CFS/subsystems/$nqn" "$p/subsystems/$nqn"
}

# nvmet_port_del ID NQN: stop offering NQN on port ID and remove the port.
nvmet_port_del() {
	local p=$NVMET_CFS/ports/$1 st=0
	ulp_undo_drop "port:$1"
	[ -d "$p" ] || return 0
	if [ -L "$p/subsystems/$2" ]; then
		rm "$p/subsystems/$2" || st=1
	fi
	rmdir "$p" || st=1
	return $st
}

# nvme_rdma_loop NAME SIZE_MB NQN ADDR SVCID: target and host in this VM: a
# memory-backed null_blk device NAME of SIZE_MB as namespace 1 of subsystem
# NQN, offered on port 1 at ADDR:SVCID, and the host connected to it. Prints
# the namespace's block device. All undone at cleanup.
nvme_rdma_loop() {
	local name=$1 size=$2 nqn=$3 addr=$4 svcid=$5
	nvmet_null_blk "$name" "$size" && nvmet_subsys "$nqn" "/dev/$name" &&
		nvmet_port 1 "$addr" "$svcid" "$nqn" && nvme_connect "$addr" "$svcid" "$nqn" || return
	nvme_namespaces "$nqn" | head -n 1
}

# ---------------------------------------------------------------- NVMe-oF host

# nvme_connect ADDR SVCID NQN [OPTION]...: connect to the subsystem NQN at
# ADDR:SVCID over RDMA (more nvme connect OPTIONs may follow) and wait until its
# namespaces have block devices. Disconnected at cleanup or by nvme_disconnect.
# On failure it prints how long it took and the kernel's last NVMe and RDMA lines.
nvme_connect() {
	local addr=$1 svcid=$2 nqn=$3 st t0 _
	shift 3
	ulp_modprobe nvme-rdma || return
	t0=$(date +%s)
	timeout 120 nvme connect -t rdma -a "$addr" -s "$svcid" -n "$nqn" \
		--hostnqn="$NVME_HOSTNQN" --hostid="$NVME_HOSTID" "$@" >/dev/null
	st=$?
	if [ "$st" = 0 ]; then
		ulp_undo_add "nvme:$nqn" "nvme_disconnect $(printf '%q' "$nqn")"
		# Namespaces are scanned after nvme connect returns.
		for _ in $(seq 300); do
			[ -n "$(nvme_namespaces "$nqn")" ] && return 0
			sleep 0.1
		done
		echo "nvme_connect: no namespace of $nqn appeared within 30 s" >&2
		st=1
	fi
	echo "nvme_connect: failed (status $st) after $(($(date +%s) - t0)) s; the kernel's last NVMe and RDMA lines:" >&2
	dmesg -t | grep -iE 'nvme|rdma|rsiw|iw_cm|mpa' | tail -n 20 >&2
	return "$st"
}

# nvme_disconnect NQN: disconnect every controller of NQN.
nvme_disconnect() {
	ulp_undo_drop "nvme:$1"
	timeout 120 nvme disconnect -n "$1" >/dev/null
}

# nvme_ctrls NQN: the controllers (nvme0, ...) of the subsystem NQN, one a line.
nvme_ctrls() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && echo "${c##*/}"
	done
	return 0
}

# nvme_namespaces NQN: the block devices (/dev/nvmeXnY) of the connected
# subsystem NQN, in namespace ID order, one a line.
nvme_namespaces() {
	local b
	for b in /sys/block/nvme*n*; do
		# Namespace disks only (not the per-path nvmeXcYnZ of multipath); the
		# disk's parent is its controller or, with multipath, its subsystem.
		[[ $(basename "$b") =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
		[ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
		echo "$(cat "$b/nsid" 2>/dev/null || echo 0) /dev/$(basename "$b")"
	done | sort -n | awk '{ print $2 }'
}

# ---------------------------------------------------------------- SMB server (ksmbd)

SMB_USER=root
SMB_PASS=rsiw-selftest
_smb_dir=

# smb_server_start EXPORT SHARE: ksmbd serving the directory EXPORT as SHARE
# to $SMB_USER (password $SMB_PASS), SMB 3 only, without multichannel; its
# configuration and user database in a directory of its own (the root file
# system may be read-only). ksmbd picks its RDMA port (5445 for iWARP) when an
# RDMA device appears and listens when it starts: make the device first, and
# wait for smb_listening. Stopped at cleanup.
smb_server_start() {
	local export=$1 share=$2
	_smb_dir=$(mktemp -d /run/rsiw-ksmbd.XXXXXX) || return
	ulp_undo_add smb-server smb_server_stop
	cat >"$_smb_dir/ksmbd.conf" <<EOF || return
[global]
	server min protocol = SMB3
	server multi channel support = no
[$share]
	path = $export
	read only = no
	valid users = $SMB_USER
EOF
	ksmbd.adduser -a "$SMB_USER" -p "$SMB_PASS" -i "$_smb_dir/pwd.db" -c "$_smb_dir/ksmbd.conf" \
		>/dev/null || return
	ulp_modprobe ksmbd || return
	ksmbd.mountd -c "$_smb_dir/ksmbd.conf" -u "$_smb_dir/pwd.db"
}

# smb_server_stop: stop ksmbd's user space and its kernel server, and wait
# until the module can go.
smb_server_stop() {
	local st=0
	ulp_undo_drop smb-server
	ksmbd.control -s >/dev/null 2>&1
	ulp_wait 30 eval '! pgrep -x ksmbd.mountd >/dev/null' || { echo "ksmbd.mountd is still running" >&2; st=1; }
	rm -rf "$_smb_dir"
	_smb_dir=
	return $st
}

# smb_listening DEV: ksmbd's RDMA listener is up on DEV (a CM id on port 5445).
smb_listening() {
	timeout 20 rdma res show cm_id 2>/dev/null |
		grep -qE "^link $1/[-0-9]+ .*state LISTEN .*src-addr [^ ]*:5445( |\$)"
}

# ---------------------------------------------------------------- SMB client (cifs)

# smb_mount ADDR SHARE DIR: mount //ADDR/SHARE on DIR (made) over SMB Direct,
# SMB 3.1.1, as $SMB_USER; unmounted at cleanup.
smb_mount() {
	ulp_modprobe cifs && mkdir -p "$3" &&
		mount -t cifs "//$1/$2" "$3" -o "rdma,vers=3.1.1,username=$SMB_USER,password=$SMB_PASS" ||
		return
	ulp_undo_add "smb:$3" "umount -f $(printf '%q' "$3")"
}

# smb_umount DIR: unmount the share on DIR.
smb_umount() {
	umount "$1" && ulp_undo_drop "smb:$1"
}

# smb_client_idle: no cifs connection thread (cifsd) is left. A connection
# that lost its server goes on trying to reconnect (every 3 s) after the
# umount until its thread notices, and holds the cifs module till then.
smb_client_idle() {
	! pgrep -x cifsd >/dev/null
}

# smb_writes: the writes cifs sent to its servers so far (its Stats).
smb_writes() {
	awk '/Writes:/ { for (i = 1; i <= NF; i++) if ($i == "Writes:") n += $(i + 1) } END { print n + 0 }' \
		/proc/fs/cifs/Stats 2>/dev/null
}

# smb_writer WHAT FILE OUT: fio writing FILE on a cifs mount in 1 KiB blocks
# with direct I/O, one at a time, in the background (fio_pid, output in OUT),
# and a TAP line once cifs sent 32 writes (else fio stopped and status 1).
# 1 KiB is below cifs's RDMA read/write threshold, so no write holds an MR:
# with MRs in use, cifs 6.12 hangs when its connection drops (testing.rst).
smb_writer() {
	local base
	base=$(smb_writes)
	fio --name=smb-writer --filename="$2" --rw=write --bs=1k --size=64m --direct=1 \
		--ioengine=psync --time_based --runtime=3600 >"$3" 2>&1 &
	fio_pid=$!
	tap_wait "$1: fio writing 1 KiB blocks on the share, 32 writes sent" 60 \
		eval '[ "$(smb_writes)" -ge $((base + 32)) ]' && return 0
	tap_diag "$(cat "$3")" "$(cat /proc/fs/cifs/Stats 2>&1)"
	stop_fio
	return 1
}

# smb_direct_session: cifs's DebugData shows a session on the SMBDirect
# transport.
smb_direct_session() {
	grep -q 'SMBDirect (in hex) protocol version' /proc/fs/cifs/DebugData
}

# ---------------------------------------------------------------- iSER target (LIO)

# LIO is configured through its configfs, as targetcli does underneath (each
# targetcli start takes 5 to 10 s under TCG, the first in a VM 30 s or more).
LIO_CFS=/sys/kernel/config/target

# iser_target_create IQN SIZE_MB: an iSCSI target IQN (LIO) with one LUN, a
# SIZE_MB MiB ramdisk (backstore rsiw_iser), open to every initiator without
# authentication, enabled; no portal yet (iser_portal). Cleared at cleanup.
iser_target_create() {
	local iqn=$1 mb=$2 rd=$LIO_CFS/core/rd_mcp_0/rsiw_iser tpg=$LIO_CFS/iscsi/$1/tpgt_1 a
	ulp_modprobe target_core_mod && ulp_modprobe iscsi_target_mod && ulp_modprobe ib_isert || return
	ulp_undo_add iser-target iser_target_clear
	# A ramdisk of 4 KiB pages; configfs makes the HBA rd_mcp_0 with its first device.
	mkdir -p "$rd" && echo "rd_pages=$((mb * 256))" >"$rd/control" && echo 1 >"$rd/enable" &&
		mkdir -p "$tpg/lun/lun_0" && ln -s "$rd" "$tpg/lun/lun_0/rsiw_iser" || return
	for a in authentication=0 generate_node_acls=1 demo_mode_write_protect=0 cache_dynamic_acls=1; do
		echo "${a#*=}" >"$tpg/attrib/${a%=*}" || { echo "iser_target_create: cannot set $a" >&2; return 1; }
	done
	echo 1 >"$tpg/enable"
}

# iser_target_clear: remove every target (its portals, LUNs and portal
# groups) and the ramdisk backstores, the iSCSI fabric's configfs directory
# (it holds iscsi_target_mod), and the namespace of the iSCSI/TCP listeners.
iser_target_clear() {
	local st=0 t tpg d
	if [ -d $LIO_CFS/iscsi ]; then
		for t in "$LIO_CFS"/iscsi/iqn.*; do
			[ -d "$t" ] || continue
			for tpg in "$t"/tpgt_*; do
				[ -d "$tpg" ] || continue
				echo 0 >"$tpg/enable" 2>/dev/null
				for d in "$tpg"/np/*; do
					[ -d "$d" ] && { rmdir "$d" || st=1; }
				done
				for d in "$tpg"/lun/lun_*; do
					[ -d "$d" ] || continue
					find "$d" -maxdepth 1 -type l -delete
					rmdir "$d" || st=1
				done
				rmdir "$tpg" || st=1
			done
			rmdir "$t" || st=1
		done
		rmdir $LIO_CFS/iscsi || st=1
	fi
	for d in "$LIO_CFS"/core/rd_mcp_*/*/; do
		[ -d "$d" ] && { rmdir "$d" || st=1; }
	done
	for d in "$LIO_CFS"/core/rd_mcp_*; do
		[ -d "$d" ] && { rmdir "$d" || st=1; }
	done
	((st == 0)) || echo "iser_target_clear: LIO configfs entries left:" \
		"$(find "$LIO_CFS/iscsi" "$LIO_CFS/core" -mindepth 1 -maxdepth 3 2>&1 | head -n 20)" >&2
	if [ -e "/run/netns/$ISER_TCP_NETNS" ]; then
		ip netns delete "$ISER_TCP_NETNS" || st=1
	fi
	return $st
}

# iser_portal ADDR PORT IQN: a portal ADDR:PORT on IQN's first portal group
# with iSER enabled. LIO opens the portal's iSCSI/TCP listener on ADDR:PORT
# before it opens isert's; on a software iWARP device, whose listener is a TCP
# socket too, the two would collide (see iser_portal_same_ns). So the portal
# is made from the network namespace ISER_TCP_NETNS, where LIO opens the TCP
# listener (in the namespace of the process that makes the portal), and iSER
# is enabled from this one: isert listens through the RDMA core in init_net,
# and the C siw opens its listener in the namespace of the process that
# enables iSER (rsiw in its netdev's). The administrator's guide shows the
# same with targetcli.
iser_portal() {
	local np=$LIO_CFS/iscsi/$3/tpgt_1/np/$1:$2
	if [ ! -e "/run/netns/$ISER_TCP_NETNS" ]; then
		ip netns add "$ISER_TCP_NETNS" &&
			ip netns exec "$ISER_TCP_NETNS" sysctl -qw net.ipv4.ip_nonlocal_bind=1 || return
	fi
	# nsenter, not ip netns exec: that mounts another /sys, without configfs.
	nsenter --net="/run/netns/$ISER_TCP_NETNS" mkdir "$np" || return
	echo 1 >"$np/iser" || { echo "iser_portal: cannot enable iSER on the portal $1:$2" >&2; return 1; }
}

# iser_portal_same_ns ADDR PORT IQN: from this namespace, make a portal
# ADDR:PORT (LIO opens its iSCSI/TCP listener), try to enable iSER on it, and
# remove it; print what the write of the iser attribute said ("enable iser:
# ok" or its error). Status 1 when the portal could not be made or is still
# there.
iser_portal_same_ns() {
	local np=$LIO_CFS/iscsi/$3/tpgt_1/np/$1:$2 err
	mkdir "$np" || return
	if err=$( (echo 1 >"$np/iser") 2>&1); then echo "enable iser: ok"; else echo "enable iser: $err"; fi
	rmdir "$np"
	[ ! -e "$np" ] || { echo "iser_portal_same_ns: the portal $1:$2 is still there" >&2; return 1; }
}

# ---------------------------------------------------------------- iSER initiator (open-iscsi)

_iser_iscsid_pid=

# iser_initiator_start: iscsid with this VM's own /etc/iscsi (a tmpfs: the
# root file system may be read-only) and a fixed initiator name, and the iser
# transport loaded. Stopped at cleanup, after logging out of every session.
iser_initiator_start() {
	local conf
	ulp_modprobe ib_iser || return
	conf=$(cat /etc/iscsi/iscsid.conf 2>/dev/null)
	mount -t tmpfs -o size=4M,mode=0755 iscsi-etc /etc/iscsi || return
	ulp_undo_add iser-initiator iser_initiator_stop
	printf '%s\n' "$conf" >/etc/iscsi/iscsid.conf &&
		echo "InitiatorName=$ISER_INITIATOR" >/etc/iscsi/initiatorname.iscsi || return
	mkdir -p /run/lock/iscsi || return
	# In a session of its own: when a test stopped an iscsid started in its
	# process group, the test died of SIGTERM with it.
	setsid iscsid -f >>/run/rsiw-iscsid.log 2>&1 &
	_iser_iscsid_pid=$!
	# iscsiadm exits with 20 while it cannot reach iscsid.
	ulp_wait 20 eval 'iscsiadm -m session >/dev/null 2>&1; [ $? != 20 ]' || {
		echo "iscsid does not answer:" "$(cat /run/rsiw-iscsid.log)" >&2
		return 1
	}
}

# iser_initiator_stop: log out of every session, stop iscsid, drop /etc/iscsi.
iser_initiator_stop() {
	local st=0
	ulp_undo_drop iser-initiator
	if iscsiadm -m session >/dev/null 2>&1; then
		timeout 60 iscsiadm -m node --logoutall=all >/dev/null || st=1
	fi
	if [ -n "$_iser_iscsid_pid" ]; then
		timeout 20 iscsiadm -k 0 >/dev/null 2>&1
		_ulp_kill "$_iser_iscsid_pid"
	fi
	_iser_iscsid_pid=
	ulp_wait 10 eval '! pgrep -x iscsid >/dev/null' || { echo "iscsid is still running" >&2; st=1; }
	rm -f /run/rsiw-iscsid.log
	if grep -q ' /etc/iscsi tmpfs ' /proc/mounts; then
		umount /etc/iscsi || st=1
	fi
	return $st
}

# iser_discover ADDR PORT IQN: SendTargets discovery over iSER at ADDR:PORT
# finds IQN (and records its node).
iser_discover() {
	local out
	out=$(timeout 120 iscsiadm -m discovery -t sendtargets -p "$1:$2" -I iser 2>&1) || {
		echo "$out" >&2
		return 1
	}
	grep -qE "^$1:$2,[0-9]+ $3\$" <<<"$out" || {
		echo "iser_discover: $3 not found at $1:$2:" "$out" >&2
		return 1
	}
}

# iser_login ADDR PORT IQN: log in to IQN at ADDR:PORT through the iser
# interface (the node record is made if discovery did not).
iser_login() {
	local addr=$1 port=$2 iqn=$3
	if ! iscsiadm -m node -T "$iqn" -p "$addr:$port" -I iser >/dev/null 2>&1; then
		iscsiadm -m node -o new -T "$iqn" -p "$addr:$port" -I iser >/dev/null || return
	fi
	timeout 120 iscsiadm -m node -T "$iqn" -p "$addr:$port" -I iser --login >/dev/null
}

# iser_logout ADDR PORT IQN: log out of IQN's session at ADDR:PORT.
iser_logout() {
	timeout 120 iscsiadm -m node -T "$3" -p "$1:$2" -I iser --logout >/dev/null
}

# _iser_session_disk IQN: the disk name (sdX) SCSI attached for the session
# to IQN, if any.
_iser_session_disk() {
	timeout 20 iscsiadm -m session -P 3 2>/dev/null |
		awk -v t="$1" '/^Target: / { on = ($2 == t) } on && /Attached scsi disk/ { print $4; exit }'
}

# iser_disk IQN: the disk (/dev/sdX) of the session to IQN, once SCSI has
# scanned it (within 30 s).
iser_disk() {
	local iqn=$1 d
	ulp_wait 30 eval 'd=$(_iser_session_disk "$iqn") && [ -n "$d" ] && [ -b "/dev/$d" ]' || {
		echo "iser_disk: no disk for $iqn" >&2
		return 1
	}
	echo "/dev/$d"
}
