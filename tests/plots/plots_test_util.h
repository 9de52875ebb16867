// Synthetic metrics files for the plots suite, in the training loop's format.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace plots_test {
namespace fs = std::filesystem;
using nlohmann::json;

using kit_test::TempDir;  // tests/temp_dir.h

inline json epoch(int64_t e, int rank, int world_size, double time, double tokens_per_sec,
                  std::vector<double> batch_losses = {3.0, 2.5}) {
  double mean = 0;
  for (double l : batch_losses) mean += l;
  mean = batch_losses.empty() ? 0 : mean / batch_losses.size();
  return {{"epoch", e},
          {"rank", rank},
          {"world_size", world_size},
          {"batches", batch_losses.size()},
          {"tokens", static_cast<int64_t>(time * tokens_per_sec)},
          {"training_time", time},
          {"tokens_per_sec", tokens_per_sec},
          {"train_loss", mean},
          {"validation_loss", nullptr},
          {"batch_losses", batch_losses}};
}

inline json run_file(const std::string& program, int world_size, int64_t batch_size, const std::vector<json>& epochs,
                     const std::string& mode = "") {
  json run = {{"program", program}, {"preset", "tiny"}, {"world_size", world_size}, {"batch_size", batch_size}};
  if (!mode.empty()) run["mode"] = mode;
  return {{"run", run}, {"epochs", epochs}};
}

inline void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}
inline void write_json(const std::string& path, const json& j) { write_text(path, j.dump(2)); }

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The message of the exception `f` throws, or "" when it throws none.
template <typename Exception, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  return "";
}

// A failure unless the message `text` mentions `part`.
inline void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "the message should mention \"" << part << "\"; it is:\n" << text;
}

}  // namespace plots_test
