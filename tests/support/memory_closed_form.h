// An independent calculation of a rank's GPU memory peak (tp = 1) from the formulas, written
// without the builder: model-state bytes per ZeRO stage (Rajbhandari et al. SC'20), Korthikanti
// et al. activations per layer, DeepSpeed's bucket / gather / offload buffers
// (models/memory/zero_offload.h states the rules), walked along Megatron's pipeline order. Tests
// compare the builder's memory effects (tests/models/test_memory.cpp, program order) and the
// SimGrid-timed peak (tests/sim/test_memory_sim.cpp) with it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "models/hardware/calibration.h"
#include "models/graph/pipeline_schedule.h"
#include "models/input/scenario.h"

namespace trainsim::test_support {

/// The configuration of the rank whose peak is computed (tp = 1; the counts that depend on the
/// plan, such as `communicators`, are counted by hand per test).
struct PeakConfig {
  int stage = 0;
  std::int64_t pp = 1, dp = 1, v = 1, m = 1;
  Recompute rc = Recompute::None;
  double ratio = -1;  // < 0: no offload
  std::int64_t rank_stage = 0;
  std::int64_t reduce_bucket = 500'000'000;
  std::int64_t prefetch = 50'000'000;  // stage3_prefetch_bucket_size
  std::int64_t max_live = 1'000'000'000;      // stage3_max_live_parameters
  std::int64_t persistence = 100'000;         // stage3_param_persistence_threshold
  std::int64_t reuse = 1'000'000'000;         // stage3_max_reuse_distance
  int communicators = 0;  // counted by hand per configuration
};

/// GPT of L layers, hidden H, A heads, sequence S, vocabulary V, micro batch B (tp = 1).
class ClosedFormMemory {
 public:
  ClosedFormMemory(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t seq,
                   std::int64_t vocab, std::int64_t micro_batch, const CalibrationProfile& profile)
      : L(layers), H(hidden), A(heads), S(seq), V(vocab), B(micro_batch),
        sbh(seq * micro_batch * hidden), profile_(profile) {}

  const std::int64_t L, H, A, S, V, B;
  const std::int64_t sbh;  ///< s b h

  // Parameters (tp = 1): per layer QKV 3h^2+3h, projection h^2+h, fc1 4h^2+4h, fc2 4h^2+h, two
  // LayerNorms 4h = 12h^2 + 13h; embedding V h + s h; final LayerNorm 2h; a second copy of the
  // word embedding on the last stage when pp > 1 (tied).
  std::int64_t layer_params() const { return 12 * H * H + 13 * H; }
  std::int64_t stage_params(std::int64_t pp, std::int64_t stage) const {
    std::int64_t p = (L / pp) * layer_params();
    if (stage == 0) p += V * H + S * H;
    if (stage == pp - 1) p += 2 * H + (pp > 1 ? V * H : 0);
    return p;
  }

  // Activations in bytes (Korthikanti et al. Table 2, t = 1): attention 13sbh + 5as^2b, MLP
  // 21sbh; selective recomputation drops 5as^2b; full recomputation stashes 2sbh per layer and
  // materializes one layer's full activations during its backward.
  std::int64_t attn_full() const { return 13 * sbh + 5 * A * S * S * B; }
  std::int64_t mlp_full() const { return 21 * sbh; }
  std::int64_t logits_act() const { return 2 * sbh + 4 * S * B * V; }  // final LN input + fp32 logits
  std::int64_t embed_act() const { return sbh; }                        // embedding dropout output mask

  /// Peak GPU bytes of the rank at pipeline stage c.rank_stage, walking Megatron's pipeline order
  /// with DeepSpeed's allocation rules (stated in models/memory/zero_offload.h), written independently
  /// of the builder.
  std::int64_t expected_peak(const PeakConfig& c) const {
    const std::int64_t P = stage_params(c.pp, c.rank_stage);
    const std::int64_t Pp = c.stage >= 1 ? (P + c.dp - 1) / c.dp : P;
    const bool offload = c.ratio >= 0;
    const std::int64_t cpu = offload ? std::int64_t(std::floor(c.ratio * double(Pp))) : 0;
    const std::int64_t gpu = Pp - cpu;
    // Model states.
    std::int64_t states = 0;
    states += (c.stage >= 3 ? Pp : P) * 2;                                   // fp16 parameters
    if (c.stage <= 1) states += P * 2;                                        // fp16 gradients
    else if (c.stage == 2) states += gpu * 2;                                 // partition
    else states += offload ? gpu * 4 : Pp * 2;                                // fp32 / fp16 partition
    states += (c.stage == 0 ? P : gpu) * 12;                                  // Adam
    states += std::int64_t(profile_.framework_overhead_bytes);
    states += c.communicators * std::int64_t(profile_.nccl_buffer_bytes_per_communicator);

    Ledger led;
    led.add(states);
    const bool full = c.rc == Recompute::Full;
    const std::int64_t attn_kept = c.rc == Recompute::Selective ? 13 * sbh : attn_full();
    const std::int64_t lpc = L / (c.pp * c.v);
    const std::int64_t buckets = c.stage >= 2 ? 2 * std::min(c.reduce_bucket, P) * 2 : 0;
    const std::int64_t share = (std::min(c.reduce_bucket, P) + c.dp - 1) / c.dp;
    const std::int64_t staging =
        c.stage >= 3 && offload ? 2 * share : (offload && cpu > 0 ? 4 * share : 0);
    const bool gathers = c.stage >= 3 && c.dp > 1;
    auto gathered = [&](std::int64_t elems) {
      return gathers ? 2 * elems - (2 * elems) / c.dp : 0;
    };
    bool buffers = false;

    // ZeRO-3 as DeepSpeed's hooks run it (pp = 1): a pass is a list of compute blocks, each
    // with the submodules it uses (id, elements fetched: the tensors at or above the
    // persistence threshold). At a block's pre-hook its submodules are fetched and the next
    // ones of the pass prefetched while fewer than min(prefetch bucket, max live - gathered)
    // elements are being prefetched (checked before adding); after the block each is released
    // unless used again within `reuse` elements of other fetches; the pass's last block
    // releases the rest.
    using Sub = std::pair<int, std::int64_t>;
    auto fetched = [&](std::initializer_list<std::int64_t> tensors) {
      std::int64_t n = 0;
      for (std::int64_t t : tensors) n += t >= c.persistence ? t : 0;
      return n;
    };
    const std::int64_t qkv = fetched({3 * H * H, 3 * H}), proj = fetched({H * H, H});
    const std::int64_t norm = fetched({H, H}), fc1 = fetched({4 * H * H, 4 * H});
    const std::int64_t fc2 = fetched({4 * H * H, H});
    const std::int64_t embed = fetched({V * H, S * H}), out = fetched({V * H});
    std::vector<std::vector<Sub>> blocks;
    std::vector<std::pair<int, std::int64_t>> live;  // id, elements
    std::int64_t live_n = 0;
    std::size_t cursor = 0;
    std::map<int, std::size_t> protect;
    auto add_block = [&](std::vector<Sub> subs) {
      std::vector<Sub> kept;
      for (const Sub& x : subs)
        if (x.second > 0) kept.push_back(x);
      blocks.push_back(kept);
    };
    auto attn_block = [&](int l, bool bwd) {
      std::vector<Sub> v = {{10 * l + 0, norm}, {10 * l + 1, qkv}, {10 * l + 2, proj}};
      if (bwd) std::reverse(v.begin(), v.end());
      add_block(v);
    };
    auto mlp_block = [&](int l, bool bwd) {
      std::vector<Sub> v = {{10 * l + 3, norm}, {10 * l + 4, fc1}, {10 * l + 5, fc2}};
      if (bwd) std::reverse(v.begin(), v.end());
      add_block(v);
    };
    auto is_live = [&](int id) {
      for (const auto& x : live) if (x.first == id) return true;
      return false;
    };
    auto issue = [&](const Sub& x) {
      live.push_back(x);
      live_n += x.second;
      led.add(gathered(x.second));
    };
    auto hook = [&](std::size_t b) {  // block b's pre-hook
      if (!gathers || b >= blocks.size()) return;
      for (const Sub& x : blocks[b]) if (!is_live(x.first)) issue(x);
      const std::int64_t budget = std::min(c.prefetch, c.max_live - live_n);
      std::int64_t pf = 0;
      for (std::size_t j = b + 1; j < blocks.size() && pf < budget; ++j)
        for (const Sub& x : blocks[j]) {
          if (pf >= budget) break;
          if (is_live(x.first)) {  // skipped by the scan: kept until that use
            protect[x.first] = std::max(protect[x.first], j);
            continue;
          }
          issue(x);
          pf += x.second;
        }
    };
    auto drop = [&](int id) {
      for (std::size_t i = 0; i < live.size(); ++i)
        if (live[i].first == id) {
          led.add(-gathered(live[i].second));
          live_n -= live[i].second;
          live.erase(live.begin() + std::ptrdiff_t(i));
          return;
        }
    };
    auto after_block = [&]() {  // block `cursor` done: release, then the next block's hook
      if (!gathers) return;
      const std::size_t b = cursor;
      for (const Sub& x : blocks[b]) {
        // Kept when met again before `reuse` elements of later submodules were walked, or
        // when a prefetch scan skipped a later use of it.
        std::int64_t walked = 0;
        bool again = protect.count(x.first) && protect[x.first] > b;
        for (std::size_t j = b + 1; j < blocks.size() && !again && walked < c.reuse; ++j)
          for (const Sub& y : blocks[j]) {
            if (walked >= c.reuse) break;
            if (y.first == x.first) { again = true; break; }
            walked += y.second;
          }
        if (!again) drop(x.first);
      }
      if (b + 1 == blocks.size()) while (!live.empty()) drop(live.front().first);
      ++cursor;
      hook(cursor);
    };
    auto begin_pass = [&](bool forward) {
      blocks.clear();
      live.clear();
      protect.clear();
      live_n = 0;
      cursor = 0;
      if (c.stage < 3) return;
      if (forward) {
        add_block({{-1, embed}});
        for (int l = 0; l < L; ++l) attn_block(l, false), mlp_block(l, false);
        add_block({{-2, out}});
      } else {
        add_block({{-2, out}});
        for (int l = int(L) - 1; l >= 0; --l) {
          if (c.rc == Recompute::Full) attn_block(l, false), mlp_block(l, false);
          mlp_block(l, true);
          attn_block(l, true);
        }
        add_block({{-1, embed}});
      }
      hook(0);
    };

    const auto order = pipeline_order(
        c.v > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB, int(c.pp),
        int(c.rank_stage), int(c.m), int(c.v));
    for (const PipelineStep& st : order) {
      const std::int64_t vstage = st.chunk * c.pp + c.rank_stage;
      const bool first = vstage == 0, last = vstage == c.pp * c.v - 1;
      if (st.forward) {
        begin_pass(true);
        if (first) {
          led.add(embed_act());
          after_block();
        }
        for (std::int64_t l = 0; l < lpc; ++l) {
          if (full) {
            led.add(2 * sbh);
            led.add(attn_full());
            led.add(-attn_full());
            after_block();
            led.add(mlp_full());
            led.add(-mlp_full());
            after_block();
          } else {
            led.add(attn_kept);
            after_block();
            led.add(mlp_full());
            after_block();
          }
        }
        if (last) {
          led.add(logits_act());
          after_block();
        }
      } else {
        begin_pass(false);
        if (last) {
          if (c.stage >= 2 && !buffers) {
            led.add(buckets);
            led.add(staging);
            buffers = true;
          }
          if (c.stage >= 2) led.add(V * H * 2);  // tied word-embedding gradient
          led.add(2 * S * B * V);                  // gradient of the logits, during their backward
          led.add(-logits_act() - 2 * S * B * V);
          after_block();
        }
        for (std::int64_t l = lpc - 1; l >= 0; --l) {
          if (full) {
            led.add(attn_full());
            after_block();
            led.add(mlp_full());
            after_block();
          }
          if (c.stage >= 2) led.add(2 * layer_params());  // the layer's gradients
          led.add(-mlp_full());
          after_block();
          led.add(-(full ? attn_full() + 2 * sbh : attn_kept));
          if (c.stage >= 2) led.add(-2 * layer_params());
          after_block();
        }
        if (first) {
          if (c.stage >= 2) led.add(2 * S * H);
          led.add(-embed_act());
          if (c.stage >= 2) led.add(-2 * (V * H + S * H));
          after_block();
        }
      }
    }
    // Stage 1: the buffers appear with the first reduction (offload staging only).
    if (c.stage == 1 && !buffers) led.add(staging);
    // Optimizer step: fp32 gradients of the stepped part (Megatron fp16 main_grad.float();
    // DeepSpeed's fp32 partition; persistent already with ZeRO-3 offload), then the bucket
    // buffers are released.
    const std::int64_t fp32 = c.stage == 0 ? 4 * P : (c.stage >= 3 && offload ? 0 : 4 * gpu);
    if (gpu > 0) led.add(fp32);
    return led.peak;
  }

 private:
  /// A running total with its maximum.
  struct Ledger {
    std::int64_t cur = 0, peak = 0;
    void add(std::int64_t b) {
      cur += b;
      peak = std::max(peak, cur);
    }
  };
  const CalibrationProfile& profile_;
};

}  // namespace trainsim::test_support
