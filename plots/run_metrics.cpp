#include "run_metrics.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "kit/errors.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kit::plots {
namespace {

const char* kWhoWrites = "the files come from train, run_data_parallel or run_pipeline (their --out)";

std::string type_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_string()) return "the string " + v.dump();
  return std::string("a ") + v.type_name();
}

// Every message starts with the file, then says where in it: `epochs[2].tokens_per_sec`.
[[noreturn]] void bad(const std::string& file, const std::string& where, const std::string& problem) {
  throw Error(file + ": " + where + " " + problem + " (" + kWhoWrites + ")");
}

const json& require(const json& obj, const char* key, const std::string& file, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) bad(file, where.empty() ? std::string(key) : where + "." + key, "is missing");
  return *it;
}

double number(const json& obj, const char* key, const std::string& file, const std::string& where,
              bool null_is_nan = false) {
  const json& v = require(obj, key, file, where);
  if (v.is_null() && null_is_nan) return std::numeric_limits<double>::quiet_NaN();
  if (!v.is_number()) bad(file, where + "." + key, "should be a number but is " + type_of(v));
  return v.get<double>();
}

int64_t integer(const json& obj, const char* key, const std::string& file, const std::string& where) {
  const json& v = require(obj, key, file, where);
  if (!v.is_number_integer()) bad(file, where + "." + key, "should be an integer but is " + type_of(v));
  return v.get<int64_t>();
}

std::string text(const json& obj, const char* key, const std::string& file, const std::string& where,
                 bool optional = false) {
  auto it = obj.find(key);
  if (it == obj.end() && optional) return "";
  const json& v = require(obj, key, file, where);
  if (!v.is_string()) bad(file, where + "." + key, "should be a string but is " + type_of(v));
  return v.get<std::string>();
}

json parse_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw Error("cannot read " + file + ": check the path and its permissions");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw Error(file + " is not valid JSON (" + e.what() + "): was the run interrupted while writing it? " +
                "Run it again");
  }
}

EpochRecord read_epoch(const json& e, const std::string& file, size_t index, int world_size) {
  const std::string where = "epochs[" + std::to_string(index) + "]";
  if (!e.is_object()) bad(file, where, "should be an object but is " + type_of(e));
  EpochRecord r;
  r.file = file;
  r.epoch = integer(e, "epoch", file, where);
  r.rank = static_cast<int>(integer(e, "rank", file, where));
  const int64_t w = integer(e, "world_size", file, where);
  if (w != world_size)
    bad(file, where + ".world_size",
        "is " + std::to_string(w) + " but run.world_size is " + std::to_string(world_size));
  if (r.rank < 0 || r.rank >= world_size)
    bad(file, where + ".rank", "is " + std::to_string(r.rank) + ", outside 0.." + std::to_string(world_size - 1));
  r.training_time = number(e, "training_time", file, where);
  if (!(r.training_time >= 0) || !std::isfinite(r.training_time))
    bad(file, where + ".training_time", "should be a time in seconds >= 0 but is " + e["training_time"].dump());
  r.tokens_per_sec = number(e, "tokens_per_sec", file, where);
  if (!(r.tokens_per_sec >= 0) || !std::isfinite(r.tokens_per_sec))
    bad(file, where + ".tokens_per_sec", "should be >= 0 but is " + e["tokens_per_sec"].dump());
  r.train_loss = number(e, "train_loss", file, where, /*null_is_nan=*/true);
  if (auto it = e.find("batch_losses"); it != e.end()) {
    if (!it->is_array()) bad(file, where + ".batch_losses", "should be an array but is " + type_of(*it));
    for (size_t k = 0; k < it->size(); ++k) {
      const json& v = (*it)[k];
      // A NaN loss is written as null; keep it so the batches stay in step.
      if (!v.is_number() && !v.is_null())
        bad(file, where + ".batch_losses[" + std::to_string(k) + "]", "should be a number but is " + type_of(v));
      r.batch_losses.push_back(v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>());
    }
  }
  return r;
}

// One file: its run header and its epochs.
struct FileContents {
  std::string file, program, preset, mode;
  int world_size = 1;
  int64_t batch_size = 0;
  int64_t stages = 0, microbatches = 0;
  std::vector<std::pair<int64_t, double>> forward_tokens_per_sec;
  std::vector<EpochRecord> records;
};

FileContents read_file(const std::string& file) {
  const json j = parse_file(file);
  if (!j.is_object()) bad(file, "the top level", "should be an object with \"run\" and \"epochs\" but is " + type_of(j));
  FileContents f;
  f.file = file;
  const json& run = require(j, "run", file, "");
  if (!run.is_object()) bad(file, "run", "should be an object but is " + type_of(run));
  f.program = text(run, "program", file, "run");
  f.preset = text(run, "preset", file, "run", /*optional=*/true);
  f.mode = text(run, "mode", file, "run", /*optional=*/true);
  const int64_t w = integer(run, "world_size", file, "run");
  if (w < 1 || w > 4096) bad(file, "run.world_size", "should be at least 1 but is " + std::to_string(w));
  f.world_size = static_cast<int>(w);
  f.batch_size = integer(run, "batch_size", file, "run");
  if (run.contains("stages")) f.stages = integer(run, "stages", file, "run");
  if (run.contains("microbatches")) f.microbatches = integer(run, "microbatches", file, "run");
  if (auto it = run.find("forward_only"); it != run.end()) {
    if (!it->is_array()) bad(file, "run.forward_only", "should be an array but is " + type_of(*it));
    for (size_t k = 0; k < it->size(); ++k) {
      const std::string where = "run.forward_only[" + std::to_string(k) + "]";
      if (!(*it)[k].is_object()) bad(file, where, "should be an object but is " + type_of((*it)[k]));
      const double tps = number((*it)[k], "tokens_per_sec", file, where);
      if (!(tps >= 0) || !std::isfinite(tps)) bad(file, where + ".tokens_per_sec", "should be >= 0");
      f.forward_tokens_per_sec.emplace_back(integer((*it)[k], "epoch", file, where), tps);
    }
  }
  const json& epochs = require(j, "epochs", file, "");
  if (!epochs.is_array()) bad(file, "epochs", "should be an array but is " + type_of(epochs));
  if (epochs.empty()) bad(file, "epochs", "is empty: the run finished no epoch; run it with --epochs 2 or more");
  for (size_t i = 0; i < epochs.size(); ++i) f.records.push_back(read_epoch(epochs[i], file, i, f.world_size));
  return f;
}

std::vector<std::string> json_files_in(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path().string());
  if (ec) throw Error("cannot list directory " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty())
    throw Error(dir + " holds no .json files: pass the directory a run wrote its metrics to, or one metrics file");
  return files;
}

// The files of a directory must be the ranks of one run.
void check_same_run(const FileContents& first, const FileContents& f) {
  auto differ = [&](const std::string& field, const std::string& a, const std::string& b) {
    throw Error(first.file + " and " + f.file + " are not from the same run (run." + field + " is " + a + " vs " +
                b + "): keep each run's rank files in a directory of their own");
  };
  if (f.program != first.program) differ("program", first.program, f.program);
  if (f.world_size != first.world_size)
    differ("world_size", std::to_string(first.world_size), std::to_string(f.world_size));
  if (f.batch_size != first.batch_size)
    differ("batch_size", std::to_string(first.batch_size), std::to_string(f.batch_size));
  if (f.mode != first.mode) differ("mode", "'" + first.mode + "'", "'" + f.mode + "'");
  if (f.preset != first.preset) differ("preset", "'" + first.preset + "'", "'" + f.preset + "'");
}

// Every epoch must have every rank exactly once: a missing rank would halve the summed
// tokens/s without any sign in the figure.
void check_ranks(const Run& run) {
  std::map<std::pair<int64_t, int>, const EpochRecord*> seen;
  std::map<int64_t, std::set<int>> ranks_of_epoch;
  for (const auto& r : run.records) {
    auto [it, fresh] = seen.emplace(std::make_pair(r.epoch, r.rank), &r);
    if (!fresh)
      throw Error("epoch " + std::to_string(r.epoch) + " of rank " + std::to_string(r.rank) + " appears twice, in " +
                  it->second->file + " and " + r.file + ": keep each run's files in a directory of their own");
    ranks_of_epoch[r.epoch].insert(r.rank);
  }
  for (const auto& [epoch, ranks] : ranks_of_epoch) {
    for (int k = 0; k < run.world_size; ++k) {
      if (ranks.count(k)) continue;
      std::string msg = run.source + ": epoch " + std::to_string(epoch) + " has no numbers from rank " +
                        std::to_string(k) + " of world size " + std::to_string(run.world_size) + " (files read:";
      for (const auto& f : run.files) msg += " " + f;
      msg += "). ";
      msg += run.files.size() < static_cast<size_t>(run.world_size)
                 ? "Pass the directory holding every rank's file, not one file"
                 : "Did that rank fail? Run it again";
      throw Error(msg);
    }
  }
}

}  // namespace

namespace {
std::string plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}
}  // namespace

std::string Run::describe_two_lines() const {
  std::string what;
  if (program == "run_data_parallel")
    what = "data parallel, world " + std::to_string(world_size);
  else if (program == "run_pipeline" && (mode == "pipeline_parallel" || mode == "model_parallel"))
    what = (mode == "pipeline_parallel" ? "pipeline parallel" : "model parallel") +
           (stages > 0 ? ", " + plural(stages, "stage") : std::string());
  else if (program == "run_pipeline")
    what = "run_pipeline" + (mode.empty() ? std::string() : " (" + mode + ")");
  else if (program == "train")
    what = "single process";
  else
    what = program + (world_size > 1 ? ", world " + std::to_string(world_size) : "");
  std::string batch = "batch " + std::to_string(batch_size);
  if (microbatches > 1) batch += " in " + std::to_string(microbatches) + " micro-batches";
  return what + "\n" + batch;
}

std::string Run::describe() const {
  std::string text = describe_two_lines();
  return text.replace(text.find('\n'), 1, ", ");
}

std::vector<int64_t> Run::epochs() const {
  std::vector<int64_t> out;
  for (const auto& r : records)
    if (out.empty() || out.back() != r.epoch) out.push_back(r.epoch);
  return out;
}

Run load_run(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + " does not exist: check the path, or run the program that writes it");
  Run run;
  run.source = path;
  run.files = fs::is_directory(path, ec) ? json_files_in(path) : std::vector<std::string>{path};
  std::vector<FileContents> contents;
  for (const auto& f : run.files) contents.push_back(read_file(f));
  for (const auto& f : contents) check_same_run(contents.front(), f);
  const FileContents& first = contents.front();
  run.program = first.program;
  run.preset = first.preset;
  run.mode = first.mode;
  run.world_size = first.world_size;
  run.batch_size = first.batch_size;
  run.stages = first.stages;
  run.microbatches = first.microbatches;
  run.forward_tokens_per_sec = first.forward_tokens_per_sec;
  for (auto& f : contents)
    for (auto& r : f.records) run.records.push_back(std::move(r));
  std::stable_sort(run.records.begin(), run.records.end(), [](const EpochRecord& a, const EpochRecord& b) {
    return a.epoch != b.epoch ? a.epoch < b.epoch : a.rank < b.rank;
  });
  check_ranks(run);
  return run;
}

}  // namespace kit::plots
