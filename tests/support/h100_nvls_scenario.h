// Llama 3 70B's layer on DGX H100 at TP 8 without sequence parallelism, so that its 128 MiB
// activation all-reduces run NCCL's NVLS (NVLink SHARP): 2 layers, PP 1, DP 2 over 2 nodes
// (one GPU of each DP group per node), 2 microbatches. Shared by the tests of NVLS's time
// (tests/sim/test_fold.cpp) and memory (tests/models/test_graph_builder.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace trainsim::test_support {

inline const char* kH100Tp8NvlsFile = "scenarios/h100/llama3-70b_fp8-cs_tp4_pp8_vp5_dp2_r25.11.yaml";

/// The overrides of kH100Tp8NvlsFile (load_scenario's), plus `extra`.
inline std::vector<std::pair<std::string, std::string>> h100_tp8_nvls_overrides(
    std::vector<std::pair<std::string, std::string>> extra = {}) {
  std::vector<std::pair<std::string, std::string>> o = {
      {"model.num_layers", "2"},
      {"parallel.tensor_model_parallel_size", "8"},
      {"parallel.pipeline_model_parallel_size", "1"},
      {"parallel.num_layers_per_virtual_pipeline_stage", "null"},
      {"parallel.sequence_parallel", "false"},
      {"parallel.tp_comm_overlap", "false"},
      {"parallel.tp_comm_overlap_rs_method", "null"},
      {"cluster.nodes", "2"},
      {"parallel.global_batch_size", "4"}};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

}  // namespace trainsim::test_support
