// Given: see profiler/layers.h.
#include "profiler/layers.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "kit/errors.h"
#include "tensor_parallel/blocks.h"
#include "tensor_parallel/mappings.h"
#include "tensor_parallel/sharding.h"
#include "tensor_parallel/vocab.h"
#include "train/adamw.h"

namespace kit::profiler {

namespace {

// One rank's shard of a layer (or a row of blocks): its modules, an input, and one forward
// that ends in what the backward starts from (the output, or the loss).
struct Shard : torch::nn::Module {
  std::function<torch::Tensor()> forward;
  torch::Tensor seed;  // the gradient of the output ({} for a scalar loss)
  int64_t count = 1;   // layers in a row: the time of one is the whole's / count
};

std::unique_ptr<Shard> make_shard(const GPT2Config& c, const std::string& kind, const dist::Group& g, int64_t rows,
                                  int64_t T) {
  const int64_t t = g.size();
  tp::check_divisible(c, t);
  if (rows < 1 || T < 1 || T > c.n_positions)
    throw Error("profiling needs 1 or more rows and a sequence length of 1 to n_positions (" +
                std::to_string(c.n_positions) + ")");
  // The same input on every rank of the group (each runs the whole micro-batch).
  torch::manual_seed(1234);
  const torch::Tensor ids = torch::randint(c.vocab_size, {rows, T});
  const torch::Tensor x = torch::randn({rows, T, c.n_embd}).requires_grad_(true);
  auto s = std::make_unique<Shard>();
  if (kind == "embedding") {
    auto wte = s->register_module("wte", tp::VocabParallelEmbedding(c.vocab_size, c.n_embd, g));
    auto wpe = s->register_module("wpe", torch::nn::Embedding(c.n_positions, c.n_embd));
    s->forward = [wte, wpe, ids, T] { return wte->forward(ids) + wpe->forward(torch::arange(T)); };
    s->seed = torch::randn({rows, T, c.n_embd});
  } else if (kind == "block") {
    auto blocks = s->register_module("h", torch::nn::ModuleList());
    for (int64_t k = 0; k < std::max<int64_t>(1, c.n_layer); ++k) blocks->push_back(tp::ParallelBlock(c, g));
    s->forward = [blocks, x] {
      torch::Tensor h = x;
      for (const auto& b : *blocks) h = b->as<tp::ParallelBlockImpl>()->forward(h);
      return h;
    };
    s->seed = torch::randn({rows, T, c.n_embd});
    s->count = static_cast<int64_t>(blocks->size());
  } else if (kind == "head") {
    auto wte = s->register_module("wte", tp::VocabParallelEmbedding(c.vocab_size, c.n_embd, g));
    auto ln_f = s->register_module(
        "ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_eps)));
    const torch::Tensor mask = torch::ones({rows, T});
    s->forward = [wte, ln_f, x, ids, mask, g] {
      // As grid::TensorParallelStage's last stage: f, the logits of this rank's rows, the loss.
      const torch::Tensor logits = torch::nn::functional::linear(tp::copy_to_tensor_parallel(ln_f->forward(x), g),
                                                                 wte->weight);
      return tp::vocab_parallel_cross_entropy(logits, ids, mask, wte->vocab_start, g);
    };
  } else {
    throw Error("no layer kind \"" + kind + "\" to profile: embedding, block or head");
  }
  torch::NoGradGuard no_grad;
  torch::manual_seed(99);
  for (auto& p : s->parameters()) p.normal_(0, 0.02);
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The slowest rank's value of each, over the group.
std::vector<double> slowest(const std::vector<double>& mine, const dist::Group& g) {
  torch::Tensor t = torch::tensor(mine, torch::kFloat64);
  dist::all_reduce(t, dist::ReduceOp::MAX, g);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

void check_runs(int warmup, int repeats) {
  if (repeats < 1 || warmup < 0) throw Error("profiling needs 1 or more repeats and 0 or more warm-up runs");
}

}  // namespace

const std::vector<std::string>& layer_kinds() {
  static const std::vector<std::string> kinds{"embedding", "block", "head"};
  return kinds;
}

std::vector<Timing> time_layers(const GPT2Config& cfg, const std::string& kind, const dist::Group& group,
                                const std::vector<int64_t>& rows, int64_t seq_len, int warmup, int repeats) {
  check_runs(warmup, repeats);
  std::vector<std::unique_ptr<Shard>> shards;
  for (const int64_t r : rows) shards.push_back(make_shard(cfg, kind, group, r, seq_len));
  std::vector<std::vector<double>> forward(rows.size()), backward(rows.size());
  // In rounds, each size in turn: a drift of the machine's speed hits every size alike. Within
  // a round a size runs back to back, its gradients adding up, as a step's micro-batches do.
  const int rounds = std::min(repeats, 4);
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < shards.size(); ++i) {
      Shard& s = *shards[i];
      for (auto& p : s.parameters()) p.mutable_grad() = torch::Tensor();
      const int timed = repeats / rounds + (round < repeats % rounds ? 1 : 0);
      for (int k = 0; k < warmup + timed; ++k) {
        dist::barrier(group);
        auto start = std::chrono::steady_clock::now();
        const torch::Tensor out = s.forward();
        const double f = seconds_since(start);
        start = std::chrono::steady_clock::now();
        if (s.seed.defined()) out.backward(s.seed);
        else out.backward();
        const double b = seconds_since(start);
        if (k >= warmup) forward[i].push_back(f), backward[i].push_back(b);
      }
    }
  std::vector<Timing> out;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::vector<double> fw = slowest(forward[i], group), bw = slowest(backward[i], group);
    std::vector<double> both(fw.size());
    for (size_t k = 0; k < both.size(); ++k) both[k] = fw[k] + bw[k];
    const double n = static_cast<double>(shards[i]->count), mid = median_of(both);
    out.push_back({median_of(fw) / n, median_of(bw) / n,
                   (*std::max_element(both.begin(), both.end()) - *std::min_element(both.begin(), both.end())) / mid});
  }
  return out;
}

double time_optimizer(const GPT2Config& cfg, const std::string& kind, const dist::Group& group, int warmup,
                      int repeats) {
  check_runs(warmup, repeats);
  GPT2Config one = cfg;
  one.n_layer = 1;  // one layer's shard
  const std::unique_ptr<Shard> s = make_shard(one, kind, group, 1, 1);
  for (auto& p : s->parameters()) p.mutable_grad() = torch::randn_like(p);
  kit::AdamW adamw(s->parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
  std::vector<double> times;
  for (int k = 0; k < warmup + repeats; ++k) {
    dist::barrier(group);
    const auto start = std::chrono::steady_clock::now();
    adamw.step();
    if (k >= warmup) times.push_back(seconds_since(start));
  }
  return median_of(slowest(times, group));
}

}  // namespace kit::profiler
