// Problem 3.2: one action of a pipeline schedule on one rank (see pipeline_training/executor.h).
#include "pipeline_training/executor.h"

#include "kit/errors.h"

namespace kit::pp {

void Executor::forward_step(const Action& a) {
  // TODO(Problem 3.2 forward_step): your code here.
  throw kit::NotImplemented("Problem 3.2 forward_step");
}

void Executor::backward_step(const Action& a) {
  // TODO(Problem 3.2 backward_step): your code here.
  throw kit::NotImplemented("Problem 3.2 backward_step");
}

}  // namespace kit::pp
