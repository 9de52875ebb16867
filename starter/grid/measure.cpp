// What a training run measures around the trainer's step (see grid/measure.h).
#include "grid/measure.h"

#include <algorithm>

#include "app/run.h"
#include "kit/memory.h"
#include "zero/data_parallel_optimizer.h"

namespace kit::grid {

void MemoryProbe::hook(StepHooks& h, const zero::DataParallelOptimizer& optimizer, bool timed_memory) {
  h.before_schedule = [this, timed_memory] {
    base = memory::bytes_now(device);
    rss0 = memory::rss_bytes();
    if (timed_memory) memory::reset_peak(device);
  };
  h.before_action = [this, timed_memory](size_t, const pp::Action&) {
    const int64_t kept = memory::bytes_now(device) - base;
    activation = std::max(activation, kept);
    rss_rise = std::max(rss_rise, memory::rss_bytes() - rss0);
    if (timed_memory) most.kept = std::max(most.kept, kept);
  };
  h.after_schedule = [this, timed_memory] {
    if (timed_memory) most.peak = std::max(most.peak, memory::bytes_peak(device) - base);
  };
  h.after_backward = [this, &optimizer] { gradient_peak = std::max(gradient_peak, optimizer.gradient_bytes_held()); };
}

void PipelineTimes::add(const pp::BatchResult& batch, bool timed) {
  spans.push_back(batch.timeline.empty() ? 0.0 : batch.timeline.back().end);
  if (!timed) return;
  for (const auto& a : batch.timeline)
    unit_compute.at(static_cast<size_t>(a.action.microbatch))[a.action.op == pp::Op::Forward ? 0 : 1].push_back(
        a.end - a.start - a.recv);
}

nlohmann::json PipelineTimes::json(const pp::BatchResult& last, int64_t warmup) const {
  nlohmann::json timeline = nlohmann::json::array(), units = nlohmann::json::array();
  for (const auto& a : last.timeline)
    timeline.push_back({a.action.op == pp::Op::Forward ? 0 : 1, a.action.microbatch, a.stage, a.start, a.end, a.recv});
  for (const auto& fb : unit_compute) units.push_back({median(fb[0]), median(fb[1])});
  return {{"pipeline_seconds", after_warmup(spans, warmup)}, {"unit_compute_seconds", units}, {"timeline", timeline}};
}

nlohmann::json zero_metrics(const ZeroAccounting& a, const zero::DataParallelOptimizer& optimizer,
                            const MemoryProbe& probe, const dist::Counters& data, double steps) {
  const int stage = zero::zero_stage_of(a.optimizer);
  const bool master = zero::master_weights(a.precision, a.optimizer);
  const double n = static_cast<double>(a.d), ring = 2.0 * (n - 1) / n;
  const double ar_bytes = static_cast<double>(data.all_reduce_bytes) / steps,
               send_bytes = static_cast<double>(data.send_bytes) / steps;
  // fp32 AdamW 4 + 4 + 8 bytes per parameter, mixed precision 2 + 2 + 12 (bf16 parameters and
  // gradients, the fp32 master and moments); /n where sharded.
  const double P = static_cast<double>(a.P), w = master ? 2 : 4, K = master ? 12 : 8;
  const double f_params = (stage == 3 ? w / n : w) * P, f_grads = (stage >= 2 ? w / n : w) * P,
               f_state = (stage == 0 ? K : K / n) * P, p_comm = w * P;
  const auto counted = [&](int64_t bytes) { return probe.counts_tensors ? nlohmann::json(bytes) : nlohmann::json(); };
  const torch::Device device = probe.device;
  return {{"zero_stage", stage}, {"weight_decay", a.weight_decay}, {"parameter_count", a.P},
          {"gradient_bytes", optimizer.gradient_bytes()}, {"gradient_peak_bytes", probe.gradient_peak},
          {"activation_bytes", counted(probe.activation)},
          {"activation_measure",
           !probe.counts_tensors ? "not measured: " + memory::why_not_counted(device)
                                 : std::string(device.is_cpu() ? "kit::memory's counting CPU allocator"
                                                               : "LibTorch's CUDA caching allocator, read by kit::memory") +
                                       ": the most tensor bytes held before any action of a batch's schedule above "
                                       "those held when it started (at m = 1 before the backward: what autograd "
                                       "saved for it, and the loss), the largest over the steps"},
          {"rss_forward_rise_bytes", probe.rss_rise},
          {"formula_bytes",
           {{"parameters", f_params}, {"gradients", f_grads}, {"optimizer_state", f_state},
            {"total", f_params + f_grads + f_state},
            {"accounting", master ? "mixed precision: 2 + 2 + 12 bytes per parameter"
                                  : "fp32: 4 + 4 + 8 bytes per parameter"}}},
          {"all_reduce_bytes_per_step", ar_bytes}, {"send_bytes_per_step", send_bytes},
          {"comm_bytes_per_step", stage == 0 ? ring * ar_bytes : send_bytes}, {"comm_bytes_counted", stage != 0},
          {"formula_all_reduce_comm_bytes_per_step", ring * p_comm},
          {"formula_comm_bytes_per_step", (stage == 3 ? 1.5 : 1.0) * ring * p_comm}};
}

}  // namespace kit::grid
