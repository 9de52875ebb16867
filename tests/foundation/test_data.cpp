// The data layer: corpus files, the toy corpus, the tokenizer, examples, batches.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "kit/errors.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace kit;

namespace {

using kit_test::TempDir;  // tests/temp_dir.h

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Runs f, expects a kit::Error, returns its message. Not kit_test::error_of (tests/error_of.h):
// this one also reports any other exception.
template <class F>
std::string kit_error_message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected kit::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected kit::Error, nothing was thrown";
  return "";
}

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << "the error message should mention '" << (text) << "': " << (message)

DataConfig small_config(const TempDir& dir, int64_t vocab = 400) {
  DataConfig cfg;
  cfg.dir = dir.path();
  cfg.n_train = 1000;
  cfg.n_valid = 50;
  cfg.n_test = 20;
  cfg.vocab_size = vocab;
  return cfg;
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << " does not exist";
  return st.st_ino;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// An in-memory source whose example i has index i, for loader tests without a tokenizer.
class CountingSource : public ExampleSource {
 public:
  CountingSource(int64_t n, int64_t seq_len) {
    for (int64_t i = 0; i < n; ++i) {
      Example ex;
      ex.index = i;
      for (int64_t j = 0; j <= seq_len; ++j) ex.tokens.push_back(i * 1000 + j);
      ex.loss_mask.assign(static_cast<size_t>(seq_len), 1);
      examples_.push_back(ex);
    }
  }
  int64_t size() const override { return static_cast<int64_t>(examples_.size()); }
  const Example& get(int64_t i) const override { return examples_.at(static_cast<size_t>(i)); }

 private:
  std::vector<Example> examples_;
};

std::vector<int64_t> all_indices(const DataLoader& loader) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < loader.num_batches(); ++k)
    for (int64_t i : loader.batch(k).indices) out.push_back(i);
  return out;
}

}  // namespace

// ---- the toy corpus ---------------------------------------------------------------

TEST(ToyCorpus, SameSeedGivesSamePairsAndDifferentSeedDifferentPairs) {
  const auto a = generate_toy_corpus(300, 7), b = generate_toy_corpus(300, 7), c = generate_toy_corpus(300, 8);
  ASSERT_EQ(a.size(), 300u);
  size_t same_as_other_seed = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].src, b[i].src) << "pair " << i << " differs between two runs with seed 7";
    EXPECT_EQ(a[i].tgt, b[i].tgt) << "pair " << i << " differs between two runs with seed 7";
    same_as_other_seed += a[i].src == c[i].src;
  }
  EXPECT_LT(same_as_other_seed, 30u) << "seeds 7 and 8 give nearly the same corpus";
}

// The same numbers on every machine and standard library: a fingerprint of the
// default corpus. Changing the grammar on purpose changes it; update it then.
TEST(ToyCorpus, IsTheSameOnEveryMachine) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const auto& p : generate_toy_corpus(1000, 2024))
    for (char ch : p.src + "\t" + p.tgt + "\n") h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001B3ULL;
  EXPECT_EQ(h, 0x678fa8fd82f743b1ULL) << "generate_toy_corpus(1000, 2024) changed: its pairs depend on something other than the seed"
                          " (a std:: distribution, iteration order of a hash map, the platform)";
}

TEST(ToyCorpus, TargetIsADeterministicFunctionOfTheSource) {
  // Across seeds the same short sentences recur; each must always get the same translation.
  std::map<std::string, std::string> translation;
  size_t repeats = 0;
  for (uint64_t seed = 0; seed < 8; ++seed)
    for (const auto& p : generate_toy_corpus(2000, seed)) {
      auto [it, inserted] = translation.emplace(p.src, p.tgt);
      if (!inserted) {
        ++repeats;
        EXPECT_EQ(it->second, p.tgt) << "source \"" << p.src << "\" has two translations";
      }
    }
  EXPECT_GT(repeats, 20u) << "too few repeated sources to check anything";
}

TEST(ToyCorpus, SentencesAreWellFormed) {
  for (const auto& p : generate_toy_corpus(2000, 3)) {
    const size_t words = static_cast<size_t>(std::count(p.src.begin(), p.src.end(), ' ')) + 1;
    EXPECT_GE(words, 4u) << p.src;
    EXPECT_LE(words, 12u) << p.src;
    EXPECT_EQ(p.src.back(), '.') << p.src;
    EXPECT_EQ(p.tgt.back(), '.') << p.tgt;
    EXPECT_EQ(p.src.find('\t'), std::string::npos);
    EXPECT_EQ(p.tgt.find("  "), std::string::npos) << p.tgt;
  }
}

TEST(ToyCorpus, SplitsShareNoSourceSentence) {
  const Corpus c = generate_toy_splits(2000, 500, 100, 2024);
  ASSERT_EQ(c.train.size(), 2000u);
  ASSERT_EQ(c.valid.size(), 500u);
  ASSERT_EQ(c.test.size(), 100u);
  std::set<std::string> seen;
  for (const auto* split : {&c.train, &c.valid, &c.test})
    for (const auto& p : *split) EXPECT_TRUE(seen.insert(p.src).second) << "\"" << p.src << "\" occurs twice";
}

// ---- the TSV format -----------------------------------------------------------------

TEST(ParallelTsv, WriteThenReadGivesThePairsBack) {
  TempDir dir;
  const auto pairs = generate_toy_corpus(50, 1);
  write_parallel_tsv(dir / "x.tsv", pairs);
  const auto back = read_parallel_tsv(dir / "x.tsv");
  ASSERT_EQ(back.size(), pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(back[i].src, pairs[i].src);
    EXPECT_EQ(back[i].tgt, pairs[i].tgt);
  }
}

TEST(ParallelTsv, SkipsCommentsAndBlankLinesAndAcceptsWindowsLineEnds) {
  TempDir dir;
  write_text(dir / "x.tsv", "\xEF\xBB\xBF# a comment\r\n\r\nHallo Welt.\tHello world.\r\n\nJa.\tYes.\n");
  const auto pairs = read_parallel_tsv(dir / "x.tsv");
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].src, "Hallo Welt.");
  EXPECT_EQ(pairs[0].tgt, "Hello world.");
  EXPECT_EQ(pairs[1].tgt, "Yes.");
}

TEST(ParallelTsv, MissingFileIsAClearError) {
  TempDir dir;
  const std::string msg = kit_error_message_of([&] { read_parallel_tsv(dir / "nope.tsv"); });
  EXPECT_MENTIONS(msg, dir / "nope.tsv");
  EXPECT_MENTIONS(msg, "not found");
}

TEST(ParallelTsv, EmptyFileIsAClearError) {
  TempDir dir;
  write_text(dir / "empty.tsv", "");
  write_text(dir / "comments.tsv", "# only a comment\n\n");
  for (const char* name : {"empty.tsv", "comments.tsv"}) {
    const std::string msg = kit_error_message_of([&] { read_parallel_tsv(dir / name); });
    EXPECT_MENTIONS(msg, dir / name);
    EXPECT_MENTIONS(msg, "empty");
  }
}

TEST(ParallelTsv, MalformedLinesNameTheFileTheLineAndTheProblem) {
  TempDir dir;
  const std::string good = "Ja.\tYes.\n# comment\n";
  struct Case {
    std::string bad_line, problem;
  };
  for (const Case& c : {Case{"Ja. Yes.", "no tab"}, Case{"Ja.\tYes.\tOui.", "2 tabs"},
                        Case{"\tYes.", "empty source"}, Case{"Ja.\t  ", "empty target"},
                        Case{"Ja\xFF.\tYes.", "UTF-8"}}) {
    write_text(dir / "bad.tsv", good + c.bad_line + "\n" + good);
    const std::string msg = kit_error_message_of([&] { read_parallel_tsv(dir / "bad.tsv"); });
    EXPECT_MENTIONS(msg, dir / "bad.tsv:3");  // line 3: after a pair and a comment
    EXPECT_MENTIONS(msg, c.problem);
  }
}

// ---- the corpus directory -------------------------------------------------------------

TEST(Corpus, EnsureCorpusGeneratesThreeSplitsOfTheConfiguredSizes) {
  TempDir dir;
  DataConfig cfg = small_config(dir);
  cfg.dir = dir / "toy";  // does not exist yet
  const Corpus c = load_corpus(cfg);
  EXPECT_EQ(c.train.size(), 1000u);
  EXPECT_EQ(c.valid.size(), 50u);
  EXPECT_EQ(c.test.size(), 20u);
  const Corpus expected = generate_toy_splits(1000, 50, 20, cfg.corpus_seed);
  EXPECT_EQ(c.valid.front().src, expected.valid.front().src);
  EXPECT_EQ(c.test.back().tgt, expected.test.back().tgt);

  // A second call keeps the files; other sizes regenerate them.
  const ino_t before = inode_of(cfg.dir + "/train.tsv");
  ensure_corpus(cfg);
  EXPECT_EQ(inode_of(cfg.dir + "/train.tsv"), before) << "an up-to-date corpus was rewritten";
  cfg.n_train = 300;
  EXPECT_EQ(load_corpus(cfg).train.size(), 300u);
  EXPECT_EQ(read_parallel_tsv(cfg.dir + "/train.tsv").size(), 300u) << "a smaller n_train did not regenerate";
}

TEST(Corpus, AnInstructorsCorpusIsReadAsIsAndNeverRewritten) {
  TempDir dir;
  write_text(dir / "train.tsv", "Eins.\tOne.\nZwei.\tTwo.\nDrei.\tThree.\n");
  write_text(dir / "valid.tsv", "Vier.\tFour.\n");
  write_text(dir / "test.tsv", "Fünf.\tFive.\n");
  DataConfig cfg = small_config(dir);
  cfg.n_train = 2;  // at most 2
  const Corpus c = load_corpus(cfg);
  ASSERT_EQ(c.train.size(), 2u);
  EXPECT_EQ(c.train[1].tgt, "Two.");
  EXPECT_EQ(c.test[0].src, "Fünf.");
  EXPECT_EQ(read_parallel_tsv(dir / "train.tsv").size(), 3u);
}

TEST(Corpus, ADirectoryWithOnlySomeSplitsIsAClearError) {
  TempDir dir;
  write_text(dir / "train.tsv", "Eins.\tOne.\n");
  const std::string msg = kit_error_message_of([&] { load_corpus(small_config(dir)); });
  EXPECT_MENTIONS(msg, dir.path());
  EXPECT_MENTIONS(msg, "valid.tsv");
  EXPECT_MENTIONS(msg, "test.tsv");
  EXPECT_FALSE(fs::exists(dir / "valid.tsv")) << "a partial corpus must not be filled up with toy data";
}

// ---- the tokenizer ------------------------------------------------------------------------

TEST(Tokenizer, RoundTripsCorpusSentences) {
  TempDir dir;
  const Corpus c = load_corpus(small_config(dir));
  const Tokenizer tok = Tokenizer::train_or_load(small_config(dir), c.train);
  for (const auto* split : {&c.train, &c.valid})
    for (const auto& p : *split) {
      EXPECT_EQ(tok.decode(tok.encode(p.src)), p.src);
      EXPECT_EQ(tok.decode(tok.encode(p.tgt)), p.tgt);
    }
  // BPE merged something: sentences are far shorter in tokens than in characters.
  EXPECT_LT(tok.encode(c.train[0].src).size() * 2, c.train[0].src.size());
}

TEST(Tokenizer, SpecialIdsAreDistinctInRangeAndNeverProducedByText) {
  TempDir dir;
  const DataConfig cfg = small_config(dir);
  const Corpus c = load_corpus(cfg);
  const Tokenizer tok = Tokenizer::train_or_load(cfg, c.train);
  EXPECT_EQ(tok.vocab_size(), cfg.vocab_size);
  const std::set<int64_t> specials = {tok.pad_id(), tok.eos_src_id(), tok.eos_tgt_id()};
  EXPECT_EQ(specials.size(), 3u) << "pad, <eos_de> and <eos_en> must be three different ids";
  for (int64_t id : specials) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, tok.vocab_size());
  }
  for (const auto& p : c.train)
    for (int64_t id : tok.encode(p.src + " " + p.tgt)) EXPECT_EQ(specials.count(id), 0u) << p.src;
}

TEST(Tokenizer, TrainsQuietlyAndDeterministically) {
  TempDir a, b;
  const auto pairs = generate_toy_corpus(1000, 5);
  DataConfig ca = small_config(a), cb = small_config(b);
  ::testing::internal::CaptureStderr();
  Tokenizer::train_or_load(ca, pairs);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log, "") << "SentencePiece should train without logging";
  Tokenizer::train_or_load(cb, pairs);
  const std::string model = "spm_bpe_400.model";
  EXPECT_EQ(read_bytes(a / model), read_bytes(b / model)) << "two trainings on the same text gave different models";
}

TEST(Tokenizer, CacheIsReusedAndInvalidatedWhenTheTrainingTextChanges) {
  TempDir dir;
  const DataConfig cfg = small_config(dir);
  auto pairs = generate_toy_corpus(1000, 5);
  Tokenizer::train_or_load(cfg, pairs);
  const std::string model = dir / "spm_bpe_400.model";
  ASSERT_TRUE(fs::exists(model)) << "the trained tokenizer is not cached in the corpus directory";
  const ino_t first = inode_of(model);  // a retrained model is written to a new file

  const Tokenizer again = Tokenizer::train_or_load(cfg, pairs);
  EXPECT_EQ(inode_of(model), first) << "the cached tokenizer was retrained although nothing changed";
  EXPECT_EQ(again.vocab_size(), 400);

  pairs[123].tgt = "Something else entirely.";
  Tokenizer::train_or_load(cfg, pairs);
  EXPECT_NE(inode_of(model), first) << "the training text changed but the cached tokenizer was reused";

  // Tokenizer::load reads the cache directly.
  EXPECT_EQ(Tokenizer::load(model).eos_tgt_id(), again.eos_tgt_id());
  EXPECT_MENTIONS(kit_error_message_of([&] { Tokenizer::load(dir / "missing.model"); }), "not found");
}

TEST(Tokenizer, AVocabularyTooLargeForTheCorpusIsAClearError) {
  TempDir dir;
  DataConfig cfg = small_config(dir, 1000);
  const std::string msg = kit_error_message_of([&] { Tokenizer::train_or_load(cfg, generate_toy_corpus(3, 1)); });
  EXPECT_MENTIONS(msg, "--vocab-size");
  EXPECT_MENTIONS(msg, "or less");
}

// ---- examples, batches, the loader ------------------------------------------------------------

class Encoding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("Encoding");
    tok_ = new Tokenizer(Tokenizer::train_or_load(small_config(*dir_), generate_toy_corpus(1000, 9)));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete dir_;
  }
  static TempDir* dir_;
  static Tokenizer* tok_;
  const TranslationPair pair_{"Der kleine Hund sieht die Katze.", "The small dog sees the cat."};
};
TempDir* Encoding::dir_ = nullptr;
Tokenizer* Encoding::tok_ = nullptr;

TEST_F(Encoding, PairIsSourceEosTargetEosThenPadding) {
  const Tokenizer& tok = *tok_;
  const auto src = tok.encode(pair_.src), tgt = tok.encode(pair_.tgt);
  const int64_t S = static_cast<int64_t>(src.size()), G = static_cast<int64_t>(tgt.size()), seq_len = 40;
  ASSERT_LT(S + G + 2, seq_len + 1) << "test pair too long for this test";
  const Example ex = encode_pair(pair_, tok, seq_len);
  ASSERT_EQ(ex.tokens.size(), 41u) << "an example holds seq_len + 1 tokens";
  ASSERT_EQ(ex.loss_mask.size(), 40u) << "the mask is aligned with the seq_len labels";
  for (int64_t i = 0; i < S; ++i) EXPECT_EQ(ex.tokens[i], src[i]) << "source token " << i;
  EXPECT_EQ(ex.tokens[S], tok.eos_src_id()) << "<eos_de> must follow the source";
  for (int64_t i = 0; i < G; ++i) EXPECT_EQ(ex.tokens[S + 1 + i], tgt[i]) << "target token " << i;
  EXPECT_EQ(ex.tokens[S + 1 + G], tok.eos_tgt_id()) << "<eos_en> must follow the target";
  for (int64_t i = S + G + 2; i <= seq_len; ++i) EXPECT_EQ(ex.tokens[i], tok.pad_id()) << "padding at " << i;

  // Label j is token j + 1. It counts for the first target token through <eos_en>:
  // labels j = S .. S + G. Not for the source, not for <eos_de>, not for padding.
  for (int64_t j = 0; j < seq_len; ++j) {
    const bool expected = j >= S && j <= S + G;
    EXPECT_EQ(static_cast<int>(ex.loss_mask[j]), expected ? 1 : 0)
        << "mask at label " << j << " (label token " << ex.tokens[j + 1] << "; source has " << S
        << " tokens, target " << G << ")";
  }
}

TEST_F(Encoding, LongPairsAreTruncatedToSeqLenPlusOne) {
  const Tokenizer& tok = *tok_;
  const auto src = tok.encode(pair_.src);
  const int64_t S = static_cast<int64_t>(src.size());
  const Example full = encode_pair(pair_, tok, 64);
  const int64_t seq_len = S + 2;  // room for <eos_de> and two target tokens
  const Example cut = encode_pair(pair_, tok, seq_len);
  ASSERT_EQ(static_cast<int64_t>(cut.tokens.size()), seq_len + 1);
  for (int64_t i = 0; i <= seq_len; ++i) EXPECT_EQ(cut.tokens[i], full.tokens[i]) << "token " << i;
  EXPECT_EQ(std::count(cut.tokens.begin(), cut.tokens.end(), tok.pad_id()), 0);
  EXPECT_EQ(std::count(cut.tokens.begin(), cut.tokens.end(), tok.eos_tgt_id()), 0);
  EXPECT_EQ(std::count(cut.loss_mask.begin(), cut.loss_mask.end(), 1), 2) << "two target labels survive the cut";

  const Example no_target = encode_pair(pair_, tok, S - 1);  // the source alone overflows
  EXPECT_EQ(std::count(no_target.loss_mask.begin(), no_target.loss_mask.end(), 1), 0);
  EXPECT_THROW(encode_pair(pair_, tok, 0), Error);
}

TEST_F(Encoding, DatasetKeepsEachExamplesIndex) {
  const auto pairs = generate_toy_corpus(7, 4);
  const TranslationDataset ds(pairs, *tok_, 32);
  ASSERT_EQ(ds.size(), 7);
  for (int64_t i = 0; i < ds.size(); ++i) {
    EXPECT_EQ(ds.get(i).index, i);
    EXPECT_EQ(ds.get(i).tokens, encode_pair(pairs[i], *tok_, 32).tokens);
  }
  EXPECT_THROW(ds.get(7), Error);
}

TEST_F(Encoding, CollateStacksInputsShiftedLabelsAndMask) {
  const auto pairs = generate_toy_corpus(3, 11);
  std::vector<Example> examples;
  for (int i = 0; i < 3; ++i) {
    examples.push_back(encode_pair(pairs[i], *tok_, 24));
    examples.back().index = 10 + i;
  }
  const Batch b = collate(examples);
  EXPECT_EQ(b.input.sizes(), torch::IntArrayRef({3, 24}));
  EXPECT_EQ(b.labels.sizes(), torch::IntArrayRef({3, 24}));
  EXPECT_EQ(b.mask.sizes(), torch::IntArrayRef({3, 24}));
  EXPECT_EQ(b.input.scalar_type(), torch::kInt64);
  EXPECT_EQ(b.labels.scalar_type(), torch::kInt64);
  EXPECT_EQ(b.mask.scalar_type(), torch::kFloat32);
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.num_tokens(), 72);
  EXPECT_EQ(b.indices, (std::vector<int64_t>{10, 11, 12}));
  auto row = [](const torch::Tensor& t, int r) {
    const torch::Tensor x = t[r].to(torch::kFloat64).contiguous();
    return std::vector<double>(x.data_ptr<double>(), x.data_ptr<double>() + x.numel());
  };
  for (int r = 0; r < 3; ++r) {
    const auto& tok = examples[r].tokens;
    EXPECT_EQ(row(b.input, r), std::vector<double>(tok.begin(), tok.end() - 1)) << "row " << r << ": input = tokens[0, T)";
    EXPECT_EQ(row(b.labels, r), std::vector<double>(tok.begin() + 1, tok.end()))
        << "row " << r << ": labels must be the tokens shifted by one, tokens[1, T]";
    EXPECT_EQ(row(b.mask, r), std::vector<double>(examples[r].loss_mask.begin(), examples[r].loss_mask.end()))
        << "row " << r << ": mask = the example's loss_mask";
  }

  examples[1] = encode_pair(pairs[1], *tok_, 20);
  EXPECT_MENTIONS(kit_error_message_of([&] { collate(examples); }), "seq_len");
  EXPECT_THROW(collate({}), Error);
}

TEST(DataLoader, BatchKHoldsItemsKBToKPlusOneBWithAShortLastBatch) {
  auto source = std::make_shared<CountingSource>(10, 5);
  const DataLoader loader(source, 4);
  ASSERT_EQ(loader.num_batches(), 3);
  const std::vector<std::vector<int64_t>> expected = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}};
  for (int64_t k = 0; k < 3; ++k) {
    const Batch b = loader.batch(k);
    EXPECT_EQ(b.indices, expected[k]) << "batch " << k;
    EXPECT_EQ(b.input.size(0), static_cast<int64_t>(expected[k].size())) << "batch " << k;
    EXPECT_EQ(b.input[0][0].item<int64_t>(), expected[k][0] * 1000) << "batch " << k << " row 0 is the wrong example";
  }
  EXPECT_THROW(loader.batch(3), Error);
  EXPECT_EQ(DataLoader(source, 5).num_batches(), 2);
  EXPECT_EQ(DataLoader(source, 64).num_batches(), 1);
}

TEST(DataLoader, ShuffleIsASeededPermutationThatChangesWithTheEpoch) {
  auto source = std::make_shared<CountingSource>(50, 3);
  DataLoader a(source, 8, collate, /*shuffle=*/true, /*seed=*/3), b(source, 8, collate, true, 3),
      c(source, 8, collate, true, 4);
  const auto epoch0 = all_indices(a);
  std::vector<int64_t> sorted = epoch0, identity(50);
  std::sort(sorted.begin(), sorted.end());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity) << "a shuffled epoch must visit every example exactly once";
  EXPECT_NE(epoch0, identity) << "shuffle=true left the order unchanged";
  EXPECT_EQ(all_indices(b), epoch0) << "the same seed must give the same order in every process";
  EXPECT_NE(all_indices(c), epoch0) << "another seed gave the same order";
  a.set_epoch(1);
  EXPECT_NE(all_indices(a), epoch0) << "set_epoch(1) did not change the order";
  a.set_epoch(0);
  EXPECT_EQ(all_indices(a), epoch0) << "set_epoch(0) did not restore epoch 0's order";
  EXPECT_EQ(all_indices(DataLoader(source, 8)), identity) << "without shuffle the order is the dataset's";
}

TEST(DataLoader, RejectsANonPositiveBatchSize) {
  auto source = std::make_shared<CountingSource>(10, 3);
  for (int64_t bs : {0, -4}) EXPECT_MENTIONS(kit_error_message_of([&] { DataLoader(source, bs); }), "batch size");
}
