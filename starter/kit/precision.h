// The precision a training step computes in: fp32, or bf16 the way mixed-precision training
// does it (Micikevicius et al. 2018; the ZeRO and Megatron-LM papers): the matrix products
// (linear layers, attention's matmuls) in bfloat16 through autocast, the weights, the
// gradients, the optimizer's state and the loss in fp32. bfloat16 keeps fp32's exponent range,
// so no loss scaling is needed (fp16 would need it).
//
// The programs take --precision fp32|bf16 and hold an Autocast for the forward pass only (the
// backward runs each op in the type its forward used); the loss is computed from the logits
// cast back to fp32. On a CPU the same bf16 path runs (slower there: it is for the tests).
#pragma once
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace kit {

enum class Precision { FP32, BF16 };

Precision parse_precision(const std::string& name);  // "fp32" or "bf16"; kit::Error names both otherwise

// While alive: autocast to bfloat16 on `device` (BF16), or nothing (FP32). Nests; the
// outermost one clears autocast's cache of cast weights when it ends, as Python's does.
class Autocast {
 public:
  Autocast(Precision precision, c10::DeviceType device);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_ = false, was_enabled_ = false;
  c10::DeviceType device_;
  c10::ScalarType was_dtype_;
};

}  // namespace kit
