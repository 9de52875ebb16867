// Given code for Problem 5.5 (see fsdp.h): the units, their flat layout and storage, the
// autograd function that gathers a unit, and the hooks. The gather, the reduce-scatter, the
// forward's gather and free points and the shard's step are fsdp_step.cpp's (the student's).
#include <torch/torch.h>

#include <algorithm>

#include "kit/compat.h"
#include "kit/errors.h"
#include "kit/memory.h"
#include "zero/fsdp.h"

namespace kit::zero {

namespace {

// What every gather must leave: the unit's memory, in the storage object the model's parameters
// (and the tensors autograd saved) are views of, and, where kit::memory counts, memory that it
// counted (a buffer of the code's own would hide the bytes the memory tests measure).
void check_gathered(const FsdpUnit& u) {
  if (!u.gathered())
    throw Error("Fsdp::gather(" + u.name + ") returned without the unit's memory: call u.allocate() first");
  if (u.full.storage().unsafeGetStorageImpl() != u.storage)
    throw Error("Fsdp::gather(" + u.name + ") gave u.full a new storage, which the model's parameters are no views of: "
                "call u.allocate() and fill u.full in place");
  if (u.counted && !memory::counts_cpu_buffer(u.full.storage().data()))
    throw Error("Fsdp::gather(" + u.name + ") gave the unit memory that kit::memory did not count: its memory must "
                "come from u.allocate()");
}

// A unit's gather as an autograd function: forward = Fsdp::gather, backward = Fsdp::reduce_scatter.
// Its output is one flat tensor of n*S elements; the parameters are views of it, so autograd
// sums every use of every parameter of the unit into one flat gradient before calling backward
// once: the moment the unit's gradients are complete, even for the tied table used twice.
struct GatherParams : public torch::autograd::Function<GatherParams> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& shard, Fsdp* fsdp,
                               FsdpUnit* unit) {
    ctx->saved_data["fsdp"] = reinterpret_cast<int64_t>(fsdp);
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    fsdp->gather(*unit);
    check_gathered(*unit);
    // A tensor of its own (its own version counter) on the unit's storage: gathering again later
    // writes through unit->full, which autograd must not take for a change of the saved views.
    return torch::empty({0}, unit->full.options()).set_(unit->full.storage(), 0, {unit->padded()}, {1});
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* fsdp = reinterpret_cast<Fsdp*>(ctx->saved_data["fsdp"].toInt());
    auto* unit = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    torch::Tensor grad = grads[0].defined() ? grads[0].contiguous() : torch::zeros({unit->padded()}, unit->full.options());
    torch::Tensor shard = fsdp->reduce_scatter(*unit, grad);
    const int64_t S = unit->range.size();
    if (!shard.defined() || shard.numel() != S)
      throw Error("Fsdp::reduce_scatter(" + unit->name + ") returned " +
                  (shard.defined() ? std::to_string(shard.numel()) + " elements" : std::string("no tensor")) +
                  "; the shard's gradient has S = " + std::to_string(S));
    return {shard.view({S}), torch::Tensor(), torch::Tensor()};
  }
};

using memory::bytes_of;

}  // namespace

bool FsdpUnit::gathered() const { return full.defined() && full.storage().nbytes() > 0; }

void FsdpUnit::allocate() {
  if (gathered()) return;
  c10::StorageImpl* s = full.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(bytes_of(full));
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

void FsdpUnit::free() {
  // The views in the module and the tensors autograd saved share this storage: they keep
  // their shapes, and hold no memory until allocate() gives the storage some again.
  c10::StorageImpl* s = full.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, full.device()));
  s->set_nbytes(0);
}

Fsdp::Fsdp(GPT2 model, dist::Group group, ZeroOptions options)
    : model_(std::move(model)), group_(std::move(group)), opt_(options) {
  build_units();
}

void Fsdp::build_units() {
  GPT2Impl& m = *model_;
  auto add_unit = [this](std::string name, std::vector<torch::Tensor*> slots) {
    units_.emplace_back();
    units_.back().name = std::move(name);
    units_.back().slots = std::move(slots);
  };
  add_unit("outer", {&m.wte->weight, &m.wpe->weight, &m.ln_f->weight, &m.ln_f->bias});
  for (size_t i = 0; i < m.h->size(); ++i) {
    auto& b = *m.h[i]->as<Block>();
    add_unit("h." + std::to_string(i),
             {&b.ln_1->weight, &b.ln_1->bias, &b.attn->c_attn->weight, &b.attn->c_attn->bias, &b.attn->c_proj->weight,
              &b.attn->c_proj->bias, &b.ln_2->weight, &b.ln_2->bias, &b.mlp->c_fc->weight, &b.mlp->c_fc->bias,
              &b.mlp->c_proj->weight, &b.mlp->c_proj->bias});
  }
  // Every parameter in exactly one unit: a model with parameters this list does not know
  // (another module's) would silently stay replicated.
  int64_t listed = 0;
  for (const auto& u : units_) listed += static_cast<int64_t>(u.slots.size());
  if (listed != static_cast<int64_t>(m.parameters().size()))
    throw Error("Fsdp knows " + std::to_string(listed) + " of the model's " + std::to_string(m.parameters().size()) +
                " parameters: it shards kit::GPT2 (biases and LayerNorm affine on) only");

  const int64_t n = group_.size(), r = group_.rank();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> shards;
  for (auto& u : units_) {
    for (torch::Tensor* slot : u.slots) {
      u.shapes.push_back(slot->sizes().vec());
      u.numels.push_back(slot->numel());
      u.numel += slot->numel();
    }
    u.range = shard_of(u.numel, r, n);
    const int64_t S = u.range.size();
    if (S * n < u.numel || u.range.begin != r * S)
      throw Error("shard_of(" + std::to_string(u.numel) + ", " + std::to_string(r) + ", " + std::to_string(n) +
                  ") = [" + std::to_string(u.range.begin) + ", " + std::to_string(u.range.end) +
                  "): not rank r's S = ceil(P/n) elements starting at r*S (Problem 5.2)");
    const torch::TensorOptions o = u.slots[0]->options().requires_grad(false);
    // This rank's shard, taken from its own full copy of the model (every rank built the same).
    std::vector<torch::Tensor> parts;
    for (torch::Tensor* slot : u.slots) parts.push_back(slot->detach().reshape({-1}));
    parts.push_back(torch::zeros({S * n - u.numel}, o));
    const torch::Tensor flat = torch::cat(parts);
    u.shard = flat.narrow(0, u.range.begin, S).clone().set_requires_grad(true);
    u.full = torch::empty({S * n}, o);
    u.storage = u.full.storage().unsafeGetStorageImpl();
    u.counted = memory::cpu_counting_enabled() && u.full.is_cpu();
    u.free();
    shards.push_back(u.shard);
  }
  // The model's own copies go: from now on its members are views of the units' full buffers.
  for (auto& p : m.parameters()) p.set_data(torch::empty({0}, p.options()));
  optimizer_ = ZeroAdamW::over_shards(shards, group_, opt_);
}

torch::Tensor Fsdp::forward(const torch::Tensor& idx) {
  regathered_.clear();
  torch::Tensor logits = forward_units(idx);
  if (!torch::GradMode::is_enabled() || !logits.requires_grad()) return logits;
  for (const auto& u : units_) {
    if (u.gathered()) continue;
    if (std::find(regathered_.begin(), regathered_.end(), &u) == regathered_.end())
      throw Error("Fsdp::forward freed unit " + u.name + " and nothing gathers it again before its backward, "
                  "which reads its parameters: register before_backward(output of " + u.name +
                  ", unit, Refill::kGather) on the tensor whose gradient arrives right before that backward");
  }
  return logits;
}

void Fsdp::use(FsdpUnit& u) {
  torch::Tensor flat = GatherParams::apply(u.shard, this, &u);
  std::vector<int64_t> sizes = u.numels;
  sizes.push_back(u.padded() - u.numel);  // the padding: a view nobody uses
  const auto parts = flat.split_with_sizes(sizes);
  for (size_t i = 0; i < u.slots.size(); ++i) *u.slots[i] = parts[i].view(u.shapes[i]);
}

const torch::Tensor& Fsdp::before_backward(const torch::Tensor& t, FsdpUnit& u, Refill what) {
  if (!t.requires_grad()) return t;  // no backward will come (NoGradGuard, evaluation)
  FsdpUnit* unit = &u;
  if (what == Refill::kGather) {
    regathered_.push_back(unit);
    t.register_hook([this, unit](const torch::Tensor&) {
      gather(*unit);
      check_gathered(*unit);
    });
  } else {
    t.register_hook([unit](const torch::Tensor&) { unit->free(); });
  }
  return t;
}

void Fsdp::zero_grad() {
  for (auto& u : units_)
    if (u.shard.grad().defined()) u.shard.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> Fsdp::full_parameters() {
  // Gathered with the dist layer's all_gather, not the student's ring: what a test reads back
  // does not depend on the code under test. Every rank must call it.
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  std::vector<std::pair<const torch::Tensor*, torch::Tensor>> by_slot;
  for (auto& u : units_) {
    const torch::Tensor flat = torch::cat(dist::all_gather(u.shard.detach(), group_));
    int64_t at = 0;
    for (size_t i = 0; i < u.slots.size(); ++i) {
      by_slot.emplace_back(u.slots[i], flat.narrow(0, at, u.numels[i]).view(u.shapes[i]).clone());
      at += u.numels[i];
    }
  }
  // In model->parameters() order: wte, wpe, h.0 ... h.{L-1}, ln_f.
  const GPT2Impl& m = *model_;
  std::vector<const torch::Tensor*> order = {&m.wte->weight, &m.wpe->weight};
  for (size_t i = 1; i < units_.size(); ++i)
    for (torch::Tensor* slot : units_[i].slots) order.push_back(slot);
  order.push_back(&m.ln_f->weight);
  order.push_back(&m.ln_f->bias);
  for (const torch::Tensor* slot : order)
    for (const auto& [s, t] : by_slot)
      if (s == slot) out.push_back(t);
  return out;
}

int64_t Fsdp::shard_bytes() const {
  int64_t b = 0;
  for (const auto& u : units_) b += bytes_of(u.shard);
  return b;
}

int64_t Fsdp::gathered_bytes() const {
  int64_t b = 0;
  for (const auto& u : units_)
    if (u.gathered()) b += bytes_of(u.full);
  return b;
}

int64_t Fsdp::expected_send_bytes() const {
  int64_t s = 0;
  for (const auto& u : units_) s += u.range.size();
  const int64_t element = units_.empty() ? 4 : static_cast<int64_t>(units_[0].shard.element_size());
  return 3 * (group_.size() - 1) * element * s;
}

}  // namespace kit::zero
