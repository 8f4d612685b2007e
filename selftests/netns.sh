#!/usr/bin/env bash
# RDMA devices in network namespaces, over veth pairs that netem shapes. Two
# namespaces, rnsa and rnsb, joined by two veth pairs: nsv0 198.18.20.1 (rnsa)
# to nsv1 198.18.20.2 (rnsb), with a device under test on each end, and nsv2
# 198.18.21.1 (rnsa) to nsv3 198.18.21.2 (rnsb), with a device under test on
# nsv2 and a C siw device on nsv3. Each device is added from inside its
# namespace; the initial namespace has none of the addresses; moving a device
# to another namespace is refused (EOPNOTSUPP). A device
# listens and connects in the namespace of its netdev: the test ULP's server,
# started from rnsa, listens there (ss in rnsa shows the socket, the initial
# namespace has none), and its client, started from rnsb, runs SEND, WRITE
# and READ across, every byte checked; each device counts the connections.
# The same between the device under test and siw, both ways. Then netem on
# all four veth ends (2 ms delay with 1 ms jitter, which reorders; 2 % loss;
# 1 % duplication) under 4 MiB WRITE, READ and SEND: TCP repairs the stream,
# every byte must still check, and netem must have dropped packets (else the
# phase proved nothing). Then netem off, and rsiwa's FINs dropped as they
# arrive on nsv1 while two connections close: its ends must keep
# retransmitting them as orphans, and end once they get through. Last,
# deleting rnsb dismantles it: the veth pairs go, and all four devices with
# their netdevs; no hang, no splat, no leak.
# timeout: 900
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma ip tc ss nsenter

# shellcheck source=ulp/ulp.sh
. "$(dirname "$0")/ulp/ulp.sh"

nsa=rnsa nsb=rnsb a=198.18.20.1 b=198.18.20.2 a2=198.18.21.1 b2=198.18.21.2 port=20897
deva=rsiwa devb=rsiwb deva2=rsiwa2 siwb=siwb
trap 'ULP_NETNS=; ulp_unload; ip netns del $nsa 2>/dev/null; ip netns del $nsb 2>/dev/null; cleanup; modprobe -r siw 2>/dev/null' EXIT

tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
tap_check "load siw" modprobe siw || tap_bail "cannot load siw"
veth_pair() { # END_A ADDR_A END_B ADDR_B MAC_SUFFIX
	ip -n "$nsa" link add "$1" address "02:52:53:49:57:$5" type veth peer name "$3" \
		address "02:52:53:49:58:$5" netns "$nsb" || return
	ip -n "$nsa" addr add "$2/24" dev "$1" && ip -n "$nsa" link set "$1" up &&
		ip -n "$nsb" addr add "$4/24" dev "$3" && ip -n "$nsb" link set "$3" up
}
tap_check "namespaces $nsa and $nsb" eval 'ip netns add $nsa && ip netns add $nsb' ||
	tap_bail "cannot create the namespaces"
tap_check "veth pair nsv0 ($a, $nsa) / nsv1 ($b, $nsb)" veth_pair nsv0 "$a" nsv1 "$b" 40 ||
	tap_bail "cannot create the veth pair"
tap_check "veth pair nsv2 ($a2, $nsa) / nsv3 ($b2, $nsb)" veth_pair nsv2 "$a2" nsv3 "$b2" 42 ||
	tap_bail "cannot create the second veth pair"
link_in() { # NS DEV NETDEV [TYPE]
	ip netns exec "$1" rdma link add "$2" type "${4:-$RSIW_LINK_TYPE}" netdev "$3" || return
	_links+=("$2")
}
tap_check "rdma link add $deva on nsv0, from $nsa" link_in "$nsa" "$deva" nsv0 || tap_bail "no $deva"
tap_check "rdma link add $devb on nsv1, from $nsb" link_in "$nsb" "$devb" nsv1 || tap_bail "no $devb"
tap_check "rdma link add $deva2 on nsv2, from $nsa" link_in "$nsa" "$deva2" nsv2 || tap_bail "no $deva2"
tap_check "rdma link add $siwb type siw on nsv3, from $nsb" link_in "$nsb" "$siwb" nsv3 siw ||
	tap_bail "no $siwb"
all_active() {
	local d
	for d in "$deva" "$devb" "$deva2" "$siwb"; do port_state_is "$d" ACTIVE || return; done
}
tap_wait "$deva, $devb, $deva2 and $siwb ACTIVE" 5 all_active

# The RDMA core moves a device to another namespace only if it can disassociate
# user contexts, and never in its default shared mode: refused, the device
# stays where it was.
out=$(rdma dev set "$deva" netns "$nsb" 2>&1)
st=$?
tap_result "$( ((st != 0)) && grep -qi 'not supported' <<<"$out"; echo $?)" \
	"rdma dev set $deva netns $nsb is refused with EOPNOTSUPP" "status $st: $out"

[ -f "$ULP_KO" ] || tap_bail "$ULP_KO does not exist (make module)"
kmsg_mark
ulp_insmod || tap_bail "cannot load the ULP"
ULP_NETNS=$nsa tap_check "ULP server on $a:$port, started from $nsa" ulp_ctl "server addr=$a port=$port" ||
	tap_bail "cannot start the ULP server in $nsa"
listening() { # NS: the listeners on $port there (the initial namespace without NS)
	if [ -n "$1" ]; then ip netns exec "$1" ss -Hltn "sport = :$port"; else ss -Hltn "sport = :$port"; fi
}
tap_match "$deva's listener is in $nsa" "$a:$port" "$(listening "$nsa")"
out=$(listening "")
tap_result "$([ -z "$out" ]; echo $?)" "no listener on port $port in the initial namespace" "$out"

CM=(cm_established cm_failed)
hw_read "$deva" "${CM[@]}" && esta0=$HW_NOW
hw_read "$devb" "${CM[@]}" && estb0=$HW_NOW
client="client addr=$a port=$port"
tests=("send size=65537 sge=2" "write size=65537 sge=2" "read size=65537")
for t in "${tests[@]}"; do
	ULP_NETNS=$nsb ulp_run "$devb to $deva: ${t%% *}" "$client test=$t"
done
# Three connections: one end of each on either device.
hw_read "$deva" "${CM[@]}" && tap_match "$deva counted 3 connections, none failed" \
	"^cm_established\+3\$" "$(hw_deltas "$esta0" "$HW_NOW")"
hw_read "$devb" "${CM[@]}" && tap_match "$devb counted 3 connections, none failed" \
	"^cm_established\+3\$" "$(hw_deltas "$estb0" "$HW_NOW")"

# The device under test and the C siw, across the second pair: siw's client
# (from rnsb) to a server on $deva2, and $deva2's client (from rnsa) to a
# server on siw.
ULP_NETNS=$nsa tap_check "ULP server on $deva2 $a2:$port, started from $nsa" \
	ulp_ctl "server addr=$a2 port=$port" || tap_bail "cannot start the ULP server on $deva2"
ULP_NETNS=$nsb tap_check "ULP server on $siwb $b2:$port, started from $nsb" \
	ulp_ctl "server addr=$b2 port=$port" || tap_bail "cannot start the ULP server on $siwb"
for t in "${tests[@]}"; do
	ULP_NETNS=$nsb ulp_run "$siwb to $deva2: ${t%% *}" "client addr=$a2 port=$port test=$t"
	ULP_NETNS=$nsa ulp_run "$deva2 to $siwb: ${t%% *}" "client addr=$b2 port=$port test=$t"
done

# Every veth end shaped: WRITE and SEND data flows from the client's end,
# READ responses from the server's.
netem="delay 2ms 1ms loss 2% duplicate 1%"
ends=("$nsa nsv0" "$nsb nsv1" "$nsa nsv2" "$nsb nsv3")
shape() {
	local e ns nd
	modprobe sch_netem 2>/dev/null
	for e in "${ends[@]}"; do
		read -r ns nd <<<"$e"
		ip netns exec "$ns" tc qdisc add dev "$nd" root netem $netem || return
	done
}
tap_check "netem on nsv0 to nsv3: $netem" shape || tap_bail "no netem"
for t in "write size=4194304 sge=1" "read size=4194304" "send size=4194304 sge=2"; do
	ULP_NETNS=$nsb ulp_run "netem, $devb to $deva: ${t%% *} 4 MiB" "$client test=$t"
done
for t in "write size=4194304 sge=1" "read size=4194304"; do
	ULP_NETNS=$nsb ulp_run "netem, $siwb to $deva2: ${t%% *} 4 MiB" "client addr=$a2 port=$port test=$t"
	ULP_NETNS=$nsa ulp_run "netem, $deva2 to $siwb: ${t%% *} 4 MiB" "client addr=$b2 port=$port test=$t"
done
# dropped NS DEV: the packets netem dropped on DEV.
dropped() {
	ip netns exec "$1" tc -s qdisc show dev "$2" | awk '/dropped/ { sub(",", "", $7); print $7; exit }'
}
for p in "nsv0 nsv1" "nsv2 nsv3"; do
	read -r ea eb <<<"$p"
	da=$(dropped "$nsa" "$ea") db=$(dropped "$nsb" "$eb")
	tap_result "$([ $((${da:-0} + ${db:-0})) -gt 0 ]; echo $?)" \
		"netem dropped packets on $ea/$eb under the transfers ($ea ${da:-?}, $eb ${db:-?})" \
		"$(ip netns exec "$nsa" tc -s qdisc show dev "$ea")" "$(ip netns exec "$nsb" tc -s qdisc show dev "$eb")"
done

# A lost FIN must be retransmitted after the device has released the socket
# (TCP alone then finishes the close, an orphan), as for a user socket: with
# netem off, $deva's FINs to $devb are dropped as they arrive on nsv1 (a u32
# filter on TCP segments from port $port with FIN set: u32's offsets count
# from the IP header, which has no options here; at ingress, so that the
# sender counts them as sent, as on a lossy link) while the client on $devb
# closes two connections. $deva's ends are then orphans in LAST-ACK, each with
# a timer armed; once the filter is gone, their FINs get through and every
# socket on the port ends within 60 s (LISTEN and TIME-WAIT aside).
unshape() {
	local e ns nd
	for e in "${ends[@]}"; do
		read -r ns nd <<<"$e"
		ip netns exec "$ns" tc qdisc del dev "$nd" root || return
	done
}
tap_check "netem off" unshape
fin_drop() { # add | del
	if [ "$1" = add ]; then
		modprobe -a sch_ingress cls_u32 act_gact 2>/dev/null
		ip netns exec "$nsb" tc qdisc add dev nsv1 clsact &&
			ip netns exec "$nsb" tc filter add dev nsv1 ingress protocol ip prio 1 u32 \
				match ip protocol 6 0xff match ip sport "$port" 0xffff \
				match u8 0x01 0x01 at 33 action drop
	else
		ip netns exec "$nsb" tc qdisc del dev nsv1 clsact
	fi
}
# closing NS STATE...: the sockets of port $port in NS in STATEs (ss -o -e:
# with timers and inodes; inode 0 is an orphan).
closing() {
	local ns=$1 st=() s
	shift
	for s in "$@"; do st+=(state "$s"); done
	ip netns exec "$ns" ss -tanoeH "${st[@]}" "( sport = :$port or dport = :$port )" 2>/dev/null
}
orphans_in_last_ack() { [ "$(closing "$nsa" last-ack | grep -c ' ino:0 ')" -ge 2 ]; }
tap_check "drop $deva's FINs on arrival at nsv1 (tc u32, gact)" fin_drop add || tap_bail "no FIN filter"
for t in "write size=65537 sge=1" "send size=65537 sge=1"; do
	ULP_NETNS=$nsb ulp_run "FINs from $deva dropped, $devb to $deva: ${t%% *}" "$client test=$t"
done
tap_wait "$deva's ends of both connections are orphans in LAST-ACK" 20 orphans_in_last_ack ||
	tap_diag "$(closing "$nsa" all)"
out=$(closing "$nsa" last-ack fin-wait-1 closing)
tap_result "$(grep -q . <<<"$out" && ! grep -qv 'timer:(' <<<"$out"; echo $?)" \
	"each of them still retransmits its FIN: a timer is armed" "$out"
tap_check "stop dropping FINs" fin_drop del
left() { closing "$nsa" all; closing "$nsb" all; }
gone_but_tw() { ! left | grep -qvE '^(LISTEN|TIME-WAIT) '; }
tap_wait "every socket on port $port ended (LISTEN and TIME-WAIT aside)" 60 gone_but_tw ||
	tap_diag "$(left)"

tap_check "stop the ULP servers" ulp_ctl stop
# Deleting rnsb dismantles it (nothing holds it): its veth ends go, and with
# them the pairs, whose unregistration waits for every device to let go.
tap_check "ip netns del $nsb" ip netns del "$nsb"
gone() {
	local d
	for d in "$deva" "$devb" "$deva2" "$siwb"; do ! rdma_dev_exists "$d" || return; done
	! ip -n "$nsa" link show nsv0 >/dev/null 2>&1 && ! ip -n "$nsa" link show nsv2 >/dev/null 2>&1
}
tap_wait "$nsb dismantled: both veth pairs and all four devices are gone" 60 gone
log=$(kmsg_since_mark)
for p in "$deva nsv0" "$devb nsv1" "$deva2 nsv2"; do
	read -r d nd <<<"$p"
	if rsiw_is_reference; then
		tap_skip "$d said it goes with $nd" "rsiw's own log line"
	else
		tap_match "$d said it goes with $nd" "$d: netdev $nd is going away" "$log"
	fi
done
tap_check "unload siw" modprobe -r siw
tap_check "rmmod rsiw_ulp" ulp_unload
check_no_splat "no kernel splat"
tap_done
