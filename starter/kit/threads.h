// How many threads a process computes with. The kit's processes each take --threads (1 in
// the tests, so that several ranks share a small machine without oversubscribing it).
#pragma once
#include <cstdint>

namespace kit {

// Sets LibTorch's intra-op threads (LibTorch here starts with 1 unless told) and one
// inter-op thread. Throws kit::Error for n < 1.
void set_threads(int64_t n);

}  // namespace kit
