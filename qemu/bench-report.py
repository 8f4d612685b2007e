#!/usr/bin/env python3
"""make bench's report: reads raw.csv and env written by qemu/guest-bench.sh in
one results directory and writes there results.csv, results.json and
results.png (a bar chart, when matplotlib is available), then prints the table
with the ratios rsiw/siw and rsiw/TCP.

Usage: bench-report.py RESULTS_DIR [HOST_CPU]
"""
import csv
import json
import os
import sys

ORDER = ["ulp-write", "ulp-read", "ulp-send", "nfs-seqwrite", "nfs-seqread",
         "nfs-randread", "nvme-seqwrite", "nvme-seqread", "nvme-randread"]


def size_name(n):
    n = int(n)
    if n >= 1 << 20:
        return "%d MiB" % (n >> 20)
    return "%d KiB" % (n >> 10)


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
            mbps[(w, int(size), drv)] = float(v)
    tcp = mbps.get(("iperf3", 1 << 20, "tcp"))
    rows = []
    keys = sorted({(w, s) for (w, s, d) in mbps if w != "iperf3"},
                  key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99, k[1]))
    for w, s in keys:
        siw = mbps.get((w, s, "siw"))
        rs = mbps.get((w, s, "rsiw"))
        rs0 = mbps.get((w, s, "rsiw-nocrc"))

        def ratio(a, b):
            return round(a / b, 2) if a is not None and b else None

        rows.append({
            "workload": w, "size": s, "siw_MBps": siw, "rsiw_crc_MBps": rs,
            "rsiw_nocrc_MBps": rs0,
            "rsiw_crc_over_siw": ratio(rs, siw),
            "rsiw_nocrc_over_siw": ratio(rs0, siw),
            "rsiw_crc_over_tcp": ratio(rs, tcp) if s >= 1 << 20 else None,
        })
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["workload"])
        wr.writeheader()
        for r in rows:
            wr.writerow(r)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"env": env, "tcp_iperf3_MBps": tcp, "rows": rows}, f, indent=2)

    def fmt(v, ratio=False):
        if v is None:
            return "-"
        return "%.2f" % v if ratio else "%.0f" % v

    print("rsiw benchmark (one VM boot, TCG; MB/s = 10^6 bytes/s)")
    print("kernel %s; guest CPU %s x%s; host CPU %s" % (
        env.get("kernel", "?"), env.get("guest_cpu", "?"), env.get("guest_cpus", "?"),
        host_cpu or "?"))
    print("CRC: rsiw as labelled; siw-siw runs without CRC (%s)" % env.get("siw_crc", ""))
    print("%s s per measurement, best of %s; iperf3 (TCP ceiling): %s MB/s" % (
        env.get("secs", "?"), env.get("rounds", "?"), fmt(tcp)))
    print()
    hdr = ("workload", "size", "siw", "rsiw crc", "rsiw no-crc", "crc/siw",
           "no-crc/siw", "crc/TCP")
    print("%-14s %7s %8s %9s %12s %8s %11s %8s" % hdr)
    for r in rows:
        print("%-14s %7s %8s %9s %12s %8s %11s %8s" % (
            r["workload"], size_name(r["size"]), fmt(r["siw_MBps"]), fmt(r["rsiw_crc_MBps"]),
            fmt(r["rsiw_nocrc_MBps"]), fmt(r["rsiw_crc_over_siw"], True),
            fmt(r["rsiw_nocrc_over_siw"], True), fmt(r["rsiw_crc_over_tcp"], True)))
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
    series = [("siw (no CRC)", "siw_MBps"), ("rsiw CRC", "rsiw_crc_MBps"),
              ("rsiw no CRC", "rsiw_nocrc_MBps")]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 5))
    width = 0.27
    for i, (name, key) in enumerate(series):
        xs = [j + (i - 1) * width for j in range(len(rows))]
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
