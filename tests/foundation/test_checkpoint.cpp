// Checkpoints: round trip, torch.save's format, Hugging Face layout, and bad files.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "foundation/checkpoint_test_util.h"
#include "kit/errors.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"

namespace {
using namespace kit_test;  // foundation/checkpoint_test_util.h

// What Hugging Face's GPT2LMHeadModel.state_dict() looks like for this model: the
// "transformer." prefix, Conv1D weights (in, out), causal-mask buffers, a tied lm_head.
kit::TensorDict hugging_face_dict(kit::GPT2& model, const std::string& prefix) {
  const auto& cfg = model->config();
  kit::TensorDict hf;
  for (const auto& e : kit::state_dict(*model)) {
    std::string name = e.key();
    auto t = e.value();
    for (const char* conv : {"c_attn.weight", "c_proj.weight", "c_fc.weight"})
      if (name.find(conv) != std::string::npos) t = t.t().contiguous();
    if (name == "lm_head.weight") {
      hf.insert(name, t);
      continue;
    }
    hf.insert(prefix + name, t);
    if (name.find(".attn.c_attn.weight") != std::string::npos) {
      const std::string block = name.substr(0, name.find("c_attn.weight"));
      hf.insert(prefix + block + "bias", torch::ones({cfg.n_positions, cfg.n_positions}).tril().view(
                                             {1, 1, cfg.n_positions, cfg.n_positions}));
      hf.insert(prefix + block + "masked_bias", torch::tensor(-1e4));
    }
  }
  return hf;
}

}  // namespace

TEST(Checkpoint, ExportThenImportIsBitwiseExact) {
  TempFile file;
  auto a = model_from_seed(1), b = model_from_seed(2);
  ASSERT_NE(first_different_parameter(a, b), "") << "two seeds gave the same model: the test would prove nothing";
  kit::export_checkpoint(*a, file.path());
  kit::import_checkpoint(*b, file.path());
  EXPECT_EQ(first_different_parameter(a, b), "") << "a parameter changed in the round trip";
}

TEST(Checkpoint, FileHoldsHuggingFaceNamesInLinearLayoutWithTiedHead) {
  TempFile file;
  auto model = model_from_seed(1);
  kit::export_checkpoint(*model, file.path());
  auto dict = kit::load_tensor_dict(file.path());
  const auto& cfg = model->config();
  const int64_t C = cfg.n_embd;
  // Spot checks written out by hand, one per kind of layer.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> want = {
      {"wte.weight", {cfg.vocab_size, C}},   {"wpe.weight", {cfg.n_positions, C}},
      {"h.0.ln_1.weight", {C}},              {"h.1.attn.c_attn.weight", {3 * C, C}},
      {"h.1.attn.c_attn.bias", {3 * C}},     {"h.0.attn.c_proj.weight", {C, C}},
      {"h.1.ln_2.bias", {C}},                {"h.0.mlp.c_fc.weight", {4 * C, C}},
      {"h.1.mlp.c_proj.weight", {C, 4 * C}}, {"ln_f.weight", {C}},
      {"lm_head.weight", {cfg.vocab_size, C}}};
  for (const auto& w : want) {
    ASSERT_TRUE(dict.contains(w.first)) << "the file has no '" << w.first << "'";
    EXPECT_EQ(dict.at(w.first).sizes().vec(), w.second) << w.first << " is not in (out, in) layout";
  }
  // 12 tensors per block, plus wte, wpe, ln_f (2) and lm_head.
  EXPECT_EQ(static_cast<int64_t>(dict.size()), 12 * cfg.n_layer + 5);
  EXPECT_TRUE(torch::equal(dict.at("lm_head.weight"), dict.at("wte.weight")));
  EXPECT_TRUE(torch::equal(dict.at("h.1.mlp.c_fc.weight"), model->named_parameters()["h.1.mlp.c_fc.weight"]));
}

TEST(Checkpoint, FileIsATorchSaveZipArchive) {
  TempFile file;
  auto model = model_from_seed(1);
  kit::export_checkpoint(*model, file.path());
  std::ifstream in(file.path(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 4u);
  EXPECT_EQ(bytes.substr(0, 4), std::string("PK\x03\x04", 4)) << "not a zip archive, which torch.load expects";
  EXPECT_NE(bytes.find("data.pkl"), std::string::npos) << "the archive has no pickle (data.pkl)";
}

// Runs where a Python with PyTorch is installed; skipped elsewhere, failed when
// KIT_REQUIRE_TORCH_PYTHON is set (scripts/test.sh, CI). See checkpoint_test_util.h.
TEST(Checkpoint, PythonTorchLoadReadsTheExport) {
  KIT_TORCH_PYTHON_OR_SKIP(python);
  TempFile file, report(".txt");
  auto model = model_from_seed(1);
  kit::export_checkpoint(*model, file.path());
  // Python prints: name, shape, float64 sum for each entry, then whether lm_head == wte.
  const std::string script =
      "import sys, torch\n"
      "d = torch.load(sys.argv[1])\n"
      "with open(sys.argv[2], 'w') as out:  # closed here, not left to interpreter exit\n"
      "    for k, v in d.items(): out.write('%s %s %.17g\\n' % (k, 'x'.join(map(str, v.shape)), v.double().sum()))\n"
      "    out.write('tied %d\\n' % torch.equal(d['lm_head.weight'], d['wte.weight']))\n";
  ASSERT_EQ(kit_test::run_python(python, script, {file.path(), report.path()}), 0)
      << "torch.load failed on the exported file";

  std::ifstream in(report.path());
  auto dict = kit::state_dict(*model);
  int64_t rows = 0;
  std::string name, shape;
  double sum = 0;
  for (const auto& e : dict) {
    ASSERT_TRUE(in >> name >> shape >> sum) << "Python listed only " << rows << " of " << dict.size() << " entries";
    ++rows;
    std::string want_shape;
    for (auto s : e.value().sizes()) want_shape += (want_shape.empty() ? "" : "x") + std::to_string(s);
    EXPECT_EQ(name, e.key()) << "entry " << rows << " has another name in Python";
    EXPECT_EQ(shape, want_shape) << e.key() << " has another shape in Python";
    const double want = e.value().to(torch::kDouble).sum().item<double>();
    EXPECT_NEAR(sum, want, 1e-9 * (1 + std::abs(want))) << e.key() << " has other values in Python";
  }
  int tied = 0;
  ASSERT_TRUE(in >> name >> tied);
  EXPECT_EQ(tied, 1) << "in Python, lm_head.weight differs from wte.weight";
}

TEST(Checkpoint, ImportsHuggingFaceLayoutWithPrefixAndConv1DWeights) {
  TempFile file;
  auto source = model_from_seed(1);
  kit::save_tensor_dict(hugging_face_dict(source, "transformer."), file.path());
  for (auto layout : {kit::CheckpointLayout::HuggingFace, kit::CheckpointLayout::Auto}) {
    auto model = model_from_seed(2);
    kit::import_checkpoint(*model, file.path(), layout);
    EXPECT_EQ(first_different_parameter(source, model), "")
        << (layout == kit::CheckpointLayout::Auto ? "auto-detected" : "explicit") << " Hugging Face import";
  }
}

TEST(Checkpoint, AutoDetectsHuggingFaceLayoutWithoutPrefix) {
  // GPT2Model's state_dict (no LM head) has no "transformer." prefix: only the shapes tell.
  auto source = model_from_seed(1);
  auto dict = hugging_face_dict(source, "");
  ASSERT_EQ(dict.erase("lm_head.weight"), 1u);
  auto model = model_from_seed(2);
  kit::load_state_dict(*model, dict);
  EXPECT_EQ(first_different_parameter(source, model), "");
}

TEST(Checkpoint, MissingParameterIsNamedWithTheFile) {
  TempFile file;
  auto model = model_from_seed(1);
  auto dict = kit::state_dict(*model);
  ASSERT_EQ(dict.erase("h.1.mlp.c_fc.bias"), 1u);
  kit::save_tensor_dict(dict, file.path());
  const std::string msg = error_of([&] { kit::import_checkpoint(*model, file.path()); });
  EXPECT_NE(msg.find("h.1.mlp.c_fc.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
}

TEST(Checkpoint, WrongShapeIsNamedAndLeavesModelUntouched) {
  TempFile file;
  auto a = model_from_seed(1), b = model_from_seed(2), b_copy = model_from_seed(2);
  auto dict = kit::state_dict(*a);
  dict.insert_or_assign("h.0.ln_2.weight", torch::ones({tiny().n_embd + 1}));
  kit::save_tensor_dict(dict, file.path());
  const std::string msg = error_of([&] { kit::import_checkpoint(*b, file.path()); });
  EXPECT_NE(msg.find("h.0.ln_2.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
  EXPECT_EQ(first_different_parameter(b, b_copy), "") << "a failed import changed the model";
}

TEST(Checkpoint, CheckpointOfADeeperModelIsAnError) {
  auto cfg = tiny();
  cfg.n_layer = 3;
  auto deeper = model_from_seed(1, cfg);
  auto model = model_from_seed(2);
  const std::string msg = error_of([&] { kit::load_state_dict(*model, kit::state_dict(*deeper)); });
  EXPECT_NE(msg.find("h.2."), std::string::npos) << "the message should name the extra layer: " << msg;
}

TEST(Checkpoint, UntiedHeadIsAnError) {
  auto model = model_from_seed(1);
  auto dict = kit::state_dict(*model);
  dict.insert_or_assign("lm_head.weight", dict.at("wte.weight") + 1);
  const std::string msg = error_of([&] { kit::load_state_dict(*model, dict); });
  EXPECT_NE(msg.find("lm_head.weight"), std::string::npos) << msg;
}

TEST(Checkpoint, MissingFileIsAnError) {
  auto model = model_from_seed(1);
  const std::string msg = error_of([&] { kit::import_checkpoint(*model, "/nonexistent/dir/gpt2.pt"); });
  EXPECT_NE(msg.find("/nonexistent/dir/gpt2.pt"), std::string::npos) << msg;
}

TEST(Checkpoint, FileThatIsNotACheckpointIsAnError) {
  TempFile file;
  std::ofstream(file.path()) << "this is not a zip archive";
  auto model = model_from_seed(1);
  const std::string msg = error_of([&] { kit::import_checkpoint(*model, file.path()); });
  EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
}
