#!/usr/bin/env python3
"""Create, rename, list and remove N files in DIR (fs_churn in ulp-setup.sh).

Usage: churn.py DIR N SERVER_DIR. SERVER_DIR is the server's view of DIR (a
network file system's export): after the renames both must list exactly the
renamed files, some of which are read back, and after the removals both must
be empty. Eight threads keep several requests in flight, as a real workload
does (and TCG time is dear). Prints the time of each phase; exits non-zero
with the reason when a check fails.
"""
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

d, n, server = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pool = ThreadPoolExecutor(8)


def each(f):
    for _ in pool.map(f, range(n), chunksize=64):
        pass


def create(i):
    fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, b"%d\n" % i)
    os.close(fd)


t = [time.monotonic()]
each(create)
t.append(time.monotonic())
each(lambda i: os.rename(f"{d}/f{i}", f"{d}/renamed-{i}"))
t.append(time.monotonic())
want = {f"renamed-{i}" for i in range(n)}
names = set(os.listdir(d))
if names != want:
    sys.exit(f"client lists {len(names)} entries, {len(names ^ want)} differ from the expected")
seen = set(os.listdir(server))
if seen != want:
    sys.exit(f"server has {len(seen)} entries, {len(seen ^ want)} differ from the expected")
for i in range(0, n, max(1, n // 97)):
    with open(f"{d}/renamed-{i}", "rb") as f:
        if f.read() != b"%d\n" % i:
            sys.exit(f"renamed-{i}: wrong content")
each(lambda i: os.unlink(f"{d}/renamed-{i}"))
t.append(time.monotonic())
if os.listdir(d) or os.listdir(server):
    sys.exit("files left after unlink")
print("create %.1f s, rename %.1f s, unlink %.1f s" % (t[1] - t[0], t[2] - t[1], t[3] - t[2]))
