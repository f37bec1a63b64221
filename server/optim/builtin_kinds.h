// The optimizers of torch.distributed.optim's functional map, one file each.
#ifndef DISTOPT_SERVER_OPTIM_BUILTIN_KINDS_H_
#define DISTOPT_SERVER_OPTIM_BUILTIN_KINDS_H_

#include <memory>

#include "server/optim/optimizer_kind.h"

namespace distopt {

std::unique_ptr<OptimizerKind> MakeSgd();
std::unique_ptr<OptimizerKind> MakeAdam();
std::unique_ptr<OptimizerKind> MakeAdamW();
std::unique_ptr<OptimizerKind> MakeAdagrad();
std::unique_ptr<OptimizerKind> MakeAdadelta();
std::unique_ptr<OptimizerKind> MakeAdamax();
std::unique_ptr<OptimizerKind> MakeRmsprop();
std::unique_ptr<OptimizerKind> MakeRprop();

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_BUILTIN_KINDS_H_
