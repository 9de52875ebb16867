// What the checkpoint tests share: a tiny model, temporary files, comparisons, and the
// Python with PyTorch that checks the files from the other side.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kit/config.h"
#include "error_of.h"  // kit_test::error_of: the kit::Error message of `f`, or a failure
#include "kit/errors.h"
#include "model/gpt2.h"

namespace kit_test {

inline kit::GPT2Config tiny() {
  auto cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = 60;
  cfg.n_positions = 16;
  cfg.dropout = 0.0;
  return cfg;
}

inline kit::GPT2 model_from_seed(uint64_t seed, const kit::GPT2Config& cfg = tiny()) {
  torch::manual_seed(seed);
  return kit::GPT2(cfg);
}

// A file name of this test's own (test name, process, a counter), removed at the end.
class TempFile {
 public:
  explicit TempFile(const std::string& suffix = ".pt") {
    static int count = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::temp_directory_path() / ("kit_" + std::string(info->name()) + "_" +
                                                       std::to_string(getpid()) + "_" + std::to_string(++count) + suffix))
                .string();
    std::filesystem::remove(path_);
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Empty when every parameter is bitwise equal, else the first that differs.
inline std::string first_different_parameter(kit::GPT2& a, kit::GPT2& b) {
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& p : pa) {
    const auto& q = pb[p.key()];
    if (!torch::equal(p.value(), q))
      return p.key() + " (max abs difference " + std::to_string((p.value() - q).abs().max().item<double>()) + ")";
  }
  return "";
}

// The Python the tests run: $KIT_TORCH_PYTHON, else Debian's /usr/bin/python3, which has
// PyTorch once python3-torch is installed (sudo scripts/install_deps.sh --python).
inline std::string torch_python() {
  const char* env = std::getenv("KIT_TORCH_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

inline bool can_import_torch(const std::string& python) {
  return std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
}

// KIT_REQUIRE_TORCH_PYTHON=1 (scripts/test.sh sets it): a missing PyTorch fails the Python
// tests instead of skipping them, so that CI cannot pass without running them.
inline bool torch_python_required() {
  const char* env = std::getenv("KIT_REQUIRE_TORCH_PYTHON");
  return env && *env && std::string(env) != "0";
}

// Runs `script` with `python` and the arguments (each single-quoted); the exit status.
inline int run_python(const std::string& python, const std::string& script, const std::vector<std::string>& args) {
  TempFile file(".py");
  std::ofstream(file.path()) << script;
  std::string cmd = python + " '" + file.path() + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  return std::system(cmd.c_str());
}

}  // namespace kit_test

// Declares `python`, the interpreter with PyTorch, or ends the test: skipped where Python
// cannot import torch, failed when KIT_REQUIRE_TORCH_PYTHON is set.
#define KIT_TORCH_PYTHON_OR_SKIP(python)                                                                    \
  const std::string python = kit_test::torch_python();                                                      \
  if (!kit_test::can_import_torch(python)) {                                                                \
    if (kit_test::torch_python_required())                                                                  \
      FAIL() << "KIT_REQUIRE_TORCH_PYTHON is set, but " << python                                           \
             << " cannot import torch: install python3-torch (sudo scripts/install_deps.sh --python) or "   \
                "point KIT_TORCH_PYTHON at a Python that has PyTorch";                                      \
    GTEST_SKIP() << python << " cannot import torch: install python3-torch (sudo scripts/install_deps.sh " \
                              "--python) or set KIT_TORCH_PYTHON to run this";                              \
  }
