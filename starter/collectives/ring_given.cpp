// Given code for Problem 5.1: chunk boundaries and one step around the ring.
#include <torch/torch.h>

#include "collectives/ring.h"
#include "kit/errors.h"

namespace kit::ring {

Range chunk_range(int64_t numel, int64_t n, int64_t i) {
  if (n < 1 || i < 0 || i >= n)
    throw Error("ring::chunk_range: chunk " + std::to_string(i) + " of " + std::to_string(n) + " does not exist");
  const int64_t c = (numel + n - 1) / n;
  return {std::min(i * c, numel), std::min((i + 1) * c, numel)};
}

void exchange_with_neighbours(const torch::Tensor& out, const torch::Tensor& in, const dist::Group& group) {
  const int n = group.size(), r = group.rank();
  if (n == 1) return;
  if (!out.is_contiguous() || !in.is_contiguous())
    throw Error("ring::exchange_with_neighbours needs contiguous tensors: narrow() a flat (1-d) tensor, which "
                "stays contiguous, or call .contiguous() on the tensor first");
  // Receive first, then send: Gloo's send completes only once the receive is posted, so
  // every rank posting both before waiting is what lets the whole ring move at once.
  dist::Work recv, send;
  if (in.numel() > 0) recv = dist::recv_async(in, (r - 1 + n) % n, /*tag=*/0, group);
  if (out.numel() > 0) send = dist::send_async(out, (r + 1) % n, /*tag=*/0, group);
  if (send.started()) send.wait();
  if (recv.started()) recv.wait();
}

}  // namespace kit::ring
