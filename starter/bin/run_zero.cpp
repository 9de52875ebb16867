// run_zero: GPT-2 trained with data parallelism across processes (Problem 5), with the
// optimizer replicated (plain AdamW) or sharded (ZeRO stage 1 or 2), or the parameters too
// (stage 3, FSDP), and the memory each rank holds counted.
//
//   ./build/run_zero --world-size 2 --optimizer zero1                  # 2 Gloo processes, ZeRO-1
//   ./build/run_zero --world-size 2 --optimizer adamw --preset cpu-base # plain data parallelism
//   ./build/run_zero --world-size 2 --optimizer zero3                  # FSDP (Problem 5.5)
//   ./build/run_zero --world-size 1                                    # the single-process reference
//   srun -n 2 ./build/run_zero --backend nccl ...                       # one rank per task
//
// How it starts its ranks, its synthetic batches and every field it writes: README.md in
// this folder (run_zero); the options: --help.
#include <torch/torch.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/run.h"
#include "dist/dist.h"
#include "kit/memory.h"
#include "kit/precision.h"
#include "model/gpt2.h"
#include "train/loss.h"
#include "zero/data_parallel_optimizer.h"

namespace {

struct ZeroRunOptions : kit::SyntheticOptions {
  ZeroRunOptions() : SyntheticOptions("runs/zero/{world}/rank{rank}.json") {}
  int world_size = 2;
  double weight_decay = 1e-2;
  std::string optimizer = "zero1";
};

// Every check that needs no process: the same in the launcher and in each worker (srun).
void check_options(const ZeroRunOptions& o, int world_size) {
  if (kit::zero::zero_stage_of(o.optimizer) < 0)
    throw kit::Error("--optimizer " + o.optimizer + " is not one of adamw, zero1, zero2, zero3");
  if (world_size < 1) throw kit::Error("--world-size must be at least 1 (got " + std::to_string(world_size) + ")");
  kit::check_synthetic_options(o);
  if (o.weight_decay < 0) throw kit::Error("--weight-decay must not be negative");
  kit::check_model_fits(kit::synthetic_config(o), o.run.data.seq_len, o.vocab);
}

int worker_main(const ZeroRunOptions& o, const kit::WorldInfo& me);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel training of GPT-2 across processes with plain AdamW (every rank holds all of the "
               "optimizer state) or ZeRO stage 1 / 2 (the state, and at stage 2 the gradients, sharded across the "
               "ranks) or stage 3 (FSDP: the parameters too); counts each rank's parameter, gradient, "
               "optimizer-state and activation bytes."};
  ZeroRunOptions o;
  app.add_option("--world-size,--world_size", o.world_size,
                 "Data-parallel ranks n the kit starts (under srun or torchrun: taken from there)")
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer,
                 "adamw (plain data parallelism: all-reduce, then kit::AdamW, torch::optim::AdamW's step multi-tensor), zero1 (ZeroAdamW stage 1: "
                 "optimizer state sharded), zero2 (stage 2: gradients sharded too) or zero3 (kit::zero::Fsdp, stage 3: "
                 "parameters sharded too, gathered unit by unit)")
      ->capture_default_str();
  kit::SyntheticHelp help;
  help.batch_size = "Rows per rank and step (each rank runs its own rows: the global batch is n times this)";
  help.steps = "Batches, one optimizer step each";
  kit::add_model_options(app, o, help);
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  kit::add_process_options(app, o);
  app.footer(
      "Metrics per rank (--out): tokens_per_sec (this rank's rows; sum over ranks for the job), losses, step "
      "seconds; bytes per rank counted from the tensors: parameter_bytes, gradient_bytes (kept between steps), "
      "optimizer_state_bytes, activation_bytes (the tensor bytes on the device held after the forward pass minus before it, "
      "counted by kit::memory: the kit's counting allocator on a CPU, LibTorch's caching allocator on a GPU), "
      "peak_tensor_bytes, "
      "rss_forward_rise_bytes and peak_rss_bytes (the process), "
      "beside formula_bytes (fp32 AdamW: 4P + 4P + 8P for adamw, 4P + 4P + 8P/n for zero1, 4P + 12P/n for "
      "zero2, 16P/n for zero3; with --precision bf16 the ZeRO stages train in the paper's mixed precision, bf16 "
      "parameters and gradients with an fp32 master in the optimizer (master_weights: true): 2P + 2P + 12P/n, "
      "2P + 14P/n, 16P/n, while adamw keeps fp32 weights under autocast, 16P); communication per step per rank "
      "(send_bytes for the ring, all_reduce_bytes for adamw) against all-reduce's 2(n-1)/n x 4P (zero3: "
      "3(n-1)/n x 4P; 2P in place of 4P with master weights).");
  return kit::guarded_main(argc, argv, app, [&] {
    // A bad flag fails in the launcher, before any process; with --world-size 1 the one rank
    // runs in this process.
    return kit::run_ranks(
        app.count("--world-size") > 0 ? o.world_size : 0, o.world_size, o.port,
        "data-parallel ranks (" + o.backend + ", " + o.optimizer + ")", [&] { check_options(o, o.world_size); },
        [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}

namespace {

int worker_main(const ZeroRunOptions& o, const kit::WorldInfo& me) {
  const int rank = me.rank, W = me.world_size;
  check_options(o, W);
  kit::RankRun run("run_zero", o, me);
  const torch::Device device = kit::dist::device();
  const kit::Precision precision = kit::parse_precision(o.precision);
  const kit::GPT2Config cfg = kit::synthetic_config(o);
  const kit::dist::Group world = kit::dist::world_group();
  const int64_t B = o.run.train.batch_size, T = o.run.data.seq_len;
  // Every tensor on the device from here on is counted (kit/memory.h): the model, the state,
  // the activations; on the CPU by the kit's counting allocator, on a GPU by LibTorch's own.
  kit::memory::enable_counting(device);
  const std::string not_counted = kit::memory::why_not_counted(device);
  const bool count_memory = not_counted.empty();

  const auto batches = kit::synthetic_batches(o.steps, B, T, o.vocab, o.run.train.seed, rank);  // this rank's rows
  const int stage = kit::zero::zero_stage_of(o.optimizer);
  // bf16 with ZeRO: the paper's mixed precision, bf16 parameters and gradients with the fp32
  // master and moments in the sharded optimizer (zero/zero.h). Plain AdamW keeps fp32 weights
  // and computes the forward's products in bf16 through autocast (kit/precision.h).
  const bool master_weights = kit::zero::master_weights(precision, o.optimizer);
  kit::GPT2 model = kit::build_model(cfg, o.vocab, T, o.run.train.seed);
  model->to(device, master_weights ? torch::kBFloat16 : torch::kFloat32);
  model->train();
  torch::manual_seed(o.run.train.seed + 1 + static_cast<uint64_t>(rank));  // dropout: this rank's own
  int64_t P = 0;
  for (const auto& p : model->parameters()) P += p.numel();  // the tied weight once
  kit::zero::ZeroOptions zo;
  zo.lr = o.run.train.lr;
  zo.weight_decay = o.weight_decay;
  // zero3: the model's own copies of the parameters go, the units' shards stay
  const auto optimizer = kit::zero::make_data_parallel_optimizer(o.optimizer, model->parameters(), model, world, zo);
  const int64_t parameter_bytes = optimizer->parameter_bytes();
  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << me.launcher_name() << ", " << o.backend << "): data parallel with "
              << o.optimizer << ", " << cfg.n_layer << " blocks, " << P << " parameters, " << B << " rows per rank"
              << std::endl;

  int64_t optimizer_bytes = 0, gradient_bytes = 0, activation_bytes = 0, rss_rise = 0, peak_tensor_bytes = 0,
          gradient_peak_bytes = 0;
  const kit::StepTimer& timer = run.timer();
  run.steps(batches, rank == 0, [&](int64_t k, const kit::TokenBatch& b) {
    kit::memory::reset_peak(device);
    optimizer->zero_grad();
    const torch::Tensor idx = b.idx.to(device), labels = b.labels.to(device), mask = b.mask.to(device);
    torch::Tensor loss;
    {
      const int64_t rss0 = kit::memory::rss_bytes(), held0 = kit::memory::bytes_now(device);
      {
        torch::Tensor logits;  // gone before the count below, as a temporary would be
        {
          const kit::Autocast autocast(precision, device.type());  // bf16: the forward only
          logits = optimizer->forward(idx);
        }
        loss = kit::masked_cross_entropy(logits, labels, mask);  // the loss in fp32 (train/loss.h)
      }
      activation_bytes = std::max(activation_bytes, kit::memory::bytes_now(device) - held0);
      rss_rise = std::max(rss_rise, kit::memory::rss_bytes() - rss0);
    }
    loss.backward();
    // every variant: all of this rank's gradients, before the step
    gradient_peak_bytes = std::max(gradient_peak_bytes, optimizer->gradient_bytes_held());
    optimizer->step();
    // What this rank keeps between steps (measured once every step's tensors exist).
    if (k == 0) {
      optimizer_bytes = optimizer->state_bytes();
      gradient_bytes = optimizer->gradient_bytes();
    }
    peak_tensor_bytes = std::max(peak_tensor_bytes, kit::memory::bytes_peak(device));
    return loss.item<double>();
  }, [&](int64_t k) { if (k == timer.warmup()) world.reset_counters(); });
  const kit::dist::Counters c = world.counters();  // the timed steps only

  if (!o.run.out.empty()) {
    const double per = static_cast<double>(timer.timed_steps());
    const double n = W, ring = 2.0 * (n - 1) / n;
    const double ar_bytes = static_cast<double>(c.all_reduce_bytes) / per;
    const double send_bytes = static_cast<double>(c.send_bytes) / per;
    // The ZeRO paper's bytes per rank: fp32 AdamW 4 + 4 + 8 per parameter, mixed precision
    // 2 + 2 + 12 (bf16 parameters and gradients, fp32 master and moments); /n where sharded.
    const double Pd = static_cast<double>(P), w = master_weights ? 2 : 4, K = master_weights ? 12 : 8;
    const double f_params = (stage == 3 ? w / n : w) * Pd, f_grads = (stage >= 2 ? w / n : w) * Pd,
                 f_state = (stage == 0 ? K : K / n) * Pd, p_comm = w * Pd;
    // tokens_per_sec: this rank's rows only; the job's rate is the sum over the ranks.
    nlohmann::json m = run.metrics(B * T);
    m.erase("batch_size");
    m.update({
        {"optimizer", o.optimizer}, {"zero_stage", stage}, {"n_layer", cfg.n_layer}, {"n_head", cfg.n_head},
        {"n_embd", cfg.n_embd}, {"vocab_size", cfg.vocab_size}, {"batch_size_per_rank", B},
        {"global_batch_size", B * W}, {"weight_decay", o.weight_decay},
        {"tokens_per_sec_summed_over_ranks", false},
        {"losses", run.losses()},
        {"parameter_count", P},
        {"parameter_bytes", parameter_bytes},
        {"gradient_bytes", gradient_bytes},
        {"gradient_peak_bytes", gradient_peak_bytes},
        {"optimizer_state_bytes", optimizer_bytes},
        {"activation_bytes", count_memory ? nlohmann::json(activation_bytes) : nlohmann::json()},
        {"peak_tensor_bytes", count_memory ? nlohmann::json(peak_tensor_bytes) : nlohmann::json()},
        {"activation_measure",
         count_memory ? std::string(device.is_cpu() ? "kit::memory's counting CPU allocator"
                                                    : "LibTorch's CUDA caching allocator, read by kit::memory") +
                            ": the tensor bytes held when the forward pass returned minus those held when it "
                            "started (what autograd saved for backward, plus the logits and the loss), the largest "
                            "over the steps"
                      : "not measured: " + not_counted},
        {"rss_forward_rise_bytes", rss_rise},
        {"peak_rss_bytes", kit::memory::peak_rss_bytes()},
        {"master_weights", master_weights},
        {"formula_bytes",
         {{"parameters", f_params}, {"gradients", f_grads}, {"optimizer_state", f_state},
          {"total", f_params + f_grads + f_state},
          {"accounting", master_weights ? "mixed precision: 2 + 2 + 12 bytes per parameter" : "fp32: 4 + 4 + 8 bytes per parameter"}}},
        {"all_reduce_bytes_per_step", ar_bytes},
        {"send_bytes_per_step", send_bytes},
        {"comm_bytes_per_step", stage == 0 ? ring * ar_bytes : send_bytes},
        {"comm_bytes_counted", stage != 0},
        {"formula_all_reduce_comm_bytes_per_step", ring * p_comm},
        {"formula_comm_bytes_per_step", (stage == 3 ? 1.5 : 1.0) * ring * p_comm},
        {"comm_seconds_per_step", c.comm_seconds / per}});
    run.write(m);
  }
  return 0;
}

}  // namespace
