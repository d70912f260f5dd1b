#!/usr/bin/env python3
"""Twin-Flow (DeepSpeed ZeRO-Offload++) validation: speedup of `ratio: auto` over full offload
(`ratio: 1.0`) against the published figures, and the iteration time over the offload ratio.

    python3 validation/twinflow_sweep.py [--trainsim build/apps/trainsim] [--step 0.1]

Published (DeepSpeed blogs/deepspeed-offloadpp, shared/references/001): Twin-Flow is 6x faster
than ZeRO-Offload for OPT-30B on one DGX-H100 and 3x for OPT-13B on one DGX-A100-40GB. The
check: simulated speedup within +-25% of those, and the iteration time falls monotonically as
the ratio falls until the GPU runs out of memory. Runs
`trainsim simulate SCENARIO --set deepspeed.zero_optimization.offload_optimizer.ratio=R
--format json` for every point. Exit status 1 when a check fails.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [  # (label, scenario pair stem, published speedup)
    ("OPT-13B, 1x DGX-A100-40GB", "scenarios/offload/opt-13b_zero3_dp8_offload", 3.0),
    ("OPT-30B, 1x DGX-H100", "scenarios/offload/opt-30b_zero3_dp8_offload", 6.0),
]
TOLERANCE = 0.25
# The same OPT-30B pair on two machines: the host link of CPU offload (no published figure; the
# check is that the faster link shows). DGX-H100: a PCIe Gen5 x16 switch uplink per GPU pair, 64 GB/s
# per direction (PCIe 5.0, 32 GT/s x 16 lanes; systems/dgx-h100.yaml); GB200 NVL72: NVLink-C2C
# 900 GB/s bidirectional per Grace and its two GPUs, 450 GB/s per direction (NVIDIA GB200 NVL72
# datasheet; systems/gb200-nvl72.yaml).
MACHINES = [  # (label, scenario pair stem, host link)
    ("1x DGX-H100 (PCIe Gen5 x16, 64 GB/s per direction per switch)",
     "scenarios/offload/opt-30b_zero3_dp8_offload", "pcie"),
    ("2 GB200 NVL72 trays (NVLink-C2C, 450 GB/s per direction per Grace)",
     "scenarios/offload/opt-30b_zero3_dp8_gb200_offload", "c2c"),
]


def find_trainsim():
    found = sorted(glob.glob(os.path.join(ROOT, "build*", "apps", "trainsim")), key=os.path.getmtime)
    if not found:
        sys.exit("twinflow_sweep: no trainsim binary under build*/apps; pass --trainsim")
    return found[-1]


def simulate(trainsim, scenario, sets=()):
    cmd = [trainsim, "simulate", os.path.join(ROOT, scenario), "--format", "json"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("twinflow_sweep: %s failed:\n%s" % (" ".join(cmd), r.stderr))
    return json.loads(r.stdout)


def compare_machines(trainsim, sets):
    """OPT-30B ZeRO-3 offload on DGX-H100 (PCIe) and GB200 (NVLink-C2C): iteration time and
    the host copies' exposed time (breakdown 'offload') at ratio 1.0 and auto. The check: the
    C2C machine's exposed offload time at ratio 1.0 is below the PCIe machine's."""
    print("Twin-Flow by host link: OPT-30B, ZeRO-3, 8 GPUs")
    offload = {}
    for label, stem, link in MACHINES:
        full = simulate(trainsim, stem + "-r1.yaml", sets)
        auto = simulate(trainsim, stem + "-auto.yaml", sets)
        offload[link] = full["breakdown_s"]["offload"]
        print("  %s" % label)
        print("    ratio 1.0 : %8.3f s  (optimizer %6.3f s, offload %6.3f s)" % (
            full["iteration_time_s"], full["breakdown_s"]["optimizer"], full["breakdown_s"]["offload"]))
        print("    ratio auto: %8.3f s  (optimizer %6.3f s, offload %6.3f s), chosen ratio %.2f%s" % (
            auto["iteration_time_s"], auto["breakdown_s"]["optimizer"], auto["breakdown_s"]["offload"],
            auto["offload_ratio"], "  (OOM)" if auto["oom"] else ""))
        print("    Twin-Flow speedup %.2fx" % (full["iteration_time_s"] / auto["iteration_time_s"]))
    good = offload["c2c"] < offload["pcie"] or (offload["c2c"] == 0 and offload["pcie"] == 0)
    print("  exposed offload time at ratio 1.0: C2C %.3f s, PCIe %.3f s: %s\n" % (
        offload["c2c"], offload["pcie"], "ok" if good else "FAIL (C2C not faster)"))
    return good


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainsim", default=None)
    ap.add_argument("--step", type=float, default=0.1, help="ratio step of the sweep")
    ap.add_argument("--set", action="append", default=[], dest="sets",
                    help="extra override for every run, e.g. parallel.micro_batch_size=8 "
                         "(with parallel.global_batch_size=64) to see the sweep run out of memory")
    a = ap.parse_args()
    trainsim = a.trainsim or find_trainsim()
    ok = True
    for label, stem, published in CASES:
        full = simulate(trainsim, stem + "-r1.yaml", a.sets)
        auto = simulate(trainsim, stem + "-auto.yaml", a.sets)
        speedup = full["iteration_time_s"] / auto["iteration_time_s"]
        err = speedup / published - 1
        good = (abs(err) <= TOLERANCE or bool(a.sets)) and not auto["oom"]
        ok &= good
        print("%s (%s)" % (label, os.path.basename(stem)))
        print("  ratio 1.0 : %8.3f s   peak %6.2f GiB" % (full["iteration_time_s"], full["peak_memory_bytes"] / 2**30))
        print("  ratio auto: %8.3f s   peak %6.2f GiB   chosen ratio %.2f%s" % (
            auto["iteration_time_s"], auto["peak_memory_bytes"] / 2**30, auto["offload_ratio"],
            "  (OOM)" if auto["oom"] else ""))
        print("  speedup %.2fx, published %.0fx: %+.0f%% %s" % (
            speedup, published, 100 * err,
            "(not checked: --set changes the scenario)" if a.sets
            else "ok" if good else "FAIL (tolerance +-25%)"))
        print("  sweep (ratio -> iteration time, GPU peak; CPU-Adam and GPU-Adam concurrent):")
        n = int(round(1 / a.step))
        prev = None
        for i in range(n, -1, -1):
            r = round(i * a.step, 6)
            s = simulate(trainsim, stem + "-r1.yaml",
                         a.sets + ["deepspeed.zero_optimization.offload_optimizer.ratio=%g" % r])
            t, oom = s["iteration_time_s"], s["oom"]
            mono = ""
            if oom:
                mono = "  OOM: %s (dominant %s)" % ("out of memory", s.get("oom_dominant_category", "?"))
            elif prev is not None and t > prev * (1 + 1e-9):
                mono = "  NOT MONOTONIC"
                ok = False
            print("    %.2f  %8.3f s  %6.2f GiB  opt %6.3f s  offload %6.3f s%s" % (
                r, t, s["peak_memory_bytes"] / 2**30, s["breakdown_s"]["optimizer"],
                s["breakdown_s"]["offload"], mono))
            if oom:
                break  # memory ran out: smaller ratios only need more
            prev = t
        print()
    ok &= compare_machines(trainsim, a.sets)
    print("twinflow_sweep:", "all checks passed" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
