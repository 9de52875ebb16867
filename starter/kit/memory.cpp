// A counting allocator in front of LibTorch's CPU allocator, and the CUDA caching allocator's
// statistics (see memory.h).
#include "kit/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "kit/compat.h"

#if KIT_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace kit::memory {

namespace {

std::atomic<int64_t> g_now{0}, g_peak{0}, g_peak_resets{0};
std::atomic<bool> g_enabled{false};

void add(int64_t n) {
  const int64_t now = g_now.fetch_add(n) + n;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

// Wraps the allocator that was in place. Each buffer's DataPtr from it is kept in a table,
// keyed by the data pointer, so the buffer's own deleter still frees it; ours only counts.
// (The context is the data pointer itself, which LibTorch requires of an allocator that
// offers raw_deleter.)
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) KIT_ALLOCATOR_ALLOCATE_CONST override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) return inner;  // zero bytes: nothing to count
    {
      std::lock_guard<std::mutex> lock(mutex());
      table().emplace(data, Entry{std::move(inner), static_cast<int64_t>(n)});
    }
    add(static_cast<int64_t>(n));
    return c10::DataPtr(data, data, &CountingAllocator::free, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::free; }

  static bool holds(const void* data) {
    std::lock_guard<std::mutex> lock(mutex());
    return table().count(const_cast<void*>(data)) > 0;
  }

  // LibTorch 2.3+ asks allocators to copy between their buffers (a pure virtual there).
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

 private:
  struct Entry {
    c10::DataPtr inner;
    int64_t bytes;
  };
  static std::mutex& mutex() {
    static auto* m = new std::mutex;  // never destroyed: buffers may be freed during exit
    return *m;
  }
  static std::unordered_map<void*, Entry>& table() {
    static auto* t = new std::unordered_map<void*, Entry>;
    return *t;
  }
  static void free(void* data) {
    c10::DataPtr inner;
    int64_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex());
      auto it = table().find(data);
      if (it == table().end()) return;
      inner = std::move(it->second.inner);
      bytes = it->second.bytes;
      table().erase(it);
    }
    g_now.fetch_sub(bytes);
    // `inner` goes out of scope here: the wrapped allocator frees the buffer.
  }

  c10::Allocator* base_;
};

}  // namespace

void enable_cpu_counting() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Ownership passes to LibTorch, which keeps the allocator for the life of the process.
    c10::SetCPUAllocator(new CountingAllocator(c10::GetCPUAllocator()), /*priority=*/100);
    g_enabled = true;
  });
}

bool cpu_counting_enabled() { return g_enabled; }
int64_t cpu_bytes_now() { return g_now.load(); }
int64_t cpu_bytes_peak() { return g_peak.load(); }
void reset_cpu_peak() {
  g_peak_resets.fetch_add(1);
  g_peak.store(g_now.load());
}
int64_t cpu_peak_resets() { return g_peak_resets.load(); }
bool counts_cpu_buffer(const void* data) { return data != nullptr && CountingAllocator::holds(data); }

namespace {

#if KIT_HAVE_CUDA
// allocated_bytes[0] is StatType::AGGREGATE: every pool of the device together (the figure
// torch.cuda.max_memory_allocated reports). The stats' type moved between LibTorch releases
// (CUDACachingAllocator::DeviceStats, then c10::CachingDeviceAllocator::DeviceStats), hence auto.
auto cuda_stat(const c10::Device& device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0];
}

// "cuda" without an index: the current device, as LibTorch reads it.
c10::Device resolved(c10::Device device) {
  if (device.is_cuda() && !device.has_index() && c10::cuda::device_count() > 0)
    device.set_index(c10::cuda::current_device());
  return device;
}
#endif

}  // namespace

std::string why_not_counted(const c10::Device& device) {
  if (device.is_cpu())
    return cpu_counting_enabled() ? "" : "kit::memory::enable_counting(cpu) was not called before the tensors were made";
  if (!device.is_cuda()) return "kit::memory counts CPU and CUDA tensors only, not " + device.str();
#if KIT_HAVE_CUDA
  if (c10::cuda::device_count() == 0) return "this LibTorch has CUDA but no GPU is visible: there is nothing to count";
  const c10::Device d = resolved(device);
  if (d.index() >= c10::cuda::device_count())
    return d.str() + " is not a visible GPU (" + std::to_string(c10::cuda::device_count()) + " are)";
  return "";
#else
  return "this LibTorch is a CPU build: it has no CUDA allocator to count " + device.str() +
         " (build the kit against a CUDA LibTorch, handout/README.md)";
#endif
}

void enable_counting(const c10::Device& device) {
  if (device.is_cpu()) enable_cpu_counting();  // CUDA's caching allocator counts from the start
}

// A CUDA device's bytes now (peak false) or at the peak, or 0 where none are counted.
static int64_t cuda_bytes(const c10::Device& device, bool peak) {
#if KIT_HAVE_CUDA
  if (why_not_counted(device).empty()) {
    const auto stat = cuda_stat(resolved(device));
    return peak ? stat.peak : stat.current;
  }
#endif
  (void)device, (void)peak;
  return 0;
}

int64_t bytes_now(const c10::Device& device) { return device.is_cpu() ? cpu_bytes_now() : cuda_bytes(device, false); }
int64_t bytes_peak(const c10::Device& device) { return device.is_cpu() ? cpu_bytes_peak() : cuda_bytes(device, true); }

void reset_peak(const c10::Device& device) {
  if (device.is_cpu()) return reset_cpu_peak();
#if KIT_HAVE_CUDA
  if (why_not_counted(device).empty()) c10::cuda::CUDACachingAllocator::resetPeakStats(resolved(device).index());
#endif
}

int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace kit::memory
