// Reading a benchmark's summary.json (bench/*.py) for a figure: each accessor checks the
// field's presence and type, and its kit::Error names the place ("summary.json: records[3]"),
// the field, the benchmark that writes the file and the command that writes it again.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace kit::plots {

struct SummaryReader {
  std::string source;   // what the file should be, e.g. "bench/grid.py's summary.json"
  std::string make_it;  // the command that writes it, e.g. "python3 bench/grid.py"

  // The JSON file at `path`, which the benchmark wrote with --out runs_dir.
  nlohmann::json read(const std::string& path, const std::string& runs_dir) const;
  const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) const;
  double number(const nlohmann::json& j, const char* key, const std::string& where) const;
  int integer(const nlohmann::json& j, const char* key, const std::string& where) const;
  const std::string& text(const nlohmann::json& j, const char* key, const std::string& where) const;
  bool boolean(const nlohmann::json& j, const char* key, const std::string& where) const;
  const nlohmann::json& list(const nlohmann::json& j, const char* key, const std::string& where) const;  // non-empty
};

}  // namespace kit::plots
