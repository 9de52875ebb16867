// The precision a training step computes in: fp32, or bf16 the way mixed-precision training
// does it (Micikevicius et al. 2018; the ZeRO and Megatron-LM papers): the matrix products
// (linear layers, attention's matmuls) in bfloat16 through autocast, the weights, the
// gradients, the optimizer's state and the loss in fp32. bfloat16 keeps fp32's exponent range,
// so no loss scaling is needed (fp16 would need it).
//
// The programs take --precision fp32|bf16 and hold an Autocast for the forward passes only
// (the backward runs each op in the type its forward used): train_parallel's ZeRO-3 step
// around its forward, the pipeline executors around each forward action
// (pipeline_training/executor.h), and a recomputed block runs under the setting its first
// forward ran under (pipeline_training/recompute.h's saved states carry it). The loss is
// computed from the logits cast back to fp32. On a CPU the same bf16 path runs (slower there:
// it is for the tests).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace kit {

enum class Precision { FP32, BF16 };

Precision parse_precision(const std::string& name);  // "fp32" or "bf16"; kit::Error names both otherwise

// A precision and the device type the forward passes run on: what an Autocast is made from,
// for code that runs forwards on someone else's behalf (the pipeline executors).
struct ForwardPrecision {
  Precision precision = Precision::FP32;
  c10::DeviceType device = c10::DeviceType::CPU;
};

// While alive: autocast to bfloat16 on `device` (BF16), or nothing (FP32). Nests; the
// outermost one clears autocast's cache of cast weights when it ends, as Python's does.
class Autocast {
 public:
  Autocast(Precision precision, c10::DeviceType device);
  explicit Autocast(const ForwardPrecision& forward) : Autocast(forward.precision, forward.device) {}
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_ = false, was_enabled_ = false;
  c10::DeviceType device_;
  c10::ScalarType was_dtype_;
};

// bfloat16 or float16: a type a model computes in but an optimizer does not update in (its
// 8 or 11 significant bits lose small updates): ZeRO keeps an fp32 master copy beside it.
bool is_low_precision(c10::ScalarType t);

// Logits in bfloat16 or float16 (a forward under autocast) as float32; any other type
// unchanged (float64 stays float64). Every loss of the kit is taken of these: the softmax over
// the vocabulary is where low precision loses most.
at::Tensor full_precision(const at::Tensor& logits);

// Autocast's setting on a device type, for code that runs a forward again as it first ran
// (a recomputed block: pipeline_training/recompute.h's save_generators keeps it).
struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::kBFloat16;
};
AutocastState autocast_state(c10::DeviceType device);
// Sets it, and empties autocast's cache of cast weights: a copy cast while it was on must not
// outlive the weight's next update (the optimizer changes weights in place).
void set_autocast_state(c10::DeviceType device, const AutocastState& state);

}  // namespace kit
