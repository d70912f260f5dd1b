#!/usr/bin/env python3
"""Golden outputs: every shipped scenario's summary JSON, trace and memory CSV, byte for byte.

For each scenario under scenarios/ this script runs

    trainsim simulate SCENARIO --json S --trace T --memory-csv M

checks that the complete (`ph: X`) slices of every thread of T nest (Perfetto drops slices
that overlap without nesting), and compares S with tests/golden/<scenario path>.summary.json (verbatim: a diff is printed on
a mismatch) and T and M with the SHA-256 digests and sizes in tests/golden/<scenario path>.digests
(the traces are too large to ship). Refactors must leave every output byte-identical; a change
that alters outputs on purpose regenerates the goldens with --update and says why in its commit.

The `local` CPU scenarios (cluster.system: local) simulate with the fixed profile
tests/golden/cpu_profile.json (a `trainsim calibrate --device cpu` output committed once,
measured on an idle 2-core machine on 2026-11-27), so their goldens do not depend on this machine.

Usage: golden.py [--trainsim BIN] [--update] [--only SUBSTRING] [--jobs N]
Exit status: 0 all identical, 1 any difference or failed run.
"""
import argparse
import concurrent.futures
import difflib
import hashlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GOLDEN = os.path.join(ROOT, "tests", "golden")
CPU_PROFILE = os.path.join(GOLDEN, "cpu_profile.json")


def scenarios():
    out = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "scenarios")):
        for f in files:
            if f.endswith(".yaml"):
                out.append(os.path.relpath(os.path.join(dirpath, f), ROOT))
    return sorted(out)


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "%s %d" % (h.hexdigest(), os.path.getsize(path))


def nesting_problems(trace_path, limit=3):
    """Slices of one (pid, tid) that overlap without nesting: [(pid, tid, name_a, name_b)]."""
    import json
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    threads = {}
    for e in events:
        if e.get("ph") == "X":
            b = round(float(e["ts"]) * 1000)  # whole ns, as written
            threads.setdefault((e["pid"], e["tid"]), []).append((b, -round(float(e["dur"]) * 1000), e["name"]))
    bad = []
    for key, spans in threads.items():
        spans.sort()
        stack = []  # (end, name) of the open enclosing slices
        for b, neg_dur, name in spans:
            end = b - neg_dur
            while stack and stack[-1][0] <= b:
                stack.pop()
            if stack and end > stack[-1][0]:
                bad.append((key[0], key[1], stack[-1][1], name))
                if len(bad) >= limit:
                    return bad
            stack.append((end, name))
    return bad


def run_one(trainsim, rel, tmp):
    base = os.path.join(tmp, rel.replace("/", "__"))
    paths = {k: base + "." + k for k in ("summary.json", "trace.json", "memory.csv")}
    # Paths relative to the repository (run from ROOT): the summary names the scenario's
    # profile, and it must not depend on where the repository was cloned.
    cmd = [trainsim, "simulate", rel, "--format", "json",
           "--json", paths["summary.json"], "--trace", paths["trace.json"],
           "--memory-csv", paths["memory.csv"]]
    with open(os.path.join(ROOT, rel)) as f:
        if "system: local" in f.read():
            cmd += ["--calibration", os.path.relpath(CPU_PROFILE, ROOT)]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       cwd=ROOT)
    if p.returncode != 0:
        return rel, None, "trainsim exited %d: %s" % (p.returncode, p.stderr.strip())
    bad = nesting_problems(paths["trace.json"])
    if bad:
        return rel, None, "trace slices overlap without nesting: " + "; ".join(
            "pid %s tid %s: '%s' / '%s'" % b for b in bad)
    with open(paths["summary.json"]) as f:
        summary = f.read()
    digests = "trace.json %s\nmemory.csv %s\n" % (digest(paths["trace.json"]),
                                                  digest(paths["memory.csv"]))
    for p_ in paths.values():
        os.remove(p_)
    return rel, (summary, digests), None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainsim", default=os.path.join(ROOT, "build", "apps", "trainsim"))
    ap.add_argument("--update", action="store_true", help="write the goldens instead of checking")
    ap.add_argument("--only", help="scenarios whose path contains this string")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    args.trainsim = os.path.abspath(args.trainsim)

    todo = [s for s in scenarios() if not args.only or args.only in s]
    if not todo:
        sys.exit("golden.py: no scenario selected")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for rel, got, err in pool.map(lambda r: run_one(args.trainsim, r, tmp), todo):
            if err:
                print("FAIL %s: %s" % (rel, err))
                failed += 1
                continue
            stem = os.path.join(GOLDEN, os.path.splitext(rel)[0])
            files = {stem + ".summary.json": got[0], stem + ".digests": got[1]}
            if args.update:
                os.makedirs(os.path.dirname(stem), exist_ok=True)
                for path, text in files.items():
                    with open(path, "w") as f:
                        f.write(text)
                print("wrote %s" % rel)
                continue
            bad = []
            for path, text in files.items():
                try:
                    with open(path) as f:
                        want = f.read()
                except FileNotFoundError:
                    bad.append("%s: no golden (run golden.py --update)" % os.path.relpath(path, ROOT))
                    continue
                if want != text:
                    diff = "".join(difflib.unified_diff(
                        want.splitlines(True), text.splitlines(True),
                        "golden/" + os.path.basename(path), "now", n=1))
                    bad.append(diff[:4000])
            if bad:
                failed += 1
                print("DIFF %s\n%s" % (rel, "\n".join(bad)))
            else:
                print("ok   %s" % rel)
    print("%d scenarios, %d identical, %d different or failed"
          % (len(todo), len(todo) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
