// Adam and AdamW share one implementation: they differ only in where the
// weight decay goes (and its default).
#ifndef DISTOPT_SERVER_OPTIM_ADAM_H_
#define DISTOPT_SERVER_OPTIM_ADAM_H_

#include <memory>

#include "server/optim/builtin_kinds.h"

namespace distopt {

// Adam (false: L2 weight decay on the gradient) or AdamW (true: decoupled
// weight decay on the parameter, default 1e-2).
std::unique_ptr<OptimizerKind> MakeAdamFamily(bool decoupled_weight_decay);

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_ADAM_H_
