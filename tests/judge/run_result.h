// A program run (kit_test::RunResult: exit code, deadline, seconds, output) as judge data: what
// a subject part records of a run it made, and the judge reads back with got.get<RunResult>.
#pragma once
#include "judge/judge.h"
#include "process_harness.h"

namespace kit::judge {
template <>
struct Codec<kit_test::RunResult> : Fields<kit_test::RunResult> {
  static auto fields() {
    using R = kit_test::RunResult;
    return std::make_tuple(field("exitcode", &R::exitcode), field("timed_out", &R::timed_out),
                           field("seconds", &R::seconds), field("output", &R::output));
  }
};
}  // namespace kit::judge
