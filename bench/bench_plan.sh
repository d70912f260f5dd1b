#!/usr/bin/env bash
# The planner at scale (issue: `trainsim plan`): the whole layout space of GPT-1T on 3072
# A100-80GB GPUs with global batch 3072 (Megatron SC'21 Table 1, last row; bench/plan/), the
# top 50 simulated event by event. Prints the wall time, the candidates per second of each
# stage, the estimate-vs-simulation error on the confirmed candidates, and the best layout next
# to Table 1's (TP 8, PP 64, micro batch 1) simulated by `trainsim simulate`.
# Exit 0 when the search took <= 600 s and its best layout is at least as fast as Table 1's.
#   bench/bench_plan.sh [BUILD_DIR] [--jobs N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
trainsim=$build/apps/trainsim
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s.%N)
"$trainsim" plan "$root/bench/plan/gpt-1t_3072_a100.yaml" --json "$work/plan.json" "$@" \
  > "$work/table.txt" 2> "$work/progress.txt"
end=$(date +%s.%N)
grep -E "candidates \(of|stages \(a\)|stage \(c\)" "$work/progress.txt"
head -6 "$work/table.txt"
grep -E "^estimate vs|^enumerated" "$work/table.txt"
"$trainsim" simulate "$root/scenarios/gpt-1t_tp8_pp64_dp6.yaml" --format json > "$work/t1.json"
# Process start-up of a simulation (trainsim links no LibTorch): 20 whole runs of the tiny
# scenario, start to exit, averaged (budget 50 ms each).
t0=$(date +%s.%N)
for _ in $(seq 20); do
  "$trainsim" simulate "$root/scenarios/small/gpt-tiny_tp1_pp1_dp1.yaml" --format json > /dev/null
done
t1=$(date +%s.%N)
python3 -c "print('simulate start-up to exit, tiny scenario: %.1f ms per process (budget 50 ms)' % ((float('$t1') - float('$t0')) / 20 * 1000))"
python3 - "$work/plan.json" "$work/t1.json" "$start" "$end" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1])); t1 = json.load(open(sys.argv[2]))
wall = float(sys.argv[4]) - float(sys.argv[3])
best = next(c for c in plan["candidates"] if c["simulated"] and not c["error"] and not c["oom"])
print("wall time %.1f s (budget 600 s)" % wall)
print("best: %s  %.0f tokens/s; Table 1 layout (tp8 pp64 dp6 mb1 full): %.0f tokens/s (%+.1f%%)"
      % (best["layout"], best["tokens_per_s"], t1["tokens_per_s"],
         100 * (best["tokens_per_s"] / t1["tokens_per_s"] - 1)))
ok = wall <= 600 and best["tokens_per_s"] >= t1["tokens_per_s"]
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 2)
PY
