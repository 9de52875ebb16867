// Every difference between LibTorch 1.13 (Debian) and LibTorch 2.x (official
// builds) lives in this header. Code elsewhere uses these names only.
#pragma once
#include <torch/version.h>

#define KIT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||      \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace kit::compat {
inline constexpr int torch_major = TORCH_VERSION_MAJOR;
inline constexpr int torch_minor = TORCH_VERSION_MINOR;
}  // namespace kit::compat

// ---- c10d (torch.distributed's C++ core), used by dist/dist.cpp only ----------
// LibTorch 2.0 split the backend interface out of c10d::ProcessGroup: since then
// ProcessGroupGloo and ProcessGroupNCCL derive from c10d::Backend, in 1.13 from
// c10d::ProcessGroup. Both bases offer the same allreduce/broadcast/send/recv/barrier
// calls, so the kit holds its backend through this one alias. (The Work type those
// calls return also moved, from c10d::ProcessGroup::Work to c10d::Work: dist.cpp
// only ever writes `auto` for it.)
namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace kit::compat {
#if KIT_TORCH_AT_LEAST(2, 0)
using C10dBackend = ::c10d::Backend;
#else
using C10dBackend = ::c10d::ProcessGroup;
#endif
}  // namespace kit::compat

// ---- which c10d backends this build has ---------------------------------------
// cmake/Distributed.cmake decides, after checking that Gloo's and NCCL's headers are
// there and fit this LibTorch, and passes KIT_HAVE_GLOO / KIT_HAVE_NCCL as 0 or 1.
// Test these, not LibTorch's own USE_C10D_GLOO / USE_C10D_NCCL: official 2.x builds
// define USE_C10D_GLOO although they ship none of the Gloo headers it needs.
#ifndef KIT_HAVE_GLOO
#define KIT_HAVE_GLOO 0
#endif
#ifndef KIT_HAVE_NCCL
#define KIT_HAVE_NCCL 0
#endif

// ---- shutting down an NCCL backend ---------------------------------------------
// From LibTorch 2.4 a ProcessGroupNCCL is shut down before it is destroyed (Python's
// destroy_process_group calls shutdown()): its destructor otherwise warns "destroy_process_group()
// was not called before program exit, which can leak resources" (seen on an H200 with
// LibTorch 2.11) and leaves its communicators to the process's exit.
#if KIT_HAVE_NCCL && KIT_TORCH_AT_LEAST(2, 4)
#define KIT_NCCL_SHUTDOWN 1
#else
#define KIT_NCCL_SHUTDOWN 0
#endif

// The variable that makes an NCCL Work::wait() honour its timeout: NCCL_BLOCKING_WAIT in 1.13,
// TORCH_NCCL_BLOCKING_WAIT later, and LibTorch 2.11 warns when the old name is set. Where the
// rename's release is not certain (2.0 to 2.3) the kit sets both.
#define KIT_NCCL_BLOCKING_WAIT_NEW_ONLY KIT_TORCH_AT_LEAST(2, 4)

// ---- the tests' multi-process cases (tests/rank_roles.h) --------------------------
// Their ranks are forks of the case's process on LibTorch 1.13 (half the time of starting the
// test program again per rank, measured). On LibTorch 2.15 a forked rank hung before it reached
// Gloo's rendezvous (measured; the cause is not found yet), so there the ranks exec the program.
#define KIT_FORK_RANKS (!KIT_TORCH_AT_LEAST(2, 0))

// ---- c10::Allocator, implemented by kit/memory.cpp's counting allocator -----------
// LibTorch 2.3 dropped `const` from Allocator::allocate (and made copy_data, which the
// counting allocator defines in any version, pure virtual).
#if KIT_TORCH_AT_LEAST(2, 3)
#define KIT_ALLOCATOR_ALLOCATE_CONST
#else
#define KIT_ALLOCATOR_ALLOCATE_CONST const
#endif

// ---- fused attention (model/attention.cpp) ----------------------------------------
// at::scaled_dot_product_attention arrived in LibTorch 2.0 (flash and memory-efficient kernels on
// GPUs); 1.13 computes attention with the formula's matmuls only.
#define KIT_HAVE_SDPA KIT_TORCH_AT_LEAST(2, 0)

// ---- torch::optim state (train/adamw.cpp) -------------------------------------------
// Optimizer::state() is keyed by the parameter's TensorImpl: by its address printed as a string
// in LibTorch 1.13, by the address itself in 2.x. The map's own key type says which.
#include <sstream>
#include <string>
#include <type_traits>
namespace kit::compat {
template <class StateMap>
typename StateMap::key_type optimizer_state_key(const StateMap&, void* tensor_impl) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream s;  // what c10::guts::to_string writes for a pointer
    s << tensor_impl;
    return s.str();
  } else {
    return tensor_impl;
  }
}
}  // namespace kit::compat

// ---- fused AdamW (train/adamw.cpp) ----------------------------------------------------
// at::_fused_adamw_: one kernel for every parameter of a group. CUDA from LibTorch 2.1 (2.0's
// had a different signature), the CPU from 2.4.
#define KIT_HAVE_FUSED_ADAMW_CUDA KIT_TORCH_AT_LEAST(2, 1)
#define KIT_HAVE_FUSED_ADAMW_CPU KIT_TORCH_AT_LEAST(2, 4)

// ---- autocast (kit/precision.cpp) --------------------------------------------------
// LibTorch 2.4 gave autocast one call per setting with the device type as argument
// (set_autocast_enabled(kCPU, on), set_autocast_dtype(kCPU, bf16)); 1.13 has one call per
// device (set_cpu_enabled, set_autocast_cpu_dtype; set_enabled for CUDA). 2.4+ deprecates those.
#define KIT_AUTOCAST_BY_DEVICE_TYPE KIT_TORCH_AT_LEAST(2, 4)
