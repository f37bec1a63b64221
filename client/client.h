// Client: typed calls to distopt worker daemons.
//
// One gRPC channel per worker address, created on first use and shared.
// Every call carries a deadline: `rpc_timeout` for unary calls, plus the
// time to move the payload at `min_stream_bytes_per_second` for streams.
// Large values are streamed in chunks under the hood, so the 4 MiB message
// limit of gRPC never shows. Errors keep the daemon's status code and say
// which worker and call failed. Thread-safe: share one Client per process.
#ifndef DISTOPT_CLIENT_CLIENT_H_
#define DISTOPT_CLIENT_CLIENT_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/hyperparameters.h"
#include "client/initializers.h"
#include "client/remote_parameter.h"
#include "client/step_streams.h"
#include "common/parameter_info.h"
#include "common/tensor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/distopt/v1/autograd.grpc.pb.h"
#include "proto/distopt/v1/checkpoint.grpc.pb.h"
#include "proto/distopt/v1/group.grpc.pb.h"
#include "proto/distopt/v1/optimizer.grpc.pb.h"
#include "proto/distopt/v1/parameter.grpc.pb.h"
#include "proto/distopt/v1/status.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace distopt {

struct ClientOptions {
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Slowest transfer rate a stream's deadline allows for.
  double min_stream_bytes_per_second = 16.0 * (1 << 20);
  // Chunk size of streamed reads and writes (at most 1 MiB for reads).
  int64_t chunk_bytes = int64_t{1} << 20;
  // How often a read is retried when the parameter changed under it.
  int read_attempts = 3;

  // Transport security. Empty root certificates mean plaintext. All are
  // PEM contents, not file names.
  std::string tls_root_certs;   // CAs that sign the workers' certificates.
  std::string tls_client_cert;  // For workers that require mutual TLS.
  std::string tls_client_key;
  // Sent with every call as "authorization: Bearer <token>" (needs TLS).
  std::string auth_token;
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Creates a parameter on `worker` filled by `initializer`.
  absl::StatusOr<RemoteParameter> CreateParameter(
      const std::string& worker, const std::string& name, DType dtype,
      const Shape& shape, const v1::Initializer& initializer = init::Zeros());

  // Creates a parameter holding a copy of host tensor `values`. Values too
  // large for one message are created as zeros and then streamed in; if that
  // fails the new parameter is deleted again.
  absl::StatusOr<RemoteParameter> CreateParameterFrom(const std::string& worker,
                                                      const std::string& name,
                                                      const Tensor& values);

  absl::StatusOr<ParameterInfo> GetParameter(const RemoteParameter& parameter);
  // Looks a parameter up by name.
  absl::StatusOr<RemoteParameter> FindParameter(const std::string& worker,
                                                const std::string& name);

  // The values, streamed into a new host tensor.
  absl::StatusOr<Tensor> ReadParameter(const RemoteParameter& parameter);
  // The values, streamed into host tensor `values`, which must have the
  // parameter's dtype and shape: reusing one buffer avoids the cost of
  // touching fresh memory on every read.
  absl::Status ReadParameterInto(const RemoteParameter& parameter,
                                 Tensor& values);

  // Replaces the values with host tensor `values`, which must have the
  // parameter's dtype and shape. All or nothing.
  absl::StatusOr<ParameterInfo> WriteParameter(const RemoteParameter& parameter,
                                               const Tensor& values);

  // Every parameter on `worker` whose name starts with `name_prefix`.
  absl::StatusOr<std::vector<ParameterInfo>> ListParameters(
      const std::string& worker, const std::string& name_prefix = "");

  absl::StatusOr<ParameterInfo> DeleteParameter(
      const RemoteParameter& parameter);

  // --- Distributed autograd contexts (see DistAutogradContext).

  // A fresh context id: this client's 16-bit id above a 48-bit counter
  // (which starts at random, so that two clients that drew the same id do
  // not make the same context ids).
  uint64_t NewContextId();
  // Whether `context_id` came from NewContextId and is not yet released.
  bool OwnsContext(uint64_t context_id) const;

  // Adds gradients to `context_id` on `worker`: parameter id -> host tensor
  // of the parameter's dtype and shape. All or nothing on the worker.
  absl::Status AccumulateGradients(
      const std::string& worker, uint64_t context_id,
      const std::vector<std::pair<uint64_t, Tensor>>& gradients);
  // The context's gradients on `worker`, by parameter id (host tensors).
  absl::StatusOr<std::map<uint64_t, Tensor>> GetGradients(
      const std::string& worker, uint64_t context_id);
  // Runs `op` on `worker` inside `context_id`: returns the outputs and the
  // forward id that Backward takes.
  struct ForwardResult {
    uint64_t forward_id = 0;
    std::vector<Tensor> outputs;
  };
  absl::StatusOr<ForwardResult> Forward(
      const std::string& worker, uint64_t context_id, const std::string& op,
      const std::vector<uint64_t>& parameter_ids,
      const std::vector<Tensor>& inputs);
  // Backward of a forward: the inputs' gradients (nullopt where an input
  // has none); the parameters' gradients stay in the context on `worker`.
  absl::StatusOr<std::vector<std::optional<Tensor>>> Backward(
      const std::string& worker, uint64_t context_id, uint64_t forward_id,
      const std::vector<Tensor>& output_gradients);

  // Frees the context on `worker`; false when the worker did not have it.
  absl::StatusOr<bool> ReleaseContext(const std::string& worker,
                                      uint64_t context_id);
  // Forgets a context id from NewContextId (after releasing it everywhere).
  void ForgetContext(uint64_t context_id);

  // --- Optimizers on one worker (see DistributedOptimizer).

  absl::StatusOr<v1::OptimizerInfo> CreateOptimizer(
      const std::string& worker, const std::string& kind,
      const HyperparameterMap& hyperparameters,
      const std::vector<uint64_t>& parameter_ids);
  // Steps go over a StepStream kept open per worker (see StepStreams).
  absl::StatusOr<v1::StepResponse> Step(const std::string& worker,
                                        uint64_t optimizer_id,
                                        uint64_t context_id);
  // Steps optimizer `optimizer_id` on `worker` for every (worker,
  // optimizer_id) at once, and waits for all: one result each, in order.
  using StepTarget = StepStreams::Target;
  std::vector<absl::StatusOr<v1::StepResponse>> StepAll(
      const std::vector<StepTarget>& targets, uint64_t context_id);
  absl::StatusOr<v1::OptimizerInfo> SetHyperparameters(
      const std::string& worker, uint64_t optimizer_id,
      const HyperparameterMap& changes);
  absl::StatusOr<v1::OptimizerStateDict> GetStateDict(const std::string& worker,
                                                      uint64_t optimizer_id);
  absl::Status LoadStateDict(const std::string& worker, uint64_t optimizer_id,
                             const v1::OptimizerStateDict& state_dict);
  absl::StatusOr<v1::OptimizerInfo> DeleteOptimizer(const std::string& worker,
                                                    uint64_t optimizer_id);

  // --- Checkpoints (the worker needs --checkpoint_dir).

  // Saves a checkpoint on `worker` now and returns it once it is on disk
  // (FAILED_PRECONDITION without --checkpoint_dir; RESOURCE_EXHAUSTED when
  // its disk is full, the previous checkpoints kept).
  absl::StatusOr<v1::CheckpointInfo> SaveCheckpoint(const std::string& worker);
  // The checkpoints `worker` keeps, newest first, and what its last restore
  // and save said.
  absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(
      const std::string& worker);

  // The optimizer kinds `worker` runs, with their hyperparameters and
  // defaults.
  absl::StatusOr<std::vector<v1::OptimizerKindInfo>> ListOptimizerKinds(
      const std::string& worker);

  // --- Inspection (what distoptctl shows an operator).

  // The optimizers of `worker`'s OptimizerService.
  absl::StatusOr<std::vector<v1::OptimizerInfo>> ListOptimizers(
      const std::string& worker);
  // The autograd contexts alive on `worker`, in increasing id order (every
  // page). Under mutual TLS only the caller's own.
  absl::StatusOr<std::vector<v1::ContextInfo>> ListContexts(
      const std::string& worker);
  // The data-parallel group `worker` belongs to.
  absl::StatusOr<v1::GroupInfo> GetGroup(const std::string& worker);
  // What `worker` is, and its metrics (see GetStatusRequest).
  absl::StatusOr<v1::WorkerStatus> GetStatus(
      const std::string& worker, const v1::GetStatusRequest& request = {});
  // grpc.health.v1's answer for `service` ("": the whole daemon).
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus>
  CheckHealth(const std::string& worker, const std::string& service = "");

  // The shared channel to `worker`.
  std::shared_ptr<grpc::Channel> Channel(const std::string& worker);

  const ClientOptions& options() const { return options_; }

  // For the library's other classes: the deadline of a call that may wait
  // `wait` on the daemon (for other ranks, say) and carries `payload_bytes`:
  // rpc_timeout, plus `wait`, plus the transfer at the slowest rate allowed.
  void SetDeadline(grpc::ClientContext& context, int64_t payload_bytes,
                   absl::Duration wait = absl::ZeroDuration()) const;

 private:
  std::unique_ptr<v1::ParameterService::Stub> ParameterStub(
      const std::string& worker);
  std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials() const;
  // One unary call with the default deadline; errors name worker and call.
  template <typename Service, typename Request, typename Response>
  absl::Status CallUnary(const std::string& worker, absl::string_view name,
                         grpc::Status (Service::Stub::*method)(
                             grpc::ClientContext*, const Request&, Response*),
                         const Request& request, Response* response);

  const ClientOptions options_;
  // Random, so that trainers sharing workers rarely share context ids.
  const uint64_t client_id_;
  std::atomic<uint64_t> next_context_;  // From a random start.
  mutable absl::Mutex mutex_;
  absl::flat_hash_set<uint64_t> live_contexts_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mutex_);
  StepStreams step_streams_;
};

}  // namespace distopt

#endif  // DISTOPT_CLIENT_CLIENT_H_
