// NCCL's own choice of algorithm and protocol for a collective, and its latency, following
// NCCL's tuning model (NVIDIA/nccl v2.29.7-1, src/graph/tuning.cc ncclTopoTuneModel and
// ncclTopoGetAlgoTime): for each (algorithm, protocol) NCCL predicts
//     time = latency + bytes / algorithm bandwidth
// and runs the cheapest. trainsim asks the same question with the same latency table and the
// same bandwidth refinements, over the bandwidths of the simulated links, so that small
// messages use LL / LL128 and multi-node all-reduces the tree where NCCL would; the
// simulator then moves the bytes over its links (sim/executor.cpp) with the chosen protocol's
// wire format.
//
// Modelled: algorithms Ring (every collective) and Tree (all-reduce across nodes); protocols
// LL, LL128, Simple (LL128 on, as NCCL enables it on NVLink-connected x86 DGX nodes with the
// NIC behind the GPU's PCIe switch). Not modelled: NVLS / NVLS-Tree (NVLink SHARP on
// H100), CollNet (in-network reduction), PAT; the per-channel bandwidth caps (they need the
// channel count of NCCL's topology search); the ring "plateau" latency factor and NCCL's
// aggregation of several operations into one launch.
#pragma once

#include <cstdint>

#include "models/ops.h"

namespace trainsim {

enum class NcclAlgo { Ring, Tree };
enum class NcclProto { LL, LL128, Simple };
const char* to_string(NcclAlgo a);
const char* to_string(NcclProto p);

/// What the tuning model needs to know about the group and its hardware.
struct NcclGroup {
  OpKind kind = OpKind::AllReduce;  ///< AllReduce, ReduceScatter or AllGather
  std::int64_t ranks = 1;
  std::int64_t nodes = 1;
  /// GPU generation (compute capability x 10: 80 Ampere, 90 Hopper) and host CPU vendor: they
  /// select NCCL's per-generation constants and the network post overhead.
  int compute_capability = 80;
  bool amd_cpu = false;
  /// Bus bandwidth of a Simple ring over this group in bytes/s: the GPU's achieved NVLink
  /// bandwidth inside a node, the smaller of it and the GPU's NIC path across nodes.
  double bus_bw_bytes_per_s = 0;
  /// Ring/Simple latencies from the calibration profile (NCCL's table by default): base
  /// latency, NVLink and network per-step latencies. The other entries are NCCL's table.
  double simple_base_latency_s = 0;
  double simple_nvlink_step_s = 0;
  double simple_net_step_s = 0;
  /// NCCL's network post overhead (getNetOverhead: 1 us on Intel hosts, 2 us on AMD), the
  /// floor of every intra-node step of a ring that spans nodes (x3 for Simple).
  double net_overhead_s = 0;
};

struct NcclChoice {
  NcclAlgo algo = NcclAlgo::Ring;
  NcclProto proto = NcclProto::Simple;
  double latency_s = 0;     ///< NCCL's predicted latency of the chosen pair
  double bus_bw_bytes_per_s = 0;  ///< NCCL's predicted bus bandwidth of the chosen pair
  double time_s = 0;        ///< latency + bytes / algorithm bandwidth, NCCL's prediction
  /// Bytes on the wire per payload byte: LL sends 8 bytes of flags with every 8 bytes of data
  /// (16-byte lines), LL128 8 of every 128 bytes, Simple none (NCCL src/device/prims_ll*.h);
  /// for the tree also 1 / 0.92, its bus bandwidth relative to the ring in NCCL's model (the
  /// simulator carries a tree all-reduce on the ring's flows: the same bytes per NIC).
  double wire_factor = 1.0;
};

/// NCCL's predicted time of one (algorithm, protocol) for `bytes` (the collective's buffer as
/// nccl-tests counts it); negative when the pair is not available for this collective/group.
double nccl_predicted_time_s(const NcclGroup& g, NcclAlgo a, NcclProto p, double bytes,
                             double* latency_s = nullptr, double* bus_bw = nullptr);
/// The pair NCCL would run for `bytes` (the cheapest predicted time). Throws
/// std::logic_error for a kind that is not AllReduce, ReduceScatter or AllGather.
NcclChoice nccl_choose(const NcclGroup& g, double bytes);

}  // namespace trainsim
