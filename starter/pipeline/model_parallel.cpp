// Placeholder: replaced by the real student file.
#include "kit/errors.h"

namespace kit {
void placeholder_model_parallel() {
  // TODO(Problem 2.3 placeholder_model_parallel): your code here.
  throw kit::NotImplemented("Problem 2.3 placeholder_model_parallel");
}
}  // namespace kit
