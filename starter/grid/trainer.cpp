// Problem 6 (given code): GPT-2 trained on the 3D grid (see grid/trainer.h).
#include "grid/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "kit/errors.h"
#include "kit/precision.h"
#include "model/checkpoint.h"
#include "pipeline/model_parallel.h"
#include "pipeline_training/forward_backward.h"
#include "pipeline_training/p2p.h"
#include "pipeline_training/schedules.h"
#include "terapipe/pipeline.h"
#include "train/loss.h"
#include "zero/data_parallel_optimizer.h"

namespace kit::grid {

struct Trainer3D::Impl {
  pp::PipelineRank pipeline;  // this rank's chunks as Problem 3's stages, for forward_backward
  std::unique_ptr<pp::P2P> p2p;
  std::unique_ptr<pp::Executor> executor;
  std::unique_ptr<terapipe::SlicedExecutor> sliced;  // TeraPipe's, in place of executor
  std::unique_ptr<zero::DataParallelOptimizer> optimizer;  // over the data group
  bool optimizer_runs_forward = false;  // zero3: the optimizer's units are the model (no stages)
};

namespace {

// The gathering's tags: above every tag P2P uses for a pipeline this size, below kTiedTag.
constexpr int kGatherTag = std::numeric_limits<int>::max() / 2;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The virtual stage that holds a whole-model parameter (the tied lm_head.weight: none, -1).
int64_t stage_of_parameter(const std::string& name, const GPT2Config& cfg, int64_t stages) {
  if (name == "wte.weight" || name == "wpe.weight") return 0;
  if (name.rfind("ln_f.", 0) == 0) return stages - 1;
  if (name.rfind("h.", 0) != 0) return -1;
  const int64_t block = std::stoll(name.substr(2, name.find('.', 2) - 2));
  const auto counts = blocks_per_stage(cfg.n_layer, stages);
  for (int64_t s = 0, first = 0; s < stages; first += counts[static_cast<size_t>(s)], ++s)
    if (block < first + counts[static_cast<size_t>(s)]) return s;
  return -1;
}

// A chunk's parameters, whole, under the full model's names, on the CPU: a tensor-parallel
// stage gathers its shards (collective over its tensor group); Problem 3's stage holds them.
TensorDict whole_state_of(const pp::StageModule& chunk) {
  if (const auto tp = std::dynamic_pointer_cast<TensorParallelStageImpl>(chunk.ptr())) return tp->whole_state_dict();
  TensorDict out;
  for (const auto& [name, p] : chunk->named_model_parameters()) out.insert(name, p.detach().cpu());
  return out;
}

}  // namespace

Trainer3D::Trainer3D(const GPT2& full, const ProcessGrid& grid, Options3D options)
    : grid_(grid), options_(options), impl_(std::make_unique<Impl>()) {
  // bf16 with a ZeRO stage: the paper's mixed precision, the stages' parameters (so their
  // activations, messages and gradients) in bf16 and the fp32 master in the optimizer.
  const torch::ScalarType type =
      zero::master_weights(options.precision, options.optimizer) ? torch::kBFloat16 : full->wte->weight.scalar_type();
  shape_.ranks = grid.shape.pp;
  const int64_t slices = std::max<int64_t>(1, static_cast<int64_t>(options.slices.size()));
  shape_.microbatches = options.microbatches * slices;  // TeraPipe's units: (micro-batch, slice)
  shape_.virtual_chunks = options.virtual_chunks;
  impl_->p2p = std::make_unique<pp::P2P>(shape_, grid.coords.pp,
                                         torch::TensorOptions().dtype(type).device(dist::device()), grid.pipeline_ranks);
  GPT2 whole{nullptr};  // zero3's model, which Fsdp takes apart
  if (zero::zero_stage_of(options.optimizer) == 3)
    whole = whole_model(full, type);
  else if (!options.slices.empty())
    build_sliced_stages(full, type);
  else
    build_stages(full, type);
  impl_->pipeline = {chunks_, shape_, grid.coords.pp, &grid_.embedding};
  zero::ZeroOptions z;
  z.lr = options.lr;
  z.weight_decay = options.weight_decay;
  impl_->optimizer = zero::make_data_parallel_optimizer(options.optimizer, parameters(), whole, grid.data, z);
  impl_->optimizer_runs_forward = static_cast<bool>(whole);
}

// This rank's chunks as Problem 3's stages (t = 1) or tensor-parallel ones, the schedule's
// actions of its pipeline rank, Problem 3's Executor.
void Trainer3D::build_stages(const GPT2& full, torch::ScalarType type) {
  const GPT2Config& cfg = full->config();
  const Options3D& options = options_;
  if (options.schedules.empty()) pp::check_shape(options.schedule, shape_);  // a given schedule: its own
  pp::check_blocks_fit(cfg.n_layer, shape_);
  const bool one_stage = shape_.stages() == 1;  // data or tensor parallelism alone
  const pp::Schedules all =
      !options.schedules.empty() ? options.schedules
      : one_stage                ? pp::Schedules{pp::one_stage_schedule(options.schedule, shape_.microbatches)}
                                 : pp::make_schedule(options.schedule, shape_);
  if (static_cast<int64_t>(all.size()) != shape_.ranks)
    throw Error("the schedules have " + std::to_string(all.size()) + " ranks' actions for a pipeline of " +
                std::to_string(shape_.ranks) + " ranks");
  schedule_ = all[static_cast<size_t>(grid_.coords.pp)];
  for (int64_t c = 0; c < shape_.virtual_chunks; ++c) {
    const int64_t s = pp::virtual_stage(shape_, grid_.coords.pp, c);
    if (grid_.shape.tp == 1) {  // Problem 3's stage: copies of full's parameters, then the type
      pp::StageModule stage(full, s, shape_.stages());
      stage->to(dist::device(), type);
      chunks_.push_back(stage);
      continue;
    }
    TensorParallelStage stage(cfg, s, shape_.stages(), grid_.tensor);
    stage->to(dist::device(), type);  // before loading: float64 stays exact
    stage->load_full(*full);
    chunks_.emplace_back(std::static_pointer_cast<pp::StageModuleImpl>(stage.ptr()));
  }
  impl_->executor = std::make_unique<pp::Executor>(chunks_, shape_, grid_.coords.pp, *impl_->p2p);
  impl_->executor->set_precision(options.precision);
}

// TeraPipe: this rank's SlicedStages (Problem 3's stages that also run a token slice at a
// time), TeraPipe's schedule in GPipe's order over the m·n units, its SlicedExecutor.
void Trainer3D::build_sliced_stages(const GPT2& full, torch::ScalarType type) {
  if (grid_.shape.tp != 1)
    throw Error("TeraPipe's token slices run Problem 3's stages, which tensor parallelism splits: use --tp 1 with "
                "--slices");
  const int64_t n = static_cast<int64_t>(options_.slices.size());
  std::vector<terapipe::SlicedStage> stages = terapipe::build_sliced_stages(full, shape_, grid_.coords.pp);
  for (auto& s : stages) s->to(dist::device(), type);
  chunks_ = terapipe::as_stage_modules(stages);
  schedule_ = terapipe::make_sliced_schedule(shape_, n, grid_.coords.pp);
  impl_->sliced = std::make_unique<terapipe::SlicedExecutor>(stages, shape_, options_.slices, grid_.coords.pp,
                                                             *impl_->p2p);
  impl_->sliced->set_precision(options_.precision);
}

// zero3: FSDP shards whole GPT-2 units (the embeddings, each block) and runs their forward
// itself, so data parallelism alone, on a copy of `full` that Fsdp takes apart.
GPT2 Trainer3D::whole_model(const GPT2& full, torch::ScalarType type) const {
  if (grid_.shape.pp != 1 || grid_.shape.tp != 1 || options_.virtual_chunks != 1 || !options_.slices.empty())
    throw Error("zero3 (FSDP) gathers whole GPT-2 units, which the pipeline's stages, token slices and tensor ranks "
                "split: run it with --pp 1 --tp 1 (data parallelism alone), or use adamw, zero1 or zero2 on the grid");
  GPT2 model(full->config());
  load_state_dict(*model, state_dict(*full), CheckpointLayout::Kit, "the trainer's copy of the model");
  model->to(dist::device(), type);
  model->train(full->is_training());
  return model;
}

Trainer3D::~Trainer3D() = default;

std::vector<torch::Tensor> Trainer3D::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& c : chunks_)
    for (const auto& p : c->parameters()) out.push_back(p);
  return out;
}

const pp::P2P& Trainer3D::p2p() const { return *impl_->p2p; }
const zero::DataParallelOptimizer& Trainer3D::optimizer() const { return *impl_->optimizer; }

StepReport Trainer3D::step(const torch::Tensor& idx, const torch::Tensor& labels, const torch::Tensor& mask,
                           const StepHooks& hooks) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t d = grid_.shape.dp, rows = idx.size(0);
  if (rows % d != 0)
    throw Error("a batch of " + std::to_string(rows) + " rows does not split into " + std::to_string(d) +
                " equal data-parallel shares: use a --batch-size that is a multiple of d = " + std::to_string(d));
  pp::check_microbatches(rows / d, options_.microbatches, "each data-parallel replica's rows");
  grid_.data.reset_counters();
  grid_.tensor.reset_counters();
  grid_.embedding.reset_counters();
  const double recv_before = impl_->p2p->recv_seconds();
  const int64_t local = rows / d, first = grid_.coords.dp * local;
  auto device = dist::device();
  StepReport report;
  const auto schedule = [&](const std::vector<pp::MicroBatch>& micro) {
    if (hooks.before_schedule) hooks.before_schedule();
    pp::BatchResult r = impl_->sliced      ? impl_->sliced->run(schedule_, micro, hooks.before_action)
                        : shape_.stages() == 1 ? impl_->executor->run_one_stage(schedule_, micro, hooks.before_action)
                        : impl_->executor->run(schedule_, micro, hooks.before_action);
    if (hooks.after_schedule) hooks.after_schedule();
    return r;
  };
  const torch::Tensor my_idx = idx.narrow(0, first, local).to(device),
                      my_labels = labels.narrow(0, first, local).to(device),
                      my_mask = mask.narrow(0, first, local).to(device);
  report.batch = impl_->optimizer_runs_forward
                     ? whole_model_forward_backward(my_idx, my_labels, my_mask, hooks)
                     : pp::forward_backward(impl_->pipeline, schedule, my_idx, my_labels, my_mask,
                                            options_.microbatches, hooks.zero_in_place);
  if (hooks.after_backward) hooks.after_backward();
  impl_->optimizer->step();  // averages over the data group
  // The global loss: the last stage's tensor rank 0 of each replica adds its share.
  const bool reports = grid_.is_last_stage() && grid_.coords.tp == 0;
  torch::Tensor loss = torch::full({1}, reports ? report.batch.loss / static_cast<double>(d) : 0.0,
                                   torch::TensorOptions().dtype(torch::kDouble).device(device));
  dist::all_reduce(loss);
  report.loss = loss.item<double>();

  report.comm.data = grid_.data.counters().comm_seconds;
  report.comm.tensor = grid_.tensor.counters().comm_seconds;
  report.comm.embedding = grid_.embedding.counters().comm_seconds;
  report.comm.pipeline = impl_->p2p->recv_seconds() - recv_before;
  report.seconds = seconds_since(t0);
  return report;
}

// zero3: no stages and no schedule, the model's forward through the optimizer's units, one
// micro-batch after another (F0 B0 F1 B1 ..., what 1F1B is on one stage), the hooks around
// it as around a schedule's actions.
pp::BatchResult Trainer3D::whole_model_forward_backward(const torch::Tensor& idx, const torch::Tensor& labels,
                                                        const torch::Tensor& mask, const StepHooks& hooks) {
  zero::DataParallelOptimizer& optimizer = *impl_->optimizer;
  optimizer.zero_grad();
  const std::vector<pp::MicroBatch> micro = pp::split_batch(idx, labels, mask, options_.microbatches);
  pp::BatchResult result;
  if (hooks.before_schedule) hooks.before_schedule();
  size_t k = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(micro.size()); ++i) {
    const pp::MicroBatch& mb = micro[static_cast<size_t>(i)];
    if (hooks.before_action) hooks.before_action(k++, {pp::Op::Forward, i, 0});
    torch::Tensor loss;
    {
      torch::Tensor logits;  // gone before the backward, as a stage's are
      {
        const Autocast autocast(options_.precision, idx.device().type());  // bf16: the forward only
        logits = optimizer.forward(mb.idx);
      }
      loss = masked_cross_entropy(logits, mb.labels, mb.mask) * mb.weight;  // in fp32 (train/loss.h)
    }
    result.loss += loss.detach().item<double>();
    if (hooks.before_action) hooks.before_action(k++, {pp::Op::Backward, i, 0});
    loss.backward();
  }
  if (hooks.after_schedule) hooks.after_schedule();
  return result;
}

TensorDict Trainer3D::gather_state_dict() const {
  if (impl_->optimizer_runs_forward)
    throw Error("gather_state_dict: zero3's parameters are FSDP's shards; train_parallel --save takes adamw, zero1 "
                "or zero2");
  // Each stage whole on its tensor ranks (collective over each tensor group, chunk by chunk).
  std::vector<TensorDict> stages;
  for (const auto& c : chunks_) stages.push_back(whole_state_of(c));
  const GPT2Config& cfg = chunks_.front()->config();
  const int64_t S = shape_.stages();
  // Then the pipeline's stages to world rank 0, from the ranks at dp = 0, tp = 0, in the
  // order of the whole model's checkpoint entries (both sides know it from the config).
  const auto entries = checkpoint_entries(cfg);
  TensorDict out;
  if (grid_.coords.dp != 0 || grid_.coords.tp != 0) return out;
  const int me = dist::get_rank();
  const auto& pipeline = grid_.pipeline_ranks;
  int tag = kGatherTag;
  for (const auto& [name, sizes] : entries) {
    const int64_t s = stage_of_parameter(name, cfg, S);
    if (s < 0) continue;
    const int owner = pipeline[static_cast<size_t>(pp::rank_of_stage(shape_, s))];
    const auto& mine = stages[static_cast<size_t>(pp::chunk_of_stage(shape_, s))];
    if (me == 0 && owner == 0) {
      out.insert(name, mine.at(name).clone());
    } else if (me == 0) {  // messages travel on the rank's device (CUDA under NCCL)
      torch::Tensor t = torch::empty(sizes, stages.front().begin()->value().options().device(dist::device()));
      dist::recv(t, owner, tag);
      out.insert(name, t.cpu());
    } else if (me == owner) {
      dist::send(mine.at(name).to(dist::device()).contiguous(), 0, tag);
    }
    ++tag;
  }
  if (me == 0) out.insert("lm_head.weight", out.at("wte.weight"));  // tied, as kit::state_dict writes it
  return out;
}

}  // namespace kit::grid
