// Given code for Problem 5.2: the flat layout, gradients in and out of it, and saving a
// rank's shard of the state. The step and the AdamW update are solution/zero/zero_step.cpp's.
#include <torch/torch.h>

#include <fstream>
#include <iterator>

#include "kit/errors.h"
#include "kit/memory.h"
#include "kit/precision.h"
#include "zero/zero.h"

namespace kit::zero {

ZeroAdamW::ZeroAdamW(std::vector<torch::Tensor> params, dist::Group group, ZeroOptions options)
    : params_(std::move(params)), group_(std::move(group)), opt_(options) {
  if (opt_.stage != 1 && opt_.stage != 2)
    throw Error("ZeRO stage " + std::to_string(opt_.stage) + " is not built here: use 1 (optimizer state sharded) "
                "or 2 (gradients too); stage 3 shards the parameters as well: kit::zero::Fsdp (zero/fsdp.h)");
  for (const auto& p : params_) numel_ += p.numel();
  const int64_t n = group_.size();
  shard_ = shard_of(numel_, group_.rank(), n);
  const int64_t S = shard_.size();
  if (S * n < numel_)
    throw Error("shard_of gives shards of " + std::to_string(S) + " elements, which cannot hold the " +
                std::to_string(numel_) + " parameters on " + std::to_string(n) + " ranks");
  lay_out_flat(S * n);
}

ZeroAdamW::ZeroAdamW(dist::Group group, ZeroOptions options) : group_(std::move(group)), opt_(options) {}

void ZeroAdamW::lay_out_flat(int64_t padded) {
  // One buffer for all parameters; each parameter becomes a view of its place in it.
  torch::NoGradGuard no_grad;
  const int64_t S = shard_.size();
  param_flat_ = torch::zeros({padded}, params_.empty() ? torch::TensorOptions() : params_[0].options());
  int64_t at = 0;
  for (auto& p : params_) {
    auto view = param_flat_.narrow(0, at, p.numel());
    view.copy_(p.detach().reshape({-1}));
    p.set_data(view.view(p.sizes()));
    at += p.numel();
  }
  // Mixed precision: the state in fp32, and an fp32 master of this rank's shard to update.
  const bool low = is_low_precision(param_flat_.scalar_type());
  const auto state = low ? param_flat_.options().dtype(torch::kFloat32) : param_flat_.options();
  if (low) master_ = param_flat_.narrow(0, shard_.begin, S).to(torch::kFloat32);  // a copy of its own
  exp_avg_ = torch::zeros({S}, state);
  exp_avg_sq_ = torch::zeros({S}, state);
}

std::unique_ptr<ZeroAdamW> ZeroAdamW::over_shards(std::vector<torch::Tensor> shards, dist::Group group,
                                                  ZeroOptions options) {
  options.stage = 1;
  std::unique_ptr<ZeroAdamW> z(new ZeroAdamW(std::move(group), options));
  z->params_ = std::move(shards);
  for (const auto& p : z->params_) z->numel_ += p.numel();
  z->shard_ = {0, z->numel_};  // this rank's shard is all it holds
  z->lay_out_flat(z->numel_);
  return z;
}

void ZeroAdamW::zero_grad() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
}

void ZeroAdamW::pack_gradients() {
  grad_flat_ = torch::zeros_like(param_flat_);
  int64_t at = 0;
  for (auto& p : params_) {
    if (p.grad().defined()) grad_flat_.narrow(0, at, p.numel()).copy_(p.grad().reshape({-1}));
    at += p.numel();
  }
  // The gradients now live in the flat buffer only.
  if (opt_.stage >= 2) zero_grad();
}

int64_t ZeroAdamW::state_bytes() const {
  return memory::bytes_of(exp_avg_) + memory::bytes_of(exp_avg_sq_) + memory::bytes_of(master_);
}

int64_t ZeroAdamW::gradient_bytes() const {
  int64_t held = memory::bytes_of(grad_flat_) + memory::bytes_of(grad_shard_);
  for (const auto& p : params_) held += memory::bytes_of(p.grad());
  return held;
}

void ZeroAdamW::save(const std::string& path) const {
  c10::Dict<std::string, torch::Tensor> d;
  d.insert("exp_avg", exp_avg_.cpu());
  d.insert("exp_avg_sq", exp_avg_sq_.cpu());
  if (master_.defined()) d.insert("master", master_.cpu());
  d.insert("step", torch::tensor(step_));
  d.insert("layout", torch::tensor({numel_, static_cast<int64_t>(group_.size()), static_cast<int64_t>(group_.rank()), shard_.begin,
                                    shard_.end}));
  const auto bytes = torch::pickle_save(d);
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw Error("cannot write the ZeRO state to " + path);
}

void ZeroAdamW::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read the ZeRO state " + path + ": no such file");
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto d = torch::pickle_load(bytes).toGenericDict();
  const auto layout = d.at("layout").toTensor();
  const int64_t saved_numel = layout[0].item<int64_t>(), saved_n = layout[1].item<int64_t>();
  if (saved_numel != numel_)
    throw Error(path + " holds the ZeRO state of " + std::to_string(saved_numel) + " parameters, but this optimizer has " +
                std::to_string(numel_) + ": it was saved for another model");
  if (saved_n != group_.size())
    throw Error(path + " was saved by rank " + std::to_string(layout[2].item<int64_t>()) + " of " +
                std::to_string(saved_n) + " ranks; this run has " + std::to_string(group_.size()) +
                ". ZeRO's state is sharded by world size and resharding it is not supported: resume with " +
                std::to_string(saved_n) + " ranks");
  if (layout[2].item<int64_t>() != group_.rank())
    throw Error(path + " is rank " + std::to_string(layout[2].item<int64_t>()) + "'s shard; this is rank " +
                std::to_string(group_.rank()) + ": give each rank its own file");
  if (master_.defined() != d.contains("master"))
    throw Error(path + (master_.defined() ? " holds no fp32 master weights, but this optimizer's parameters are " +
                                                std::string(c10::toString(param_flat_.scalar_type())) +
                                                " (mixed precision): it was saved by an fp32 run"
                                          : " holds fp32 master weights (a mixed-precision run), but this optimizer's "
                                            "parameters are " + std::string(c10::toString(param_flat_.scalar_type())) +
                                            ": load it into a model of the precision it was saved from"));
  torch::NoGradGuard no_grad;
  if (master_.defined()) master_.copy_(d.at("master").toTensor());
  exp_avg_.copy_(d.at("exp_avg").toTensor());
  exp_avg_sq_.copy_(d.at("exp_avg_sq").toTensor());
  step_ = d.at("step").toTensor().item<int64_t>();
}

}  // namespace kit::zero
