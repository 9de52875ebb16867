// Replaying a schedule in time (see simulate.h). The replay is a plain loop: sweep the
// ranks, start every rank's next action whose inputs are ready, and stop when a sweep
// starts nothing. Then either every action ran, or the ranks left wait on each other:
// a deadlock, reported with who waits for what. Each sweep starts at least one action or
// ends the loop, so it never runs longer than (number of actions + 1) sweeps.
#include "pipeline_training/simulate.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kit/errors.h"

namespace kit::pp {

namespace {

constexpr double kNotDone = -1;

std::string rank_action(int64_t rank, const Action& a) { return "rank " + std::to_string(rank) + " " + to_string(a); }

void check_cost(double x, const std::string& what) {
  if (!std::isfinite(x) || x < 0) {
    std::ostringstream msg;
    msg << "simulator cost " << what << " = " << x << ": costs must be finite and >= 0";
    throw Error(msg.str());
  }
}

void check_per_stage(const std::vector<double>& costs, const char* name, const PipelineShape& shape) {
  if (costs.empty()) return;
  if (static_cast<int64_t>(costs.size()) != shape.stages())
    throw Error(std::string("simulator ") + name + " has " + std::to_string(costs.size()) +
                " entries: give one per virtual stage (S = v*p = " + std::to_string(shape.stages()) +
                ") or none to use the scalar cost");
  for (size_t s = 0; s < costs.size(); ++s) check_cost(costs[s], std::string(name) + "[" + std::to_string(s) + "]");
}

// The end time of every F and every B, per (micro-batch, virtual stage); kNotDone until it ran.
struct Done {
  int64_t stages;
  std::vector<double> forward, backward;
  Done(const PipelineShape& s)
      : stages(s.stages()),
        forward(static_cast<size_t>(s.microbatches * s.stages()), kNotDone),
        backward(forward) {}
  double& at(Op op, int64_t microbatch, int64_t stage) {
    return (op == Op::Forward ? forward : backward)[static_cast<size_t>(microbatch * stages + stage)];
  }
};

// What one action needs before it can start: an earlier action and the delay after it.
struct Need {
  Op op;
  int64_t stage;
  double delay;
};

std::vector<Need> needs(const Action& a, int64_t stage, const PipelineShape& shape, double comm) {
  const auto after = [&](Op op, int64_t s) {
    return Need{op, s, rank_of_stage(shape, s) == rank_of_stage(shape, stage) ? 0.0 : comm};
  };
  if (a.op == Op::Forward) {
    if (stage == 0) return {};                       // takes its micro-batch from the data
    return {after(Op::Forward, stage - 1)};          // the previous stage's activation
  }
  std::vector<Need> n = {after(Op::Forward, stage)};  // its own kept activations
  if (stage < shape.stages() - 1) n.push_back(after(Op::Backward, stage + 1));  // the output's gradient
  return n;
}

std::string describe_need(const Need& n, int64_t microbatch, const PipelineShape& shape) {
  const int64_t rank = rank_of_stage(shape, n.stage);
  const Action a{n.op, microbatch, chunk_of_stage(shape, n.stage)};
  return to_string(a) + " of stage " + std::to_string(n.stage) + " on rank " + std::to_string(rank);
}

std::vector<int64_t> peak_in_flight(const std::vector<std::vector<TimedAction>>& ranks) {
  std::vector<int64_t> peaks;
  for (const auto& row : ranks) {
    int64_t alive = 0, peak = 0;
    for (const TimedAction& t : row) {
      alive += t.action.op == Op::Forward ? 1 : -1;
      peak = std::max(peak, alive);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

// Makespan, bubble and peak in-flight from the rows.
void summarize(Timeline& t) {
  double busy = 0, first = std::numeric_limits<double>::infinity(), last = 0;
  for (const auto& row : t.ranks)
    for (const TimedAction& a : row) {
      busy += a.end - a.start;
      first = std::min(first, a.start);
      last = std::max(last, a.end);
    }
  t.makespan = std::isfinite(first) ? last - std::min(first, 0.0) : 0;
  const double capacity = static_cast<double>(t.ranks.size()) * t.makespan;
  t.bubble_fraction = capacity > 0 ? 1 - busy / capacity : 0;
  t.peak_in_flight = peak_in_flight(t.ranks);
}

}  // namespace

double Costs::forward_of(int64_t stage, int64_t chunks) const {
  if (!forward_per_stage.empty()) return forward_per_stage.at(static_cast<size_t>(stage));
  return forward / static_cast<double>(std::max<int64_t>(chunks, 1));
}

double Costs::backward_of(int64_t stage, int64_t chunks) const {
  if (!backward_per_stage.empty()) return backward_per_stage.at(static_cast<size_t>(stage));
  return backward / static_cast<double>(std::max<int64_t>(chunks, 1));
}

void Costs::check(const PipelineShape& shape) const {
  check_cost(forward, "forward");
  check_cost(backward, "backward");
  check_cost(comm, "comm");
  check_per_stage(forward_per_stage, "forward_per_stage", shape);
  check_per_stage(backward_per_stage, "backward_per_stage", shape);
}

void check_complete(const Schedules& schedules, const PipelineShape& shape) {
  const int64_t p = shape.ranks, m = shape.microbatches, v = shape.virtual_chunks;
  if (p < 1 || m < 1 || v < 1)
    throw Error("pipeline shape p = " + std::to_string(p) + ", m = " + std::to_string(m) + ", v = " +
                std::to_string(v) + ": all must be >= 1");
  if (static_cast<int64_t>(schedules.size()) != p)
    throw Error("schedule has " + std::to_string(schedules.size()) + " rank lists for p = " + std::to_string(p) +
                " ranks: give one list per rank");
  // Position of each F and B in its rank's list, -1 while not seen.
  std::vector<int64_t> f_at(static_cast<size_t>(m * shape.stages()), -1), b_at(f_at);
  for (int64_t r = 0; r < p; ++r) {
    const RankSchedule& list = schedules[static_cast<size_t>(r)];
    for (size_t k = 0; k < list.size(); ++k) {
      const Action& a = list[k];
      const std::string where = rank_action(r, a) + " (action " + std::to_string(k) + " of rank " +
                                std::to_string(r) + ")";
      if (a.microbatch < 0 || a.microbatch >= m)
        throw Error(where + ": micro-batch " + std::to_string(a.microbatch) + " is out of range 0.." +
                    std::to_string(m - 1));
      if (a.chunk < 0 || a.chunk >= v)
        throw Error(where + ": chunk " + std::to_string(a.chunk) + " is out of range 0.." + std::to_string(v - 1) +
                    " (v = " + std::to_string(v) + " chunks per rank)");
      const int64_t stage = virtual_stage(shape, r, a.chunk);
      auto& seen = (a.op == Op::Forward ? f_at : b_at)[static_cast<size_t>(a.microbatch * shape.stages() + stage)];
      if (seen >= 0)
        throw Error(where + " appears twice on stage " + std::to_string(stage) + " (first as action " +
                    std::to_string(seen) + "): every (micro-batch, stage) needs exactly one F and one B");
      seen = static_cast<int64_t>(k);
      if (a.op == Op::Backward && f_at[static_cast<size_t>(a.microbatch * shape.stages() + stage)] < 0)
        throw Error(where + " comes before " + to_string(F(a.microbatch, a.chunk)) +
                    " on the same rank: a backward needs its forward's activations");
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t s = 0; s < shape.stages(); ++s)
      for (Op op : {Op::Forward, Op::Backward})
        if ((op == Op::Forward ? f_at : b_at)[static_cast<size_t>(i * shape.stages() + s)] < 0) {
          const int64_t r = rank_of_stage(shape, s);
          throw Error("schedule is incomplete: " + rank_action(r, Action{op, i, chunk_of_stage(shape, s)}) +
                      " (stage " + std::to_string(s) + ") is missing; every (micro-batch, stage) needs one F "
                      "and one B on the stage's rank (stage s runs on rank s % p)");
        }
}

Timeline simulate(const Schedules& schedules, const PipelineShape& shape, const Costs& costs) {
  check_complete(schedules, shape);
  costs.check(shape);
  const int64_t p = shape.ranks;
  Timeline t;
  t.shape = shape;
  t.ranks.resize(static_cast<size_t>(p));
  Done done(shape);
  std::vector<size_t> next(static_cast<size_t>(p), 0);  // index of each rank's next action
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);

  // When the action can start (rank free and inputs arrived), or kNotDone if an input is missing.
  const auto ready_at = [&](int64_t r, const Action& a, int64_t stage) {
    double at = free_at[static_cast<size_t>(r)];
    for (const Need& n : needs(a, stage, shape, costs.comm)) {
      const double end = done.at(n.op, a.microbatch, n.stage);
      if (end == kNotDone) return kNotDone;
      at = std::max(at, end + n.delay);
    }
    return at;
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      const RankSchedule& list = schedules[static_cast<size_t>(r)];
      for (size_t& k = next[static_cast<size_t>(r)]; k < list.size(); ++k) {
        const Action& a = list[k];
        const int64_t stage = virtual_stage(shape, r, a.chunk);
        const double start = ready_at(r, a, stage);
        if (start == kNotDone) break;  // waits for another rank (or for itself: a deadlock)
        const double cost = a.op == Op::Forward ? costs.forward_of(stage, shape.virtual_chunks)
                                                : costs.backward_of(stage, shape.virtual_chunks);
        t.ranks[static_cast<size_t>(r)].push_back({a, stage, start, start + cost});
        done.at(a.op, a.microbatch, stage) = start + cost;
        free_at[static_cast<size_t>(r)] = start + cost;
        progress = true;
      }
    }
  }

  std::string stuck;
  for (int64_t r = 0; r < p; ++r) {
    const RankSchedule& list = schedules[static_cast<size_t>(r)];
    const size_t k = next[static_cast<size_t>(r)];
    if (k == list.size()) continue;
    const Action& a = list[k];
    const int64_t stage = virtual_stage(shape, r, a.chunk);
    for (const Need& n : needs(a, stage, shape, costs.comm))
      if (done.at(n.op, a.microbatch, n.stage) == kNotDone) {
        stuck += "\n  " + rank_action(r, a) + " (action " + std::to_string(k) + ", stage " + std::to_string(stage) +
                 ") waits for " + describe_need(n, a.microbatch, shape);
        if (rank_of_stage(shape, n.stage) == r) stuck += ", which comes later in its own list";
        break;
      }
  }
  if (!stuck.empty())
    throw Error("deadlock: the schedule cannot finish, these ranks wait on each other:" + stuck +
                "\nA real run would hang here until the receive timed out: reorder the actions so that every "
                "rank's next receive is sent before the sender waits itself.");
  summarize(t);
  return t;
}

std::string format_timeline(const Timeline& t) {
  // Column width in time: the smallest action cost, grown if the table would be too wide.
  double unit = std::numeric_limits<double>::infinity();
  size_t label = 2;
  for (const auto& row : t.ranks)
    for (const TimedAction& a : row) {
      if (a.end > a.start) unit = std::min(unit, a.end - a.start);
      label = std::max(label, to_string(a.action).size());
    }
  std::ostringstream out;
  out << std::setprecision(6);
  if (!std::isfinite(unit) || t.makespan <= 0) {
    out << "(empty timeline)\n";
  } else {
    constexpr double kMaxColumns = 400;
    unit = std::max(unit, t.makespan / kMaxColumns);
    const auto columns = static_cast<int64_t>(std::ceil(t.makespan / unit - 1e-9));
    out << "time flows right, one column = " << unit << " time unit" << (unit == 1 ? "" : "s")
        << "; blank = idle (the bubble)\n";
    for (size_t r = 0; r < t.ranks.size(); ++r) {
      std::string line = "rank " + std::to_string(r) + " |";
      for (int64_t c = 0; c < columns; ++c) {
        const double mid = (static_cast<double>(c) + 0.5) * unit;  // a cell shows the action running at its middle
        std::string cell;
        for (const TimedAction& a : t.ranks[r])
          if (a.start <= mid && mid < a.end) cell = to_string(a.action);
        line += " " + cell + std::string(label - cell.size(), ' ');
      }
      line.erase(line.find_last_not_of(' ') + 1);
      out << line << "\n";
    }
  }
  out << "makespan " << t.makespan << ", bubble " << std::fixed << std::setprecision(1) << 100 * t.bubble_fraction
      << " %, peak in-flight (micro-batch, chunk) per rank:";
  for (int64_t n : t.peak_in_flight) out << " " << n;
  out << "\n";
  return out.str();
}

nlohmann::json timeline_to_json(const Timeline& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : t.ranks) {
    nlohmann::json r = nlohmann::json::array();
    for (const TimedAction& a : row) {
      nlohmann::json j = to_json(a.action);
      j["stage"] = a.stage;
      j["start"] = a.start;
      j["end"] = a.end;
      r.push_back(j);
    }
    rows.push_back(r);
  }
  return {{"ranks", t.shape.ranks},       {"microbatches", t.shape.microbatches},
          {"virtual_chunks", t.shape.virtual_chunks}, {"makespan", t.makespan},
          {"bubble_fraction", t.bubble_fraction}, {"peak_in_flight", t.peak_in_flight},
          {"timeline", rows}};
}

Timeline timeline_from_json(const nlohmann::json& j) {
  const std::string what = "timeline JSON";
  if (!j.is_object()) throw Error(what + " is not an object: expected {\"ranks\", \"microbatches\", \"virtual_chunks\", \"timeline\"}");
  const auto count = [&](const char* key, bool required) -> int64_t {
    if (!j.contains(key)) {
      if (required) throw Error(what + " has no \"" + key + "\"");
      return 1;
    }
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1)
      throw Error(what + ": \"" + key + "\" must be an integer >= 1, got " + j[key].dump());
    return j[key].get<int64_t>();
  };
  Timeline t;
  t.shape = {count("ranks", true), count("microbatches", true), count("virtual_chunks", false)};
  if (!j.contains("timeline") || !j["timeline"].is_array() ||
      static_cast<int64_t>(j["timeline"].size()) != t.shape.ranks)
    throw Error(what + ": \"timeline\" must be an array with one list of actions per rank (" +
                std::to_string(t.shape.ranks) + ")");
  for (size_t r = 0; r < j["timeline"].size(); ++r) {
    const nlohmann::json& row = j["timeline"][r];
    if (!row.is_array()) throw Error(what + ": timeline of rank " + std::to_string(r) + " is not an array");
    std::vector<TimedAction> actions;
    for (const nlohmann::json& e : row) {
      TimedAction a;
      a.action = action_from_json(e);
      for (const char* key : {"start", "end"})
        if (!e.contains(key) || !e[key].is_number())
          throw Error(what + ": action " + e.dump() + " of rank " + std::to_string(r) + " needs a number \"" + key + "\"");
      a.start = e["start"].get<double>();
      a.end = e["end"].get<double>();
      if (!(a.end >= a.start))
        throw Error(what + ": action " + e.dump() + " of rank " + std::to_string(r) + " ends before it starts");
      a.stage = e.contains("stage") && e["stage"].is_number_integer()
                    ? e["stage"].get<int64_t>()
                    : virtual_stage(t.shape, static_cast<int64_t>(r), a.action.chunk);
      actions.push_back(a);
    }
    t.ranks.push_back(actions);
  }
  summarize(t);  // makespan, bubble and peaks follow from the rows (measured files may omit them)
  return t;
}

}  // namespace kit::pp
