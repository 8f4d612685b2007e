#!/usr/bin/env python3
"""make bench's report: reads raw.csv, cpu.csv and env written by
qemu/guest-bench.sh in one results directory and writes there results.csv,
results.json and results.png (a bar chart, when matplotlib is available), then
prints the table with the ratios rsiw/siw (CRC on for both, and off for both)
and rsiw/TCP, and whether the speed goals hold.

A ratio is taken round by round (rsiw's round N over siw's round N: the rounds
alternate the drivers, so a host that slows down hits both alike) and shown as
the median over the rounds with its range; the speeds shown are medians too.
A row whose range is wider than SPREAD_MAX of its median is marked as too
noisy to judge, and so is a goal that hangs on such a row.

Usage: bench-report.py RESULTS_DIR [HOST_CPU]
"""
import csv
import json
import os
import statistics
import sys

ORDER = ["ulp-write", "ulp-read", "ulp-send", "ulp-ping", "perf-write", "perf-read", "perf-send",
         "perf-send-ev", "perf-lat", "nfs-seqwrite", "nfs-seqread",
         "nfs-randread", "nvme-seqwrite", "nvme-seqread", "nvme-randread", "smb-seqwrite",
         "smb-seqread", "smb-randread", "iser-seqwrite", "iser-seqread", "iser-randread"]
# (driver in raw.csv, column name)
DRIVERS = [("siw", "siw_crc_MBps"), ("rsiw", "rsiw_crc_MBps"),
           ("siw-nocrc", "siw_nocrc_MBps"), ("rsiw-nocrc", "rsiw_nocrc_MBps")]


# A ratio's range (max - min) over its median beyond which the row is too noisy to judge.
SPREAD_MAX = 0.25


def size_name(n):
    n = int(n)
    if n >= 1 << 20:
        return "%d MiB" % (n >> 20)
    if n < 1 << 10:
        return "%d B" % n
    return "%d KiB" % (n >> 10)


def ratio(a, b):
    return round(a / b, 2) if a is not None and b else None


def median(values):
    return statistics.median(values) if values else None


def round_ratios(num, den):
    """The ratio num/den of each round both measured (dicts round -> MB/s)."""
    return [num[r] / den[r] for r in sorted(num) if r in den and den[r] > 0]


def spread(ratios):
    """(median, min, max, too_noisy) of per-round ratios, or Nones without any."""
    if not ratios:
        return None, None, None, False
    m = statistics.median(ratios)
    lo, hi = min(ratios), max(ratios)
    return (round(m, 2), round(lo, 2), round(hi, 2),
            len(ratios) > 1 and m > 0 and (hi - lo) / m > SPREAD_MAX)


def goals(rows):
    """The issue's speed goals: each with the rows that miss it, or None if no row measured it."""
    def check(name, key, least, min_size):
        return check_rows(name, key, least, [r for r in rows if r["size"] >= min_size])
    return [
        check("rsiw/siw >= 1.0 on every row (CRC on for both)", "crc_rsiw_over_siw", 1.0, 0),
        check("rsiw/siw >= 1.2 at 64 KiB and above (CRC on for both)", "crc_rsiw_over_siw",
              1.2, 64 << 10),
        check("rsiw (CRC) at 1 MiB >= 0.8 of iperf3", "crc_rsiw_over_tcp", 0.8, 1 << 20),
        check_rows("latency (ulp-ping) rsiw/siw >= 1.0 (CRC on for both)", "crc_rsiw_over_siw",
                   1.0, [r for r in rows if r["workload"] == "ulp-ping"]),
        check_rows("user space (perftest) rsiw/siw >= 1.0, CRC on for both", "crc_rsiw_over_siw",
                   1.0, [r for r in rows if r["workload"].startswith("perf-")]),
        check_rows("user space (perftest) rsiw/siw >= 1.0, CRC off for both",
                   "nocrc_rsiw_over_siw", 1.0,
                   [r for r in rows if r["workload"].startswith("perf-")]),
    ]


def check_rows(name, key, least, rows):
    """A goal over the given rows: the rows that miss it (by their median ratio), or None if
    none was measured; and the measured rows too noisy to judge."""
    measured = [r for r in rows if r[key] is not None]
    noisy = [r for r in measured if r.get(key + "_noisy")]
    return (name, [r for r in measured if r[key] < least] if measured else None, noisy)


def work_rows(out):
    """Per (workload, size, driver): the medians over the rounds of the work per payload byte
    from counters.csv: tx copy, tx TCP copy, tx CRC, tx passes, rx placement, rx bounce, rx
    CRC, rx passes, batches per MiB, FPDUs per MiB."""
    per = {}
    try:
        with open(os.path.join(out, "counters.csv")) as f:
            for c in csv.DictReader(f):
                tx = int(c["tx_payload_bytes"])
                rx = int(c["rx_payload_bytes"])
                if tx <= 0 or rx <= 0:
                    continue
                copy = int(c["tx_payload_copied_bytes"]) / tx
                tcp = int(c["tx_tcp_copied_bytes"]) / tx
                tcrc = int(c["tx_crc_bytes"]) / tx
                bnc = int(c["rx_payload_bounced_bytes"]) / rx
                rcrc = int(c["rx_crc_bytes"]) / rx
                v = (copy, tcp, tcrc, copy + tcp + tcrc, 1.0, bnc, rcrc, 1.0 + bnc + rcrc,
                     int(c["tx_batches"]) * (1 << 20) / tx, int(c["tx_fpdus"]) * (1 << 20) / tx)
                per.setdefault((c["workload"], int(c["size"]), c["driver"]), []).append(v)
    except FileNotFoundError:
        return {}
    return {k: [statistics.median(col) for col in zip(*vs)] for k, vs in per.items()}


def by_row(per):
    """The items of a {(workload, size, driver): value} dict in the report's row order."""
    return sorted(per.items(), key=lambda kv: (
        ORDER.index(kv[0][0]) if kv[0][0] in ORDER else 99, kv[0][1], kv[0][2]))


def sched_rows(out):
    """Per (workload, size, driver): the medians over the rounds of sched.csv's columns, as
    {class: (run ms, wait ms)}, with "idle%" and "softirq%" as (share, None)."""
    per = {}
    try:
        with open(os.path.join(out, "sched.csv")) as f:
            for c in csv.DictReader(f):
                key = (c["workload"], int(c["size"]), c["driver"])
                wait = float(c["wait_ms"]) if c["wait_ms"] else None
                per.setdefault(key, {}).setdefault(c["class"], []).append(
                    (float(c["run_ms"]), wait))
    except FileNotFoundError:
        return {}
    return {k: {cls: (statistics.median(r for r, _ in vs),
                      None if vs[0][1] is None else statistics.median(w for _, w in vs))
                for cls, vs in classes.items()}
            for k, classes in per.items()}


def main():
    out = sys.argv[1]
    host_cpu = sys.argv[2] if len(sys.argv) > 2 else ""
    env = {}
    with open(os.path.join(out, "env")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            env[k] = v
    env["host_cpu"] = host_cpu
    # (workload, size, driver) -> {round: MB/s}
    samples = {}
    failed = []
    with open(os.path.join(out, "raw.csv")) as f:
        for row in csv.reader(f):
            if len(row) == 6:
                w, size, drv, _crc, rnd, v = row
            elif len(row) == 5:
                # Written before rounds were recorded: a key's Nth line is its round N.
                w, size, drv, _crc, v = row
                rnd = len(samples.get((w, int(size), drv), {})) + 1
            else:
                continue
            if float(v) <= 0:
                # A measurement that failed (the guest's log says why): not a speed.
                failed.append("%s %s %s round %s" % (w, size_name(size), drv, rnd))
                continue
            samples.setdefault((w, int(size), drv), {})[int(rnd)] = float(v)
    mbps = {k: median(list(v.values())) for k, v in samples.items()}
    tcp = mbps.get(("iperf3", 1 << 20, "tcp"))
    rounds = max((len(v) for v in samples.values()), default=0)
    rows = []
    keys = sorted({(w, s) for (w, s, d) in mbps if w != "iperf3"},
                  key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99, k[1]))
    for w, s in keys:
        r = {"workload": w, "size": s}
        for drv, col in DRIVERS:
            r[col] = mbps.get((w, s, drv))
        for key, num, den in (("crc_rsiw_over_siw", "rsiw", "siw"),
                              ("nocrc_rsiw_over_siw", "rsiw-nocrc", "siw-nocrc")):
            m, lo, hi, noisy = spread(round_ratios(samples.get((w, s, num), {}),
                                                   samples.get((w, s, den), {})))
            r[key], r[key + "_min"], r[key + "_max"], r[key + "_noisy"] = m, lo, hi, noisy
        r["crc_rsiw_over_tcp"] = ratio(r["rsiw_crc_MBps"], tcp) if s >= 1 << 20 else None
        rows.append(r)
    met = goals(rows)
    # (family, driver) -> {round: (busy, idle, steal)}
    cpu = {}
    try:
        with open(os.path.join(out, "cpu.csv")) as f:
            for row in csv.reader(f):
                if len(row) == 6:
                    fam, rnd, drv, busy, idle, steal = row
                    cpu.setdefault((fam, drv), {})[int(rnd)] = (
                        float(busy), float(idle), float(steal))
    except FileNotFoundError:
        pass
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["workload"])
        wr.writeheader()
        for r in rows:
            wr.writerow(r)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"env": env, "tcp_iperf3_MBps": tcp, "rows": rows,
                   "cpu": [{"family": fam, "driver": drv, "round": rnd, "busy_pct": b,
                            "idle_pct": i, "steal_pct": st}
                           for (fam, drv), per in sorted(cpu.items())
                           for rnd, (b, i, st) in sorted(per.items())],
                   "goals": [{"goal": g, "met": None if m is None else not m,
                              "missed_by": ["%s %s" % (r["workload"], size_name(r["size"]))
                                            for r in m or []],
                              "too_noisy": ["%s %s" % (r["workload"], size_name(r["size"]))
                                            for r in n]} for g, m, n in met]},
                  f, indent=2)

    def fmt(v, ratio=False):
        if v is None:
            return "-"
        return "%.2f" % v if ratio or v < 10 else "%.0f" % v

    print("rsiw benchmark (one VM boot, TCG; MB/s = 10^6 bytes/s)")
    print("kernel %s; guest CPU %s x%s; host CPU %s" % (
        env.get("kernel", "?"), env.get("guest_cpu", "?"), env.get("guest_cpus", "?"),
        host_cpu or "?"))
    print("CRC: %s" % env.get("crc", "?"))
    print("%s s per measurement, %d round(s), medians; iperf3 (TCP ceiling): %s MB/s" % (
        env.get("secs", "?"), rounds, fmt(tcp)))
    print()

    def span(r, key):
        if r[key] is None or r[key + "_min"] == r[key + "_max"]:
            return "-"
        return "%.2f-%.2f%s" % (r[key + "_min"], r[key + "_max"], "!" if r[key + "_noisy"] else "")
    hdr = ("workload", "size", "siw crc", "rsiw crc", "ratio", "range", "siw -", "rsiw -",
           "ratio", "range", "crc/TCP")
    line = "%-14s %7s %8s %9s %6s %11s %7s %7s %6s %11s %8s"
    print(line % hdr)
    for r in rows:
        print(line % (
            r["workload"], size_name(r["size"]), fmt(r["siw_crc_MBps"]),
            fmt(r["rsiw_crc_MBps"]), fmt(r["crc_rsiw_over_siw"], True),
            span(r, "crc_rsiw_over_siw"), fmt(r["siw_nocrc_MBps"]), fmt(r["rsiw_nocrc_MBps"]),
            fmt(r["nocrc_rsiw_over_siw"], True), span(r, "nocrc_rsiw_over_siw"),
            fmt(r["crc_rsiw_over_tcp"], True)))
    print("('-': without CRC; ratio: rsiw/siw, the median of the rounds' ratios; range: their")
    print(" lowest and highest, '!' when wider than %d %% of the median: too noisy to judge;" %
          round(SPREAD_MAX * 100))
    print(" crc/TCP: rsiw with CRC over iperf3)")
    print()
    if failed:
        print("failed measurements (left out): %s" % ", ".join(failed))
        print()
    if cpu:
        print("guest CPU while each driver ran (% busy / idle / steal, per round):")
        for (fam, drv), per in sorted(cpu.items()):
            print("  %-6s %-11s %s" % (fam, drv, "  ".join(
                "r%d %.0f/%.0f/%.0f" % (rnd, b, i, st) for rnd, (b, i, st) in sorted(per.items()))))
        print()
    work = work_rows(out)
    if work:
        print("work per payload byte on rsiw (medians of the rounds; both ends on one device):")
        print("  tx: copied by rsiw + copied by TCP + CRC = passes;  rx: placed (copies) +")
        print("  bounced + CRC = passes;  batches (sendmsg) and FPDUs per MiB of payload")
        wline = "  %-14s %7s %-10s %5s %5s %5s %6s  %5s %5s %5s %6s  %8s %8s"
        print(wline % ("workload", "size", "driver", "copy", "tcp", "crc", "passes",
                       "place", "bnc", "crc", "passes", "batch/M", "fpdu/M"))
        for (w, size, drv), v in by_row(work):
            print(wline % (w, size_name(size), drv, *("%.2f" % x for x in v[:8]),
                           "%.0f" % v[8], "%.0f" % v[9]))
        print("  (TCP also copies data sent by reference when it delivers it on this host:")
        print("  the loopback path orphans zero-copy pages; that copy is not counted)")
        print()
    sched = sched_rows(out)
    if sched:
        print("where the guest's CPU time went (medians of the rounds; ms on a CPU / ms runnable")
        print("but waiting for one): unbound workers (rsiw's transmit work), per-CPU workers")
        print("(rsiw's receive work), the C siw's transmit threads, ksoftirqd; and the shares")
        print("of idle and softirq time")
        sline = "  %-14s %7s %-10s %13s %13s %13s %13s %6s %8s"
        print(sline % ("workload", "size", "driver", "kworker/u", "kworker/N", "siw_tx",
                       "ksoftirqd", "idle%", "softirq%"))

        def rw(v):
            return "-" if v is None else "%.0f/%.0f" % v

        for (w, size, drv), v in by_row(sched):
            print(sline % (w, size_name(size), drv, rw(v.get("unbound-workers")),
                           rw(v.get("cpu-workers")), rw(v.get("siw-tx")), rw(v.get("ksoftirqd")),
                           "%.0f" % v.get("idle%", (0,))[0],
                           "%.0f" % v.get("softirq%", (0,))[0]))
        print()
    for g, m, n in met:
        if m is None:
            verdict = "not measured in this run"
        elif not m:
            verdict = "met"
        else:
            verdict = "missed by " + ", ".join(
                "%s %s" % (r["workload"], size_name(r["size"])) for r in m)
        if n:
            verdict += "; too noisy to judge: " + ", ".join(
                "%s %s" % (r["workload"], size_name(r["size"])) for r in n)
        print("goal %s: %s" % (g, verdict))
    print()
    print("written: %s" % ", ".join(os.path.join(out, n) for n in
                                    ("results.csv", "results.json")))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no PNG: matplotlib is not installed")
        return 0
    labels = ["%s %s" % (r["workload"], size_name(r["size"])) for r in rows]
    series = [("siw CRC", "siw_crc_MBps"), ("rsiw CRC", "rsiw_crc_MBps"),
              ("siw no CRC", "siw_nocrc_MBps"), ("rsiw no CRC", "rsiw_nocrc_MBps")]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 1.0), 5))
    width = 0.2
    for i, (name, key) in enumerate(series):
        xs = [j + (i - 1.5) * width for j in range(len(rows))]
        ax.bar(xs, [r[key] or 0 for r in rows], width, label=name)
    if tcp:
        ax.axhline(tcp, color="black", linestyle="--", linewidth=1, label="iperf3 TCP")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("MB/s")
    ax.set_title("rsiw vs siw, kernel %s (TCG guest)" % env.get("kernel", "?"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = os.path.join(out, "results.png")
    fig.savefig(png, dpi=100)
    print("chart: %s" % png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
