// Every knob of the kit in one place: model presets, data sizes, training
// defaults. Programs start from these values and let flags override them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kit {

// GPT-2's shape. Names follow Hugging Face's GPT2Config.
struct GPT2Config {
  std::string name = "custom";
  int64_t n_layer = 2;
  int64_t n_embd = 64;
  int64_t n_head = 2;
  int64_t n_positions = 128;
  int64_t vocab_size = 0;  // 0: take the tokenizer's vocabulary size
  double dropout = 0.1;    // embedding, attention and residual dropout
  double layer_norm_eps = 1e-5;
  double init_std = 0.02;
};

// Named presets:
//   gpt2      12 layers, 768 wide, 12 heads, 1024 positions, 50257 vocab (124,439,808 params)
//   cpu-base   6 layers, 256 wide,  8 heads,  128 positions (CPU benchmarks)
//   cpu-small  4 layers, 128 wide,  4 heads,  128 positions (the default run, main job)
//   tiny       2 layers,  32 wide,  2 heads,  128 positions (tests)
// Throws kit::Error naming the known presets for an unknown name.
GPT2Config gpt2_preset(const std::string& name);
std::vector<std::string> gpt2_preset_names();

// The corpus and the way examples become token sequences (the original's IWSLT14 setup).
struct DataConfig {
  std::string dir = "data/toy";  // holds train.tsv, valid.tsv, test.tsv (see data/corpus.h)
  int64_t n_train = 5000;
  int64_t n_valid = 1000;
  int64_t n_test = 100;
  int64_t seq_len = 128;          // model input length; examples are seq_len + 1 tokens
  int64_t vocab_size = 1000;      // SentencePiece vocabulary trained on the train split
  uint64_t corpus_seed = 2024;    // the generated toy corpus
};

struct TrainConfig {
  int64_t batch_size = 64;        // global batch (data parallel: split across ranks)
  int64_t epochs = 3;
  double lr = 1e-4;               // AdamW, as in the original
  double weight_decay = 0.0;
  uint64_t seed = 42;             // model initialisation and dropout
  uint64_t partition_seed = 1234; // DataPartitioner's shuffle (Problem 1.1)
  int64_t threads = 1;            // intra-op threads per process (LibTorch starts with 1 here)
  int64_t max_train_batches = 0;  // 0: the whole epoch
  bool progress = true;           // progress bar on stderr
};

}  // namespace kit
