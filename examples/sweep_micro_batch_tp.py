"""A sweep over micro batch and tensor parallelism with the Python module trainsim
(docs/python.md): each point is one simulation; they run in threads (trainsim releases the GIL
and simulates each in its own child process). Prints a table and writes it as CSV.

    python3 examples/sweep_micro_batch_tp.py [--scenario S.yaml] [--out DIR] [--jobs N]
"""
import argparse
import concurrent.futures
import csv
import itertools
import os

import trainsim

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", default=os.path.join(HERE, "..", "scenarios", "gpt-3.6b_tp2_pp1_dp32.yaml"))
    ap.add_argument("--out", default=".", help="folder for sweep.csv")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()

    points = list(itertools.product([1, 2, 4], [1, 2, 4]))  # (micro batch, TP)

    def run(point):
        mb, tp = point
        overrides = {"parallel.micro_batch_size": mb, "parallel.tensor_model_parallel_size": tp}
        try:
            s = trainsim.simulate(args.scenario, overrides=overrides)
        except trainsim.InputError as e:  # a layout the scenario cannot take
            return {"micro_batch_size": mb, "tp": tp, "error": f"{e.field}: {e}"}
        return {"micro_batch_size": mb, "tp": tp, "iteration_time_s": s["iteration_time_s"],
                "tokens_per_s": s["tokens_per_s"], "mfu": s["mfu"],
                "peak_memory_gib": s["peak_memory_bytes"] / 2**30, "oom": s["oom"]}

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(run, points))

    print(f"{'mb':>3} {'tp':>3} {'iteration s':>12} {'tokens/s':>12} {'mfu':>6} {'peak GiB':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['micro_batch_size']:>3} {r['tp']:>3}  refused: {r['error']}")
            continue
        print(f"{r['micro_batch_size']:>3} {r['tp']:>3} {r['iteration_time_s']:>12.3f} "
              f"{r['tokens_per_s']:>12.0f} {r['mfu']:>6.3f} {r['peak_memory_gib']:>9.1f}"
              + ("  OOM" if r["oom"] else ""))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "sweep.csv")
    fields = ["micro_batch_size", "tp", "iteration_time_s", "tokens_per_s", "mfu",
              "peak_memory_gib", "oom", "error"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")
    if not any("error" not in r for r in rows):
        raise SystemExit("every point was refused")


if __name__ == "__main__":
    main()
