#include "client/distributed_optimizer.h"

#include <map>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/thread_pool.h"

namespace distopt {
namespace {

// Runs call(i) for i in [0, n) at once on `pool` (one per thread, the
// calling thread included) and returns the results.
template <typename Result, typename Call>
std::vector<Result> InParallel(ThreadPool& pool, size_t n, Call call) {
  std::vector<Result> results(n, Result(absl::UnknownError("not run")));
  pool.ParallelFor(static_cast<int64_t>(n), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) results[i] = call(i);
  });
  return results;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DistributedOptimizer>>
DistributedOptimizer::Create(Client* client, const std::string& kind,
                             const std::vector<RemoteParameter>& parameters,
                             const HyperparameterMap& hyperparameters) {
  if (parameters.empty()) {
    return absl::InvalidArgumentError(
        "parameters: empty; expected at least one remote parameter");
  }
  std::vector<Owner> owners;
  std::map<std::string, size_t> index;
  for (const RemoteParameter& parameter : parameters) {
    auto [it, added] = index.try_emplace(parameter.worker, owners.size());
    if (added) owners.push_back({parameter.worker, 0, {}});
    owners[it->second].parameter_ids.push_back(parameter.id);
  }
  // One thread per owner (the caller's included): the calls block on the
  // network, so they all run at once.
  auto pool = std::make_unique<ThreadPool>(static_cast<int>(owners.size()));
  std::vector<absl::StatusOr<v1::OptimizerInfo>> created =
      InParallel<absl::StatusOr<v1::OptimizerInfo>>(
          *pool, owners.size(), [&](size_t i) {
            return client->CreateOptimizer(owners[i].worker, kind,
                                           hyperparameters,
                                           owners[i].parameter_ids);
          });
  absl::Status first_error;
  for (size_t i = 0; i < owners.size(); ++i) {
    if (created[i].ok()) {
      owners[i].optimizer_id = created[i]->id();
    } else if (first_error.ok()) {
      first_error = created[i].status();
    }
  }
  if (!first_error.ok()) {
    // Leave nothing behind on the workers that did create one.
    for (size_t i = 0; i < owners.size(); ++i) {
      if (created[i].ok()) {
        client->DeleteOptimizer(owners[i].worker, owners[i].optimizer_id)
            .IgnoreError();
      }
    }
    return first_error;
  }
  return std::unique_ptr<DistributedOptimizer>(
      new DistributedOptimizer(client, std::move(owners), std::move(pool)));
}

DistributedOptimizer::~DistributedOptimizer() {
  for (const Owner& owner : owners_) {
    client_->DeleteOptimizer(owner.worker, owner.optimizer_id).IgnoreError();
  }
}

absl::Status DistributedOptimizer::Step(uint64_t context_id) {
  if (!client_->OwnsContext(context_id)) {
    return absl::NotFoundError(absl::StrCat(
        "context_id: ", context_id,
        " is not a live autograd context of this client; expected the id of "
        "a DistAutogradContext in scope"));
  }
  // All owners at once over the client's open step streams: no thread
  // per owner is needed, the replies are awaited together.
  std::vector<Client::StepTarget> targets;
  targets.reserve(owners_.size());
  for (const Owner& owner : owners_) {
    targets.push_back({owner.worker, owner.optimizer_id});
  }
  std::vector<absl::StatusOr<v1::StepResponse>> results =
      client_->StepAll(targets, context_id);
  std::vector<std::string> applied;
  std::vector<std::string> failed;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (size_t i = 0; i < owners_.size(); ++i) {
    if (results[i].ok()) {
      applied.push_back(owners_[i].worker);
    } else {
      if (code == absl::StatusCode::kOk) code = results[i].status().code();
      failed.push_back(std::string(results[i].status().message()));
    }
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::Status(
      code,
      absl::StrCat("step failed on ", failed.size(), " of ", owners_.size(),
                   " workers: ", absl::StrJoin(failed, "; "), ". Applied on: ",
                   applied.empty() ? "none" : absl::StrJoin(applied, ", ")));
}

absl::Status DistributedOptimizer::SetHyperparameters(
    const HyperparameterMap& changes) {
  std::vector<absl::StatusOr<v1::OptimizerInfo>> results =
      InParallel<absl::StatusOr<v1::OptimizerInfo>>(
          *pool_, owners_.size(), [&](size_t i) {
            return client_->SetHyperparameters(
                owners_[i].worker, owners_[i].optimizer_id, changes);
          });
  for (const auto& result : results) {
    if (!result.ok()) return result.status();
  }
  return absl::OkStatus();
}

}  // namespace distopt
