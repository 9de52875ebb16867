#include "app/run.h"

#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <iostream>

#include "dist/dist.h"
#include "kit/errors.h"
#include "kit/precision.h"
#include "kit/threads.h"

namespace kit {

std::vector<TokenBatch> synthetic_batches(int64_t steps, int64_t batch_size, int64_t seq_len, int64_t vocab,
                                          uint64_t seed, uint64_t stream) {
  torch::manual_seed(seed + 1000 + stream);
  std::vector<TokenBatch> out;
  for (int64_t k = 0; k < steps; ++k) {
    auto t = torch::randint(vocab, {batch_size, seq_len + 1}, torch::kInt64);
    out.push_back({t.narrow(1, 0, seq_len).contiguous(), t.narrow(1, 1, seq_len).contiguous(),
                   torch::ones({batch_size, seq_len})});
  }
  return out;
}

int64_t warmup_of(int64_t warmup_flag, int64_t steps) {
  return warmup_flag >= 0 ? warmup_flag : std::min<int64_t>(1, steps - 1);
}

void check_steps(int64_t steps, int64_t warmup_flag) {
  if (steps < 1) throw Error("--steps must be at least 1 (got " + std::to_string(steps) + ")");
  if (warmup_flag >= steps || warmup_flag < -1)
    throw Error("--warmup " + std::to_string(warmup_flag) + " must be at least 0 and below --steps " +
                std::to_string(steps) + ": at least one batch must be timed");
}

void check_synthetic_options(const SyntheticOptions& o) {
  check_steps(o.steps, o.warmup);
  if (o.run.train.batch_size < 1 || o.run.data.seq_len < 1 || o.vocab < 2)
    throw Error("--batch-size and --seq-len must be positive and --vocab-size at least 2 (got " +
                std::to_string(o.run.train.batch_size) + ", " + std::to_string(o.run.data.seq_len) + ", " +
                std::to_string(o.vocab) + ")");
  parse_precision(o.precision);
}

GPT2Config synthetic_config(const SyntheticOptions& o) {
  GPT2Config cfg = model_config(o.run);
  if (o.n_layer > 0) cfg.n_layer = o.n_layer;
  if (cfg.vocab_size <= 0) cfg.vocab_size = o.vocab;  // what build_model does
  return cfg;
}

void check_model_fits(const GPT2Config& cfg, int64_t seq_len, int64_t vocab) {
  if (seq_len > cfg.n_positions)
    throw Error("--seq-len " + std::to_string(seq_len) + " is longer than preset '" + cfg.name +
                "' allows (n_positions = " + std::to_string(cfg.n_positions) + ")");
  if (vocab > cfg.vocab_size)
    throw Error("--vocab-size " + std::to_string(vocab) + " is larger than preset '" + cfg.name + "''s " +
                std::to_string(cfg.vocab_size) + " tokens");
}

StepTimer::StepTimer(int64_t steps, int64_t warmup)
    : steps_(steps), warmup_(warmup), timed_start_(Clock::now()), step_start_(timed_start_) {}

void StepTimer::start(int64_t k) {
  if (k == warmup_) timed_start_ = Clock::now();
  step_start_ = Clock::now();
}

double StepTimer::stop() {
  record(std::chrono::duration<double>(Clock::now() - step_start_).count());
  return seconds_.back();
}

void StepTimer::record(double seconds) { seconds_.push_back(seconds); }

void StepTimer::finish() { wall_ = std::chrono::duration<double>(Clock::now() - timed_start_).count(); }

std::vector<double> StepTimer::timed_step_seconds() const { return after_warmup(seconds_, warmup_); }

double StepTimer::tokens_per_sec(int64_t tokens_per_step) const {
  return wall_ > 0 ? static_cast<double>(timed_steps() * tokens_per_step) / wall_ : 0.0;
}

void print_step(int64_t k, double loss, double seconds) {
  std::cout << "step " << k << "  loss " << loss << "  " << seconds << " s" << std::endl;
}

std::vector<double> after_warmup(const std::vector<double>& v, int64_t warmup) {
  return std::vector<double>(v.begin() + std::min<int64_t>(warmup, static_cast<int64_t>(v.size())), v.end());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

nlohmann::json run_metrics(const std::string& program, const SyntheticOptions& o, const WorldInfo& world,
                           const StepTimer& timer, int64_t tokens_per_step) {
  const RunOptions& run = o.run;
  return {{"program", program},
          {"preset", run.preset},
          {"world_size", world.world_size},
          {"rank", world.rank},
          {"backend", o.backend},
          {"precision", o.precision},
          {"launcher", world.launcher_name()},
          {"batch_size", run.train.batch_size},
          {"seq_len", run.data.seq_len},
          {"steps", timer.steps()},
          {"warmup", timer.warmup()},
          {"lr", run.train.lr},
          {"threads", run.train.threads},
          {"step_seconds", timer.step_seconds()},
          {"timed_step_seconds", timer.timed_step_seconds()},
          {"training_time", timer.training_time()},
          {"tokens_per_sec", timer.tokens_per_sec(tokens_per_step)}};
}


RankRun::RankRun(std::string program, const SyntheticOptions& o, const WorldInfo& world, bool join)
    : program_(std::move(program)), o_(o), world_(world), joined_(join),
      timer_(o.steps, warmup_of(o.warmup, o.steps)) {
  if (joined_) dist::init_process_group(o.backend, world.rank, world.world_size);
  set_threads(o.run.train.threads);
}

RankRun::~RankRun() {
  if (joined_ && std::uncaught_exceptions() == 0) dist::destroy_process_group();
}

void RankRun::steps(const std::vector<TokenBatch>& batches, bool prints,
                    const std::function<StepOutcome(int64_t, const TokenBatch&)>& step, const Hook& before,
                    const Hook& after) {
  if (static_cast<int64_t>(batches.size()) != timer_.steps())
    throw Error("RankRun::steps: " + std::to_string(batches.size()) + " batches for --steps " +
                std::to_string(timer_.steps()));
  for (int64_t k = 0; k < timer_.steps(); ++k) {
    if (before) before(k);
    timer_.start(k);
    const StepOutcome r = step(k, batches[static_cast<size_t>(k)]);
    double seconds;
    if (r.seconds >= 0) {
      timer_.record(r.seconds);
      seconds = r.seconds;
    } else {
      seconds = timer_.stop();
    }
    if (after) after(k);
    losses_.push_back(r.loss);
    if (prints && o_.run.train.progress) print_step(k, r.loss, seconds);
  }
  timer_.finish();
}

nlohmann::json RankRun::metrics(int64_t tokens_per_step) const {
  return run_metrics(program_, o_, world_, timer_, tokens_per_step);
}

void RankRun::write(const nlohmann::json& metrics) const {
  if (!o_.run.out.empty()) write_rank_json(o_.run.out, world_.rank, world_.world_size, metrics.dump(1));
}

void check_trace_paths(const std::string& pattern, int world_size) {
  for (int r = 0; r < world_size; ++r) trace::check_trace_path(rank_path(pattern, r, world_size), "--trace");
}

void write_rank_trace(const std::string& pattern, int rank, int world_size, const std::string& track,
                      std::vector<trace::Event> events, nlohmann::json other) {
  trace::Trace t;
  t.tracks.push_back({rank, track});
  t.events = std::move(events);
  t.other = std::move(other);
  t.other["world"] = world_size;
  t.other["rank"] = rank;
  t.other["clock"] = "steady clock (shared by the processes of one machine), microseconds since its epoch";
  trace::write_chrome_trace(rank_path(pattern, rank, world_size), t, "--trace");
}

}  // namespace kit
