// Placeholder: replaced by the real student file.
#include "kit/errors.h"

namespace kit {
void placeholder_partition() {
  // TODO(Problem 2.1 placeholder_partition): your code here.
  throw kit::NotImplemented("Problem 2.1 placeholder_partition");
}
}  // namespace kit
