// The BPE tokenizer: trained once per corpus with SentencePiece, cached next to it.
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <unordered_map>

#include "kit/errors.h"

namespace fs = std::filesystem;

namespace kit {

namespace {

// Special pieces. SentencePiece's <s> and </s> are switched off: the translation format
// has its own end markers, one per language, as in the original.
constexpr int kPadId = 0;
constexpr int kUnkId = 1;
const char* const kEosSrc = "<eos_de>";
const char* const kEosTgt = "<eos_en>";

// Every option that changes the trained model. Part of the cache key, so changing one
// here retrains cached tokenizers.
std::unordered_map<std::string, std::string> trainer_options(int64_t vocab_size) {
  return {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"pad_id", std::to_string(kPadId)},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"user_defined_symbols", std::string(kEosSrc) + "," + kEosTgt},
      // Keep every character seen in training, so decode(encode(s)) == s on the corpus.
      {"character_coverage", "1.0"},
      // Deterministic: all sentences, in order, one thread.
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      // Errors only: SentencePiece logs every training step to stderr by default.
      {"minloglevel", "2"},
  };
}

// Feeds the training sentences (both sides of every pair) to SentencePiece from memory.
class PairIterator : public sentencepiece::SentenceIterator {
 public:
  explicit PairIterator(const std::vector<TranslationPair>& pairs) : pairs_(pairs) {}
  bool done() const override { return i_ >= 2 * pairs_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return i_ % 2 == 0 ? pairs_[i_ / 2].src : pairs_[i_ / 2].tgt; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::vector<TranslationPair>& pairs_;
  size_t i_ = 0;
};

// FNV-1a, 64 bit: a fingerprint of the training text and options, not a security hash.
class Fingerprint {
 public:
  void add(const std::string& s) {
    for (unsigned char c : s) h_ = (h_ ^ c) * 0x100000001B3ULL;
    h_ = (h_ ^ 0xFF) * 0x100000001B3ULL;  // separator: ("ab","c") != ("a","bc")
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  uint64_t h_ = 0xCBF29CE484222325ULL;
};

std::string cache_key(const std::vector<TranslationPair>& train, const std::unordered_map<std::string, std::string>& opts) {
  Fingerprint f;
  for (const char* k : {"model_type", "vocab_size", "pad_id", "unk_id", "bos_id", "eos_id", "user_defined_symbols",
                        "character_coverage", "input_sentence_size", "shuffle_input_sentence"}) {
    f.add(k);
    f.add(opts.at(k));
  }
  for (const auto& p : train) {
    f.add(p.src);
    f.add(p.tgt);
  }
  return "fnv1a64 " + f.hex() + " pairs " + std::to_string(train.size()) + "\n";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Temporary file and rename: a process reading the cache never sees half a model.
bool write_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

// SentencePiece's complaint about the vocabulary size, turned into the flag to change.
[[noreturn]] void training_failed(const std::string& why, int64_t vocab_size, size_t n_pairs) {
  std::smatch m;
  std::string fix = "check the corpus, or try a smaller --vocab-size";
  if (std::regex_search(why, m, std::regex("value <= ([0-9]+)")))
    fix = "the corpus is too small for that vocabulary: use --vocab-size " + m[1].str() + " or less";
  else if (std::regex_search(why, m, std::regex("smaller than required_chars\\. [0-9]+ vs ([0-9]+)")))
    fix = "the corpus has more distinct characters than that: use --vocab-size " + m[1].str() + " or more";
  throw Error("training the BPE tokenizer (vocab " + std::to_string(vocab_size) + ") on " + std::to_string(n_pairs) +
              " training pairs failed: " + fix + ". SentencePiece said: " + why);
}

}  // namespace

Tokenizer::Tokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& model_path) {
  if (!fs::exists(model_path))
    throw Error(model_path + ": tokenizer model not found. Fix: run training once (it trains and caches the "
                "tokenizer next to the corpus) or pass the right path.");
  Tokenizer t;
  const auto status = t.sp_->Load(model_path);
  if (!status.ok())
    throw Error(model_path + ": not a SentencePiece model (" + status.ToString() +
                "). Fix: delete it; the next run retrains it.");
  if (t.sp_->PieceToId(kEosSrc) == t.sp_->unk_id() || t.sp_->PieceToId(kEosTgt) == t.sp_->unk_id() ||
      t.sp_->pad_id() < 0)
    throw Error(model_path + ": this SentencePiece model lacks <pad>, " + kEosSrc + " or " + kEosTgt +
                ". Fix: delete it; the next run trains one that has them.");
  return t;
}

Tokenizer Tokenizer::train_or_load(const DataConfig& cfg, const std::vector<TranslationPair>& train) {
  if (train.empty()) throw Error("cannot train the tokenizer on an empty training split: add pairs to train.tsv");
  if (cfg.vocab_size < 8)
    throw Error("--vocab-size " + std::to_string(cfg.vocab_size) + " is too small: use at least a few hundred");
  const auto opts = trainer_options(cfg.vocab_size);
  const std::string stem = (fs::path(cfg.dir) / ("spm_bpe_" + std::to_string(cfg.vocab_size))).string();
  const std::string model_path = stem + ".model", key_path = stem + ".key";
  const std::string key = cache_key(train, opts);

  // The key file is written after the model, so a matching key means a complete model.
  if (fs::exists(model_path) && read_file(key_path) == key) return load(model_path);

  sentencepiece::SetRandomGeneratorSeed(1);  // unused by BPE on all sentences; pinned anyway
  PairIterator it(train);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(opts, &it, &model);
  if (!status.ok()) training_failed(status.ToString(), cfg.vocab_size, train.size());

  Tokenizer t;
  const auto loaded = t.sp_->LoadFromSerializedProto(model);
  if (!loaded.ok()) throw Error("SentencePiece produced an unreadable model: " + loaded.ToString());
  // Processes started together may all train here; they write identical bytes.
  if (!write_atomically(model_path, model) || !write_atomically(key_path, key))
    std::cerr << "note: cannot cache the tokenizer in " << cfg.dir
              << " (not writable?); it is retrained on every run\n";
  return t;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw Error("tokenizer cannot encode \"" + text + "\": " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> kept;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw Error("decode: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab_size()) + ")");
    if (id != pad_id()) kept.push_back(static_cast<int>(id));  // padding carries no text
  }
  std::string text;
  const auto status = sp_->Decode(kept, &text);
  if (!status.ok()) throw Error("tokenizer cannot decode: " + status.ToString());
  return text;
}

int64_t Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int64_t Tokenizer::pad_id() const { return sp_->pad_id(); }
int64_t Tokenizer::eos_src_id() const { return sp_->PieceToId(kEosSrc); }
int64_t Tokenizer::eos_tgt_id() const { return sp_->PieceToId(kEosTgt); }

}  // namespace kit
