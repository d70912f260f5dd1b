// The `local` system: this machine's own device (the CPU through LibTorch, or one local GPU)
// as a one-GPU node, so that `simulate` and `validate` can model exactly what `replay` runs.
//
// The hardware catalog's `local` entry has no figures (there is no datasheet for "this
// machine"); a measured calibration profile (trainsim calibrate) supplies them in its
// `local_device` section. The mapping, field by field:
//   gpu.name                  profile.device (e.g. "cpu: AMD EPYC (2 cores, LibTorch 1.13 fp32)")
//   gpu.peak_dense_fp16_flops local_device.peak_flops (the best measured GEMM rate, in the
//                             profile's precision: gemm_efficiency values are fractions of it)
//   gpu.hbm_bw_bytes_per_s    local_device.memory_bw_bytes_per_s (measured streaming copy)
//   gpu.hbm_bytes             local_device.memory_bytes (a CPU: host RAM)
//   gpu.pcie_bw_bytes_per_s, pcie_uplink_bw_bytes_per_s, nvlink_bw_bytes_per_s,
//   nic_bw_bytes_per_s        local_device.copy_bw_bytes_per_s (the replay runs copies and
//                             single-process collectives as device-local copies)
//   cpu_cores                 local_device.cores; host_memory_bytes = memory_bytes
// Latencies are 0 (the profile's kernel_launch_overhead_s carries per-op fixed costs).
// Several nodes (a multi-rank scenario that `validate --nprocs N` replays in N processes of this
// machine) and a profile with the host transport's figures (local_device.host_comm_latency_s,
// host_comm_bw_bytes_per_s): nic_bw_bytes_per_s, the links between the nodes, is
// host_comm_bw_bytes_per_s, and every collective or message between ranks pays
// host_comm_latency_s once (CostModel::host_transport, models/system/collective_flows.h).
// Without them (older profiles) every link runs at copy_bw_bytes_per_s, as before.
#pragma once

#include <string>

#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"

namespace trainsim {

/// Name of the catalog entry that stands for the local device.
constexpr const char* kLocalSystemName = "local";

/// Whether a profile carries the local_device figures local_system needs.
bool has_local_device(const CalibrationProfile& profile);

/// The `local` system with its figures from `profile` (see the file comment). Throws
/// InputError naming `profile_name` when the profile has no local_device section (a shipped
/// datasheet profile, say). `nodes`: the one-device nodes the scenario has (a multi-rank
/// scenario validated on this machine); they hang off one switch with a port each, every link
/// at the measured copy bandwidth, those between nodes at the host transport's measured rate
/// when the profile has it (see the file comment).
SystemSpec local_system(const CalibrationProfile& profile, const std::string& profile_name,
                        std::int64_t nodes = 1);

}  // namespace trainsim
