#!/usr/bin/env python3
"""A connection flood against the test ULP's server (or, with --any-ulp, another
ULP's listener, such as knfsd's): --idle TCP connections
from --source that never send an MPA Request, then --mpa connections (from
the default source) that complete the MPA exchange and then stay silent.

Prints "idle N K" once N connects were made, K of them still open (the
device may reset those beyond its limit at once, which a connect that has not
returned yet reports as its failure), and "mpa M" once M connections are
through MPA, then waits on standard input; at its end every connection is
reset (SO_LINGER 0) and the peer exits. Framing, MPA and the control protocol
come from peer.py."""

import argparse
import os
import resource
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402 (the hostile peer, next to this file)


def reset(s):
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default="198.18.0.1")
    ap.add_argument("--port", type=int, default=20890)
    ap.add_argument("--source", default="198.18.0.2")
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--mpa", type=int, default=300)
    ap.add_argument("--any-ulp", action="store_true",
                    help="the listener is another ULP's: accept any private data in its MPA Replies")
    args = ap.parse_args()
    want = args.idle + args.mpa + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))

    idle = []
    attempted = 0
    for _ in range(args.idle):
        attempted += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((args.source, 0))
        s.settimeout(peer.TIMEOUT)
        try:
            s.connect((args.addr, args.port))
        except OSError:
            s.close()
            continue
        idle.append(s)
    print("idle %d %d" % (attempted, len(idle)), flush=True)

    conns = []
    try:
        for _ in range(args.mpa):
            conns.append(peer.Conn(args.addr, args.port, lambda m: None,
                                   any_reply_data=args.any_ulp))
    except (peer.SetupError, peer.Mismatch, peer.Closed, OSError) as e:
        print("# MPA connection %d failed: %s" % (len(conns) + 1, e), flush=True)
    print("mpa %d" % len(conns), flush=True)

    for _ in sys.stdin:
        pass
    for s in idle:
        reset(s)
    for c in conns:
        reset(c.sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
