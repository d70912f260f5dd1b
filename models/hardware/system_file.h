// System files: a cluster's hardware as YAML, read strictly into a SystemSpec (hardware.h).
// The catalog systems are such files, shipped in systems/*.yaml and embedded in the library
// at build time (models/CMakeLists.txt generates system_defaults.cpp); a user describes
// another cluster the same way. docs/cluster.md lists every field with its unit and bound.
//
//   name: dgx-h100
//   gpu:                       # name, peak_dense_fp16_flops, hbm_bytes, ...
//     name: H100-SXM5-80GB
//     ...
//   node:                      # gpus, nvlink_domain_gpus, nics, nic_bw_bytes_per_s, ...
//   nccl:                      # net_overhead_s, channels, channels_multi_node
//   fabric:                    # type, rail_optimized, oversubscription, levels, ...
//
// Block style with plain keys and values only (no flow collections, quotes, anchors or tags:
// yaml-cpp hangs on some malformed uses of them). A user file may start from a catalog GPU
// (`catalog: H100-SXM5-80GB` under `gpu:`): the GPU's figures are that catalog entry's, each
// key given overrides one.
//
// Strict: an unknown key (with a suggestion), a duplicate key, a wrong type, a value out of its
// bound, an inconsistent node (an NVLink domain that does not divide the node's GPUs, NICs that
// do not divide them, a RoCE fabric without its message latency, an oversubscription that
// leaves a switch no port up) and a feature the platform does not model yet (NVLink domains
// across nodes or smaller than a node, compute capability above 100) throw InputError naming
// the file, the line, the field and the value. Nothing is accepted that the model would ignore.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "models/hardware/hardware.h"

namespace trainsim {

/// Reads a system file. Throws InputError (file, field, value) on any problem, including a
/// missing file.
SystemSpec load_system_file(const std::string& path);

/// Parses system-file YAML text; `source` names it in error messages. `gpu.catalog` resolves
/// against the catalog GPUs (catalog_gpu).
SystemSpec parse_system_file(const std::string& yaml_text, const std::string& source);

/// The GPU of a catalog system by its GpuSpec name ("H100-SXM5-80GB"). Throws InputError
/// listing the known GPUs for any other name.
const GpuSpec& catalog_gpu(const std::string& name);
std::vector<std::string> catalog_gpu_names();

/// The PCIe x16 data rate per direction of a PCIe generation (3 to 6), nominal: Gen3 8 GT/s,
/// Gen4 16, Gen5 32, Gen6 64 GT/s, x 16 lanes / 8 bits (the encoding's 1.5% is left to the
/// calibration's PCIe efficiencies). 0 for any other generation.
double pcie_x16_bytes_per_s(int generation);

namespace detail {
/// Parses without resolving `gpu.catalog` (the shipped files themselves, which build the
/// catalog, must spell out their GPU).
SystemSpec parse_system_file_standalone(const std::string& yaml_text, const std::string& source);
/// (file name, YAML text) of systems/*.yaml, generated at build time.
const std::vector<std::pair<std::string, std::string>>& embedded_system_files();
}  // namespace detail

}  // namespace trainsim
