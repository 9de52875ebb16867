// run_pipeline_training: GPT-2 trained with pipeline parallelism across processes
// (Problem 3): each rank holds v chunks of the model, the batch is cut into m micro-batches,
// and every rank performs its schedule (GPipe, 1F1B or interleaved 1F1B) for each batch.
//
//   ./build/run_pipeline_training --world-size 4 --schedule 1f1b --chunks 8      # 4 Gloo processes
//   ./build/run_pipeline_training --stages 2 --schedule interleaved --virtual 2 --n-layer 4
//   srun -n 4 ./build/run_pipeline_training --backend nccl ...                    # one rank per task
//
// How it starts its ranks, its synthetic batches and every field it writes: README.md in
// this folder (run_pipeline_training); the options: --help.
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/run.h"
#include "dist/dist.h"
#include "kit/memory.h"
#include "kit/precision.h"
#include "model/gpt2.h"
#include "pipeline_training/forward_backward.h"
#include "pipeline_training/measured.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/simulate.h"
#include "pipeline_training/trace_events.h"
#include "train/adamw.h"

namespace {
namespace pp = kit::pp;

struct PpOptions : kit::SyntheticOptions {
  PpOptions() : SyntheticOptions("runs/pipeline_training/{world}/rank{rank}.json") {}
  int world_size = 2;
  std::string schedule = "1f1b";
  int64_t microbatches = 4;  // --chunks M
  int64_t virtual_chunks = 1;
  bool memory = false;
  bool recompute = false;  // Problem 6.3
  std::string save, timeline, trace, schedule_file;
  bool precheck = true;
  int fail_rank = -1;
  int64_t fail_at_action = 0;
};

// Every check that needs no process: the same in the launcher and in each worker (srun).
pp::Schedules checked_schedules(const PpOptions& o, int world_size) {
  const pp::PipelineShape shape{world_size, o.microbatches, o.virtual_chunks};
  if (world_size < 1) throw kit::Error("--world-size must be at least 1 (got " + std::to_string(world_size) + ")");
  kit::check_synthetic_options(o);
  pp::check_microbatches(o.run.train.batch_size, o.microbatches);
  const pp::ScheduleKind kind = pp::parse_schedule_kind(o.schedule);
  if (kind != pp::ScheduleKind::Interleaved && o.virtual_chunks != 1)
    throw kit::Error("--virtual " + std::to_string(o.virtual_chunks) +
                     " needs --schedule interleaved (gpipe and 1f1b run one chunk per rank)");
  if (kind == pp::ScheduleKind::Interleaved && o.microbatches % world_size != 0)
    throw kit::Error("--schedule interleaved needs --chunks (micro-batches, " + std::to_string(o.microbatches) +
                     ") to be a multiple of the " + std::to_string(world_size) +
                     " ranks: its groups of p micro-batches go through each chunk in turn. Use --chunks " +
                     std::to_string(world_size) + ", " + std::to_string(2 * world_size) + ", ...");
  pp::check_blocks_fit(kit::synthetic_config(o).n_layer, shape);
  pp::Schedules schedules;
  if (!o.schedule_file.empty()) {
    schedules = pp::read_schedules_file(o.schedule_file, world_size, "--schedule-file");
  } else {
    pp::check_shape(kind, shape);
    schedules = pp::make_schedule(kind, shape);
  }
  if (!o.trace.empty()) kit::check_trace_paths(o.trace, world_size);
  // A schedule that cannot finish becomes the simulator's message here, not a timeout later.
  if (o.precheck) pp::simulate(schedules, shape);
  if (o.backend == "nccl") pp::check_in_order_delivery(schedules, shape);
  return schedules;
}

// --fail-rank: this rank throws before its --fail-at-action'th action of the first batch.
pp::OnAction failure_of(const PpOptions& o, int rank) {
  if (rank != o.fail_rank) return {};
  return [&o, rank](size_t k, const pp::Action& a) {
    if (static_cast<int64_t>(k) == o.fail_at_action)
      throw kit::Error("rank " + std::to_string(rank) + " fails on purpose before action " + std::to_string(k) +
                       " (" + pp::to_string(a) + ") (--fail-rank " + std::to_string(rank) + " --fail-at-action " +
                       std::to_string(o.fail_at_action) + ")");
  };
}

int worker_main(const PpOptions& o, const kit::WorldInfo& world);
int launcher_main(const PpOptions& o);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pipeline-parallel training of GPT-2 across processes: each rank holds its chunks of the model "
               "and performs a GPipe, 1F1B or interleaved 1F1B schedule over the micro-batches of each "
               "(synthetic) batch, then takes one AdamW step."};
  PpOptions o;
  app.add_option("--world-size,--world_size,--stages", o.world_size,
                 "Pipeline ranks p the kit starts (under srun or torchrun: taken from there)")
      ->capture_default_str();
  app.add_option("--schedule", o.schedule, "gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "pipedream-flush", "interleaved"}))
      ->capture_default_str();
  kit::add_microbatches_option(app, o.microbatches,
                               "Micro-batches m per batch (must divide --batch-size; interleaved: a multiple of p)");
  app.add_option("--virtual", o.virtual_chunks, "Model chunks v per rank (interleaved only; S = v * p stages)")
      ->capture_default_str();
  kit::SyntheticHelp help;
  help.n_layer = "Transformer blocks (default: the preset's); at least v * p";
  help.batch_size = "Rows per batch (the whole pipeline's batch)";
  kit::add_model_options(app, o, help);
  app.add_flag("--memory", o.memory, "Count the tensor bytes on the rank's device, CPU or GPU (kit/memory.h), and report what each batch kept alive "
                                     "per rank (metrics and --timeline JSON)");
  app.add_flag("--recompute", o.recompute,
               "Activation recomputation (Problem 6.3): each stage keeps only its blocks' inputs and runs every "
               "block's forward again in the backward (about a third more compute, far less memory kept)");
  kit::add_process_options(app, o);
  app.add_option("--timeline", o.timeline, "Write this rank's measured timeline of the last batch as JSON here "
                                           "({rank} replaced, else .rank<r> added)");
  kit::add_trace_option(app, o.trace, "timed batches", "F/B events with their P2P receives, one track per rank");
  app.add_option("--save", o.save, "Tests: write DIR/rank<r>.pt with gradients after the first batch, parameters "
                                   "after --steps steps, the losses and the timeline");
  app.add_option("--schedule-file", o.schedule_file,
                 "Run these per-rank action lists instead of the built schedule: JSON {\"schedules\": "
                 "[[{\"op\": \"F\", \"microbatch\": 0, \"chunk\": 0}, ...], ...]}");
  app.add_flag("!--no-precheck", o.precheck,
               "Do not replay the schedule in the simulator before running (a schedule that cannot finish "
               "then fails with a timeout, KIT_DIST_TIMEOUT)");
  app.add_option("--fail-rank", o.fail_rank, "Tests: this rank throws before its --fail-at-action'th action")
      ->capture_default_str();
  app.add_option("--fail-at-action", o.fail_at_action, "Tests: see --fail-rank (index in the first batch)")
      ->capture_default_str();
  return kit::guarded_main(argc, argv, app, [&] {
    return kit::launcher_or_worker(
        app.count("--world-size") > 0 ? o.world_size : 0, [&] { return launcher_main(o); },
        [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}

namespace {

int worker_main(const PpOptions& o, const kit::WorldInfo& world) {
  const int rank = world.rank, W = world.world_size;
  const pp::Schedules schedules = checked_schedules(o, W);
  const pp::PipelineShape shape{W, o.microbatches, o.virtual_chunks};
  kit::RankRun run("run_pipeline_training", o, world, W > 1);  // one rank needs no process group
  const torch::Device device = W > 1 ? kit::dist::device() : torch::Device(torch::kCPU);
  // Before the model: CPU buffers allocated earlier are never counted (kit/memory.h).
  if (o.memory) kit::memory::enable_counting(device);
  const int64_t B = o.run.train.batch_size, T = o.run.data.seq_len;
  const auto batches = kit::synthetic_batches(o.steps, B, T, o.vocab, o.run.train.seed);

  // The whole model from the seed on every rank (the same weights everywhere); the rank
  // keeps only its chunks.
  pp::PipelineRank me{pp::build_rank_chunks(kit::build_model(kit::synthetic_config(o), o.vocab, T, o.run.train.seed), shape, rank),
                      shape, rank};
  std::vector<torch::Tensor> params;
  for (auto& c : me.chunks) {
    c->to(device);
    c->train();
    c->set_recompute(o.recompute);
    for (auto& p : c->parameters()) params.push_back(p);
  }
  torch::manual_seed(o.run.train.seed + 1 + static_cast<uint64_t>(rank));  // dropout: per rank
  kit::AdamW optimizer(params,
                                torch::optim::AdamWOptions(o.run.train.lr).weight_decay(o.run.train.weight_decay));
  pp::P2P p2p(shape, rank, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  pp::Executor executor(me.chunks, shape, rank, p2p);
  executor.set_precision(kit::parse_precision(o.precision));
  const bool holds_loss = rank == pp::rank_of_stage(shape, shape.stages() - 1);
  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << world.launcher_name() << ", " << o.backend << "): " << o.schedule
              << ", m = " << o.microbatches << ", v = " << o.virtual_chunks << ", " << shape.stages()
              << " virtual stages, " << kit::synthetic_config(o).n_layer << " blocks"
              << (o.recompute ? ", recomputing activations" : "") << std::endl;

  const kit::StepTimer& timer = run.timer();
  const bool count_memory = o.memory && kit::memory::why_not_counted(device).empty();
  pp::BatchMemory memory;  // the largest over the timed batches
  c10::Dict<std::string, torch::Tensor> saved;
  std::vector<pp::ActionTime> last_timeline;
  nlohmann::json timed_steps = nlohmann::json::array();
  std::vector<kit::trace::Event> trace_events;  // --trace: every timed batch's
  int64_t peak_kept = 0;
  pp::BatchResult r;
  run.steps(batches, holds_loss, [&](int64_t k, const kit::TokenBatch& b) {
    // The schedule on this rank; timed batches with --memory also count what it keeps:
    // sampled before each action, i.e. what the schedule keeps, not the transients inside
    // one forward or backward (the first timed batch also allocates the gradients).
    auto schedule = [&](const std::vector<pp::MicroBatch>& micro) {
      pp::OnAction before;
      if (k == 0) before = failure_of(o, rank);
      if (!count_memory || !timer.timed(k)) return executor.run(schedules[static_cast<size_t>(rank)], micro, before);
      const int64_t base = kit::memory::bytes_now(device);  // bytes held when the batch started
      kit::memory::reset_peak(device);
      pp::BatchResult result = executor.run(schedules[static_cast<size_t>(rank)], micro, [&](size_t i, const pp::Action& a) {
        memory.kept = std::max(memory.kept, kit::memory::bytes_now(device) - base);
        if (before) before(i, a);
      });
      memory.peak = std::max(memory.peak, kit::memory::bytes_peak(device) - base);
      return result;
    };
    // Counting memory, the gradients are zeroed in place, so that re-allocating them is not
    // counted as memory a batch keeps.
    r = pp::forward_backward(me, schedule, b.idx.to(device), b.labels.to(device), b.mask.to(device), o.microbatches,
                             count_memory);
    if (k == 0 && !o.save.empty()) {
      for (const auto& c : me.chunks)
        for (const auto& [name, p] : c->named_model_parameters())
          saved.insert("grad/" + name, p.grad().defined() ? p.grad().detach().cpu().clone() : torch::zeros_like(p).cpu());
      saved.insert("timeline", pp::timeline_tensor(r.timeline));
      saved.insert("peak_kept", torch::tensor(r.peak_kept));
    }
    optimizer.step();
    return r.loss;
  }, {}, [&](int64_t k) {
    if (timer.timed(k)) timed_steps.push_back(pp::step_json(r, k));
    if (timer.timed(k) && !o.trace.empty())
      for (auto& e : pp::measured_events(r, rank, {o.virtual_chunks, 1}, k)) trace_events.push_back(std::move(e));
    if (holds_loss && !o.save.empty()) saved.insert("loss/step" + std::to_string(k), torch::tensor(r.loss, torch::kFloat64));
    last_timeline = r.timeline;
    peak_kept = std::max(peak_kept, r.peak_kept);
  });

  if (!o.save.empty()) {
    for (const auto& c : me.chunks)
      for (const auto& [name, p] : c->named_model_parameters()) saved.insert("param/" + name, p.detach().cpu().clone());
    saved.insert("rank", torch::tensor(static_cast<int64_t>(rank)));
    saved.insert("world_size", torch::tensor(static_cast<int64_t>(W)));
    kit::write_file_atomically(o.save + "/rank" + std::to_string(rank) + ".pt", torch::pickle_save(saved), "--save");
  }
  if (!o.timeline.empty()) {
    nlohmann::json j = pp::rank_timeline_json(last_timeline, shape, rank, peak_kept);
    j["memory"] = pp::memory_json(o.memory, device, memory);
    j["steps"] = timed_steps;
    const std::string text = j.dump(1) + "\n";
    kit::write_file_atomically(kit::rank_path(o.timeline, rank, W), {text.begin(), text.end()}, "--timeline");
  }
  if (!o.trace.empty())
    kit::write_rank_trace(o.trace, rank, W, "rank " + std::to_string(rank), std::move(trace_events),
                          {{"program", "run_pipeline_training"}, {"schedule", o.schedule},
                           {"microbatches", o.microbatches}, {"virtual_chunks", o.virtual_chunks},
                           {"steps", o.steps}, {"warmup", timer.warmup()}});
  if (!o.run.out.empty()) {
    // Every token of the batch passes through every rank: tokens/s is not summed over ranks.
    nlohmann::json m = run.metrics(B * T);
    m.update({{"schedule", o.schedule}, {"n_layer", kit::synthetic_config(o).n_layer}, {"microbatches", o.microbatches},
              {"virtual_chunks", o.virtual_chunks}, {"stages", shape.stages()}, {"recompute", o.recompute},
              {"peak_kept", peak_kept},
              {"messages_sent", p2p.messages_sent()}, {"messages_received", p2p.messages_received()},
              {"recv_seconds", p2p.recv_seconds()}, {"memory", pp::memory_json(o.memory, device, memory)}});
    if (holds_loss) m["losses"] = run.losses();
    run.write(m);
  }
  return 0;
}

int launcher_main(const PpOptions& o) {
  const int W = o.world_size;
  checked_schedules(o, W);  // bad flags and schedules fail here, fast
  if (W == 1) return worker_main(o, kit::WorldInfo{});
  kit::serve_and_start_ranks(W, o.port, "pipeline ranks (" + o.backend + ", " + o.schedule + ")", nullptr);
  if (!o.save.empty()) std::cout << "saved " << W << " rank file(s) in " << o.save << std::endl;
  return 0;
}

}  // namespace
