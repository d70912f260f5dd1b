// Simulated NCCL collectives, nccl-tests style: one collective over every GPU of N nodes of a
// catalog system, simulated by the SimGrid executor (the links, the hierarchical rings, NCCL's
// algorithm/protocol choice and latency of models/perf/nccl_model.h), reported as nccl-tests
// reports it (NVIDIA/nccl-tests doc/PERFORMANCE.md): algbw = size / time, busbw = algbw x
// 2(n-1)/n for all-reduce, x (n-1)/n for all-gather, reduce-scatter and all-to-all; size is
// the full buffer (the gathered output, the reduce-scatter input).
//
// A plain program (validation/nccl_busbw.py prints it next to published nccl-tests figures):
//   bench_collectives [--system dgx-a100-80gb|dgx-h100] [--nodes 1,2,8] [--sizes 1e6,4e9]
//                     [--nccl-version 2.18.5|2.29.7] [--no-nvls]
// Prints one tab-separated line per (collective, nodes, size):
//   system  collective  nodes  gpus  bytes  time_s  algbw_GBps  busbw_GBps  algo  proto
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"
#include "sim/executor.h"

namespace {

using namespace trainsim;

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atof(item.c_str()));
  return out;
}

double bus_factor(OpKind kind, double n) {
  return kind == OpKind::AllReduce ? 2 * (n - 1) / n : (n - 1) / n;
}

/// Simulated time of one collective of `bytes` over all GPUs of `nodes` nodes.
double simulate_one(const SystemSpec& sys, const CostModel& cost, OpKind kind, double bytes,
                    std::int64_t nodes) {
  Scenario sc;
  sc.cluster.system = sys.name;
  sc.cluster.nodes = nodes;
  sc.cluster.gpus_per_node = sys.gpus_per_node;
  const std::int64_t n = nodes * sys.gpus_per_node;
  ScheduleGraph g;
  OpDesc op;
  op.kind = kind;
  op.group = GroupKind::Data;
  op.bytes = std::int64_t(bytes);
  op.group_size = n;
  const auto id = g.add_op(op);
  std::vector<RankId> ranks;
  for (std::int64_t r = 0; r < n; ++r) ranks.push_back(RankId(r));
  const auto grp = g.add_group(GroupKind::Data, ranks);
  std::vector<TaskId> tasks;
  for (RankId r : ranks) {
    Task t;
    t.kind = TaskKind::Collective;
    t.rank = r;
    t.stream = StreamId::DpComm;
    t.op = id;
    t.group = grp;
    t.match = 1;
    tasks.push_back(g.add_task(t));
  }
  g.finalize();
  const ExecutionRecord rec = sim::simulate(g, sc, sys, cost);
  double end = 0;
  for (TaskId t : tasks) end = std::max(end, rec.end_s[t]);
  return end;
}

}  // namespace

int main(int argc, char** argv) {
  std::string system = "dgx-a100-80gb";
  NcclVersion version = kDefaultNcclVersion;
  bool nvls = true;
  std::vector<double> nodes = {1, 2, 4, 8, 16, 32, 64};
  std::vector<double> sizes = {1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30,
                               4.0 * (1 << 30)};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--system" && i + 1 < argc) {
      system = argv[++i];
    } else if (a == "--nodes" && i + 1 < argc) {
      nodes = parse_list(argv[++i]);
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes = parse_list(argv[++i]);
    } else if (a == "--nccl-version" && i + 1 < argc && nccl_version_from_string(argv[i + 1])) {
      version = *nccl_version_from_string(argv[++i]);
    } else if (a == "--no-nvls") {
      nvls = false;  // NCCL_NVLS_ENABLE=0: the ring and the tree only
    } else {
      std::fprintf(stderr,
                   "usage: %s [--system NAME] [--nodes 1,2,8] [--sizes 1048576,4294967296]"
                   " [--nccl-version 2.18.5|2.29.7] [--no-nvls]\n",
                   argv[0]);
      return a == "-h" || a == "--help" ? 0 : 1;
    }
  }
  try {
    SystemSpec sys = find_system(system);
    sys.nvlink_sharp = sys.nvlink_sharp && nvls;
    const CalibrationProfile prof = default_calibration(sys.gpu.name);
    const CostModel cost(sys, prof, version);
    const OpKind kinds[] = {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter,
                            OpKind::AllToAll};
    for (OpKind kind : kinds) {
      for (double nd : nodes) {
        const std::int64_t nn = std::int64_t(nd);
        const double n = double(nn * sys.gpus_per_node);
        for (double bytes : sizes) {
          const double t = simulate_one(sys, cost, kind, bytes, nn);
          const double alg = bytes / t;
          std::string algo = "-", proto = "-";
          if (kind != OpKind::AllToAll) {
            // NCCL's nodes are NVLink domains (several trays on GB200 NVL72).
            const std::int64_t domains =
                (std::int64_t(n) + sys.domain_gpus() - 1) / sys.domain_gpus();
            const NcclChoice c = cost.nccl_collective(kind, bytes, std::int64_t(n), domains);
            algo = to_string(c.algo);
            proto = to_string(c.proto);
          }
          std::printf("%s\t%s\t%lld\t%lld\t%.0f\t%.9g\t%.2f\t%.2f\t%s\t%s\n", system.c_str(),
                      to_string(kind), static_cast<long long>(nn), static_cast<long long>(n),
                      bytes, t, alg / 1e9, alg * bus_factor(kind, n) / 1e9, algo.c_str(),
                      proto.c_str());
          std::fflush(stdout);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    return 1;
  }
  return 0;
}
