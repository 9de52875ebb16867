#include "model/torch_save.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <fstream>
#include <vector>

#include "kit/errors.h"
#include "model/ordered_dict_pickle.h"

namespace kit {
namespace {

// torch::pickle_save's format, but the dict goes in untagged: a typed dict is otherwise
// wrapped in torch.jit._pickle.restore_type_tag, which torch.load of PyTorch >= 2.6 refuses
// by default (weights_only=True). Untagged, it is the plain dict torch.save writes.
std::vector<char> pickle_plain(const TensorDict& dict) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* b, size_t n) { pickle.insert(pickle.end(), b, b + n); }, nullptr,
                              nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::vector<char> bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* b, size_t n) {
    bytes.insert(bytes.end(), static_cast<const char*>(b), static_cast<const char*>(b) + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return bytes;
}

// What torch::pickle_load does, with the pickle rewritten first (model/ordered_dict_pickle.h).
c10::IValue unpickle_archive(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  auto record = reader.getRecord("data.pkl");
  const std::string pickle =
      ordered_dicts_as_dicts(std::string(static_cast<const char*>(std::get<0>(record).get()), std::get<1>(record)));
  size_t read = 0;
  auto read_pickle = [&](char* buffer, size_t n) {
    n = std::min(n, pickle.size() - read);
    std::copy(pickle.data() + read, pickle.data() + read + n, buffer);
    read += n;
    return n;
  };
  auto read_storage = [&](const std::string& key) { return std::get<0>(reader.getRecord("data/" + key)); };
  torch::jit::Unpickler unpickler(read_pickle, nullptr, nullptr, read_storage, c10::nullopt);
  unpickler.set_version(reader.version());
  return unpickler.parse_ivalue();
}

}  // namespace

void save_tensor_dict(const TensorDict& dict, const std::string& path) {
  const std::vector<char> bytes = pickle_plain(dict);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error("cannot write checkpoint '" + path + "': check that its folder exists and is writable");
}

TensorDict read_torch_save(const std::string& path) {
  c10::IValue value;
  try {
    value = unpickle_archive(path);
  } catch (const c10::Error& e) {
    throw Error("checkpoint '" + path + "' is not a file torch.save wrote: " + e.what_without_backtrace() +
                ". Files from before PyTorch 1.6 use an older format: re-save them in Python with "
                "torch.save(torch.load(p), p)");
  } catch (const std::exception& e) {
    throw Error("checkpoint '" + path + "' could not be read: " + e.what());
  }
  if (!value.isGenericDict())
    throw Error("checkpoint '" + path + "' holds a " + value.tagKind() +
                ", not a dict of named tensors: save one in Python with torch.save(model.state_dict(), p)");
  TensorDict dict;
  for (const auto& e : value.toGenericDict()) {
    if (!e.key().isString() || !e.value().isTensor())
      throw Error("checkpoint '" + path + "' has an entry that is not name -> tensor (a " + e.key().tagKind() +
                  " -> " + e.value().tagKind() + "): save a dict of tensors, e.g. model.state_dict()");
    dict.insert(e.key().toStringRef(), e.value().toTensor());
  }
  return dict;
}

}  // namespace kit
