#!/usr/bin/env python3
"""DeepSpeed ZeRO-3 at scale: a GPT-3 175B-class model with no model parallelism on 384, 768
and 1536 DGX-A100 GPUs, global batch 1536 (scenarios/zero3/).

For each size the script simulates the scenario and prints iteration time, model TFLOP/s per
GPU, the speedup over 384 GPUs against the ideal (GPUs / 384), and the exposed-time breakdown;
then it measures, with build/bench/bench_collectives (the same simulator and NCCL model), the
two collectives that ZeRO-3 runs on its data-parallel stream at that size: the all-gather of
the largest fetched submodule (fc1/fc2: 4h^2 fp16 = 1.21 GB) and a reduce-scatter bucket
(reduce_bucket_size 5e8 fp16 = 1 GB), and prints them next to the compute they overlap.

What sets the time (the mechanism, as the model runs it: models/builder/dp_zero3.cpp):
  * Every micro-step fetches each of a layer's four linear layers by its own all-gather over
    all N GPUs, in the forward, in the recomputed forward and in the backward (DeepSpeed's
    module hooks; norms and biases stay gathered: below the persistence threshold), and
    reduce-scatters the gradients in 5e8-element buckets, on the same stream. The prefetch
    bucket (5e7 elements) is smaller than one linear layer of this model (0.45-0.6e9), so
    DeepSpeed prefetches exactly one submodule ahead: the gather of the next linear layer
    overlaps the current one's GEMM, and no more.
  * Per GPU the bytes of one gather do not shrink with N (each GPU receives (N-1)/N of the
    submodule), and a ring over N GPUs adds latency: NCCL's ring pays every one of its N-1
    steps (models/perf/nccl_model.h). Compute per micro-step is fixed (micro batch 1), so per
    micro-step the exposed communication grows with N while the number of micro-steps per
    GPU falls as 1/N: the iteration time falls less than 1/N and TFLOP/s per GPU decline.
  * The script prints which one dominates at each size: "compute-bound" when exposed data-
    parallel communication is under 10% of the iteration, "communication-bound" otherwise.
No published iteration time is compared (none of these exact runs is public); the point is the
regime, which appears from the mechanisms, not from a fitted constant. --check exits 1 if the
regime disappears: TFLOP/s per GPU must fall from 384 to 1536 GPUs.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZES = [384, 768, 1536]
H = 12288


def simulate(trainsim, gpus):
    path = os.path.join(ROOT, "scenarios", "zero3", "gpt-175b_zero3_dp%d.yaml" % gpus)
    out = subprocess.run([trainsim, "simulate", path, "--format", "json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def collective_s(bench, nodes, bytes_):
    out = subprocess.run([bench, "--system", "dgx-a100-80gb", "--nodes", str(nodes), "--sizes",
                          str(bytes_)], check=True, capture_output=True, text=True).stdout
    times = {}
    for line in out.splitlines():
        f = line.split("\t")
        times[f[1]] = (float(f[5]), f[8] + "/" + f[9])
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainsim", default=os.path.join(ROOT, "build", "apps", "trainsim"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "bench_collectives"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    rows = []
    for gpus in SIZES:
        s = simulate(args.trainsim, gpus)
        rows.append((gpus, s))
    base_t = rows[0][1]["iteration_time_s"]
    print("%6s %8s %10s %9s %8s %8s %9s %10s  %s" % ("GPUs", "micro", "iter_s", "TFLOP/s",
                                                   "speedup", "ideal", "compute", "dp_comm",
                                                   "regime"))
    for gpus, s in rows:
        b = s["breakdown_s"]
        t = s["iteration_time_s"]
        exposed = b["dp_comm"] / t
        regime = "compute-bound" if exposed < 0.10 else "communication-bound"
        print("%6d %8d %10.2f %9.1f %8.2f %8.2f %8.1f%% %9.1f%%  %s" %
              (gpus, s["microbatches"], t, s["model_tflops_per_gpu"], base_t / t, gpus / SIZES[0],
               100 * b["compute"] / t, 100 * exposed, regime))

    print("\nthe data-parallel stream's collectives at each size (simulated, NCCL's choice):")
    fc_bytes = 2 * 4 * H * H          # fc1 / fc2 weight, fp16
    bucket_bytes = 2 * 500_000_000    # reduce_bucket_size elements, fp16
    # The fc1 forward GEMM it overlaps, at the shipped A100 profile's GEMM main-loop rate (roughly: no
    # wave quantization, no epilogue) and the datasheet peak 312 TFLOP/s.
    with open(os.path.join(ROOT, "calibration", "a100-sxm4-80gb.json")) as f:
        eff = json.load(f)["parameters"]["gemm_max_efficiency"]["value"]
    gemm_s = 2 * 2048 * H * 4 * H / (312e12 * eff)
    print("  fc1 forward GEMM (micro batch 1) at %.2f of 312 TFLOP/s: %.1f ms" % (eff, gemm_s * 1e3))
    for gpus in SIZES:
        ag = collective_s(args.bench, gpus // 8, fc_bytes)["all_gather"]
        rs = collective_s(args.bench, gpus // 8, bucket_bytes)["reduce_scatter"]
        print("  %5d GPUs: all-gather of fc1 (1.21 GB) %.1f ms (%s), reduce-scatter bucket (1 GB) "
              "%.1f ms (%s)" % (gpus, ag[0] * 1e3, ag[1], rs[0] * 1e3, rs[1]))

    if args.check:
        first, last = rows[0][1]["model_tflops_per_gpu"], rows[-1][1]["model_tflops_per_gpu"]
        if not last < first:
            print("the communication-bound regime is gone: %.1f TFLOP/s at 384, %.1f at 1536"
                  % (first, last))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
