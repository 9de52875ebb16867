// The command-line scaffolding of every program: the flags they share (each knob with one
// name and one default, from kit/config.h), errors as exit codes, and starting the ranks of a
// multi-process program.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "dist/launch.h"
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

// The presets' names, comma-separated ("tiny, cpu-small, ..."), for a --preset help text.
std::string preset_list();

// --preset,--model: "Model preset: <preset_list()>", with its default shown.
void add_preset_option(CLI::App& app, RunOptions& opts);

// The options of the programs that train GPT-2 on synthetic tokens across processes
// (train_parallel); each
// program's options derive from it and add their own.
struct SyntheticOptions {
  RunOptions run;
  int64_t n_layer = 0;  // 0: the preset's
  int64_t vocab = 1000;
  int64_t steps = 10;
  int64_t warmup = -1;  // -1: 1, or 0 when there is a single step (app/run.h: warmup_of)
  std::string backend = "gloo";
  int port = 0;
  std::string precision = "fp32";  // fp32 or bf16 (kit/precision.h)
  explicit SyntheticOptions(const std::string& out) {
    run.train.batch_size = 8;
    run.data.seq_len = 64;
    run.out = out;
  }
};

// The help texts that differ between those programs.
struct SyntheticHelp {
  std::string n_layer = "Transformer blocks (default: the preset's)";
  std::string batch_size = "Rows per batch";
  std::string vocab = "Vocabulary of the synthetic tokens";
  std::string seq_len = "Tokens per row";
  std::string steps = "Batches, one AdamW step each";
};

// --preset --n-layer --dropout --batch-size --seq-len --vocab-size --steps --warmup --precision, in this order.
void add_model_options(CLI::App& app, SyntheticOptions& o, const SyntheticHelp& help);

// --lr --seed --threads --backend --port --out --no-progress of the same programs.
void add_process_options(CLI::App& app, SyntheticOptions& o);

// --micro-batches m (also --microbatches, and --chunks: GPipe's word for them) of the programs
// that cut a batch into micro-batches.
void add_microbatches_option(CLI::App& app, int64_t& microbatches, const std::string& help);

// A flag this program does not take because it means something else here than in the other
// programs: given, it fails to parse with `why` (which names the flag to use instead), and it
// is kept out of --help.
void refuse_option(CLI::App& app, const std::string& name, const std::string& why);

// --trace PATTERN of the programs that run a pipeline: this rank's `what` as Chrome trace-event
// JSON, one file per rank; `shows`: what its tracks and events are.
void add_trace_option(CLI::App& app, std::string& trace, const std::string& what, const std::string& shows);

// The preset with the flags' overrides applied (kit::Error for an unknown preset).
GPT2Config model_config(const RunOptions& opts);

// Runs a program's body: kit::Error and other exceptions become "error: ..." on stderr
// and exit code 1 (never an abort); CLI11 parse errors print usage and their own code.
int guarded_main(int argc, char** argv, CLI::App& app, const std::function<int()>& body);

// The body of a program that runs as several processes (run_data_parallel): with no
// launcher in the environment the program is the launcher (`launcher()` starts the ranks); under srun, torchrun-style
// variables or the kit's own launcher it is one rank (`worker(world)`). A rank that lost a
// peer exits with dist::kExitPeerLost, so the launcher names the rank that failed first;
// another kit::Error exits with 1, naming this rank. world_size_flag: the --world-size the
// user gave (it must then agree with the launcher's), or 0.
int launcher_or_worker(int world_size_flag, const std::function<int()>& launcher,
                       const std::function<int(const WorldInfo& world)>& worker);

// The file of one rank of a multi-process run: {rank} and {world} in `pattern` replaced,
// and a pattern without {rank} gets ".rank<r>" before its extension (out.json -> out.rank1.json).
std::string rank_path(const std::string& pattern, int rank, int world_size);

// One rank's metrics (`json_text`, a JSON dump) to rank_path(pattern, rank, world_size),
// written with write_file_atomically (`flag`: the option that chose the pattern).
void write_rank_json(const std::string& pattern, int rank, int world_size, const std::string& json_text,
                     const std::string& flag = "--out");

// The launcher of a multi-process program (launcher_or_worker's `launcher`): serves the
// rendezvous on `port` (0: a free one). With world_size 1 it runs `single_rank()` in this
// process, as a client of that store (MASTER_ADDR, MASTER_PORT and KIT_STORE_HOSTED set, as a
// worker gets them); otherwise it starts world_size copies of this program as the ranks and
// joins them (a failed rank stops the others and is named). Prints "starting <W> <what>,
// rendezvous at <address>:<port>".
int serve_and_start_ranks(int world_size, int port, const std::string& what, const std::function<int()>& single_rank);

// The whole main of a multi-process program whose ranks all run `rank_main`: under srun,
// torchrun or the kit's launcher this process is one rank (launcher_or_worker, with
// world_size_flag as there); otherwise it is the launcher: `check()` first (a bad flag fails
// before any process starts), then serve_and_start_ranks(world_size, port, what, ...); with
// world_size 1 the one rank runs in this process as WorldInfo{} (rank 0 of 1, launcher "none").
int run_ranks(int world_size_flag, int world_size, int port, const std::string& what,
              const std::function<void()>& check, const std::function<int(const WorldInfo& world)>& rank_main);

// Writes `bytes` to `path` through a temporary file and a rename, so a reader never sees a
// half-written file under the final name; creates the parent directories. kit::Error naming
// the path and `flag` (the option that chose it) when it cannot be written.
void write_file_atomically(const std::string& path, const std::vector<char>& bytes, const std::string& flag);

}  // namespace kit
