// A program run (kit_test::RunResult: exit code, deadline, seconds, output) as judge data: what
// a subject part records of a run it made, and the judge reads back with got.get<RunResult>.
#pragma once
#include "judge/judge.h"
#include "process_harness.h"

namespace kit::judge {
template <>
struct Codec<kit_test::RunResult> {
  static Value put(const kit_test::RunResult& r) {
    Value v;
    v.kind = Value::Kind::Map;
    v.map.emplace_back("exitcode", Codec<int>::put(r.exitcode));
    v.map.emplace_back("timed_out", Codec<bool>::put(r.timed_out));
    v.map.emplace_back("seconds", Codec<double>::put(r.seconds));
    v.map.emplace_back("output", Codec<std::string>::put(r.output));
    return v;
  }
  static bool get(const Value& v, kit_test::RunResult* out) {
    const Value *e = v.find("exitcode"), *t = v.find("timed_out"), *s = v.find("seconds"), *o = v.find("output");
    return v.kind == Value::Kind::Map && e && t && s && o && Codec<int>::get(*e, &out->exitcode) &&
           Codec<bool>::get(*t, &out->timed_out) && Codec<double>::get(*s, &out->seconds) &&
           Codec<std::string>::get(*o, &out->output);
  }
};
}  // namespace kit::judge
