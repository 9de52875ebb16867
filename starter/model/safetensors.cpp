#include "model/safetensors.h"

#include <torch/torch.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "kit/errors.h"

namespace kit {
namespace {

uint64_t little_endian_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

at::ScalarType dtype_of(const std::string& name, const std::string& where) {
  static const std::map<std::string, at::ScalarType> known = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16},
      {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},    {"BOOL", at::kBool}};
  auto it = known.find(name);
  if (it == known.end())
    throw Error(where + " has dtype '" + name + "', which the kit does not read (it reads F64, F32, F16, BF16, "
                "I64, I32, I16, I8, U8, BOOL): convert the file to float32 in Python first");
  return it->second;
}

}  // namespace

bool looks_like_safetensors(const std::string& head) {
  return head.size() >= 9 && little_endian_u64(head.data()) > 1 && head[8] == '{';
}

TensorDict read_safetensors(const std::string& path) {
  // The tensors' bytes are read as they are: safetensors is little-endian, like every host
  // the kit builds on (x86-64, arm64).
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors reading assumes a little-endian host");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error("cannot open checkpoint '" + path + "': check the path");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  const std::string file = "safetensors file '" + path + "'";
  char len_bytes[8] = {};
  in.seekg(0);
  in.read(len_bytes, 8);
  const uint64_t header_len = in ? little_endian_u64(len_bytes) : 0;
  if (!in || header_len > file_size - 8)
    throw Error(file + " is truncated or not a safetensors file: its header length " + std::to_string(header_len) +
                " does not fit in its " + std::to_string(file_size) + " bytes (download it again)");
  std::string header_text(header_len, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(file + " has a header that is not valid JSON (" + e.what() + "): download it again");
  }
  if (!header.is_object()) throw Error(file + " has a header that is not a JSON object: download it again");
  const uint64_t data_begin = 8 + header_len, data_size = file_size - data_begin;

  TensorDict dict;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = file + ": tensor '" + name + "'";
    std::vector<int64_t> shape;
    std::vector<uint64_t> offsets;
    at::ScalarType dtype = at::kFloat;
    try {
      dtype = dtype_of(entry.at("dtype").get<std::string>(), where);
      shape = entry.at("shape").get<std::vector<int64_t>>();
      offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + " has no valid dtype, shape and data_offsets (" + e.what() + ")");
    }
    int64_t numel = 1;
    for (int64_t s : shape) {
      if (s < 0) throw Error(where + " has a negative dimension");
      numel *= s;
    }
    const uint64_t want = static_cast<uint64_t>(numel) * c10::elementSize(dtype);
    if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size || offsets[1] - offsets[0] != want)
      throw Error(where + " has data_offsets that do not match its shape and dtype (" + std::to_string(want) +
                  " bytes) or run past the end of the file (" + std::to_string(data_size) +
                  " bytes of data): the file is damaged, download it again");
    at::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
    in.seekg(static_cast<std::streamoff>(data_begin + offsets[0]));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(want));
    if (!in) throw Error(where + " could not be read: the file is damaged, download it again");
    dict.insert(name, t);
  }
  return dict;
}

}  // namespace kit
