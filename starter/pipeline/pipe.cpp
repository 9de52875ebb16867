// Placeholder: replaced by the real student file.
#include "kit/errors.h"

namespace kit {
void placeholder_pipe() {
  // TODO(Problem 2.2 placeholder_pipe): your code here.
  throw kit::NotImplemented("Problem 2.2 placeholder_pipe");
}
}  // namespace kit
