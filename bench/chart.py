"""Draws docs/benchmarks-throughput.png from a bench/run results file: records/s, records
per CPU-second and peak RSS of each system, side by side. Wrong outputs are left out."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {
    "copier": "copier\n(limit)",
    "weir-pass": "weir pass-through\nexactly-once",
    "weir": "weir\nexactly-once",
    "weir-100ms": "weir\n100 ms ckpt",
    "weir-alo": "weir\nat-least-once",
    "flink": "Flink 2.2.1\nexactly-once",
}


def main(results, out):
    rows = [json.loads(line) for line in open(results) if line.strip()]
    rows = [r for r in rows if r.get("system") in LABELS and r.get("kind") != "latency" and r.get("correct")]
    if not rows:
        sys.exit("no correct results to chart")
    names = [LABELS[r["system"]] for r in rows]
    colors = ["#888888" if r["system"] == "copier" else "#d95f02" if r["system"] == "flink" else "#1b9e77" for r in rows]
    panels = [
        ("records/s (drain)", [r["records_per_s"] for r in rows]),
        ("records per CPU-second", [r["records_per_cpu_s"] for r in rows]),
        ("peak RSS (MiB)", [r["peak_rss_mib"] for r in rows]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 5))
    for ax, (title, values) in zip(axes, panels):
        bars = ax.bar(names, values, color=colors)
        ax.set_title(title)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        plt.setp(ax.get_xticklabels(), rotation=35, ha="right")
        ax.margins(y=0.15)
    fig.suptitle(f"copy / pass-through and 10 s window count per key, {rows[0]['records']:,} records, parallelism 2, checkpoints every 1 s")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
