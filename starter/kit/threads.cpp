#include "kit/threads.h"

#include <ATen/Parallel.h>

#include <string>

#include "kit/errors.h"

namespace kit {

void set_threads(int64_t n) {
  if (n < 1) throw Error("--threads must be at least 1 (got " + std::to_string(n) + ")");
  at::set_num_threads(static_cast<int>(n));
  // Inter-op threads can only be set once per process; the kit never uses them.
  static bool interop_set = false;
  if (!interop_set) {
    at::set_num_interop_threads(1);
    interop_set = true;
  }
}

}  // namespace kit
