// perf_worker: one training configuration kept alive for the grader's speed gates
// (grader/perf_gates.py). The grader times it step by step from outside:
//
//   grader -> worker   "go <pair> <seed>\n"   run --steps steps on batches drawn from <seed>
//   worker -> grader   {"done": <pair>, "before": [...], "after": [...]}\n
//   grader -> worker   "quit\n"
//
// on the pipe pair named by KIT_PERF_CHANNEL="<read fd>:<write fd>". The grader's clock runs
// from writing "go" to reading "done", so nothing this process says about time is used.
// "before" and "after" are sketches of all parameters (8 fixed random projections) taken
// around the steps: the grader compares them with the reference configuration's, so a run
// that is fast because it skipped work earns nothing. The batches of a pair come from the
// seed sent with "go", so no step can be worked out ahead of time.
//
// Two programs are built from this file: perf_worker (linked with the kit, the student's
// code in it) and perf_worker_reference (linked with kit_reference: given code and the
// starter's stubs only). The reference configurations (single, mp) call no student function.
//
//   single  one process, the whole batch                        (reference of dp and 1f1b)
//   dp      2 processes, half the batch each, average_gradients  (Problem 1.2)
//   mp      2 stages, model parallel: one stage works at a time  (reference of pipe)
//   pipe    2 stages, the Pipe with --chunks micro-batches       (Problems 2.1-2.3)
//   1f1b    2 processes, one pipeline stage each, the 1F1B schedule over --chunks
//           micro-batches                                        (Problems 3.1-3.2)
//   --gemm  print this process's GEMM rate (the grader's two-process scaling bound)
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "data/dataset.h"
#include "dist/dist.h"
#include "dist/launch.h"
#include "kit/errors.h"
#include "kit/gemm.h"
#include "kit/threads.h"
#include "model/gpt2.h"
#include "pipeline/model_parallel.h"
#include "pipeline_training/executor.h"
#include "pipeline_training/p2p.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/stage_model.h"
#include "project/cli.h"
#include "project/run_data_parallel.h"
#include "train/loss.h"

namespace {

using nlohmann::json;
constexpr int kSketch = 8;  // random projections per sketch

struct Options {
  std::string config = "single", preset = "cpu-small";
  int64_t batch_size = 16, seq_len = 128, vocab = 1000, chunks = 4, steps = 3, warmup = 2;
  double lr = 0.01;
  uint64_t seed = 1;
};

namespace pp = kit::pp;

bool is_dp(const Options& o) { return o.config == "dp"; }
bool is_1f1b(const Options& o) { return o.config == "1f1b"; }
int world_of(const Options& o) { return is_dp(o) || is_1f1b(o) ? 2 : 1; }

// A batch of random tokens drawn from `seed`, the same in every configuration; a data-parallel
// rank keeps its block of rows (block `rank` of `world`).
kit::Batch batch_of(const Options& o, uint64_t seed, int rank, int world) {
  torch::manual_seed(seed);
  auto t = torch::randint(o.vocab, {o.batch_size, o.seq_len + 1}, torch::kInt64);
  const int64_t rows = o.batch_size / world;
  t = t.narrow(0, rank * rows, rows);
  kit::Batch b;
  b.input = t.narrow(1, 0, o.seq_len).contiguous();
  b.labels = t.narrow(1, 1, o.seq_len).contiguous();
  b.mask = torch::ones({rows, o.seq_len});
  return b;
}

// The pipe the grader talks through (inherited file descriptors).
struct Channel {
  FILE* in = nullptr;
  FILE* out = nullptr;
  static Channel from_env() {
    const char* v = std::getenv("KIT_PERF_CHANNEL");
    int r = -1, w = -1;
    if (!v || std::sscanf(v, "%d:%d", &r, &w) != 2)
      throw kit::Error("KIT_PERF_CHANNEL is not set: perf_worker is started by grader/perf_gates.py "
                       "(python3 grader/perf_gates.py --help), not by hand");
    Channel c{fdopen(r, "r"), fdopen(w, "w")};
    if (!c.in || !c.out) throw kit::Error("KIT_PERF_CHANNEL='" + std::string(v) + "' names no open pipe");
    return c;
  }
  void say(const json& j) {
    std::fputs((j.dump() + "\n").c_str(), out);
    std::fflush(out);
  }
  std::string hear() {
    char buf[256];
    if (!std::fgets(buf, sizeof buf, in)) return "quit";  // the grader went away
    return buf;
  }
};

// The sketch's projections: kSketch fixed random directions per parameter of the full model,
// by name, so that every configuration (whole model, or one pipeline stage per rank) sums the
// same projections of the same parameters.
std::map<std::string, torch::Tensor> projections_of(const kit::GPT2& model) {
  torch::manual_seed(0x5eed);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model->named_parameters()) out[p.key()] = torch::randn({p.value().numel(), kSketch}, torch::kFloat64);
  return out;
}

// Sketch of named parameters: the sum of their projections (float64, kSketch numbers).
torch::Tensor sketch_of(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                        const std::map<std::string, torch::Tensor>& projections) {
  torch::NoGradGuard g;
  auto acc = torch::zeros({kSketch}, torch::kFloat64);
  for (const auto& [name, p] : named) {
    auto it = projections.find(name);
    if (it == projections.end()) throw kit::Error("perf_worker: no projection for parameter " + name);
    acc += torch::matmul(p.detach().flatten().to(torch::kFloat64), it->second);
  }
  return acc;
}

class Worker {
 public:
  Worker(const Options& o, int rank, int world) : o_(o), rank_(rank), world_(world) {
    kit::GPT2Config cfg = kit::gpt2_preset(o.preset);
    cfg.dropout = 0;  // every configuration must compute the same function
    model_ = kit::build_model(cfg, o.vocab, o.seq_len, o.seed);
    projections_ = projections_of(model_);
    std::vector<torch::Tensor> params = model_->parameters();
    if (is_dp(o)) kit::dist::broadcast_parameters(*model_, 0);
    if (o.config == "mp" || o.config == "pipe") {
      mp_ = std::make_unique<kit::GPT2ModelParallel>(model_, kit::cpu_stages(2));
      if (o.config == "pipe") mp_->prepare_pipeline_parallel(o.batch_size / o.chunks, 1);  // Problem 2.3
    }
    if (is_1f1b(o)) {  // this rank's stage of a 2-stage pipeline (Problem 3)
      shape_ = pp::PipelineShape{world, o.chunks, 1};
      chunks_ = pp::build_rank_chunks(model_, shape_, rank);
      model_ = kit::GPT2{nullptr};  // the full model is not trained here
      params.clear();
      for (auto& c : chunks_) {
        c->train();
        for (auto& p : c->parameters()) params.push_back(p);
      }
      p2p_ = std::make_unique<pp::P2P>(shape_, rank, torch::TensorOptions().dtype(torch::kFloat32));
      executor_ = std::make_unique<pp::Executor>(chunks_, shape_, rank, *p2p_);
      schedule_ = pp::make_schedule(pp::ScheduleKind::OneFOneB, shape_)[static_cast<size_t>(rank)];  // Problem 3.1
    }
    opt_ = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr));
  }

  void step(uint64_t seed) {
    opt_->zero_grad();
    if (executor_) {
      const kit::Batch b = batch_of(o_, seed, 0, 1);  // every stage sees the whole batch's micro-batches
      executor_->run(schedule_, pp::split_batch(b.input, b.labels, b.mask, o_.chunks));  // Problem 3.2
      pp::sum_tied_gradients(chunks_, shape_, rank_);
    } else {
      const kit::Batch b = batch_of(o_, seed, rank_, is_dp(o_) ? world_ : 1);
      auto logits = mp_ ? mp_->forward(b.input) : model_->forward(b.input);
      kit::masked_cross_entropy(logits, b.labels, b.mask).backward();
      if (is_dp(o_)) kit::average_gradients(*model_);  // Problem 1.2
    }
    opt_->step();
  }

  void steps(uint64_t seed) {
    for (int64_t k = 0; k < o_.steps; ++k) step(seed * 1000003ULL + static_cast<uint64_t>(k));
  }

  // The whole model's sketch on rank 0. A pipeline rank sketches its own stage (the tied wte
  // copy of the last stage left out: it equals stage 0's) and the ranks' sketches are summed.
  std::vector<double> sketch() {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    if (executor_) {
      for (const auto& c : chunks_)
        for (auto& [name, p] : c->named_model_parameters())
          if (name != "wte.weight" || c->is_first()) named.emplace_back(name, p);
    } else {
      for (const auto& p : model_->named_parameters()) named.emplace_back(p.key(), p.value());
    }
    auto acc = sketch_of(named, projections_);
    if (executor_) kit::dist::all_reduce(acc);
    return std::vector<double>(acc.data_ptr<double>(), acc.data_ptr<double>() + kSketch);
  }

 private:
  Options o_;
  int rank_, world_;
  kit::GPT2 model_{nullptr};
  std::unique_ptr<kit::GPT2ModelParallel> mp_;
  pp::PipelineShape shape_{1, 1, 1};
  std::vector<pp::StageModule> chunks_;
  std::unique_ptr<pp::P2P> p2p_;
  std::unique_ptr<pp::Executor> executor_;
  pp::RankSchedule schedule_;
  std::unique_ptr<torch::optim::SGD> opt_;
  std::map<std::string, torch::Tensor> projections_;
};

// rank 0 hears the grader and passes each command on: {pair, seed}, pair -1 to quit.
std::pair<int64_t, uint64_t> next_command(Channel* ch) {
  auto cmd = torch::zeros({2}, torch::kInt64);
  if (ch) {
    long long pair = -1;
    unsigned long long seed = 0;
    if (std::sscanf(ch->hear().c_str(), "go %lld %llu", &pair, &seed) != 2) pair = -1;
    cmd[0] = static_cast<int64_t>(pair);
    cmd[1] = static_cast<int64_t>(seed & 0x7fffffffffffffffULL);
  }
  if (kit::dist::is_initialized()) kit::dist::broadcast(cmd, 0);
  return {cmd[0].item<int64_t>(), static_cast<uint64_t>(cmd[1].item<int64_t>())};
}

int run(const Options& o) {
  const char* r = std::getenv("KIT_PERF_RANK");
  const int world = world_of(o), rank = r ? std::atoi(r) : 0;
  kit::set_threads(1);
  std::unique_ptr<kit::RendezvousServer> server;
  std::vector<kit::Process> peers;
  if (world > 1) {
    if (rank == 0) {  // host the rendezvous and start rank 1 (it dies with this process)
      server = std::make_unique<kit::RendezvousServer>(0);
      kit::Command cmd;
      cmd.env = {{"KIT_PERF_RANK", "1"}, {"KIT_STORE_HOSTED", "1"},
                 {"MASTER_ADDR", server->rendezvous().master_addr},
                 {"MASTER_PORT", std::to_string(server->rendezvous().master_port)}};
      peers.emplace_back(cmd, 1);
      peers.back().start();
      setenv("KIT_STORE_HOSTED", "1", 1);
      kit::dist::init_process_group("gloo", 0, 2, server->rendezvous().master_addr, server->rendezvous().master_port);
    } else {
      kit::dist::init_process_group("gloo", rank, world);
    }
  }
  std::unique_ptr<Channel> ch;
  if (rank == 0) ch = std::make_unique<Channel>(Channel::from_env());
  Worker w(o, rank, world);
  for (int64_t k = 0; k < o.warmup; ++k) w.steps(o.seed + 7 + k);  // untimed: allocator, caches
  if (ch) ch->say({{"ready", true}});
  for (;;) {
    const auto [pair, seed] = next_command(ch.get());
    if (pair < 0) break;
    const auto before = w.sketch();
    w.steps(seed);
    const auto after = w.sketch();
    if (ch) ch->say({{"done", pair}, {"before", before}, {"after", after}});
  }
  if (kit::dist::is_initialized()) kit::dist::destroy_process_group();
  if (!peers.empty()) kit::join_all(peers);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One training configuration kept alive for the grader's speed gates; started by "
               "grader/perf_gates.py, which times it from outside (see the top of grader/perf/perf_worker.cpp)."};
  Options o;
  bool gemm = false;
  app.add_flag("--gemm", gemm, "Print only this process's GEMM rate on one thread: {\"gemm_gflops\": ...}");
  app.add_option("--config", o.config, "single, dp (2 ranks), mp or pipe (2 stages), 1f1b (2 ranks)")
      ->check(CLI::IsMember({"single", "dp", "mp", "pipe", "1f1b"}))->capture_default_str();
  app.add_option("--preset", o.preset, "Model preset (kit/config.h)")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Rows of the global batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "Tokens per row")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--vocab", o.vocab, "Vocabulary size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--chunks", o.chunks, "Micro-batches per batch (pipe, 1f1b)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", o.steps, "Steps per measurement")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the weights and the warm-up batches")->capture_default_str();
  return kit::guarded_main(argc, argv, app, [&] {
    if (gemm) {
      kit::set_threads(1);
      std::cout << json{{"gemm_gflops", kit::measure_gemm_gflops(512, 1.0)}}.dump() << std::endl;
      return 0;
    }
    kit::gpt2_preset(o.preset);  // an unknown preset fails here, before any process starts
    if (o.batch_size % 2 != 0 || o.batch_size % o.chunks != 0)
      throw kit::Error("--batch-size " + std::to_string(o.batch_size) + " must be even and a multiple of --chunks " +
                       std::to_string(o.chunks));
    return run(o);
  });
}
