// Helpers for the schedule and simulator tests: readable schedules in failure messages,
// schedules written as strings ("F0 F1 B0 F2.1"), and a guard that turns a hang into a
// failure, and schedules in records (tests/judge/judge.h): the subject records the student's
// schedule as data, the judge checks and replays it. Nothing here needs LibTorch.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "error_of.h"
#include "judge/judge.h"
#include "run_with_timeout.h"
#include "kit/errors.h"
#include "pipeline_training/action.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/simulate.h"

// An action in a record: [op (0 forward, 1 backward), micro-batch, chunk].
namespace kit::judge {
template <>
struct Codec<kit::pp::Action> {
  static Value put(const kit::pp::Action& a) {
    return Codec<std::vector<int64_t>>::put({a.op == kit::pp::Op::Forward ? 0 : 1, a.microbatch, a.chunk});
  }
  static bool get(const Value& v, kit::pp::Action* out) {
    std::vector<int64_t> x;
    if (!Codec<std::vector<int64_t>>::get(v, &x) || x.size() != 3 || (x[0] != 0 && x[0] != 1)) return false;
    *out = {x[0] == 0 ? kit::pp::Op::Forward : kit::pp::Op::Backward, x[1], x[2]};
    return true;
  }
};
}  // namespace kit::judge

namespace pp_test {

// "rank 0: F0 F1 B0 B1\nrank 1: ..." for failure messages.
inline std::string show(const kit::pp::Schedules& s) {
  std::string out;
  for (size_t r = 0; r < s.size(); ++r) out += "\n  rank " + std::to_string(r) + ": " + kit::pp::to_string(s[r]);
  return out + "\n";
}

// "F0 F1 B0 F2.1" -> {F(0), F(1), B(0), F(2, 1)}.
inline kit::pp::RankSchedule parse(const std::string& text) {
  kit::pp::RankSchedule out;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    const auto dot = word.find('.');
    const int64_t i = std::stoll(word.substr(1, dot - 1));
    const int64_t c = dot == std::string::npos ? 0 : std::stoll(word.substr(dot + 1));
    out.push_back(word[0] == 'F' ? kit::pp::F(i, c) : kit::pp::B(i, c));
  }
  return out;
}

using kit::pp::Costs;
using kit::pp::PipelineShape;
using kit::pp::ScheduleKind;
using kit::pp::Schedules;
using kit::pp::Timeline;
using kit_test::run_with_timeout;  // tests/run_with_timeout.h
using kit_test::error_of;          // tests/error_of.h: the kit::Error message of fn, or a failure

// The student's schedule of every rank (make_schedule calls the student's functions: in a
// subject part only).
inline kit::pp::Schedules build(kit::pp::ScheduleKind kind, int64_t p, int64_t m, int64_t v = 1) {
  return kit::pp::make_schedule(kind, {p, m, v});
}

// The student's schedule of shape {p, m, v}, built in a subject part and recorded as data. In
// the judge (and a plain run): the recorded schedule, or nullopt when the subject part threw or
// never reported (the case has then failed, saying so). In the subject: always nullopt (the
// caller stops there: it computes nothing and checks nothing).
inline std::optional<kit::pp::Schedules> student_schedule(kit::pp::ScheduleKind kind, int64_t p, int64_t m,
                                                          int64_t v = 1) {
  const std::string label = "make_schedule(" + kit::pp::to_string(kind) + ", p = " + std::to_string(p) +
                            ", m = " + std::to_string(m) + ", v = " + std::to_string(v) + ")";
  const kit::judge::Record got =
      kit::judge::subject([&](kit::judge::Record& out) { out.put("schedule", build(kind, p, m, v)); }, label);
  if (!kit::judge::judging() || !got.ok()) return std::nullopt;
  return got.get<kit::pp::Schedules>("schedule");
}

}  // namespace pp_test
