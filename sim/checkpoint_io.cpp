// Checkpoint save and load on a SimGrid star zone (sim/checkpoint_io.h).
#include "sim/checkpoint_io.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include "models/errors.h"
#include "sim/isolate.h"
#include "sim/platform.h"

namespace trainsim::sim {

namespace {

namespace s4u = simgrid::s4u;

/// Nodes grouped by the bytes on each of their local GPUs: one representative per class.
struct NodeClasses {
  std::vector<std::vector<double>> local_bytes;  ///< per class: bytes of each local GPU
  std::vector<std::size_t> class_of_node;
  std::vector<double> node_bytes;                ///< per node: its GPUs' bytes summed
};

NodeClasses classify(const CheckpointIoRequest& q) {
  NodeClasses c;
  std::map<std::vector<double>, std::size_t> index;
  for (std::int64_t n = 0; n < q.nodes; ++n) {
    const auto first = q.bytes_per_rank.begin() + n * q.gpus_per_node;
    std::vector<double> local(first, first + q.gpus_per_node);
    double sum = 0;
    for (double b : local) sum += b;
    auto [it, added] = index.emplace(local, c.local_bytes.size());
    if (added) c.local_bytes.push_back(std::move(local));
    c.class_of_node.push_back(it->second);
    c.node_bytes.push_back(sum);
  }
  return c;
}

/// Achieved bandwidths, as PlatformModel's constructor derives them (sim/platform.cpp).
struct Bandwidths {
  double gpu_pcie = 0, uplink = 0, node_net = 0;
};

Bandwidths bandwidths(const SystemSpec& system, const CostModel& cost) {
  Bandwidths b;
  b.gpu_pcie = system.gpu.pcie_bw_bytes_per_s * cost.pcie_link_efficiency();
  b.uplink = system.pcie_uplink_bw_bytes_per_s * cost.pcie_efficiency();
  b.node_net = double(system.nics_per_node) * system.nic_bw_bytes_per_s * cost.network_efficiency();
  for (const auto& [v, what] : {std::pair{b.gpu_pcie, "gpu.pcie_bw_bytes_per_s"},
                                {b.uplink, "pcie_uplink_bw_bytes_per_s"},
                                {b.node_net, "nic_bw_bytes_per_s x nics_per_node"}})
    if (!(v > 0) || !std::isfinite(v))
      throw InputError("system '" + system.name + "': " + what +
                       " must be > 0 for a checkpoint's transfers, got " + std::to_string(v));
  return b;
}

/// The star zone's hosts: per class a host and its representative GPUs, per node a host
/// behind its NICs, and the storage node.
struct Star {
  std::vector<s4u::Host*> class_host;
  std::vector<std::vector<s4u::Host*>> class_gpus;
  std::vector<s4u::Host*> node_host;
  s4u::Host* storage = nullptr;
  s4u::Link* storage_link = nullptr;
};

s4u::Host* add_host(s4u::NetZone* zone, const std::string& name,
                    const std::vector<s4u::Link*>& links) {
  s4u::Host* h = zone->create_host(name, kHostSpeed);
  h->seal();
  std::vector<s4u::LinkInRoute> route;
  for (s4u::Link* l : links) route.emplace_back(l);
  zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr, route, true);
  return h;
}

s4u::Link* add_link(s4u::NetZone* zone, const std::string& name, double bw) {
  s4u::Link* l = zone->create_link(name, bw);
  l->set_latency(0);  // bandwidth only, as sim/platform.h's links
  l->seal();
  return l;
}

Star build_star(const CheckpointIoRequest& q, const NodeClasses& c, const Bandwidths& b,
                const SystemSpec& system, double storage_bw) {
  Star s;
  auto* zone = s4u::create_star_zone("checkpoint");
  s.storage_link = add_link(zone, "storage", storage_bw);
  s.storage = add_host(zone, "storage", {s.storage_link});
  const int per_switch = std::max(1, system.gpus_per_pcie_switch);
  for (std::size_t k = 0; k < c.local_bytes.size(); ++k) {
    const std::string p = "class" + std::to_string(k);
    s.class_host.push_back(add_host(zone, p + "-host", {}));
    std::vector<s4u::Link*> uplinks;
    s.class_gpus.emplace_back();
    for (std::int64_t g = 0; g < q.gpus_per_node; ++g) {
      const std::size_t sw = std::size_t(g / per_switch);
      if (sw >= uplinks.size())
        uplinks.push_back(add_link(zone, p + "-sw" + std::to_string(sw) + "-up", b.uplink));
      s4u::Link* pcie = add_link(zone, p + "-gpu" + std::to_string(g) + "-pcie", b.gpu_pcie);
      s.class_gpus[k].push_back(add_host(zone, p + "-gpu" + std::to_string(g), {pcie, uplinks[sw]}));
    }
  }
  for (std::int64_t n = 0; n < q.nodes; ++n) {
    s4u::Link* nic = add_link(zone, "node" + std::to_string(n) + "-nics", b.node_net);
    s.node_host.push_back(add_host(zone, "node" + std::to_string(n), {nic}));
  }
  zone->seal();
  return s;
}

/// Copies between a class's GPUs and its host, all at once; returns when the last ends.
void copy_class(const Star& s, const NodeClasses& c, std::size_t k, bool to_host) {
  std::vector<s4u::CommPtr> comms;
  for (std::size_t g = 0; g < s.class_gpus[k].size(); ++g) {
    const auto bytes = std::uint64_t(std::llround(c.local_bytes[k][g]));
    if (bytes == 0) continue;
    s4u::Host* gpu = s.class_gpus[k][g];
    comms.push_back(to_host ? s4u::Comm::sendto_async(gpu, s.class_host[k], bytes)
                            : s4u::Comm::sendto_async(s.class_host[k], gpu, bytes));
  }
  for (auto& comm : comms) comm->wait();
}

/// Starts `body` as an actor on `host` and returns it (to be joined).
template <typename F>
s4u::ActorPtr spawn(const std::string& name, s4u::Host* host, F body) {
  return s4u::Actor::create(name, host, std::function<void()>(std::move(body)));
}

/// The save, from an idle platform: each class copies its GPUs' shards to its host, then each
/// node of the class writes its bytes to storage. Run by the driver actor.
void save(const CheckpointIoRequest& q, const NodeClasses& c, const Star& s, CheckpointTimes& t) {
  std::vector<s4u::ActorPtr> actors;
  for (std::size_t k = 0; k < c.local_bytes.size(); ++k)
    actors.push_back(spawn("save" + std::to_string(k), s.class_host[k], [&q, &c, &s, &t, k] {
      copy_class(s, c, k, true);
      t.copy_s = std::max(t.copy_s, s4u::Engine::get_clock());
      std::vector<s4u::CommPtr> writes;
      for (std::int64_t n = 0; n < q.nodes; ++n)
        if (c.class_of_node[std::size_t(n)] == k)
          writes.push_back(s4u::Comm::sendto_async(
              s.node_host[std::size_t(n)], s.storage,
              std::uint64_t(std::llround(c.node_bytes[std::size_t(n)]))));
      for (auto& w : writes) w->wait();
      t.write_s = std::max(t.write_s, s4u::Engine::get_clock());  // the end, for now
    }));
  for (auto& a : actors) a->join();
}

/// The load, from an idle platform: every node reads its bytes from storage, then copies them
/// to its GPUs (each class's copy timed on its representative, alone on its links).
void load(const CheckpointIoRequest& q, const NodeClasses& c, const Star& s, CheckpointTimes& t) {
  const double t0 = s4u::Engine::get_clock();
  std::vector<double> read_end(std::size_t(q.nodes), 0.0), h2d(c.local_bytes.size(), 0.0);
  std::vector<s4u::ActorPtr> actors;
  for (std::int64_t n = 0; n < q.nodes; ++n)
    actors.push_back(spawn("read" + std::to_string(n), s.node_host[std::size_t(n)], [&, n] {
      s4u::Comm::sendto(s.storage, s.node_host[std::size_t(n)],
                        std::uint64_t(std::llround(c.node_bytes[std::size_t(n)])));
      read_end[std::size_t(n)] = s4u::Engine::get_clock() - t0;
    }));
  for (auto& a : actors) a->join();
  actors.clear();
  const double t1 = s4u::Engine::get_clock();
  for (std::size_t k = 0; k < c.local_bytes.size(); ++k)
    actors.push_back(spawn("h2d" + std::to_string(k), s.class_host[k], [&, k] {
      copy_class(s, c, k, false);
      h2d[k] = s4u::Engine::get_clock() - t1;
    }));
  for (auto& a : actors) a->join();
  double read_s = 0, load_s = 0;
  for (std::int64_t n = 0; n < q.nodes; ++n) {
    read_s = std::max(read_s, read_end[std::size_t(n)]);
    load_s = std::max(load_s, read_end[std::size_t(n)] + h2d[c.class_of_node[std::size_t(n)]]);
  }
  t.read_s = read_s;
  t.h2d_s = load_s - read_s;
}

}  // namespace

CheckpointTimes simulate_checkpoint_io(const CheckpointIoRequest& q, const SystemSpec& system,
                                       const CostModel& cost) {
  TRAINSIM_CHECK(q.nodes >= 1 && q.gpus_per_node >= 1 &&
                     std::int64_t(q.bytes_per_rank.size()) == q.nodes * q.gpus_per_node,
                 "simulate_checkpoint_io: one shard per rank of the cluster");
  const Bandwidths b = bandwidths(system, cost);
  const NodeClasses c = classify(q);
  const std::string bytes = run_in_child([&](int) {
    std::vector<std::string> args = engine_args(false);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = int(args.size());
    s4u::Engine engine(&argc, argv.data());
    const Star s = build_star(q, c, b, system, q.write_bw_bytes_per_s);
    CheckpointTimes t;
    spawn("driver", s.storage, [&] {
      save(q, c, s, t);
      t.write_s -= t.copy_s;  // from the last copy's end to the last write's end
      s.storage_link->set_bandwidth(q.read_bw_bytes_per_s);
      load(q, c, s, t);
    });
    engine.run();
    std::string out(4 * sizeof(double), '\0');
    const double v[4] = {t.copy_s, t.write_s, t.read_s, t.h2d_s};
    std::memcpy(out.data(), v, sizeof v);
    return out;
  });
  TRAINSIM_CHECK(bytes.size() == 4 * sizeof(double),
                 "simulate_checkpoint_io: malformed result from the simulation process");
  double v[4];
  std::memcpy(v, bytes.data(), sizeof v);
  CheckpointTimes t;
  t.copy_s = v[0];
  t.write_s = v[1];
  t.read_s = v[2];
  t.h2d_s = v[3];
  t.async = q.async;
  return t;
}

}  // namespace trainsim::sim
