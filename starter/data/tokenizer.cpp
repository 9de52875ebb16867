// The BPE tokenizer: trained once per corpus with SentencePiece, cached next to it.
#include "data/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <unordered_map>

#include "data/spm/shim.h"
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

// The SentencePiece module (data/spm/shim.h), loaded once per process from the
// directory that holds libkit.so.
struct SpmModule {
  decltype(&kit_spm_train) train;
  decltype(&kit_spm_load) load;
  decltype(&kit_spm_close) close;
  decltype(&kit_spm_encode) encode;
  decltype(&kit_spm_decode) decode;
  decltype(&kit_spm_piece_size) piece_size;
  decltype(&kit_spm_piece_to_id) piece_to_id;
  decltype(&kit_spm_unk_id) unk_id;
  decltype(&kit_spm_pad_id) pad_id;
  decltype(&kit_spm_free) free;
};

std::string module_path() {
  if (const char* env = std::getenv("KIT_SPM_MODULE")) return env;  // for unusual installs
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&module_path), &info) == 0 || !info.dli_fname)
    throw Error("cannot locate libkit (dladdr failed) to find the SentencePiece module: set KIT_SPM_MODULE");
  return (fs::path(info.dli_fname).parent_path() / "libkit_spm.so").string();
}

SpmModule open_module() {
  const std::string path = module_path();
  int flags = RTLD_NOW | RTLD_LOCAL;
#ifdef RTLD_DEEPBIND
  flags |= RTLD_DEEPBIND;  // its protobuf copy must not meet LibTorch's (see shim.h)
#endif
  void* h = ::dlopen(path.c_str(), flags);
  if (!h)
    throw Error("cannot load the SentencePiece module " + path + " (" + ::dlerror() +
                "). Fix: rebuild the kit (cmake --build <build dir>), which builds it next to libkit, or set "
                "KIT_SPM_MODULE to its path.");
  auto sym = [&](const char* name) {
    void* f = ::dlsym(h, name);
    if (!f) throw Error("the SentencePiece module " + path + " lacks " + name + ": rebuild the kit");
    return f;
  };
  SpmModule m;
  m.train = reinterpret_cast<decltype(m.train)>(sym("kit_spm_train"));
  m.load = reinterpret_cast<decltype(m.load)>(sym("kit_spm_load"));
  m.close = reinterpret_cast<decltype(m.close)>(sym("kit_spm_close"));
  m.encode = reinterpret_cast<decltype(m.encode)>(sym("kit_spm_encode"));
  m.decode = reinterpret_cast<decltype(m.decode)>(sym("kit_spm_decode"));
  m.piece_size = reinterpret_cast<decltype(m.piece_size)>(sym("kit_spm_piece_size"));
  m.piece_to_id = reinterpret_cast<decltype(m.piece_to_id)>(sym("kit_spm_piece_to_id"));
  m.unk_id = reinterpret_cast<decltype(m.unk_id)>(sym("kit_spm_unk_id"));
  m.pad_id = reinterpret_cast<decltype(m.pad_id)>(sym("kit_spm_pad_id"));
  m.free = reinterpret_cast<decltype(m.free)>(sym("kit_spm_free"));
  return m;
}

const SpmModule& spm() {
  static const SpmModule m = open_module();  // thread-safe; retried if it threw
  return m;
}

// Takes ownership of an error message from the module.
std::string take_error(char* err) {
  std::string s = err ? err : "unknown error";
  spm().free(err);
  return s;
}

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
      // Silent (fatal only): SentencePiece logs every training step by default, and its
      // std::cerr is not safe to use from the isolated module (data/spm/shim.h). Failures
      // still come back, as status messages.
      {"minloglevel", "3"},
  };
}

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
bool try_write_atomically(const std::string& path, const std::string& bytes) {
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

struct Tokenizer::Impl {
  kit_spm* model = nullptr;
  int64_t vocab = 0, pad = -1, eos_src = -1, eos_tgt = -1;
  ~Impl() {
    if (model) spm().close(model);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

// A tokenizer from a serialized model; `origin` names it in errors.
std::unique_ptr<Tokenizer::Impl> from_bytes(const std::string& bytes, const std::string& origin) {
  char* err = nullptr;
  kit_spm* model = spm().load(bytes.data(), bytes.size(), &err);
  if (!model)
    throw Error(origin + ": not a SentencePiece model (" + take_error(err) + "). Fix: delete it; the next run retrains it.");
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->model = model;
  impl->vocab = spm().piece_size(model);
  impl->pad = spm().pad_id(model);
  const int unk = spm().unk_id(model);
  impl->eos_src = spm().piece_to_id(model, kEosSrc);
  impl->eos_tgt = spm().piece_to_id(model, kEosTgt);
  if (impl->pad < 0 || impl->eos_src == unk || impl->eos_tgt == unk)
    throw Error(origin + ": this SentencePiece model lacks <pad>, " + kEosSrc + " or " + kEosTgt +
                ". Fix: delete it; the next run trains one that has them.");
  return impl;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& model_path) {
  if (!fs::exists(model_path))
    throw Error(model_path + ": tokenizer model not found. Fix: run training once (it trains and caches the "
                "tokenizer next to the corpus) or pass the right path.");
  return Tokenizer(from_bytes(read_file(model_path), model_path));
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

  // Both sides of every pair, in order: the vocabulary serves both languages.
  std::vector<const char*> sentences;
  sentences.reserve(2 * train.size());
  for (const auto& p : train) {
    sentences.push_back(p.src.c_str());
    sentences.push_back(p.tgt.c_str());
  }
  std::vector<const char*> options;
  for (const auto& [k, v] : opts) {
    options.push_back(k.c_str());
    options.push_back(v.c_str());
  }
  options.push_back(nullptr);
  char *bytes = nullptr, *err = nullptr;
  size_t len = 0;
  if (spm().train(sentences.data(), sentences.size(), options.data(), &bytes, &len, &err) != 0)
    training_failed(take_error(err), cfg.vocab_size, train.size());
  const std::string model(bytes, len);
  spm().free(bytes);

  Tokenizer t(from_bytes(model, "the freshly trained tokenizer"));
  // Processes started together may all train here; they write identical bytes.
  if (!try_write_atomically(model_path, model) || !try_write_atomically(key_path, key))
    std::cerr << "note: cannot cache the tokenizer in " << cfg.dir
              << " (not writable?); it is retrained on every run\n";
  return t;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  int* ids = nullptr;
  size_t n = 0;
  char* err = nullptr;
  if (spm().encode(impl_->model, text.data(), text.size(), &ids, &n, &err) != 0)
    throw Error("the tokenizer cannot encode \"" + text + "\": " + take_error(err));
  std::vector<int64_t> out(ids, ids + n);
  spm().free(ids);
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> kept;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw Error("decode: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab_size()) + ")");
    if (id != pad_id()) kept.push_back(static_cast<int>(id));  // padding carries no text
  }
  char* text = nullptr;
  size_t len = 0;
  char* err = nullptr;
  if (spm().decode(impl_->model, kept.data(), kept.size(), &text, &len, &err) != 0)
    throw Error("the tokenizer cannot decode: " + take_error(err));
  std::string out(text, len);
  spm().free(text);
  return out;
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab; }
int64_t Tokenizer::pad_id() const { return impl_->pad; }
int64_t Tokenizer::eos_src_id() const { return impl_->eos_src; }
int64_t Tokenizer::eos_tgt_id() const { return impl_->eos_tgt; }

}  // namespace kit
