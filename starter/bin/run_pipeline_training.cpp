// run_pipeline_training: GPT-2 trained with pipeline parallelism across processes
// (Problem 3): each rank holds v chunks of the model, the batch is cut into m micro-batches,
// and every rank performs its schedule (GPipe, 1F1B or interleaved 1F1B) for each batch.
//
//   ./build/run_pipeline_training --world-size 4 --schedule 1f1b --chunks 8      # 4 Gloo processes
//   ./build/run_pipeline_training --stages 2 --schedule interleaved --virtual 2 --n-layer 4
//   srun -n 4 ./build/run_pipeline_training --backend nccl ...                    # one rank per task
//   torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set per process
//
// As in run_data_parallel, without RANK or an srun step in the environment the program is
// the launcher: it checks the flags and (unless --no-precheck) replays the schedule in the
// simulator, so a schedule that cannot finish is reported before any process waits; then
// it serves the rendezvous and starts p = --world-size copies of itself. Rank r is pipeline
// rank r. With --world-size 1 the one rank runs in the launcher's own process.
//
// Batches are synthetic and the same on every rank: torch::manual_seed(seed + 1000), then
// for each step torch::randint(vocab, {batch, seq_len + 1}) (int64), input = tokens[:, :-1],
// labels = tokens[:, 1:], mask all ones. Every rank builds the whole model from --seed
// (kit::build_model) and keeps its chunks; one AdamW step per batch over its chunks.
//
// Timing: the first --warmup of the --steps batches are not timed; tokens/s and
// "timed_step_seconds" are over the others. --memory counts the bytes of CPU tensors
// (kit/memory.h) and reports, per rank and over the timed batches (with --warmup 0 the
// first batch's gradient buffers count too), what a batch kept alive beyond what was held
// when it started: "peak_bytes" (the peak during the batch, transients included) and
// "kept_bytes" (the most held between two actions: the activations kept for backward and
// the messages still in flight). On CUDA these are "not measured".
//
// Outputs: --out metrics JSON per rank ({rank}, {world} replaced); --timeline this rank's
// measured timeline of the last batch (simulate.h's timeline_to_json format with only this
// rank's row filled, plus "rank", "memory" and "steps": every timed batch's actions as
// [op (0 = F, 1 = B), micro-batch, chunk, stage, start, end, recv] rows, start and end
// in seconds since "clock_origin", the batch's start on the machine's steady clock, which
// all processes of one machine share: add it to compare ranks); --trace this rank's timed batches
// as Chrome trace-event JSON for Perfetto (kit/trace.h, pipeline_training/trace_events.h: track
// tid = rank, F/B events with their P2P receives nested, ts on that same steady clock, so the
// ranks' files merge by concatenating their traceEvents); --save DIR (tests): DIR/rank<r>.pt, a torch::pickle_save
// dict with "grad/<name>" after the first batch (tied wte gradients already summed),
// "param/<name>" after --steps AdamW steps, "loss/step<k>" on the last stage's rank,
// "timeline" ((actions, 6) float64 rows op (0 = F, 1 = B), micro-batch, chunk, stage, start,
// end, seconds, of the first batch), "peak_kept", "rank", "world_size".
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "dist/dist.h"
#include "dist/launch.h"
#include "kit/memory.h"
#include "pipeline_training/executor.h"
#include "pipeline_training/p2p.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/simulate.h"
#include "pipeline_training/trace_events.h"
#include "pipeline_training/stage_model.h"
#include "project/cli.h"
#include "train/loop.h"

namespace {
namespace pp = kit::pp;

struct PpOptions {
  kit::RunOptions run;
  int world_size = 2;
  bool world_size_given = false;
  std::string schedule = "1f1b";
  int64_t microbatches = 4;  // --chunks M
  int64_t virtual_chunks = 1;
  int64_t n_layer = 0;       // 0: the preset's
  int64_t vocab = 1000;
  int64_t steps = 10;
  int64_t warmup = -1;  // -1: 1, or 0 when there is a single step
  bool memory = false;
  std::string backend = "gloo";
  int port = 0;
  std::string save, timeline, trace, schedule_file;
  bool precheck = true;
  int fail_rank = -1;
  int64_t fail_at_action = 0;
};


pp::PipelineShape shape_of(const PpOptions& o, int world_size) {
  return {world_size, o.microbatches, o.virtual_chunks};
}

kit::GPT2Config config_of(const PpOptions& o) {
  kit::GPT2Config cfg = kit::model_config(o.run);
  if (o.n_layer > 0) cfg.n_layer = o.n_layer;
  return cfg;
}

// {"schedules": [[{"op": "F", "microbatch": 0, "chunk": 0}, ...], ...]} or the bare list of lists.
pp::Schedules read_schedule_file(const std::string& path, int64_t ranks) {
  std::ifstream f(path);
  if (!f) throw kit::Error("--schedule-file " + path + " cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw kit::Error("--schedule-file " + path + " is not JSON: " + e.what());
  }
  if (j.is_object() && j.contains("schedules")) j = j["schedules"];
  if (!j.is_array() || static_cast<int64_t>(j.size()) != ranks)
    throw kit::Error("--schedule-file " + path + " must hold one list of actions per rank (" + std::to_string(ranks) +
                     " lists, as {\"schedules\": [[{\"op\": \"F\", \"microbatch\": 0, \"chunk\": 0}, ...], ...]})");
  pp::Schedules s;
  for (const auto& rank : j) {
    if (!rank.is_array()) throw kit::Error("--schedule-file " + path + ": each rank's schedule must be a list");
    pp::RankSchedule r;
    for (const auto& a : rank) r.push_back(pp::action_from_json(a));
    s.push_back(std::move(r));
  }
  return s;
}

// Every check that needs no process: the same in the launcher and in each worker (srun).
pp::Schedules checked_schedules(const PpOptions& o, int world_size) {
  const pp::PipelineShape shape = shape_of(o, world_size);
  if (world_size < 1) throw kit::Error("--world-size must be at least 1 (got " + std::to_string(world_size) + ")");
  if (o.steps < 1) throw kit::Error("--steps must be at least 1 (got " + std::to_string(o.steps) + ")");
  if (o.warmup >= o.steps || o.warmup < -1)
    throw kit::Error("--warmup " + std::to_string(o.warmup) + " must be at least 0 and below --steps " +
                     std::to_string(o.steps) + ": at least one batch must be timed");
  if (o.run.train.batch_size < 1 || o.run.data.seq_len < 1 || o.vocab < 2)
    throw kit::Error("--batch-size and --seq-len must be positive and --vocab-size at least 2");
  if (o.microbatches < 1 || o.run.train.batch_size % o.microbatches != 0)
    throw kit::Error("--chunks " + std::to_string(o.microbatches) + " (micro-batches) must divide --batch-size " +
                     std::to_string(o.run.train.batch_size) +
                     " into equal micro-batches: pick a divisor of the batch size, or change --batch-size");
  const pp::ScheduleKind kind = pp::parse_schedule_kind(o.schedule);
  if (kind != pp::ScheduleKind::Interleaved && o.virtual_chunks != 1)
    throw kit::Error("--virtual " + std::to_string(o.virtual_chunks) +
                     " needs --schedule interleaved (gpipe and 1f1b run one chunk per rank)");
  if (kind == pp::ScheduleKind::Interleaved && o.microbatches % world_size != 0)
    throw kit::Error("--schedule interleaved needs --chunks (micro-batches, " + std::to_string(o.microbatches) +
                     ") to be a multiple of the " + std::to_string(world_size) +
                     " ranks: its groups of p micro-batches go through each chunk in turn. Use --chunks " +
                     std::to_string(world_size) + ", " + std::to_string(2 * world_size) + ", ...");
  const int64_t L = config_of(o).n_layer;
  if (L < shape.stages())
    throw kit::Error("the model has " + std::to_string(L) + " transformer blocks but " + std::to_string(world_size) +
                     " ranks x " + std::to_string(o.virtual_chunks) + " chunks = " + std::to_string(shape.stages()) +
                     " virtual stages: every stage needs a block. Use --n-layer " + std::to_string(shape.stages()) +
                     " or more, or fewer stages");
  pp::Schedules schedules;
  if (!o.schedule_file.empty()) {
    schedules = read_schedule_file(o.schedule_file, world_size);
  } else {
    pp::check_shape(kind, shape);
    schedules = pp::make_schedule(kind, shape);
  }
  // A trace directory that does not exist fails here, before any batch runs.
  if (!o.trace.empty())
    for (int r = 0; r < world_size; ++r) kit::trace::check_trace_path(kit::rank_path(o.trace, r, world_size), "--trace");
  // A schedule that cannot finish becomes the simulator's message here, not a timeout later.
  if (o.precheck) pp::simulate(schedules, shape);
  if (o.backend == "nccl") pp::check_in_order_delivery(schedules, shape);
  return schedules;
}

struct Batch {
  torch::Tensor idx, labels, mask;
};

// The synthetic batches, identical on every rank (see the top of this file).
std::vector<Batch> synthetic_batches(const PpOptions& o) {
  torch::manual_seed(o.run.train.seed + 1000);
  std::vector<Batch> out;
  for (int64_t k = 0; k < o.steps; ++k) {
    auto t = torch::randint(o.vocab, {o.run.train.batch_size, o.run.data.seq_len + 1}, torch::kInt64);
    Batch b;
    b.idx = t.narrow(1, 0, o.run.data.seq_len).contiguous();
    b.labels = t.narrow(1, 1, o.run.data.seq_len).contiguous();
    b.mask = torch::ones({o.run.train.batch_size, o.run.data.seq_len});
    out.push_back(b);
  }
  return out;
}


void save_dict(const std::string& dir, int rank, const c10::Dict<std::string, torch::Tensor>& dict) {
  kit::write_file_atomically(dir + "/rank" + std::to_string(rank) + ".pt", torch::pickle_save(dict), "--save");
}

torch::Tensor timeline_tensor(const std::vector<pp::ActionTime>& t) {
  auto out = torch::zeros({static_cast<int64_t>(t.size()), 6}, torch::kFloat64);
  for (size_t k = 0; k < t.size(); ++k) {
    const auto& a = t[k];
    const double row[6] = {a.action.op == pp::Op::Forward ? 0.0 : 1.0, static_cast<double>(a.action.microbatch),
                           static_cast<double>(a.action.chunk), static_cast<double>(a.stage), a.start, a.end};
    for (int c = 0; c < 6; ++c) out[static_cast<int64_t>(k)][c] = row[c];
  }
  return out;
}

// One timed batch of this rank: its clock origin and one row per action.
nlohmann::json step_json(const pp::BatchResult& r, int64_t step) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& a : r.timeline)
    rows.push_back({a.action.op == pp::Op::Forward ? 0 : 1, a.action.microbatch, a.action.chunk, a.stage, a.start,
                    a.end, a.recv});
  return {{"step", step}, {"clock_origin", r.clock_origin}, {"actions", rows}};
}

// What one batch kept alive on this rank, in bytes beyond what was held when it started.
struct BatchMemory {
  int64_t peak = 0, kept = 0;
};

nlohmann::json memory_json(bool counted, const torch::Device& device, const BatchMemory& m) {
  if (!counted) return {{"measured", false}, {"why", "run without --memory"}};
  if (!device.is_cpu())
    return {{"measured", false},
            {"why", "not measured: kit::memory counts CPU tensors only, and this rank computes on " + device.str()}};
  return {{"measured", true}, {"peak_bytes", m.peak}, {"kept_bytes", m.kept}};
}

nlohmann::json timeline_json(const std::vector<pp::ActionTime>& t, const pp::PipelineShape& shape, int rank,
                             int64_t peak_kept) {
  pp::Timeline tl;
  tl.shape = shape;
  tl.ranks.resize(static_cast<size_t>(shape.ranks));
  tl.peak_in_flight.assign(static_cast<size_t>(shape.ranks), 0);
  tl.peak_in_flight[static_cast<size_t>(rank)] = peak_kept;
  double busy = 0;
  for (const auto& a : t) {
    tl.ranks[static_cast<size_t>(rank)].push_back({a.action, a.stage, a.start, a.end});
    tl.makespan = std::max(tl.makespan, a.end);
    busy += a.end - a.start;
  }
  tl.bubble_fraction = tl.makespan > 0 ? 1.0 - busy / tl.makespan : 0.0;  // this rank's idle share
  nlohmann::json j = pp::timeline_to_json(tl);
  j["rank"] = rank;
  j["measured"] = true;
  return j;
}

// This rank's timed batches as a Chrome trace: its own track only, so the ranks' files merge.
void write_trace(const PpOptions& o, int rank, int W, int64_t warmup, std::vector<kit::trace::Event> events) {
  kit::trace::Trace trace;
  trace.tracks.push_back({rank, "rank " + std::to_string(rank)});
  trace.events = std::move(events);
  trace.other = {{"program", "run_pipeline_training"}, {"schedule", o.schedule}, {"world", W}, {"rank", rank},
                 {"microbatches", o.microbatches},     {"virtual_chunks", o.virtual_chunks},
                 {"steps", o.steps},                   {"warmup", warmup},
                 {"clock", "steady clock (shared by the processes of one machine), microseconds since its epoch"}};
  kit::trace::write_chrome_trace(kit::rank_path(o.trace, rank, W), trace, "--trace");
}

int worker_main(const PpOptions& o, int rank, int W, const std::string& launcher) {
  const pp::Schedules schedules = checked_schedules(o, W);
  const pp::PipelineShape shape = shape_of(o, W);
  // Before any tensor: buffers allocated earlier are never counted.
  if (o.memory && (o.backend == "gloo" || W == 1)) kit::memory::enable_cpu_counting();
  if (W > 1) kit::dist::init_process_group(o.backend, rank, W);
  kit::set_threads(o.run.train.threads);
  const torch::Device device = W > 1 ? kit::dist::device() : torch::Device(torch::kCPU);

  const std::vector<Batch> batches = synthetic_batches(o);
  std::vector<pp::StageModule> chunks;
  {
    // The whole model from the seed on every rank (the same weights everywhere), then
    // only this rank's chunks are kept.
    auto full = kit::build_model(config_of(o), o.vocab, o.run.data.seq_len, o.run.train.seed);
    chunks = pp::build_rank_chunks(full, shape, rank);
  }
  std::vector<torch::Tensor> params;
  for (auto& c : chunks) {
    c->to(device);
    c->train();
    for (auto& p : c->parameters()) params.push_back(p);
  }
  torch::manual_seed(o.run.train.seed + 1 + static_cast<uint64_t>(rank));  // dropout: per rank
  torch::optim::AdamW optimizer(params,
                                torch::optim::AdamWOptions(o.run.train.lr).weight_decay(o.run.train.weight_decay));

  pp::P2P p2p(shape, rank, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  pp::Executor executor(chunks, shape, rank, p2p);
  const bool holds_loss = rank == pp::rank_of_stage(shape, shape.stages() - 1);
  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << launcher << ", " << o.backend << "): " << o.schedule << ", m = "
              << o.microbatches << ", v = " << o.virtual_chunks << ", " << shape.stages() << " virtual stages, "
              << config_of(o).n_layer << " blocks" << std::endl;

  std::function<void(size_t, const pp::Action&)> on_action;
  if (rank == o.fail_rank)
    on_action = [&](size_t k, const pp::Action& a) {
      if (static_cast<int64_t>(k) == o.fail_at_action)
        throw kit::Error("rank " + std::to_string(rank) + " fails on purpose before action " + std::to_string(k) +
                         " (" + pp::to_string(a) + ") (--fail-rank " + std::to_string(rank) + " --fail-at-action " +
                         std::to_string(o.fail_at_action) + ")");
    };

  c10::Dict<std::string, torch::Tensor> saved;
  std::vector<double> losses, step_seconds;
  std::vector<pp::ActionTime> last_timeline;
  nlohmann::json timed_steps = nlohmann::json::array();
  std::vector<kit::trace::Event> trace_events;  // --trace: every timed batch's
  int64_t peak_kept = 0;
  const int64_t warmup = o.warmup >= 0 ? o.warmup : std::min<int64_t>(1, o.steps - 1);
  BatchMemory memory;  // the largest over the batches
  const bool count_memory = o.memory && device.is_cpu();
  int64_t batch_base = 0;  // bytes held when the batch started
  // Sampled before each action, i.e. after the previous one: what the schedule keeps, not
  // the transients inside one forward or backward.
  auto sample_kept = [&] {
    memory.kept = std::max(memory.kept, kit::memory::cpu_bytes_now() - batch_base);
  };
  auto t_timed = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < o.steps; ++k) {
    if (k == warmup) t_timed = std::chrono::steady_clock::now();
    const auto t0 = std::chrono::steady_clock::now();
    // Counting memory: zero the gradients in place (what LibTorch 1.13's zero_grad() does;
    // 2.x frees them), so that re-allocating them is not counted as memory a batch keeps.
    if (count_memory)
      for (auto& p : params)
        if (p.grad().defined()) p.mutable_grad().zero_();
    if (!count_memory) optimizer.zero_grad();
    const Batch& b = batches[static_cast<size_t>(k)];
    const auto micro = pp::split_batch(b.idx.to(device), b.labels.to(device), b.mask.to(device), o.microbatches);
    std::function<void(size_t, const pp::Action&)> before = k == 0 ? on_action : nullptr;
    // Timed batches only: the first one also allocates the gradients.
    const bool measure = count_memory && k >= warmup;
    if (measure) {
      batch_base = kit::memory::cpu_bytes_now();
      kit::memory::reset_cpu_peak();
      before = [&, inner = before](size_t i, const pp::Action& a) {
        sample_kept();
        if (inner) inner(i, a);
      };
    }
    pp::BatchResult r = executor.run(schedules[static_cast<size_t>(rank)], micro, before);
    if (measure) memory.peak = std::max(memory.peak, kit::memory::cpu_bytes_peak() - batch_base);
    if (k >= warmup) timed_steps.push_back(step_json(r, k));
    if (k >= warmup && !o.trace.empty())
      for (auto& e : pp::measured_events(r, rank, {o.virtual_chunks, 1}, k)) trace_events.push_back(std::move(e));
    pp::sum_tied_gradients(chunks, shape, rank);
    if (k == 0 && !o.save.empty()) {
      for (const auto& c : chunks)
        for (const auto& [name, p] : c->named_model_parameters())
          saved.insert("grad/" + name, p.grad().defined() ? p.grad().detach().cpu().clone() : torch::zeros_like(p).cpu());
      saved.insert("timeline", timeline_tensor(r.timeline));
      saved.insert("peak_kept", torch::tensor(r.peak_kept));
    }
    optimizer.step();
    step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    losses.push_back(r.loss);
    if (holds_loss && !o.save.empty()) saved.insert("loss/step" + std::to_string(k), torch::tensor(r.loss, torch::kFloat64));
    if (holds_loss && o.run.train.progress)
      std::cout << "step " << k << "  loss " << r.loss << "  " << step_seconds.back() << " s" << std::endl;
    last_timeline = r.timeline;
    peak_kept = std::max(peak_kept, r.peak_kept);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_timed).count();

  if (!o.save.empty()) {
    for (const auto& c : chunks)
      for (const auto& [name, p] : c->named_model_parameters()) saved.insert("param/" + name, p.detach().cpu().clone());
    saved.insert("rank", torch::tensor(static_cast<int64_t>(rank)));
    saved.insert("world_size", torch::tensor(static_cast<int64_t>(W)));
    save_dict(o.save, rank, saved);
  }
  if (!o.timeline.empty()) {
    std::filesystem::path path(kit::rank_path(o.timeline, rank, W));
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    nlohmann::json j = timeline_json(last_timeline, shape, rank, peak_kept);
    j["memory"] = memory_json(o.memory, device, memory);
    j["steps"] = timed_steps;
    std::ofstream(path) << j.dump(1) << "\n";
  }
  if (!o.trace.empty()) write_trace(o, rank, W, warmup, std::move(trace_events));
  if (!o.run.out.empty()) {
    const int64_t tokens = (o.steps - warmup) * o.run.train.batch_size * o.run.data.seq_len;
    const std::vector<double> timed(step_seconds.begin() + warmup, step_seconds.end());
    nlohmann::json m = {{"program", "run_pipeline_training"}, {"schedule", o.schedule}, {"preset", o.run.preset},
                        {"n_layer", config_of(o).n_layer},    {"world_size", W},        {"rank", rank},
                        {"backend", o.backend},               {"launcher", launcher},   {"microbatches", o.microbatches},
                        {"virtual_chunks", o.virtual_chunks}, {"stages", shape.stages()},
                        {"batch_size", o.run.train.batch_size}, {"seq_len", o.run.data.seq_len},
                        {"steps", o.steps},                   {"lr", o.run.train.lr},   {"threads", o.run.train.threads},
                        {"step_seconds", step_seconds},       {"warmup", warmup},
                        {"timed_step_seconds", timed},        {"training_time", wall},
                        // Every token of the batch passes through every rank: do not sum over ranks.
                        // Timed steps only (after --warmup).
                        {"tokens_per_sec", wall > 0 ? static_cast<double>(tokens) / wall : 0.0},
                        {"peak_kept", peak_kept},             {"messages_sent", p2p.messages_sent()},
                        {"messages_received", p2p.messages_received()},
                        {"recv_seconds", p2p.recv_seconds()},
                        {"memory", memory_json(o.memory, device, memory)}};
    if (holds_loss) m["losses"] = losses;
    kit::write_rank_json(o.run.out, rank, W, m.dump(1));
  }
  if (W > 1) kit::dist::destroy_process_group();
  return 0;
}

int launcher_main(const PpOptions& o) {
  const int W = o.world_size;
  const pp::Schedules schedules = checked_schedules(o, W);  // bad flags and schedules fail here, fast
  (void)schedules;
  if (W == 1) return worker_main(o, 0, 1, "none");
  kit::serve_and_start_ranks(W, o.port, "pipeline ranks (" + o.backend + ", " + o.schedule + ")", nullptr);
  if (!o.save.empty()) std::cout << "saved " << W << " rank file(s) in " << o.save << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pipeline-parallel training of GPT-2 across processes: each rank holds its chunks of the model "
               "and performs a GPipe, 1F1B or interleaved 1F1B schedule over the micro-batches of each "
               "(synthetic) batch, then takes one AdamW step."};
  PpOptions o;
  o.run.preset = "cpu-small";
  o.run.train.batch_size = 8;
  o.run.data.seq_len = 64;
  o.run.out = "runs/pipeline_training/{world}/rank{rank}.json";
  std::string presets;
  for (const auto& n : kit::gpt2_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  app.add_option("--world-size,--world_size,--stages", o.world_size,
                 "Pipeline ranks p the kit starts (under srun or torchrun: taken from there)")
      ->capture_default_str();
  app.add_option("--schedule", o.schedule, "gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "pipedream-flush", "interleaved"}))
      ->capture_default_str();
  app.add_option("--chunks,--microbatches", o.microbatches,
                 "Micro-batches m per batch (must divide --batch-size; interleaved: a multiple of p)")
      ->capture_default_str();
  app.add_option("--virtual", o.virtual_chunks, "Model chunks v per rank (interleaved only; S = v * p stages)")
      ->capture_default_str();
  app.add_option("--preset,--model", o.run.preset, "Model preset: " + presets)->capture_default_str();
  app.add_option("--n-layer", o.n_layer, "Transformer blocks (default: the preset's); at least v * p");
  app.add_option("--dropout", o.run.dropout, "Dropout probability (default: the preset's)");
  app.add_option("--batch-size", o.run.train.batch_size, "Rows per batch (the whole pipeline's batch)")
      ->capture_default_str();
  app.add_option("--seq-len", o.run.data.seq_len, "Tokens per row")->capture_default_str();
  app.add_option("--vocab-size", o.vocab, "Vocabulary of the synthetic tokens")->capture_default_str();
  app.add_option("--steps", o.steps, "Batches, one AdamW step each")->capture_default_str();
  app.add_option("--warmup", o.warmup, "The first W of the --steps batches are not timed (default 1; 0 when "
                                       "--steps is 1)");
  app.add_flag("--memory", o.memory, "Count CPU tensor bytes (kit/memory.h) and report what each batch kept alive "
                                     "per rank (metrics and --timeline JSON)");
  kit::add_process_options(app, o.run, o.backend, o.port);
  app.add_option("--timeline", o.timeline, "Write this rank's measured timeline of the last batch as JSON here "
                                           "({rank} replaced, else .rank<r> added)");
  app.add_option("--trace", o.trace,
                 "Write this rank's timed batches as Chrome trace-event JSON here, for https://ui.perfetto.dev "
                 "or chrome://tracing ({rank} and {world} replaced, else .rank<r> added; the directory must "
                 "exist): F/B events with their P2P receives, one track per rank");
  app.add_option("--save", o.save, "Tests: write DIR/rank<r>.pt with gradients after the first batch, parameters "
                                   "after --steps steps, the losses and the timeline");
  app.add_option("--schedule-file", o.schedule_file,
                 "Run these per-rank action lists instead of the built schedule: JSON {\"schedules\": "
                 "[[{\"op\": \"F\", \"microbatch\": 0, \"chunk\": 0}, ...], ...]}");
  app.add_flag("!--no-precheck", o.precheck,
               "Do not replay the schedule in the simulator before running (a schedule that cannot finish "
               "then fails with a timeout, KIT_DIST_TIMEOUT)");
  app.add_flag("!--no-progress", o.run.train.progress, "Do not print the loss of every step");
  app.add_option("--fail-rank", o.fail_rank, "Tests: this rank throws before its --fail-at-action'th action")
      ->capture_default_str();
  app.add_option("--fail-at-action", o.fail_at_action, "Tests: see --fail-rank (index in the first batch)")
      ->capture_default_str();
  return kit::guarded_main(argc, argv, app, [&] {
    o.world_size_given = app.count("--world-size") > 0;
    return kit::launcher_or_worker(
        o.world_size_given ? o.world_size : 0, [&] { return launcher_main(o); },
        [&](const kit::WorldInfo& w) { return worker_main(o, w.rank, w.world_size, w.launcher_name()); });
  });
}
