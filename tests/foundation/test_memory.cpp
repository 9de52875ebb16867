// kit/memory.h: the counting CPU allocator (and on a GPU the CUDA allocator's figures) that the
// benchmarks read activation memory from. It must count a buffer while it lives, forget it when
// it is freed, and remember the peak.
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

TEST(MemoryCounter, EveryResetOfThePeakIsCounted) {
  kit::memory::enable_cpu_counting();
  const int64_t resets = kit::memory::cpu_peak_resets();
  kit::memory::reset_cpu_peak();
  kit::memory::reset_peak(torch::kCPU);
  EXPECT_EQ(kit::memory::cpu_peak_resets() - resets, 2);
  { auto t = torch::zeros({kMiB}, torch::kFloat32); }
  EXPECT_EQ(kit::memory::cpu_peak_resets() - resets, 2) << "allocating is not resetting";
}

TEST(MemoryCounter, EnablingTwiceIsHarmless) {
  kit::memory::enable_cpu_counting();
  kit::memory::enable_cpu_counting();
  EXPECT_TRUE(kit::memory::cpu_counting_enabled());
  auto t = torch::randn({1000});
  EXPECT_GE(kit::memory::cpu_bytes_now(), 4000);
}

}  // namespace

// The device-generic calls the programs use: on the CPU the same counter as above; on a GPU
// the CUDA caching allocator's figures; where nothing can be counted, a reason and zeros.
TEST(MemoryCounter, DeviceCallsOnTheCpuAreTheCountingAllocator) {
  const c10::Device cpu(c10::kCPU);
  kit::memory::enable_counting(cpu);
  EXPECT_EQ(kit::memory::why_not_counted(cpu), "");
  kit::memory::reset_peak(cpu);
  const int64_t base = kit::memory::bytes_now(cpu);
  EXPECT_EQ(base, kit::memory::cpu_bytes_now());
  { auto t = torch::zeros({kMiB}, torch::kFloat32); }  // 4 MiB, freed
  EXPECT_LT(kit::memory::bytes_now(cpu) - base, kMiB);
  EXPECT_GE(kit::memory::bytes_peak(cpu) - base, 4 * kMiB);
  EXPECT_LT(kit::memory::bytes_peak(cpu) - base, 5 * kMiB);
}

TEST(MemoryCounter, CudaBytesAreTheCachingAllocatorsOrAReasonWhyNot) {
  const c10::Device gpu(c10::kCUDA, 0);
  const std::string why = kit::memory::why_not_counted(gpu);
  if (!torch::cuda::is_available()) {
    // A CPU LibTorch, or a CUDA one without a GPU: nothing to count, said in words.
    EXPECT_NE(why, "");
    EXPECT_TRUE(why.find("CPU build") != std::string::npos || why.find("no GPU") != std::string::npos) << why;
    EXPECT_EQ(kit::memory::bytes_now(gpu), 0);
    EXPECT_EQ(kit::memory::bytes_peak(gpu), 0);
    kit::memory::reset_peak(gpu);  // harmless
    return;
  }
  ASSERT_EQ(why, "");
  kit::memory::enable_counting(gpu);
  torch::cuda::synchronize();
  kit::memory::reset_peak(gpu);
  const int64_t base = kit::memory::bytes_now(gpu);
  EXPECT_EQ(kit::memory::bytes_peak(gpu), base);
  {
    auto a = torch::zeros({2 * kMiB}, torch::TensorOptions().device(gpu));  // 8 MiB
    auto b = torch::zeros({kMiB}, torch::TensorOptions().device(gpu));      // 4 MiB more
    EXPECT_EQ(kit::memory::bytes_now(gpu) - base, 12 * kMiB);  // the caching allocator rounds to 512 bytes
  }
  EXPECT_EQ(kit::memory::bytes_now(gpu), base);  // freed (to the cache, which no longer counts them)
  EXPECT_EQ(kit::memory::bytes_peak(gpu) - base, 12 * kMiB);
  kit::memory::reset_peak(gpu);
  EXPECT_EQ(kit::memory::bytes_peak(gpu), base);
  // An index-less "cuda" is the current device.
  EXPECT_EQ(kit::memory::bytes_now(c10::Device(c10::kCUDA)), kit::memory::bytes_now(gpu));
}
