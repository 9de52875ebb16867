// Placeholder: replaced by the real student file.
#include "kit/errors.h"

namespace kit {
void placeholder_run_data_parallel() {
  // TODO(Problem 1.2 placeholder_run_data_parallel): your code here.
  throw kit::NotImplemented("Problem 1.2 placeholder_run_data_parallel");
}
}  // namespace kit
