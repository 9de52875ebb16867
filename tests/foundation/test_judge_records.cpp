// The records a subject writes and its judge reads (tests/judge/judge.h): they cross from a process
// running student code into one that decides, so the judge must take them as untrusted input.
// Round trips keep every value exactly; malformed bytes are refused with a reason, never a crash.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "judge/judge.h"
#include "judge/run_result.h"
#include "judge/tensor.h"
#include "kit/errors.h"
#include "env_guard.h"
#include "test_device.h"

namespace {
namespace judge = kit::judge;
using judge::Value;

std::string u64(uint64_t x) {
  std::string s;
  for (int k = 0; k < 8; ++k) s.push_back(static_cast<char>((x >> (8 * k)) & 0xff));
  return s;
}

std::string why_not(const std::string& bytes) {
  std::string why;
  EXPECT_FALSE(judge::decode(bytes, &why).has_value()) << "malformed bytes were accepted";
  return why;
}

TEST(JudgeRecords, ValuesSurviveTheRoundTripExactly) {
  judge::Record r;
  r.put("int", int64_t{-7});
  r.put("max", std::numeric_limits<int64_t>::max());
  r.put("real", 0.1);
  r.put("nan", std::numeric_limits<double>::quiet_NaN());
  r.put("text", std::string("a\0b", 3));
  r.put("flag", true);
  r.put("nested", std::vector<std::vector<int64_t>>{{1, 2}, {}, {3}});
  r.put("pairs", std::vector<std::pair<std::string, double>>{{"x", 1.5}});
  r.put("outcome", judge::Outcome{"kit::Error", "bad m"});
  r.put("f64", torch::arange(6, torch::kFloat64).reshape({2, 3}) / 7);
  r.put("bf16", torch::ones({2}, torch::kBFloat16));
  r.put("empty", torch::zeros({0, 4}));
  r.put("undefined", torch::Tensor());
  r.put("strided", torch::arange(12, torch::kFloat32).reshape({3, 4}).t());  // not contiguous
  std::string why;
  const auto v = judge::decode(judge::encode(r.to_value()), &why);
  ASSERT_TRUE(v) << why;
  const auto back = judge::Record::from_value(*v, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->get<int64_t>("int"), -7);
  EXPECT_EQ(back->get<int64_t>("max"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(back->get<double>("real"), 0.1);
  EXPECT_TRUE(std::isnan(back->get<double>("nan")));
  EXPECT_EQ(back->get<std::string>("text"), std::string("a\0b", 3));
  EXPECT_TRUE(back->get<bool>("flag"));
  EXPECT_EQ((back->get<std::vector<std::vector<int64_t>>>("nested")), (std::vector<std::vector<int64_t>>{{1, 2}, {}, {3}}));
  EXPECT_EQ(back->get<judge::Outcome>("outcome").message, "bad m");
  const auto f64 = back->get<torch::Tensor>("f64");
  EXPECT_TRUE(f64.equal(torch::arange(6, torch::kFloat64).reshape({2, 3}) / 7));
  EXPECT_EQ(back->get<torch::Tensor>("bf16").scalar_type(), torch::kBFloat16);
  EXPECT_EQ(back->get<torch::Tensor>("empty").sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_FALSE(back->get<torch::Tensor>("undefined").defined());
  EXPECT_TRUE(back->get<torch::Tensor>("strided").equal(torch::arange(12, torch::kFloat32).reshape({3, 4}).t()));
}

TEST(JudgeRecords, MalformedBytesAreRefusedWithAReason) {
  EXPECT_NE(why_not(""), "");
  EXPECT_NE(why_not("\x09"), "") << "an unknown kind";
  EXPECT_NE(why_not(std::string("\x01\x02", 2)), "") << "a boolean that is 2";
  EXPECT_NE(why_not(std::string("\x04", 1) + u64(1000) + "abc"), "") << "a text longer than the bytes";
  EXPECT_NE(why_not(std::string("\x04", 1) + u64(~uint64_t{0}) + "abc"), "") << "a length of 2^64 - 1";
  EXPECT_NE(why_not(std::string("\x06", 1) + u64(uint64_t{1} << 60)), "") << "a list of 2^60 values";
  // A float64 tensor of shape [2] whose bytes are 8, not 16.
  EXPECT_NE(why_not(std::string("\x05\x02\x01", 3) + u64(2) + u64(8) + std::string(8, '\0')), "");
  // A tensor whose dimensions multiply past 2^40 elements.
  EXPECT_NE(why_not(std::string("\x05\x01\x02", 3) + u64(1u << 30) + u64(1u << 30) + u64(0)), "");
  EXPECT_NE(why_not(std::string("\x05\x63\x00", 3) + u64(0)), "") << "an unknown dtype";
  // A map with one key twice.
  const std::string entry = u64(1) + "k" + std::string("\x00", 1);
  EXPECT_NE(why_not(std::string("\x07", 1) + u64(2) + entry + entry), "");
  // Values nested deeper than 64.
  std::string deep;
  for (int k = 0; k < 100; ++k) deep += std::string("\x06", 1) + u64(1);
  deep += std::string("\x00", 1);
  EXPECT_NE(why_not(deep), "");
  // Bytes after the value.
  EXPECT_NE(why_not(std::string("\x00\x00", 2)), "");
}

TEST(JudgeRecords, AStreamCutShortKeepsItsWholeRecordsOnly) {
  judge::Record a, b;
  a.set_label("first");
  a.put("x", int64_t{1});
  b.set_label("second");
  b.put("y", int64_t{2});
  const std::string whole = judge::stream_header() + judge::frame(a) + judge::frame(b);
  std::vector<judge::Record> out;
  std::string why, note;
  ASSERT_TRUE(judge::parse_stream(whole, &out, &why, &note)) << why;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].get<int64_t>("y"), 2);
  for (size_t cut = judge::stream_header().size(); cut < whole.size(); ++cut) {
    out.clear();
    note.clear();
    ASSERT_TRUE(judge::parse_stream(whole.substr(0, cut), &out, &why, &note)) << "cut at " << cut << ": " << why;
    EXPECT_LE(out.size(), 1u) << "cut at " << cut;
  }
  EXPECT_FALSE(judge::parse_stream("KIT-RECORDS 2\n", &out, &why, &note)) << "another header";
  EXPECT_FALSE(judge::parse_stream(judge::stream_header() + "XYZ" + u64(0), &out, &why, &note)) << "no SEC mark";
  // A frame whose body is not a record.
  const std::string body = judge::encode(Value{});
  EXPECT_FALSE(judge::parse_stream(judge::stream_header() + "SEC" + u64(body.size()) + body, &out, &why, &note));
}

TEST(JudgeRecords, ARecordOfTheWrongTypeFailsTheReaderNotTheProcess) {
  judge::Record r;
  r.put("n", std::string("three"));
  r.put("neg", int64_t{-1});
  int64_t got = 1;
  EXPECT_NONFATAL_FAILURE(got = r.get<int64_t>("n"), "is a text");
  EXPECT_EQ(got, 0);
  EXPECT_NONFATAL_FAILURE(r.get<uint32_t>("neg"), "is a integer");
  EXPECT_NONFATAL_FAILURE(r.get<int64_t>("missing"), "recorded no value 'missing'");
}

// A struct through judge::Fields (here a program run): every field back as it went in; a Map
// missing a field, a field of another type, or no Map at all is refused.
TEST(JudgeRecords, AStructOfFieldsRoundTripsAndRefusesMissingOrMistypedFields) {
  kit_test::RunResult r;
  r.exitcode = -9;
  r.timed_out = true;
  r.seconds = 1.25;
  r.output = std::string("line\0two", 8);
  const Value v = judge::Codec<kit_test::RunResult>::put(r);
  kit_test::RunResult back;
  ASSERT_TRUE(judge::Codec<kit_test::RunResult>::get(v, &back));
  EXPECT_EQ(back.exitcode, -9);
  EXPECT_TRUE(back.timed_out);
  EXPECT_EQ(back.seconds, 1.25);
  EXPECT_EQ(back.output, r.output);
  for (const std::string name : {"exitcode", "timed_out", "seconds", "output"}) {
    Value missing = v;
    missing.map.erase(std::remove_if(missing.map.begin(), missing.map.end(),
                                     [&](const auto& kv) { return kv.first == name; }),
                      missing.map.end());
    EXPECT_FALSE(judge::Codec<kit_test::RunResult>::get(missing, &back)) << "without " << name;
    Value mistyped = v;
    for (auto& kv : mistyped.map)
      if (kv.first == name) kv.second = judge::Codec<std::vector<int>>::put({1, 2});
    EXPECT_FALSE(judge::Codec<kit_test::RunResult>::get(mistyped, &back)) << name << " as a list";
  }
  EXPECT_FALSE(judge::Codec<kit_test::RunResult>::get(judge::Codec<int>::put(3), &back)) << "an int for a run";
}

TEST(JudgeRecords, WhatTheCodeThrewIsClassified) {
  EXPECT_EQ(judge::outcome_of([] { throw kit::Error("bad"); }).kind, "kit::Error");
  EXPECT_EQ(judge::outcome_of([] { throw kit::NotImplemented("x"); }).kind, "kit::NotImplemented");
  EXPECT_EQ(judge::outcome_of([] { throw std::runtime_error("r"); }).kind, "std::exception");
  EXPECT_EQ(judge::outcome_of([] { throw 3; }).kind, "unknown");
  EXPECT_FALSE(judge::outcome_of([] {}).threw());
}

TEST(JudgeRecords, APlainRunReportsWhatTheCodeUnderTestThrew) {
  // subject() in a plain run: the part's exception is caught, recorded and reported once.
  judge::Record got;
  EXPECT_NONFATAL_FAILURE(got = judge::subject([](judge::Record&) { throw kit::NotImplemented("Problem 9"); }, "p"),
                          "not implemented: Problem 9");
  EXPECT_EQ(got.status(), "threw");
}

}  // namespace

// KIT_TEST_DEVICE (tests/test_device.h): cpu by default, cuda passed on to the ranks as
// KIT_GLOO_DEVICE, and a clear stop for anything else, before any case runs.
TEST(TestDevice, ComesFromKitTestDeviceAndNamesABadValue) {
  kit_test::EnvGuard env({"KIT_TEST_DEVICE", "KIT_GLOO_DEVICE"});
  EXPECT_EQ(kit_test::test_device_name(), "cpu");
  EXPECT_EQ(kit_test::apply_test_device(), "");
  EXPECT_EQ(std::getenv("KIT_GLOO_DEVICE"), nullptr) << "the CPU: the ranks stay on it";
  env.set("KIT_TEST_DEVICE", "gpu");
  const std::string bad = kit_test::apply_test_device();
  EXPECT_NE(bad.find("KIT_TEST_DEVICE='gpu' is neither cpu nor cuda"), std::string::npos) << bad;
  EXPECT_EQ(kit_test::test_device_name(), "");
  env.set("KIT_TEST_DEVICE", "cuda");
  EXPECT_EQ(kit_test::apply_test_device(), "");
  ASSERT_NE(std::getenv("KIT_GLOO_DEVICE"), nullptr);
  EXPECT_EQ(std::string(std::getenv("KIT_GLOO_DEVICE")), "cuda") << "every rank a case starts computes on the GPU";
}
