// Placeholder: replaced by the real student file.
#include "kit/errors.h"

namespace kit {
void placeholder_dataset() {
  // TODO(Problem 1.1 placeholder_dataset): your code here.
  throw kit::NotImplemented("Problem 1.1 placeholder_dataset");
}
}  // namespace kit
