// Subject and judge: every graded case runs as two processes, so that the student's code never
// shares an address space with an expected value, a comparison or a verdict.
//
//   the subject  test_<suite>, linked with the student's code. It runs the case's shared setup
//                (inputs, models built from seeds) and the case's subject parts: the code that
//                calls student functions and records what they produced (tensors, schedules,
//                numbers, the text of an error) into a Record. It computes no expected value
//                and decides nothing: its records go to the grader as plain data.
//   the judge    test_<suite>_judge, the same test objects linked with the given code and the
//                starter's stubs: no student object. It runs the shared setup and the JUDGE
//                parts: it computes the expected values with given code only (a student
//                function called there throws kit::NotImplemented, so a reference that leans on
//                the student's code fails the solution's own self-test), reads the subject's
//                records as untrusted input (bounded, strictly parsed) and writes the verdict.
//
// A test reads the same in both, written once:
//
//   TEST(ClockCyclesExample, FourMicrobatchesOnThreePartitions) {
//     const judge::Record got = judge::subject([&](judge::Record& out) {
//       out.put("schedule", clock_cycles(4, 3));          // student code: the subject only
//     });
//     JUDGE {                                            // expected values: the judge only
//       EXPECT_EQ(to_string(got.get<Schedule>("schedule")), to_string(expected_schedule(4, 3)));
//     }
//   }
//
// A plain run of test_<suite> (ctest, a student) is both at once: the subject part runs, its
// record goes through the same encoding and parsing, then the JUDGE part runs on it.
// Code outside subject() and JUDGE runs in both processes: it must build inputs only, the same
// in both, and never depend on what a subject part returned.
// The grader runs many cases per subject process and per judge process (judge/batch.h): each
// case still starts as in a fresh process, and its records reach the judge on their own.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kit::judge {

// ---- values: what a record holds ---------------------------------------------------------

// A plain value tree: what crosses from the subject to the judge. Tensors are raw bytes with a
// dtype code and a shape (judge/tensor.h converts them); nothing else can be expressed.
struct Value {
  enum class Kind : uint8_t { None = 0, Bool = 1, Int = 2, Real = 3, Text = 4, Tensor = 5, List = 6, Map = 7 };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double r = 0;
  std::string bytes;           // Text: the text; Tensor: the elements, row-major
  uint8_t dtype = 0;           // Tensor: a code of judge/tensor.h, 0 for an undefined tensor
  std::vector<int64_t> shape;  // Tensor
  std::vector<Value> list;     // List
  std::vector<std::pair<std::string, Value>> map;  // Map, in insertion order, keys unique

  const Value* find(const std::string& key) const;
  std::string kind_name() const;
};

// Encoding: one byte of kind, then the payload (little-endian integers, lengths as u64).
std::string encode(const Value& v);
// Strict decoding of untrusted bytes: the whole input is one value, every length within what is
// left, nesting at most 64 deep, a tensor's bytes exactly its shape's elements; otherwise
// nullopt and *why says what was wrong.
std::optional<Value> decode(const std::string& bytes, std::string* why);

// ---- codecs: C++ values to Values and back -------------------------------------------------

// Codec<T>::put(const T&) -> Value and Codec<T>::get(const Value&, T*) -> bool (false: the value
// is not a T). Defined here for bool, integers, floating point, strings, Value, vectors, pairs,
// maps with string keys and optionals; judge/tensor.h adds torch::Tensor; a test adds its own
// types by specializing Codec.
template <typename T, typename = void>
struct Codec;

template <>
struct Codec<Value> {
  static Value put(const Value& v) { return v; }
  static bool get(const Value& v, Value* out) {
    *out = v;
    return true;
  }
};
template <>
struct Codec<bool> {
  static Value put(bool b) {
    Value v;
    v.kind = Value::Kind::Bool;
    v.b = b;
    return v;
  }
  static bool get(const Value& v, bool* out) {
    if (v.kind != Value::Kind::Bool) return false;
    *out = v.b;
    return true;
  }
};
template <typename T>
struct Codec<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static Value put(T x) {
    Value v;
    v.kind = Value::Kind::Int;
    v.i = static_cast<int64_t>(x);
    return v;
  }
  static bool get(const Value& v, T* out) {
    if (v.kind != Value::Kind::Int) return false;
    if constexpr (std::is_unsigned_v<T>) {
      if (v.i < 0) return false;
    }
    *out = static_cast<T>(v.i);
    return static_cast<int64_t>(*out) == v.i;  // fits in T
  }
};
template <typename T>
struct Codec<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static Value put(T x) {
    Value v;
    v.kind = Value::Kind::Real;
    v.r = static_cast<double>(x);
    return v;
  }
  static bool get(const Value& v, T* out) {
    if (v.kind == Value::Kind::Real) *out = static_cast<T>(v.r);
    else if (v.kind == Value::Kind::Int) *out = static_cast<T>(v.i);
    else return false;
    return true;
  }
};
template <>
struct Codec<std::string> {
  static Value put(const std::string& s) {
    Value v;
    v.kind = Value::Kind::Text;
    v.bytes = s;
    return v;
  }
  static bool get(const Value& v, std::string* out) {
    if (v.kind != Value::Kind::Text) return false;
    *out = v.bytes;
    return true;
  }
};
template <typename T>
struct Codec<std::vector<T>> {
  static Value put(const std::vector<T>& xs) {
    Value v;
    v.kind = Value::Kind::List;
    v.list.reserve(xs.size());
    for (const auto& x : xs) v.list.push_back(Codec<T>::put(x));
    return v;
  }
  static bool get(const Value& v, std::vector<T>* out) {
    if (v.kind != Value::Kind::List) return false;
    out->clear();
    out->reserve(v.list.size());
    for (const auto& x : v.list) {
      T t{};
      if (!Codec<T>::get(x, &t)) return false;
      out->push_back(std::move(t));
    }
    return true;
  }
};
template <typename A, typename B>
struct Codec<std::pair<A, B>> {
  static Value put(const std::pair<A, B>& p) {
    Value v;
    v.kind = Value::Kind::List;
    v.list = {Codec<A>::put(p.first), Codec<B>::put(p.second)};
    return v;
  }
  static bool get(const Value& v, std::pair<A, B>* out) {
    return v.kind == Value::Kind::List && v.list.size() == 2 && Codec<A>::get(v.list[0], &out->first) &&
           Codec<B>::get(v.list[1], &out->second);
  }
};
template <typename T>
struct Codec<std::map<std::string, T>> {
  static Value put(const std::map<std::string, T>& m) {
    Value v;
    v.kind = Value::Kind::Map;
    for (const auto& [k, x] : m) v.map.emplace_back(k, Codec<T>::put(x));
    return v;
  }
  static bool get(const Value& v, std::map<std::string, T>* out) {
    if (v.kind != Value::Kind::Map) return false;
    out->clear();
    for (const auto& [k, x] : v.map) {
      T t{};
      if (!Codec<T>::get(x, &t)) return false;
      (*out)[k] = std::move(t);
    }
    return true;
  }
};
template <typename T>
struct Codec<std::optional<T>> {
  static Value put(const std::optional<T>& o) { return o ? Codec<T>::put(*o) : Value{}; }
  static bool get(const Value& v, std::optional<T>* out) {
    if (v.kind == Value::Kind::None) {
      out->reset();
      return true;
    }
    T t{};
    if (!Codec<T>::get(v, &t)) return false;
    *out = std::move(t);
    return true;
  }
};

// A test's own struct as a Map of named fields: specialize Codec with Fields and list them,
//   template <> struct Codec<Slicing> : Fields<Slicing> {
//     static auto fields() { return std::make_tuple(field("lengths", &Slicing::lengths), field("sum", &Slicing::sum)); }
//   };
// get is strict: a Map that has every field, each one a value of its member's type.
template <typename S, typename M>
struct Field {
  const char* name;
  M S::*member;
};
template <typename S, typename M>
Field<S, M> field(const char* name, M S::*member) {
  return {name, member};
}
template <typename S>
struct Fields {
  static Value put(const S& s) {
    Value v;
    v.kind = Value::Kind::Map;
    std::apply([&](const auto&... f) { (add(&v, s, f), ...); }, Codec<S>::fields());
    return v;
  }
  static bool get(const Value& v, S* out) {
    return v.kind == Value::Kind::Map &&
           std::apply([&](const auto&... f) { return (take(v, f, out) && ...); }, Codec<S>::fields());
  }

 private:
  template <typename M>
  static void add(Value* v, const S& s, const Field<S, M>& f) {
    v->map.emplace_back(f.name, Codec<M>::put(s.*(f.member)));
  }
  template <typename M>
  static bool take(const Value& v, const Field<S, M>& f, S* out) {
    const Value* x = v.find(f.name);
    return x && Codec<M>::get(*x, &(out->*(f.member)));
  }
};

// ---- what a piece of code did: returned, or threw -------------------------------------------

// kind: "returned", "kit::Error", "kit::NotImplemented", "std::exception" or "unknown"
// (a thrown object that is not a std::exception); message: the exception's what().
struct Outcome {
  std::string kind = "returned";
  std::string message;
  bool threw() const { return kind != "returned"; }
  std::string describe() const;
};
template <>
struct Codec<Outcome> {
  static Value put(const Outcome& o) { return Codec<std::pair<std::string, std::string>>::put({o.kind, o.message}); }
  static bool get(const Value& v, Outcome* out) {
    std::pair<std::string, std::string> p;
    if (!Codec<std::pair<std::string, std::string>>::get(v, &p)) return false;
    out->kind = p.first;
    out->message = p.second;
    return true;
  }
};
// The exception being handled, classified (call inside a catch block).
Outcome current_exception_outcome();
// Runs fn and says whether it returned or what it threw.
template <typename F>
Outcome outcome_of(F&& fn) {
  try {
    fn();
    return Outcome{};
  } catch (...) {
    return current_exception_outcome();
  }
}

// ---- records -----------------------------------------------------------------------------

// What one subject part produced, by name. The subject writes it with put(); the judge reads it
// with get(), which fails the case (with the reason) when the subject produced no such value,
// or one of another type, or stopped early.
class Record {
 public:
  template <typename T>
  void put(const std::string& name, const T& value) {
    set(name, Codec<T>::put(value));
  }
  void put(const std::string& name, const char* text) { put(name, std::string(text)); }
  // Runs fn (student code that may throw) and records what it did as an Outcome under `name`.
  template <typename F>
  void outcome(const std::string& name, F&& fn) {
    put(name, outcome_of(std::forward<F>(fn)));
  }

  // The value `name` as a T; a failure of the case and T{} when there is none or it is no T.
  template <typename T>
  T get(const std::string& name) const {
    T out{};
    const Value* v = lookup(name);
    if (v && !Codec<T>::get(*v, &out)) {
      ADD_FAILURE() << where() << ": the value '" << name << "' it recorded is a " << v->kind_name()
                    << ", not what this test reads there";
      return T{};
    }
    return out;
  }
  bool has(const std::string& name) const;

  // Whether the subject part ran to its end ("ok"), threw ("threw", with error()), or never
  // reported ("missing": the subject process ended before it, with error() saying how).
  const std::string& status() const { return status_; }
  const std::string& error() const { return error_; }
  bool ok() const { return status_ == "ok"; }
  const std::string& label() const { return label_; }

  // The record as a Value (a Map: label, status, error, values) and back; from_value is strict.
  Value to_value() const;
  static std::optional<Record> from_value(const Value& v, std::string* why);

  // Used by subject() and the rank harness.
  void set(const std::string& name, Value v);
  void mark(std::string status, std::string error) {
    status_ = std::move(status);
    error_ = std::move(error);
  }
  void set_label(std::string label) { label_ = std::move(label); }

 private:
  const Value* lookup(const std::string& name) const;
  std::string where() const;

  std::string label_, status_ = "ok", error_;
  Value values_{Value::Kind::Map};
};
template <>
struct Codec<Record> {
  static Value put(const Record& r) { return r.to_value(); }
  static bool get(const Value& v, Record* out) {
    std::string why;
    auto r = Record::from_value(v, &why);
    if (!r) return false;
    *out = std::move(*r);
    return true;
  }
};

// ---- roles -------------------------------------------------------------------------------

enum class Role {
  kBoth,     // a plain run (ctest, a student): subject parts and JUDGE parts in one process
  kSubject,  // the grader's subject: subject parts only, records written to a descriptor
  kJudge,    // the grader's judge (test_<suite>_judge): JUDGE parts only, records read from a file
  kRank,     // a rank process a subject part started: its role's record written to a file
};
Role role();
// Whether this process runs JUDGE parts (the judge, or a plain run).
bool judging();

// Runs a subject part. In the subject (and a plain run) it calls fn with an empty record,
// catches whatever it throws (the record's status becomes "threw"), and hands the record on;
// in the judge it does not call fn: it returns the next record the subject wrote (a failure of
// the case when the subject wrote none: it crashed, timed out or exited early). `label` names
// the part in messages.
Record subject(const std::function<void(Record&)>& fn, const std::string& label = "");

#define JUDGE if (::kit::judge::judging())

// ---- set up by the test programs' main() (tests/kit_gtest_main.cpp) ----------------------

// The subject: records go to this descriptor, one frame per subject part.
void become_subject(int fd);
// The judge: the records the subject wrote (the whole stream) and how its process ended, for
// messages ("exit status 0", "timed out after 20 s", ...). Returns false with *why when the
// stream is malformed (it is then judged as if empty: every subject part missing).
bool become_judge(const std::string& stream, const std::string& subject_status, std::string* why);
// A rank process: its role's record is written to `path` when the role ends.
void become_rank(const std::string& path);
// Resets the per-case state (the next record to read); called at the start of every case.
void start_case();
// A rank: writes its role's record to the file become_rank named (one frame after the header).
void finish_rank(const Record& r);
// The record a rank wrote to `path`; nullopt with *why when there is none or it is malformed.
std::optional<Record> read_rank_record(const std::string& path, std::string* why);

// The stream format, shared with the rank harness: a header, then frames "SEC" + u64 length +
// an encoded Record.
std::string stream_header();
std::string frame(const Record& r);
// Every complete frame of a stream; a truncated last frame is left out and said in *note.
bool parse_stream(const std::string& stream, std::vector<Record>* out, std::string* why, std::string* note);
// Plumbing shared with judge/batch.cpp: a little-endian u64 appended to out, and all of data
// written to fd (retrying short writes; stops quietly when the reader is gone).
void put_u64(std::string& out, uint64_t x);
void write_all(int fd, const std::string& data);

// The most bytes a judge reads of a subject's records (the grader bounds the pipe the same way).
constexpr size_t kMaxStreamBytes = size_t{256} << 20;

}  // namespace kit::judge
