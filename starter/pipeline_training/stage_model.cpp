// GPT-2 cut into pipeline stages (see pipeline_training/stage_model.h).
#include "pipeline_training/stage_model.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include "dist/dist.h"
#include "kit/errors.h"
#include "pipeline/model_parallel.h"
#include "pipeline_training/recompute.h"
#include "train/loss.h"

namespace kit::pp {

void check_microbatches(int64_t rows, int64_t microbatches, const std::string& what) {
  if (microbatches >= 1 && microbatches <= rows && rows % microbatches == 0) return;
  std::string ok;
  for (int64_t d = 1; d <= rows; ++d)
    if (rows % d == 0) ok += (ok.empty() ? "" : ", ") + std::to_string(d);
  throw Error("--chunks " + std::to_string(microbatches) + " micro-batches do not divide " + what + " of " +
              std::to_string(rows) + " rows into equal parts: use --chunks one of " + (ok.empty() ? "none" : ok) +
              ", or a --batch-size that makes it a multiple of " + std::to_string(std::max<int64_t>(microbatches, 1)));
}

std::vector<MicroBatch> split_batch(const torch::Tensor& idx, const torch::Tensor& labels, const torch::Tensor& mask,
                                    int64_t microbatches) {
  if (!idx.defined() || idx.dim() != 2)
    throw Error("split_batch: token ids must be a (batch, time) tensor");
  if (labels.sizes() != idx.sizes() || mask.sizes() != idx.sizes())
    throw Error("split_batch: token ids, labels and mask must have the same (batch, time) shape");
  const int64_t rows = idx.size(0);
  check_microbatches(rows, microbatches);
  const int64_t b = rows / microbatches;
  std::vector<MicroBatch> out;
  for (int64_t i = 0; i < microbatches; ++i) {
    MicroBatch mb;
    mb.idx = idx.narrow(0, i * b, b);
    mb.labels = labels.narrow(0, i * b, b);
    mb.mask = mask.narrow(0, i * b, b);
    mb.weight = static_cast<double>(b) / static_cast<double>(rows);
    out.push_back(std::move(mb));
  }
  return out;
}

namespace {

// The tied-gradient exchange's tag: above every tag P2P uses.
constexpr int kTiedTag = std::numeric_limits<int>::max();

// Copies `from`'s parameters and buffers into `to` (same module type, same names).
void copy_state(const torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto src = from.named_parameters();
  for (auto& p : to.named_parameters()) p.value().copy_(src[p.key()]);
  auto src_b = from.named_buffers();
  for (auto& b : to.named_buffers()) b.value().copy_(src_b[b.key()]);
}

}  // namespace

StageModuleImpl::StageModuleImpl(const GPT2Config& cfg, int64_t stage, int64_t n_stages)
    : stage_(stage), n_stages_(n_stages), cfg_(cfg) {
  if (stage < 0 || stage >= n_stages)
    throw Error("stage " + std::to_string(stage) + " is outside 0.." + std::to_string(n_stages - 1));
  const auto counts = blocks_per_stage(cfg.n_layer, n_stages);
  for (int64_t s = 0; s < stage; ++s) first_block_ += counts[static_cast<size_t>(s)];
  num_blocks_ = counts[static_cast<size_t>(stage)];
}

StageModuleImpl::StageModuleImpl(const GPT2& full, int64_t stage, int64_t n_stages)
    : StageModuleImpl(full->config(), stage, n_stages) {
  const int64_t C = cfg_.n_embd;
  // The first stage owns wte; the last one holds its own copy for the tied output projection.
  if (is_first() || is_last()) {
    wte = register_module("wte", torch::nn::Embedding(cfg_.vocab_size, C));
    copy_state(*full->wte, *wte);
  }
  if (is_first()) {
    wpe = register_module("wpe", torch::nn::Embedding(cfg_.n_positions, C));
    copy_state(*full->wpe, *wpe);
    drop = register_module("drop", torch::nn::Dropout(cfg_.dropout));
  }
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t b = 0; b < num_blocks_; ++b) {
    Block block(cfg_);
    copy_state(*full->h->ptr(static_cast<size_t>(first_block_ + b)), *block);
    h->push_back(block);
  }
  if (is_last()) {
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(cfg_.layer_norm_eps)));
    copy_state(*full->ln_f, *ln_f);
  }
}

void StageModuleImpl::check_input(const torch::Tensor& x) const {
  if (is_first()) {
    if (x.dim() != 2 || x.scalar_type() != torch::kLong)
      throw Error("stage 0 expects token ids as a (batch, time) int64 tensor");
    if (x.size(1) > cfg_.n_positions)
      throw Error("sequence of " + std::to_string(x.size(1)) +
                  " tokens is longer than the model's context (n_positions = " + std::to_string(cfg_.n_positions) +
                  "): use a shorter --seq-len");
    if (x.numel() > 0 && (x.min().item<int64_t>() < 0 || x.max().item<int64_t>() >= cfg_.vocab_size))
      throw Error("a token id is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
  } else if (x.dim() != 3 || x.size(2) != cfg_.n_embd) {
    throw Error("stage " + std::to_string(stage_) + " expects hidden states of shape (batch, time, " +
                std::to_string(cfg_.n_embd) + ")");
  }
}

torch::Tensor StageModuleImpl::forward(const torch::Tensor& input) {
  check_input(input);
  torch::Tensor x = input;
  if (is_first()) {
    auto pos = torch::arange(x.size(1), torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    x = drop(wte(x) + wpe(pos));
  }
  for (const auto& block : *h) {
    BlockImpl* b = block->as<BlockImpl>();
    x = run_block([b](const torch::Tensor& in) { return b->forward(in); }, x, recompute_);
  }
  if (is_last()) x = torch::nn::functional::linear(ln_f(x), wte->weight);  // tied to wte
  return x;
}

torch::Tensor StageModuleImpl::loss(const torch::Tensor& logits, const MicroBatch& mb) const {
  if (!is_last())
    throw Error("stage " + std::to_string(stage_) + " has no loss: only the last stage (" +
                std::to_string(n_stages_ - 1) + ") computes it");
  return masked_cross_entropy(logits, mb.labels, mb.mask) * mb.weight;
}

std::vector<std::pair<std::string, torch::Tensor>> StageModuleImpl::named_model_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : named_parameters()) out.emplace_back(model_name(p.key()), p.value());
  return out;
}

std::string StageModuleImpl::model_name(const std::string& name) const {
  if (name.rfind("h.", 0) != 0) return name;
  const size_t dot = name.find('.', 2);
  const int64_t local = std::stoll(name.substr(2, dot - 2));
  return "h." + std::to_string(first_block_ + local) + name.substr(dot);
}

torch::Tensor StageModuleImpl::tied_weight() const { return wte ? wte->weight : torch::Tensor(); }

void check_blocks_fit(int64_t n_layer, const PipelineShape& shape) {
  const int64_t S = shape.stages();
  if (n_layer < S)
    throw Error("the model has " + std::to_string(n_layer) + " transformer blocks but the pipeline has " +
                std::to_string(S) + " virtual stages (" + std::to_string(shape.ranks) + " ranks x " +
                std::to_string(shape.virtual_chunks) + " chunks): every stage needs at least one block. Use --n-layer " +
                std::to_string(S) + " (or more), or fewer stages / --virtual chunks");
}

std::vector<StageModule> build_rank_chunks(const GPT2& full, const PipelineShape& shape, int64_t rank) {
  const int64_t S = shape.stages();
  check_blocks_fit(static_cast<int64_t>(full->h->size()), shape);
  if (rank < 0 || rank >= shape.ranks)
    throw Error("rank " + std::to_string(rank) + " is outside 0.." + std::to_string(shape.ranks - 1));
  std::vector<StageModule> chunks;
  for (int64_t c = 0; c < shape.virtual_chunks; ++c) chunks.emplace_back(full, virtual_stage(shape, rank, c), S);
  return chunks;
}

void sum_tied_gradients(const std::vector<StageModule>& chunks, const PipelineShape& shape, int64_t rank,
                        const dist::Group* tied) {
  const int64_t S = shape.stages();
  if (S == 1) return;  // one module holds wte for both uses: autograd already summed
  const int64_t first_rank = rank_of_stage(shape, 0), last_rank = rank_of_stage(shape, S - 1);
  auto grad_of = [&](int64_t stage) -> torch::Tensor {
    const auto& chunk = chunks[static_cast<size_t>(chunk_of_stage(shape, stage))];
    torch::Tensor w = chunk->tied_weight();
    if (!w.defined()) throw Error("stage " + std::to_string(stage) + " holds no copy of wte");
    if (!w.grad().defined()) w.mutable_grad() = torch::zeros_like(w);  // e.g. no micro-batch ran
    return w.grad();
  };
  torch::NoGradGuard no_grad;
  if (first_rank == last_rank) {
    if (rank != first_rank) return;
    torch::Tensor a = grad_of(0), b = grad_of(S - 1);
    torch::Tensor sum = a + b;
    a.copy_(sum);
    b.copy_(sum);
    return;
  }
  // The other copy's holder, as the group names it (the tied group: 0 and 1).
  auto exchange = [&](const torch::Tensor& g, int64_t peer, bool send_first) {
    const int to = static_cast<int>(tied ? (peer == first_rank ? 0 : 1) : peer);
    torch::Tensor other = torch::empty_like(g);
    auto send = [&] { tied ? dist::send(g.contiguous(), to, kTiedTag, *tied) : dist::send(g.contiguous(), to, kTiedTag); };
    auto recv = [&] { tied ? dist::recv(other, to, kTiedTag, *tied) : dist::recv(other, to, kTiedTag); };
    if (send_first) {
      send();
      recv();
    } else {
      recv();
      send();
    }
    g.add_(other);
  };
  // The first stage's rank sends first and then receives, the last stage's the other way
  // round: the two never both wait in a send (Gloo) and the order is the same on both
  // sides (NCCL).
  if (rank == first_rank) exchange(grad_of(0), last_rank, true);
  if (rank == last_rank) exchange(grad_of(S - 1), first_rank, false);
}

}  // namespace kit::pp
