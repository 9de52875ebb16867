// Problem 2.2: the pipe must really pipeline. Each stage sleeps a fixed time per
// micro-batch (sleeping needs no CPU, so this holds on a 2-core machine under load):
// one step after another would take m * n units, a pipeline m + n - 1.
// The subject runs the pipe and records the wall time and every step's span (stage, micro-batch,
// thread, start and end); the judge decides whether they overlapped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <mutex>

#include "judge/judge.h"
#include "pipeline/pipe.h"
#include "pipeline_test_util.h"

namespace kit {
namespace {

using SteadyClock = std::chrono::steady_clock;
using test::Probe;
using test::run_with_timeout;

struct Span {
  int64_t stage, microbatch;
  std::thread::id thread;
  SteadyClock::time_point start, end;
};

class PipeOverlap : public ::testing::Test {
 protected:
  static constexpr int64_t kStages = 3, kMicrobatches = 6;
  static constexpr auto kUnit = std::chrono::milliseconds(40);

  torch::nn::Sequential sleepy_stages() {
    torch::nn::Sequential seq;
    for (int64_t j = 0; j < kStages; ++j)
      seq->push_back(WithDevice(Probe([this, j](const torch::Tensor& x) {
                                  Span s{j, static_cast<int64_t>(x[0][0].item<double>()), std::this_thread::get_id(),
                                         SteadyClock::now(), {}};
                                  std::this_thread::sleep_for(kUnit);
                                  s.end = SteadyClock::now();
                                  std::lock_guard<std::mutex> lock(mutex_);
                                  spans_.push_back(s);
                                }),
                                StageDevice{j, torch::Device(torch::kCPU)}));
    return seq;
  }

  // The spans as data: {stage, micro-batch, thread (numbered in order of appearance), start and end
  // in seconds since t0}.
  void put_spans(judge::Record& out, SteadyClock::time_point t0) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::thread::id> threads;
    std::vector<std::vector<double>> rows;
    for (const auto& s : spans_) {
      auto it = std::find(threads.begin(), threads.end(), s.thread);
      if (it == threads.end()) it = threads.insert(threads.end(), s.thread);
      rows.push_back({static_cast<double>(s.stage), static_cast<double>(s.microbatch),
                      static_cast<double>(it - threads.begin()), std::chrono::duration<double>(s.start - t0).count(),
                      std::chrono::duration<double>(s.end - t0).count()});
    }
    out.put("spans", rows);
  }

  // Runs the sleepy stages' pipe on kMicrobatches rows in the subject.
  judge::Record run_pipe() {
    return judge::subject([&](judge::Record& out) {
      Pipe pipe(sleepy_stages(), 1, 1);
      const auto x = torch::arange(kMicrobatches, torch::kFloat64).unsqueeze(1);
      const auto t0 = SteadyClock::now();
      out.put("status", run_with_timeout([&] { pipe->forward(x); }, 30));
      out.put("seconds", std::chrono::duration<double>(SteadyClock::now() - t0).count());
      put_spans(out, t0);
    });
  }

  std::mutex mutex_;
  std::vector<Span> spans_;
};

struct SpanData {
  int64_t stage, microbatch, thread;
  double start, end;
};
std::vector<SpanData> spans_of(const judge::Record& got) {
  std::vector<SpanData> out;
  for (const auto& r : got.get<std::vector<std::vector<double>>>("spans")) {
    if (r.size() != 5) {
      ADD_FAILURE() << "a recorded span does not have 5 fields";
      continue;
    }
    out.push_back({static_cast<int64_t>(r[0]), static_cast<int64_t>(r[1]), static_cast<int64_t>(r[2]), r[3], r[4]});
  }
  return out;
}

TEST_F(PipeOverlap, WallTimeIsCloseToMPlusNMinusOneUnits) {
  const judge::Record got = run_pipe();
  if (!judge::judging()) return;
  ASSERT_EQ(got.get<std::string>("status"), "");
  const double seconds = got.get<double>("seconds");
  const double unit = std::chrono::duration<double>(kUnit).count();
  const double pipelined = (kMicrobatches + kStages - 1) * unit, sequential = kMicrobatches * kStages * unit;
  // Generous: anything clearly below the sequential time shows that stages overlapped.
  EXPECT_LT(seconds, 0.75 * sequential)
      << std::setprecision(3) << "the pipe took " << seconds << " s; a pipeline needs about (m + n - 1) units = " << pipelined
      << " s, running the steps one after another m * n units = " << sequential
      << " s. Put every task of a clock on its worker's queue before waiting for any result.";
  EXPECT_GE(seconds, 0.95 * pipelined) << "faster than the schedule allows: did every step run?";
}

TEST_F(PipeOverlap, NeighbouringStagesRunAtTheSameTime) {
  const judge::Record got = run_pipe();
  if (!judge::judging()) return;
  ASSERT_EQ(got.get<std::string>("status"), "");
  const std::vector<SpanData> spans = spans_of(got);
  ASSERT_EQ(spans.size(), static_cast<size_t>(kStages * kMicrobatches)) << "every (i, j) must run exactly once";
  for (int64_t j = 0; j + 1 < kStages; ++j) {
    bool overlapped = false;
    for (const auto& a : spans)
      for (const auto& b : spans)
        if (a.stage == j && b.stage == j + 1) {
          EXPECT_NE(a.thread, b.thread) << "stages " << j << " and " << j + 1 << " ran on the same thread";
          // Steps (i, j) and (i - 1, j + 1) share a clock and should overlap.
          if (a.microbatch == b.microbatch + 1 && a.start < b.end && b.start < a.end) overlapped = true;
        }
    EXPECT_TRUE(overlapped) << "stage " << j << " never worked on micro-batch i while stage " << j + 1
                            << " worked on micro-batch i - 1: the steps of a clock did not run concurrently";
  }
}

}  // namespace
}  // namespace kit
