// AdamW, as torch.optim.AdamW: Adam with decoupled weight decay (default
// 1e-2) applied to the parameter before the moment updates. The update is
// Adam's (adam.cc) with the decoupled flag.
#include "server/optim/adam.h"

namespace distopt {

std::unique_ptr<OptimizerKind> MakeAdamW() {
  return MakeAdamFamily(/*decoupled_weight_decay=*/true);
}

}  // namespace distopt
