#!/usr/bin/env python3
"""Megatron-LM SC'21 Table 1: paper iteration time against trainsim's simulated one.

The paper reports achieved TFLOP/s per GPU (X) for each configuration; its iteration time
follows from the FLOPs it executes under full recomputation (Narayanan et al. SC'21, Eq. 3):

    F = 96 B s l h^2 (1 + s / 6h + V / 16 l h),    T = F / (X * N)

with B the global batch, s = 2048, V = 51200 and N GPUs. For each row this script runs
`trainsim simulate scenarios/<row>.yaml --format json` and prints paper T, simulated T and the
error, then the mean absolute percentage error. With --check it exits 1 when a row is outside
+-10% or (all rows run) the MAPE exceeds 5%.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CSV = os.path.join(HERE, "data", "megatron_sc21_table1.csv")
SEQ, VOCAB = 2048, 51200
# Rows whose simulation takes a few seconds on a 2-core machine (ctest runs these).
QUICK = {"1.7", "3.6", "7.5", "18.4", "39.1", "76.1"}


def scenario_name(row):
    p = row["params_billion"]
    size = "1t" if p == "1008.0" else p.rstrip("0").rstrip(".") + "b"
    return "gpt-%s_tp%s_pp%s_dp%s" % (size, row["tp"], row["pp"], row["dp"])


def paper_time_s(row):
    h, l, B, N = (int(row[k]) for k in ("hidden", "layers", "global_batch", "gpus"))
    flops = 96 * B * SEQ * l * h * h * (1 + SEQ / (6 * h) + VOCAB / (16 * l * h))
    return flops / (float(row["tflops_per_gpu"]) * 1e12 * N)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainsim", default=os.path.join(ROOT, "build", "apps", "trainsim"))
    ap.add_argument("--quick", action="store_true", help="only the rows that simulate in seconds")
    ap.add_argument("--rows", help="comma-separated params_billion values, e.g. 1.7,1008.0")
    ap.add_argument("--check", action="store_true", help="exit 1 outside the error bounds")
    ap.add_argument("--calibration", help="calibration profile passed to trainsim")
    args = ap.parse_args()

    with open(CSV) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    if args.quick:
        rows = [r for r in rows if r["params_billion"] in QUICK]
    if args.rows:
        wanted = set(args.rows.split(","))
        rows = [r for r in rows if r["params_billion"] in wanted]
    if not rows:
        sys.exit("table1.py: no rows selected")

    print("%-28s %10s %10s %8s %9s %9s %8s" % ("scenario", "paper_s", "sim_s", "error", "paper_TF", "sim_TF", "wall_s"))
    errors, failed = [], False
    for row in rows:
        name = scenario_name(row)
        cmd = [args.trainsim, "simulate", os.path.join(ROOT, "scenarios", name + ".yaml"), "--format", "json"]
        if args.calibration:
            cmd += ["--calibration", args.calibration]
        t0 = time.time()
        out = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if out.returncode != 0:
            print("%-28s failed: %s" % (name, out.stderr.strip()))
            failed = True
            continue
        summary = json.loads(out.stdout)
        sim = summary["iteration_time_s"]
        paper = paper_time_s(row)
        err = (sim - paper) / paper
        errors.append(abs(err))
        print("%-28s %10.2f %10.2f %+7.1f%% %9.0f %9.1f %8.1f" % (
            name, paper, sim, 100 * err, float(row["tflops_per_gpu"]),
            summary["hardware_tflops_per_gpu"], wall))
        if abs(err) > 0.10:
            failed = True
    if errors:
        mape = sum(errors) / len(errors)
        print("MAPE over %d rows: %.2f%%" % (len(errors), 100 * mape))
        if len(errors) == 10 and mape > 0.05:
            failed = True
    if args.check and failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
