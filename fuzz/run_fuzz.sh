#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/README.md) in build-fuzz/ and runs each for a share of a
# total time, one at a time; prints executions, time and findings per target.
#
#   fuzz/run_fuzz.sh [TOTAL_SECONDS=1920] [TARGET...]
#
# The seed corpus (tests/fuzz_corpus/<target>/; for fuzz_launch_script and fuzz_ds_config the
# launch scripts, userbuffers files and ds_config files of examples/launch/) is copied into
# build-fuzz/corpus/<target>/,
# where the runs keep what they find; crashes, hangs (> 10 s) and out-of-memory inputs land in
# build-fuzz/artifacts/<target>/. Exit status 1 when any target had a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-1920}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_scenario fuzz_overrides fuzz_calibration fuzz_trace fuzz_measured_trace fuzz_plan_result
                                    fuzz_hf_config fuzz_system_file fuzz_microbench fuzz_launch_script
                                    fuzz_ds_config)
build=${TRAINSIM_FUZZ_BUILD:-build-fuzz}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRAINSIM_FUZZ=ON -DTRAINSIM_WITH_SIM=OFF -DTRAINSIM_WITH_TORCH=OFF -DTRAINSIM_WITH_CUDA=OFF \
  -DTRAINSIM_BUILD_TESTS=OFF -DTRAINSIM_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j"${TRAINSIM_FUZZ_BUILD_JOBS:-2}" --target "${targets[@]}" >/dev/null

per=$(( total / ${#targets[@]} ))
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
status=0
printf '%-18s %12s %8s %10s %s\n' target execs seconds exec/s findings >"$build/fuzz_summary.txt"
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"; artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  case $t in
    fuzz_launch_script) seeds=(examples/launch/*.sh examples/launch/*.yaml) ;;
    fuzz_ds_config) seeds=(examples/launch/*.json) ;;
    *) seeds=(tests/fuzz_corpus/"${t#fuzz_}"/*) ;;
  esac
  cp -n "${seeds[@]}" "$corpus"/ 2>/dev/null || true
  log="$build/$t.log"
  start=$(date +%s)
  "$build/fuzz/$t" "$corpus" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    >"$log" 2>&1 || true
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  findings=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \
    -o -name 'leak-*' -o -name 'slow-unit-*' \) | wc -l)
  [ "$findings" -eq 0 ] || status=1
  printf '%-18s %12s %8s %10s %s\n' "$t" "${execs:-?}" "$secs" "${rate:-?}" "$findings" \
    | tee -a "$build/fuzz_summary.txt"
done
cat "$build/fuzz_summary.txt"
exit $status
