#include "kit/precision.h"

#include <ATen/autocast_mode.h>

#include "kit/compat.h"
#include "kit/errors.h"

namespace kit {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "bf16") return Precision::BF16;
  throw Error("--precision " + name + " is not one of fp32, bf16");
}

namespace {

// autocast's settings for one device type, across LibTorch versions (kit/compat.h).
bool enabled(c10::DeviceType d) {
#if KIT_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(d);
#else
  return d == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}
void set_enabled(c10::DeviceType d, bool on) {
#if KIT_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(d, on);
#else
  if (d == c10::DeviceType::CUDA) at::autocast::set_enabled(on);
  else at::autocast::set_cpu_enabled(on);
#endif
}
c10::ScalarType dtype(c10::DeviceType d) {
#if KIT_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(d);
#else
  return d == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}
void set_dtype(c10::DeviceType d, c10::ScalarType t) {
#if KIT_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(d, t);
#else
  if (d == c10::DeviceType::CUDA) at::autocast::set_autocast_gpu_dtype(t);
  else at::autocast::set_autocast_cpu_dtype(t);
#endif
}

}  // namespace

Autocast::Autocast(Precision precision, c10::DeviceType device) : device_(device), was_dtype_(c10::kFloat) {
  if (precision == Precision::FP32) return;
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA)
    throw Error("bf16 autocast runs on the CPU or a CUDA device, not " + c10::DeviceTypeName(device));
  active_ = true;
  was_enabled_ = enabled(device);
  was_dtype_ = dtype(device);
  set_enabled(device, true);
  set_dtype(device, c10::kBFloat16);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_, was_enabled_);
  set_dtype(device_, was_dtype_);
}

bool is_low_precision(c10::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

at::Tensor full_precision(const at::Tensor& logits) {
  return is_low_precision(logits.scalar_type()) ? logits.to(at::kFloat) : logits;
}

AutocastState autocast_state(c10::DeviceType device) { return {enabled(device), dtype(device)}; }

void set_autocast_state(c10::DeviceType device, const AutocastState& state) {
  set_enabled(device, state.enabled);
  set_dtype(device, state.dtype);
  at::autocast::clear_cache();
}

}  // namespace kit
