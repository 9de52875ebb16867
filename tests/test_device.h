// Where the suites compute: KIT_TEST_DEVICE=cpu (the default) or cuda.
//
// With cuda, main() (kit_gtest_main.cpp) sets KIT_GLOO_DEVICE=cuda for everything a case
// starts, so every rank and program of a multi-process case computes on the GPU, all of
// them sharing it over Gloo (dist.h stages their messages through host memory; a process
// that sees no GPU stops with dist::gloo_device's message); the cases written for CUDA
// (foundation's MemoryCounter, Attention, KitAdamW, GPT2Model, pipeline's PipeDevices) run
// there as well. NCCL with one GPU per rank stays the production path (srun, --backend nccl).
// Torch-free: main() links no LibTorch of its own.
#pragma once
#include <cstdlib>
#include <string>

namespace kit_test {

// "cpu" or "cuda", from KIT_TEST_DEVICE (unset: "cpu"); "" and `error` set for another value.
inline std::string test_device_name(std::string* error = nullptr) {
  const char* v = std::getenv("KIT_TEST_DEVICE");
  const std::string value = v ? v : "";
  if (value.empty() || value == "cpu") return "cpu";
  if (value == "cuda") return "cuda";
  if (error) *error = "KIT_TEST_DEVICE='" + value + "' is neither cpu nor cuda: unset it or set it to cuda";
  return "";
}

// main()'s part, before any case: "" when the suites may run, else the message to stop with.
inline std::string apply_test_device() {
  std::string error;
  if (test_device_name(&error) == "cuda") ::setenv("KIT_GLOO_DEVICE", "cuda", /*overwrite=*/0);
  return error;
}

}  // namespace kit_test
