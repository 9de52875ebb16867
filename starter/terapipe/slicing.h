// Problem 7.3: TeraPipe's slicing of a sequence into token slices (Li et al., ICML 2021).
//
// In a causal Transformer token i depends only on tokens <= i, so a sequence of L tokens can
// enter a K-stage pipeline as slices l_1, ..., l_n (l_1 + ... + l_n = L) one after another:
// slice i starts after the c_i = l_1 + ... + l_{i-1} tokens before it, whose keys and values
// it attends to. With t(l, c) the latency of one stage on a slice of l tokens after c tokens
// of context, the pipeline takes
//
//   T = sum_i t(l_i, c_i) + (K - 1) * max_i t(l_i, c_i)
//
// (the first stage works through every slice; the slowest slice then crosses the other K - 1
// stages). Later slices attend to more context and cost more, so the best slicing is not
// uniform: TeraPipe finds it by enumerating the bound B on the slowest slice and, for each,
// minimising the sum under max <= B with a dynamic program over prefixes.
//
//   auto t = [](int64_t l, int64_t c) { return 1.0 + l * (1.0 + 0.01 * c); };
//   Slicing s = optimal_slicing(/*L=*/64, /*K=*/4, t);   // s.lengths sums to 64
//   double T = s.time(4);                                 // its predicted pipeline latency
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kit::terapipe {

// t(l, c) for 1 <= l and l + c <= L: seconds of one stage on l tokens after c of context.
using Latency = std::function<double(int64_t l, int64_t c)>;

struct Slicing {
  std::vector<int64_t> lengths;  // l_1 .. l_n, each >= 1, summing to L
  double sum = 0;                // sum_i t(l_i, c_i)
  double max = 0;                // max_i t(l_i, c_i)
  double time(int64_t stages) const { return sum + static_cast<double>(stages - 1) * max; }
};

// Given: the sum and max of `lengths` under t. kit::Error naming the problem when a length
// is below 1 or the lengths do not add up to L.
Slicing evaluate(const std::vector<int64_t>& lengths, int64_t L, const Latency& t);

// Given: k slices as equal as possible (the first L % k one token longer). kit::Error when
// k is not in 1..L.
std::vector<int64_t> uniform_slicing(int64_t L, int64_t k);

// Given: "12+12+8" for {12, 12, 8}.
std::string to_string(const std::vector<int64_t>& lengths);

// Given: the slicing train_parallel's --slices names for L tokens on K stages: "none" (one
// slice), "uniform:N", "dp" (optimal_slicing on the model `latency` gives; kit::Error when
// there is none) or lengths "64+32+32" (checked by evaluate). kit::Error naming the flag.
std::vector<int64_t> slicing_from_spec(const std::string& spec, int64_t L, int64_t K,
                                       const std::function<Latency()>& latency);

// Problem 7.3 (solution in terapipe/slicing_dp.cpp): the slicing of L tokens for a K-stage
// pipeline with the smallest time(K), with its sum and max filled in. Calls t only for
// 1 <= l, l + c <= L. kit::Error when L < 1 or K < 1.
Slicing optimal_slicing(int64_t L, int64_t K, const Latency& t);

}  // namespace kit::terapipe
