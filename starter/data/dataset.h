// Token sequences for training, batching, and the loader.
//
// Each pair becomes   source + <eos_de> + target + <eos_en>, padded or truncated to
// seq_len + 1 tokens. input = tokens[0 .. seq_len), labels = tokens[1 .. seq_len]
// (shifted by one), and the loss mask is 1 exactly where the label is a target token
// or <eos_en>: the model is never trained to predict the source or padding.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"

namespace kit {

struct Example {
  int64_t index = -1;             // position in the dataset it came from
  std::vector<int64_t> tokens;    // seq_len + 1 ids
  std::vector<uint8_t> loss_mask; // seq_len flags, aligned with the labels
};

struct Batch {
  torch::Tensor input;   // (B, T) int64
  torch::Tensor labels;  // (B, T) int64
  torch::Tensor mask;    // (B, T) float32, 1 where the label counts
  std::vector<int64_t> indices;  // each row's Example::index
  int64_t size() const { return input.size(0); }
  int64_t num_tokens() const { return input.numel(); }  // B * T: what tokens/s counts
};

// Anything with a size and indexed access: the dataset, or a Partition of it (Problem 1.1).
class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  virtual int64_t size() const = 0;
  virtual const Example& get(int64_t i) const = 0;
};

class TranslationDataset : public ExampleSource {
 public:
  TranslationDataset(const std::vector<TranslationPair>& pairs, const Tokenizer& tok, int64_t seq_len);
  int64_t size() const override { return static_cast<int64_t>(examples_.size()); }
  const Example& get(int64_t i) const override;

 private:
  std::vector<Example> examples_;
};

// One pair as a training example (index = -1).
Example encode_pair(const TranslationPair& pair, const Tokenizer& tok, int64_t seq_len);

using Collate = std::function<Batch(const std::vector<Example>&)>;
Batch collate(const std::vector<Example>& examples);  // the kit's collate function

// Batches over an ExampleSource in order: batch k holds items [k*B, min((k+1)*B, n)).
// The last batch may be smaller. With shuffle, the order is a seeded permutation that
// changes with set_epoch (every process computes the same one).
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const ExampleSource> source, int64_t batch_size, Collate collate_fn = collate,
             bool shuffle = false, uint64_t seed = 0);
  int64_t num_batches() const;
  int64_t batch_size() const { return batch_size_; }
  int64_t num_examples() const { return source_->size(); }
  Batch batch(int64_t k) const;
  void set_epoch(int64_t epoch);
  const ExampleSource& source() const { return *source_; }

 private:
  std::shared_ptr<const ExampleSource> source_;
  int64_t batch_size_;
  Collate collate_;
  bool shuffle_;
  uint64_t seed_;
  std::vector<int64_t> order_;
};

}  // namespace kit
