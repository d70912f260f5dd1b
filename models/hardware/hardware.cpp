// The hardware catalog. Every number is a datasheet figure or a public spec, with its source;
// the table in ../shared/ground-truth/hardware.md collects them. Measured calibration
// profiles refine these numbers elsewhere; nothing here is fitted.
#include "models/hardware/hardware.h"

#include <map>

#include "models/errors.h"

namespace trainsim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kTiB = 1024.0 * kGiB;

// HBM capacity: NVIDIA's "40GB" / "80GB" parts carry 40 GiB / 80 GiB of HBM: nvidia-smi
// reports 40960 MiB and 81920 MiB of total memory for A100-SXM4-40GB / -80GB (and 81559 MiB
// usable on H100-SXM5-80GB, the rest reserved by the driver). So the capacity is a power-of-two
// multiple, not 1e9 bytes; what the driver and CUDA context reserve is a calibration matter.

// PCIe per direction for an x16 link, nominal: Gen4 16 GT/s x 16 lanes / 8 = 32 GB/s, Gen5
// 32 GT/s -> 64 GB/s (128b/130b encoding makes the usable rate ~1.5% lower; the calibration
// profile carries the measured ~25 GB/s (A100) and 35-53 GB/s (H100) pinned-copy rates of
// hardware.md).
constexpr double kPcieGen4x16_bytes_per_s = 32e9;
constexpr double kPcieGen5x16_bytes_per_s = 64e9;

GpuSpec a100(double hbm_bytes, double hbm_bw_bytes_per_s, const char* name) {
  GpuSpec g;
  g.name = name;
  // NVIDIA A100 datasheet: 312 TFLOP/s dense FP16/BF16 tensor core.
  g.peak_dense_fp16_flops = 312e12;
  g.peak_fp32_flops = 19.5e12;  // same datasheet: FP32 19.5 TFLOP/s (CUDA cores)
  g.hbm_bytes = hbm_bytes;
  g.hbm_bw_bytes_per_s = hbm_bw_bytes_per_s;
  // A100 datasheet: NVLink 600 GB/s per GPU, both directions together (12 links x 25 GB/s
  // x 2 directions); per direction = 600 / 2.
  g.nvlink_bw_bytes_per_s = 600e9 / 2;
  g.pcie_bw_bytes_per_s = kPcieGen4x16_bytes_per_s;  // A100 SXM: PCIe Gen4 x16
  g.compute_capability = 80;  // sm_80
  g.nvlinks = 12;             // third-generation NVLink, 12 links (same datasheet)
  return g;
}

SystemSpec dgx_a100(const std::string& name, GpuSpec gpu, double host_memory_bytes) {
  SystemSpec s;
  s.name = name;
  s.gpu = std::move(gpu);
  // DGX A100 user guide / datasheet: 8x A100 SXM on 6 NVSwitches, 8x ConnectX-6 HDR
  // 200 Gb/s compute NICs (one per GPU, rail-optimized), 2x AMD EPYC 7742 (64 cores each).
  s.gpus_per_node = 8;
  s.nics_per_node = 8;
  s.nic_bw_bytes_per_s = 200e9 / 8;  // HDR InfiniBand 200 Gb/s = 25 GB/s per direction
  // DGX A100 PCIe topology: four PCIe Gen4 switches, each shared by two GPUs and their two
  // NICs, each uplinked by one x16 link to a CPU socket (hardware.md, "Nodes").
  s.gpus_per_pcie_switch = 2;
  s.pcie_uplink_bw_bytes_per_s = kPcieGen4x16_bytes_per_s;
  s.cpu_sockets = 2;
  s.cpu_cores = 128;  // 2x EPYC 7742, 64 cores each
  s.amd_cpu = true;
  s.nccl_net_overhead_s = 2e-6;  // NVIDIA/nccl v2.29.7 src/graph/tuning.cc getNetOverhead (AMD)
  // NCCL's rings on 8 A100 SXM on NVSwitch: "Channel 23/24" in the init log of an HGX A100
  // node (NVIDIA/nccl-tests issue #100): 24 channels. No multi-node DGX A100 log is at hand:
  // the same 24 across nodes (H100 drops to 16 there, below).
  s.nccl_channels = 24;
  s.nccl_channels_multi_node = 24;
  s.host_memory_bytes = host_memory_bytes;
  // Selene (SC'21 Sec. 5): 3-level (leaf/spine/core) fat tree of HDR switches; Mellanox
  // Quantum QM8700 HDR switch: 40 ports of 200 Gb/s, 130 ns port-to-port (datasheet).
  s.fat_tree_levels = 3;
  s.switch_radix = 40;
  s.switch_latency_s = 130e-9;
  // Estimate, no datasheet figure: ~1 us one-way GPU -> NVSwitch -> GPU. CUDA's
  // p2pBandwidthLatencyTest measures ~1.8-2.9 us for an NVLink P2P write (NVIDIA/cuda-samples
  // issue #230, NVIDIA/nccl-tests issue #100), which includes a kernel launch and a
  // synchronization; the link itself is below that. Calibration replaces it.
  s.nvlink_latency_s = 1e-6;
  // Estimate: ~1 us for a PCIe transaction through a switch to host memory (order of
  // magnitude of published PCIe round-trip measurements); calibration replaces it.
  s.pcie_latency_s = 1e-6;
  return s;
}

SystemSpec dgx_h100() {
  GpuSpec g;
  g.name = "H100-SXM5-80GB";
  // NVIDIA H100 datasheet (SXM): 989 TFLOP/s dense FP16/BF16 tensor core (1979 with
  // sparsity), 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s both directions (18 links), PCIe Gen5.
  g.peak_dense_fp16_flops = 989e12;
  // Same datasheet: 3,958 TFLOP/s FP8 tensor core with sparsity, 1,979 dense.
  g.peak_dense_fp8_flops = 1979e12;
  g.peak_fp32_flops = 67e12;  // same datasheet: FP32 67 TFLOP/s (CUDA cores, SXM)
  g.hbm_bytes = 80 * kGiB;  // see the HBM capacity note above
  g.hbm_bw_bytes_per_s = 3350e9;
  g.nvlink_bw_bytes_per_s = 900e9 / 2;
  g.pcie_bw_bytes_per_s = kPcieGen5x16_bytes_per_s;
  g.compute_capability = 90;  // sm_90
  g.nvlinks = 18;             // fourth-generation NVLink: 18 links x 50 GB/s = 900 GB/s

  SystemSpec s;
  s.name = "dgx-h100";
  s.gpu = g;
  // DGX H100 datasheet: 8x H100 SXM, 4 NVSwitch chips, 8x ConnectX-7 NDR 400 Gb/s compute
  // NICs, 2x Xeon Platinum 8480C (56 cores each), 2 TB DDR5.
  s.gpus_per_node = 8;
  s.nics_per_node = 8;
  s.nic_bw_bytes_per_s = 400e9 / 8;  // NDR 400 Gb/s = 50 GB/s per direction
  // Same two-GPUs-per-PCIe-switch shape as DGX A100 (hardware.md, "Nodes"), one Gen5 x16
  // uplink per switch.
  s.gpus_per_pcie_switch = 2;
  s.pcie_uplink_bw_bytes_per_s = kPcieGen5x16_bytes_per_s;
  s.cpu_sockets = 2;
  s.cpu_cores = 112;
  s.amd_cpu = false;
  s.nccl_net_overhead_s = 1e-6;  // NVIDIA/nccl v2.29.7 src/graph/tuning.cc getNetOverhead (Intel)
  // NCCL's channels on 8 H100 SXM (AWS p5.48xlarge, NVSwitch): "24 coll channels" on one node,
  // "16 coll channels" on two (all_reduce_perf init logs, aws-samples/aws-do-eks
  // Container-Root/eks/deployment/nccl-test/README.md, commit 701c554); a multi-node H100
  // cluster logs "Channel 15/16" too (NVIDIA/nccl issue #1453).
  s.nccl_channels = 24;
  s.nccl_channels_multi_node = 16;
  // DGX H100 datasheet / H100 architecture whitepaper: four third-generation NVSwitches with
  // NVLink SHARP (in-switch reduction and multicast), which NCCL 2.17+ runs as NVLS.
  s.nvlink_sharp = true;
  s.host_memory_bytes = 2 * kTiB;
  // NVIDIA Quantum-2 QM9700 NDR switch: 64 ports of 400 Gb/s. Its datasheet gives no
  // latency; we assume the HDR figure (130 ns port-to-port), an estimate to calibrate.
  s.fat_tree_levels = 3;
  s.switch_radix = 64;
  s.switch_latency_s = 130e-9;
  s.nvlink_latency_s = 1e-6;  // estimate, see dgx_a100()
  s.pcie_latency_s = 1e-6;    // estimate, see dgx_a100()
  return s;
}

const std::map<std::string, SystemSpec>& catalog() {
  static const std::map<std::string, SystemSpec> systems = [] {
    std::map<std::string, SystemSpec> m;
    // A100 datasheet: 40GB HBM2 at 1555 GB/s; 80GB HBM2e at 2039 GB/s.
    // DGX A100 (320GB, 40GB GPUs): 1 TB host memory; DGX A100 (640GB, 80GB GPUs): 2 TB
    // (the datasheet's 1 TB / 2 TB are 16 / 32 64-GiB DIMMs, hence TiB).
    m.emplace("dgx-a100-40gb",
              dgx_a100("dgx-a100-40gb", a100(40 * kGiB, 1555e9, "A100-SXM4-40GB"), 1 * kTiB));
    m.emplace("dgx-a100-80gb",
              dgx_a100("dgx-a100-80gb", a100(80 * kGiB, 2039e9, "A100-SXM4-80GB"), 2 * kTiB));
    m.emplace("dgx-h100", dgx_h100());
    // `local`: this machine's own device (the CPU through LibTorch, or one local GPU) as one
    // GPU-equivalent node without network. No datasheet figures: its numbers come from a
    // measured calibration profile (models/hardware/local_device.h local_system fills them in; until
    // then they are 0 and CostModel refuses them).
    SystemSpec local;
    local.name = "local";
    local.gpu.name = "local";
    local.gpus_per_node = 1;
    local.nics_per_node = 1;
    local.gpus_per_pcie_switch = 1;
    local.cpu_sockets = 1;
    local.fat_tree_levels = 1;
    m.emplace("local", local);
    return m;
  }();
  return systems;
}

}  // namespace

const SystemSpec& find_system(const std::string& name) {
  const auto& systems = catalog();
  auto it = systems.find(name);
  if (it == systems.end()) {
    std::string known;
    for (const auto& n : system_names()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown system '" + name + "'; known systems: " + known);
  }
  return it->second;
}

std::vector<std::string> system_names() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : catalog()) names.push_back(name);
  return names;
}

}  // namespace trainsim
