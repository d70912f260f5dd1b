#!/usr/bin/env python3
"""Produces validation/data/kineto_gpt_tiny_cpu.json: a real PyTorch profiler (Kineto) trace of
one training iteration of a tiny GPT (Megatron's 2021 transformer layer, as hw_backend/
replays it) on the CPU, fp32.

Every schedule task is wrapped in torch.profiler.record_function("<trainsim task label>"), the
labels trainsim gives the tasks of scenarios/small/gpt-cpu_tp1_pp1_dp1.yaml ("fwd mb0 layer0
attn", ...), so validation/trace_import.h maps the operators to the tasks. The profiler runs with
record_shapes=True so that GEMMs and element-wise operators carry their shapes.

The exported trace is trimmed before it is committed: only complete events of categories
cpu_op and user_annotation are kept (python_function and profiler bookkeeping events are
dropped), and of their args only "Input Dims" and "Input type". Nothing else is changed:
names, ts and dur are as torch.profiler wrote them.

Usage:  /usr/bin/python3 validation/data/make_kineto_trace.py [OUT.json]
(Debian's python3-torch 1.13.1; `apt-get install python3-torch`.)
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

# scenarios/small/gpt-cpu_tp1_pp1_dp1.yaml
LAYERS, H, HEADS, S, B, V, MICROBATCHES = 2, 128, 4, 64, 2, 512, 2
HD, FFN = H // HEADS, 4 * H
P_ATTN, P_HIDDEN = 0.1, 0.1


def attn_block(x, w, mask):
    ln = F.layer_norm(x, (H,), w["ln1_w"], w["ln1_b"], 1e-5)
    qkv = F.linear(ln, w["qkv_w"], w["qkv_b"])
    q, k, v = qkv.view(S, B, HEADS, 3 * HD).split(HD, -1)
    q = q.reshape(S, B * HEADS, HD).transpose(0, 1)
    k = k.reshape(S, B * HEADS, HD).transpose(0, 1)
    v = v.reshape(S, B * HEADS, HD).transpose(0, 1)
    scores = torch.baddbmm(torch.empty(B * HEADS, S, S), q, k.transpose(1, 2), beta=0.0,
                           alpha=1.0 / math.sqrt(HD))
    probs = torch.softmax(scores.view(B, HEADS, S, S).masked_fill(mask, -10000.0), -1)
    probs = F.dropout(probs, P_ATTN, True)
    ctx = torch.bmm(probs.view(B * HEADS, S, S), v)
    ctx = ctx.view(B, HEADS, S, HD).permute(2, 0, 1, 3).contiguous().view(S, B, H)
    return x + F.dropout(F.linear(ctx, w["proj_w"]) + w["proj_b"], P_HIDDEN, True)


def mlp_block(x, w):
    ln = F.layer_norm(x, (H,), w["ln2_w"], w["ln2_b"], 1e-5)
    act = F.gelu(F.linear(ln, w["fc1_w"]) + w["fc1_b"], approximate="tanh")
    return x + F.dropout(F.linear(act, w["fc2_w"]) + w["fc2_b"], P_HIDDEN, True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                             "kineto_gpt_tiny_cpu.json")
    torch.manual_seed(1234)
    g = lambda *shape: (torch.randn(*shape) * 0.02).requires_grad_()
    layers = []
    for _ in range(LAYERS):
        layers.append({"ln1_w": torch.ones(H, requires_grad=True), "ln1_b": torch.zeros(H, requires_grad=True),
                       "qkv_w": g(3 * H, H), "qkv_b": torch.zeros(3 * H, requires_grad=True),
                       "proj_w": g(H, H), "proj_b": torch.zeros(H, requires_grad=True),
                       "ln2_w": torch.ones(H, requires_grad=True), "ln2_b": torch.zeros(H, requires_grad=True),
                       "fc1_w": g(FFN, H), "fc1_b": torch.zeros(FFN, requires_grad=True),
                       "fc2_w": g(H, FFN), "fc2_b": torch.zeros(H, requires_grad=True)})
    word, pos = g(V, H), g(S, H)
    lnf_w, lnf_b = torch.ones(H, requires_grad=True), torch.zeros(H, requires_grad=True)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    tokens = torch.randint(0, V, (MICROBATCHES, B, S))
    labels = torch.randint(0, V, (MICROBATCHES, B, S))
    rf = torch.profiler.record_function

    def iteration():
        # pp = 1: Megatron runs forward then backward per microbatch (no pipelining).
        for mb in range(MICROBATCHES):
            saved = []
            with rf(f"fwd mb{mb} embedding"):
                emb = F.dropout(F.embedding(tokens[mb], word) + F.embedding(torch.arange(S), pos),
                                P_HIDDEN, True).transpose(0, 1).contiguous()
            x = emb
            for l in range(LAYERS):
                for part, fn in (("attn", lambda t: attn_block(t, layers[l], mask)),
                                 ("mlp", lambda t: mlp_block(t, layers[l]))):
                    with rf(f"fwd mb{mb} layer{l} {part}"):
                        inp = x.detach().requires_grad_()
                        y = fn(inp)
                    saved.append((f"bwd mb{mb} layer{l} {part}", inp, y))
                    x = y.detach()
            with rf(f"fwd mb{mb} logits"):
                xin = x.detach().requires_grad_()
                ln = F.layer_norm(xin, (H,), lnf_w, lnf_b, 1e-5).transpose(0, 1).contiguous()
                loss = F.nll_loss(torch.log_softmax(F.linear(ln, word), -1).view(-1, V),
                                  labels[mb].view(-1)) / MICROBATCHES
            with rf(f"bwd mb{mb} logits"):
                loss.backward()
            grad = xin.grad
            for label, inp, y in reversed(saved):
                with rf(label):
                    y.backward(grad)
                grad = inp.grad
            with rf(f"bwd mb{mb} embedding"):
                emb.backward(grad)

    iteration()  # warm-up outside the profiler
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as prof:
        iteration()
    # Debian's torch 1.13.1 is built without Kineto (torch.autograd.kineto_available() is
    # False): torch.profiler then records with the legacy autograd profiler, whose
    # export_chrome_trace writes a bare event array without categories or shapes. The events
    # are therefore written here in Kineto's Chrome-trace schema from prof.events(): name,
    # thread, start and duration exactly as the profiler measured them, "Input Dims" from
    # record_shapes. Operators (aten::*) become cat "cpu_op", record_function ranges cat
    # "user_annotation". This profiler does not record input dtypes: no "Input type" is written
    # (the model is fp32 throughout; the importer is told so, see trainsim_meta.dtype).
    # Trimmed: view and metadata operators (no data movement) are dropped to keep the file
    # small; every other operator and every record_function range is kept.
    drop = {"aten::" + n for n in ("as_strided", "resolve_conj", "resolve_neg", "select", "_reshape_alias",
                                   "view", "t", "transpose", "reshape", "detach", "expand", "unsqueeze",
                                   "permute", "split", "narrow", "slice", "alias", "empty",
                                   "empty_strided", "is_same_size", "_unsafe_view", "squeeze")}
    keep = []
    for ev in prof.events():
        if ev.name in drop:
            continue
        start_us = ev.time_range.start
        dur_us = ev.time_range.end - ev.time_range.start
        e = {"ph": "X", "cat": "cpu_op" if ev.name.startswith("aten::") else "user_annotation",
             "name": ev.name, "pid": os.getpid(), "tid": ev.thread, "ts": start_us, "dur": dur_us}
        if ev.name.startswith("aten::") and ev.input_shapes:
            e["args"] = {"Input Dims": ev.input_shapes}
        keep.append(e)
    keep.sort(key=lambda e: (e["ts"], -e["dur"]))
    meta = {"producer": "validation/data/make_kineto_trace.py",
            "torch": torch.__version__, "python": sys.version.split()[0],
            "threads": torch.get_num_threads(),
            "model": dict(layers=LAYERS, hidden=H, heads=HEADS, seq=S, micro_batch=B, vocab=V,
                          microbatches=MICROBATCHES),
            "dtype": "float",
            "profiler": "legacy autograd profiler (this torch has no Kineto), Kineto schema",
            "trimmed": "operator and record_function events only, view/metadata operators "
                       "dropped; args Input Dims only"}
    with open(out, "w") as f:
        json.dump({"traceEvents": keep, "trainsim_meta": meta}, f, separators=(",", ":"))
    print(f"wrote {out}: {len(keep)} events")


if __name__ == "__main__":
    main()
