// The Adam update shared by Adam (L2 weight decay added to the gradient)
// and AdamW (decoupled weight decay applied to the parameter).
#ifndef DISTOPT_SERVER_OPTIM_ADAM_H_
#define DISTOPT_SERVER_OPTIM_ADAM_H_

#include <vector>

#include "server/optim/optimizer_kind.h"

namespace distopt {

// Hyperparameters of Adam and AdamW; they differ only in the default of
// weight_decay.
std::vector<HyperparameterSpec> AdamHyperparameters(double weight_decay);
absl::Status ValidateAdam(const Hyperparameters& h);
std::vector<StateBufferSpec> AdamStateBuffers(const Hyperparameters& h);
void AdamUpdate(const UpdateArgs& args, bool decoupled_weight_decay);
absl::Status PrepareAdamCudaLaunch(const Hyperparameters& h,
                                   const std::vector<int64_t>& steps,
                                   bool decoupled_weight_decay,
                                   multi_tensor::Launch& launch);

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_ADAM_H_
