// The hardware catalog: GPUs, DGX nodes and their fabrics, from datasheets. The catalog is
// data: one system file per system in systems/*.yaml (format: docs/cluster.md, reader:
// system_file.h), each number with its source, embedded in the library at build time. A
// measured calibration profile refines what these datasheet numbers predict; the catalog itself
// holds only published facts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainsim {

struct GpuSpec {
  std::string name;                     ///< e.g. "A100-SXM4-80GB"
  double peak_dense_fp16_flops = 0;     ///< dense FP16/BF16 tensor-core FLOP/s
  double peak_dense_fp8_flops = 0;      ///< dense FP8 tensor-core FLOP/s (0: no FP8)
  /// Dense FP4 tensor-core FLOP/s (0: no FP4; Blackwell). Recorded from the datasheet; no
  /// scenario trains in FP4 yet (docs/cluster.md).
  double peak_dense_fp4_flops = 0;
  double peak_fp32_flops = 0;           ///< FP32 on the CUDA cores (FMA = 2 FLOPs), not tensor
  double hbm_bytes = 0;                 ///< device memory capacity
  double hbm_bw_bytes_per_s = 0;        ///< HBM bandwidth
  double nvlink_bw_bytes_per_s = 0;     ///< NVLink per GPU, per direction (datasheet total / 2)
  double pcie_bw_bytes_per_s = 0;       ///< PCIe per direction (x16 link)
  int compute_capability = 0;           ///< x10 (A100 80, H100 90): NCCL's per-generation tables
  int nvlinks = 0;                      ///< NVLink links per GPU (A100 12, H100 18)
};

/// Share of a PCIe link's signalling rate that carries data for large DMA transfers: each
/// transaction-layer packet of 256 bytes (the max payload size of DGX root ports and
/// switches) travels with 26 bytes of framing (4), sequence number (2), 4-DW header (16) and
/// LCRC (4) (PCI Express Base Specification 3.0+, Sec. 2 and 4.2.2): 256 / 282 = 0.908. The
/// GPU's and the NIC's own links to their PCIe switch run at this (GPUDirect RDMA never
/// touches the host); host copies are further limited by the switch uplink to the CPU at the
/// profile's measured pcie_efficiency.
constexpr double kPcieLinkEfficiency = 256.0 / 282.0;

/// One DGX-style node: GPUs on an NVSwitch, a PCIe tree to the host CPUs and compute NICs,
/// and the fabric between nodes.
struct SystemSpec {
  std::string name;                   ///< catalog key, e.g. "dgx-a100-80gb"
  GpuSpec gpu;
  int gpus_per_node = 8;
  int nics_per_node = 8;              ///< compute NICs; consecutive GPUs share one when fewer
  /// The compute NIC of each of the node's GPUs, when the system file states which GPUs share
  /// which NIC (node.gpu_nic, docs/cluster.md); empty: GPU g on NIC g x nics / gpus
  /// (consecutive GPUs share one). Every NIC serves gpus / nics GPUs either way.
  std::vector<int> gpu_nic;
  double nic_bw_bytes_per_s = 0;      ///< per NIC, per direction (200 Gb/s HDR = 25 GB/s)
  int gpus_per_pcie_switch = 2;       ///< GPUs (and their NICs) sharing one PCIe switch
  double pcie_uplink_bw_bytes_per_s = 0;  ///< PCIe switch -> CPU socket uplink, per direction
  int cpu_sockets = 2;
  int cpu_cores = 0;                  ///< physical cores in the node
  bool amd_cpu = false;               ///< host CPU vendor AMD (NCCL tuning: LL caps, overhead)
  bool arm_cpu = false;               ///< host CPU Arm (Grace): not x86 for NCCL's tuning
  /// NCCL's network post overhead per ring step (tuning.cc getNetOverhead: Intel 1 us, AMD 2 us).
  double nccl_net_overhead_s = 0;
  /// Channels of NCCL's collectives on this system, as NCCL's init log reports them ("N coll
  /// channels"), for a communicator inside one node and for one spanning nodes (each channel
  /// of a running collective is one CTA on one SM; NCCL runs fewer for small messages,
  /// models/perf/nccl_model.h). 0: no NCCL (the `local` device).
  int nccl_channels = 0;
  int nccl_channels_multi_node = 0;
  /// The NVSwitches reduce and multicast in the switch (NVLink SHARP, third-generation
  /// NVSwitch of DGX H100): NCCL's NVLS algorithms (models/perf/nccl_model.h).
  bool nvlink_sharp = false;
  double host_memory_bytes = 0;
  int fat_tree_levels = 3;            ///< leaf / spine / core (Selene: 3 levels)
  int switch_radix = 40;              ///< ports per IB switch (HDR QM8700: 40, NDR QM9700: 64)
  double switch_latency_s = 0;        ///< per IB switch hop
  /// The fabric is RoCE (RDMA over Converged Ethernet) rather than InfiniBand: the same fat
  /// tree and NICs, with `fabric_message_latency_s` per message (docs/cluster.md).
  bool fabric_roce = false;
  /// Latency every inter-node message pays beyond NCCL's table and the switch hops (RoCE's NIC
  /// and Ethernet-switch processing): NCCL's graphs[]->latencyInter slot of its tuning model
  /// (tuning.cc interLat; twice for Simple, its "flush extra latency") and each point-to-point
  /// transfer between nodes. 0 on InfiniBand (NCCL's table is IB's).
  double fabric_message_latency_s = 0;
  /// NIC k of every node on rail (leaf) k; false: a node's NICs share leaves, consecutive NICs
  /// of consecutive nodes fill each leaf (sim/platform.h).
  bool rail_optimized = true;
  /// Down:up port ratio of each switch tier below the top, leaf first (1: full bisection);
  /// empty: every tier 1. fat_tree_down_ports / fat_tree_up_ports read it.
  std::vector<double> oversubscription;
  double nvlink_latency_s = 0;        ///< GPU -> NVSwitch -> GPU one-way
  double pcie_latency_s = 0;          ///< one host transaction (PCIe, or NVLink-C2C with host_c2c)
  /// GPUs joined by one NVLink/NVSwitch domain: gpus_per_node on a DGX; a multiple of it when
  /// NVSwitch trays join the GPUs of several nodes (GB200 NVL72: 72 GPUs over 18 compute trays
  /// of 4). 0: the node's GPUs (gpus_per_node; the reader stores 0 for a domain of one node).
  /// docs/cluster.md, "NVLink domains".
  int nvlink_domain_gpus = 0;
  /// Nodes (compute trays) per rack, the placement and failure unit; an NVLink domain never
  /// spans racks. 0: not stated (a DGX is its own unit).
  int rack_nodes = 0;
  /// The GPUs reach host memory over NVLink-C2C (Grace), not PCIe: each CPU socket's C2C link
  /// is shared by its gpus_per_node / cpu_sockets GPUs, at c2c_bw_bytes_per_s per direction.
  bool host_c2c = false;
  double c2c_bw_bytes_per_s = 0;      ///< per CPU socket, per direction (host_c2c only)

  /// GPUs of one NVLink domain: nvlink_domain_gpus, or the node's when 0.
  int domain_gpus() const { return nvlink_domain_gpus > 0 ? nvlink_domain_gpus : gpus_per_node; }
  /// Compute NICs of one NVLink domain (the NICs of its nodes).
  int domain_nics() const { return nics_per_node * (domain_gpus() / gpus_per_node); }
  /// The NIC of local GPU `g` of a node of `gpus` GPUs (gpus_per_node unless a scenario narrows
  /// it): gpu_nic's when stated, else consecutive GPUs share one.
  int nic_of(int g, int gpus) const {
    if (g >= 0 && std::size_t(g) < gpu_nic.size()) return gpu_nic[std::size_t(g)];
    return int(std::int64_t(g) * nics_per_node / gpus);
  }
};

/// Ports of a level-`level` switch (1 = leaf ... fat_tree_levels = top) of the system's fat
/// tree facing down (children) and up (parents). At full bisection a switch below the top uses
/// radix / 2 of each; a tier with oversubscription R (down:up) splits its radix k as
/// floor(k R / (R + 1)) down and the rest up; the top level uses all k down and none up.
int fat_tree_down_ports(const SystemSpec& s, int level);
int fat_tree_up_ports(const SystemSpec& s, int level);

/// The catalog entry with that name: a shipped system file (systems/<name>.yaml) or `local`.
/// Throws InputError listing the known names when there is none.
const SystemSpec& find_system(const std::string& name);
std::vector<std::string> system_names();

}  // namespace trainsim
