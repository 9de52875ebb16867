// A subword tokenizer trained with SentencePiece (BPE) on the training split and
// cached next to the corpus, as the original trains its BPE on IWSLT14's training data.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace kit {

class Tokenizer {
 public:
  // Loads <cfg.dir>/spm_bpe_<vocab>.model when it exists and was trained on the same
  // training pairs (spm_bpe_<vocab>.key holds their fingerprint); otherwise trains it
  // (deterministically) and writes both there. Throws kit::Error naming a workable
  // --vocab-size when SentencePiece cannot build the vocabulary from this corpus.
  static Tokenizer train_or_load(const DataConfig& cfg, const std::vector<TranslationPair>& train);
  static Tokenizer load(const std::string& model_path);

  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;  // drops pad ids

  int64_t vocab_size() const;
  int64_t pad_id() const;     // padding, never a label (0)
  int64_t eos_src_id() const; // "<eos_de>": ends the source
  int64_t eos_tgt_id() const; // "<eos_en>": ends the target

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  struct Impl;  // opaque: the loaded SentencePiece model (data/spm/shim.h says why it is hidden)

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kit
