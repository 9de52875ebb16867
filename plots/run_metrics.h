// Reading the metrics JSON that the training programs write, one file per process:
//   {"run": {"program", "preset", "world_size", "batch_size", "mode"?, ...},
//    "epochs": [{"epoch", "rank", "world_size", "training_time", "tokens_per_sec",
//                "train_loss", "batch_losses"?, ...}, ...]}
// A run is one file (train, run_pipeline, a world-1 data-parallel run) or a directory of
// per-rank files (run_data_parallel writes rank0.json, rank1.json, ... side by side).
// Everything the figures rely on is checked here, so a bad file stops with a message
// naming the file and the field instead of a figure that is quietly wrong.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kit::plots {

// One process's numbers for one epoch.
struct EpochRecord {
  int64_t epoch = 0;
  int rank = 0;
  double training_time = 0;   // seconds of training (validation excluded), this process
  double tokens_per_sec = 0;  // this process's tokens / training_time
  double train_loss = 0;      // NaN when the file has null
  std::vector<double> batch_losses;  // this process's loss of every batch, in order (may be empty)
  std::string file;           // where it came from, for messages
};

struct Run {
  std::string source;   // the path the user gave (file or directory)
  std::vector<std::string> files;
  std::string program;  // train | run_data_parallel | run_pipeline | ...
  std::string preset;   // "" when the file has none
  std::string mode;     // run_pipeline's mode; "" when absent
  int world_size = 1;
  int64_t batch_size = 0;  // the global batch
  int64_t stages = 0;        // run_pipeline: pipeline stages (0 when absent)
  int64_t microbatches = 0;  // run_pipeline: micro-batches per batch (0 when absent)
  // run_pipeline: tokens/s of each epoch's validation, forward only (the part the pipe
  // overlaps), as (epoch, tokens/s); empty when absent.
  std::vector<std::pair<int64_t, double>> forward_tokens_per_sec;
  std::vector<EpochRecord> records;  // every (epoch, rank), sorted by epoch then rank

  // "data parallel, world 2, batch 128": for legends, tables and axis labels.
  std::string describe() const;
  // The same in two lines, for a label under a bar:
  // "pipeline parallel, 2 stages" / "batch 32 in 4 micro-batches".
  std::string describe_two_lines() const;
  std::vector<int64_t> epochs() const;  // the distinct epoch numbers, ascending
};

// Loads a run from a file or a directory of per-rank *.json files. Throws kit::Error
// naming the file (and field) when a file is missing, not JSON, lacks a field, or when
// the files do not form one run: different programs/world sizes, a rank missing or
// present twice, an epoch some rank lacks.
Run load_run(const std::string& path);

}  // namespace kit::plots
