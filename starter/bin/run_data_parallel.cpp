// run_data_parallel: data-parallel training of GPT-2 (Problem 1).
//
//   ./build/run_data_parallel --world-size 2 --batch-size 128     # the kit starts 2 workers (Gloo, CPU)
//   ./build/run_data_parallel --world-size 1 --batch-size 64      # the single-device baseline
//   srun -n 4 ./build/run_data_parallel --backend nccl ...         # one rank per srun task
//   torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set per process
//   ./build/run_data_parallel --world-size 2 --bucket-mb 1         # all-reduce overlapped with backward
//
// Without RANK or an srun step in the environment the program is the launcher: it serves
// the rendezvous on a free port (or --port), starts --world-size copies of itself, waits
// for them and prints a summary. Each copy is one rank: it joins the process group, takes
// its partition of the training set and trains with averaged gradients.
//
// Each rank writes its per-epoch metrics to --out, where {rank} and {world} are replaced
// (a path without {rank} gets ".rank<r>" before its extension).
//
// --save-grads DIR --steps K (used by the tests): instead of training epochs, take K
// steps and write DIR/rank<r>.pt (torch::pickle_save of a dict): "grad/<name>" = the
// averaged gradient of the first step, "param/<name>" = the parameters after K steps,
// "indices" = (K, per-rank batch) example indices, "partition" = every example index of
// this rank's partition, "allreduce_bytes_step0" and
// "allreduce_calls_step0" = what the first step all-reduced.
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "data_parallel/dataset.h"
#include "data_parallel/grad_buckets.h"
#include "dist/dist.h"
#include "dist/launch.h"
#include "project/run_data_parallel.h"
#include "train/loop.h"

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


// Every rank must run the same number of steps, or one of them waits forever in an
// all-reduce the others never join. Equal partitions guarantee it; check anyway.
void check_same_on_all_ranks(int64_t value, const std::string& what) {
  auto t = torch::tensor({static_cast<double>(value), -static_cast<double>(value)}, torch::kFloat64)
               .to(kit::dist::device());
  kit::dist::all_reduce(t, kit::dist::ReduceOp::MAX);
  t = t.cpu();
  const double hi = t[0].item<double>(), lo = -t[1].item<double>();
  if (hi != lo)
    throw kit::Error("the ranks disagree on the " + what + " (from " + std::to_string(static_cast<int64_t>(lo)) +
                     " to " + std::to_string(static_cast<int64_t>(hi)) +
                     "): every rank must take the same number of steps, give them equal partitions");
}

// Mean validation loss over all ranks' validation partitions.
double global_validation_loss(const kit::ForwardFn& forward, torch::nn::Module& model, const kit::DataLoader& valid) {
  double local = valid.num_examples() > 0 ? kit::evaluate(forward, model, valid) : 0.0;
  auto t = torch::tensor({local * valid.num_examples(), static_cast<double>(valid.num_examples())}, torch::kFloat64)
               .to(kit::dist::device());
  kit::dist::all_reduce(t);
  t = t.cpu();
  const double n = t[1].item<double>();
  return n > 0 ? t[0].item<double>() / n : std::nan("");
}


void save_step_file(const std::string& dir, int rank, const c10::Dict<std::string, torch::Tensor>& dict) {
  kit::write_file_atomically(dir + "/rank" + std::to_string(rank) + ".pt", torch::pickle_save(dict), "--save-grads");
}

// --save-grads: K steps through the same step as training, recording what the tests compare.
void run_saved_steps(const DpOptions& o, int rank, int world_size, kit::GPT2& model, torch::optim::Optimizer& opt,
                     const kit::DataLoader& loader, const kit::StepFn& step) {
  if (o.steps < 1 || o.steps > loader.num_batches())
    throw kit::Error("--steps " + std::to_string(o.steps) + " must be in 1.." + std::to_string(loader.num_batches()) +
                     " (the batches in this rank's partition)");
  c10::Dict<std::string, torch::Tensor> out;
  std::vector<torch::Tensor> indices;
  kit::dist::reset_counters();
  for (int64_t k = 0; k < o.steps; ++k) {
    kit::Batch batch = loader.batch(k);
    step(batch);
    indices.push_back(torch::tensor(batch.indices, torch::kInt64));
    if (k == 0) {
      const auto c = kit::dist::counters();
      out.insert("allreduce_bytes_step0", torch::tensor(c.all_reduce_bytes, torch::kInt64));
      out.insert("allreduce_calls_step0", torch::tensor(c.all_reduce_calls, torch::kInt64));
      for (const auto& p : model->named_parameters())
        out.insert("grad/" + p.key(), p.value().grad().defined() ? p.value().grad().detach().cpu().clone()
                                                                 : torch::Tensor());
    }
  }
  for (const auto& p : model->named_parameters()) out.insert("param/" + p.key(), p.value().detach().cpu().clone());
  out.insert("indices", torch::stack(indices));
  // The whole partition, not only the examples the K steps used: partitions that overlap
  // where those steps did not look must still be caught.
  std::vector<int64_t> partition;
  for (int64_t k = 0; k < loader.num_batches(); ++k) {
    const auto& idx = loader.batch(k).indices;
    partition.insert(partition.end(), idx.begin(), idx.end());
  }
  out.insert("partition", torch::tensor(partition, torch::kInt64));
  out.insert("rank", torch::tensor(static_cast<int64_t>(rank)));
  out.insert("world_size", torch::tensor(static_cast<int64_t>(world_size)));
  save_step_file(o.save_grads, rank, out);
}

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
  check_same_on_all_ranks(train.num_batches(), "number of training batches per epoch");
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
    run_saved_steps(o, rank, W, model, *optimizer, train, step);
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
    m.valid_loss = global_validation_loss(forward, *model, valid);
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

// After a successful run: the Problem 1.3 numbers. The first epoch is dropped when there
// are more (warm-up); training time is averaged over ranks, tokens/s summed over ranks.
void print_summary(const DpOptions& o, int W) {
  std::vector<nlohmann::json> ranks;
  for (int r = 0; r < W; ++r) {
    std::ifstream f(kit::rank_path(o.run.out, r, W));
    if (!f) return;
    ranks.push_back(nlohmann::json::parse(f));
  }
  const size_t n_epochs = ranks[0]["epochs"].size();
  if (n_epochs == 0) return;
  const size_t first = n_epochs > 1 ? 1 : 0;
  double time = 0, tps = 0;
  for (size_t e = first; e < n_epochs; ++e) {
    for (const auto& r : ranks) {
      time += r["epochs"][e]["training_time"].get<double>() / W;
      tps += r["epochs"][e]["tokens_per_sec"].get<double>();
    }
  }
  const double k = static_cast<double>(n_epochs - first);
  std::cout << "world size " << W << ": training time " << time / k << " s per epoch (mean over ranks), "
            << tps / k << " tokens/s (sum over ranks), over " << (n_epochs - first) << " epoch(s)"
            << (first ? " after the first" : "") << "\nmetrics: " << kit::rank_path(o.run.out, 0, W)
            << (W > 1 ? " ..." : "") << std::endl;
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
  if (o.save_grads.empty())
    print_summary(o, W);
  else
    std::cout << "saved " << W << " rank file(s) in " << o.save_grads << std::endl;
  return 0;
}

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
