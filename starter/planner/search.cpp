// Problem 8 (given): see planner/search.h.
#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "kit/errors.h"
#include "planner/partition.h"

namespace kit::planner {

namespace {

// The slowest device among some ranks: a stage runs at its pace.
const DeviceType& slowest_device(const Cluster& cluster, const std::vector<int64_t>& ranks) {
  const DeviceType* slow = &cluster.device_of(ranks.front());
  for (const int64_t r : ranks)
    if (cluster.device_of(r).flops < slow->flops) slow = &cluster.device_of(r);
  return *slow;
}

// A profile measured with each degree's t ranks together holds their all-reduces in its layer
// times (planner/profile.h): the tensor-parallel term is then already in the compute.
bool profiled_with_tensor_parallelism(const DeviceType& d) { return d.profile && d.profile->tensor_parallel_included; }

// The link between stage j and stage j + 1: the worst over the pairs of ranks that talk.
const Link& stage_link(const Cluster& cluster, const Strategy& s, int64_t j) {
  const Link* worst = &cluster.intra_node;
  for (int64_t k = 0; k < s.dp * s.tp; ++k) {
    const Link& l = cluster.link_of({j * s.dp * s.tp + k, (j + 1) * s.dp * s.tp + k});
    if (l.bandwidth < worst->bandwidth) worst = &l;
  }
  return *worst;
}

// The worst replica's tensor-parallel time for layers [first, last) of stage j.
double stage_tensor_seconds(const Cluster& cluster, const ModelSpec& model, const Strategy& s, int64_t j,
                            int64_t first, int64_t last, double tokens) {
  double worst = 0;
  for (int64_t r = 0; r < s.dp; ++r)
    worst = std::max(worst, tensor_parallel_seconds(model, first, last, tokens, s.tp,
                                                    cluster.link_of(tensor_group(s, j, r))));
  return worst;
}

double device_memory(const Cluster& cluster, const std::vector<int64_t>& ranks) {
  double least = std::numeric_limits<double>::infinity();
  for (const int64_t r : ranks) least = std::min(least, cluster.device_of(r).memory_bytes);
  return least;
}

// AdamW's step on one rank of a stage: its layers' shards (planner/profile.h; 0 unprofiled),
// divided among the data-parallel ranks with ZeRO (each steps its 1/d of the state).
double stage_optimizer_seconds(const ModelSpec& model, int64_t first, int64_t last, const Strategy& s,
                               const DeviceType& device) {
  double seconds = 0;
  for (int64_t i = first; i < last; ++i)
    seconds += optimizer_seconds(model.layers[static_cast<size_t>(i)], s.tp, device);
  return s.zero_stage >= 1 ? seconds / static_cast<double>(s.dp) : seconds;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// How much slower the ranks `ranks` compute when `share` of the ranks `busy` on each one's node
// compute at once than when their profile (or FLOP rate) was measured, with `measured`
// processes (a tensor-parallel profile runs its t ranks together: planner/profile.h). A node
// whose devices share processors (shared_flops) runs c = shared_flops / flops of them at full
// speed: n at once each compute at min(1, c / n) of their rate. The slowest rank's factor; 1
// when no node shares.
double contention(const Cluster& cluster, const std::vector<int64_t>& ranks, const std::vector<int64_t>& busy,
                  double share, int64_t measured) {
  double worst = 1;
  for (const int64_t r : ranks) {
    const size_t node = static_cast<size_t>(cluster.node_of(r));
    if (cluster.nodes[node].shared_flops <= 0) continue;
    const double c = cluster.nodes[node].shared_flops / cluster.device_of(r).flops;
    const auto slowdown = [c](double n) { return std::max(1.0, n / c); };
    const double n = share * static_cast<double>(std::count_if(busy.begin(), busy.end(), [&](int64_t b) {
                       return cluster.node_of(b) == static_cast<int64_t>(node);
                     }));
    worst = std::max(worst, slowdown(n) / slowdown(static_cast<double>(std::min(measured, cluster.nodes[node].devices))));
  }
  return worst;
}

// The part of a stage's compute (compute_seconds: `compute`) spent computing: all of it, but
// for a profile with the tensor-parallel all-reduces in it, where it is the layers' time at
// t = 1 / t (one rank's share of the work; the rest of the measured time is waiting).
double computing_seconds(const ModelSpec& model, int64_t first, int64_t last, double tokens, const Strategy& s,
                         const DeviceType& device, double compute) {
  if (!profiled_with_tensor_parallelism(device) || s.tp == 1) return compute;
  return std::min(compute, compute_seconds(model, first, last, tokens, 1, device, s.recompute) /
                               static_cast<double>(s.tp));
}

}  // namespace

std::vector<int64_t> even_partition(const ModelSpec& model, int64_t pp) {
  const int64_t n = static_cast<int64_t>(model.layers.size());
  const int64_t ends = model.embedding_and_head ? 2 : 0;
  if (pp < 1 || pp > n - ends)
    throw Error(std::to_string(pp) + " pipeline stages for " + std::to_string(n - ends) +
                (ends ? " blocks" : " layers") + " would leave a stage without work: use at most " +
                std::to_string(n - ends));
  std::vector<int64_t> counts(static_cast<size_t>(pp), (n - ends) / pp);
  for (int64_t j = 0; j < (n - ends) % pp; ++j) ++counts[static_cast<size_t>(j)];
  if (ends) {
    ++counts.front();
    ++counts.back();
  }
  return counts;
}

std::vector<int64_t> balanced_partition(const Cluster& cluster, const ModelSpec& model, const Workload& work,
                                        const Strategy& s) {
  const int64_t n = static_cast<int64_t>(model.layers.size());
  const double tokens = static_cast<double>(s.micro_batch * work.seq_len);
  std::vector<std::vector<double>> seconds(static_cast<size_t>(s.pp), std::vector<double>(static_cast<size_t>(n)));
  for (int64_t j = 0; j < s.pp; ++j) {
    const DeviceType& device = slowest_device(cluster, stage_ranks(s, j));
    for (int64_t i = 0; i < n; ++i)
      seconds[static_cast<size_t>(j)][static_cast<size_t>(i)] =
          compute_seconds(model, i, i + 1, tokens, s.tp, device, s.recompute) +
          (profiled_with_tensor_parallelism(device) ? 0.0 : stage_tensor_seconds(cluster, model, s, j, i, i + 1, tokens));
  }
  return partition_layers(seconds);
}

Cost strategy_cost(const Cluster& cluster, const ModelSpec& model, const Workload& work, const Strategy& s) {
  if (s.world() != cluster.devices())
    throw Error("the strategy " + s.label() + " uses " + std::to_string(s.world()) + " ranks; the cluster " +
                cluster.name + " has " + std::to_string(cluster.devices()) + " devices");
  const std::vector<int64_t> b = stage_bounds(s.layers_per_stage);
  if (static_cast<int64_t>(s.layers_per_stage.size()) != s.pp ||
      b.back() != static_cast<int64_t>(model.layers.size()) ||
      std::any_of(s.layers_per_stage.begin(), s.layers_per_stage.end(), [](int64_t n) { return n < 1; }))
    throw Error("the strategy " + s.label() + " needs layers_per_stage: " + std::to_string(s.pp) +
                " counts of 1 or more adding up to the model's " + std::to_string(model.layers.size()) + " layers");
  Cost c;
  c.strategy = s;
  c.micro_batches = micro_batches(s, work.global_batch);
  const double tokens = static_cast<double>(s.micro_batch * work.seq_len);
  std::vector<int64_t> everyone(static_cast<size_t>(s.world()));
  std::iota(everyone.begin(), everyone.end(), 0);
  c.contention = 1;
  // A pipeline keeps its stages busy 1 - bubble of the step: on average that share of the
  // ranks compute at once.
  c.bubble = bubble_fraction(s.pp, c.micro_batches, s.schedule, s.virtual_chunks);
  double room = std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < s.pp; ++j) {
    const int64_t first = b[static_cast<size_t>(j)], last = b[static_cast<size_t>(j + 1)];
    const std::vector<int64_t> ranks = stage_ranks(s, j);
    const DeviceType& device = slowest_device(cluster, ranks);
    const double compute = compute_seconds(model, first, last, tokens, s.tp, device, s.recompute);
    const double tensor = profiled_with_tensor_parallelism(device) ? 0.0
                                                                   : stage_tensor_seconds(cluster, model, s, j, first, last, tokens);
    // The activation goes forward and its gradient comes back: two sends of the same size.
    const double p2p = j + 1 < s.pp ? 2 * p2p_seconds(model.layers[static_cast<size_t>(last - 1)].output_bytes_per_token *
                                                          tokens, stage_link(cluster, s, j))
                                    : 0.0;
    const int64_t measured = profiled_with_tensor_parallelism(device) ? s.tp : 1;
    const double all = contention(cluster, ranks, everyone, 1 - c.bubble, measured);
    // Computing is slowed by the ranks that share the cores. Waiting in a tensor-parallel
    // all-reduce (in a profile that holds them: its time less a t-th of the layers' time at
    // t = 1) is slowed only while other stages compute: the stage's own ranks all wait at once,
    // giving their cores away, but another stage's ranks keep theirs busy.
    const double working = all > 1 ? computing_seconds(model, first, last, tokens, s, device, compute) : 0.0;
    const double others = s.pp > 1 && c.micro_batches > 1 ? all : 1.0;
    const double busy = compute + working * (all - 1) + (compute - working) * (others - 1);
    c.stage_seconds.push_back(busy + tensor + p2p);
    if (c.stage_seconds.back() >= *std::max_element(c.stage_seconds.begin(), c.stage_seconds.end())) {
      c.compute = busy;
      c.tensor = tensor;
      c.p2p = p2p;
      c.contention = all;
    }
    c.optimizer = std::max(c.optimizer, stage_optimizer_seconds(model, first, last, s, device));
    for (int64_t k = 0; k < s.tp; ++k)
      c.data = std::max(c.data, data_parallel_seconds(model.param_bytes(first, last) / static_cast<double>(s.tp),
                                                      data_group(s, j, k), cluster));
    const Memory mem = memory_per_rank(model, first, last, tokens, s, j, c.micro_batches);
    const double limit = device_memory(cluster, ranks);
    if (limit - mem.total() < room) {
      room = limit - mem.total();
      c.memory = mem;
      c.memory_limit = limit;
    }
  }
  c.fits = room >= 0;
  c.pipeline = pipeline_seconds(c.stage_seconds, c.micro_batches, s.schedule, s.virtual_chunks);
  c.total = c.pipeline + c.optimizer + c.data;
  return c;
}

std::vector<Cost> search(const Cluster& cluster, const ModelSpec& model, const Workload& work,
                         const SearchOptions& o) {
  const int64_t W = cluster.devices(), layers = static_cast<int64_t>(model.layers.size());
  std::vector<Cost> out;
  for (const int64_t tp : divisors(W))
    for (const int64_t pp : divisors(W / tp)) {
      const int64_t dp = W / tp / pp;
      if ((model.heads > 0 && model.heads % tp != 0) || pp > layers - (model.embedding_and_head ? 2 : 0) ||
          work.global_batch % dp != 0)
        continue;
      const std::vector<int64_t> sizes =
          o.micro_batch_sizes.empty() ? divisors(work.global_batch / dp) : o.micro_batch_sizes;
      for (const int64_t mb : sizes) {
        // The layers' split depends on (d, p, t), the micro-batch size and recomputation only
        // (a layer's compute is 4/3 as long with it, its all-reduces are not): found once for
        // each, for every schedule and ZeRO stage below.
        std::vector<int64_t> layers_per_stage[2];
        for (const Schedule sched : o.schedules)
          for (const int zero : o.zero_stages)
            for (const bool recompute : o.recompute) {
              Strategy s;
              s.dp = dp, s.pp = pp, s.tp = tp, s.micro_batch = mb, s.schedule = sched, s.zero_stage = zero;
              s.recompute = recompute;
              if (work.global_batch % (dp * mb) != 0 || (zero > 0 && dp == 1)) continue;
              const int64_t m = work.global_batch / (dp * mb);
              if (o.micro_batches > 0 && m != o.micro_batches) continue;
              if (sched == Schedule::interleaved) {
                s.virtual_chunks = o.interleaved_chunks;
                if (pp == 1 || m % pp != 0 || pp * s.virtual_chunks > layers) continue;  // Megatron's conditions
              } else if (sched == Schedule::gpipe && pp == 1 &&
                         std::find(o.schedules.begin(), o.schedules.end(), Schedule::one_f_one_b) !=
                             o.schedules.end()) {
                continue;  // one stage: GPipe is 1F1B with more memory
              }
              std::vector<int64_t>& split = layers_per_stage[recompute ? 1 : 0];
              if (split.empty())
                split = o.even ? even_partition(model, pp) : balanced_partition(cluster, model, work, s);
              s.layers_per_stage = split;
              Cost c = strategy_cost(cluster, model, work, s);
              if (c.fits || o.keep_infeasible) out.push_back(std::move(c));
            }
      }
    }
  // Fastest first; among equal times (the micro-batch size often does not change it), the one
  // that leaves the most memory free.
  std::stable_sort(out.begin(), out.end(), [](const Cost& a, const Cost& b) {
    if (std::abs(a.total - b.total) > 1e-9 * std::max(a.total, b.total)) return a.total < b.total;
    return a.memory_limit - a.memory.total() > b.memory_limit - b.memory.total();
  });
  return out;
}

nlohmann::json to_json(const Cost& c) {
  const Strategy& s = c.strategy;
  return {{"label", s.label()},
          {"dp", s.dp},
          {"pp", s.pp},
          {"tp", s.tp},
          {"micro_batch", s.micro_batch},
          {"micro_batches", c.micro_batches},
          {"schedule", schedule_name(s.schedule)},
          {"virtual_chunks", s.virtual_chunks},
          {"zero_stage", s.zero_stage},
          {"recompute", s.recompute},
          {"layers_per_stage", s.layers_per_stage},
          {"stage_seconds", c.stage_seconds},
          {"compute_s", c.compute},
          {"tensor_s", c.tensor},
          {"p2p_s", c.p2p},
          {"pipeline_s", c.pipeline},
          {"optimizer_s", c.optimizer},
          {"contention", c.contention},
          {"data_s", c.data},
          {"bubble", c.bubble},
          {"total_s", c.total},
          {"memory_bytes",
           {{"parameters", c.memory.parameters},
            {"gradients", c.memory.gradients},
            {"optimizer", c.memory.optimizer},
            {"activations", c.memory.activations},
            {"total", c.memory.total()},
            {"limit", c.memory_limit}}},
          {"fits", c.fits}};
}

}  // namespace kit::planner
