"""Draws the figures of docs/BENCHMARKS.md from the data `make bench` measured.

Usage: bench-plot.py <figures.json> <output dir>   (make bench: docs)

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
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    for ax, key, title in [
        (axes[0], "cpu_us", "Envoy CPU per request (µs), median and min–max"),
        (axes[1], "rate", "requests/s (wrk -t1 -c32), median and min–max"),
    ]:
        med, err = spread(data, key)
        ax.barh(names, med, xerr=err, color="#4a7ab5", capsize=3)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
    save(fig, out, "proxy")


def batching(data, out):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, payer, title in [
        (axes[0], "envoy", "Envoy CPU per request above no rule matched (µs)"),
        (axes[1], "store", "webdis + Redis CPU per request (µs)"),
    ]:
        for i, run in enumerate(data["runs"]):
            pts = [p for p in run[payer] if None not in p]  # NaN (no store call) comes as null
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", color=f"C{i}", alpha=0.7, label=run["case"])
        for key, style, label in [(payer, "-", "fit, 1 identity"), (payer + "_many", "--", "fit, 1,000 identities")]:
            line = data.get(key)
            if line:
                xs = [0, 1]
                ax.plot(xs, [line["a"] + line["b"] * x for x in xs], style, color="black",
                        label=f"{label}: {line['a']:.1f} + {line['b']:.1f}/d")
        if payer == "envoy":
            ax.axhline(data["callout_us"], color="grey", linestyle=":", label="native ext_authz callout")
        ax.set_xlabel("1/d (d = decisions per store call)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    save(fig, out, "batching")


def tokens(data, out):
    fig, axes = plt.subplots(1, 4, figsize=(16, 4))
    names = [c["envoy"] for c in data["cpu"]]
    med, err = spread(data["cpu"], "cpu_us")
    axes[0].barh(names, med, xerr=err, color="#4a7ab5", capsize=3)
    axes[0].invert_yaxis()
    axes[0].set_title(f"Envoy CPU per token stream (µs), {data['ratio']['median']:.2f}×", fontsize=10)
    for ax, key, title in [(axes[1], "heap", "Envoy heap allocated"), (axes[2], "linear", "VMs' resident linear memory"),
                           (axes[3], "rss", "Envoy RSS")]:
        for i, m in enumerate(data["memory"]):
            r = m["readings"]
            ax.plot([x["streams"] for x in r], [x[key] / 1e6 for x in r], "o-", color=f"C{i}", label=m["envoy"])
        ax.set_xlabel("open streams")
        ax.set_ylabel("MB")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    save(fig, out, "tokens")


def store_batches(data, out):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    incr = next(d for d in data if d["decisions"] == 1 and d["kind"].startswith("INCR"))
    batches = [d for d in data if not d["kind"].startswith("INCR") and not d.get("floor")]
    floors = [d for d in data if d.get("floor")]
    for ax, key, title in [(axes[0], "cpu_us", "Redis main-thread CPU per decision (µs)"),
                           (axes[1], "usec", "script time per decision (µs, commandstats)")]:
        for items, fmt, label in [(batches, "o-", "EVALSHA batch"),
                                  (floors, "s:", "floor: the batch's Redis work only")]:
            if items:
                med, err = spread(items, key)
                ax.errorbar([d["decisions"] for d in items], med, yerr=err, fmt=fmt, capsize=3, label=label)
        if key == "cpu_us":
            ax.axhline(incr["cpu_us"]["median"], color="grey", linestyle="--", label="INCR (target: ≤ 1.0×)")
        else:
            ax.axhline(4.0, color="grey", linestyle="--", label="target at 16: ≤ 4 µs")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("decisions per call")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    save(fig, out, "store-batches")


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
    "Batching": batching,
    "Token streams": tokens,
    "Store cost": store,
    "Store cost of batches": store_batches,
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
