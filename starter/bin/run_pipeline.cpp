// run_pipeline: train GPT-2 placed on several stages (Problem 2.3's benchmark).
//   ./build/run_pipeline --mode model_parallel    --stages 2 --out runs/pp/model_parallel.json
//   ./build/run_pipeline --mode pipeline_parallel --stages 2 --chunks 4 --out runs/pp/pipeline_parallel.json
//   ./build/run_pipeline --mode none                            (one stage, no pipe: the reference)
//
// Stages are GPUs when LibTorch sees enough of them (--device auto), else worker threads on
// the CPU. --threads is each stage's intra-op thread count (and the main thread's, which runs
// the embeddings, the head and the whole backward pass): with --threads 1 every stage behaves
// like a one-core device, which is the comparison that mirrors GPUs. Model parallel then keeps
// one core busy at a time and the pipeline up to --stages cores during the forward pass.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "kit/errors.h"
#include "kit/threads.h"
#include "model/gpt2.h"
#include "pipeline/model_parallel.h"
#include "project/loop.h"

namespace {

// "stage 0 (cpu): embeddings, blocks 0-1 | stage 1 (cpu): blocks 2-3, ln_f"
std::string describe_placement(const kit::GPT2ModelParallel& mp) {
  std::string out;
  const auto& stages = mp.stages();
  const auto& blocks = mp.block_stages();
  for (size_t j = 0; j < stages.size(); ++j) {
    std::vector<size_t> mine;
    for (size_t b = 0; b < blocks.size(); ++b)
      if (blocks[b] == stages[j]) mine.push_back(b);
    out += (j ? " | " : "") + kit::to_string(stages[j]) + ":";
    if (j == 0) out += " embeddings,";
    if (!mine.empty())
      out += mine.size() == 1 ? " block " + std::to_string(mine[0])
                              : " blocks " + std::to_string(mine.front()) + "-" + std::to_string(mine.back());
    if (j + 1 == stages.size()) out += ", ln_f";
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train GPT-2 placed on several stages: one device (none), model parallel, or pipeline parallel; "
               "writes per-epoch metrics as JSON."};
  kit::RunOptions opts;
  opts.train.batch_size = 32;  // the original's run_pipeline default
  opts.train.epochs = 2;
  std::string mode = "pipeline_parallel", device = "auto";
  int64_t stages = 2, split_size = 0, chunks = 4;
  kit::add_run_options(app, opts);
  app.add_option("--mode,--model-parallel-mode", mode, "none, model_parallel or pipeline_parallel")
      ->check(CLI::IsMember({"none", "model_parallel", "pipeline_parallel"}))
      ->capture_default_str();
  app.add_option("--stages", stages, "Pipeline stages (devices)")->capture_default_str();
  auto* split_opt = app.add_option("--split-size", split_size, "Rows per micro-batch (pipeline_parallel)");
  app.add_option("--chunks,--n-chunk", chunks,
                 "Micro-batches per batch when --split-size is not given: split size = ceil(batch / chunks)")
      ->capture_default_str()
      ->excludes(split_opt);
  app.add_option("--device", device, "auto (GPUs when there are enough), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();

  return kit::guarded_main(argc, argv, app, [&] {
    if (opts.out.empty()) opts.out = "runs/pipeline/" + mode + ".json";
    if (stages < 1) throw kit::Error("--stages must be at least 1 (got " + std::to_string(stages) + ")");
    if (mode == "none") stages = 1;
    if (split_size == 0) {
      if (chunks < 1) throw kit::Error("--chunks must be at least 1 (got " + std::to_string(chunks) + ")");
      split_size = (opts.train.batch_size + chunks - 1) / chunks;
    }
    if (split_size < 1) throw kit::Error("--split-size must be at least 1 (got " + std::to_string(split_size) + ")");

    std::vector<kit::StageDevice> placement =
        device == "cpu" ? kit::cpu_stages(stages) : kit::default_stages(stages);
    if (device == "cuda" && !placement.front().device.is_cuda())
      throw kit::Error("--device cuda needs " + std::to_string(stages) + " GPUs, LibTorch sees " +
                       std::to_string(torch::cuda::device_count()) + ": use fewer --stages or --device cpu");

    kit::set_threads(opts.train.threads);
    auto data = kit::load_training_data(opts.data);
    auto model = kit::build_model(kit::model_config(opts), data.tokenizer->vocab_size(), opts.data.seq_len,
                                  opts.train.seed);
    kit::GPT2ModelParallel mp(model, placement);  // mode none: one stage, the same code path
    if (mode == "pipeline_parallel") mp.prepare_pipeline_parallel(split_size, opts.train.threads);
    auto optimizer = kit::make_optimizer(*model, opts.train);
    kit::DataLoader train(data.train, opts.train.batch_size);
    kit::DataLoader valid(data.valid, opts.train.batch_size);
    // The logits stay where wte lives; masked_cross_entropy brings the labels there.
    auto forward = [&](const torch::Tensor& x) { return mp.forward(x); };

    const int64_t microbatches = mode == "pipeline_parallel" ? (opts.train.batch_size + split_size - 1) / split_size : 1;
    std::cout << "mode " << mode << ", model " << model->config().name << " (" << kit::count_parameters(*model)
              << " parameters), batch " << opts.train.batch_size;
    if (mode == "pipeline_parallel") std::cout << " in " << microbatches << " micro-batches of " << split_size;
    std::cout << ", " << opts.train.threads << " thread(s) per stage\n  " << describe_placement(mp) << "\n";

    std::vector<kit::EpochMetrics> epochs;
    // Validation is forward only, the part the pipeline overlaps; its speed is reported
    // beside the training speed (forward + backward + step) to compare with (m + p - 1) / m.
    nlohmann::json forward_only = nlohmann::json::array();
    for (int64_t e = 1; e <= opts.train.epochs; ++e) {
      auto m = kit::train_epoch(forward, *model, *optimizer, train, 1, e, opts.train);
      const auto t0 = std::chrono::steady_clock::now();
      m.valid_loss = kit::evaluate(forward, *model, valid);
      const double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eval_tokens = static_cast<double>(valid.num_examples() * opts.data.seq_len);
      std::cout << "epoch " << e << "  train loss " << m.train_loss << "  validation loss " << m.valid_loss
                << "  time " << m.train_time_s << " s  " << m.tokens_per_s << " tokens/s  (forward only: "
                << eval_tokens / eval_s << " tokens/s)\n";
      forward_only.push_back({{"epoch", e}, {"seconds", eval_s}, {"tokens_per_sec", eval_tokens / eval_s}});
      epochs.push_back(m);
    }
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& s : placement) devices.push_back(s.device.str());
    nlohmann::json info = {{"program", "run_pipeline"},
                           {"mode", mode},
                           {"stages", stages},
                           {"devices", devices},
                           {"split_size", mode == "pipeline_parallel" ? split_size : opts.train.batch_size},
                           {"microbatches", microbatches},
                           {"preset", opts.preset},
                           {"world_size", 1},
                           {"batch_size", opts.train.batch_size},
                           {"lr", opts.train.lr},
                           {"threads", opts.train.threads},
                           {"seq_len", opts.data.seq_len},
                           {"max_batches", opts.train.max_train_batches},
                           {"forward_only", forward_only}};
    kit::write_metrics_json(opts.out, epochs, info);
    std::cout << "metrics: " << opts.out << "\n";
    return 0;
  });
}
