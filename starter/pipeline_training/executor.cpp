// Performing a schedule on one rank (see pipeline_training/executor.h). The two steps
// themselves, forward_step and backward_step, are Problem 3.2 (pipeline_training/step.cpp).
#include "pipeline_training/executor.h"

#include <torch/torch.h>

#include <algorithm>

#include "kit/errors.h"

namespace kit::pp {

Executor::Executor(std::vector<StageModule> chunks, const PipelineShape& shape, int64_t rank, P2P& p2p)
    : chunks_(std::move(chunks)), shape_(shape), rank_(rank), p2p_(p2p) {
  if (static_cast<int64_t>(chunks_.size()) != shape_.virtual_chunks)
    throw Error("Executor: rank " + std::to_string(rank) + " got " + std::to_string(chunks_.size()) +
                " model chunks for a pipeline of " + std::to_string(shape_.virtual_chunks) + " chunks per rank");
  for (int64_t c = 0; c < shape_.virtual_chunks; ++c)
    if (chunks_[static_cast<size_t>(c)]->stage() != virtual_stage(shape_, rank_, c))
      throw Error("Executor: rank " + std::to_string(rank) + "'s chunk " + std::to_string(c) + " is stage " +
                  std::to_string(chunks_[static_cast<size_t>(c)]->stage()) + ", expected " +
                  std::to_string(virtual_stage(shape_, rank_, c)) + " (c * p + rank)");
}

namespace {
// Forgets the batch's micro-batches and kept tensors however run() ends.
struct BatchScope {
  const std::vector<MicroBatch>*& micro;
  std::map<std::pair<int64_t, int64_t>, Kept>& kept;
  ~BatchScope() {
    micro = nullptr;
    kept.clear();
  }
};
}  // namespace

BatchResult run_actions(const RankSchedule& schedule, const PipelineShape& shape, int64_t rank, P2P& p2p,
                        const std::function<void(const Action&)>& perform, const std::function<size_t()>& kept,
                        const OnAction& on_action, const std::string& unit, const ForwardPrecision& forward) {
  BatchResult result;
  const auto t0 = std::chrono::steady_clock::now();
  result.clock_origin = std::chrono::duration<double>(t0.time_since_epoch()).count();
  auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (size_t k = 0; k < schedule.size(); ++k) {
    const Action& a = schedule[k];
    if (a.chunk < 0 || a.chunk >= shape.virtual_chunks || a.microbatch < 0 || a.microbatch >= shape.microbatches)
      throw Error("rank " + std::to_string(rank) + ", action " + std::to_string(k) + " (" + to_string(a) + "): " +
                  unit + " must be in 0.." + std::to_string(shape.microbatches - 1) + " and chunk in 0.." +
                  std::to_string(shape.virtual_chunks - 1));
    if (on_action) on_action(k, a);
    ActionTime t;
    t.action = a;
    t.stage = virtual_stage(shape, rank, a.chunk);
    const double recv_before = p2p.recv_seconds();
    p2p.take_recv_spans();  // earlier receives are no action's
    t.start = since_start();
    if (a.op == Op::Forward) {
      const Autocast autocast(forward);
      perform(a);
    } else {
      perform(a);
    }
    t.end = since_start();
    t.recv = p2p.recv_seconds() - recv_before;
    for (const auto& [from, to] : p2p.take_recv_spans())
      t.recv_spans.emplace_back(from - result.clock_origin, to - result.clock_origin);
    result.timeline.push_back(t);
    result.peak_kept = std::max<int64_t>(result.peak_kept, static_cast<int64_t>(kept()));
  }
  return result;
}

ForwardPrecision forward_precision(Precision precision, const torch::nn::Module& module) {
  const auto params = module.parameters();
  return {precision, params.empty() ? c10::DeviceType::CPU : params.front().device().type()};
}

BatchResult Executor::run(const RankSchedule& schedule, const std::vector<MicroBatch>& micro,
                          const OnAction& on_action) {
  return run_with(schedule, micro, on_action,
                  [this](const Action& a) { a.op == Op::Forward ? forward_step(a) : backward_step(a); });
}

BatchResult Executor::run_one_stage(const RankSchedule& schedule, const std::vector<MicroBatch>& micro,
                                    const OnAction& on_action) {
  if (shape_.stages() != 1)
    throw Error("Executor::run_one_stage runs a pipeline of one stage, not of " + std::to_string(shape_.stages()) +
                ": use run");
  return run_with(schedule, micro, on_action, [this](const Action& a) {
    if (a.op == Op::Backward) return take(a).output.backward();
    const MicroBatch& mb = microbatch(a);
    torch::Tensor loss = chunk(a)->loss(chunk(a)->forward(mb.idx), mb);
    add_loss(loss);
    keep(a, {mb.idx, loss});
  });
}

BatchResult Executor::run_with(const RankSchedule& schedule, const std::vector<MicroBatch>& micro,
                               const OnAction& on_action, const std::function<void(const Action&)>& perform) {
  if (static_cast<int64_t>(micro.size()) != shape_.microbatches)
    throw Error("Executor::run: " + std::to_string(micro.size()) + " micro-batches for a pipeline of m = " +
                std::to_string(shape_.microbatches));
  if (!kept_.empty()) throw Error("Executor::run: something is still kept from an earlier batch");
  micro_ = &micro;
  BatchScope scope{micro_, kept_};
  loss_ = 0;
  peak_kept_ = 0;
  BatchResult result =
      run_actions(schedule, shape_, rank_, p2p_, perform, [this] { return kept_.size(); }, on_action, "micro-batch",
                  forward_);
  if (!kept_.empty()) {
    const auto& [i, c] = kept_.begin()->first;
    throw Error("rank " + std::to_string(rank_) + ": after the whole schedule " + std::to_string(kept_.size()) +
                " forward(s) are still kept, e.g. micro-batch " + std::to_string(i) + " of chunk " + std::to_string(c) +
                ": each F(i, c) needs its B(i, c), and backward_step must take() what forward_step kept");
  }
  p2p_.finish();  // every send delivered, no message to this rank itself left over
  result.loss = loss_;
  result.peak_kept = std::max(result.peak_kept, peak_kept_);
  return result;
}

StageModule& Executor::chunk(const Action& a) {
  if (a.chunk < 0 || a.chunk >= static_cast<int64_t>(chunks_.size()))
    throw Error("rank " + std::to_string(rank_) + " has chunks 0.." + std::to_string(chunks_.size() - 1) +
                ", not " + std::to_string(a.chunk));
  return chunks_[static_cast<size_t>(a.chunk)];
}

const MicroBatch& Executor::microbatch(const Action& a) const {
  if (!micro_) throw Error("Executor::microbatch called outside run(): there is no batch");
  if (a.microbatch < 0 || a.microbatch >= static_cast<int64_t>(micro_->size()))
    throw Error("micro-batch " + std::to_string(a.microbatch) + " is outside 0.." + std::to_string(micro_->size() - 1));
  return (*micro_)[static_cast<size_t>(a.microbatch)];
}

std::vector<int64_t> Executor::activation_shape(int64_t microbatch) const {
  if (!micro_) throw Error("Executor::activation_shape called outside run(): there is no batch");
  if (microbatch < 0 || microbatch >= static_cast<int64_t>(micro_->size()))
    throw Error("micro-batch " + std::to_string(microbatch) + " is outside 0.." + std::to_string(micro_->size() - 1));
  const auto& idx = (*micro_)[static_cast<size_t>(microbatch)].idx;
  return {idx.size(0), idx.size(1), chunks_.front()->config().n_embd};
}

void Executor::keep(const Action& a, Kept kept) {
  const auto key = std::make_pair(a.microbatch, a.chunk);
  if (kept_.count(key))
    throw Error("rank " + std::to_string(rank_) + ": micro-batch " + std::to_string(a.microbatch) + " of chunk " +
                std::to_string(a.chunk) + " is already kept: its forward ran twice without a backward in between");
  if (!kept.output.defined())
    throw Error("rank " + std::to_string(rank_) + ": keep() for " + to_string(a) + " without an output tensor");
  kept_.emplace(key, std::move(kept));
  peak_kept_ = std::max<int64_t>(peak_kept_, static_cast<int64_t>(kept_.size()));
}

Kept Executor::take(const Action& a) {
  auto it = kept_.find(std::make_pair(a.microbatch, a.chunk));
  if (it == kept_.end())
    throw Error("rank " + std::to_string(rank_) + ": " + to_string(a) + " finds nothing kept for micro-batch " +
                std::to_string(a.microbatch) + " of chunk " + std::to_string(a.chunk) +
                ": its forward has not run on this rank, or its backward already ran");
  Kept k = std::move(it->second);
  kept_.erase(it);
  return k;
}

void Executor::add_loss(const torch::Tensor& scaled_loss) { loss_ += scaled_loss.detach().item<double>(); }

}  // namespace kit::pp
