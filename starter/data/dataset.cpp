// From sentence pairs to training examples, and from examples to batches.
#include "data/dataset.h"

#include <torch/torch.h>

#include <numeric>

#include "data/splitmix64.h"
#include "kit/errors.h"

namespace kit {

Example encode_pair(const TranslationPair& pair, const Tokenizer& tok, int64_t seq_len) {
  if (seq_len < 1) throw Error("--seq-len must be at least 1 (got " + std::to_string(seq_len) + ")");
  const std::vector<int64_t> src = tok.encode(pair.src), tgt = tok.encode(pair.tgt);

  // source <eos_de> target <eos_en>; tokens [first_target, end_target) are what the
  // model learns to produce.
  Example ex;
  std::vector<int64_t>& t = ex.tokens;
  t.reserve(src.size() + tgt.size() + 2);
  t.insert(t.end(), src.begin(), src.end());
  t.push_back(tok.eos_src_id());
  const int64_t first_target = static_cast<int64_t>(t.size());
  t.insert(t.end(), tgt.begin(), tgt.end());
  t.push_back(tok.eos_tgt_id());
  const int64_t end_target = static_cast<int64_t>(t.size());
  t.resize(static_cast<size_t>(seq_len + 1), tok.pad_id());  // truncates or pads

  // Label j is token j + 1: it counts when token j + 1 is a target token or <eos_en>.
  ex.loss_mask.resize(static_cast<size_t>(seq_len));
  for (int64_t j = 0; j < seq_len; ++j) ex.loss_mask[j] = (j + 1 >= first_target && j + 1 < end_target) ? 1 : 0;
  return ex;
}

TranslationDataset::TranslationDataset(const std::vector<TranslationPair>& pairs, const Tokenizer& tok,
                                       int64_t seq_len) {
  examples_.reserve(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    examples_.push_back(encode_pair(pairs[i], tok, seq_len));
    examples_.back().index = static_cast<int64_t>(i);
  }
}

const Example& TranslationDataset::get(int64_t i) const {
  if (i < 0 || i >= size())
    throw Error("dataset index " + std::to_string(i) + " out of range [0, " + std::to_string(size()) + ")");
  return examples_[static_cast<size_t>(i)];
}

Batch collate(const std::vector<Example>& examples) {
  if (examples.empty()) throw Error("collate: no examples (an empty batch)");
  const auto B = static_cast<int64_t>(examples.size());
  const auto T = static_cast<int64_t>(examples[0].loss_mask.size());
  torch::Tensor input = torch::empty({B, T}, torch::kInt64);
  torch::Tensor labels = torch::empty({B, T}, torch::kInt64);
  torch::Tensor mask = torch::empty({B, T}, torch::kFloat32);
  auto in = input.accessor<int64_t, 2>();
  auto lab = labels.accessor<int64_t, 2>();
  auto m = mask.accessor<float, 2>();
  Batch batch;
  for (int64_t b = 0; b < B; ++b) {
    const Example& ex = examples[static_cast<size_t>(b)];
    if (static_cast<int64_t>(ex.tokens.size()) != T + 1 || static_cast<int64_t>(ex.loss_mask.size()) != T)
      throw Error("collate: example " + std::to_string(ex.index) + " has " + std::to_string(ex.tokens.size()) +
                  " tokens and " + std::to_string(ex.loss_mask.size()) + " mask flags, expected " +
                  std::to_string(T + 1) + " and " + std::to_string(T) + " (all examples of a batch share seq_len)");
    for (int64_t j = 0; j < T; ++j) {
      in[b][j] = ex.tokens[static_cast<size_t>(j)];
      lab[b][j] = ex.tokens[static_cast<size_t>(j + 1)];  // next-token prediction
      m[b][j] = ex.loss_mask[static_cast<size_t>(j)];
    }
    batch.indices.push_back(ex.index);
  }
  batch.input = input;
  batch.labels = labels;
  batch.mask = mask;
  return batch;
}

DataLoader::DataLoader(std::shared_ptr<const ExampleSource> source, int64_t batch_size, Collate collate_fn,
                       bool shuffle, uint64_t seed)
    : source_(std::move(source)), batch_size_(batch_size), collate_(std::move(collate_fn)), shuffle_(shuffle),
      seed_(seed) {
  if (!source_) throw Error("DataLoader: no data source (null pointer)");
  if (batch_size_ <= 0)
    throw Error("batch size " + std::to_string(batch_size_) + ": use a --batch-size of at least 1");
  if (!collate_) throw Error("DataLoader: empty collate function");
  set_epoch(0);
}

int64_t DataLoader::num_batches() const { return (source_->size() + batch_size_ - 1) / batch_size_; }

void DataLoader::set_epoch(int64_t epoch) {
  order_.resize(static_cast<size_t>(source_->size()));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!shuffle_) return;
  // Same seed and epoch, same order, in every process.
  SplitMix64 rng(mix_seeds(seed_, static_cast<uint64_t>(epoch)));
  shuffle_in_place(order_, rng);
}

Batch DataLoader::batch(int64_t k) const {
  if (k < 0 || k >= num_batches())
    throw Error("batch " + std::to_string(k) + " out of range: the loader has " + std::to_string(num_batches()) +
                " batches");
  if (static_cast<int64_t>(order_.size()) != source_->size())
    throw Error("DataLoader: the data source changed size after the loader was made");
  const int64_t begin = k * batch_size_, end = std::min(begin + batch_size_, source_->size());
  std::vector<Example> examples;
  examples.reserve(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) examples.push_back(source_->get(order_[static_cast<size_t>(i)]));
  return collate_(examples);
}

}  // namespace kit
