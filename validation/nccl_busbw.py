#!/usr/bin/env python3
"""Simulated NCCL bus bandwidth next to published nccl-tests figures.

Runs build/bench/bench_collectives (one collective over every GPU of N nodes, simulated by the
SimGrid executor with NCCL's algorithm/protocol choice of models/perf/nccl_model.h) for DGX-A100
and DGX-H100, 1-64 nodes, 1 MiB to 4 GiB, and prints bus bandwidth as nccl-tests reports it
(NVIDIA/nccl-tests doc/PERFORMANCE.md) with the algorithm and protocol NCCL's tuning model
picks. Then, for every published figure of validation/data/hardware.md, the simulated value at
the configuration and size it was measured at, and the error.

Published figures used (hardware.md, "Published measurements"). Large-message plateaus,
compared at 1 GiB and 4 GiB:
  8x A100 one node, all-reduce   ~200-233 GB/s   NVIDIA/nccl-tests issues #149, #175
  8x H100 one node, all-reduce   ~370 GB/s ring  NVIDIA/nccl-tests issue #212
  DGX A100 multi-node all-reduce ~192 GB/s       NVIDIA/nccl issue #812 (8x 200 Gb/s HDR; an
                                  NCCL maintainer's figure in a thread about 2-node runs, no node
                                  count given: compared at 2 nodes)
  DGX H100 multi-node all-reduce <= 8 x 48-49 GB/s per NDR NIC (same issue): a bound, not a
                                  measurement; printed for reference at 2-64 nodes
Full nccl-tests tables (all_reduce_perf, busbw at each size), compared at 1 MiB and 64 MiB -
4 GiB; where two tables of one system are given, their range:
  8x A100-SXM4-40GB, OCI BM.GPU4.8 (HGX A100, NVSwitch), all_reduce_perf -b 64 -e 10G -f 2 -g 8,
    out-of-place: 1 MiB 23.92, 64 MiB 199.23, 256 MiB 221.38, 1 GiB 230.08, 4 GiB 234.17
    (oracle-japan/ocitutorials tutorials/_intermediates/spinup-gpu-cluster.md, an earlier
    revision of the page; the A100-40GB has the 80GB's NVLink 3 / NVSwitch)
  8x A100-SXM4-80GB, Azure ND A100 v4, NCCL 2.18.5, in-place: 1 MiB 36.22, 64 MiB 166.63,
    256 MiB 213.87, 1 GiB 228.10, 4 GiB 230.48 (Azure/AI-benchmarking-guide
    Azure_Results/ND_A100_v4_results.md, commit 3bb66ca)
NVLS (NVLink SHARP) tables, simulated with NVLS as NCCL's tuning model chooses and rates it
(models/perf/nccl_model.h), the profile's measured NVLS round latency and the fill of the NVLS
loop's pipeline (nvls_all_reduce_fill_s):
  8x H100 80GB, Azure ND H100 v5, NCCL 2.18.5, in-place, NVLS forced: 1 MiB 43.70, 64 MiB
    361.78, 1 GiB 466.35 (yosoyjay/AI-benchmarking-guide Azure_Results/ND_H100_v5_results.md, a
    fork of the Azure repository, commit a8263ef). Its 65 KiB - 2 MiB plateau (42.0-44.8 us)
    is the H100 profile's nccl_nvls_latency_s, so its 1 MiB point is printed, not compared.
  16x H100 (2 nodes of HGX H100, 8x CX-7 400G InfiniBand), NCCL 2.26.2, default algorithm
    (NVLS-Tree on 2 nodes): 1 MiB 27.33, 64 MiB 269.98, 1 GiB 448.90, 4 GiB 466.52
    (NVIDIA/nccl-tests issue #309, first post; a maintainer: "Your numbers look good"),
    simulated with v2.29.7's model. Its 64 MiB point is 4 iterations of NVLS-Tree's loop: the
    fill and drain of the loop's pipeline (nvls_all_reduce_fill_s in models/perf/nccl_model.h, 72 us
    there; +31% without it) is a sizeable part of it.
Blackwell (DGX B200: NVLink 5, fifth-generation NVSwitch), simulated with v2.29.7's Blackwell
rows (nvlsEfficiency 0.74, sm100 speed arrays, 24 NVLS channels; models/perf/nccl_model.h):
  8x B200 one node, all-reduce, NCCL 2.27.1, default algorithm: "830+" GB/s at large sizes
    (NVIDIA/nccl issue #1807; the user asked whether 900+ was expected), compared at the 1, 4
    and 8 GiB plateau. NCCL's own model gives NVLS 8 channels x min(80 x 0.74 x 7/8 x 2, bwInter
    90) = 720 GB/s (tuning.cc:291-301; the search's second pass raises bwInter from 80 to 90, the
    top of the sm100 array), so the simulated ring (900 x 0.82 = 738 GB/s, the profile's carried
    over NVLink efficiency) is chosen there: -13% to -11%.
  16x B200 (2 nodes of 8, ConnectX-7 InfiniBand), all-reduce, default algorithm: 690.07 GB/s at
    8 GiB (coreweave/nccl-tests pull request #92, "Test plan": the B200 8-GPU x 2-node base
    MPIJob; NCCL release not stated, 2.29.7's model simulated). Printed, NOT compared: NCCL's
    model rates NVLS-Tree on two B200 nodes at 8 channels x min(48 x 0.74 x 7/8 x 2, 48 x 2, 96)
    = 497 GB/s (its search fits bwIntra to the 50 GB/s NIC: 48 of the sm100 inter array), and the
    simulated flows are held to NCCL's model (-28% there); docs/validation.md lists the gap.
GB200 NVL72 (72 GPUs in one NVLink 5 domain, NCCL's multi-node NVLink: the domain is one NCCL
node), simulated with v2.29.7's model: NVLS with NCCL_MAX_NVLS_ARITY 32 heads at 20 GB/s
(33 x 20 <= 18 x 40.1), 32 x 20 x 0.74 x 31/32 x 2 = 917.6 GB/s (models/perf/nccl_model.h):
  72x GB200, one rack, all_reduce_perf, out-of-place: 512 MiB 586.06, 1 GiB 681.17, 2 GiB
    757.78, 4 GiB 839.16, 8 GiB 834.57 (coreweave/nccl-tests pull request #43, "Example output for
    a full nvl72 rack run"; NCCL release not stated). Compared at the 4 and 8 GiB plateau; the
    512 MiB - 2 GiB points are printed, NOT compared: the published curve is still rising there
    (586 -> 758) where the simulated one has reached NCCL's model rate (~910), +34% at 1 GiB.
    No cited all-gather / reduce-scatter figure of GB200 NVL72 or B200 was found.
The ring figure of nccl-tests #212 is simulated with NVLS off (NCCL_ALGO=Ring).

The simulation follows the tuning model of the NCCL release --nccl-version names (default
2.18.5, the release of the one compared table that names its NCCL: Azure ND A100 v4; the OCI
page names none). The releases differ, for what trainsim models, mostly in the ring LL
bandwidth NCCL's model gives: v2.18.5 a quarter of the bus bandwidth for all-reduce, v2.29.7
(trainsim's default) half, both capped at llMaxBws (87.7 GB/s on one A100 node). The
simulated collective moves no faster than that model's bus bandwidth, so the 1 MiB
single-node A100 all-reduce runs LL at ~39 GB/s with 2.18.5 (the published tables 24-36) and
~51 GB/s with 2.29.7; the script prints both. Still not modelled there: the pipeline of LL
slices through the ring and launch costs. NCCL's per-size channel reduction (enqueue.cc:
fewer channels while bytes < channels x threads x threadThreshold, the threshold x nRanks for
rings) does not bind at 1 MiB on 8 ranks (LL keeps a channel down to 32 KiB: 512 threads x
8 B x 8).

--check exits 1 when a compared value at >= 64 MiB is outside +-15% (the issue's bound);
--check-small when a compared 1 MiB value is outside +-30% (the issue's bound there). ctest
runs both.
Not compared: the all-gather, reduce-scatter and all-to-all rows (no published table with
both sizes is in hand), and many nodes: NCCL's tuning model, followed here, charges every one
of a ring's 2(n-1) steps its latency (7 ms for 512 A100s at Simple, x 1.4 for the ring's
"plateau"), so from 16 A100 nodes on it runs a 1 GiB all-reduce on the tree (~174 GB/s at
32-64 nodes, the tree's 0.92 of the rails' bandwidth); no published figure at that scale is at
hand to check it.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20
SIZES = [MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB, 4096 * MiB]
NODES = [1, 2, 4, 8, 16, 32, 64]

# (system, collective, nodes (None: any > 1), size (None: the 1 and 4 GiB plateau), low GB/s,
#  high GB/s, source, compared, run) where run is (NCCL release of the table, NVLS on): None
#  for the release --nccl-version names with NVLS as NCCL defaults it.
OCI = "OCI BM.GPU4.8 table (ocitutorials)"
AZURE = "Azure ND A100 v4 table (AI-benchmarking-guide)"
AZURE_H100 = "Azure ND H100 v5 table, NVLS"
NCCL309 = "nccl-tests #309, NVLS-Tree"
RING = (None, False)        # NCCL_ALGO=Ring: NVLS off
H100_V5 = ("2.18.5", True)  # the table's NCCL 2.18.5
N309 = ("2.29.7", True)     # the table's NCCL 2.26.2: its NVLS ran with 2.29.7's model nearest
NCCL1807 = ("2.29.7", True)  # NCCL 2.27.1 on B200: 2.29.7's Blackwell rows (2.18.5 has none)
BLACKWELL = ("2.29.7", True)  # release not stated: 2.29.7's Blackwell rows and MNNVL
CW43 = "coreweave/nccl-tests #43 (72x GB200, one NVL72 rack)"
CW92 = "coreweave/nccl-tests #92 (2 x 8 B200; NCCL's NVLS-Tree model 497: not compared)"
GiB = 1024 * MiB
# Configurations the default sweep (NODES x SIZES) does not hold: nodes (compute trays on GB200)
# and sizes per system.
EXTRA_RUNS = {"gb200-nvl72": ([18], [512 * MiB, GiB, 2 * GiB, 4 * GiB, 8 * GiB]),
              "dgx-b200": ([1, 2], SIZES + [8 * GiB])}
PUBLISHED = [
    ("dgx-a100-80gb", "all_reduce", 1, None, 200, 233, "nccl-tests #149, #175", True, None),
    ("dgx-h100", "all_reduce", 1, None, 370, 370, "nccl-tests #212 (ring)", True, RING),
    ("dgx-a100-80gb", "all_reduce", 2, None, 192, 192, "nccl #812", True, None),
    ("dgx-h100", "all_reduce", None, None, 0, 8 * 49, "nccl #812: 8 NICs x 48-49 GB/s (ring bound)",
     False, RING),
    ("dgx-a100-80gb", "all_reduce", 1, MiB, 23.92, 36.22, OCI + "; " + AZURE, True, None),
    ("dgx-a100-80gb", "all_reduce", 1, 64 * MiB, 166.63, 199.23, OCI + "; " + AZURE, True, None),
    ("dgx-a100-80gb", "all_reduce", 1, 256 * MiB, 213.87, 221.38, OCI + "; " + AZURE, True, None),
    ("dgx-a100-80gb", "all_reduce", 1, 1024 * MiB, 228.10, 230.08, OCI + "; " + AZURE, True, None),
    ("dgx-a100-80gb", "all_reduce", 1, 4096 * MiB, 230.48, 234.17, OCI + "; " + AZURE, True, None),
    ("dgx-h100", "all_reduce", 1, MiB, 43.70, 43.70, AZURE_H100 + " (calibration: nccl_nvls_latency_s)",
     False, H100_V5),
    ("dgx-h100", "all_reduce", 1, 64 * MiB, 361.78, 361.78, AZURE_H100, True, H100_V5),
    ("dgx-h100", "all_reduce", 1, 1024 * MiB, 466.35, 466.35, AZURE_H100, True, H100_V5),
    ("dgx-h100", "all_reduce", 2, MiB, 27.33, 27.33, NCCL309, True, N309),
    ("dgx-h100", "all_reduce", 2, 64 * MiB, 269.98, 269.98, NCCL309, True, N309),
    ("dgx-h100", "all_reduce", 2, 1024 * MiB, 448.90, 448.90, NCCL309, True, N309),
    ("dgx-h100", "all_reduce", 2, 4096 * MiB, 466.52, 466.52, NCCL309, True, N309),
    ("dgx-b200", "all_reduce", 1, None, 830, 830, "nccl #1807 (8x B200, NCCL 2.27.1: 830+)", True,
     NCCL1807),
    ("dgx-b200", "all_reduce", 2, 8 * GiB, 690.07, 690.07, CW92, False, BLACKWELL),
    ("gb200-nvl72", "all_reduce", 18, 512 * MiB, 586.06, 586.06, CW43 + " (ramp)", False, BLACKWELL),
    ("gb200-nvl72", "all_reduce", 18, GiB, 681.17, 681.17, CW43 + " (ramp)", False, BLACKWELL),
    ("gb200-nvl72", "all_reduce", 18, 2 * GiB, 757.78, 757.78, CW43 + " (ramp)", False, BLACKWELL),
    ("gb200-nvl72", "all_reduce", 18, 4 * GiB, 839.16, 839.16, CW43, True, BLACKWELL),
    ("gb200-nvl72", "all_reduce", 18, 8 * GiB, 834.57, 834.57, CW43, True, BLACKWELL),
]
LARGE_BOUND, SMALL_BOUND = 15, 30  # percent: >= 64 MiB and 1 MiB (the bounds)


ALGO_TAG = {"ring": "r", "tree": "t", "nvls": "N", "nvls_tree": "NT"}


def run(bench, system, version, nodes=NODES, sizes=SIZES, nvls=True):
    cmd = [bench, "--system", system, "--nodes", ",".join(map(str, nodes)),
           "--sizes", ",".join(map(str, sizes)), "--nccl-version", version]
    out = subprocess.run(cmd + ([] if nvls else ["--no-nvls"]),
                         check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split("\t")
        rows.append({"system": f[0], "coll": f[1], "nodes": int(f[2]), "gpus": int(f[3]),
                     "bytes": int(float(f[4])), "time_s": float(f[5]), "algbw": float(f[6]),
                     "busbw": float(f[7]), "algo": f[8], "proto": f[9]})
    return rows


def size_str(b):
    return "%d MiB" % (b // MiB) if b < 1024 * MiB else "%d GiB" % (b // (1024 * MiB))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "bench_collectives"))
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a compared value at >= 64 MiB is outside +-15%%")
    ap.add_argument("--check-small", action="store_true",
                    help="exit 1 when a compared 1 MiB value is outside +-30%%")
    ap.add_argument("--nccl-version", default="2.18.5", choices=["2.18.5", "2.29.7"],
                    help="the NCCL release whose tuning model is simulated (default 2.18.5)")
    args = ap.parse_args()
    if not os.path.exists(args.bench):
        sys.exit("nccl_busbw.py: %s not built" % args.bench)
    rows = []
    for system in ("dgx-a100-80gb", "dgx-h100"):
        rows += run(args.bench, system, args.nccl_version)
    print("NCCL tuning model of release %s" % args.nccl_version)

    for system in ("dgx-a100-80gb", "dgx-h100"):
        for coll in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            print("\n%s %s: simulated bus bandwidth, GB/s (algorithm/protocol NCCL picks)" % (system, coll))
            print("%-7s" % "nodes" + "".join("%16s" % size_str(s) for s in SIZES))
            for n in NODES:
                cells = []
                for s in SIZES:
                    r = next(r for r in rows if r["system"] == system and r["coll"] == coll
                             and r["nodes"] == n and r["bytes"] == s)
                    tag = "" if r["algo"] == "-" else " %s/%s" % (ALGO_TAG[r["algo"]], r["proto"])
                    cells.append("%16s" % ("%.1f%s" % (r["busbw"], tag)))
                print("%-7d" % n + "".join(cells))

    print("\npublished nccl-tests figures against the simulation")
    print("%-14s %-11s %-6s %-8s %-14s %9s %8s  %s" %
          ("system", "collective", "nodes", "size", "published", "simulated", "error", "source"))
    bad_large = bad_small = 0
    runs = {}
    for system, coll, nodes, size, lo, hi, source, compared, how in PUBLISHED:
        version, nvls = how if how else (None, True)
        version = version or args.nccl_version
        if how is None:
            table = rows
        else:
            key = (system, version, nvls)
            if key not in runs:
                nodes_l, sizes_l = EXTRA_RUNS.get(system, (NODES, SIZES))
                runs[key] = run(args.bench, system, version, nodes=nodes_l, sizes=sizes_l, nvls=nvls)
            table = runs[key]
        for r in table:
            if r["system"] != system or r["coll"] != coll:
                continue
            if (size is None and r["bytes"] < 1024 * MiB) or (size is not None and r["bytes"] != size):
                continue
            if (nodes is not None and r["nodes"] != nodes) or (nodes is None and r["nodes"] < 2):
                continue
            v = r["busbw"]
            ref = lo if v < lo else hi if v > hi else v
            err = (v - ref) / ref * 100 if compared else float("nan")
            pub = ("%g" % lo if lo == hi else "%g-%g" % (lo, hi)) if lo > 0 else "<= %g" % hi
            bound = SMALL_BOUND if r["bytes"] < 64 * MiB else LARGE_BOUND
            mark = ""
            if compared and abs(err) > bound:
                if bound == SMALL_BOUND:
                    bad_small += 1
                else:
                    bad_large += 1
                mark = "  OUTSIDE +-%d%%" % bound
            print("%-14s %-11s %-6d %-8s %-14s %9.1f %7s%%  %s [%s %s/%s]%s" %
                  (system, coll, r["nodes"], size_str(r["bytes"]), pub, v,
                   "%+.1f" % err if compared else "  n/a", source, version,
                   ALGO_TAG.get(r["algo"], "-"), r["proto"], mark))
    other = "2.29.7" if args.nccl_version == "2.18.5" else "2.18.5"
    r = run(args.bench, "dgx-a100-80gb", other, nodes=[1], sizes=[MiB])
    r = next(x for x in r if x["coll"] == "all_reduce")
    print("the 1 MiB single-node A100 all-reduce with NCCL %s's tuning model instead: %.1f GB/s "
          "(%s/%s; not compared)" % (other, r["busbw"], r["algo"], r["proto"]))
    status = 0
    if bad_large:
        print("%d compared values at >= 64 MiB outside +-%d%%" % (bad_large, LARGE_BOUND))
        status = 1 if args.check else status
    if bad_small:
        print("%d compared values at 1 MiB outside +-%d%%" % (bad_small, SMALL_BOUND))
        status = 1 if args.check_small else status
    return status

if __name__ == "__main__":
    sys.exit(main())
