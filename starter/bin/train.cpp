// train: single-process training of GPT-2 on the corpus, the kit's reference run.
//   ./build/train                       # cpu-small on the generated toy corpus
//   ./build/train --preset tiny --epochs 1 --out runs/train.json
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "kit/threads.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "project/loop.h"

int main(int argc, char** argv) {
  CLI::App app{"Train GPT-2 in one process on the parallel corpus and write per-epoch metrics as JSON."};
  kit::RunOptions opts;
  opts.out = "runs/train.json";
  kit::add_run_options(app, opts);
  std::string save, init;
  app.add_option("--init", init,
                 "Start from this checkpoint (kit or Hugging Face GPT-2 layout; torch.save file or .safetensors)");
  app.add_option("--save", save, "Export the trained parameters here (a dict torch.load reads)");
  return kit::guarded_main(argc, argv, app, [&] {
    kit::set_threads(opts.train.threads);
    auto data = kit::load_training_data(opts.data);
    auto model = kit::build_model(kit::model_config(opts), data.tokenizer->vocab_size(), opts.data.seq_len,
                                  opts.train.seed);
    if (!init.empty()) kit::import_checkpoint(*model, init);
    auto optimizer = kit::make_optimizer(*model, opts.train);
    kit::DataLoader train(data.train, opts.train.batch_size);
    kit::DataLoader valid(data.valid, opts.train.batch_size);
    auto forward = [&](const torch::Tensor& x) { return model->forward(x); };

    std::cout << "model " << model->config().name << ": " << kit::count_parameters(*model) << " parameters, vocab "
              << model->config().vocab_size << "; " << data.train->size() << " training pairs, "
              << train.num_batches() << " batches of " << opts.train.batch_size << "\n";
    const double initial = kit::evaluate(forward, *model, valid);
    std::cout << "epoch 0  validation loss " << initial << "  (ln(vocab) = "
              << std::log(static_cast<double>(model->config().vocab_size)) << ")\n";
    std::vector<kit::EpochMetrics> epochs;
    for (int64_t e = 1; e <= opts.train.epochs; ++e) {
      auto m = kit::train_epoch(forward, *model, *optimizer, train, 1, e, opts.train);
      m.valid_loss = kit::evaluate(forward, *model, valid);
      std::cout << "epoch " << e << "  train loss " << m.train_loss << "  validation loss " << m.valid_loss
                << "  time " << m.train_time_s << " s  " << m.tokens_per_s << " tokens/s\n";
      epochs.push_back(m);
    }
    nlohmann::json info = {{"program", "train"},          {"preset", opts.preset},
                           {"world_size", 1},             {"batch_size", opts.train.batch_size},
                           {"lr", opts.train.lr},         {"threads", opts.train.threads},
                           {"seq_len", opts.data.seq_len}, {"initial_validation_loss", initial}};
    kit::write_metrics_json(opts.out, epochs, info);
    std::cout << "metrics: " << opts.out << "\n";
    if (!save.empty()) {
      kit::export_checkpoint(*model, save);
      std::cout << "checkpoint: " << save << "\n";
    }
    return 0;
  });
}
