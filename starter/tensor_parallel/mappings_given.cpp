// Given code for Problem 4: what the two mappings and the gather need around them.
#include <torch/torch.h>

#include "kit/errors.h"
#include "tensor_parallel/mappings.h"

namespace kit::tp {

namespace {
// A group wrapped as the opaque object an IValue capsule holds.
struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(dist::Group g) : group(std::move(g)) {}
  dist::Group group;
};
}  // namespace

void save_group(torch::autograd::AutogradContext* ctx, const dist::Group& group) {
  ctx->saved_data["kit_tp_group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
}

dist::Group saved_group(torch::autograd::AutogradContext* ctx) {
  const auto it = ctx->saved_data.find("kit_tp_group");
  if (it == ctx->saved_data.end())
    throw Error("tp::saved_group: this backward's forward never called tp::save_group(ctx, group)");
  auto holder = c10::static_intrusive_pointer_cast<GroupHolder>(it->second.toCapsule());
  return holder->group;
}

namespace {
// All-gather along the last dimension forward; this rank's slice of the gradient backward.
struct GatherFromTensorParallel : torch::autograd::Function<GatherFromTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const dist::Group& group) {
    save_group(ctx, group);
    return torch::cat(dist::all_gather(x.contiguous(), group), -1);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const dist::Group group = saved_group(ctx);
    const int64_t part = grads[0].size(-1) / group.size();
    return {grads[0].narrow(-1, group.rank() * part, part).contiguous(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor gather_from_tensor_parallel(const torch::Tensor& x, const dist::Group& group) {
  if (group.size() == 1) return x;
  return GatherFromTensorParallel::apply(x, group);
}

}  // namespace kit::tp
