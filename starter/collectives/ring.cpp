// Problem 5.1: ring reduce-scatter, all-gather and all-reduce from send/recv (see ring.h).
#include <torch/torch.h>

#include "collectives/ring.h"
#include "kit/errors.h"

namespace kit::ring {

// Helpers for the three functions below: mod (a mod n, never negative), ring_chunk (chunk i
// of n of a flat tensor, as a view: writing into it writes the tensor) and flat_view (a 1-d
// view of a contiguous tensor, or a clear error).
namespace {
[[maybe_unused]] int64_t mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }
[[maybe_unused]] torch::Tensor ring_chunk(const torch::Tensor& flat, int64_t n, int64_t i) {
  const Range c = chunk_range(flat.numel(), n, i);
  return flat.narrow(0, c.begin, c.size());
}
[[maybe_unused]] torch::Tensor flat_view(const torch::Tensor& t, const char* what) {
  if (!t.is_contiguous())
    throw Error(std::string("ring::") + what + " works in place on a contiguous tensor: pass t.contiguous() and "
                "read the result from that");
  return t.view({-1});
}
}  // namespace

void ring_reduce_scatter(const torch::Tensor& tensor, const dist::Group& group) {
  // TODO(Problem 5.1 ring_reduce_scatter): your code here.
  throw kit::NotImplemented("Problem 5.1 ring_reduce_scatter");
}

void ring_all_gather(const torch::Tensor& tensor, const dist::Group& group) {
  // TODO(Problem 5.1 ring_all_gather): your code here.
  throw kit::NotImplemented("Problem 5.1 ring_all_gather");
}

void ring_all_reduce(const torch::Tensor& tensor, const dist::Group& group) {
  // TODO(Problem 5.1 ring_all_reduce): your code here.
  throw kit::NotImplemented("Problem 5.1 ring_all_reduce");
}

}  // namespace kit::ring
