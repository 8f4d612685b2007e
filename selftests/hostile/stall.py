#!/usr/bin/env python3
"""A peer that stalls the device's transmit path: it opens --conns connections
to the test ULP's server (selftests/ulp), each with a receive buffer of a few
kilobytes, asks each for a target region of --size octets, sends one RDMA Read
Request for all of it, and never reads again. The server's Read Responses fill
the peer's window and then the device's send buffer: a zero window, which a
device must ride out without holding a worker per connection.

Prints "stalled N" once every Read Request is out, then waits on standard
input: a line "close K" resets K more connections (SO_LINGER 0); at the end of
the input it resets the rest and exits. Framing, MPA and the control protocol
come from peer.py."""

import argparse
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402 (the hostile peer, next to this file)

# The smallest receive buffer Linux grants (it doubles the request and applies
# a floor): the window closes after a few kilobytes.
RCVBUF = 4096


def stalled_conn(args, log):
    """One connection whose Read Response can never be received."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    s.settimeout(peer.TIMEOUT)
    try:
        s.connect((args.addr, args.port))
    except OSError as e:
        raise peer.SetupError("TCP connect to %s:%d: %s" % (args.addr, args.port, e)) from e
    c = peer.Conn.accepted(s, log)
    c._mpa("write", True, 4, 4, peer.HELLO)
    kind, a = c.request(peer.K_TARGET, args.size, peer.SEED, peer.ACC_READ, 0)
    if kind != peer.K_TARGET_IS:
        raise peer.SetupError("target request answered with type %d" % kind)
    iova, rkey = a[0], a[1]
    c.read_request(peer.SINK_STAG, 0, args.size, rkey, iova)
    return c


def reset(c):
    """Closes with a reset, discarding what the device sent."""
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.sock.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default="198.18.0.1")
    ap.add_argument("--port", type=int, default=20888)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()

    def log(m):
        if args.verbose:
            print("# " + m, flush=True)

    conns = []
    try:
        for _ in range(args.conns):
            conns.append(stalled_conn(args, log))
    except (peer.SetupError, peer.Mismatch, peer.Closed, OSError) as e:
        print("setup failed after %d connections: %s" % (len(conns), e), flush=True)
        for c in conns:
            reset(c)
        return 1
    print("stalled %d" % len(conns), flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "close":
            for _ in range(min(int(words[1]), len(conns))):
                reset(conns.pop())
            print("open %d" % len(conns), flush=True)
    for c in conns:
        reset(c)
    return 0


if __name__ == "__main__":
    sys.exit(main())
