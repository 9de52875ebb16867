// How many bytes of tensor memory this process holds, counted exactly: on the CPU by a
// counting allocator, on a GPU by LibTorch's CUDA caching allocator.
//
// RSS cannot tell a pipeline stage's activations from everything else (the allocator
// keeps freed pages, threads have stacks, LibTorch maps its code). Instead the kit can put
// a counting allocator in front of LibTorch's CPU allocator: every tensor buffer allocated
// after enable_cpu_counting() adds its size, and subtracts it when freed. The peak over a
// step minus what was held before it is the memory the step kept alive: for a pipeline
// stage, the activations of its in-flight micro-batches (bench/README.md, Problem 3).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace kit::memory {

// Installs the counting allocator (once; later calls do nothing). Buffers allocated before
// are never counted, neither when allocated nor when freed.
void enable_cpu_counting();
bool cpu_counting_enabled();

int64_t cpu_bytes_now();   // bytes held right now (0 before enable_cpu_counting)
int64_t cpu_bytes_peak();  // the most held at once since the last reset_cpu_peak()
void reset_cpu_peak();     // peak := now
// How often reset_cpu_peak() has run in this process: a test that resets the peak before a
// step and reads it after checks that nothing in the step reset it again (a step that did
// would hide its own peak).
int64_t cpu_peak_resets();
// Whether the buffer at `data` is one the counting allocator handed out and has not freed:
// given code that holds a buffer (FSDP's full parameters) checks that its memory is counted.
bool counts_cpu_buffer(const void* data);

// The same, for the tensors of one device: the CPU's through the counting allocator above, a
// CUDA device's from LibTorch's CUDA caching allocator, which counts every block it hands out
// (what torch.cuda.memory_allocated and max_memory_allocated report). The programs call these
// with the device they compute on, so every byte count they write means the same on both.
void enable_counting(const c10::Device& device);  // CPU: enable_cpu_counting(); CUDA: nothing to install
std::string why_not_counted(const c10::Device& device);  // "" when bytes on `device` are counted
int64_t bytes_now(const c10::Device& device);      // 0 where why_not_counted is not ""
int64_t bytes_peak(const c10::Device& device);     // the most held at once since reset_peak(device)
void reset_peak(const c10::Device& device);        // peak := now

// The bytes of a tensor's elements (numel x element size; 0 for an undefined tensor): what
// the kit's byte counts add up from the tensors themselves.
inline int64_t bytes_of(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : int64_t{0};
}

// The whole process, from the operating system (LibTorch's code, caches, stacks too):
int64_t rss_bytes();       // the resident set now (/proc/self/statm)
int64_t peak_rss_bytes();  // the most resident at once so far (getrusage's ru_maxrss)

}  // namespace kit::memory
