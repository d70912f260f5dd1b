"""The memory timeline of one simulated iteration, plotted by category (stacked) for the GPU
rank with the highest peak: trainsim.simulate(..., memory_timeline=True) (docs/python.md).
Uses matplotlib's Agg backend (no display needed) and writes a PNG.

    python3 examples/memory_timeline_plot.py [--scenario S.yaml] [--out DIR]
"""
import argparse
import os

try:
    import matplotlib
except ImportError:  # ctest counts exit status 77 as skipped
    print("matplotlib is not installed (Debian: apt-get install python3-matplotlib)")
    raise SystemExit(77)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import trainsim  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CATEGORIES = ["parameters", "gradients", "optimizer_states", "activations", "comm_buffers",
              "offload_buffers", "framework"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", default=os.path.join(HERE, "..", "scenarios", "gpt-39.1b_tp8_pp2_dp32.yaml"))
    ap.add_argument("--out", default=".", help="folder for memory_timeline.png")
    args = ap.parse_args()

    s = trainsim.simulate(args.scenario, memory_timeline=True)
    rank = s["peak_memory_rank"]
    rows = [r for r in s["memory_timeline"] if r["device"] == "gpu"]
    ranks = sorted({r["id"] for r in rows})
    if rank not in ranks:  # a folded run: the representative of the peak's stage
        rank = max(ranks, key=lambda k: max(r["total"] for r in rows if r["id"] == k))
    rows = [r for r in rows if r["id"] == rank]
    t = [r["time_s"] for r in rows]
    gib = 2.0 ** 30
    stacks = [[r.get(c, 0) / gib for r in rows] for c in CATEGORIES]

    fig, ax = plt.subplots(figsize=(10, 5))
    ax.stackplot(t, stacks, labels=CATEGORIES, step="post")
    ax.axhline(s["memory_capacity_bytes"] / gib, color="k", linestyle="--", linewidth=1,
               label="capacity")
    ax.set_xlabel("time in the iteration (s)")
    ax.set_ylabel("GPU memory (GiB)")
    ax.set_title(f"{s['name']}: GPU rank {rank}, peak {s['peak_memory_bytes'] / gib:.1f} GiB")
    ax.legend(loc="upper left", fontsize=8)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "memory_timeline.png")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    print(f"wrote {path} ({len(rows)} steps of rank {rank})")


if __name__ == "__main__":
    main()
