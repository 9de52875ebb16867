// Assignment 1's training loop over the translation corpus, shared by its programs (one
// process, data parallel, pipeline): train_step (project/utils.h) on every batch.
//
// tokens/s, the kit's one definition: tokens processed / wall time of the epoch's
// training part, where tokens processed = sum over batches of B * T (input positions,
// padding included) on this process, and the training part is the loop over training
// batches (forward, backward, gradient averaging, optimizer step), not validation.
// Data parallel: each rank reports its own tokens/s; the figures sum them over ranks.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "kit/config.h"
#include "model/gpt2.h"
#include "project/utils.h"

namespace kit {

struct EpochMetrics {
  int64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  int64_t batches = 0;
  int64_t tokens = 0;          // B * T summed over this process's training batches
  double train_time_s = 0;     // wall time of the training part
  double tokens_per_s = 0;     // tokens / train_time_s
  double train_loss = 0;       // mean of the batches' losses
  double valid_loss = 0;       // mean masked loss on the validation split (NaN if none)
  std::vector<double> batch_losses;  // every training batch's loss, in order
};
nlohmann::json to_json(const EpochMetrics& m);

// The tokenizer and the three splits as token sequences.
struct TrainingData {
  std::shared_ptr<Tokenizer> tokenizer;
  std::shared_ptr<TranslationDataset> train, valid, test;
};
// Generates the toy corpus when cfg.dir is empty, trains or loads the tokenizer, encodes.
TrainingData load_training_data(const DataConfig& cfg);

std::unique_ptr<torch::optim::AdamW> make_optimizer(torch::nn::Module& model, const TrainConfig& cfg);

// One epoch over `loader`: train_step on every batch (at most cfg.max_train_batches when
// > 0), timing only this training part. Shows progress on stderr when cfg.progress.
EpochMetrics train_epoch(const ForwardFn& forward, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                         const DataLoader& loader, int world_size, int64_t epoch, const TrainConfig& cfg,
                         int rank = 0);

// The same with another step function (e.g. the overlapped all-reduce of
// data_parallel/grad_buckets.h) in place of train_step. step returns the batch's loss.
using StepFn = std::function<double(const Batch&)>;
EpochMetrics train_epoch(const StepFn& step, torch::nn::Module& model, const DataLoader& loader, int world_size,
                         int64_t epoch, const TrainConfig& cfg, int rank = 0);

// Mean masked loss over the loader, in eval mode without gradients; restores train mode.
double evaluate(const ForwardFn& forward, torch::nn::Module& model, const DataLoader& loader);

// Writes {"run": run_info, "epochs": [...]} to path (directories created).
void write_metrics_json(const std::string& path, const std::vector<EpochMetrics>& epochs,
                        const nlohmann::json& run_info);

}  // namespace kit
