#!/usr/bin/env python3
"""Simulated against measured on a real H100: what `validation/gpu_check.sh` recorded on a lent
NVIDIA H100 80GB HBM3 (2026-11-26, LibTorch 2.11.0 + CUDA 13.0, validation/data/h100_2026-11-26/).

1. Replay against simulation, task by task. `trainsim replay` ran rank 0 of Table 1's GPT 1.7B
   layout (TP 1, PP 1, DP 32, micro batch 16, full recomputation, fp16) on the H100
   (`--set cluster.system=dgx-h100`, one iteration, the data-parallel all-reduce replaced by
   device-local copies). This script simulates the same scenario with the shipped H100 profile
   and pairs each measured task with the simulated task of the same name. Layer 0 and the
   embedding ran first (cuBLAS and allocator warm-up: layer 0's attention took 188 ms against
   20 ms for the others), so the per-kind table counts layers 1..23 only.
   The replay runs its own LibTorch layer (hw_backend/transformer_layer.cpp: unfused attention
   with an explicit causal mask, separate bias/GeLU/dropout kernels), not Megatron-LM 2021's
   fused kernels, so its attention is expected slower than the megatron-2021 model; the MLP's
   GEMMs are the same work in both. Its optimizer step is one fused pass (kernels/fused_adam.cu),
   where the megatron-2021 model counts Megatron's separate passes (grad zero, unscale, norm,
   Adam, fp16 copy: 50 bytes per parameter, models/perf/flops.cpp), so `adam gpu` differs by design.
   Its collectives are device-local copies (one GPU) and are left out of the table.
   A second column simulates with the shipped profile fitted from that H100's own
   microbenchmarks (`trainsim calibrate --from-microbench`, where the build has it).
2. The shipped H100 profile against `trainsim calibrate --device cuda` on that H100: streaming
   copy against hbm_efficiency x 3.35 TB/s, the best bf16 GEMM against gemm_max_efficiency x
   989 TFLOP/s, pinned host-to-device copies against pcie_efficiency x 64 GB/s.
3. Host-side issue cost from validation/host_dispatch.py: PyTorch eager per-op host time, and
   one MoE layer at Qwen3-30B-A3B's per-rank shapes (GPU-bound or host-bound).
4. Megatron-Core layers replayed on the GPU with their host timelines (where a newer
   gpu_check.sh folder, validation/data/gpu-check-<device>-<date>/ with replays.json, is there):
   a Llama-3-8B-shaped layer stack and a Qwen3-30B-A3B-shaped MoE layer (hw_backend/core_layer.h),
   each simulated with the same --set values on the device's system (dgx-h100 / dgx-h200) and
   paired task by task; the trace's `host` thread gives the host issue time per task and per
   top-level ATen op, against the device time.
No bound is asserted on the errors (they are measurements of one machine); --check fails only
if the recorded replay no longer pairs with the simulator's graph (fewer than 90% of its tasks
found by name), which would make part 1 meaningless until the data is recorded again.
"""
import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data", "h100_2026-11-26")
SCENARIO = os.path.join(ROOT, "scenarios", "gpt-1.7b_tp1_pp1_dp32.yaml")
H100_PEAK_BF16_FLOPS = 989e12   # NVIDIA H100 SXM5 datasheet, dense BF16
H100_HBM_BYTES_PER_S = 3.35e12  # NVIDIA H100 SXM5 datasheet, HBM3
PCIE5_X16_BYTES_PER_S = 64e9    # PCIe Gen5 x16, per direction


def task_spans(trace_path, pid=0):
    spans = {}
    for e in json.load(open(trace_path))["traceEvents"]:
        if (e.get("ph") == "X" and e.get("pid") == pid and "task" in e.get("args", {})
                and not str(e.get("cat", "")).startswith("host_") and e.get("cat") != "wait"):  # the replay's host thread names tasks too
            spans[e["name"]] = e["dur"] * 1e-6
    return spans


def kind_of(name):
    return re.sub(r"\d+", "#", name)


def simulated_spans(trainsim, calibration=None):
    """Rank 0's task spans and the iteration time of the scenario on dgx-h100."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "sim.json")
        cmd = [trainsim, "simulate", SCENARIO, "--set", "cluster.system=dgx-h100", "--trace",
               trace, "--trace-ranks", "0", "--json", os.path.join(tmp, "s.json")]
        if calibration:
            cmd += ["--calibration", calibration]
        subprocess.run(cmd, check=True, capture_output=True)
        return task_spans(trace), json.load(open(os.path.join(tmp, "s.json")))["iteration_time_s"]


def fitted_profile(trainsim, out):
    """The shipped H100 profile fitted from the H100's microbenchmarks (calibrate
    --from-microbench, which runs in trainsim-torch); False where this build lacks it."""
    r = subprocess.run([trainsim, "calibrate", "--from-microbench",
                        os.path.join(DATA, "calibrate_cuda.json"), "--base",
                        os.path.join(ROOT, "calibration", "h100-sxm5-80gb.json"), "--out", out],
                       capture_output=True, text=True)
    return r.returncode == 0


def replay_vs_sim(trainsim):
    sim, sim_iter = simulated_spans(trainsim)
    with tempfile.TemporaryDirectory() as tmp:
        fitted = os.path.join(tmp, "fitted.json")
        fit = simulated_spans(trainsim, fitted)[0] if fitted_profile(trainsim, fitted) else None
    meas = task_spans(os.path.join(DATA, "replay_gpt-1.7b.trace.json"))
    meas_iter = json.load(open(os.path.join(DATA, "replay_gpt-1.7b.summary.json")))[
        "iteration_time_s"]
    paired = [n for n in meas if n in sim]
    print("1. Replay on the H100 against simulation (GPT 1.7B, rank 0, shipped H100 profile)")
    print(f"   tasks: {len(meas)} measured, {len(paired)} paired by name with the simulated graph")
    print(f"   iteration: measured {meas_iter:.3f} s (one cold iteration), simulated "
          f"{sim_iter:.3f} s")
    agg = collections.OrderedDict()
    for n in sorted(paired):
        if " layer0 " in n or "embedding" in n:
            continue  # warm-up (see the docstring)
        if n.startswith(("all_reduce", "all_gather", "reduce_scatter", "send", "recv")):
            continue  # replayed as device-local copies: not the collective
        a = agg.setdefault(kind_of(n), [0.0, 0.0, 0, 0.0])
        a[0] += meas[n]
        a[1] += sim[n]
        a[2] += 1
        a[3] += fit[n] if fit else 0.0
    print(f"   {'task kind (layers 1..23)':36s} {'n':>4s} {'measured ms':>12s} "
          f"{'simulated ms':>13s} {'error':>8s}" + ("   with the fitted profile" if fit else ""))
    for k, (m, s, c, f) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        line = f"   {k[:36]:36s} {c:4d} {m * 1e3:12.2f} {s * 1e3:13.2f} {100 * (s / m - 1):+7.1f}%"
        if fit:
            line += f"   {f * 1e3:10.2f} ms {100 * (f / m - 1):+7.1f}%"
        print(line)
    if fit:
        print("   (fitted profile: the shipped one with the GEMM table, HBM and PCIe efficiencies "
              "of the H100's own microbenchmarks, `calibrate --from-microbench`)")
    else:
        print("   (calibrate --from-microbench is not in this build: no fitted-profile column)")
    summary = json.load(open(os.path.join(DATA, "replay_gpt-1.7b.summary.json")))
    print(f"   peak memory: modelled {summary['modelled_peak_memory_bytes'] / 2**30:.2f} GiB, "
          f"allocator peak {summary['measured_peak_allocated_bytes'] / 2**30:.2f} GiB (the "
          "replay's unfused intermediates)")
    # The same comparison through the product: validate reads the recorded trace.
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "v.json")
        subprocess.run([trainsim, "validate", SCENARIO, "--set", "cluster.system=dgx-h100",
                        "--measured-trace", os.path.join(DATA, "replay_gpt-1.7b.trace.json"),
                        "--json", out], check=True, capture_output=True)
        v = json.load(open(out))
    c = v["per_kind"]["compute"]
    print(f"   trainsim validate --measured-trace: {v['tasks_compared']} tasks; compute "
          f"{c['simulated_sum_s']:.3f} s simulated against {c['measured_sum_s']:.3f} s measured "
          f"(median task error {100 * c['error_median']:+.1f}%, layer 0's warm-up included)")
    return len(paired) / max(1, len(meas))


def profile_vs_calibrate():
    shipped = json.load(open(os.path.join(ROOT, "calibration", "h100-sxm5-80gb.json")))["parameters"]
    cal = json.load(open(os.path.join(DATA, "calibrate_cuda.json")))
    m = cal["measurements"]
    copy = m["stream_copy"]["bytes_per_s"]
    best_gemm = max(r["flops_per_s"] for r in m["gemm"])
    h2d = max(r["h2d_bytes_per_s"] for r in m["copies"])
    rows = [
        ("HBM streaming copy", copy / H100_HBM_BYTES_PER_S, shipped["hbm_efficiency"]["value"],
         f"{copy / 1e12:.2f} TB/s"),
        ("best bf16 GEMM (calibrate's grid)", best_gemm / H100_PEAK_BF16_FLOPS,
         shipped["gemm_max_efficiency"]["value"], f"{best_gemm / 1e12:.0f} TFLOP/s"),
        ("pinned host-to-device copy", h2d / PCIE5_X16_BYTES_PER_S,
         shipped["pcie_efficiency"]["value"], f"{h2d / 1e9:.1f} GB/s"),
    ]
    print("\n2. Shipped H100 profile against `trainsim calibrate --device cuda` on the H100")
    print(f"   {'figure':36s} {'measured':>16s} {'fraction':>9s} {'profile':>8s}")
    for name, frac, prof, text in rows:
        print(f"   {name:36s} {text:>16s} {frac:9.3f} {prof:8.3f}")
    print(f"   per-op fixed cost (element-wise fit intercept, LibTorch C++): "
          f"{m['memory_bound_fit']['overhead_s'] * 1e6:.1f} us; the profile's "
          f"kernel_launch_overhead_s is {shipped['kernel_launch_overhead_s']['value'] * 1e6:.1f} us "
          "(a GPU-side cost; the intercept is host dispatch of back-to-back tiny ops)")


def host_dispatch():
    d = json.load(open(os.path.join(DATA, "host_dispatch.json")))
    moe = json.load(open(os.path.join(DATA, "host_dispatch_moe_layer.json")))["moe_layer"]
    print(f"\n3. Host-side issue cost, PyTorch {d['torch']} eager on the H100's host")
    ops = sorted(((k, v["host_us_per_op"]) for k, v in d["ops"].items() if "host_us_per_op" in v),
                 key=lambda kv: kv[1])
    print("   per op (us): " + ", ".join(f"{k} {v:.1f}" for k, v in ops))
    a = d["autograd"]
    print(f"   autograd: forward {a['forward_host_us_per_node']:.1f} us, backward "
          f"{a['backward_us_per_node']:.1f} us per node; a device-to-host .item() on an idle "
          f"GPU {d['sync']['us_per_item']:.1f} us")
    gemm_us = sum(us for name, us, _ in moe["top_ops_self_gpu_us_per_layer"] if name == "aten::mm")
    print(f"   MoE layer at Qwen3-30B-A3B per-rank shapes (bf16, unfused permutation, one GEMM per "
          f"local expert): {moe['wall_s_per_layer_fwd_bwd'] * 1e3:.2f} ms wall per forward + "
          f"backward, {moe['gpu_kernel_s_per_layer_fwd_bwd'] * 1e3:.2f} ms of kernels "
          f"({moe['kernels_per_layer_fwd_bwd']:.0f} kernels, GPU busy "
          f"{100 * moe['gpu_busy_fraction']:.0f}%: bound by the GPU, not the host); expert GEMMs "
          f"{gemm_us / 1e3:.2f} ms")


def core_replays(trainsim, folder):
    """Part 4: the Megatron-Core replays of a gpu_check.sh folder against the simulator."""
    meta = json.load(open(os.path.join(folder, "replays.json")))
    system = "dgx-h200" if "H200" in meta.get("device", "") else "dgx-h100"
    print(f"\n4. Megatron-Core layers on the {meta.get('device', 'GPU')} "
          f"({os.path.relpath(folder, ROOT)}), simulated on {system}")
    if "new_torch_ops" in meta:  # gpu_check.sh: AUTO, or OFF after a failed new-op build
        print(f"   replay build: TRAINSIM_REPLAY_NEW_TORCH_OPS={meta['new_torch_ops']}")
    for r in meta["replays"]:
        trace = os.path.join(folder, f"replay_{r['name']}.trace.json")
        if not os.path.exists(trace):
            print(f"   {r['name']}: no trace (the gpu_check.sh step failed; see gpu_check.log)")
            continue
        sets = r["sets"].split() + [f"cluster.system={system}"]
        with tempfile.TemporaryDirectory() as tmp:
            st = os.path.join(tmp, "sim.json")
            cmd = [trainsim, "simulate", os.path.join(ROOT, r["scenario"]), "--trace", st,
                   "--trace-ranks", "0", "--json", os.path.join(tmp, "s.json")]
            for x in sets:
                cmd += ["--set", x]
            subprocess.run(cmd, check=True, capture_output=True)
            sim = task_spans(st)
        events = json.load(open(trace))["traceEvents"]
        meas = task_spans(trace)
        host = [e for e in events if e.get("ph") == "X" and e.get("cat") == "host_issue"]
        paired = [n for n in meas if n in sim]
        print(f"   {r['name']}: {len(meas)} tasks measured, {len(paired)} paired with the "
              f"simulated graph ({r['sets']})")
        summary = os.path.join(folder, f"replay_{r['name']}.summary.json")
        if os.path.exists(summary):  # what the GEMMs ran (FP8, grouped), from the notes
            for n in json.load(open(summary)).get("notes", []):
                if n.startswith(("FP8:", "GEMMs of the last iteration")):
                    print(f"     note: {n[:240]}")
        agg = collections.OrderedDict()
        for n in paired:
            if n.startswith(("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send",
                             "recv")):
                continue  # device-local copies on one GPU
            a = agg.setdefault(kind_of(n), [0.0, 0.0, 0])
            a[0] += meas[n]
            a[1] += sim[n]
            a[2] += 1
        for k, (m, sm, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:8]:
            print(f"     {k[:40]:40s} {c:4d} measured {m * 1e3:9.2f} ms simulated "
                  f"{sm * 1e3:9.2f} ms {100 * (sm / m - 1) if m else 0:+7.1f}%")
        if host:
            issue = sum(e["dur"] for e in host) * 1e-6
            ops = sum(e["args"].get("eager_ops", 0) for e in host)
            nodes = sum(e["args"].get("autograd_nodes", 0) for e in host)
            dev = sum(meas.values())
            print(f"     host thread: {issue * 1e3:.1f} ms issuing {len(host)} tasks "
                  f"({ops} eager ops, {nodes} autograd nodes; {issue / max(1, ops + nodes) * 1e6:.1f}"
                  f" us per op or node) against {dev * 1e3:.1f} ms of task spans on the device")
        else:
            print("     no host thread in the trace (recorded before the replay had one)")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainsim", default=os.path.join(ROOT, "build", "apps", "trainsim"))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--replays", help="a gpu_check.sh output folder with replays.json (default: "
                    "the newest validation/data/gpu-check-*/ that has one)")
    args = ap.parse_args()
    paired = replay_vs_sim(args.trainsim)
    profile_vs_calibrate()
    host_dispatch()
    folders = [args.replays] if args.replays else sorted(
        d for d in glob.glob(os.path.join(HERE, "data", "gpu-check-*"))
        if os.path.exists(os.path.join(d, "replays.json")))
    if folders:
        core_replays(args.trainsim, folders[-1])
    else:
        print("\n4. Megatron-Core replays on a GPU: none recorded yet (run validation/gpu_check.sh "
              "on a GPU and keep its folder under validation/data/)")
    if args.check and paired < 0.9:
        print(f"h100_device.py: only {100 * paired:.0f}% of the recorded replay's tasks pair with "
              "the simulated graph by name: record the replay again (validation/gpu_check.sh)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
