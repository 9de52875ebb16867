// kit/memory.h: the counting CPU allocator that the pipeline benchmark reads activation
// memory from. It must count a buffer while it lives, forget it when it is freed, and
// remember the peak.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kit/memory.h"

namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(MemoryCounter, CountsABufferWhileItLivesAndNotAfter) {
  kit::memory::enable_cpu_counting();
  const int64_t before = kit::memory::cpu_bytes_now();
  {
    auto t = torch::ones({kMiB}, torch::kFloat32);  // 4 MiB
    const int64_t held = kit::memory::cpu_bytes_now() - before;
    EXPECT_GE(held, 4 * kMiB);
    EXPECT_LT(held, 4 * kMiB + kMiB);  // nothing else of that size was made
    EXPECT_EQ(t.sum().item<float>(), static_cast<float>(kMiB));  // the buffer works
  }
  EXPECT_LT(kit::memory::cpu_bytes_now() - before, kMiB);
}

TEST(MemoryCounter, PeakIsTheMostHeldAtOnceSinceTheReset) {
  kit::memory::enable_cpu_counting();
  kit::memory::reset_cpu_peak();
  const int64_t base = kit::memory::cpu_bytes_now();
  EXPECT_EQ(kit::memory::cpu_bytes_peak(), base);
  {
    auto a = torch::zeros({2 * kMiB}, torch::kFloat32);  // 8 MiB
    auto b = torch::zeros({kMiB}, torch::kFloat32);      // 4 MiB more
  }
  { auto c = torch::zeros({kMiB}, torch::kFloat32); }    // 4 MiB alone: not a new peak
  const int64_t peak = kit::memory::cpu_bytes_peak() - base;
  EXPECT_GE(peak, 12 * kMiB);
  EXPECT_LT(peak, 13 * kMiB);
}

TEST(MemoryCounter, EnablingTwiceIsHarmless) {
  kit::memory::enable_cpu_counting();
  kit::memory::enable_cpu_counting();
  EXPECT_TRUE(kit::memory::cpu_counting_enabled());
  auto t = torch::randn({1000});
  EXPECT_GE(kit::memory::cpu_bytes_now(), 4000);
}

}  // namespace
