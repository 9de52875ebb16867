// run_data_parallel: data-parallel training of GPT-2 (Problem 1). Without RANK or an srun step
// in the environment it is the launcher: it starts --world-size copies of itself (the ranks),
// each training on its partition with averaged gradients, and prints a summary.
//
//   ./build/run_data_parallel --world-size 2 --batch-size 128     # the kit starts 2 workers (Gloo, CPU)
//   ./build/run_data_parallel --world-size 1 --batch-size 64      # the single-device baseline
//   srun -n 4 ./build/run_data_parallel --backend nccl ...         # one rank per srun task
//   ./build/run_data_parallel --world-size 2 --bucket-mb 1         # all-reduce overlapped with backward
//
// Options: --help; --out's {rank}, {world}: app/cli.h (rank_path); what --save-grads DIR
// --steps K writes (the tests' record): data_parallel/across_ranks.h (record_steps).
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "data_parallel/across_ranks.h"
#include "data_parallel/dataset.h"
#include "data_parallel/grad_buckets.h"
#include "dist/dist.h"
#include "dist/launch.h"
#include "kit/threads.h"
#include "model/gpt2.h"
#include "project/loop.h"
#include "project/run_data_parallel.h"

namespace {

struct DpOptions {
  kit::RunOptions run;
  int world_size = 2;
  std::string backend = "gloo";
  int port = 0;
  std::string save_grads;
  int64_t steps = 3;
  int fail_rank = -1;
  double bucket_mb = 0;  // > 0: overlapped bucketed all-reduce instead of average_gradients
  bool world_size_given = false;
};


void save_step_file(const std::string& dir, int rank, const c10::Dict<std::string, torch::Tensor>& dict) {
  kit::write_file_atomically(dir + "/rank" + std::to_string(rank) + ".pt", torch::pickle_save(dict), "--save-grads");
}

int worker_main(const DpOptions& o, const kit::WorldInfo& world);
int launcher_main(const DpOptions& o);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel training of GPT-2: each rank trains on its partition of the data with averaged "
               "gradients, and writes per-epoch metrics as JSON."};
  DpOptions o;
  o.run.out = "runs/data_parallel/world{world}/rank{rank}.json";
  kit::add_run_options(app, o.run);
  app.add_option("--world-size,--world_size", o.world_size,
                 "Number of ranks the kit starts (under srun or torchrun: taken from there)")
      ->capture_default_str();
  app.add_option("--backend", o.backend, "gloo (CPU) or nccl (one GPU per rank)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  app.add_option("--port", o.port, "Rendezvous port when the kit starts the workers (0: a free port; "
                                   "default: MASTER_PORT if set, else a free port)");
  app.add_option("--save-grads", o.save_grads,
                 "Test mode: take --steps steps and save each rank's gradients and parameters in this directory");
  app.add_option("--steps", o.steps, "Steps to take with --save-grads")->capture_default_str();
  app.add_option("--bucket-mb", o.bucket_mb,
                 "Overlap the gradient all-reduce with backward in buckets of this many MiB "
                 "(data_parallel/grad_buckets.h); 0: average_gradients after backward")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--fail-rank", o.fail_rank, "Make this rank fail on purpose (tests)")->group("");
  return kit::guarded_main(argc, argv, app, [&] {
    o.world_size_given = app.count("--world-size") > 0;
    // run_data_parallel's worker checks --world-size against the launcher's itself.
    return kit::launcher_or_worker(
        0, [&] { return launcher_main(o); }, [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}

namespace {

int worker_main(const DpOptions& o, const kit::WorldInfo& world) {
  const int rank = world.rank, W = world.world_size;
  if (o.world_size_given && o.world_size != W)
    throw kit::Error("--world-size " + std::to_string(o.world_size) + " but " + world.launcher_name() + " started " +
                     std::to_string(W) + " ranks: drop --world-size or make them agree");

  kit::setup(rank, W, o.backend);  // Problem 1.2
  kit::set_threads(o.run.train.threads);

  // Rank 0 generates the corpus and trains the tokenizer when they are missing (under
  // srun or torchrun; the kit's launcher has done it already); the others wait and then
  // read its files, so no two processes write them at once.
  kit::TrainingData data;
  if (rank == 0) data = kit::load_training_data(o.run.data);
  kit::dist::barrier();
  if (rank != 0) data = kit::load_training_data(o.run.data);

  const torch::Device device = kit::dist::device();
  auto model = kit::build_model(kit::model_config(o.run), data.tokenizer->vocab_size(), o.run.data.seq_len,
                                o.run.train.seed);
  model->to(device);
  // Seeding alone is not enough to guarantee equal weights (a rank may have consumed
  // random numbers differently, or run on another machine): rank 0's weights win.
  kit::dist::broadcast_parameters(*model, 0);
  // Dropout: different masks per rank, as different rows of one big batch would get.
  torch::manual_seed(o.run.train.seed + 1 + static_cast<uint64_t>(rank));
  auto optimizer = kit::make_optimizer(*model, o.run.train);

  auto to_device = [device](const std::vector<kit::Example>& ex) {
    kit::Batch b = kit::collate(ex);
    if (device != torch::Device(torch::kCPU)) {
      b.input = b.input.to(device);
      b.labels = b.labels.to(device);
      b.mask = b.mask.to(device);
    }
    return b;
  };
  kit::DataLoader train = kit::partition_dataset(rank, W, data.train, o.run.train.batch_size, to_device);  // 1.1
  kit::DataLoader valid = kit::partition_dataset(rank, W, data.valid, o.run.train.batch_size, to_device);
  kit::check_same_on_all_ranks(train.num_batches(), "number of training batches per epoch");
  auto forward = [&](const torch::Tensor& x) { return model->forward(x); };
  std::unique_ptr<kit::GradBuckets> buckets;
  if (o.bucket_mb > 0) buckets = std::make_unique<kit::GradBuckets>(*model, static_cast<int64_t>(o.bucket_mb * (1 << 20)));
  kit::StepFn step = [&](const kit::Batch& b) {
    return buckets ? kit::bucketed_train_step(forward, *optimizer, *buckets, b)
                   : kit::train_step(forward, *model, *optimizer, b, W);  // Problem 1.2
  };

  if (rank == o.fail_rank)
    throw kit::Error("rank " + std::to_string(rank) + " fails on purpose (--fail-rank " + std::to_string(rank) + ")");

  if (!o.save_grads.empty()) {
    save_step_file(o.save_grads, rank, kit::record_steps(o.steps, rank, W, *model, train, step));
    kit::dist::destroy_process_group();
    return 0;
  }

  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << world.launcher_name() << ", " << o.backend << "): model "
              << model->config().name << ", " << kit::count_parameters(*model) << " parameters; "
              << train.num_examples() << " training examples per rank, " << train.num_batches() << " batches of "
              << train.batch_size() << " per rank"
              << (buckets ? "; gradients all-reduced in " + std::to_string(buckets->num_buckets()) +
                                " buckets during backward"
                          : std::string())
              << std::endl;
  kit::TrainConfig tc = o.run.train;
  tc.progress = tc.progress && rank == 0;
  std::vector<kit::EpochMetrics> epochs;
  for (int64_t e = 1; e <= tc.epochs; ++e) {
    auto m = kit::train_epoch(step, *model, train, W, e, tc, rank);
    m.valid_loss = kit::global_validation_loss(forward, *model, valid);
    if (rank == 0)
      std::cout << "epoch " << e << "  rank 0: train loss " << m.train_loss << "  validation loss " << m.valid_loss
                << "  time " << m.train_time_s << " s  " << m.tokens_per_s << " tokens/s" << std::endl;
    epochs.push_back(m);
  }
  nlohmann::json info = {{"program", "run_data_parallel"},
                         {"preset", o.run.preset},
                         {"world_size", W},
                         {"rank", rank},
                         {"backend", o.backend},
                         {"bucket_mb", o.bucket_mb},
                         {"launcher", world.launcher_name()},
                         {"batch_size", o.run.train.batch_size},
                         {"per_rank_batch_size", train.batch_size()},
                         {"lr", o.run.train.lr},
                         {"threads", o.run.train.threads},
                         {"seq_len", o.run.data.seq_len},
                         {"max_batches", o.run.train.max_train_batches}};
  kit::write_metrics_json(kit::rank_path(o.run.out, rank, W), epochs, info);
  kit::dist::destroy_process_group();
  return 0;
}

int launcher_main(const DpOptions& o) {
  const int W = o.world_size;
  if (W < 1) throw kit::Error("--world-size must be at least 1 (got " + std::to_string(W) + ")");
  if (o.run.train.batch_size % W != 0)
    throw kit::Error("--batch-size " + std::to_string(o.run.train.batch_size) + " is not divisible by --world-size " +
                     std::to_string(W) + ": the global batch is split equally across the ranks");
  kit::RendezvousServer server(kit::choose_port(o.port));  // first: a busy port fails fast
  // Generate the corpus and train the tokenizer (when missing) once, here, so the
  // workers only read them and never wait for each other's data preparation.
  kit::Tokenizer::train_or_load(o.run.data, kit::load_corpus(o.run.data).train);
  std::cout << "starting " << W << " worker" << (W > 1 ? "s" : "") << " (" << o.backend << "), rendezvous at "
            << server.rendezvous().master_addr << ":" << server.rendezvous().master_port << std::endl;
  kit::launch_workers(W, server.rendezvous());  // Problem 1.2
  std::vector<std::string> rank_files;
  for (int r = 0; r < W; ++r) rank_files.push_back(kit::rank_path(o.run.out, r, W));
  if (o.save_grads.empty())
    kit::print_world_summary(rank_files);
  else
    std::cout << "saved " << W << " rank file(s) in " << o.save_grads << std::endl;
  return 0;
}

}  // namespace
