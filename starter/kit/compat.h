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
