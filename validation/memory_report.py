#!/usr/bin/env python3
"""Memory and PCIe report of one rank over one iteration, from trainsim's outputs.

    trainsim simulate SCENARIO.yaml --trace trace.json --memory-csv memory.csv
    python3 validation/memory_report.py --trace trace.json --memory-csv memory.csv \
        --rank 0 --out report.html [--capacity-gib 80] [--png report.png]

Writes a self-contained HTML page (inline SVG, no scripts) with three panels on one time axis,
in the spirit of the offloaded-training characterization study (shared/references/000):
  1. the phases of the iteration on that rank (forward, backward incl. recomputation, gradient
     and parameter communication, GPU and CPU optimizer steps, device->host and host->device
     copies), one lane each, drawn from the trace's complete events;
  2. GPU memory by category, stacked (the CSV memory timeline, the same series as the trace's
     "memory" counter), with the GPU capacity when given;
  3. PCIe traffic in both directions (the trace's "link bytes/s" counter of that rank).
--png renders the page with headless Chromium when it is installed, else converts the SVG
with rsvg-convert or ImageMagick when one of them is. Python standard library only.
"""
import argparse
import csv
import html
import json
import os
import shutil
import subprocess
import sys
import tempfile

CATEGORIES = ["parameters", "gradients", "optimizer_states", "activations", "comm_buffers",
              "offload_buffers", "framework"]
COLORS = {"parameters": "#4e79a7", "gradients": "#f28e2b", "optimizer_states": "#e15759",
          "activations": "#76b7b2", "comm_buffers": "#59a14f", "offload_buffers": "#edc948",
          "framework": "#b07aa1"}
# Lanes: (label, predicate on a trace event, color).
LANES = [
    ("forward", lambda e: e["phase"] == "forward" and e["tid"] == 0, "#4e79a7"),
    ("backward", lambda e: e["phase"] in ("backward", "recompute") and e["tid"] == 0, "#f28e2b"),
    ("recompute", lambda e: e["phase"] == "recompute" and e["tid"] == 0, "#ffbe7d"),
    ("grad / param comm", lambda e: e["phase"] in ("grad_sync", "param_sync", "gradsync",
                                                   "paramsync") or e["tid"] == 3, "#59a14f"),
    ("optimizer (GPU)", lambda e: e["kind"] == "optimizer_gpu", "#e15759"),
    ("optimizer (CPU)", lambda e: e["kind"] == "optimizer_cpu", "#9c2f31"),
    ("copy device->host", lambda e: e["kind"] == "copy_d2h", "#edc948"),
    ("copy host->device", lambda e: e["kind"] == "copy_h2d", "#b07aa1"),
]


def load_trace(path, rank):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans, links, name = [], [], "rank %d" % rank
    for e in events:
        if e.get("pid") != rank:
            continue
        ph = e.get("ph")
        if ph == "X" and not str(e.get("cat", "")).startswith("host_") and e.get("cat") != "wait":
            a = e.get("args", {})
            spans.append({"t0": e["ts"] * 1e-6, "t1": (e["ts"] + e["dur"]) * 1e-6,
                          "tid": e.get("tid"), "phase": a.get("phase", ""),
                          "kind": a.get("kind", e.get("cat", "")), "name": e.get("name", "")})
        elif ph == "C" and e.get("name") == "link bytes/s":
            a = e["args"]
            links.append((e["ts"] * 1e-6, a.get("PCIe H2D", 0.0), a.get("PCIe D2H", 0.0)))
        elif ph == "M" and e.get("name") == "process_name":
            name = e["args"].get("name", name)
    if not spans:
        sys.exit("memory_report: no events of rank %d in %s (traced ranks: see the summary's "
                 "trace_ranks)" % (rank, path))
    links.sort()
    return spans, links, name


def load_memory(path, rank):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["device"] == "gpu" and int(r["id"]) == rank:
                rows.append((float(r["time_s"]), [int(r[c]) for c in CATEGORIES]))
    if not rows:
        sys.exit("memory_report: no GPU rows of rank %d in %s" % (rank, path))
    return rows


def merge(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def nice_step(span, target):
    raw = span / max(target, 1)
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 10 ** -len(str(int(1 / raw)))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def render(spans, links, mem, title, capacity_gib):
    t_end = max(max(s["t1"] for s in spans), mem[-1][0])
    t_end = t_end * 1.01 if t_end > 0 else 1.0
    W, left, right = 1200, 170, 30
    plot_w = W - left - right
    lane_h, lanes_top = 18, 60
    mem_top = lanes_top + lane_h * len(LANES) + 30
    mem_h = 320
    pcie_top = mem_top + mem_h + 50
    pcie_h = 150
    H = pcie_top + pcie_h + 80
    x = lambda t: left + plot_w * t / t_end
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="Helvetica, Arial, sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="28" font-size="17" font-weight="bold">%s</text>' % (left, html.escape(title))]

    # ---- time grid (shared)
    step = nice_step(t_end, 12)
    t = 0.0
    while t <= t_end + 1e-12:
        xx = x(t)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e6e6e6"/>'
                   % (xx, lanes_top - 4, xx, pcie_top + pcie_h))
        out.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%g</text>'
                   % (xx, pcie_top + pcie_h + 16, round(t, 6)))
        t += step
    out.append('<text x="%d" y="%d" text-anchor="middle">time in the iteration (s)</text>'
               % (left + plot_w // 2, pcie_top + pcie_h + 36))

    # ---- phase lanes
    for i, (label, pred, color) in enumerate(LANES):
        y = lanes_top + i * lane_h
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (left - 8, y + 13, label))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#f7f7f7"/>'
                   % (left, y + 2, plot_w, lane_h - 4))
        for a, b in merge([(s["t0"], s["t1"]) for s in spans if pred(s)]):
            out.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"/>'
                       % (x(a), y + 2, max(x(b) - x(a), 0.8), lane_h - 4, color))
    # phase boundaries carried down through the plots: end of forward, end of backward
    fwd = [s["t1"] for s in spans if s["phase"] == "forward" and s["tid"] == 0]
    bwd = [s["t1"] for s in spans if s["phase"] in ("backward", "recompute") and s["tid"] == 0]
    marks = []
    if fwd:
        marks.append((min(s["t0"] for s in spans if s["phase"] in ("backward", "recompute")
                          and s["tid"] == 0) if bwd else max(fwd), "backward starts"))
    if bwd:
        marks.append((max(bwd), "backward ends"))
    for tm, label in marks:
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333" stroke-dasharray="4,3"/>'
                   % (x(tm), lanes_top - 4, x(tm), pcie_top + pcie_h))
        out.append('<text x="%.1f" y="%d" font-size="11" fill="#333">%s</text>'
                   % (x(tm) + 3, mem_top - 8, label))

    # ---- stacked memory
    gib = 2.0 ** 30
    peak = max(sum(v) for _, v in mem)
    ymax = max(peak, (capacity_gib or 0) * gib) * 1.08
    y = lambda b: mem_top + mem_h - mem_h * b / ymax
    pts = [(t, v) for t, v in mem] + [(t_end, mem[-1][1])]
    base = [0] * len(pts)
    for ci, cat in enumerate(CATEGORIES):
        top = [base[i] + pts[i][1][ci] for i in range(len(pts))]
        if max(top[i] - base[i] for i in range(len(pts))) == 0:
            continue
        upper, lower = [], []
        for i in range(len(pts) - 1):
            t0, t1 = pts[i][0], pts[i + 1][0]
            upper += ["%.2f,%.2f" % (x(t0), y(top[i])), "%.2f,%.2f" % (x(t1), y(top[i]))]
            lower += ["%.2f,%.2f" % (x(t0), y(base[i])), "%.2f,%.2f" % (x(t1), y(base[i]))]
        out.append('<polygon points="%s" fill="%s" stroke="none"/>'
                   % (" ".join(upper + lower[::-1]), COLORS[cat]))
        base = top
    ystep = nice_step(ymax / gib, 6)
    v = 0.0
    while v * gib <= ymax:
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" stroke-width="0.5"/>'
                   % (left - 4, y(v * gib), left, y(v * gib)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (left - 8, y(v * gib) + 4, v))
        v += ystep
    out.append('<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">GPU memory (GiB)</text>'
               % (left - 48, mem_top + mem_h // 2))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>'
               % (left, mem_top, plot_w, mem_h))
    if capacity_gib:
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c00" stroke-width="1.5" '
                   'stroke-dasharray="8,4"/>' % (left, y(capacity_gib * gib), left + plot_w, y(capacity_gib * gib)))
        out.append('<text x="%d" y="%.1f" fill="#c00" text-anchor="end">capacity %g GiB</text>'
                   % (left + plot_w - 4, y(capacity_gib * gib) - 4, capacity_gib))
    out.append('<text x="%d" y="%d" fill="#222">peak %.2f GiB</text>' % (left + 6, mem_top + 16, peak / gib))
    # legend
    lx = left
    for cat in CATEGORIES:
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (lx, mem_top + mem_h + 10, COLORS[cat]))
        out.append('<text x="%d" y="%d">%s</text>' % (lx + 16, mem_top + mem_h + 21, cat.replace("_", " ")))
        lx += 20 + 8 * len(cat) + 14

    # ---- PCIe
    gbs = 1e9
    pmax = max([max(h2d, d2h) for _, h2d, d2h in links] + [1.0]) * 1.15
    yp = lambda r: pcie_top + pcie_h - pcie_h * r / pmax
    for idx, (label, color) in ((1, ("host->device (H2D)", "#b07aa1")), (2, ("device->host (D2H)", "#d4a200"))):
        seg = []
        pts = links + [(t_end, 0.0, 0.0)]
        for i in range(len(pts) - 1):
            seg += ["%.2f,%.2f" % (x(pts[i][0]), yp(pts[i][idx])), "%.2f,%.2f" % (x(pts[i + 1][0]), yp(pts[i][idx]))]
        if seg:
            out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6"/>' % (" ".join(seg), color))
    pstep = nice_step(pmax / gbs, 4)
    v = 0.0
    while v * gbs <= pmax:
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (left - 8, yp(v * gbs) + 4, v))
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>' % (left, yp(v * gbs), left + plot_w, yp(v * gbs)))
        v += pstep
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (left, pcie_top, plot_w, pcie_h))
    out.append('<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">PCIe (GB/s)</text>'
               % (left - 48, pcie_top + pcie_h // 2))
    out.append('<rect x="%d" y="%d" width="12" height="3" fill="#b07aa1"/><text x="%d" y="%d">host->device</text>'
               % (left + 8, pcie_top + 10, left + 24, pcie_top + 15))
    out.append('<rect x="%d" y="%d" width="12" height="3" fill="#d4a200"/><text x="%d" y="%d">device->host</text>'
               % (left + 120, pcie_top + 10, left + 136, pcie_top + 15))
    out.append("</svg>")
    return "\n".join(out)


def to_png(html_path, svg_text, png_path):
    for exe in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(exe):
            subprocess.run([exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                            "--screenshot=" + os.path.abspath(png_path), "--window-size=1240,1000",
                            "file://" + os.path.abspath(html_path)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return exe
    with tempfile.NamedTemporaryFile("w", suffix=".svg", delete=False) as f:
        f.write(svg_text)
        svg = f.name
    try:
        if shutil.which("rsvg-convert"):
            subprocess.run(["rsvg-convert", "-o", png_path, svg], check=True)
            return "rsvg-convert"
        if shutil.which("convert"):
            subprocess.run(["convert", svg, png_path], check=True)
            return "convert"
    finally:
        os.unlink(svg)
    sys.exit("memory_report: --png needs chromium, rsvg-convert or ImageMagick convert")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--memory-csv", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--out", required=True, help="HTML file to write")
    ap.add_argument("--capacity-gib", type=float, default=None, help="GPU capacity line")
    ap.add_argument("--title", default=None)
    ap.add_argument("--png", default=None, help="also render a PNG")
    a = ap.parse_args()
    spans, links, name = load_trace(a.trace, a.rank)
    mem = load_memory(a.memory_csv, a.rank)
    title = a.title or "Memory and PCIe traffic over one iteration: %s" % name
    svg = render(spans, links, mem, title, a.capacity_gib)
    with open(a.out, "w") as f:
        f.write("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>%s</title></head>"
                "<body style='margin:0'>\n%s\n</body></html>\n" % (html.escape(title), svg))
    print("wrote", a.out)
    if a.png:
        print("rendered", a.png, "with", to_png(a.out, svg, a.png))


if __name__ == "__main__":
    main()
