// A trainer's handles on its rank's data-parallel optimizers: RemoteZero
// (ZeroService) and RemoteLocalSgd (LocalSgdService). In data-parallel
// training a trainer per rank drives that rank's daemon; every rank's
// trainer makes the same calls in the same order, and the daemons run the
// collectives among themselves. Each call's deadline allows the daemon's
// collective timeout (from the create request) on top of the client's
// rpc_timeout; state dicts stream in chunks, whatever their size. Errors
// name the worker and the call. Thread-compatible.
#ifndef DISTOPT_CLIENT_DATA_PARALLEL_H_
#define DISTOPT_CLIENT_DATA_PARALLEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/hyperparameters.h"
#include "proto/distopt/v1/local_sgd.grpc.pb.h"
#include "proto/distopt/v1/zero.grpc.pb.h"

namespace distopt {

class RemoteZero {
 public:
  // `client` must outlive the handle; `worker` is this rank's daemon.
  RemoteZero(Client* client, std::string worker)
      : client_(client), worker_(std::move(worker)) {}

  absl::StatusOr<v1::ZeroInfo> Create(const v1::CreateZeroRequest& request);
  absl::Status Step(uint64_t context_id);
  // Once this rank's data ran out: shadows the others' steps until every
  // rank has joined, waiting at most `wait`; returns the steps shadowed.
  absl::StatusOr<int64_t> Join(absl::Duration wait = absl::Hours(24));
  absl::StatusOr<v1::ZeroInfo> AddParamGroup(const v1::ZeroParamGroup& group);
  absl::StatusOr<v1::ZeroInfo> SetHyperparameters(
      int group, const HyperparameterMap& changes);
  // True on rank `to`, whose GetStateDict then returns the whole dict.
  absl::StatusOr<bool> ConsolidateStateDict(int to);
  absl::StatusOr<v1::ZeroStateDict> GetStateDict();
  absl::Status LoadStateDict(const v1::ZeroStateDict& state_dict);
  absl::StatusOr<v1::ZeroInfo> Get();

 private:
  Client* const client_;
  const std::string worker_;
  absl::Duration collective_timeout_ = absl::Seconds(60);
};

class RemoteLocalSgd {
 public:
  RemoteLocalSgd(Client* client, std::string worker)
      : client_(client), worker_(std::move(worker)) {}

  absl::StatusOr<v1::PostLocalSgdInfo> Create(
      const v1::CreatePostLocalSgdRequest& request);
  // Returns the size of the group this step averaged in (0: none).
  absl::StatusOr<int> Step(uint64_t context_id);
  absl::StatusOr<v1::PostLocalSgdInfo> SetHyperparameters(
      int group, const HyperparameterMap& changes);
  absl::StatusOr<v1::PostLocalSgdInfo> Get();
  absl::StatusOr<v1::PostLocalSgdStateDict> GetStateDict();
  // Returns the daemon's warnings (a dict without a step).
  absl::StatusOr<std::vector<std::string>> LoadStateDict(
      const v1::PostLocalSgdStateDict& state_dict);

 private:
  Client* const client_;
  const std::string worker_;
  absl::Duration collective_timeout_ = absl::Seconds(60);
};

}  // namespace distopt

#endif  // DISTOPT_CLIENT_DATA_PARALLEL_H_
