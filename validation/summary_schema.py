#!/usr/bin/env python3
"""The summary JSON against its schema (docs/summary.schema.json) and its documentation.

Checks, in order:
  1. the schema is a valid JSON Schema (draft 2020-12);
  2. the schema rejects broken summaries (a missing required key, an unknown key, a wrong
     type, an oom without its oom_* keys), so this check itself can fail;
  3. every committed golden summary (tests/golden/scenarios/**.summary.json) validates;
  4. `trainsim simulate SCENARIO --format json` of every shipped scenario (with --quick: all but
     the five largest Table 1 rows) prints exactly one JSON document that validates; the
     `local` CPU scenarios use tests/golden/cpu_profile.json;
  5. the keys of the schema and the keys documented in docs/summary.md (first column of the
     tables between the `schema-keys` markers) are the same set, both ways.

Key paths: a top-level key by its name (`iteration_time_s`), a key of a shared definition by
the definition's name (`MemoryByCategory.parameters`, `RankEntry.finish_s`), a key of an
inline nested object as `parent.child` (`parent[].child` inside an array).

Usage: summary_schema.py [--trainsim BIN] [--quick] [--no-run]
Exit status: 0 all good, 1 any failure, 77 (skip) when the Python `jsonschema` module is
missing (Debian: python3-jsonschema, installed by setup.sh).
"""
import argparse
import copy
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCHEMA = os.path.join(ROOT, "docs", "summary.schema.json")
DOC = os.path.join(ROOT, "docs", "summary.md")
GOLDEN = os.path.join(ROOT, "tests", "golden")
CPU_PROFILE = os.path.join(GOLDEN, "cpu_profile.json")
# Table 1 rows that take tens of seconds to minutes each: left out of the ctest (--quick).
SLOW = ("gpt-1t_", "gpt-529.6b_", "gpt-310.1b_", "gpt-145.6b_", "gpt-39.1b_")

try:
    import jsonschema
except ImportError:  # pragma: no cover
    print("summary_schema: SKIP: the Python module jsonschema is missing "
          "(apt-get install python3-jsonschema; setup.sh installs it)")
    sys.exit(77)


def schema_keys(schema):
    """Every key path the schema defines (see the module docstring)."""
    keys = set()
    defs = schema.get("$defs", {})

    def walk(node, prefix):
        for name, sub in node.get("properties", {}).items():
            path = prefix + name
            keys.add(path)
            inner(sub, path)

    def inner(sub, path):
        if sub.get("type") == "object" and "properties" in sub:
            walk(sub, path + ".")
        items = sub.get("items")
        if isinstance(items, dict) and items.get("type") == "object" and "properties" in items:
            walk(items, path + "[].")

    walk(schema, "")
    for name, d in defs.items():
        if "properties" in d:
            walk(d, name + ".")
        elif "enum" not in d:
            raise SystemExit("summary_schema: $defs/%s has neither properties nor enum" % name)
    return keys


def documented_keys(text):
    m = re.search(r"<!-- schema-keys:begin -->(.*?)<!-- schema-keys:end -->", text, re.S)
    if not m:
        raise SystemExit("summary_schema: %s has no <!-- schema-keys:begin/end --> markers" % DOC)
    keys = set()
    for line in m.group(1).splitlines():
        cell = re.match(r"\s*\|\s*`([^`]+)`\s*\|", line)
        if cell:
            keys.add(cell.group(1))
    return keys


def errors_of(validator, doc):
    return sorted(e.message for e in validator.iter_errors(doc))


def self_test(validator, good):
    """The schema must reject summaries that are wrong in each way it claims to check."""
    failures = []
    broken = []
    s = copy.deepcopy(good)
    del s["iteration_time_s"]
    broken.append(("missing iteration_time_s", s))
    s = copy.deepcopy(good)
    s["iteration_time"] = 1.0
    broken.append(("unknown top-level key", s))
    s = copy.deepcopy(good)
    s["tokens_per_s"] = "fast"
    broken.append(("string tokens_per_s", s))
    s = copy.deepcopy(good)
    s["per_rank"][0]["extra"] = 1
    broken.append(("unknown per_rank key", s))
    s = copy.deepcopy(good)
    s["peak_memory_by_category"]["kv_cache"] = 0
    broken.append(("unknown memory category", s))
    s = copy.deepcopy(good)
    s["oom"] = True
    broken.append(("oom without oom_* keys", s))
    s = copy.deepcopy(good)
    s["offload_optimizer"] = not s["offload_optimizer"]
    broken.append(("offload_optimizer flipped", s))
    s = copy.deepcopy(good)
    s["measured_peak_allocated_bytes"] = 1
    broken.append(("measured key in a simulated summary", s))
    for what, doc in broken:
        if not errors_of(validator, doc):
            failures.append("the schema accepts a broken summary (%s)" % what)
    return failures


def scenarios(quick):
    out = []
    for path in glob.glob(os.path.join(ROOT, "scenarios", "**", "*.yaml"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        if quick and os.path.basename(rel).startswith(SLOW):
            continue
        out.append(rel)
    return sorted(out)


def run_simulate(trainsim, rel):
    cmd = [trainsim, "simulate", os.path.join(ROOT, rel), "--format", "json"]
    with open(os.path.join(ROOT, rel)) as f:
        if re.search(r"^\s*system:\s*local\s*$", f.read(), re.M):
            cmd += ["--calibration", CPU_PROFILE]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        return None, "exit %d: %s" % (p.returncode, p.stderr.strip()[-500:])
    try:
        return json.loads(p.stdout), None  # the whole of stdout: nothing but the summary
    except json.JSONDecodeError as e:
        return None, "stdout is not one JSON document: %s" % e


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainsim", default=os.path.join(ROOT, "build", "apps", "trainsim"))
    ap.add_argument("--quick", action="store_true",
                    help="simulate all scenarios but the five largest Table 1 rows")
    ap.add_argument("--no-run", action="store_true", help="check goldens and docs only")
    args = ap.parse_args()

    failures = []
    with open(SCHEMA) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
    print("schema %s (version %s): valid %s" %
          (os.path.relpath(SCHEMA, ROOT), schema.get("x-trainsim-schema-version"), cls.__name__))

    goldens = sorted(glob.glob(os.path.join(GOLDEN, "scenarios", "**", "*.summary.json"),
                               recursive=True))
    if not goldens:
        failures.append("no golden summaries under tests/golden/scenarios")
    for g in goldens:
        with open(g) as f:
            doc = json.load(f)
        errs = errors_of(validator, doc)
        print("golden %-60s %s" % (os.path.relpath(g, GOLDEN), "ok" if not errs else "FAIL"))
        failures += ["%s: %s" % (os.path.relpath(g, ROOT), e) for e in errs]
    if goldens:
        with open(goldens[0]) as f:
            failures += self_test(validator, json.load(f))

    if not args.no_run:
        for rel in scenarios(args.quick):
            doc, err = run_simulate(args.trainsim, rel)
            errs = [err] if err else errors_of(validator, doc)
            print("simulate %-58s %s" % (rel, "ok" if not errs else "FAIL"))
            failures += ["%s: %s" % (rel, e) for e in errs]
            sys.stdout.flush()

    with open(DOC) as f:
        documented = documented_keys(f.read())
    defined = schema_keys(schema)
    for k in sorted(defined - documented):
        failures.append("key %s is in the schema but not documented in docs/summary.md" % k)
    for k in sorted(documented - defined):
        failures.append("key %s is documented in docs/summary.md but not in the schema" % k)
    print("docs/summary.md documents %d keys, the schema defines %d" %
          (len(documented), len(defined)))

    for f in failures:
        print("FAIL: " + f)
    print("summary_schema: %s" % ("OK" if not failures else "%d failure(s)" % len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
