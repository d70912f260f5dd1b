#!/usr/bin/env python3
"""The planner on a 70B-class model on 64 H100 (issue: `trainsim plan`): runs
`trainsim plan bench/plan/llama3-70b_64xh100.yaml`, prints its best layout with the scenario
YAML it wrote, and where the layout NVIDIA published for Llama 3 70B on 64 H100 (Megatron-Bridge
25.11, DGX-H100: TP 4, PP 8, VP 5 = 2 layers per virtual stage, CP 1, DP 2, micro batch 1;
../shared/ground-truth/megatron_bridge_dgx_h100.csv) ranks in the planner's output.

  validation/plan_70b.py [--build build] [--jobs N] [--check]

--check exits 1 unless the published layout is among the candidates the planner ranked.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PUBLISHED = {"tp": "tp4", "pp": "pp8", "dp": "dp2", "vpl": "vpl2", "mb": "mb1"}


def is_published(layout):
    words = layout.split()
    return (all(w in words for w in PUBLISHED.values())
            and not any(w.startswith("cp") for w in words))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    trainsim = os.path.join(args.build, "apps", "trainsim")
    scenario = os.path.join(ROOT, "bench", "plan", "llama3-70b_64xh100.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [trainsim, "plan", scenario, "--json", os.path.join(tmp, "plan.json"),
               "--out", os.path.join(tmp, "out")]
        if args.jobs:
            cmd += ["--jobs", str(args.jobs)]
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            sys.stderr.write(run.stderr)
            return 1
        print(run.stdout)
        plan = json.load(open(os.path.join(tmp, "plan.json")))
        ranked = [c for c in plan["candidates"] if c["simulated"]]
        best = sorted(glob.glob(os.path.join(tmp, "out", "001_*.yaml")))
        if best:
            print("best layout's scenario (%s):" % os.path.basename(best[0]))
            print(open(best[0]).read())
        found = None
        for i, c in enumerate(ranked, 1):
            if is_published(c["layout"]):
                found = (i, c)
                break
        if found:
            i, c = found
            print("published layout (TP 4, PP 8, VP 5, CP 1, DP 2, mb 1): rank %d of %d simulated "
                  "as '%s', %.0f tokens/s (best %.0f)" % (i, len(ranked), c["layout"],
                                                         c["tokens_per_s"], ranked[0]["tokens_per_s"]))
        else:
            est = [c for c in plan["candidates"] if is_published(c["layout"])]
            why = ", ".join("%s: %s" % (c["layout"], c["estimate"]["rejection"]) for c in est)
            print("published layout not among the %d simulated candidates (%s)" % (len(ranked), why))
        return 0 if (found or not args.check) else 1


if __name__ == "__main__":
    sys.exit(main())
