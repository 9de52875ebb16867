// The kit's random numbers for data: splitmix64 (Steele, Lea, Flood 2014).
//
// Why not <random>: std::mt19937 is portable, but the distributions on top of it
// (std::uniform_int_distribution, std::shuffle) are implementation-defined, so the same
// seed would give a different corpus or batch order with libstdc++ and libc++. These few
// lines give the same numbers everywhere.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace kit {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) up to a bias below n / 2^64, negligible for the sizes used here.
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_;
};

// One seed from two (e.g. a base seed and an epoch), well mixed.
inline uint64_t mix_seeds(uint64_t a, uint64_t b) { return SplitMix64(a ^ SplitMix64(b).next()).next(); }

// Fisher-Yates shuffle driven by rng: every permutation equally likely.
template <class T>
void shuffle_in_place(std::vector<T>& v, SplitMix64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

}  // namespace kit
