// Parallel text: the corpus format, the loader and the generated toy corpus.
//
// Format (what an instructor supplies): a directory with train.tsv, valid.tsv and
// test.tsv, UTF-8, one pair per line, "source<TAB>target", no header, both sides
// non-empty, no further tabs. Lines that are empty or start with '#' are skipped;
// Windows line ends (\r\n) are accepted. The tokenizer is trained on train.tsv and
// cached next to it (spm_bpe_<vocab>.model) when the directory is writable.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kit/config.h"

namespace kit {

struct TranslationPair {
  std::string src;  // source sentence (the original: German)
  std::string tgt;  // target sentence (the original: English)
};

// Reads one split. Throws kit::Error for a missing or empty file and for a malformed
// line (the message gives path:line and what is wrong with it).
std::vector<TranslationPair> read_parallel_tsv(const std::string& path);
void write_parallel_tsv(const std::string& path, const std::vector<TranslationPair>& pairs);

// A deterministic toy translation task ("toy German" -> English): the same seed
// always gives the same pairs, on every machine.
std::vector<TranslationPair> generate_toy_corpus(int64_t n, uint64_t seed);

struct Corpus {
  std::vector<TranslationPair> train, valid, test;
};
// The three toy splits from seeds seed, seed + 1, seed + 2; no source sentence occurs twice.
Corpus generate_toy_splits(int64_t n_train, int64_t n_valid, int64_t n_test, uint64_t seed);

// Makes sure cfg.dir holds the three splits. When none exists, generates the toy corpus
// there (n_train, n_valid, n_test pairs from disjoint seeds). When some but not all exist,
// throws kit::Error naming the missing ones. Safe when several processes call it at once.
void ensure_corpus(const DataConfig& cfg);

// ensure_corpus, then read the three splits, keeping at most n_train/n_valid/n_test pairs.
Corpus load_corpus(const DataConfig& cfg);

}  // namespace kit
