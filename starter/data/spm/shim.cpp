// The SentencePiece module behind shim.h. Nothing here may throw across the C boundary.
#include "data/spm/shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <unordered_map>
#include <vector>

struct kit_spm {
  sentencepiece::SentencePieceProcessor sp;
};

// SentencePiece's log switch. Not in its public headers, so declared here; weak, so a
// build whose library lacks it still loads (training passes minloglevel as well).
namespace sentencepiece {
namespace logging {
void SetMinLogLevel(int v) __attribute__((weak));
}  // namespace logging
}  // namespace sentencepiece

namespace {

// Silence from the moment the module is loaded, before any model is read: see shim.h.
const bool kQuiet = [] {
  if (&sentencepiece::logging::SetMinLogLevel) sentencepiece::logging::SetMinLogLevel(3);
  return true;
}();

char* copy_out(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

int fail(char** err, const std::string& message) {
  if (err) *err = copy_out(message);
  return 1;
}

// Hands the training sentences to SentencePiece from memory.
class Sentences : public sentencepiece::SentenceIterator {
 public:
  Sentences(const char* const* s, size_t n) : s_(s), n_(n) { load(); }
  bool done() const override { return i_ >= n_; }
  void Next() override {
    ++i_;
    load();
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  void load() {
    if (i_ < n_) value_ = s_[i_];
  }
  const char* const* s_;
  size_t n_, i_ = 0;
  std::string value_;
};

}  // namespace

extern "C" {

int kit_spm_train(const char* const* sentences, size_t n, const char* const* options, char** model,
                  size_t* model_len, char** err) {
  try {
    std::unordered_map<std::string, std::string> kwargs;
    for (const char* const* o = options; o && o[0] && o[1]; o += 2) kwargs[o[0]] = o[1];
    sentencepiece::SetRandomGeneratorSeed(1);  // BPE on all sentences draws nothing; pinned anyway
    Sentences it(sentences, n);
    std::string out;
    const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &out);
    if (!status.ok()) return fail(err, status.ToString());
    *model = static_cast<char*>(std::malloc(out.size() ? out.size() : 1));
    if (!*model) return fail(err, "out of memory");
    std::memcpy(*model, out.data(), out.size());
    *model_len = out.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

kit_spm* kit_spm_load(const char* model, size_t model_len, char** err) {
  try {
    auto* spm = new kit_spm;
    const auto status = spm->sp.LoadFromSerializedProto(std::string(model, model_len));
    if (!status.ok()) {
      delete spm;
      fail(err, status.ToString());
      return nullptr;
    }
    return spm;
  } catch (const std::exception& e) {
    fail(err, e.what());
    return nullptr;
  }
}

void kit_spm_close(kit_spm* spm) { delete spm; }

int kit_spm_encode(const kit_spm* spm, const char* text, size_t text_len, int** ids, size_t* n_ids, char** err) {
  try {
    std::vector<int> v;
    const auto status = spm->sp.Encode(std::string(text, text_len), &v);
    if (!status.ok()) return fail(err, status.ToString());
    *ids = static_cast<int*>(std::malloc((v.size() ? v.size() : 1) * sizeof(int)));
    if (!*ids) return fail(err, "out of memory");
    if (!v.empty()) std::memcpy(*ids, v.data(), v.size() * sizeof(int));
    *n_ids = v.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

int kit_spm_decode(const kit_spm* spm, const int* ids, size_t n_ids, char** text, size_t* text_len, char** err) {
  try {
    std::string out;
    const auto status = spm->sp.Decode(std::vector<int>(ids, ids + n_ids), &out);
    if (!status.ok()) return fail(err, status.ToString());
    *text = copy_out(out);
    if (!*text) return fail(err, "out of memory");
    *text_len = out.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

int kit_spm_piece_size(const kit_spm* spm) { return spm->sp.GetPieceSize(); }
int kit_spm_piece_to_id(const kit_spm* spm, const char* piece) { return spm->sp.PieceToId(piece); }
int kit_spm_unk_id(const kit_spm* spm) { return spm->sp.unk_id(); }
int kit_spm_pad_id(const kit_spm* spm) { return spm->sp.pad_id(); }

void kit_spm_free(void* buffer) { std::free(buffer); }

}  // extern "C"
