#include "models/hardware/local_device.h"

#include <algorithm>

#include "models/errors.h"

namespace trainsim {

bool has_local_device(const CalibrationProfile& p) {
  const auto& d = p.local_device;
  return d.peak_flops > 0 && d.memory_bw_bytes_per_s > 0 && d.memory_bytes > 0 &&
         d.copy_bw_bytes_per_s > 0 && d.cores > 0;
}

SystemSpec local_system(const CalibrationProfile& p, const std::string& profile_name,
                        std::int64_t nodes) {
  if (!has_local_device(p))
    throw InputError(profile_name + ": field 'local_device': missing or incomplete (needs "
                     "peak_flops, memory_bw_bytes_per_s, memory_bytes, copy_bw_bytes_per_s, "
                     "cores > 0); the `local` system needs a measured profile from "
                     "`trainsim calibrate`");
  SystemSpec s = find_system(kLocalSystemName);
  const auto& d = p.local_device;
  s.gpu.name = p.device;
  s.gpu.peak_dense_fp16_flops = d.peak_flops;
  s.gpu.hbm_bw_bytes_per_s = d.memory_bw_bytes_per_s;
  s.gpu.hbm_bytes = d.memory_bytes;
  s.gpu.pcie_bw_bytes_per_s = d.copy_bw_bytes_per_s;
  s.gpu.nvlink_bw_bytes_per_s = d.copy_bw_bytes_per_s;
  s.pcie_uplink_bw_bytes_per_s = d.copy_bw_bytes_per_s;
  s.nic_bw_bytes_per_s = d.copy_bw_bytes_per_s;
  // Between the one-device nodes (a multi-rank scenario replayed by several processes of this
  // machine): the host transport's measured rate, when the profile has it (its latency is
  // CostModel::host_transport's, paid per exchange). Copies inside a node keep copy_bw.
  if (nodes > 1 && d.host_comm_bw_bytes_per_s > 0)
    s.nic_bw_bytes_per_s = d.host_comm_bw_bytes_per_s;
  s.cpu_cores = static_cast<int>(d.cores);
  s.host_memory_bytes = d.memory_bytes;
  // One switch level whose radix has a port per node (even, as the fat tree needs).
  s.switch_radix = static_cast<int>(std::max<std::int64_t>(2, nodes + nodes % 2));
  return s;
}

}  // namespace trainsim
