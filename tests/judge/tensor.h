// Tensors in records (judge.h): a subject records a tensor's dtype, shape and elements (moved
// to the CPU, contiguous, detached); the judge gets back a CPU tensor holding exactly those.
// An undefined tensor (a gradient that never arrived) stays undefined.
#pragma once
#include <torch/torch.h>

#include <cstring>

#include "judge.h"

namespace kit::judge {

namespace detail {
inline uint8_t dtype_code(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return 1;
    case torch::kFloat64: return 2;
    case torch::kBFloat16: return 3;
    case torch::kFloat16: return 4;
    case torch::kInt64: return 5;
    case torch::kInt32: return 6;
    case torch::kBool: return 7;
    case torch::kUInt8: return 8;
    case torch::kInt8: return 9;
    case torch::kInt16: return 10;
    default: return 0;
  }
}
inline std::optional<torch::ScalarType> dtype_of(uint8_t code) {
  switch (code) {
    case 1: return torch::kFloat32;
    case 2: return torch::kFloat64;
    case 3: return torch::kBFloat16;
    case 4: return torch::kFloat16;
    case 5: return torch::kInt64;
    case 6: return torch::kInt32;
    case 7: return torch::kBool;
    case 8: return torch::kUInt8;
    case 9: return torch::kInt8;
    case 10: return torch::kInt16;
    default: return std::nullopt;
  }
}
}  // namespace detail

template <>
struct Codec<torch::Tensor> {
  static Value put(const torch::Tensor& t) {
    Value v;
    v.kind = Value::Kind::Tensor;
    if (!t.defined()) return v;  // dtype 0: undefined
    const uint8_t code = detail::dtype_code(t.scalar_type());
    const torch::Tensor c = code ? t.detach().cpu().contiguous() : t.detach().cpu().to(torch::kFloat64).contiguous();
    v.dtype = code ? code : 2;
    v.shape.assign(c.sizes().begin(), c.sizes().end());
    v.bytes.assign(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
    return v;
  }
  static bool get(const Value& v, torch::Tensor* out) {
    if (v.kind != Value::Kind::Tensor) return false;
    if (v.dtype == 0) {
      *out = torch::Tensor();
      return true;
    }
    const auto type = detail::dtype_of(v.dtype);
    if (!type) return false;
    torch::Tensor t = torch::empty(v.shape, torch::TensorOptions().dtype(*type));
    if (static_cast<size_t>(t.numel() * t.element_size()) != v.bytes.size()) return false;
    if (!v.bytes.empty()) std::memcpy(t.data_ptr(), v.bytes.data(), v.bytes.size());
    *out = t;
    return true;
  }
};

}  // namespace kit::judge
