// The token-slice pipeline around the student's two steps (see terapipe/pipeline.h).
#include "terapipe/pipeline.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "kit/errors.h"
#include "kit/precision.h"
#include "terapipe/slicing.h"

namespace kit::terapipe {

torch::Tensor SlicedStageImpl::forward_slice(const torch::Tensor& input, int64_t offset, std::vector<KVCache>& caches) {
  if (static_cast<int64_t>(caches.size()) != num_blocks())
    throw Error("stage " + std::to_string(stage()) + " has " + std::to_string(num_blocks()) + " blocks but got " +
                std::to_string(caches.size()) + " caches: one per block");
  check_input(input);
  torch::Tensor x = input;
  if (is_first()) {
    if (offset < 0 || offset + x.size(1) > config().n_positions)
      throw Error("a slice at positions " + std::to_string(offset) + ".." + std::to_string(offset + x.size(1) - 1) +
                  " is outside the model's context (n_positions = " + std::to_string(config().n_positions) + ")");
    auto pos = torch::arange(offset, offset + x.size(1), torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    x = drop(wte(x) + wpe(pos));
  }
  for (size_t b = 0; b < h->size(); ++b) x = sliced_block(*h[b]->as<BlockImpl>(), x, caches[b]);
  if (is_last()) x = torch::nn::functional::linear(ln_f(x), wte->weight);  // tied to wte
  return x;
}

std::vector<SlicedStage> build_sliced_stages(const GPT2& full, const pp::PipelineShape& shape, int64_t rank) {
  pp::build_rank_chunks(full, shape, rank);  // its checks (blocks per stage, rank), with their messages
  std::vector<SlicedStage> stages;
  const auto like = full->parameters().front();
  for (int64_t c = 0; c < shape.virtual_chunks; ++c) {
    stages.emplace_back(full, pp::virtual_stage(shape, rank, c), shape.stages());
    stages.back()->to(like.device(), like.scalar_type());  // the full model's dtype (tests run float64)
  }
  return stages;
}

std::vector<pp::StageModule> as_stage_modules(const std::vector<SlicedStage>& stages) {
  std::vector<pp::StageModule> out;
  for (const auto& s : stages) out.emplace_back(std::static_pointer_cast<pp::StageModuleImpl>(s.ptr()));
  return out;
}

pp::RankSchedule make_sliced_schedule(const pp::PipelineShape& shape, int64_t slices, int64_t rank) {
  if (slices < 1 || shape.microbatches < 1 || shape.microbatches % slices != 0)
    throw Error("make_sliced_schedule: " + std::to_string(shape.microbatches) + " units are not whole micro-batches of " +
                std::to_string(slices) + " slices: the shape's microbatches must be m * n");
  if (shape.virtual_chunks < 1 || rank < 0 || rank >= shape.ranks)
    throw Error("make_sliced_schedule: rank " + std::to_string(rank) + " is outside 0.." +
                std::to_string(shape.ranks - 1) + ", or fewer than 1 stage per rank");
  return sliced_schedule(shape.microbatches / slices, slices, shape.virtual_chunks);
}

SlicedExecutor::SlicedExecutor(std::vector<SlicedStage> stages, const pp::PipelineShape& shape,
                               std::vector<int64_t> lengths, int64_t rank, pp::P2P& p2p)
    : stages_(std::move(stages)), shape_(shape), lengths_(std::move(lengths)), rank_(rank), p2p_(p2p) {
  if (static_cast<int64_t>(stages_.size()) != shape_.virtual_chunks)
    throw Error("SlicedExecutor: rank " + std::to_string(rank) + " got " + std::to_string(stages_.size()) +
                " stages for " + std::to_string(shape_.virtual_chunks) + " per rank");
  if (lengths_.empty() || shape_.microbatches % n() != 0)
    throw Error("SlicedExecutor: " + std::to_string(shape_.microbatches) + " units are not whole micro-batches of " +
                std::to_string(lengths_.size()) + " slices (" + to_string(lengths_) + ")");
  int64_t c = 0;
  for (const int64_t l : lengths_) {
    if (l < 1) throw Error("the slicing " + to_string(lengths_) + " has an empty slice: every slice needs a token");
    offsets_.push_back(c);
    c += l;
  }
}

namespace {
// Forgets the batch's micro-batches, kept tensors and contexts however run() ends.
template <class A, class B>
struct BatchScope {
  const std::vector<pp::MicroBatch>*& micro;
  A& kept;
  B& handed;
  ~BatchScope() {
    micro = nullptr;
    kept.clear();
    handed.clear();
  }
};
}  // namespace

pp::BatchResult SlicedExecutor::run(const pp::RankSchedule& schedule, const std::vector<pp::MicroBatch>& micro,
                                    const pp::OnAction& on_action) {
  const int64_t m = shape_.microbatches / n(), L = offsets_.back() + lengths_.back();
  if (static_cast<int64_t>(micro.size()) != m)
    throw Error("SlicedExecutor::run: " + std::to_string(micro.size()) + " micro-batches for m = " + std::to_string(m));
  for (const auto& mb : micro)
    if (mb.idx.dim() != 2 || mb.idx.size(1) != L)
      throw Error("the slicing " + to_string(lengths_) + " covers " + std::to_string(L) +
                  " tokens, but a micro-batch's sequence has " + std::to_string(mb.idx.dim() == 2 ? mb.idx.size(1) : 0) +
                  ": the slices must add up to the sequence length");
  if (!kept_.empty() || !handed_.empty()) throw Error("SlicedExecutor::run: something is left from an earlier batch");
  micro_ = &micro;
  BatchScope<decltype(kept_), decltype(handed_)> scope{micro_, kept_, handed_};
  loss_ = 0;
  pp::BatchResult result = pp::run_actions(
      schedule, shape_, rank_, p2p_,
      [this](const pp::Action& a) { a.op == pp::Op::Forward ? forward_slice(a) : backward_slice(a); },
      [this] { return kept_.size(); }, on_action, "unit", forward_);
  if (!kept_.empty()) {
    const auto& [u, c] = kept_.begin()->first;
    throw Error("rank " + std::to_string(rank_) + ": after the whole schedule " + std::to_string(kept_.size()) +
                " slice forward(s) are still kept, e.g. unit " + std::to_string(u) + " of chunk " + std::to_string(c) +
                ": each F needs its B, and backward_slice must take() what forward_slice kept");
  }
  p2p_.finish();
  result.loss = loss_;
  return result;
}

int64_t SlicedExecutor::offset_of(const pp::Action& a) const { return offsets_[static_cast<size_t>(slice_of(a))]; }
int64_t SlicedExecutor::length_of(const pp::Action& a) const { return lengths_[static_cast<size_t>(slice_of(a))]; }

SlicedStage& SlicedExecutor::stage(const pp::Action& a) {
  if (a.chunk < 0 || a.chunk >= static_cast<int64_t>(stages_.size()))
    throw Error("rank " + std::to_string(rank_) + " has stages 0.." + std::to_string(stages_.size() - 1) + " (chunks), not " +
                std::to_string(a.chunk));
  return stages_[static_cast<size_t>(a.chunk)];
}

const pp::MicroBatch& SlicedExecutor::microbatch(const pp::Action& a) const {
  if (!micro_) throw Error("SlicedExecutor: there is no batch outside run()");
  const int64_t i = a.microbatch / n();
  if (i < 0 || i >= static_cast<int64_t>(micro_->size()))
    throw Error("unit " + std::to_string(a.microbatch) + " is outside the batch's " + std::to_string(micro_->size()) +
                " micro-batches of " + std::to_string(n()) + " slices");
  return (*micro_)[static_cast<size_t>(i)];
}

torch::Tensor SlicedExecutor::tokens(const pp::Action& a) const {
  return microbatch(a).idx.narrow(1, offset_of(a), length_of(a));
}

std::vector<int64_t> SlicedExecutor::activation_shape(const pp::Action& a) const {
  return {microbatch(a).idx.size(0), length_of(a), stages_.front()->config().n_embd};
}

torch::Tensor SlicedExecutor::slice_loss(const pp::Action& a, const torch::Tensor& low_logits) const {
  const torch::Tensor logits = full_precision(low_logits);  // fp32 under bf16 autocast (train/loss.h)
  const pp::MicroBatch& mb = microbatch(a);
  const int64_t c = offset_of(a), l = length_of(a), V = logits.size(-1);
  auto token_loss = torch::nn::functional::cross_entropy(
      logits.reshape({-1, V}), mb.labels.narrow(1, c, l).reshape({-1}).to(logits.device()),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  auto mask = mb.mask.to(logits.device(), logits.scalar_type());
  // As masked_cross_entropy: each example's mean over all its counted tokens (not only the
  // slice's), then the mean over examples; so the slices' losses add up to the whole one.
  auto counted = mask.sum(1).clamp_min(1.0);
  auto per_example = (token_loss.view({-1, l}) * mask.narrow(1, c, l)).sum(1) / counted;
  return per_example.mean() * mb.weight;
}

void SlicedExecutor::add_loss(const torch::Tensor& scaled_loss) { loss_ += scaled_loss.detach().item<double>(); }

std::vector<KVCache> SlicedExecutor::context(const pp::Action& a) {
  const size_t blocks = static_cast<size_t>(stage(a)->num_blocks());
  if (slice_of(a) == 0) return std::vector<KVCache>(blocks);
  auto it = handed_.find({a.microbatch - 1, a.chunk});
  if (it == handed_.end())
    throw Error("rank " + std::to_string(rank_) + ": " + pp::to_string(a) + " (slice " + std::to_string(slice_of(a)) +
                ") has no context: slice " + std::to_string(slice_of(a) - 1) +
                " of the micro-batch must run forward on this stage first and hand_on its caches");
  return it->second;
}

void SlicedExecutor::hand_on(const pp::Action& a, const std::vector<KVCache>& caches) {
  std::vector<KVCache> next;
  for (const auto& kv : caches) {
    if (!kv.k.defined()) throw Error("hand_on: a block's cache is empty after the slice's forward");
    next.push_back({kv.k.detach().requires_grad_(true), kv.v.detach().requires_grad_(true)});
  }
  if (!handed_.emplace(std::make_pair(a.microbatch, a.chunk), std::move(next)).second)
    throw Error("rank " + std::to_string(rank_) + ": " + pp::to_string(a) + " handed on its caches twice");
}

std::vector<KVCache> SlicedExecutor::context_gradient(const pp::Action& a) {
  auto it = handed_.find({a.microbatch, a.chunk});
  if (it == handed_.end())
    throw Error("rank " + std::to_string(rank_) + ": " + pp::to_string(a) +
                " has no caches handed on: its forward_slice must call hand_on");
  std::vector<KVCache> grads;
  for (const auto& kv : it->second) grads.push_back({kv.k.grad(), kv.v.grad()});
  handed_.erase(it);
  return grads;
}

void SlicedExecutor::keep(const pp::Action& a, KeptSlice kept) {
  if (!kept.output.defined()) throw Error("keep() for " + pp::to_string(a) + " without an output tensor");
  if (!kept_.emplace(std::make_pair(a.microbatch, a.chunk), std::move(kept)).second)
    throw Error("rank " + std::to_string(rank_) + ": unit " + std::to_string(a.microbatch) + " of chunk " +
                std::to_string(a.chunk) + " is already kept: its forward ran twice without a backward in between");
}

KeptSlice SlicedExecutor::take(const pp::Action& a) {
  auto it = kept_.find({a.microbatch, a.chunk});
  if (it == kept_.end())
    throw Error("rank " + std::to_string(rank_) + ": " + pp::to_string(a) + " finds nothing kept for unit " +
                std::to_string(a.microbatch) + " of chunk " + std::to_string(a.chunk) +
                ": its forward has not run on this rank, or its backward already ran");
  KeptSlice k = std::move(it->second);
  kept_.erase(it);
  return k;
}

}  // namespace kit::terapipe
