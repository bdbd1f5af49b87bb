"""Draws the figures of BENCHMARKS.md from the data `make bench` measured.

Usage: bench-plot.py <figures.json> <output dir>

The bench binary (host-tests/src/bin/bench.rs) measures and writes
figures.json; this script only draws it, one PNG per figure, named
BENCHMARKS-<figure>.png so they sit next to BENCHMARKS.md. A part that was
not measured (BENCH_ONLY) is simply not drawn.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402


def spread(items, key):
    """Medians and (below, above) error bars from {median, min, max}."""
    med = [i[key]["median"] for i in items]
    lo = [i[key]["median"] - i[key]["min"] for i in items]
    hi = [i[key]["max"] - i[key]["median"] for i in items]
    return med, [lo, hi]


def save(fig, out, name):
    fig.tight_layout()
    fig.savefig(out / f"BENCHMARKS-{name}.png", dpi=110)
    plt.close(fig)


def proxy(data, out):
    names = [d["variant"] for d in data]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, title in [
        (axes[0], "cpu_us", "Envoy CPU per request (µs), median and min–max"),
        (axes[1], "rate", "requests/s (wrk -t1 -c32), median and min–max"),
    ]:
        med, err = spread(data, key)
        ax.barh(names, med, xerr=err, color="#4a7ab5", capsize=3)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
    save(fig, out, "proxy")


def store(data, out):
    modes = ["sequential", "pipelined"]
    kinds = [d["kind"] for d in data if d["mode"] == "sequential"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, key, title in [
        (axes[0], "cpu_us", "Redis main-thread CPU per call (µs)"),
        (axes[1], "usec_per_call", "execution inside Redis per call (µs, commandstats)"),
    ]:
        height = 0.4
        for j, mode in enumerate(modes):
            items = [d for d in data if d["mode"] == mode]
            med, err = spread(items, key)
            ys = [i + j * height for i in range(len(items))]
            ax.barh(ys, med, height=height, xerr=err, capsize=2, label=mode)
        ax.set_yticks([i + height / 2 for i in range(len(kinds))])
        ax.set_yticklabels(kinds, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    save(fig, out, "store")


def memory(data, out):
    fig, ax = plt.subplots(figsize=(9, 4))
    names = [d["name"] for d in data]
    ax.barh(names, [d["per_identity"] for d in data], color="#6a9f58", label="used_memory delta per identity")
    ax.barh(names, [d["memory_usage"] for d in data], color="#b9d6ad", height=0.4, label="MEMORY USAGE of its keys")
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("bytes per identity (log scale)")
    ax.tick_params(axis="y", labelsize=8)
    ax.legend(fontsize=8)
    save(fig, out, "memory")


def abuse(data, out):
    fig, ax = plt.subplots(figsize=(8, 4))
    labels, med, err, colors = [], [], [[], []], []
    for d in data:
        labels.append(f"{d['connections']} conn/Envoy, deny cache {'on' if d['deny_cache'] else 'off'}")
        s = d["store_calls"]
        med.append(s["median"])
        err[0].append(s["median"] - s["min"])
        err[1].append(s["max"] - s["median"])
        colors.append("#4a7ab5" if d["deny_cache"] else "#c4644e")
    ax.barh(labels, med, xerr=err, color=colors, capsize=3)
    ax.axvline(data[0]["requests"]["median"], color="grey", linestyle=":", label="requests sent")
    ax.axvline(data[0]["bound"], color="black", linestyle="--", label="target: L + workers × proxies")
    ax.set_title("one client, 100 × L requests over 2 Envoys × 2 workers", fontsize=10)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("store calls (EVALSHA at Redis), log scale")
    ax.legend(fontsize=8)
    save(fig, out, "abuse")


def accuracy(data, out):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, row in enumerate(d for d in data["error"] if d["shape"] == "poisson"):
        f = [p[0] for p in row["by_fraction"]]
        ax.plot(f, [p[1] for p in row["by_fraction"]], "o-", color=f"C{i}", label=f"L={row['limit']} measured")
        ax.plot(f, [p[2] for p in row["by_fraction"]], "--", color=f"C{i}", label=f"L={row['limit']} theory √(f(1−f)/L)")
    ax.set_yscale("log")
    ax.set_xlabel("f: fraction of the current window elapsed")
    ax.set_ylabel("rms(estimate − true) / L")
    ax.set_title("sliding_window estimate error, Poisson arrivals at L per window", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    save(fig, out, "accuracy-error")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for shape, marker in [("poisson", "o-"), ("bursty", "s--")]:
        for i, limit in enumerate(sorted({d["limit"] for d in data["volume"]})):
            rows = [d for d in data["volume"] if d["shape"] == shape and d["limit"] == limit]
            ax.plot([r["offered"] for r in rows], [r["ratio"] for r in rows], marker, color=f"C{i}",
                    label=f"{shape}, L={limit}")
    ax.axhspan(0.98, 1.02, color="grey", alpha=0.15, label="±2%")
    ax.set_xlabel("offered load (× L per window)")
    ax.set_ylabel("admitted: sliding window / exact log")
    ax.legend(fontsize=7, ncol=2)
    save(fig, out, "accuracy-volume")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    c = next(c for c in data["construction"] if c["limit"] == 100)
    t = [p[0] for p in c["curve"]]
    ax.plot(t, [p[1] for p in c["curve"]], label="sliding window")
    ax.plot(t, [p[2] for p in c["curve"]], label="exact sliding log")
    ax.axhline(200, color="grey", linestyle=":", label="2L")
    ax.set_xlabel("time (windows)")
    ax.set_ylabel("admitted in the trailing window")
    ax.set_title("L = 100: L requests at the end of window 0, then one attempt per ms", fontsize=10)
    ax.legend(fontsize=8)
    save(fig, out, "accuracy-2l")


DRAW = {
    "Proxy cost": proxy,
    "Store cost": store,
    "Store memory": memory,
    "Abuse: the deny cache": abuse,
    "Accuracy of sliding_window": accuracy,
}


def main():
    figures = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    for title, draw in DRAW.items():
        if title in figures:
            draw(figures[title], out)
            print(f"drew {title}")


if __name__ == "__main__":
    main()
