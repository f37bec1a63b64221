// Which communicator carries a data-parallel group's tensors, from the
// ranks' devices (every rank describes its own at each round's
// connection, and all decide alike from the same descriptions):
//
//   every rank in host memory        -> gloo, the group's own communicator;
//   every rank on a GPU of its own   -> NCCL (when every rank's build has
//                                       it), made through the group's store;
//   ranks that share a GPU, or no    -> gloo staged through page-locked
//   NCCL on some rank                   host memory (staged_communicator.h);
//   some ranks on CPU, some on GPUs  -> refused: FAILED_PRECONDITION naming
//                                       the ranks and their devices.
//
// Two ranks share a GPU when their GPUs have the same UUID (unique to the
// GPU; the index alone differs with CUDA_VISIBLE_DEVICES).
#ifndef DISTOPT_SERVER_COMM_TENSOR_BACKEND_H_
#define DISTOPT_SERVER_COMM_TENSOR_BACKEND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace distopt {

// The identity of a rank whose GPU could not be read: every rank refuses
// the group, naming it.
inline constexpr char kUnusableDevice[] = "unusable: ";

struct RankDevice {
  std::string device;  // "cpu" or "cuda:N", as --device gave it.
  // "cpu", or the GPU's UUID, or kUnusableDevice and why.
  std::string identity;
  std::string host;   // The machine's name, for messages.
  bool nccl = false;  // Whether its build has NCCL.

  // One line, for the exchange between ranks; Parse reads it back
  // (INVALID_ARGUMENT for text that is not one).
  std::string Serialize() const;
  static absl::StatusOr<RankDevice> Parse(const std::string& text);
};

enum class TensorBackend { kGloo, kNccl, kStagedGloo };

struct TensorBackendChoice {
  TensorBackend backend = TensorBackend::kGloo;
  // What GetGroup reports: "gloo", "nccl" or "gloo-staged".
  std::string name;
  // Why, for the log: which ranks share a GPU, or lack NCCL.
  std::string reason;
};

// `ranks[r]` is rank r's device.
absl::StatusOr<TensorBackendChoice> ChooseTensorBackend(
    const std::vector<RankDevice>& ranks);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_TENSOR_BACKEND_H_
