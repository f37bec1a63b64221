// Optimizer state dicts in checkpoints. A layer that saves optimizers (the
// optimizer table, ZeRO, post-local SGD) puts a SavedStateDict for each in
// its own header section and every buffer's values, back to back, in one
// raw values section: the state is written from the snapshot's tensors
// with no serialised copy of its size, and read back straight into the
// tensors.
#ifndef DISTOPT_SERVER_OPTIM_STATE_DICT_CHECKPOINT_H_
#define DISTOPT_SERVER_OPTIM_STATE_DICT_CHECKPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/state_dict_checkpoint.pb.h"
#include "server/params/checkpoint.h"

namespace distopt {

// Collects the buffers of the state dicts a checkpoint saves.
class StateValuesWriter {
 public:
  // Describes `dict` in `saved`; its buffers go to the values section, at
  // the offsets `saved` records.
  void Add(const OptimizerStateDict& dict, checkpoint::SavedStateDict* saved);
  // The values section of everything added (it keeps the tensors).
  CheckpointSection Section(const std::string& name) const;

 private:
  std::vector<Tensor> buffers_;
  uint64_t size_ = 0;
};

// Reads back the state dicts a StateValuesWriter saved, in the order they
// were added. DATA_LOSS (naming the section) when the headers and the
// values do not agree: offsets out of order, shapes that do not fit, or
// hyperparameters without values.
absl::StatusOr<std::vector<OptimizerStateDict>> ReadStateDicts(
    const std::vector<const checkpoint::SavedStateDict*>& saved,
    const CheckpointSections& sections, const std::string& values_section);

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_STATE_DICT_CHECKPOINT_H_
