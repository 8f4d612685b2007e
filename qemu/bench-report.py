#!/usr/bin/env python3
"""make bench's report: reads raw.csv and env written by qemu/guest-bench.sh in
one results directory and writes there results.csv, results.json and
results.png (a bar chart, when matplotlib is available), then prints the table
with the ratios rsiw/siw (CRC on for both, and off for both) and rsiw/TCP, and
whether the speed goals hold.

Usage: bench-report.py RESULTS_DIR [HOST_CPU]
"""
import csv
import json
import os
import sys

ORDER = ["ulp-write", "ulp-read", "ulp-send", "ulp-ping", "perf-write", "perf-read", "perf-send",
         "perf-lat", "nfs-seqwrite", "nfs-seqread", "nfs-randread", "nvme-seqwrite", "nvme-seqread",
         "nvme-randread"]
# (driver in raw.csv, column name)
DRIVERS = [("siw", "siw_crc_MBps"), ("rsiw", "rsiw_crc_MBps"),
           ("siw-nocrc", "siw_nocrc_MBps"), ("rsiw-nocrc", "rsiw_nocrc_MBps")]


def size_name(n):
    n = int(n)
    if n >= 1 << 20:
        return "%d MiB" % (n >> 20)
    if n < 1 << 10:
        return "%d B" % n
    return "%d KiB" % (n >> 10)


def ratio(a, b):
    return round(a / b, 2) if a is not None and b else None


def goals(rows):
    """The issue's speed goals: each with the rows that miss it, or None if no row measured it."""
    def check(name, key, least, min_size):
        measured = [r for r in rows if r["size"] >= min_size and r[key] is not None]
        miss = [r for r in measured if r[key] < least]
        return (name, miss if measured else None)
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
    """A goal over the given rows: the rows that miss it, or None if none was measured."""
    measured = [r for r in rows if r[key] is not None]
    return (name, [r for r in measured if r[key] < least] if measured else None)


def main():
    out = sys.argv[1]
    host_cpu = sys.argv[2] if len(sys.argv) > 2 else ""
    env = {}
    with open(os.path.join(out, "env")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            env[k] = v
    env["host_cpu"] = host_cpu
    mbps = {}
    with open(os.path.join(out, "raw.csv")) as f:
        for row in csv.reader(f):
            if len(row) != 5:
                continue
            w, size, drv, _crc, v = row
            # Best of the rounds.
            key = (w, int(size), drv)
            mbps[key] = max(mbps.get(key, 0.0), float(v))
    tcp = mbps.get(("iperf3", 1 << 20, "tcp"))
    rows = []
    keys = sorted({(w, s) for (w, s, d) in mbps if w != "iperf3"},
                  key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99, k[1]))
    for w, s in keys:
        r = {"workload": w, "size": s}
        for drv, col in DRIVERS:
            r[col] = mbps.get((w, s, drv))
        r["crc_rsiw_over_siw"] = ratio(r["rsiw_crc_MBps"], r["siw_crc_MBps"])
        r["nocrc_rsiw_over_siw"] = ratio(r["rsiw_nocrc_MBps"], r["siw_nocrc_MBps"])
        r["crc_rsiw_over_tcp"] = ratio(r["rsiw_crc_MBps"], tcp) if s >= 1 << 20 else None
        rows.append(r)
    met = goals(rows)
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["workload"])
        wr.writeheader()
        for r in rows:
            wr.writerow(r)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"env": env, "tcp_iperf3_MBps": tcp, "rows": rows,
                   "goals": [{"goal": g, "met": None if m is None else not m,
                              "missed_by": ["%s %s" % (r["workload"], size_name(r["size"]))
                                            for r in m or []]} for g, m in met]},
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
    print("%s s per measurement, best of %s; iperf3 (TCP ceiling): %s MB/s" % (
        env.get("secs", "?"), env.get("rounds", "?"), fmt(tcp)))
    print()
    hdr = ("workload", "size", "siw crc", "rsiw crc", "ratio", "siw -", "rsiw -", "ratio",
           "crc/TCP")
    line = "%-14s %7s %8s %9s %6s %7s %7s %6s %8s"
    print(line % hdr)
    for r in rows:
        print(line % (
            r["workload"], size_name(r["size"]), fmt(r["siw_crc_MBps"]),
            fmt(r["rsiw_crc_MBps"]), fmt(r["crc_rsiw_over_siw"], True),
            fmt(r["siw_nocrc_MBps"]), fmt(r["rsiw_nocrc_MBps"]),
            fmt(r["nocrc_rsiw_over_siw"], True), fmt(r["crc_rsiw_over_tcp"], True)))
    print("('-': without CRC; ratio: rsiw/siw; crc/TCP: rsiw with CRC over iperf3)")
    print()
    for g, m in met:
        if m is None:
            verdict = "not measured in this run"
        elif not m:
            verdict = "met"
        else:
            verdict = "missed by " + ", ".join(
                "%s %s" % (r["workload"], size_name(r["size"])) for r in m)
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
