// profile_layers: what each kind of GPT-2 layer takes on this machine, the planner's profile
// (Problem 8; planner/profile.h), as AMP profiles its layers instead of counting FLOPs.
//
//   ./build/profile_layers --preset cpu-small --seq-len 128 --tp 1,2,4 --micro-batch-sizes 1,2,4,8
//   ./build/profile_layers --preset gpt2 --vocab-size 50257 --seq-len 1024 --tp 1,2,4,8 --out a100.json
//
// For every tensor-parallel degree t and micro-batch size (sequences) it times the embedding,
// a block and the head with its loss, forward and backward, as t processes (the kit starts the
// largest t of them; Gloo), each running its shard of Problem 4's layers, all-reduces included
// (the median of --repeats after --warmup; profiler/layers.h), and AdamW's step over each
// shard, with --threads threads per process. Name the file in a cluster's device type:
//   "device_types": {"cpu": {"flops": ..., "memory_bytes": ..., "profile": "profile.json"}}
// and plan prices every layer at its measured time. Options: --help.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "app/cli.h"
#include "dist/dist.h"
#include "kit/errors.h"
#include "kit/memory.h"
#include "kit/threads.h"
#include "planner/model_spec.h"
#include "profiler/layers.h"
#include "tensor_parallel/sharding.h"

namespace {

struct ProfileOptions {
  kit::RunOptions run;
  int64_t n_layer = 0, n_embd = 0, n_head = 0, vocab = 1000, threads = 1, warmup = 2, repeats = 5;
  std::string tp = "1,2,4", micro_batch_sizes = "1,2,4,8", out = "runs/profile/profile.json";
  int port = 0;
};

std::vector<int64_t> whole_numbers(const std::string& text, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1)
      throw kit::Error(std::string(flag) + ": \"" + item + "\" is not a whole number of 1 or more (e.g. " + flag +
                       " 1,2,4)");
    out.push_back(v);
  }
  if (out.empty()) throw kit::Error(std::string(flag) + " is empty: give a comma list, e.g. 1,2,4");
  return out;
}

kit::GPT2Config profiled_config(const ProfileOptions& o) {
  kit::GPT2Config cfg = kit::model_config(o.run);
  if (o.n_layer > 0) cfg.n_layer = o.n_layer;
  if (o.n_embd > 0) cfg.n_embd = o.n_embd;
  if (o.n_head > 0) cfg.n_head = o.n_head;
  cfg.vocab_size = o.vocab;
  return cfg;
}

void check_options(const ProfileOptions& o) {
  const kit::GPT2Config cfg = profiled_config(o);
  for (const int64_t t : whole_numbers(o.tp, "--tp")) kit::tp::check_divisible(cfg, t);
  whole_numbers(o.micro_batch_sizes, "--micro-batch-sizes");
  if (o.repeats < 1 || o.warmup < 0) throw kit::Error("--repeats must be 1 or more and --warmup 0 or more");
  if (o.run.data.seq_len < 1 || o.run.data.seq_len > cfg.n_positions)
    throw kit::Error("--seq-len must be 1 to the model's n_positions (" + std::to_string(cfg.n_positions) + ")");
}

int max_tp(const ProfileOptions& o) {
  const std::vector<int64_t> tps = whole_numbers(o.tp, "--tp");
  return static_cast<int>(*std::max_element(tps.begin(), tps.end()));
}

// One rank: for each degree t, ranks 0..t-1 time every kind and micro-batch size together while
// the others wait (a barrier after each measurement keeps every wait short); rank 0 writes.
int rank_main(const ProfileOptions& o, const kit::WorldInfo& me) {
  kit::dist::init_process_group("gloo", me.rank, me.world_size);
  kit::set_threads(o.threads);
  kit::memory::enable_cpu_counting();  // the allocator the training programs run on (train_parallel's)
  const kit::GPT2Config cfg = profiled_config(o);
  const int64_t T = o.run.data.seq_len;
  const int warmup = static_cast<int>(o.warmup), repeats = static_cast<int>(o.repeats);
  nlohmann::json times = nlohmann::json::array(), optimizer = nlohmann::json::array();
  for (const int64_t t : whole_numbers(o.tp, "--tp")) {
    std::vector<int> ranks(static_cast<size_t>(t));
    std::iota(ranks.begin(), ranks.end(), 0);
    const kit::dist::Group group = kit::dist::new_group(ranks, "profile-t" + std::to_string(t));
    const std::vector<int64_t> sizes = whole_numbers(o.micro_batch_sizes, "--micro-batch-sizes");
    for (const auto& kind : kit::profiler::layer_kinds()) {
      if (group.is_member()) {
        const auto measured = kit::profiler::time_layers(cfg, kind, group, sizes, T, warmup, repeats);
        for (size_t i = 0; i < sizes.size(); ++i) {
          const auto& m = measured[i];
          times.push_back({{"kind", kind}, {"tp", t}, {"micro_batch", sizes[i]}, {"tokens", sizes[i] * T},
                           {"forward_s", m.forward}, {"backward_s", m.backward}, {"spread", m.spread}});
          if (me.rank == 0)
            std::cout << kind << " t=" << t << " micro-batch " << sizes[i] << ": forward " << 1e3 * m.forward
                      << " ms, backward " << 1e3 * m.backward << " ms (spread " << 100 * m.spread << " %)\n";
        }
      }
      kit::dist::barrier();
      if (group.is_member())
        optimizer.push_back({{"kind", kind}, {"tp", t},
                             {"seconds", kit::profiler::time_optimizer(cfg, kind, group, warmup, repeats)}});
      kit::dist::barrier();
    }
  }
  if (me.rank == 0) {
    // What was measured, as the planner describes these layers (planner/model_spec.h).
    const kit::planner::ModelSpec spec = kit::planner::gpt2_model(cfg, T);
    nlohmann::json layers = nlohmann::json::object();
    for (const auto& l : {spec.layers.front(), spec.layers[1], spec.layers.back()})
      layers[l.kind] = {{"flops_per_token", l.flops_per_token}, {"param_bytes", l.param_bytes}};
    const nlohmann::json j = {
        {"format", "kit layer profile"},
        {"device", "this machine: each degree t as t processes of " + std::to_string(o.threads) + " thread(s)"},
        {"tensor_parallel_included", true}, {"preset", o.run.preset}, {"n_layer", cfg.n_layer},
        {"n_embd", cfg.n_embd}, {"n_head", cfg.n_head}, {"vocab_size", cfg.vocab_size}, {"seq_len", T},
        {"threads", o.threads}, {"warmup", o.warmup}, {"repeats", o.repeats},
        {"layers", layers}, {"times", times}, {"optimizer", optimizer}};
    const std::string text = j.dump(1) + "\n";
    kit::write_file_atomically(o.out, std::vector<char>(text.begin(), text.end()), "--out");
    std::cout << "wrote " << o.out << "\n";
  }
  kit::dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time each kind of GPT-2 layer (embedding, block, head with its loss), forward and backward, per "
               "tensor-parallel degree and micro-batch size, and AdamW's step: the planner's profile "
               "(planner/profile.h)."};
  ProfileOptions o;
  o.run.data.seq_len = 128;
  o.run.dropout = 0;
  kit::add_preset_option(app, o.run);
  app.add_option("--n-layer", o.n_layer, "Blocks timed in a row (the preset's by default; 0: keep)")
      ->capture_default_str();
  app.add_option("--n-embd", o.n_embd, "Replace the preset's width (0: keep)")->capture_default_str();
  app.add_option("--n-head", o.n_head, "Replace the preset's heads (0: keep)")->capture_default_str();
  app.add_option("--vocab-size", o.vocab, "Vocabulary (plan's --vocab-size; t must divide it)")->capture_default_str();
  app.add_option("--seq-len", o.run.data.seq_len, "Tokens per sequence")->capture_default_str();
  app.add_option("--tp", o.tp, "Tensor-parallel degrees, comma list (each must divide n_head, n_embd, vocabulary)")
      ->capture_default_str();
  app.add_option("--micro-batch-sizes", o.micro_batch_sizes, "Micro-batch sizes in sequences, comma list (as plan's)")
      ->capture_default_str();
  // --micro-batches is a count m in every other program: refused here with the new name.
  kit::refuse_option(app, "--micro-batches",
                     "profile_layers takes micro-batch sizes as --micro-batch-sizes (as plan does); --micro-batches is "
                     "the count m of the training programs");
  app.add_option("--threads", o.threads, "LibTorch threads of this process (as each rank of the runs you plan)")
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed runs before each measurement")->capture_default_str();
  app.add_option("--repeats", o.repeats, "Timed runs per measurement (their median is kept)")->capture_default_str();
  app.add_option("--out", o.out, "The profile JSON to write")->capture_default_str();
  app.add_option("--port", o.port, "Rendezvous port of the t processes (default: MASTER_PORT if set, else a free one)");
  return kit::guarded_main(argc, argv, app, [&] {
    return kit::run_ranks(0, max_tp(o), o.port, "profiling ranks (gloo)", [&] { check_options(o); },
                          [&](const kit::WorldInfo& w) { return rank_main(o, w); });
  });
}
