// The timed run of synthetic steps that the programs of Assignments 2 and 3 share
// (train_parallel): one rank's
// part of the run, from joining the process group to writing its metrics. Each program keeps
// its own step; kit::RankRun is what goes around it:
//
//   kit::RankRun run("run_x", o, world);           // joins the ranks, sets the threads
//   const auto batches = kit::synthetic_batches(o.steps, B, T, o.vocab, o.run.train.seed);
//   run.steps(batches, rank == 0, [&](int64_t k, const kit::TokenBatch& b) { ... the step ...; return loss; });
//   nlohmann::json m = run.metrics(B * T);         // the fields every program writes
//   m["x"] = ...;                                  // and the program's own
//   run.write(m);                                  // this rank's --out file; the group is left at the end
//
// tokens/s, as in project/loop.h: the tokens of the timed steps over their wall time.
#pragma once
#include <torch/optim/adamw.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/cli.h"
#include "kit/trace.h"

namespace kit {

// One synthetic batch: idx and labels (B, T) int64, mask (B, T) float ones.
struct TokenBatch {
  torch::Tensor idx, labels, mask;
};

// `steps` synthetic batches: torch::manual_seed(seed + 1000 + stream), then per step
// tokens = torch::randint(vocab, {batch_size, seq_len + 1}) (int64), idx = tokens[:, :-1]
// and labels = tokens[:, 1:] (both contiguous), mask all ones. stream: 0 for the batches
// every rank shares, another for a stream of its own. On the CPU.
std::vector<TokenBatch> synthetic_batches(int64_t steps, int64_t batch_size, int64_t seq_len, int64_t vocab,
                                          uint64_t seed, uint64_t stream = 0);

// --warmup's value: the flag when >= 0, else (-1, its default) 1, or 0 when there is a
// single step.
int64_t warmup_of(int64_t warmup_flag, int64_t steps);

// kit::Error unless --steps >= 1 ("--steps must be at least 1 (got S)") and -1 <= --warmup <
// --steps ("--warmup W must be at least 0 and below --steps S: at least one batch must be timed").
void check_steps(int64_t steps, int64_t warmup_flag);

// check_steps, then kit::Error unless --batch-size and --seq-len are positive, --vocab-size
// is at least 2 and --precision is fp32 or bf16: the checks every SyntheticOptions program
// makes before its own.
void check_synthetic_options(const SyntheticOptions& o);

// The preset with --dropout and --n-layer applied (model_config), and --vocab-size where the
// preset leaves the vocabulary open (as kit::build_model does).
GPT2Config synthetic_config(const SyntheticOptions& o);

// kit::Error when the synthetic tokens do not fit the model `cfg`: "--seq-len T is longer
// than preset '<name>' allows (n_positions = N)", "--vocab-size V is larger than preset
// '<name>''s N tokens".
void check_model_fits(const GPT2Config& cfg, int64_t seq_len, int64_t vocab);

// The seconds of every step, and the wall clock of the timed ones (from the start of step
// `warmup` to finish()).
class StepTimer {
 public:
  StepTimer(int64_t steps, int64_t warmup);
  // At the start of step k: its clock starts; at k == warmup the timed wall clock starts too.
  void start(int64_t k);
  // At the end of the step: records its seconds since start() and returns them.
  double stop();
  // Records a step's seconds measured elsewhere (instead of stop(); train_parallel: the trainer's).
  void record(double seconds);
  // After the last step: the timed wall clock stops.
  void finish();

  int64_t steps() const { return steps_; }
  int64_t warmup() const { return warmup_; }
  int64_t timed_steps() const { return steps_ - warmup_; }
  bool timed(int64_t k) const { return k >= warmup_; }
  const std::vector<double>& step_seconds() const { return seconds_; }
  std::vector<double> timed_step_seconds() const;  // those after the warm-up
  double training_time() const { return wall_; }   // the timed wall clock (after finish())
  // timed_steps() x tokens_per_step / training_time() (0 when no time passed).
  double tokens_per_sec(int64_t tokens_per_step) const;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t steps_, warmup_;
  Clock::time_point timed_start_, step_start_;
  std::vector<double> seconds_;
  double wall_ = 0;
};

// The progress line of one step: "step <k>  loss <loss>  <seconds> s".
void print_step(int64_t k, double loss, double seconds);

// v without its first `warmup` values (the timed steps' part of a per-step series).
std::vector<double> after_warmup(const std::vector<double>& v, int64_t warmup);

// The median (the mean of the two middle values for an even count; 0 for none).
double median(std::vector<double> v);

// The metrics every timed run reports: program, preset, world_size, rank, backend, precision,
// launcher (world.launcher_name()), batch_size (o.run.train.batch_size), seq_len, steps, warmup, lr,
// threads, step_seconds, timed_step_seconds, training_time, tokens_per_sec (timer's, with
// tokens_per_step). The program adds its own fields; one that names a field otherwise
// erases it.
nlohmann::json run_metrics(const std::string& program, const SyntheticOptions& o, const WorldInfo& world,
                           const StepTimer& timer, int64_t tokens_per_step);

// What one step gives the timed loop: the loss (on the ranks that hold it), and the step's
// seconds when the step measured them itself (train_parallel: the trainer's); negative: the clock's.
struct StepOutcome {
  double loss = 0;
  double seconds = -1;
  StepOutcome(double l, double s = -1) : loss(l), seconds(s) {}  // NOLINT: a loss alone converts
};

// One rank's part of a timed run (see the top). The constructor joins the process group (when
// `join`: a program whose one rank needs none passes false) and sets --threads; the destructor
// leaves the group (not while an exception unwinds: the error reaches guarded_main as it is).
// The program makes its batches itself, where its seeds want them (synthetic_batches seeds
// torch's generator).
class RankRun {
 public:
  RankRun(std::string program, const SyntheticOptions& o, const WorldInfo& world, bool join = true);
  ~RankRun();
  RankRun(const RankRun&) = delete;
  RankRun& operator=(const RankRun&) = delete;

  // Runs a step per batch: for each k, `before(k)` (resetting counters at the warm-up's end), the
  // clock starts, `step(k, batch k)` runs, the clock stops (or takes the step's own seconds),
  // `after(k)` (the diagnostics, untimed), the loss is kept and, when `prints`, the progress
  // line printed; after the last, the timed wall clock stops. Hooks may be empty.
  using Hook = std::function<void(int64_t k)>;
  void steps(const std::vector<TokenBatch>& batches, bool prints,
             const std::function<StepOutcome(int64_t k, const TokenBatch& b)>& step, const Hook& before = {},
             const Hook& after = {});

  const StepTimer& timer() const { return timer_; }
  const std::vector<double>& losses() const { return losses_; }
  int rank() const { return world_.rank; }
  int world_size() const { return world_.world_size; }
  const WorldInfo& world() const { return world_; }

  // run_metrics for this run (after steps()).
  nlohmann::json metrics(int64_t tokens_per_step) const;
  // This rank's metrics file at --out (nothing when --out is empty).
  void write(const nlohmann::json& metrics) const;

 private:
  std::string program_;
  const SyntheticOptions& o_;
  WorldInfo world_;
  bool joined_;
  StepTimer timer_;
  std::vector<double> losses_;
};

// --trace before any process starts: kit::Error when the directory of a rank's file
// (rank_path(pattern, r, world_size)) does not exist.
void check_trace_paths(const std::string& pattern, int world_size);

// This rank's timed steps as a Chrome trace (kit/trace.h) at rank_path(pattern, rank,
// world_size): one track (tid = rank) named `track`, and otherData `other` plus "world",
// "rank" and "clock" (the steady clock the processes of one machine share), so the ranks'
// files merge by concatenating their traceEvents.
void write_rank_trace(const std::string& pattern, int rank, int world_size, const std::string& track,
                      std::vector<trace::Event> events, nlohmann::json other);

}  // namespace kit
