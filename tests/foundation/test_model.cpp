// GPT-2 itself: causality, size, names, initial loss, learning, determinism, bad input.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kit/config.h"
#include "kit/errors.h"
#include "model/gpt2.h"
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
