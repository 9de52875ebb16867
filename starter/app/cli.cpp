#include "app/cli.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "dist/dist.h"
#include "kit/errors.h"

namespace kit {
namespace {

constexpr const char* kFillIn = "fill in this function in the starter code, then rebuild";

// The whole message in one write, so that the lines of ranks failing at the same moment
// (every rank reaching the same unimplemented function) do not interleave.
void print_error(const std::string& who, const std::string& what, const std::string& hint = "") {
  const std::string text = who + ": " + what + "\n" + (hint.empty() ? "" : "  (" + hint + ")\n");
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

std::string preset_list() {
  std::string presets;
  for (const auto& n : gpt2_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  return presets;
}

void add_preset_option(CLI::App& app, RunOptions& o) {
  app.add_option("--preset,--model", o.preset, "Model preset: " + preset_list())->capture_default_str();
}

void add_model_options(CLI::App& app, SyntheticOptions& o, const SyntheticHelp& help) {
  add_preset_option(app, o.run);
  app.add_option("--n-layer", o.n_layer, help.n_layer);
  app.add_option("--dropout", o.run.dropout, "Dropout probability (default: the preset's)");
  app.add_option("--batch-size", o.run.train.batch_size, help.batch_size)->capture_default_str();
  app.add_option("--seq-len", o.run.data.seq_len, help.seq_len)->capture_default_str();
  app.add_option("--vocab-size", o.vocab, help.vocab)->capture_default_str();
  app.add_option("--steps", o.steps, help.steps)->capture_default_str();
  app.add_option("--warmup", o.warmup, "The first W of the --steps batches are not timed (default 1; 0 when "
                                       "--steps is 1)");
  app.add_option("--precision", o.precision,
                 "fp32, or bf16: every forward pass under bfloat16 autocast (the matrix products in bf16; the loss "
                 "and the optimizer state in fp32, and with AdamW the weights and gradients too; the ZeRO stages "
                 "keep bf16 weights and gradients beside an fp32 master copy; kit/precision.h)")
      ->capture_default_str();
}

void add_run_options(CLI::App& app, RunOptions& o) {
  add_preset_option(app, o);
  app.add_option("--dropout", o.dropout, "Dropout probability (default: the preset's, 0.1)");
  app.add_option("--data-dir,--dataset", o.data.dir,
                 "Corpus directory with train/valid/test.tsv (the toy corpus is generated there if absent)")
      ->capture_default_str();
  app.add_option("--n-train", o.data.n_train, "Training pairs to use")->capture_default_str();
  app.add_option("--n-valid", o.data.n_valid, "Validation pairs to use")->capture_default_str();
  app.add_option("--n-test", o.data.n_test, "Test pairs to use")->capture_default_str();
  app.add_option("--vocab-size", o.data.vocab_size, "SentencePiece vocabulary size")->capture_default_str();
  app.add_option("--seq-len", o.data.seq_len, "Model input length (examples are seq-len + 1 tokens)")
      ->capture_default_str();
  app.add_option("--batch-size", o.train.batch_size, "Global batch size")->capture_default_str();
  app.add_option("--epochs,--n-epochs", o.train.epochs, "Training epochs")->capture_default_str();
  app.add_option("--lr,--learning-rate", o.train.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--seed", o.train.seed, "Seed for model initialisation and dropout")->capture_default_str();
  app.add_option("--threads", o.train.threads, "Intra-op threads per process")->capture_default_str();
  app.add_option("--max-batches", o.train.max_train_batches, "Stop each epoch after this many batches (0: all)")
      ->capture_default_str();
  app.add_flag("!--no-progress", o.train.progress, "Do not draw the progress line");
  app.add_option("--out", o.out, "Metrics JSON path");
}

GPT2Config model_config(const RunOptions& o) {
  GPT2Config cfg = gpt2_preset(o.preset);
  if (o.dropout >= 0) {
    if (o.dropout >= 1) throw Error("--dropout must be in [0, 1) (got " + std::to_string(o.dropout) + ")");
    cfg.dropout = o.dropout;
  }
  return cfg;
}

namespace {
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}
}  // namespace

std::string rank_path(const std::string& pattern, int rank, int world_size) {
  std::string p = replace_all(pattern, "{world}", std::to_string(world_size));
  if (p.find("{rank}") != std::string::npos) return replace_all(p, "{rank}", std::to_string(rank));
  std::filesystem::path path(p);
  return (path.parent_path() / (path.stem().string() + ".rank" + std::to_string(rank) + path.extension().string()))
      .string();
}

void write_file_atomically(const std::string& path, const std::vector<char>& bytes, const std::string& flag) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw Error("cannot write " + tmp + ": check that " + flag + " names a writable directory");
  }
  std::filesystem::rename(tmp, target);
}

void write_rank_json(const std::string& pattern, int rank, int world_size, const std::string& json_text,
                     const std::string& flag) {
  const std::string text = json_text + "\n";
  write_file_atomically(rank_path(pattern, rank, world_size), std::vector<char>(text.begin(), text.end()), flag);
}

int serve_and_start_ranks(int world_size, int port, const std::string& what, const std::function<int()>& single_rank) {
  RendezvousServer server(choose_port(port));
  const auto& rv = server.rendezvous();
  if (world_size == 1) {
    ::setenv("MASTER_ADDR", rv.master_addr.c_str(), 1);
    ::setenv("MASTER_PORT", std::to_string(rv.master_port).c_str(), 1);
    ::setenv("KIT_STORE_HOSTED", "1", 1);
    return single_rank();
  }
  std::cout << "starting " << world_size << " " << what << ", rendezvous at " << rv.master_addr << ":"
            << rv.master_port << std::endl;
  std::vector<Process> procs;
  for (int r = 0; r < world_size; ++r) procs.emplace_back(r, world_size, rv);
  for (auto& p : procs) p.start();
  join_all(procs);  // a failed rank stops the others and is named
  return 0;
}

int run_ranks(int world_size_flag, int world_size, int port, const std::string& what,
              const std::function<void()>& check, const std::function<int(const WorldInfo& world)>& rank_main) {
  return launcher_or_worker(
      world_size_flag,
      [&] {
        if (check) check();
        return serve_and_start_ranks(world_size, port, what, [&] { return rank_main(WorldInfo{}); });
      },
      rank_main);
}

int guarded_main(int argc, char** argv, CLI::App& app, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return body();
  } catch (const NotImplemented& e) {
    print_error("error", e.what(), kFillIn);
  } catch (const std::exception& e) {
    print_error("error", e.what());
  }
  return 1;
}

void add_process_options(CLI::App& app, SyntheticOptions& o) {
  app.add_option("--lr,--learning-rate", o.run.train.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--seed", o.run.train.seed, "Seed of the model, the synthetic batches and dropout")
      ->capture_default_str();
  app.add_option("--threads", o.run.train.threads, "Intra-op threads per process")->capture_default_str();
  app.add_option("--backend", o.backend, "gloo (CPU) or nccl (one GPU per rank)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  app.add_option("--port", o.port, "Rendezvous port when the kit starts the ranks (default: MASTER_PORT if set, "
                                   "else a free port)");
  app.add_option("--out", o.run.out, "Metrics JSON per rank ({rank}, {world} replaced; \"\": none)")
      ->capture_default_str();
  app.add_flag("!--no-progress", o.run.train.progress, "Do not print the loss of every step");
}

void refuse_option(CLI::App& app, const std::string& name, const std::string& why) {
  app.add_option_function<std::string>(name, [name, why](const std::string&) { throw CLI::ValidationError(name, why); })
      ->group("");
}

void add_microbatches_option(CLI::App& app, int64_t& microbatches, const std::string& help) {
  app.add_option("--chunks,--microbatches,--micro-batches", microbatches, help)->capture_default_str();
}

void add_trace_option(CLI::App& app, std::string& trace, const std::string& what, const std::string& shows) {
  app.add_option("--trace", trace,
                 "Write this rank's " + what + " as Chrome trace-event JSON here, for https://ui.perfetto.dev or "
                 "chrome://tracing ({rank} and {world} replaced, else .rank<r> added; the directory must exist): " +
                     shows);
}

int launcher_or_worker(int world_size_flag, const std::function<int()>& launcher,
                       const std::function<int(const WorldInfo& world)>& worker) {
  const WorldInfo world = detect_world();
  if (!world.is_worker()) return launcher();
  if (world_size_flag > 0 && world_size_flag != world.world_size)
    throw Error("--world-size " + std::to_string(world_size_flag) + " but " + world.launcher_name() + " started " +
                std::to_string(world.world_size) + " ranks: drop --world-size or make them agree");
  // dist::init_process_group(backend, rank, world_size) reads the rendezvous from the
  // environment; under srun without MASTER_ADDR/MASTER_PORT it is the one detect_world
  // derived (the step's first node, 20000 + job id % 20000). Set values stay as they are.
  ::setenv("MASTER_ADDR", world.rendezvous.master_addr.c_str(), 0);
  ::setenv("MASTER_PORT", std::to_string(world.rendezvous.master_port).c_str(), 0);
  try {
    return worker(world);
  } catch (const dist::CommError& e) {
    print_error("error", e.what());
    return dist::kExitPeerLost;
  } catch (const Error& e) {
    print_error("error (rank " + std::to_string(world.rank) + ")", e.what());
    return 1;
  } catch (const NotImplemented& e) {
    print_error("error (rank " + std::to_string(world.rank) + ")", e.what(), kFillIn);
    return 1;
  }
}

}  // namespace kit
