// run_terapipe: GPT-2 trained as a K-stage pipeline whose micro-batches enter token slice by
// token slice (Problem 7, TeraPipe), one process per stage.
//
//   ./build/run_terapipe --profile runs/terapipe/latency.json --seq-len 256 --n-positions 256
//   ./build/run_terapipe --slices dp --latency runs/terapipe/latency.json --seq-len 256 --n-positions 256
//   ./build/run_terapipe --slices uniform:8 --seq-len 256 --n-positions 256
//   ./build/run_terapipe --slices none                   # GPipe: each micro-batch whole
//   ./build/run_terapipe --slices 32+32+24+16+16+8+...   # any slicing that adds up to --seq-len
//   srun -n 2 ./build/run_terapipe --slices dp --latency FILE    # one rank per task
//
// How it starts its ranks, its synthetic batches and every field it writes: README.md in
// this folder (run_terapipe); the options: --help.
#include <torch/torch.h>

#include <array>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/run.h"
#include "dist/dist.h"
#include "kit/precision.h"
#include "kit/threads.h"
#include "model/gpt2.h"
#include "pipeline/model_parallel.h"
#include "pipeline_training/forward_backward.h"
#include "pipeline_training/trace_events.h"
#include "terapipe/latency.h"
#include "terapipe/pipeline.h"
#include "terapipe/slicing.h"
#include "train/adamw.h"

namespace {
namespace pp = kit::pp;
namespace tp = kit::terapipe;

struct TeraOptions : kit::SyntheticOptions {
  TeraOptions() : SyntheticOptions("runs/terapipe/{world}/rank{rank}.json") {
    run.train.batch_size = 4;
    run.data.seq_len = 128;
    steps = 4;
  }
  int64_t stages = 2;
  int64_t microbatches = 1;
  std::string slices = "uniform:4";
  std::string latency;  // a --profile file
  std::string profile;  // write one here and exit
  std::string trace;    // --trace: a Chrome trace per rank
  bool print_slicing = false;  // print the slicing (and its predicted time) and exit
  int profile_repeats = 3;
  int64_t n_positions = 0;  // 0: the preset's
};

kit::GPT2Config config_of(const TeraOptions& o) {
  kit::GPT2Config cfg = kit::synthetic_config(o);
  if (o.n_positions > 0) cfg.n_positions = o.n_positions;
  cfg.vocab_size = o.vocab;
  return cfg;
}

std::vector<int64_t> slicing_of(const TeraOptions& o) {
  return tp::slicing_from_spec(o.slices, o.run.data.seq_len, o.stages, [&] {
    if (o.latency.empty())
      throw kit::Error("--slices dp needs a latency model: measure one with --profile FILE (same model and "
                       "--seq-len), then pass --latency FILE");
    return tp::read_latency_model(o.latency).latency();
  });
}

// The pipeline time the latency model predicts for the slicing: m * sum + (K - 1) * max.
double predicted_seconds(const TeraOptions& o, const std::vector<int64_t>& lengths, const tp::LatencyModel& latency) {
  const tp::Slicing s = tp::evaluate(lengths, o.run.data.seq_len, latency.latency());
  return static_cast<double>(o.microbatches) * s.sum + static_cast<double>(o.stages - 1) * s.max;
}

void check_options(const TeraOptions& o, int world_size) {
  if (o.stages < 1 || (world_size > 0 && world_size != o.stages))
    throw kit::Error("--stages " + std::to_string(o.stages) + " must be at least 1 and equal the number of processes (" +
                     std::to_string(world_size) + "): one stage per rank");
  kit::check_synthetic_options(o);
  const int64_t B = o.run.train.batch_size;
  pp::check_microbatches(B, o.microbatches);
  const kit::GPT2Config cfg = config_of(o);
  if (o.run.data.seq_len > cfg.n_positions)
    throw kit::Error("--seq-len " + std::to_string(o.run.data.seq_len) + " is longer than the model's context (" +
                     std::to_string(cfg.n_positions) + " positions): pass --n-positions " +
                     std::to_string(o.run.data.seq_len));
  if (!o.print_slicing) pp::check_blocks_fit(cfg.n_layer, {o.stages, 1, 1});
  if (o.profile.empty()) slicing_of(o);  // a bad --slices fails before any process starts
  if (!o.trace.empty()) kit::check_trace_paths(o.trace, static_cast<int>(o.stages));
}

int print_slicing_main(const TeraOptions& o);
int profile_main(const TeraOptions& o);
int worker_main(const TeraOptions& o, const kit::WorldInfo& world);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 trained as a pipeline of --stages processes whose micro-batches enter token slice by token "
               "slice (TeraPipe); --profile measures the stage latency t(l, c) the slicing program needs."};
  TeraOptions o;
  app.add_option("--stages", o.stages, "Pipeline stages K, one process each")->capture_default_str();
  app.add_option("--slices", o.slices, "none, uniform:N, dp (TeraPipe's program on --latency) or lengths a+b+c")
      ->capture_default_str();
  app.add_option("--latency", o.latency, "A latency model written by --profile (for --slices dp and predictions)");
  app.add_option("--profile", o.profile, "Measure t(l, c) of one stage in this process, fit it, write it here, exit");
  app.add_flag("--print-slicing", o.print_slicing,
               "Print the slicing --slices gives at --stages (and its predicted time with --latency) as JSON; exit");
  app.add_option("--profile-repeats", o.profile_repeats, "Timings per (l, c) in --profile (their median)")
      ->capture_default_str();
  kit::add_microbatches_option(app, o.microbatches, "Micro-batches m, each cut into the slices");
  kit::SyntheticHelp help;
  help.n_layer = "Transformer blocks (default: the preset's); at least --stages";
  help.batch_size = "Rows per batch (a multiple of --chunks)";
  help.seq_len = "Tokens per row: the L the slices add up to";
  kit::add_model_options(app, o, help);
  app.add_option("--n-positions", o.n_positions, "Context of the model (default: the preset's); at least --seq-len");
  kit::add_process_options(app, o);
  kit::add_trace_option(app, o.trace, "timed steps",
                        "one track per stage, F/B of each slice with their P2P receives");
  app.footer("Metrics per rank (--out): lengths, pipeline_seconds (measured), predicted_seconds (with --latency), "
             "step_seconds, tokens_per_sec, losses (last stage), timeline of the last step.");
  return kit::guarded_main(argc, argv, app, [&] {
    if (o.print_slicing) return print_slicing_main(o);
    if (!o.profile.empty()) return profile_main(o);
    const int W = static_cast<int>(o.stages);
    return kit::run_ranks(0, W, o.port, "pipeline stages", [&] { check_options(o, W); },
                          [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}

namespace {

int print_slicing_main(const TeraOptions& o) {
  check_options(o, 0);
  const std::vector<int64_t> lengths = slicing_of(o);
  nlohmann::json j = {{"stages", o.stages}, {"seq_len", o.run.data.seq_len}, {"slicing", o.slices}, {"lengths", lengths}};
  if (!o.latency.empty()) j["predicted_seconds"] = predicted_seconds(o, lengths, tp::read_latency_model(o.latency));
  std::cout << j.dump() << std::endl;
  return 0;
}

int profile_main(const TeraOptions& o) {
  check_options(o, 0);
  kit::set_threads(o.run.train.threads);
  const kit::GPT2Config cfg = config_of(o);
  kit::GPT2 model = kit::build_model(cfg, o.vocab, o.run.data.seq_len, o.run.train.seed);
  const int64_t L = o.run.data.seq_len, blocks = kit::blocks_per_stage(cfg.n_layer, o.stages).front();
  const int64_t rows = o.run.train.batch_size / o.microbatches;
  const tp::StageProfile profile = tp::profile_stage(*model, blocks, rows, L, o.profile_repeats);
  std::cout << profile.fit.to_string() << " over " << profile.samples.size() << " samples; fit error: rms "
            << 100 * profile.error.rms_relative << " %, max " << 100 * profile.error.max_relative << " %" << std::endl;
  const nlohmann::json j = tp::latency_file_json(
      profile, {{"program", "run_terapipe"}, {"preset", o.run.preset}, {"n_layer", cfg.n_layer}, {"n_embd", cfg.n_embd},
                {"n_head", cfg.n_head}, {"stages", o.stages}, {"blocks", blocks}, {"seq_len", L}, {"rows", rows},
                {"threads", o.run.train.threads}});
  const std::string text = j.dump(1) + "\n";
  kit::write_file_atomically(o.profile, std::vector<char>(text.begin(), text.end()), "--profile");
  std::cout << "wrote " << o.profile << std::endl;
  return 0;
}

int worker_main(const TeraOptions& o, const kit::WorldInfo& world) {
  const int rank = world.rank, W = world.world_size;
  check_options(o, W);
  kit::RankRun run("run_terapipe", o, world);
  const kit::GPT2Config cfg = config_of(o);
  const std::vector<int64_t> lengths = slicing_of(o);
  const int64_t n = static_cast<int64_t>(lengths.size()), m = o.microbatches, K = o.stages;
  const int64_t B = o.run.train.batch_size, T = o.run.data.seq_len;
  const pp::PipelineShape shape{K, m * n, 1};  // one unit per slice of a micro-batch
  // The whole model from the seed on every rank; the rank keeps its stage.
  const std::vector<tp::SlicedStage> stages =
      tp::build_sliced_stages(kit::build_model(cfg, o.vocab, T, o.run.train.seed), shape, rank);
  const pp::PipelineRank me{tp::as_stage_modules(stages), shape, rank};
  std::vector<torch::Tensor> params;
  for (const auto& s : stages)
    for (const auto& p : s->parameters()) params.push_back(p);
  kit::AdamW optimizer(params, torch::optim::AdamWOptions(o.run.train.lr).weight_decay(0.0));
  pp::P2P p2p(shape, rank, torch::TensorOptions().dtype(torch::kFloat32).device(kit::dist::device()));
  tp::SlicedExecutor executor(stages, shape, lengths, rank, p2p);
  executor.set_precision(kit::parse_precision(o.precision));
  const pp::RankSchedule schedule = tp::make_sliced_schedule(shape, n, rank);
  const tp::LatencyModel latency = o.latency.empty() ? tp::LatencyModel{} : tp::read_latency_model(o.latency);
  const double predicted = o.latency.empty() ? -1 : predicted_seconds(o, lengths, latency);
  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << world.launcher_name() << ", " << o.backend << "): " << K
              << " stages, m = " << m << ", slices " << tp::to_string(lengths)
              << (predicted >= 0 ? ", predicted " + std::to_string(predicted) + " s per batch" : "") << std::endl;

  const auto batches = kit::synthetic_batches(o.steps, B, T, o.vocab, o.run.train.seed);
  const kit::StepTimer& timer = run.timer();
  std::vector<double> pipeline_seconds;
  pp::BatchResult last;
  std::vector<kit::trace::Event> trace_events;  // --trace: every timed step's
  std::vector<std::array<std::vector<double>, 2>> unit_compute(static_cast<size_t>(m * n));
  run.steps(batches, rank == K - 1, [&](int64_t, const kit::TokenBatch& b) {
    last = pp::forward_backward(
        me, [&](const std::vector<pp::MicroBatch>& micro) { return executor.run(schedule, micro); }, b.idx, b.labels,
        b.mask, m);
    optimizer.step();
    return last.loss;
  }, {}, [&](int64_t k) {
    pipeline_seconds.push_back(last.timeline.empty() ? 0.0 : last.timeline.back().end);
    if (timer.timed(k) && !o.trace.empty())
      for (auto& e : pp::measured_events(last, rank, {1, n}, k)) trace_events.push_back(std::move(e));
    if (timer.timed(k))
      for (const auto& a : last.timeline)  // this stage's own t(l, c): the span less its receives
        unit_compute[static_cast<size_t>(a.action.microbatch)][a.action.op == pp::Op::Forward ? 0 : 1].push_back(
            a.end - a.start - a.recv);
  });

  if (!o.trace.empty())
    kit::write_rank_trace(o.trace, rank, W, "stage " + std::to_string(rank), std::move(trace_events),
                          {{"program", "run_terapipe"}, {"schedule", "gpipe, token slices"},
                           {"microbatches", o.microbatches}, {"slicing", o.slices}, {"lengths", lengths},
                           {"steps", o.steps}, {"warmup", timer.warmup()}});
  if (!o.run.out.empty()) {
    nlohmann::json timeline = nlohmann::json::array();
    for (const auto& a : last.timeline)
      timeline.push_back({a.action.op == pp::Op::Forward ? 0 : 1, a.action.microbatch, a.stage, a.start, a.end, a.recv});
    nlohmann::json units = nlohmann::json::array();
    for (auto& fb : unit_compute) units.push_back({kit::median(fb[0]), kit::median(fb[1])});
    nlohmann::json j = run.metrics(B * T);
    j.update({{"n_layer", cfg.n_layer}, {"n_embd", cfg.n_embd}, {"n_head", cfg.n_head},
              {"vocab_size", cfg.vocab_size}, {"stages", K}, {"microbatches", m}, {"slicing", o.slices},
              {"lengths", lengths}, {"pipeline_seconds", kit::after_warmup(pipeline_seconds, timer.warmup())},
              {"losses", rank == K - 1 ? nlohmann::json(run.losses()) : nlohmann::json()},
              {"predicted_seconds", predicted >= 0 ? nlohmann::json(predicted) : nlohmann::json()},
              {"latency_model", o.latency.empty() ? nlohmann::json() : tp::to_json(latency)},
              {"unit_compute_seconds", units}, {"timeline", timeline}});
    run.write(j);
  }
  return 0;
}

}  // namespace
