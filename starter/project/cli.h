// Command-line flags shared by every training program (train, run_data_parallel,
// run_pipeline), so each knob has one name and one default (from kit/config.h).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "kit/config.h"

namespace kit {

struct RunOptions {
  std::string preset = "cpu-small";
  double dropout = -1;  // < 0: the preset's
  DataConfig data;
  TrainConfig train;
  std::string out;      // metrics JSON path ("" = program's default)
};

// --preset --dropout --data-dir --n-train --n-valid --n-test --vocab-size --seq-len
// --batch-size --epochs --lr --seed --threads --max-batches --no-progress --out
void add_run_options(CLI::App& app, RunOptions& opts);

// The preset with the flags' overrides applied (kit::Error for an unknown preset).
GPT2Config model_config(const RunOptions& opts);

// Runs a program's body: kit::Error and other exceptions become "error: ..." on stderr
// and exit code 1 (never an abort); CLI11 parse errors print usage and their own code.
int guarded_main(int argc, char** argv, CLI::App& app, const std::function<int()>& body);

// The file of one rank of a multi-process run: {rank} and {world} in `pattern` replaced,
// and a pattern without {rank} gets ".rank<r>" before its extension (out.json -> out.rank1.json).
std::string rank_path(const std::string& pattern, int rank, int world_size);

// Writes `bytes` to `path` through a temporary file and a rename, so a reader never sees a
// half-written file under the final name; creates the parent directories. kit::Error naming
// the path and `flag` (the option that chose it) when it cannot be written.
void write_file_atomically(const std::string& path, const std::vector<char>& bytes, const std::string& flag);

}  // namespace kit
