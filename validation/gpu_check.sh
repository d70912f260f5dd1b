#!/usr/bin/env bash
# Build the replay side of trainsim on a GPU machine and prove its GPU paths there: the CUDA
# kernels, NCCL, the CUDA device loop of `replay`, `calibrate --device cuda`, and the host
# dispatch microbenchmark (validation/host_dispatch.py). No SimGrid: the build is replay-only
# (-DTRAINSIM_WITH_SIM=OFF), so it needs what a CUDA machine with a pip PyTorch has, plus the
# header/library packages named below.
#
#   validation/gpu_check.sh [OUT_DIR]   (default: $OUT, else ./gpu-check-<DEVICE>-<date>, DEVICE
#                                        h100 / h200 / ... from nvidia-smi's GPU name)
#
# The whole script keeps to GPU_CHECK_BUDGET_S (default 480 s, the 8 minutes a lent GPU gives
# it): each step's timeout is cut to what is left, and a step with under 20 s left is skipped
# (and counted as failed). The replays of a Llama-3-8B-shaped layer stack and a
# Qwen3-30B-A3B-shaped MoE layer (hw_backend/core_layer.h, one GPU, per-rank shapes) record
# host and device timelines (the trace's `host` thread, docs/trace.md); their scenario and
# --set values are written to OUT_DIR/replays.json, which validation/h100_device.py reads.
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
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu" in *H200*) dev=h200;; *H100*) dev=h100;; *A100*) dev=a100;; *B200*) dev=b200;; *) dev=gpu;; esac
out=${1:-${OUT:-$PWD/gpu-check-$dev-$(date -u +%Y-%m-%d)}}
budget=${GPU_CHECK_BUDGET_S:-480}
mkdir -p "$out"
log=$out/gpu_check.log
: > "$log"
failed=0
step() {  # step NAME TIMEOUT_S COMMAND...: run, log, count a failure
  local name=$1 limit=$2
  shift 2
  case " ${GPU_CHECK_SKIP:-} " in *" $name "*) echo "=== $name: skipped (GPU_CHECK_SKIP)" | tee -a "$log"; return 0;; esac
  local left=$((budget - SECONDS))
  if [ $left -lt 20 ]; then
    echo "=== $name: skipped (${left} s of the ${budget} s budget left)" | tee -a "$log"
    failed=$((failed + 1))
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name ($(date -u +%T), limit ${limit} s)" | tee -a "$log"
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
step host-dispatch 90 python3 validation/host_dispatch.py --out "$out/host_dispatch.json"

deps=/tmp/trainsim-deps
if ls .debs/*.deb > /dev/null 2>&1; then
  step unpack-debs 120 bash -c "for f in .debs/*.deb; do dpkg -x \$f $deps; done"
fi
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
nccl_root=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
build=build-gpu
step configure 60 cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTRAINSIM_WITH_SIM=OFF -DTRAINSIM_BUILD_BENCH=OFF \
  -DTRAINSIM_WITH_TORCH=ON -DTRAINSIM_WITH_CUDA=ON -DTRAINSIM_WITH_NCCL=ON \
  -DTRAINSIM_CUDA_ARCHITECTURES=90 "-DCMAKE_PREFIX_PATH=$deps/usr;$torch_prefix" \
  ${nccl_root:+-DNCCL_ROOT=$nccl_root}
tests="kernels_test_cpu_adam kernels_test_half kernels_test_rendezvous
  kernels_cuda_test_fused_adam_cuda nccl_test_nccl_comm hw_backend_test_comm_plan
  hw_backend_test_launch hw_backend_test_replay hw_backend_test_core_layer hw_backend_test_gemm_ops
  validation_test_compare
  validation_test_local_profile validation_test_trace_fit e2e_test_replay_cli
  e2e_test_replay_nprocs_cli"
# The replay's new-op GEMMs (hw_backend/gemm_cuda_ops.cpp: at::_scaled_mm FP8 linears,
# at::_grouped_mm experts) compile only against the LibTorch they were written for (>= 2.8);
# nothing but a GPU machine's pip torch builds them. If the build fails there, the replay is
# rebuilt with TRAINSIM_REPLAY_NEW_TORCH_OPS=OFF (torch::linear, per-expert GEMMs) so that the
# run goes on; the log and OUT_DIR/replays.json ("new_torch_ops") say which build ran.
new_ops=AUTO
log_mark=$(wc -l < "$log")
# shellcheck disable=SC2086
if ! step build 240 ninja -C $build -k 0 -j "$(nproc)" trainsim trainsim-torch $tests; then
  if [ ! -x $build/apps/trainsim-torch ] || tail -n +"$log_mark" "$log" | grep -q "gemm_cuda_ops"; then
    new_ops=OFF
    torch_version=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)
    echo "=== gpu_check: the build with TRAINSIM_REPLAY_NEW_TORCH_OPS=AUTO failed" \
      "(hw_backend/gemm_cuda_ops.cpp against torch ${torch_version:-?}); rebuilding with OFF:" \
      "FP8 linears and expert GEMMs run torch::linear" | tee -a "$log"
    # The failed build is counted once; the rebuild's own failure would count again.
    step configure-new-ops-off 60 cmake -S . -B $build -DTRAINSIM_REPLAY_NEW_TORCH_OPS=OFF &&
      # shellcheck disable=SC2086
      step build-new-ops-off 200 ninja -C $build -k 0 -j "$(nproc)" trainsim trainsim-torch $tests &&
      echo "=== gpu_check: rebuilt with TRAINSIM_REPLAY_NEW_TORCH_OPS=OFF" | tee -a "$log"
  fi
fi
echo "=== gpu_check: new_torch_ops=$new_ops" | tee -a "$log"
export TRAINSIM_SOURCE_DIR=$PWD
for t in $tests; do
  exe=$(find $build/tests -name "$t" -type f | head -1)
  [ -n "$exe" ] && step "test $t" 60 "$exe" --gtest_color=no
done
cli=$build/apps/trainsim-torch
# A Table 1 layout on an H100 node: rank 0 of GPT 1.7B (TP 1, PP 1, DP 32, micro batch 16),
# its data-parallel all-reduce substituted by a local copy (one GPU).
step replay-cuda 60 $cli replay scenarios/gpt-1.7b_tp1_pp1_dp32.yaml \
  --set cluster.system=dgx-h100 --device cuda --trace "$out/replay_h100_gpt1.7b.trace.json" \
  --json "$out/replay_h100_gpt1.7b.summary.json"
# Megatron-Core layers on one GPU at their per-rank shapes, with host and device timelines:
# Llama 3 8B (4 of its 32 layers, micro batch 1, sequence 8192, 2 microbatches; its FSDP
# collectives are device-local copies; FP8 GEMMs through torch._scaled_mm with per-tensor current
# scaling where the build has the new ops, else in bf16; a note says which) and one
# Qwen3-30B-A3B MoE layer stack (2 layers, 128 experts / EP 8 = 16 local experts, top-8, micro
# batch 2, sequence 4096; one pipeline stage, 8 GPUs: DP 8 = EP 8, 2 microbatches; the recipe's
# EP overlap and delayed weight gradients off: the replay runs each MoE backward whole), then
# the same stack with the recipe's overlap on (the combined 1F1B schedule at pp 1: microbatch 1's
# forward beside microbatch 0's backward, whose MoE backward is split by delay_wgrad_compute:
# hw_backend/expert_wgrad.h). The same --set values are written to replays.json for
# validation/h100_device.py.
llama_sets="model.num_layers=4 parallel.global_batch_size=16"
qwen_overlap_sets="model.num_layers=2 parallel.pipeline_model_parallel_size=1
  parallel.num_layers_per_virtual_pipeline_stage=null parallel.global_batch_size=32 cluster.nodes=1"
qwen_sets="$qwen_overlap_sets
  parallel.overlap_moe_expert_parallel_comm=false parallel.delay_wgrad_compute=false"
cat > "$out/replays.json" <<JSON
{"device": "$gpu",
 "new_torch_ops": "$new_ops",
 "replays": [
  {"name": "llama3-8b_layers", "scenario": "scenarios/h100/llama3-8b_fp8-cs_fsdp8_tp1_pp1_dp8_r25.11.yaml",
   "sets": "$(echo $llama_sets)"},
  {"name": "qwen3-30b-a3b_moe", "scenario": "scenarios/h100/qwen3-30b-a3b_fp8-cs_tp1_pp2_vp24_ep8_dp8_r25.11.yaml",
   "sets": "$(echo $qwen_sets)"},
  {"name": "qwen3-30b-a3b_moe_a2a_overlap", "scenario": "scenarios/h100/qwen3-30b-a3b_fp8-cs_tp1_pp2_vp24_ep8_dp8_r25.11.yaml",
   "sets": "$(echo $qwen_overlap_sets)"}]}
JSON
replay_core() {  # replay_core NAME SCENARIO SETS...
  local name=$1 scenario=$2
  shift 2
  local args=()
  for s in "$@"; do args+=(--set "$s"); done
  step "replay-$name" 90 $cli replay "$scenario" "${args[@]}" --device cuda \
    --trace "$out/replay_$name.trace.json" --json "$out/replay_$name.summary.json"
}
# shellcheck disable=SC2086
replay_core llama3-8b_layers scenarios/h100/llama3-8b_fp8-cs_fsdp8_tp1_pp1_dp8_r25.11.yaml $llama_sets
# shellcheck disable=SC2086
replay_core qwen3-30b-a3b_moe scenarios/h100/qwen3-30b-a3b_fp8-cs_tp1_pp2_vp24_ep8_dp8_r25.11.yaml $qwen_sets
# shellcheck disable=SC2086
replay_core qwen3-30b-a3b_moe_a2a_overlap scenarios/h100/qwen3-30b-a3b_fp8-cs_tp1_pp2_vp24_ep8_dp8_r25.11.yaml $qwen_overlap_sets
# The host section fitted from the Llama replay's host thread (calibrate --from-trace).
base_profile=calibration/h100-sxm5-80gb.json
[ "$dev" = h200 ] && base_profile=calibration/h200-sxm-141gb.json
step calibrate-host 30 $cli calibrate --from-trace "$out/replay_llama3-8b_layers.trace.json" \
  --base $base_profile --allow-device-mismatch --out "$out/host_fit_$dev.json"
step calibrate-cuda 120 $cli calibrate --device cuda --quick --out "$out/calibrated_$dev.json"
echo "gpu_check: $failed step(s) failed" | tee -a "$log"
exit $failed
