#!/usr/bin/env python3
"""Include cycles and folder layering of models/ (docs/architecture.md "Folders").

Usage: include_graph.py MODELS_DIR

A unit is a header and its source (models/input/scenario.h + scenario.cpp: `input/scenario`;
an internal header listed in INTERNAL_HEADERS joins the unit it serves);
an edge A -> B is an `#include "models/B.h"` in either file of A. The script prints

  - every include cycle between units (a strongly connected component of more than one unit),
  - every include that goes against the folder layering below (a folder includes only its own
    units and those of the folders below it),
  - every unit of a folder or loose file that the layering does not list,

and exits 1 if there is any, 0 otherwise.

Layering, bottom to top: the bottom units (loose files every folder may use: errors.h,
precision.h, parallel_layout.h, nccl_version.h, json_input, subprocess) < hardware < input <
graph < perf < system < memory < builder < outputs < run (the run facade: run.h, run.cpp) <
forecast (the whole run from its iteration and checkpoint times) < plan (the planner starts
every candidate at run.h's prepare_platform). Bottom units include only other bottom units.
"""
import os
import re
import sys

LAYERS = ["<bottom>", "hardware", "input", "graph", "perf", "system", "memory", "builder",
          "outputs", "<run>", "forecast", "plan"]
BOTTOM_UNITS = {"errors", "precision", "parallel_layout", "nccl_version", "json_input",
                "subprocess"}
TOP_UNITS = {"run"}
# Internal headers, one unit with the unit whose interface they serve: models/perf/kernel_lists.h
# declares the kernel makers flops.cpp defines and the lists the flops_*.cpp files define, for
# flops.cpp and those files only (its own comment: "internal to models/perf/; the interface is
# flops.h").
INTERNAL_HEADERS = {"perf/kernel_lists": "perf/flops"}
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include\s+"models/([^"]+)\.(?:h|hpp)"', re.M)


def unit_of(rel):
    """`input/scenario` for input/scenario.h or .cpp (path relative to models/, '/' separated)."""
    unit = os.path.splitext(rel)[0]
    return INTERNAL_HEADERS.get(unit, unit)


def layer_of(unit):
    """Index in LAYERS, or None for a unit the layering does not list."""
    if "/" not in unit:
        if unit in BOTTOM_UNITS:
            return 0
        if unit in TOP_UNITS:
            return LAYERS.index("<run>")
        return None
    folder = unit.split("/", 1)[0]
    return LAYERS.index(folder) if folder in LAYERS and not folder.startswith("<") else None


def read_graph(models_dir):
    """{unit: {included unit: 'file:line' of the first include}} over models_dir's .h/.cpp."""
    graph = {}
    for root, _, files in os.walk(models_dir):
        for name in sorted(files):
            if not name.endswith((".h", ".hpp", ".cpp")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, models_dir).replace(os.sep, "/")
            unit = unit_of(rel)
            edges = graph.setdefault(unit, {})
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            for m in INCLUDE.finditer(text):
                target = INTERNAL_HEADERS.get(m.group(1), m.group(1))
                if target != unit:
                    line = text.count("\n", 0, m.start()) + 1
                    edges.setdefault(target, "models/%s:%d" % (rel, line))
    return graph


def cycles(graph):
    """Strongly connected components of more than one unit (Tarjan, iterative), sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, {})))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.stderr.write(__doc__)
        return 2
    graph = read_graph(sys.argv[1])
    problems = 0
    for comp in cycles(graph):
        problems += 1
        print("include cycle: " + " <-> ".join(comp))
        members = set(comp)
        for unit in comp:
            for target, where in sorted(graph[unit].items()):
                if target in members:
                    print("    %s: %s -> %s" % (where, unit, target))
    for unit in sorted(graph):
        if layer_of(unit) is None:
            problems += 1
            print("unit outside the layering: models/%s (add its folder or file to "
                  "tests/layout/include_graph.py)" % unit)
    for unit in sorted(graph):
        mine = layer_of(unit)
        if mine is None:
            continue
        for target, where in sorted(graph[unit].items()):
            theirs = layer_of(target)
            if theirs is None or theirs < mine or (theirs == mine and (mine != 0 or
                                                                       target in BOTTOM_UNITS)):
                continue
            problems += 1
            print("layering: %s: %s (%s) includes %s (%s)" %
                  (where, unit, LAYERS[mine], target, LAYERS[theirs]))
    if problems:
        print("%d problem(s); layering, bottom to top: %s" % (problems, " < ".join(LAYERS)))
        return 1
    print("models/: no include cycle, every include follows the layering")
    return 0


if __name__ == "__main__":
    sys.exit(main())
