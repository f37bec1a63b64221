// PairedCommunicator: the communicator of a group whose tensors live on
// GPUs. Its own collectives (agreement, step headers, state dicts: small,
// in host memory) go to the control communicator (gloo); tensors() is the
// communicator of the tensors (NCCL, or gloo staged through host memory),
// on the ranks' device. Both pair up alike on every rank, in one order.
#ifndef DISTOPT_SERVER_COMM_PAIRED_COMMUNICATOR_H_
#define DISTOPT_SERVER_COMM_PAIRED_COMMUNICATOR_H_

#include <memory>

#include "server/comm/forwarding_communicator.h"

namespace distopt {

class PairedCommunicator : public ForwardingCommunicator {
 public:
  // `tensors` may use `control` (a staged communicator runs on it); it is
  // destroyed first.
  PairedCommunicator(std::unique_ptr<Communicator> control,
                     std::unique_ptr<Communicator> tensors)
      : owned_control_(std::move(control)),
        control_(owned_control_.get()),
        tensors_(std::move(tensors)) {}
  // The same over a control communicator owned elsewhere (a test's).
  PairedCommunicator(Communicator* control,
                     std::unique_ptr<Communicator> tensors)
      : control_(control), tensors_(std::move(tensors)) {}

  int rank() const override { return control_->rank(); }
  int size() const override { return control_->size(); }
  void SetTimeout(absl::Duration timeout) override {
    control_->SetTimeout(timeout);
    tensors_->SetTimeout(timeout);
  }
  Communicator& tensors() override { return *tensors_; }
  // Its own collectives' (the tensors' communicator reports its own).
  int64_t kept_bytes() const override { return control_->kept_bytes(); }

 private:
  absl::Status Forward(
      absl::FunctionRef<absl::Status(Communicator&)> call) override {
    return call(*control_);
  }

  std::unique_ptr<Communicator> owned_control_;
  Communicator* const control_;
  std::unique_ptr<Communicator> tensors_;  // After the control: freed first.
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_PAIRED_COMMUNICATOR_H_
