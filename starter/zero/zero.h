// Problem 5.2: ZeRO (Rajbhandari et al. 2020): AdamW whose state is sharded across the n
// ranks of a data-parallel group instead of replicated on each.
//
// All parameters are laid end to end in one flat buffer of P elements, padded to n*S with
// S = ceil(P/n), and rank r owns the shard [r*S, (r+1)*S). Each step:
//
//   1. the local gradients go into a flat buffer of the same layout (pack_gradients);
//   2. ring reduce-scatter (Problem 5.1): rank r gets the sum of its shard's gradients,
//      which it divides by n (the average data parallelism needs);
//   3. AdamW updates the shard only, with moments (exp_avg, exp_avg_sq) for the shard
//      only: 2*S floats per rank instead of 2*P (stage 1);
//   4. ring all-gather: every rank gets every shard's new parameters (the model's
//      parameters are views of the flat buffer, so this updates the model).
//
// Steps 2 + 4 send what one all-reduce sends, 2(n-1)/n of the buffer per rank. Stage 2
// also keeps only the shard of the reduced gradients between steps (the full gradient
// buffer is freed once it is reduced). Stage 3 (the parameters sharded too): fsdp.h, Problem 5.5.
//
// Mixed precision, as the ZeRO paper trains (its section 3.1): when the parameters are
// bfloat16 (or float16), the model computes in them and its gradients are bfloat16 too, but
// AdamW cannot update them there (an update of lr = 1e-3 is below bfloat16's 8 bits of a
// weight of 1). So each rank keeps an fp32 master copy of its shard, master(): update_shard
// applies AdamW to the master, with fp32 moments, and then writes it, rounded, into its shard
// of the bfloat16 parameters, which step 4 all-gathers. Per parameter: 2 bytes of parameters,
// 2 of gradients and K = 12 of optimizer state (master 4, moments 4 + 4), divided by n where
// sharded: ZeRO-1 2P + 2P + 12P/n, ZeRO-2 2P + 14P/n, ZeRO-3 16P/n. In fp32 (or float64)
// there is no master: AdamW updates the parameters' shard itself (4P + 4P + 8P/n in fp32).
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "collectives/ring.h"
#include "dist/dist.h"

namespace kit::zero {

struct ZeroOptions {
  int stage = 1;  // 1: moments sharded; 2: gradients too
  // torch::optim::AdamW's defaults.
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};

// Rank r's shard of a flat buffer of `numel` elements over n ranks: S = ceil(numel/n)
// elements starting at r*S (the last shards reach into the padding past numel).
ring::Range shard_of(int64_t numel, int64_t rank, int64_t n);

class ZeroAdamW {
 public:
  // Makes the parameters views of one flat buffer (so all-gathering it updates them), with
  // every rank's values taken from its own model: build the models identically first.
  ZeroAdamW(std::vector<torch::Tensor> params, dist::Group group, ZeroOptions options = {});
  // An optimizer whose shard is the whole of `shards`, tensors that already are this rank's
  // part (ZeRO stage 3, fsdp.h): they become views of one flat buffer, laid end to end, and
  // update_shard(grad) steps them all. Not for step(), which would shard them again.
  static std::unique_ptr<ZeroAdamW> over_shards(std::vector<torch::Tensor> shards, dist::Group group,
                                                ZeroOptions options = {});

  void zero_grad();
  // After backward on this rank's share of the batch (gradients not yet averaged).
  void step();
  // AdamW on this rank's shard only, given the shard's averaged gradient (S elements, in the
  // parameters' type): step()'s update, public so that tests can check it leaves the other
  // shards alone. Mixed precision: the update is the fp32 master's, then the master rounded
  // into the parameters' shard.
  void update_shard(const torch::Tensor& grad);

  // Mixed precision (bfloat16 or float16 parameters): true, and master() is this rank's fp32
  // copy of its shard, S elements, the values AdamW updates. Otherwise false and undefined.
  bool mixed_precision() const { return master_.defined(); }
  const torch::Tensor& master() const { return master_; }

  // Bytes of optimizer state this rank holds, measured from its tensors: the moments, and the
  // fp32 master in mixed precision (the paper's K = 12 bytes per parameter of the shard).
  int64_t state_bytes() const;
  // Bytes of gradients this rank keeps between steps, measured from the tensors (stage 1:
  // every parameter's .grad(), P elements; stage 2: the reduced shard, S elements).
  int64_t gradient_bytes() const;
  const ring::Range& shard() const { return shard_; }
  int64_t steps_taken() const { return step_; }

  // This rank's shard of the state (moments, master, step count, shard layout) to a file, and back.
  // load: kit::Error naming the file when it was saved by another world size or for other
  // parameters (resharding is not supported: say so).
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  void pack_gradients();  // p.grad() -> grad_flat_ (given)
  ZeroAdamW(dist::Group group, ZeroOptions options);  // over_shards' start
  void lay_out_flat(int64_t padded);  // param_flat_ from params_, each parameter a view of it (given)

  std::vector<torch::Tensor> params_;
  dist::Group group_;
  ZeroOptions opt_;
  int64_t numel_ = 0;           // P, the parameters' elements
  ring::Range shard_;           // this rank's [begin, end) of the padded buffer
  torch::Tensor param_flat_;    // n*S: the parameters, then zeros (padding)
  torch::Tensor grad_flat_;     // n*S, only while a step runs
  torch::Tensor grad_shard_;    // stage 2: the reduced gradients of this shard, kept
  torch::Tensor exp_avg_, exp_avg_sq_;  // S each (fp32 in mixed precision)
  torch::Tensor master_;        // S, fp32: mixed precision only (undefined otherwise)
  int64_t step_ = 0;            // AdamW's t (bias correction): update_shard advances it; saved
};

}  // namespace kit::zero
