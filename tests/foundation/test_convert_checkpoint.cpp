// Moving weights to and from Python: the Hugging Face export, safetensors, the
// OrderedDict that torch.save(model.state_dict()) writes, and build/convert_checkpoint.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "foundation/checkpoint_test_util.h"
#include "model/checkpoint.h"
#include "model/ordered_dict_pickle.h"
#include "build_programs.h"

namespace {
using namespace kit_test;  // foundation/checkpoint_test_util.h

// Writes a safetensors file: the 8-byte little-endian header length, the JSON header, the
// bytes. Tensors go in as float32.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const auto& [name, t] : tensors) {
    auto c = t.to(torch::kFloat).contiguous();
    const size_t begin = data.size();
    data.append(static_cast<const char*>(c.data_ptr()), c.numel() * sizeof(float));
    header[name] = {{"dtype", "F32"}, {"shape", c.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((text.size() >> (8 * i)) & 0xff));
  out << text << data;
}

// A safetensors file written byte by byte from `header` and `data`.
void write_raw_safetensors(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  out << header << data;
}

// The model of seed 1 exported in Hugging Face's layout to `path`: what the Python tests read.
kit::GPT2 exported_for_python(const std::string& path) {
  auto model = model_from_seed(1);
  kit::export_checkpoint(*model, path, kit::CheckpointLayout::HuggingFace);
  return model;
}

}  // namespace

TEST(HuggingFaceExport, HasPrefixedNamesConv1DWeightsAndATiedHead) {
  TempFile file;
  auto model = model_from_seed(1);
  kit::export_checkpoint(*model, file.path(), kit::CheckpointLayout::HuggingFace);
  auto dict = kit::load_tensor_dict(file.path());
  const auto& cfg = model->config();
  const int64_t C = cfg.n_embd;
  auto params = model->named_parameters();
  // Hand-written expectations, one per kind of layer: GPT2LMHeadModel.state_dict()'s names
  // and Conv1D's (in, out) shapes.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> want = {
      {"transformer.wte.weight", {cfg.vocab_size, C}},   {"transformer.wpe.weight", {cfg.n_positions, C}},
      {"transformer.h.0.ln_1.weight", {C}},              {"transformer.h.1.attn.c_attn.weight", {C, 3 * C}},
      {"transformer.h.1.attn.c_attn.bias", {3 * C}},     {"transformer.h.0.attn.c_proj.weight", {C, C}},
      {"transformer.h.0.mlp.c_fc.weight", {C, 4 * C}},   {"transformer.h.1.mlp.c_proj.weight", {4 * C, C}},
      {"transformer.ln_f.bias", {C}},                    {"lm_head.weight", {cfg.vocab_size, C}}};
  for (const auto& w : want) {
    ASSERT_TRUE(dict.contains(w.first)) << "the export has no '" << w.first << "'";
    EXPECT_EQ(dict.at(w.first).sizes().vec(), w.second) << w.first;
  }
  EXPECT_EQ(static_cast<int64_t>(dict.size()), 12 * cfg.n_layer + 5);
  EXPECT_TRUE(torch::equal(dict.at("transformer.h.1.mlp.c_fc.weight"), params["h.1.mlp.c_fc.weight"].t()));
  EXPECT_TRUE(torch::equal(dict.at("transformer.h.0.ln_2.weight"), params["h.0.ln_2.weight"]));
  EXPECT_TRUE(torch::equal(dict.at("lm_head.weight"), dict.at("transformer.wte.weight")));
}

TEST(HuggingFaceExport, KitToHuggingFaceToKitGivesIdenticalTensors) {
  TempFile kit_file, hf_file, back_file;
  auto a = model_from_seed(1), b = model_from_seed(2);
  ASSERT_NE(first_different_parameter(a, b), "") << "two seeds gave the same model: the test would prove nothing";
  kit::export_checkpoint(*a, kit_file.path());
  kit::export_checkpoint(*a, hf_file.path(), kit::CheckpointLayout::HuggingFace);
  kit::import_checkpoint(*b, hf_file.path());  // the layout told from the file
  EXPECT_EQ(first_different_parameter(a, b), "");
  kit::export_checkpoint(*b, back_file.path());
  auto before = kit::load_tensor_dict(kit_file.path()), after = kit::load_tensor_dict(back_file.path());
  ASSERT_EQ(before.size(), after.size());
  for (const auto& e : before) {
    ASSERT_TRUE(after.contains(e.key())) << e.key();
    EXPECT_TRUE(torch::equal(e.value(), after.at(e.key()))) << e.key() << " changed in kit -> HF -> kit";
  }
}

TEST(Safetensors, HandWrittenFileIsReadExactly) {
  TempFile file(".safetensors");
  // w: float32 [2, 3] = 0..5; h: float16 [2] = {1.5, -2} (0x3E00, 0xC000); n: int64 scalar 7.
  std::string data;
  for (float v : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) data.append(reinterpret_cast<const char*>(&v), sizeof v);
  data += std::string("\x00\x3e\x00\xc0", 4);
  data += std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8);
  write_raw_safetensors(file.path(),
                        R"({"__metadata__":{"format":"pt"},)"
                        R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                        R"("h":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
                        R"("n":{"dtype":"I64","shape":[],"data_offsets":[28,36]}})",
                        data);
  auto dict = kit::load_tensor_dict(file.path());
  ASSERT_EQ(dict.size(), 3u) << "__metadata__ is not a tensor";
  EXPECT_TRUE(torch::equal(dict.at("w"), torch::arange(6, torch::kFloat).view({2, 3})));
  EXPECT_EQ(dict.at("h").scalar_type(), torch::kHalf);
  EXPECT_TRUE(torch::equal(dict.at("h").to(torch::kFloat), torch::tensor({1.5f, -2.f})));
  EXPECT_EQ(dict.at("n").dim(), 0);
  EXPECT_EQ(dict.at("n").item<int64_t>(), 7);
}

TEST(Safetensors, HuggingFaceFileImportsIntoTheModel) {
  // Like gpt2's model.safetensors: no "transformer." prefix, Conv1D weights, mask buffers,
  // no lm_head.weight.
  TempFile file(".safetensors");
  auto source = model_from_seed(1);
  const int64_t P = source->config().n_positions;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& e : kit::state_dict(*source, kit::CheckpointLayout::HuggingFace)) {
    if (e.key() == "lm_head.weight") continue;
    const std::string name = e.key().substr(std::string("transformer.").size());
    tensors.emplace_back(name, e.value());
    if (name.find(".attn.c_attn.weight") != std::string::npos)
      tensors.emplace_back(name.substr(0, name.find("c_attn")) + "bias", torch::ones({1, 1, P, P}).tril());
  }
  write_safetensors(file.path(), tensors);
  auto model = model_from_seed(2);
  kit::import_checkpoint(*model, file.path());
  EXPECT_EQ(first_different_parameter(source, model), "");
}

TEST(Safetensors, DamagedFilesAreErrorsNamingTheProblem) {
  TempFile file(".safetensors");
  write_raw_safetensors(file.path(), R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "12345678");
  std::string msg = error_of([&] { kit::load_tensor_dict(file.path()); });
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;

  write_raw_safetensors(file.path(), R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x");
  msg = error_of([&] { kit::load_tensor_dict(file.path()); });
  EXPECT_NE(msg.find("F8_E4M3"), std::string::npos) << msg;

  std::ofstream(file.path(), std::ios::binary) << std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10);
  msg = error_of([&] { kit::load_tensor_dict(file.path()); });
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
}

TEST(TorchSavePickle, OrderedDictWithMetadataIsReadAsADict) {
  // Python 3: od = OrderedDict([("a", 1), ("b", 2)]); od._metadata = OrderedDict({"": {"version": 1}})
  // pickle.dumps(od, protocol=2): the OrderedDict, SETITEMS, then SETITEM and BUILD for _metadata.
  const char bytes[] =
      "\x80\x02\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74"
      "\x0a\x71\x00\x29\x52\x71\x01\x28\x58\x01\x00\x00\x00\x61\x71\x02\x4b\x01\x58\x01\x00\x00\x00\x62\x71\x03"
      "\x4b\x02\x75\x7d\x71\x04\x58\x09\x00\x00\x00\x5f\x6d\x65\x74\x61\x64\x61\x74\x61\x71\x05\x68\x00\x29\x52"
      "\x71\x06\x58\x00\x00\x00\x00\x71\x07\x7d\x71\x08\x58\x07\x00\x00\x00\x76\x65\x72\x73\x69\x6f\x6e\x71\x09"
      "\x4b\x01\x73\x73\x73\x62\x2e";
  const std::string pickle(bytes, sizeof(bytes) - 1);
  const std::string rewritten = kit::ordered_dicts_as_dicts(pickle);
  ASSERT_NE(rewritten, pickle);
  c10::IValue value;
  ASSERT_NO_THROW(value = torch::jit::unpickle(rewritten.data(), rewritten.size()));
  ASSERT_TRUE(value.isGenericDict()) << value.tagKind();
  auto dict = value.toGenericDict();
  ASSERT_EQ(dict.size(), 2u) << "the _metadata attribute is not an entry";
  EXPECT_EQ(dict.at("a").toInt(), 1);
  EXPECT_EQ(dict.at("b").toInt(), 2);
}

TEST(TorchSavePickle, LibTorchsOwnPickleIsLeftAlone) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::IntType::get());
  dict.insert("a", 1);
  dict.insert("b", 2);
  const auto bytes = torch::jit::pickle(c10::IValue(dict));
  const std::string pickle(bytes.begin(), bytes.end());
  EXPECT_EQ(kit::ordered_dicts_as_dicts(pickle), pickle);
}

// The Python tests run where a Python with PyTorch is installed; skipped elsewhere, failed
// when KIT_REQUIRE_TORCH_PYTHON is set (scripts/test.sh, CI). See checkpoint_test_util.h.
TEST(Python, TorchLoadOfTheHuggingFaceExportHasItsNamesAndShapes) {
  KIT_TORCH_PYTHON_OR_SKIP(python);
  TempFile file, report(".txt");
  auto model = exported_for_python(file.path());
  const std::string script =
      "import sys, torch\n"
      "d = torch.load(sys.argv[1])\n"
      "with open(sys.argv[2], 'w') as out:\n"
      "    for k, v in d.items(): out.write('%s %s %.17g\\n' % (k, 'x'.join(map(str, v.shape)), v.double().sum()))\n"
      "    out.write('tied %d\\n' % torch.equal(d['lm_head.weight'], d['transformer.wte.weight']))\n";
  ASSERT_EQ(kit_test::run_python(python, script, {file.path(), report.path()}), 0) << "torch.load failed";

  const int64_t C = model->config().n_embd;
  const std::string c_attn = "transformer.h.0.attn.c_attn.weight";
  const std::string c_attn_shape = std::to_string(C) + "x" + std::to_string(3 * C);  // Conv1D: (in, out)
  std::ifstream in(report.path());
  auto params = model->named_parameters();
  std::string name, shape;
  double sum = 0;
  int64_t rows = 0;
  bool saw_c_attn = false;
  while (in >> name && name != "tied") {
    ASSERT_TRUE(in >> shape >> sum);
    ++rows;
    if (name != "lm_head.weight")
      EXPECT_EQ(name.rfind("transformer.", 0), 0u) << name << " has no 'transformer.' prefix in Python";
    const std::string kit_name = name == "lm_head.weight" ? "wte.weight" : name.substr(12);
    ASSERT_TRUE(params.contains(kit_name)) << "Python lists " << name << ", which the model does not have";
    const double want = params[kit_name].to(torch::kDouble).sum().item<double>();
    EXPECT_NEAR(sum, want, 1e-9 * (1 + std::abs(want))) << name << " has other values in Python";
    if (name == c_attn) {
      saw_c_attn = true;
      EXPECT_EQ(shape, c_attn_shape) << c_attn << " is not transposed to Conv1D's (in, out)";
    }
  }
  EXPECT_TRUE(saw_c_attn) << "Python did not list " << c_attn;
  EXPECT_EQ(rows, 12 * model->config().n_layer + 5);
  int tied = 0;
  ASSERT_TRUE(in >> tied);
  EXPECT_EQ(tied, 1) << "in Python, lm_head.weight differs from transformer.wte.weight";
}

TEST(Python, StateDictSavedByTorchSaveImports) {
  // What a Hugging Face pytorch_model.bin is: torch.save of model.state_dict(), an
  // OrderedDict with _metadata, holding mask buffers.
  KIT_TORCH_PYTHON_OR_SKIP(python);
  TempFile hf_file, od_file;
  auto source = exported_for_python(hf_file.path());
  const std::string script =
      "import collections, sys, torch\n"
      "d = collections.OrderedDict(torch.load(sys.argv[1]))\n"
      "n = d['transformer.wpe.weight'].shape[0]\n"
      "for k in [k for k in d if k.endswith('.attn.c_attn.weight')]:\n"
      "    d[k.replace('c_attn.weight', 'bias')] = torch.ones(1, 1, n, n, dtype=torch.bool).tril()\n"
      "d._metadata = collections.OrderedDict({'': {'version': 1}, 'transformer': {'version': 1}})\n"
      "torch.save(d, sys.argv[2])\n";
  ASSERT_EQ(kit_test::run_python(python, script, {hf_file.path(), od_file.path()}), 0) << "the Python script failed";
  auto model = model_from_seed(2);
  kit::import_checkpoint(*model, od_file.path());
  EXPECT_EQ(first_different_parameter(source, model), "");
}

// build/convert_checkpoint itself: a round trip, and a wrong preset named with the fix.
TEST(ConvertCheckpointProgram, RoundTripsAndNamesTheRightPreset) {
  const std::string program = kit_test::build_program("convert_checkpoint");
  ASSERT_TRUE(std::filesystem::exists(program)) << program << " is missing: build it (cmake --build build)";
  auto cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = 40;  // the presets leave it to the tokenizer: the program reads it off the file
  auto a = model_from_seed(1, cfg), b = model_from_seed(2, cfg);
  TempFile kit_file, hf_file, back_file, log(".txt");
  kit::export_checkpoint(*a, kit_file.path());
  auto run = [&](const std::string& args) {
    return std::system((program + " " + args + " > '" + log.path() + "' 2>&1").c_str());
  };
  ASSERT_EQ(run("--preset tiny --to hf '" + kit_file.path() + "' '" + hf_file.path() + "'"), 0);
  ASSERT_EQ(run("--preset tiny --to kit '" + hf_file.path() + "' '" + back_file.path() + "'"), 0);
  kit::import_checkpoint(*b, back_file.path(), kit::CheckpointLayout::Kit);
  EXPECT_EQ(first_different_parameter(a, b), "");

  EXPECT_NE(run("--preset cpu-small --to hf '" + kit_file.path() + "' '" + hf_file.path() + "'"), 0);
  std::ifstream in(log.path());
  const std::string msg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(msg.find("pass --preset tiny"), std::string::npos) << msg;
}
