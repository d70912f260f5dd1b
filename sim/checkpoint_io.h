// Checkpoint save and load as simulated transfers (trainsim forecast, docs/forecast.md
// "Checkpoint save and load"): every rank's shard (models/forecast/forecast.h
// checkpoint_shards) copied from its GPU to its node's host memory over the node's PCIe tree,
// then written from each node's host memory over the node's NICs to a storage node whose one
// link carries the file system's aggregate bandwidth; a load reads it back the same way.
//
// The platform is a SimGrid star zone of its own (not sim/platform.h's): a storage host behind
// one link of training.checkpoint.{write,read}_bw_bytes_per_s, each node's host behind one link
// of nics_per_node x nic_bw (the node's NICs striped), and, per class of identical nodes (the
// same bytes on each local GPU), one representative node whose GPUs reach their host through
// their own PCIe link and their PCIe switch's uplink, with the bandwidths and efficiencies of
// sim/platform.h (PlatformModel's constructor). Flows share links max-min fairly (CM02, as
// engine_args configures); a node's write starts when its own copies end; the save blocks
// training until the last rank's copy (async) or the last node's write (sync).
#pragma once

#include <cstdint>
#include <vector>

#include "models/forecast/forecast.h"
#include "models/hardware/hardware.h"
#include "models/perf/cost_model.h"

namespace trainsim::sim {

struct CheckpointIoRequest {
  std::int64_t nodes = 1;
  std::int64_t gpus_per_node = 1;
  std::vector<double> bytes_per_rank;  ///< by global rank, nodes x gpus_per_node of them
  double write_bw_bytes_per_s = 0;     ///< storage, whole cluster
  double read_bw_bytes_per_s = 0;
  bool async = false;
};

/// Simulates one save and one load (each from an idle platform) in a forked child
/// (sim/isolate.h). Throws InputError for a system without positive PCIe or NIC bandwidths.
CheckpointTimes simulate_checkpoint_io(const CheckpointIoRequest& request,
                                       const SystemSpec& system, const CostModel& cost);

}  // namespace trainsim::sim
