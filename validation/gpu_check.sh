#!/usr/bin/env bash
# Build the replay side of trainsim on a GPU machine and prove its GPU paths there: the CUDA
# kernels, NCCL, the CUDA device loop of `replay`, `calibrate --device cuda`, and the host
# dispatch microbenchmark (validation/host_dispatch.py). No SimGrid: the build is replay-only
# (-DTRAINSIM_WITH_SIM=OFF), so it needs what a CUDA machine with a pip PyTorch has, plus the
# header/library packages named below.
#
#   validation/gpu_check.sh [OUT_DIR]          (default: $OUT, else ./gpu-check-out)
#
# Dependencies: CMake, ninja, nvcc and a CUDA PyTorch (its LibTorch and its NCCL, found through
# python3). Boost headers, yaml-cpp, nlohmann-json, CLI11 and GoogleTest come from the system
# or, on a machine without a package registry, from Debian packages in .debs/ (fetched where
# apt works: `cd .debs && apt-get download libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev
# libboost1.74-dev libcli11-dev libgtest-dev libgmock-dev`), unpacked under /tmp/trainsim-deps.
# Back on a machine with the simulator, compare the replay with the simulation of the same graph:
#   trainsim validate scenarios/gpt-1.7b_tp1_pp1_dp32.yaml --set cluster.system=dgx-h100 \
#     --measured-trace OUT_DIR/replay_h100_gpt1.7b.trace.json --report report.html
# (validation/h100_device.py does so for the run recorded in validation/data/h100_2026-11-26/).
# Every step logs to OUT_DIR/gpu_check.log and goes on after a failure; the exit status is the
# number of failed steps. GPU_CHECK_SKIP="host-dispatch calibrate-cuda" skips steps by name.
set -u
cd "$(dirname "$0")/.."
out=${1:-${OUT:-$PWD/gpu-check-out}}
mkdir -p "$out"
log=$out/gpu_check.log
: > "$log"
failed=0
step() {  # step NAME TIMEOUT_S COMMAND...: run, log, count a failure
  local name=$1 limit=$2
  shift 2
  case " ${GPU_CHECK_SKIP:-} " in *" $name "*) echo "=== $name: skipped (GPU_CHECK_SKIP)" | tee -a "$log"; return 0;; esac
  echo "=== $name ($(date -u +%T))" | tee -a "$log"
  local t0=$SECONDS
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
  [ $rc -eq 0 ] || failed=$((failed + 1))
  return $rc
}

step machine 60 bash -c 'nvidia-smi; nvcc --version | tail -2; g++ --version | head -1;
  cmake --version | head -1; grep PRETTY /etc/os-release; nproc;
  python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda,
    torch.cuda.get_device_name(0))"'

# First, on an idle machine: the host-side cost of issuing GPU work from PyTorch.
step host-dispatch 150 python3 validation/host_dispatch.py --out "$out/host_dispatch.json"

deps=/tmp/trainsim-deps
if ls .debs/*.deb > /dev/null 2>&1; then
  step unpack-debs 120 bash -c "for f in .debs/*.deb; do dpkg -x \$f $deps; done"
fi
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
nccl_root=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
build=build-gpu
step configure 240 cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTRAINSIM_WITH_SIM=OFF -DTRAINSIM_BUILD_BENCH=OFF \
  -DTRAINSIM_WITH_TORCH=ON -DTRAINSIM_WITH_CUDA=ON -DTRAINSIM_WITH_NCCL=ON \
  -DTRAINSIM_CUDA_ARCHITECTURES=90 "-DCMAKE_PREFIX_PATH=$deps/usr;$torch_prefix" \
  ${nccl_root:+-DNCCL_ROOT=$nccl_root}
tests="kernels_test_cpu_adam kernels_test_half kernels_test_rendezvous
  kernels_cuda_test_fused_adam_cuda nccl_test_nccl_comm hw_backend_test_comm_plan
  hw_backend_test_launch hw_backend_test_replay validation_test_compare
  validation_test_local_profile validation_test_trace_fit e2e_test_replay_cli
  e2e_test_replay_nprocs_cli"
# shellcheck disable=SC2086
step build 420 ninja -C $build -k 0 -j "$(nproc)" trainsim trainsim-torch $tests
export TRAINSIM_SOURCE_DIR=$PWD
for t in $tests; do
  exe=$(find $build/tests -name "$t" -type f | head -1)
  [ -n "$exe" ] && step "test $t" 150 "$exe" --gtest_color=no
done
cli=$build/apps/trainsim-torch
# A Table 1 layout on an H100 node: rank 0 of GPT 1.7B (TP 1, PP 1, DP 32, micro batch 16),
# its data-parallel all-reduce substituted by a local copy (one GPU).
step replay-cuda 180 $cli replay scenarios/gpt-1.7b_tp1_pp1_dp32.yaml \
  --set cluster.system=dgx-h100 --device cuda --trace "$out/replay_h100_gpt1.7b.trace.json" \
  --json "$out/replay_h100_gpt1.7b.summary.json"
step calibrate-cuda 200 $cli calibrate --device cuda --out "$out/calibrated_h100.json"
echo "gpu_check: $failed step(s) failed" | tee -a "$log"
exit $failed
