#!/usr/bin/env python3
"""Host-side cost of issuing GPU work from PyTorch eager, measured on this machine's GPU.

What it measures (each figure in the JSON it prints names its unit):
  ops        per-op host time of typical eager ops at tiny sizes, where the GPU finishes each
             kernel before the host has issued the next one, so wall time / count is the host's
             time per op (`host_us_per_op`); `gpu_us_per_op` (CUDA events) shows the GPU side.
  autograd   a chain of elementwise ops with autograd recording: forward and backward host time
             per op.
  sync       one device-to-host round trip of a small tensor on an idle GPU (`.item()`), the
             cost of the alltoall dispatcher's split-size copy when the GPU has nothing queued.
  gpu_launch the GPU side of a kernel launch: 500 one-element kernels queued behind a ~0.1 s
             spin kernel (torch.cuda._sleep), so the GPU runs them back to back with the host
             out of the way; (end of the last - end of the spin) / 500 is the GPU's fixed cost per
             kernel (launch, ramp, tail), the figure the profiles' kernel_launch_overhead_s
             stands for. `queued_in_time` says whether the host enqueued them all before the
             spin ended (otherwise the figure includes host time). Added after the 2026-11-26
             run: not yet measured.
  moe_layer  one MoE layer's forward and backward at Qwen3-30B-A3B's per-rank shapes (tokens
             micro batch 2 x 4096, hidden 2048, 128 experts top-8, expert FFN 768 SwiGLU, 16
             local experts: expert-parallel size 8 with the all-to-all left out), written after
             Megatron-Core's alltoall dispatcher: router, top-k, permutation by expert, the
             device-to-host copy of the tokens per expert, one GEMM per local expert (as
             Transformer Engine's grouped linear issues them), unpermutation. Wall time per
             layer against the GPU's kernel time (profiler) shows whether the layer is bound
             by the host.
It needs PyTorch with a CUDA device; it runs in well under a minute on an H100.
Usage: python3 validation/host_dispatch.py [--out host_dispatch.json]
"""
import argparse
import json
import sys
import time
import traceback


def timed_loop(torch, fn, n, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    wall_s = time.perf_counter() - t0
    return {"host_issue_us_per_op": host_s / n * 1e6, "host_us_per_op": wall_s / n * 1e6,
            "gpu_us_per_op": start.elapsed_time(end) * 1e3 / n, "count": n}


def per_op(torch, dev):
    bf = torch.bfloat16
    x = torch.randn(64, 64, device=dev, dtype=bf)
    w = torch.randn(64, 64, device=dev, dtype=bf)
    idx = torch.randint(0, 64, (64,), device=dev)
    logits = torch.randn(64, 128, device=dev)
    flat = torch.randn(4096, device=dev)
    acc = torch.zeros(64, 64, device=dev, dtype=bf)
    ops = {
        "add": lambda: x + w,
        "mul_scalar": lambda: x * 1.5,
        "matmul_bf16_64": lambda: x @ w,
        "index_select": lambda: x.index_select(0, idx),
        "topk_8_of_128": lambda: torch.topk(logits, 8, dim=-1),
        "softmax": lambda: torch.softmax(logits, dim=-1),
        "sort": lambda: torch.sort(flat),
        "cumsum": lambda: torch.cumsum(flat, 0),
        "index_add_": lambda: acc.index_add_(0, idx, x),
        "amax_abs": lambda: x.abs().amax(),
        "empty_alloc": lambda: torch.empty(1024, device=dev),
    }
    if hasattr(torch, "float8_e4m3fn"):
        ops["cast_to_fp8"] = lambda: x.to(torch.float8_e4m3fn)
    out = {}
    for name, fn in ops.items():
        try:
            out[name] = timed_loop(torch, fn, 3000)
        except Exception as e:  # one op missing in this release must not hide the others
            out[name] = {"error": repr(e)}
    return out


def autograd_chain(torch, dev, length=32, n=200):
    w = torch.randn(256, device=dev, requires_grad=True)

    def run():
        y = w
        for i in range(length):
            y = y * 1.0001 + 0.001 if i % 2 else torch.nn.functional.silu(y)
        return y.sum()

    for _ in range(20):
        run().backward()
    torch.cuda.synchronize()
    fwd = bwd = 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        loss = run()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        fwd += t1 - t0
        bwd += t2 - t1
    # Each odd step is two autograd nodes (mul, add), each even one is one (silu), plus the sum.
    nodes = length // 2 * 3 + 1
    return {"forward_host_us_per_node": fwd / n / nodes * 1e6,
            "backward_us_per_node": bwd / n / nodes * 1e6, "nodes": nodes, "count": n}


def sync_round_trip(torch, dev, n=1000):
    t = torch.ones(16, device=dev, dtype=torch.int64)
    for _ in range(50):
        t.sum().item()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        t.sum().item()
    return {"us_per_item": (time.perf_counter() - t0) / n * 1e6, "count": n,
            "note": "one sum kernel plus the device-to-host copy and the wait, GPU idle"}


def gpu_launch(torch, dev, n=500, spin_cycles=int(2e8)):
    x = torch.zeros(1, device=dev)
    x.add_(1)
    torch.cuda.synchronize()
    start, spun, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    start.record()
    torch.cuda._sleep(spin_cycles)  # about 0.1 s at H100 clocks
    spun.record()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    host_s = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    spin_ms = start.elapsed_time(spun)
    return {"gpu_us_per_kernel": spun.elapsed_time(end) * 1e3 / n, "kernels": n,
            "spin_ms": spin_ms, "host_enqueue_ms": host_s * 1e3,
            "queued_in_time": host_s * 1e3 < spin_ms}


def moe_layer(torch, dev, tokens=8192, hidden=2048, experts=128, topk=8, ffn=768, local=16,
              layers=6):
    bf = torch.bfloat16
    torch.manual_seed(0)
    router_w = (torch.randn(hidden, experts, device=dev) * 0.02).requires_grad_()
    # One weight tensor per expert, as Transformer Engine's GroupedLinear holds them (weight0 ..
    # weightN): slicing one stacked tensor would make autograd add a full-size zero gradient
    # per expert, a cost no training stack pays.
    fc1 = [(torch.randn(hidden, 2 * ffn, device=dev, dtype=bf) * 0.02).requires_grad_()
           for _ in range(local)]
    fc2 = [(torch.randn(ffn, hidden, device=dev, dtype=bf) * 0.02).requires_grad_()
           for _ in range(local)]
    x = torch.randn(tokens, hidden, device=dev, dtype=bf, requires_grad=True)
    grad = torch.randn(tokens, hidden, device=dev, dtype=bf)

    def layer():
        logits = x.float() @ router_w                                   # router (fp32)
        probs, chosen = torch.topk(torch.softmax(logits, -1), topk, -1)  # [T, k]
        probs = probs / probs.sum(-1, keepdim=True)
        expert = (chosen % local).reshape(-1)        # the all-to-all left out: local experts
        order = torch.argsort(expert, stable=True)
        token_of_row = order // topk
        permuted = x.index_select(0, token_of_row)   # permutation by expert
        per_expert = torch.bincount(expert, minlength=local).tolist()  # device-to-host sync
        outs = []
        for e, chunk in enumerate(torch.split(permuted, per_expert)):   # one GEMM per expert
            h = chunk @ fc1[e]
            gate, up = h.chunk(2, -1)
            outs.append((torch.nn.functional.silu(gate) * up) @ fc2[e])
        y = torch.cat(outs) * probs.reshape(-1)[order].unsqueeze(-1).to(bf)
        out = torch.zeros_like(x).index_add(0, token_of_row, y)        # unpermutation
        out.backward(grad)

    for _ in range(2):
        layer()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(layers):
        layer()
    torch.cuda.synchronize()
    wall_s = (time.perf_counter() - t0) / layers
    result = {"shape": {"tokens": tokens, "hidden": hidden, "experts": experts, "topk": topk,
                        "moe_ffn_hidden": ffn, "local_experts": local},
              "wall_s_per_layer_fwd_bwd": wall_s}
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(layers):
                layer()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        gpu_us = sum(e.time_range.elapsed_us() for e in kernels)
        result["gpu_kernel_s_per_layer_fwd_bwd"] = gpu_us * 1e-6 / layers
        result["kernels_per_layer_fwd_bwd"] = len(kernels) / layers
        result["gpu_busy_fraction"] = result["gpu_kernel_s_per_layer_fwd_bwd"] / wall_s
        # Where the kernel time goes: GPU time per layer by kernel name, largest first.
        by_kernel = {}
        for e in kernels:
            by_kernel[e.name] = by_kernel.get(e.name, 0.0) + e.time_range.elapsed_us()
        result["top_kernels_us_per_layer"] = [
            [name[:160], us / layers] for name, us in
            sorted(by_kernel.items(), key=lambda kv: -kv[1])[:40]]
        # Each operator's GPU time (its kernels' time, attributed to the aten op that launched
        # them), per layer.
        ops = {}
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = getattr(e, "self_cuda_time_total", 0.0)
            if t > 0:
                ops[e.key] = (t / layers, e.count / layers)
        result["top_ops_self_gpu_us_per_layer"] = [
            [k, v[0], v[1]] for k, v in sorted(ops.items(), key=lambda kv: -kv[1][0])[:40]]
    except Exception as e:
        result["profiler_error"] = repr(e)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="-")
    ap.add_argument("--only", default="", help="comma-separated parts to run (default: all)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    import torch
    if not torch.cuda.is_available():
        print("host_dispatch.py: no CUDA device visible to PyTorch " + torch.__version__,
              file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    report = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
              "cuda": torch.version.cuda}
    for name, fn in (("ops", per_op), ("autograd", autograd_chain), ("sync", sync_round_trip),
                     ("gpu_launch", gpu_launch), ("moe_layer", moe_layer)):
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        try:
            report[name] = fn(torch, dev)
        except Exception:
            report[name] = {"error": traceback.format_exc()}
        report.setdefault("bench_wall_s", {})[name] = time.perf_counter() - t0
        print(f"host_dispatch: {name} done", file=sys.stderr, flush=True)
    text = json.dumps(report, indent=1, sort_keys=True)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
