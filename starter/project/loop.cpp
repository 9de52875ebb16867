#include "project/loop.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kit/errors.h"
#include "train/adamw.h"
#include "train/loss.h"
#include "train/progress.h"

namespace kit {

nlohmann::json to_json(const EpochMetrics& m) {
  return {{"epoch", m.epoch},
          {"rank", m.rank},
          {"world_size", m.world_size},
          {"batches", m.batches},
          {"tokens", m.tokens},
          {"training_time", m.train_time_s},
          {"tokens_per_sec", m.tokens_per_s},
          {"train_loss", m.train_loss},
          {"validation_loss", std::isnan(m.valid_loss) ? nlohmann::json(nullptr) : nlohmann::json(m.valid_loss)},
          {"batch_losses", m.batch_losses}};
}

TrainingData load_training_data(const DataConfig& cfg) {
  Corpus corpus = load_corpus(cfg);
  TrainingData d;
  d.tokenizer = std::make_shared<Tokenizer>(Tokenizer::train_or_load(cfg, corpus.train));
  d.train = std::make_shared<TranslationDataset>(corpus.train, *d.tokenizer, cfg.seq_len);
  d.valid = std::make_shared<TranslationDataset>(corpus.valid, *d.tokenizer, cfg.seq_len);
  d.test = std::make_shared<TranslationDataset>(corpus.test, *d.tokenizer, cfg.seq_len);
  return d;
}

std::unique_ptr<torch::optim::AdamW> make_optimizer(torch::nn::Module& model, const TrainConfig& cfg) {
  check_adamw_flags(cfg.lr, cfg.weight_decay);
  return std::make_unique<AdamW>(  // train/adamw.h: torch::optim::AdamW's step, multi-tensor
      model.parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(cfg.weight_decay));
}

EpochMetrics train_epoch(const ForwardFn& forward, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                         const DataLoader& loader, int world_size, int64_t epoch, const TrainConfig& cfg, int rank) {
  auto step = [&](const Batch& b) { return train_step(forward, model, optimizer, b, world_size); };
  return train_epoch(step, model, loader, world_size, epoch, cfg, rank);
}

EpochMetrics train_epoch(const StepFn& step, torch::nn::Module& model, const DataLoader& loader, int world_size,
                         int64_t epoch, const TrainConfig& cfg, int rank) {
  EpochMetrics m;
  m.epoch = epoch;
  m.rank = rank;
  m.world_size = world_size;
  int64_t n = loader.num_batches();
  if (cfg.max_train_batches > 0) n = std::min(n, cfg.max_train_batches);
  model.train();
  Progress progress("epoch " + std::to_string(epoch) + (world_size > 1 ? " rank " + std::to_string(rank) : ""), n,
                    cfg.progress && rank == 0);
  double loss_sum = 0, seconds = 0;
  for (int64_t k = 0; k < n; ++k) {
    Batch batch = loader.batch(k);  // batching is data preparation, kept out of the timed part
    auto t0 = std::chrono::steady_clock::now();
    double loss = step(batch);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.tokens += batch.num_tokens();
    m.batch_losses.push_back(loss);
    loss_sum += loss;
    progress.update(k + 1, loss, m.tokens / std::max(seconds, 1e-9));
  }
  progress.finish();
  m.batches = n;
  m.train_time_s = seconds;
  m.tokens_per_s = seconds > 0 ? m.tokens / seconds : 0.0;
  m.train_loss = n > 0 ? loss_sum / n : std::nan("");
  m.valid_loss = std::nan("");
  return m;
}

double evaluate(const ForwardFn& forward, torch::nn::Module& model, const DataLoader& loader) {
  if (loader.num_batches() == 0) return std::nan("");
  torch::NoGradGuard no_grad;
  model.eval();
  double weighted = 0;
  int64_t examples = 0;
  for (int64_t k = 0; k < loader.num_batches(); ++k) {
    Batch b = loader.batch(k);
    // The loss is a mean over examples, so weight each batch by its size.
    weighted += masked_cross_entropy(forward(b.input), b.labels, b.mask).item<double>() * b.size();
    examples += b.size();
  }
  model.train();
  return weighted / examples;
}

void write_metrics_json(const std::string& path, const std::vector<EpochMetrics>& epochs,
                        const nlohmann::json& run_info) {
  nlohmann::json j;
  j["run"] = run_info;
  j["epochs"] = nlohmann::json::array();
  for (const auto& e : epochs) j["epochs"].push_back(to_json(e));
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path);
  if (!out) throw Error("cannot write metrics to '" + path + "': check that the directory is writable");
  out << j.dump(2) << "\n";
}

}  // namespace kit
