// How many bytes of tensor memory this process holds on the CPU, counted exactly.
//
// RSS cannot tell a pipeline stage's activations from everything else (the allocator
// keeps freed pages, threads have stacks, LibTorch maps its code). Instead the kit can put
// a counting allocator in front of LibTorch's CPU allocator: every tensor buffer allocated
// after enable_cpu_counting() adds its size, and subtracts it when freed. The peak over a
// step minus what was held before it is the memory the step kept alive: for a pipeline
// stage, the activations of its in-flight micro-batches (bench/README.md, Problem 3).
#pragma once
#include <cstdint>

namespace kit::memory {

// Installs the counting allocator (once; later calls do nothing). Buffers allocated before
// are never counted, neither when allocated nor when freed.
void enable_cpu_counting();
bool cpu_counting_enabled();

int64_t cpu_bytes_now();   // bytes held right now (0 before enable_cpu_counting)
int64_t cpu_bytes_peak();  // the most held at once since the last reset_cpu_peak()
void reset_cpu_peak();     // peak := now

// The whole process, from the operating system (LibTorch's code, caches, stacks too):
int64_t rss_bytes();       // the resident set now (/proc/self/statm)
int64_t peak_rss_bytes();  // the most resident at once so far (getrusage's ru_maxrss)

}  // namespace kit::memory
