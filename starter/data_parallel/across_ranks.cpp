#include "data_parallel/across_ranks.h"

#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "dist/dist.h"
#include "kit/errors.h"

namespace kit {

void check_same_on_all_ranks(int64_t value, const std::string& what) {
  auto t = torch::tensor({static_cast<double>(value), -static_cast<double>(value)}, torch::kFloat64)
               .to(dist::device());
  dist::all_reduce(t, dist::ReduceOp::MAX);
  t = t.cpu();
  const double hi = t[0].item<double>(), lo = -t[1].item<double>();
  if (hi != lo)
    throw Error("the ranks disagree on the " + what + " (from " + std::to_string(static_cast<int64_t>(lo)) + " to " +
                std::to_string(static_cast<int64_t>(hi)) +
                "): every rank must take the same number of steps, give them equal partitions");
}

double global_validation_loss(const ForwardFn& forward, torch::nn::Module& model, const DataLoader& valid) {
  double local = valid.num_examples() > 0 ? evaluate(forward, model, valid) : 0.0;
  auto t = torch::tensor({local * valid.num_examples(), static_cast<double>(valid.num_examples())}, torch::kFloat64)
               .to(dist::device());
  dist::all_reduce(t);
  t = t.cpu();
  const double n = t[1].item<double>();
  return n > 0 ? t[0].item<double>() / n : std::nan("");
}

c10::Dict<std::string, torch::Tensor> record_steps(int64_t steps, int rank, int world_size, torch::nn::Module& model,
                                                   const DataLoader& loader, const StepFn& step) {
  if (steps < 1 || steps > loader.num_batches())
    throw Error("--steps " + std::to_string(steps) + " must be in 1.." + std::to_string(loader.num_batches()) +
                " (the batches in this rank's partition)");
  c10::Dict<std::string, torch::Tensor> out;
  std::vector<torch::Tensor> indices;
  dist::reset_counters();
  for (int64_t k = 0; k < steps; ++k) {
    Batch batch = loader.batch(k);
    step(batch);
    indices.push_back(torch::tensor(batch.indices, torch::kInt64));
    if (k == 0) {
      const auto c = dist::counters();
      out.insert("allreduce_bytes_step0", torch::tensor(c.all_reduce_bytes, torch::kInt64));
      out.insert("allreduce_calls_step0", torch::tensor(c.all_reduce_calls, torch::kInt64));
      for (const auto& p : model.named_parameters())
        out.insert("grad/" + p.key(), p.value().grad().defined() ? p.value().grad().detach().cpu().clone()
                                                                 : torch::Tensor());
    }
  }
  for (const auto& p : model.named_parameters()) out.insert("param/" + p.key(), p.value().detach().cpu().clone());
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
  return out;
}

void print_world_summary(const std::vector<std::string>& rank_files) {
  const int W = static_cast<int>(rank_files.size());
  std::vector<nlohmann::json> ranks;
  for (const auto& path : rank_files) {
    std::ifstream f(path);
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
  std::cout << "world size " << W << ": training time " << time / k << " s per epoch (mean over ranks), " << tps / k
            << " tokens/s (sum over ranks), over " << (n_epochs - first) << " epoch(s)"
            << (first ? " after the first" : "") << "\nmetrics: " << rank_files[0] << (W > 1 ? " ..." : "")
            << std::endl;
}

}  // namespace kit
