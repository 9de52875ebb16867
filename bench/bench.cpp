// bench: one training configuration of GPT-2, timed on synthetic batches, printed as one
// line of JSON. bench/run_bench.py runs every configuration next to the Python baseline
// (bench/baseline.py, the same step in PyTorch) and prints the comparison.
//
//   ./build/bench --gemm                                  # this process's GEMM GFLOP/s
//   ./build/bench --config single --preset cpu-small      # one process
//   ./build/bench --config indep                          # 2 independent processes at once
//   ./build/bench --config dp                             # 2 ranks, average_gradients (Problem 1.2)
//   ./build/bench --config dp_bucketed --bucket-mb 1      # 2 ranks, all-reduce overlapped with backward
//   ./build/bench --config mp                             # 2 stages, model parallel
//   ./build/bench --config pp --chunks 4                  # 2 stages, pipeline parallel (Problem 2)
//
// Synthetic batches (random tokens, every label counted) make the step independent of the
// tokenizer and identical to the Python one. tokens/s follows the kit's one definition
// (project/loop.h): tokens processed in the timed steps / their wall time; over several
// processes, the sum of their tokens over the slowest one's time.
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "data_parallel/grad_buckets.h"
#include "dist/dist.h"
#include "dist/launch.h"
#include "kit/errors.h"
#include "kit/gemm.h"
#include "kit/threads.h"
#include "model/gpt2.h"
#include "pipeline/model_parallel.h"
#include "project/cli.h"
#include "project/loop.h"
#include "project/run_data_parallel.h"
#include "train/loss.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Options {
  std::string config = "single";
  std::string preset = "cpu-small";
  int64_t steps = 20, warmup = 3, batch_size = 32, threads = 1, chunks = 4, seq_len = 128, vocab = 1000;
  double bucket_mb = 1.0;
  uint64_t seed = 42;
};

bool multi_process(const std::string& config) { return config == "indep" || config == "dp" || config == "dp_bucketed"; }
int64_t stages_of(const std::string& config) { return config == "mp" || config == "pp" ? 2 : 1; }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// A few fixed batches of random tokens, different per rank; the steps cycle through them.
std::vector<kit::Batch> synthetic_batches(const Options& o, int rank) {
  torch::manual_seed(o.seed + 1000 + static_cast<uint64_t>(rank));
  std::vector<kit::Batch> out;
  for (int i = 0; i < 4; ++i) {
    auto t = torch::randint(o.vocab, {o.batch_size, o.seq_len + 1}, torch::kInt64);
    kit::Batch b;
    b.input = t.narrow(1, 0, o.seq_len).contiguous();
    b.labels = t.narrow(1, 1, o.seq_len).contiguous();
    b.mask = torch::ones({o.batch_size, o.seq_len});
    out.push_back(b);
  }
  return out;
}

// Model FLOPs per token: 6N for the weights' matmuls forward and backward (N without the
// position embeddings, a lookup; the tied wte stays in, it is the head's matmul) plus
// 6·L·C·T for attention's two T×T matmuls, counting only the causal half.
double flops_per_token(kit::GPT2& model, int64_t seq_len) {
  const auto& c = model->config();
  const int64_t n = kit::count_parameters(*model) - model->wpe->weight.numel();
  return 6.0 * static_cast<double>(n) + 6.0 * c.n_layer * c.n_embd * static_cast<double>(seq_len);
}

// The measurement of one process: per-step wall times and communication times.
struct Timing {
  std::vector<double> step_s, comm_s;
  double total_s = 0;
};

template <class Step>
Timing time_steps(const Options& o, const std::vector<kit::Batch>& batches, Step&& step) {
  for (int64_t k = 0; k < o.warmup; ++k) step(batches[k % batches.size()]);
  if (kit::dist::is_initialized()) kit::dist::barrier();  // the ranks start the clock together
  Timing t;
  const auto t0 = Clock::now();
  for (int64_t k = 0; k < o.steps; ++k) {
    const auto s0 = Clock::now();
    t.comm_s.push_back(step(batches[(o.warmup + k) % batches.size()]));
    t.step_s.push_back(seconds_since(s0));
  }
  t.total_s = seconds_since(t0);
  return t;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Runs this process's part: the whole configuration for single/mp/pp, one rank otherwise.
json run_one(const Options& o, int rank, int world) {
  kit::set_threads(o.threads);
  kit::GPT2Config cfg = kit::gpt2_preset(o.preset);
  auto model = kit::build_model(cfg, o.vocab, o.seq_len, o.seed);
  const auto batches = synthetic_batches(o, rank);
  torch::manual_seed(o.seed + 1 + static_cast<uint64_t>(rank));  // dropout
  const bool dp = o.config == "dp" || o.config == "dp_bucketed";
  if (dp) {
    kit::dist::init_process_group("gloo", rank, world);
    kit::dist::broadcast_parameters(*model, 0);
  }
  auto opt = kit::make_optimizer(*model, kit::TrainConfig{});

  std::unique_ptr<kit::GPT2ModelParallel> mp;
  if (stages_of(o.config) > 1) {
    mp = std::make_unique<kit::GPT2ModelParallel>(model, kit::cpu_stages(stages_of(o.config)));
    if (o.config == "pp") {
      if (o.chunks < 1 || o.chunks > o.batch_size)
        throw kit::Error("--chunks " + std::to_string(o.chunks) + " must be in 1..--batch-size (" +
                         std::to_string(o.batch_size) + ")");
      mp->prepare_pipeline_parallel((o.batch_size + o.chunks - 1) / o.chunks, o.threads);  // Problem 2.3
    }
  }
  std::unique_ptr<kit::GradBuckets> buckets;
  if (o.config == "dp_bucketed") buckets = std::make_unique<kit::GradBuckets>(*model, static_cast<int64_t>(o.bucket_mb * (1 << 20)));

  auto forward = [&](const torch::Tensor& x) { return mp ? mp->forward(x) : model->forward(x); };
  // One step; returns the seconds spent waiting for gradient communication.
  auto step = [&](const kit::Batch& b) {
    if (buckets) {
      kit::bucketed_train_step(forward, *opt, *buckets, b);
      return buckets->last_wait_s();
    }
    // train_step's order, with average_gradients (Problem 1.2) timed on its own.
    opt->zero_grad();
    auto loss = kit::masked_cross_entropy(forward(b.input), b.labels, b.mask);
    loss.backward();
    double comm = 0;
    if (dp) {
      const auto c0 = Clock::now();
      kit::average_gradients(*model);
      comm = seconds_since(c0);
    }
    opt->step();
    loss.item<double>();
    return comm;
  };
  const Timing t = time_steps(o, batches, step);
  if (dp) kit::dist::destroy_process_group();
  const double tokens = static_cast<double>(o.steps * o.batch_size * o.seq_len);
  const auto min_step = *std::min_element(t.step_s.begin(), t.step_s.end());
  return {{"tokens", tokens},
          {"seconds", t.total_s},
          {"step_time_s", mean(t.step_s)},
          {"step_time_min_s", min_step},
          {"step_times_s", t.step_s},  // every timed step (the spread of tokens/s)
          {"comm_time_s", mean(t.comm_s)},
          {"peak_rss_mb", peak_rss_mb()},
          {"n_params", kit::count_parameters(*model)},
          {"flops_per_token", flops_per_token(model, o.seq_len)},
          {"buckets", buckets ? buckets->num_buckets() : 0}};
}

// Starts 2 copies of this program (a rendezvous for dp) and merges what they report.
json run_processes(const Options& o, const std::vector<std::string>& argv) {
  const int world = 2;
  const auto dir = std::filesystem::temp_directory_path() / ("kit-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::unique_ptr<kit::RendezvousServer> server;
  if (o.config != "indep") server = std::make_unique<kit::RendezvousServer>(0);
  std::vector<kit::Process> procs;
  for (int r = 0; r < world; ++r) {
    kit::Command cmd;
    cmd.argv = argv;
    cmd.env = {{"KIT_BENCH_RANK", std::to_string(r)}, {"KIT_BENCH_OUT", (dir / ("rank" + std::to_string(r) + ".json")).string()}};
    if (server)
      cmd.env.insert(cmd.env.end(), {{"MASTER_ADDR", server->rendezvous().master_addr},
                                     {"MASTER_PORT", std::to_string(server->rendezvous().master_port)},
                                     {"KIT_STORE_HOSTED", "1"}});
    procs.emplace_back(cmd, r);
  }
  for (auto& p : procs) p.start();
  kit::join_all(procs);  // a failed rank stops the other and is named
  json merged = {{"peak_rss_mb", json::array()}}, ranks = json::array();
  double tokens = 0, slowest = 0, rate_sum = 0;
  for (int r = 0; r < world; ++r) {
    std::ifstream f(dir / ("rank" + std::to_string(r) + ".json"));
    if (!f) throw kit::Error("rank " + std::to_string(r) + " wrote no result");
    ranks.push_back(json::parse(f));
    const json& j = ranks.back();
    tokens += j["tokens"].get<double>();
    slowest = std::max(slowest, j["seconds"].get<double>());
    rate_sum += j["tokens"].get<double>() / j["seconds"].get<double>();
    merged["peak_rss_mb"].push_back(j["peak_rss_mb"]);
  }
  std::filesystem::remove_all(dir);
  // Independent processes each keep their own clock; ranks of one run share the slowest's.
  merged["tokens_per_s"] = o.config == "indep" ? rate_sum : tokens / slowest;
  for (const char* k : {"step_time_s", "step_time_min_s", "comm_time_s", "n_params", "flops_per_token", "buckets"})
    merged[k] = ranks[0][k];
  return merged;
}

json describe(const Options& o) {
  return {{"impl", "cpp"},          {"config", o.config},   {"preset", o.preset},
          {"ranks", multi_process(o.config) ? 2 : 1},       {"stages", stages_of(o.config)},
          {"threads", o.threads},   {"batch_size", o.batch_size}, {"seq_len", o.seq_len},
          {"chunks", o.config == "pp" ? o.chunks : 1},      {"steps", o.steps},
          {"warmup", o.warmup},     {"bucket_mb", o.config == "dp_bucketed" ? o.bucket_mb : 0.0},
          {"torch", TORCH_VERSION}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time one GPT-2 training configuration on synthetic batches and print the result as one JSON line "
               "(bench/run_bench.py runs them all against the Python baseline)."};
  Options o;
  bool gemm = false;
  app.add_flag("--gemm", gemm, "Print only this process's measured GEMM rate: {\"gemm_gflops\": ...}");
  app.add_option("--config", o.config, "single, indep, dp, dp_bucketed, mp or pp")
      ->check(CLI::IsMember({"single", "indep", "dp", "dp_bucketed", "mp", "pp"}))
      ->capture_default_str();
  app.add_option("--preset", o.preset, "Model preset (kit/config.h)")->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Rows per step and process")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op threads per process (and per stage)")->capture_default_str();
  app.add_option("--chunks", o.chunks, "Micro-batches per batch (pp)")->capture_default_str();
  app.add_option("--bucket-mb", o.bucket_mb, "Bucket size in MiB (dp_bucketed)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the weights and the batches")->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "Tokens per row")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--vocab", o.vocab, "Vocabulary size (the kit's SentencePiece default)")->check(CLI::PositiveNumber)->capture_default_str();
  return kit::guarded_main(argc, argv, app, [&] {
    if (gemm) {
      kit::set_threads(o.threads);
      std::cout << json{{"gemm_gflops", kit::measure_gemm_gflops(512, 2.0)}, {"threads", o.threads}, {"size", 512}}.dump()
                << std::endl;
      return 0;
    }
    kit::gpt2_preset(o.preset);  // an unknown preset fails here, before any process starts
    if (const char* r = std::getenv("KIT_BENCH_RANK")) {  // a worker started by run_processes
      const int rank = std::atoi(r);
      std::ofstream(std::getenv("KIT_BENCH_OUT")) << run_one(o, rank, 2).dump();
      return 0;
    }
    json result = describe(o);
    json measured = multi_process(o.config) ? run_processes(o, std::vector<std::string>(argv, argv + argc)) : run_one(o, 0, 1);
    if (!multi_process(o.config)) {
      measured["tokens_per_s"] = measured["tokens"].get<double>() / measured["seconds"].get<double>();
      measured["peak_rss_mb"] = json::array({measured["peak_rss_mb"]});
      measured.erase("tokens");
      measured.erase("seconds");
    }
    result.update(measured);
    std::cout << result.dump() << std::endl;
    return 0;
  });
}
