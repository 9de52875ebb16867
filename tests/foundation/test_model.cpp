// GPT-2 itself: causality, size, names, initial loss, learning, determinism, bad input; its
// attention kernels (model/attention.h), the multi-tensor AdamW (train/adamw.h) and bf16
// autocast (kit/precision.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "app/run.h"
#include "kit/compat.h"
#include "kit/config.h"
#include "kit/errors.h"
#include "kit/precision.h"
#include "model/attention.h"
#include "model/gpt2.h"
#include "pipeline_training/recompute.h"
#include "train/adamw.h"
#include "train/loss.h"

namespace {
using torch::indexing::Slice;

// The tests' model: the tiny preset with a fixed vocabulary and no dropout.
kit::GPT2Config tiny(int64_t vocab = 1000) {
  auto cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = vocab;
  cfg.dropout = 0.0;
  return cfg;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// Hugging Face's GPT2Model parameter names and (out, in) shapes, written out by hand.
std::vector<std::pair<std::string, std::vector<int64_t>>> hf_parameters(const kit::GPT2Config& c) {
  const int64_t C = c.n_embd;
  std::vector<std::pair<std::string, std::vector<int64_t>>> p = {{"wte.weight", {c.vocab_size, C}},
                                                                  {"wpe.weight", {c.n_positions, C}}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (auto ln : {"ln_1", "ln_2"}) {
      p.push_back({h + ln + ".weight", {C}});
      p.push_back({h + ln + ".bias", {C}});
    }
    p.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    p.push_back({h + "attn.c_attn.bias", {3 * C}});
    p.push_back({h + "attn.c_proj.weight", {C, C}});
    p.push_back({h + "attn.c_proj.bias", {C}});
    p.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    p.push_back({h + "mlp.c_fc.bias", {4 * C}});
    p.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    p.push_back({h + "mlp.c_proj.bias", {C}});
  }
  p.push_back({"ln_f.weight", {C}});
  p.push_back({"ln_f.bias", {C}});
  return p;
}

std::vector<torch::Tensor> snapshot(kit::GPT2& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

// Index of the first parameter that differs between two snapshots, or -1.
int64_t first_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return static_cast<int64_t>(i);
  return -1;
}

// Labels are the inputs shifted by one; every position counts.
torch::Tensor loss_on(kit::GPT2& model, const torch::Tensor& tokens) {
  auto input = tokens.index({Slice(), Slice(0, -1)});
  auto labels = tokens.index({Slice(), Slice(1, torch::indexing::None)});
  return kit::masked_cross_entropy(model(input), labels, torch::ones(labels.sizes()));
}
}  // namespace

TEST(GPT2Model, ChangingAFutureTokenLeavesEarlierLogitsUnchanged) {
  torch::manual_seed(0);
  const int64_t V = 50, T = 10;
  kit::GPT2 model(tiny(V));
  model->eval();
  torch::NoGradGuard no_grad;
  auto idx = torch::randint(V, {2, T}, torch::kLong);
  auto base = model(idx);
  for (int64_t t : {int64_t{1}, int64_t{4}, T - 1}) {
    auto changed = idx.clone();
    changed.index_put_({Slice(), t}, (idx.index({Slice(), t}) + 1) % V);
    auto out = model(changed);
    const double before = max_abs_diff(out.index({Slice(), Slice(0, t)}), base.index({Slice(), Slice(0, t)}));
    const double from = max_abs_diff(out.index({Slice(), Slice(t, T)}), base.index({Slice(), Slice(t, T)}));
    EXPECT_LT(before, 1e-6) << "changing token " << t << " changed the logits of earlier positions by up to "
                            << before << ": attention sees the future (check the causal mask)";
    EXPECT_GT(from, 1e-4) << "changing token " << t << " did not change the logits at positions >= " << t
                          << " (max change " << from << "): a position must see itself";
  }
}

TEST(GPT2Model, Gpt2PresetHas124439808ParametersWithTiedHead) {
  torch::manual_seed(0);
  kit::GPT2 model(kit::gpt2_preset("gpt2"));
  // 124,439,808 is Hugging Face's count for gpt2; an untied head would add 50257 * 768.
  EXPECT_EQ(kit::count_parameters(*model), 124439808);
}

TEST(GPT2Model, Gpt2PresetParametersHaveHuggingFaceNamesAndLinearShapes) {
  torch::manual_seed(0);
  auto cfg = kit::gpt2_preset("gpt2");
  kit::GPT2 model(cfg);
  auto params = model->named_parameters();
  auto expected = hf_parameters(cfg);
  for (const auto& e : expected) {
    const torch::Tensor* p = params.find(e.first);
    ASSERT_NE(p, nullptr) << "the model has no parameter named '" << e.first << "'";
    EXPECT_EQ(p->sizes().vec(), e.second) << "parameter '" << e.first << "' has the wrong shape (want (out, in))";
  }
  EXPECT_EQ(params.size(), expected.size()) << "the model has parameters beyond Hugging Face's list "
                                               "(lm_head must not have a weight of its own)";
}

TEST(GPT2Model, HeadIsTiedToTokenEmbedding) {
  torch::manual_seed(0);
  const int64_t V = 40;
  kit::GPT2 model(tiny(V));
  int64_t listed = 0;
  for (const auto& p : model->parameters()) listed += p.numel();
  EXPECT_EQ(kit::count_parameters(*model), listed) << "parameters() lists a tensor twice";
  // Rows of wte for tokens absent from the input get gradient only through the head.
  auto tokens = torch::randint(V / 2, {2, 9}, torch::kLong);
  loss_on(model, tokens).backward();
  auto unused_rows = model->wte->weight.grad().index({Slice(V / 2, V)});
  EXPECT_GT(unused_rows.abs().max().item<double>(), 0.0)
      << "wte rows of unused tokens got no gradient: the output head is not wte's weight";
}

TEST(GPT2Model, LossAtInitialisationIsNearLnVocab) {
  torch::manual_seed(0);
  const int64_t V = 1000;
  kit::GPT2 model(tiny(V));
  model->eval();
  torch::NoGradGuard no_grad;
  const double loss = loss_on(model, torch::randint(V, {8, 33}, torch::kLong)).item<double>();
  EXPECT_NEAR(loss, std::log(static_cast<double>(V)), 0.15)
      << "a fresh model should predict close to uniformly; check init_std and the init of each layer";
}

TEST(GPT2Model, TinyModelOverfitsOneBatch) {
  torch::manual_seed(0);
  const int64_t V = 1000;
  kit::GPT2 model(tiny(V));
  auto tokens = torch::randint(V, {4, 17}, torch::kLong);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.0));
  const double initial = loss_on(model, tokens).item<double>();
  double loss = initial;
  for (int step = 0; step < 200 && loss >= 0.1; ++step) {
    opt.zero_grad();
    auto l = loss_on(model, tokens);
    l.backward();
    opt.step();
    loss = l.item<double>();
  }
  EXPECT_LT(loss, 0.1) << "the loss fell only from " << initial << " to " << loss
                       << " in 200 AdamW steps on one batch: gradients do not reach the parameters";
}

namespace {
struct Run {
  std::vector<torch::Tensor> init, trained;
};
// Builds a model from `seed`, then trains it a few steps with dropout on, one thread.
Run train_from_seed(uint64_t seed) {
  torch::set_num_threads(1);
  torch::manual_seed(seed);
  auto cfg = tiny(100);
  cfg.dropout = 0.1;  // dropout draws from the same generator: it must be reproducible too
  kit::GPT2 model(cfg);
  Run run;
  run.init = snapshot(model);
  auto tokens = torch::randint(100, {4, 17}, torch::kLong);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    loss_on(model, tokens).backward();
    opt.step();
  }
  run.trained = snapshot(model);
  return run;
}
}  // namespace

TEST(GPT2Model, SameSeedGivesBitwiseIdenticalInitAndTraining) {
  auto a = train_from_seed(7), b = train_from_seed(7);
  ASSERT_EQ(a.init.size(), b.init.size());
  EXPECT_EQ(first_difference(a.init, b.init), -1) << "same seed, different initial parameter (index shown)";
  EXPECT_EQ(first_difference(a.trained, b.trained), -1) << "same seed, different parameter after 3 steps";
  EXPECT_NE(first_difference(a.init, a.trained), -1) << "training did not change the parameters";
}

TEST(GPT2Model, DifferentSeedGivesDifferentInit) {
  auto a = train_from_seed(7), b = train_from_seed(8);
  EXPECT_NE(first_difference(a.init, b.init), -1) << "seeds 7 and 8 gave the same initial model";
}

TEST(GPT2Model, UnknownPresetErrorListsKnownPresets) {
  try {
    kit::gpt2_preset("gpt5");
    FAIL() << "an unknown preset was accepted";
  } catch (const kit::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gpt5"), std::string::npos) << msg;
    for (const auto& name : kit::gpt2_preset_names())
      EXPECT_NE(msg.find(name), std::string::npos) << "the message does not list preset '" << name << "': " << msg;
  }
}

TEST(GPT2Model, SequenceLongerThanContextIsAnError) {
  auto cfg = tiny(50);
  cfg.n_positions = 8;
  kit::GPT2 model(cfg);
  EXPECT_NO_THROW(model(torch::zeros({1, 8}, torch::kLong)));
  try {
    model(torch::zeros({1, 9}, torch::kLong));
    FAIL() << "a 9-token sequence was accepted by a model with 8 positions";
  } catch (const kit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_positions"), std::string::npos) << e.what();
  }
}

TEST(GPT2Model, ZeroVocabularyIsAnError) {
  auto cfg = tiny(0);
  EXPECT_THROW(kit::GPT2 model(cfg), kit::Error);
}

TEST(GPT2Model, TokenIdOutsideVocabularyIsAnError) {
  kit::GPT2 model(tiny(50));
  EXPECT_THROW(model(torch::full({1, 4}, 50, torch::kLong)), kit::Error);
  EXPECT_THROW(model(torch::full({1, 4}, -1, torch::kLong)), kit::Error);
  EXPECT_THROW(model(torch::zeros({4}, torch::kLong)), kit::Error) << "a 1-d input must be rejected";
}

TEST(GPT2Model, HeadsThatDoNotDivideWidthAreAnError) {
  auto cfg = tiny(50);
  cfg.n_head = 3;  // 32 % 3 != 0
  EXPECT_THROW(kit::GPT2 model(cfg), kit::Error);
}

// ---- model/attention.h: the manual kernel is the formula; the fused one (LibTorch 2.0+) equals it.
namespace {
// The formula, position by position: y_t = sum_{s<=t} softmax_s(q_t . k_s / sqrt(hs)) v_s.
torch::Tensor attention_by_positions(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t T = q.size(-2), hs = q.size(-1);
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < T; ++t) {
    auto scores = torch::matmul(q.narrow(-2, t, 1), k.narrow(-2, 0, t + 1).transpose(-2, -1)) /
                  std::sqrt(static_cast<double>(hs));
    rows.push_back(torch::matmul(torch::softmax(scores, -1), v.narrow(-2, 0, t + 1)));
  }
  return torch::cat(rows, -2);
}
std::vector<torch::Tensor> random_qkv(torch::Dtype dtype, int64_t T = 9) {
  torch::manual_seed(3);
  auto o = torch::TensorOptions().dtype(dtype);
  return {torch::randn({2, 3, T, 8}, o), torch::randn({2, 3, T, 8}, o), torch::randn({2, 3, T, 8}, o)};
}
}  // namespace

TEST(Attention, ManualKernelIsTheCausalFormula) {
  auto qkv = random_qkv(torch::kFloat64);
  auto y = kit::causal_attention(qkv[0], qkv[1], qkv[2], 0.0, true, kit::AttentionKernel::Manual);
  EXPECT_LT(max_abs_diff(y, attention_by_positions(qkv[0], qkv[1], qkv[2])), 1e-12);
  // Dropout is off outside training, whatever p says.
  auto y_eval = kit::causal_attention(qkv[0], qkv[1], qkv[2], 0.5, false, kit::AttentionKernel::Manual);
  EXPECT_EQ(max_abs_diff(y_eval, y), 0.0);
}

TEST(Attention, DefaultKernelIsManualOnTheCpuAndFusedOnAGpuWhereAvailable) {
  EXPECT_EQ(kit::default_attention_kernel(torch::Device(torch::kCPU)), kit::AttentionKernel::Manual);
  EXPECT_EQ(kit::default_attention_kernel(torch::Device(torch::kCUDA, 0)),
            kit::fused_attention_available() ? kit::AttentionKernel::Fused : kit::AttentionKernel::Manual);
}

TEST(Attention, FusedKernelEqualsTheManualOne) {
  auto qkv = random_qkv(torch::kFloat64);
  if (!kit::fused_attention_available()) {
    EXPECT_THROW(kit::causal_attention(qkv[0], qkv[1], qkv[2], 0.0, true, kit::AttentionKernel::Fused), kit::Error);
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no scaled_dot_product_attention (2.0+)";
  }
  auto manual = kit::causal_attention(qkv[0], qkv[1], qkv[2], 0.0, true, kit::AttentionKernel::Manual);
  auto fused = kit::causal_attention(qkv[0], qkv[1], qkv[2], 0.0, true, kit::AttentionKernel::Fused);
  EXPECT_LT(max_abs_diff(fused, manual), 1e-12);
  auto q32 = random_qkv(torch::kFloat32, 64);
  EXPECT_LT(max_abs_diff(kit::causal_attention(q32[0], q32[1], q32[2], 0.1, false, kit::AttentionKernel::Fused),
                         attention_by_positions(q32[0], q32[1], q32[2])),
            1e-5);
  if (torch::cuda::is_available()) {  // the GPU's flash / memory-efficient kernels against the CPU formula
    std::vector<torch::Tensor> gpu;
    for (auto& t : q32) gpu.push_back(t.to(torch::kCUDA));
    auto y = kit::causal_attention(gpu[0], gpu[1], gpu[2], 0.0, true, kit::AttentionKernel::Fused).cpu();
    EXPECT_LT(max_abs_diff(y, attention_by_positions(q32[0], q32[1], q32[2])), 1e-3);  // TF32 matmuls
  }
}

// Dropout on the weights, either kernel: with v all ones every row of weights sums to 1, so each
// output is (the kept weights' sum) / (1 - p): about 1 on average, not 1 everywhere.
TEST(Attention, DropoutDropsWeightsAndKeepsTheMean) {
  std::vector<kit::AttentionKernel> kernels{kit::AttentionKernel::Manual};
  if (kit::fused_attention_available()) kernels.push_back(kit::AttentionKernel::Fused);
  for (const auto kernel : kernels) {
    torch::manual_seed(5);
    auto q = torch::randn({4, 4, 128, 8}, torch::kFloat64), k = torch::randn({4, 4, 128, 8}, torch::kFloat64);
    auto v = torch::ones({4, 4, 128, 8}, torch::kFloat64);
    auto y = kit::causal_attention(q, k, v, 0.3, true, kernel);
    const double mean = y.mean().item<double>(), spread = y.std().item<double>();
    const char* name = kernel == kit::AttentionKernel::Manual ? "manual" : "fused";
    EXPECT_NEAR(mean, 1.0, 0.03) << name << ": dropout must scale the kept weights by 1/(1-p)";
    EXPECT_GT(spread, 0.05) << name << ": with p = 0.3 in training, the outputs cannot all be 1";
    EXPECT_LT(max_abs_diff(kit::causal_attention(q, k, v, 0.3, false, kernel), v), 1e-12)
        << name << ": no dropout outside training";
  }
}

// ---- train/adamw.h: kit::AdamW's multi-tensor step is torch::optim::AdamW's, in float64.
namespace {
struct AdamWRun {
  std::vector<torch::Tensor> params, exp_avgs;
  int64_t state_bytes = 0;
};
// Four steps on three parameters of different shapes, with weight decay; the bias gets no
// gradient in the first step, so it has taken one step fewer than the others from then on.
template <class Make>
AdamWRun run_adamw(Make make) {
  torch::manual_seed(11);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  std::vector<torch::Tensor> params{torch::randn({5, 3}, o).requires_grad_(), torch::randn({3}, o).requires_grad_(),
                                    torch::randn({2, 2, 2}, o).requires_grad_()};
  auto opt = make(params);
  for (int step = 0; step < 4; ++step) {
    opt->zero_grad();
    auto loss = (params[0].sin() * 3).sum() + params[2].pow(2).sum();
    if (step > 0) loss = loss + (params[1] * params[1].cos()).sum();
    loss.backward();
    opt->step();
  }
  AdamWRun r;
  for (auto& p : params) r.params.push_back(p.detach().clone());
  for (auto& p : params) {
    auto key = kit::compat::optimizer_state_key(opt->state(), p.unsafeGetTensorImpl());
    r.exp_avgs.push_back(static_cast<torch::optim::AdamWParamState&>(*opt->state().at(key)).exp_avg().clone());
  }
  r.state_bytes = kit::adamw_state_bytes(*opt);
  return r;
}
torch::optim::AdamWOptions adamw_options() { return torch::optim::AdamWOptions(0.05).weight_decay(0.1).eps(1e-6); }
void expect_same_run(const AdamWRun& a, const AdamWRun& b, double tol, const std::string& what) {
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_LE(max_abs_diff(a.params[i], b.params[i]), tol) << what << ": parameter " << i;
    EXPECT_LE(max_abs_diff(a.exp_avgs[i], b.exp_avgs[i]), tol) << what << ": exp_avg of parameter " << i;
  }
  EXPECT_EQ(a.state_bytes, b.state_bytes) << what << ": the optimizer state's bytes";
}
}  // namespace

TEST(KitAdamW, ForEachStepIsTorchAdamWsStep) {
  auto reference = run_adamw([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(p, adamw_options());
  });
  auto foreach = run_adamw([](std::vector<torch::Tensor> p) {
    return std::make_unique<kit::AdamW>(p, adamw_options(), kit::AdamWKernel::ForEach);
  });
  expect_same_run(foreach, reference, 1e-14, "ForEach");
  auto loop = run_adamw([](std::vector<torch::Tensor> p) {
    return std::make_unique<kit::AdamW>(p, adamw_options(), kit::AdamWKernel::Loop);
  });
  expect_same_run(loop, reference, 0.0, "Loop");
  EXPECT_EQ(kit::default_adamw_kernel(torch::Device(torch::kCPU)), kit::AdamWKernel::ForEach);
}

TEST(KitAdamW, FusedStepIsTorchAdamWsStepWhereLibTorchHasIt) {
  auto reference = run_adamw([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(p, adamw_options());
  });
  if (!kit::fused_adamw_available(torch::Device(torch::kCPU))) {
    EXPECT_THROW(kit::AdamW({torch::zeros({2})}, adamw_options(), kit::AdamWKernel::Fused), kit::Error);
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused AdamW kernel on the CPU (2.4+)";
  }
  auto fused = run_adamw([](std::vector<torch::Tensor> p) {
    return std::make_unique<kit::AdamW>(p, adamw_options(), kit::AdamWKernel::Fused);
  });
  expect_same_run(fused, reference, 1e-12, "Fused");
}

// ---- kit/precision.h: bf16 autocast for the forward, fp32 everywhere else.
TEST(Precision, Bf16AutocastComputesMatrixProductsInBf16ForItsScopeOnly) {
  torch::manual_seed(1);
  torch::nn::Linear lin(8, 4);
  const auto x = torch::randn({2, 8});
  {
    const kit::Autocast outer(kit::Precision::BF16, torch::kCPU);
    EXPECT_EQ(lin(x).scalar_type(), torch::kBFloat16);
    { const kit::Autocast inner(kit::Precision::BF16, torch::kCPU); }
    EXPECT_EQ(lin(x).scalar_type(), torch::kBFloat16) << "an inner guard's end must not switch the outer one off";
  }
  EXPECT_EQ(lin(x).scalar_type(), torch::kFloat32) << "autocast must end with its guard";
  {
    const kit::Autocast none(kit::Precision::FP32, torch::kCPU);
    EXPECT_EQ(lin(x).scalar_type(), torch::kFloat32);
  }
  EXPECT_EQ(kit::parse_precision("bf16"), kit::Precision::BF16);
  EXPECT_EQ(kit::parse_precision("fp32"), kit::Precision::FP32);
  EXPECT_THROW(kit::parse_precision("fp16"), kit::Error);
}

// The tiny GPT-2 (no dropout) on one batch: the loss under bf16 within 1 % of fp32's, every
// gradient fp32 (the weights are) and pointing where fp32's does (cosine > 0.99).
TEST(Precision, Bf16LossAndGradientsFollowFp32) {
  auto run = [](kit::Precision p) {
    torch::manual_seed(3);
    kit::GPT2 model(tiny(100));
    const auto tokens = torch::randint(100, {4, 17}, torch::kLong);
    const auto idx = tokens.narrow(1, 0, 16), labels = tokens.narrow(1, 1, 16);
    torch::Tensor logits;
    {
      const kit::Autocast autocast(p, torch::kCPU);
      logits = model(idx);
    }
    EXPECT_EQ(logits.scalar_type(), p == kit::Precision::BF16 ? torch::kBFloat16 : torch::kFloat32);
    const auto loss = kit::masked_cross_entropy(logits.to(torch::kFloat32), labels, torch::ones_like(labels, torch::kBool));
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (const auto& q : model->parameters()) grads.push_back(q.grad().clone());
    return std::make_pair(loss.item<double>(), grads);
  };
  const auto [loss32, grads32] = run(kit::Precision::FP32);
  const auto [loss16, grads16] = run(kit::Precision::BF16);
  EXPECT_NEAR(loss16, loss32, 0.01 * loss32);
  EXPECT_NE(loss16, loss32) << "bf16 gave fp32's loss to the last bit: did autocast run at all?";
  ASSERT_EQ(grads16.size(), grads32.size());
  for (size_t i = 0; i < grads32.size(); ++i) {
    ASSERT_EQ(grads16[i].scalar_type(), torch::kFloat32) << "parameter " << i << "'s gradient";
    const double cosine = (grads16[i] * grads32[i]).sum().item<double>() /
                          (grads16[i].norm().item<double>() * grads32[i].norm().item<double>() + 1e-30);
    EXPECT_GT(cosine, 0.99) << "parameter " << i << ": bf16's gradient points elsewhere than fp32's";
  }
}

// Losses are taken in fp32 of bf16 logits (full_precision), never in bf16, and float64 stays
// float64 (the float64 tests' models).
TEST(Precision, LossesAreTakenInFp32OfBf16Logits) {
  torch::manual_seed(4);
  const auto logits32 = torch::randn({3, 5, 11});
  const auto logits16 = logits32.to(torch::kBFloat16);
  const auto labels = torch::randint(11, {3, 5}, torch::kLong);
  const auto mask = torch::ones({3, 5});
  EXPECT_EQ(kit::full_precision(logits16).scalar_type(), torch::kFloat32);
  EXPECT_EQ(kit::full_precision(logits32.to(torch::kFloat64)).scalar_type(), torch::kFloat64);
  EXPECT_TRUE(kit::full_precision(logits32).is_same(logits32)) << "fp32 logits must pass through as they are";
  const auto loss = kit::masked_cross_entropy(logits16, labels, mask);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat32);
  EXPECT_EQ(loss.item<float>(),
            kit::masked_cross_entropy(logits16.to(torch::kFloat32), labels, mask).item<float>());
}

// A recomputed block runs again under the autocast setting its first forward ran under:
// save_generators keeps it, restore_generators puts it back (and then the one saved after).
TEST(Precision, RecomputeStatesCarryTheAutocastSetting) {
  kit::pp::GeneratorStates inside;
  {
    const kit::Autocast autocast(kit::Precision::BF16, torch::kCPU);
    inside = kit::pp::save_generators(torch::Device(torch::kCPU));
  }
  const kit::pp::GeneratorStates outside = kit::pp::save_generators(torch::Device(torch::kCPU));
  torch::nn::Linear lin(8, 4);
  const auto x = torch::randn({2, 8});
  EXPECT_EQ(lin(x).scalar_type(), torch::kFloat32);
  kit::pp::restore_generators(inside);
  EXPECT_EQ(lin(x).scalar_type(), torch::kBFloat16) << "the first forward's bf16 autocast was not put back";
  kit::pp::restore_generators(outside);
  EXPECT_EQ(lin(x).scalar_type(), torch::kFloat32) << "autocast stayed on after the states from outside it";
}
