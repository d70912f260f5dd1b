#!/usr/bin/env bash
# Sanitizer job of .ci/run: the models/, sim/ and validation/ GoogleTest suites built with
# AddressSanitizer + UndefinedBehaviorSanitizer (TRAINSIM_SANITIZE, top CMakeLists.txt) in
# build-asan/, without LibTorch/CUDA/benchmarks (not what these suites test, and slow to build).
#
# Options: any UB report aborts the test (halt_on_error, -fno-sanitize-recover=undefined).
# LeakSanitizer is off (detect_leaks=0): SimGrid keeps its engine, platform and actor contexts
# alive until exit by design (s4u::Engine is a process-wide singleton that is never destroyed),
# so every sim/ test would "leak"; heap overflows, use-after-free and UB are still caught.
# detect_stack_use_after_return=0: SimGrid runs each actor on its own stack through its context
# switching, which Debian's SimGrid does not announce to ASan (no __sanitizer_start_switch_fiber),
# so ASan's fake stacks report false "stack-use-after-return" on locals of the actor's own live
# frame (seen in sim/executor.cpp run_task, Fold.Tp8Pp4Dp2Interleaved).
set -euo pipefail
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
start=$(date +%s)
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINSIM_SANITIZE=address,undefined \
  -DTRAINSIM_WITH_TORCH=OFF -DTRAINSIM_WITH_CUDA=OFF -DTRAINSIM_BUILD_BENCH=OFF \
  "${launcher[@]}" >&2
targets=()
# tests/<dir>/test_x.cpp is target <dir>_test_x; tests/<dir>/<sub>/test_x.cpp is <dir>_<sub>_test_x
# (tests/CMakeLists.txt), with the label <dir>.
for src in tests/{models,sim,validation}/test_*.cpp tests/{models,sim,validation}/*/test_*.cpp; do
  [[ -f $src ]] || continue
  rel=$(dirname "${src#tests/}")
  targets+=("${rel//\//_}_$(basename "$src" .cpp)")
done
cmake --build build-asan -j"$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}" >&2
built=$(date +%s)
ctest --test-dir build-asan --output-on-failure -j2 -L '^(models|sim|validation)$'
echo "asan: build $((built - start)) s, tests $(( $(date +%s) - built )) s" >&2
