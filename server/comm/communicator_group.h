// CommunicatorGroup: a group's communicator and its subgroups (contiguous
// blocks of ranks, as torch's dist.new_subgroups), each made on first use.
// Making a subgroup is collective: every rank asks for the same sizes in
// the same order.
#ifndef DISTOPT_SERVER_COMM_COMMUNICATOR_GROUP_H_
#define DISTOPT_SERVER_COMM_COMMUNICATOR_GROUP_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/comm/communicator.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

class CommunicatorGroup {
 public:
  virtual ~CommunicatorGroup() = default;
  virtual Communicator& global() = 0;
  // This rank's block of `size` ranks; the global communicator for the
  // world size. INVALID_ARGUMENT unless `size` divides the world size.
  virtual absl::StatusOr<Communicator*> Subgroup(int size) = 0;
  // Bounds each later collective of the group and its subgroups.
  virtual void SetTimeout(absl::Duration timeout) = 0;
};

// Over gloo: subgroups are connected through `store` with `options` (the
// group's own), and kept. A group whose tensors take another communicator
// (a GPU group's, tensor_communicators.h) pairs each subgroup with its own
// through `pair`, called with the subgroup's gloo communicator and its
// name.
class GlooCommunicatorGroup : public CommunicatorGroup {
 public:
  using Pairing = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
      std::unique_ptr<Communicator> control, const std::string& name)>;

  // `global` and `store` must outlive the group.
  GlooCommunicatorGroup(Communicator* global, const GlooOptions& options,
                        RendezvousStore* store, Pairing pair = nullptr)
      : global_(global),
        options_(options),
        store_(store),
        pair_(std::move(pair)) {}

  Communicator& global() override { return *global_; }
  absl::StatusOr<Communicator*> Subgroup(int size) override;
  void SetTimeout(absl::Duration timeout) override;

 private:
  Communicator* const global_;
  GlooOptions options_;
  RendezvousStore* const store_;
  const Pairing pair_;
  std::map<int, std::unique_ptr<Communicator>> subgroups_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_COMMUNICATOR_GROUP_H_
