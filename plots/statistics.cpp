#include "statistics.h"

#include <cmath>
#include <map>

#include "kit/errors.h"

namespace kit::plots {

std::vector<EpochTotals> totals_per_epoch(const Run& run) {
  std::map<int64_t, EpochTotals> by_epoch;
  std::map<int64_t, int> ranks;
  for (const auto& r : run.records) {
    auto& t = by_epoch[r.epoch];
    t.epoch = r.epoch;
    t.training_time += r.training_time;
    t.tokens_per_sec += r.tokens_per_sec;
    ++ranks[r.epoch];
  }
  std::vector<EpochTotals> out;
  for (auto& [epoch, t] : by_epoch) {
    t.training_time /= ranks[epoch];
    out.push_back(t);
  }
  return out;
}

MeanStd mean_std(const std::vector<double>& values) {
  if (values.empty()) throw Error("mean_std: no values (a run needs at least one epoch)");
  MeanStd s;
  s.n = values.size();
  for (double v : values) s.mean += v;
  s.mean /= static_cast<double>(s.n);
  if (s.n > 1) {
    double sq = 0;
    for (double v : values) sq += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(sq / static_cast<double>(s.n - 1));
  }
  return s;
}

RunStats run_stats(const Run& run) {
  auto totals = totals_per_epoch(run);
  if (totals.empty()) throw Error(run.source + ": no epochs to average");
  RunStats st;
  st.first_epoch_dropped = totals.size() > 1;
  if (st.first_epoch_dropped)
    totals.erase(totals.begin());
  else
    st.warning = run.source + " has only one epoch: keeping it, so warm-up is included in the numbers "
                              "(run with --epochs 2 or more for a fair measurement)";
  if (st.first_epoch_dropped && totals.size() == 1)
    st.warning = run.source + " has one measured epoch (its first of 2 is warm-up, dropped): no spread to show, "
                              "so no error bar (run with --epochs 3 or more)";
  std::vector<double> time, tps;
  for (const auto& t : totals) {
    st.epochs_used.push_back(t.epoch);
    time.push_back(t.training_time);
    tps.push_back(t.tokens_per_sec);
  }
  st.training_time = mean_std(time);
  st.tokens_per_sec = mean_std(tps);
  return st;
}

std::optional<MeanStd> forward_only_stats(const Run& run) {
  const auto& f = run.forward_tokens_per_sec;
  if (f.empty()) return std::nullopt;
  std::vector<double> tps;
  for (size_t i = f.size() > 1 ? 1 : 0; i < f.size(); ++i) tps.push_back(f[i].second);
  return mean_std(tps);
}

std::vector<std::pair<double, double>> loss_curve(const Run& run) {
  bool per_batch = true;
  for (const auto& r : run.records) per_batch = per_batch && !r.batch_losses.empty();

  // epoch -> the records of its ranks, in rank order (records are sorted that way).
  std::map<int64_t, std::vector<const EpochRecord*>> epochs;
  for (const auto& r : run.records) epochs[r.epoch].push_back(&r);

  std::vector<std::pair<double, double>> curve;
  for (const auto& [epoch, ranks] : epochs) {
    if (!per_batch) {
      double sum = 0;
      for (const auto* r : ranks) sum += r->train_loss;
      const double loss = sum / static_cast<double>(ranks.size());
      if (!std::isnan(loss)) curve.emplace_back(static_cast<double>(epoch), loss);
      continue;
    }
    const size_t n = ranks.front()->batch_losses.size();
    for (const auto* r : ranks)
      if (r->batch_losses.size() != n)
        throw Error(run.source + ": in epoch " + std::to_string(epoch) + " rank " + std::to_string(r->rank) + " (" +
                    r->file + ") has " + std::to_string(r->batch_losses.size()) + " batch losses but rank " +
                    std::to_string(ranks.front()->rank) + " has " + std::to_string(n) +
                    ": data-parallel ranks must take the same number of steps");
    for (size_t k = 0; k < n; ++k) {
      double sum = 0;
      for (const auto* r : ranks) sum += r->batch_losses[k];
      const double loss = sum / static_cast<double>(ranks.size());
      const double x = static_cast<double>(epoch - 1) + static_cast<double>(k + 1) / static_cast<double>(n);
      if (!std::isnan(loss)) curve.emplace_back(x, loss);
    }
  }
  return curve;
}

}  // namespace kit::plots
