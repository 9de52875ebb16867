// Helpers for the schedule and simulator tests: readable schedules in failure messages,
// schedules written as strings ("F0 F1 B0 F2.1"), and a guard that turns a hang into a
// failure. Nothing here needs LibTorch.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "error_of.h"
#include "run_with_timeout.h"
#include "kit/errors.h"
#include "pipeline_training/action.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/simulate.h"

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

// The student's schedule of every rank, or a failure naming what was not implemented.
inline kit::pp::Schedules build(kit::pp::ScheduleKind kind, int64_t p, int64_t m, int64_t v = 1) {
  return kit::pp::make_schedule(kind, {p, m, v});
}

}  // namespace pp_test
