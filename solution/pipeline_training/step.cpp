// Problem 3.2: one action of a pipeline schedule on one rank (see pipeline_training/executor.h).
#include "pipeline_training/executor.h"

#include "kit/errors.h"

namespace kit::pp {

void Executor::forward_step(const Action& a) {
  // BEGIN SOLUTION 3.2 forward_step
  throw NotImplemented("placeholder");
  // END SOLUTION
}

void Executor::backward_step(const Action& a) {
  // BEGIN SOLUTION 3.2 backward_step
  throw NotImplemented("placeholder");
  // END SOLUTION
}

}  // namespace kit::pp
