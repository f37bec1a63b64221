#include "client/layers.h"

#include <cmath>
#include <utility>

namespace distopt {
namespace {

// Runs `op` remotely and records its backward, which runs remotely too.
absl::StatusOr<Variable> RemoteOp(Client* client, DistAutogradContext& context,
                                  const std::string& worker,
                                  const std::string& op,
                                  std::vector<uint64_t> parameter_ids,
                                  const std::vector<Variable>& inputs) {
  std::vector<Tensor> values;
  for (const Variable& input : inputs) values.push_back(input.value);
  context.Touch(worker);
  absl::StatusOr<Client::ForwardResult> result =
      client->Forward(worker, context.id(), op, parameter_ids, values);
  if (!result.ok()) return result.status();
  const uint64_t forward_id = result->forward_id;
  const uint64_t context_id = context.id();
  return context.Record(
      inputs, std::move(result->outputs[0]),
      [client, worker, context_id, forward_id](const Tensor& gradient) {
        return client->Backward(worker, context_id, forward_id, {gradient});
      });
}

}  // namespace

absl::StatusOr<RemoteLinear> RemoteLinear::Create(
    Client* client, const std::string& worker, const std::string& name,
    int64_t in_features, int64_t out_features, uint64_t seed) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  absl::StatusOr<RemoteParameter> weight = client->CreateParameter(
      worker, name + ".weight", DType::kFloat32, {out_features, in_features},
      init::Uniform(-bound, bound, seed));
  if (!weight.ok()) return weight.status();
  absl::StatusOr<RemoteParameter> bias = client->CreateParameter(
      worker, name + ".bias", DType::kFloat32, {out_features},
      init::Uniform(-bound, bound, seed + 1));
  if (!bias.ok()) return bias.status();
  return RemoteLinear(client, *std::move(weight), *std::move(bias));
}

absl::StatusOr<Variable> RemoteLinear::Forward(DistAutogradContext& context,
                                               const Variable& x) const {
  return RemoteOp(client_, context, weight_.worker, "linear",
                  {weight_.id, bias_.id}, {x});
}

absl::StatusOr<RemoteEmbedding> RemoteEmbedding::Create(
    Client* client, const std::string& worker, const std::string& name,
    int64_t num_embeddings, int64_t dim, uint64_t seed) {
  absl::StatusOr<RemoteParameter> weight =
      client->CreateParameter(worker, name + ".weight", DType::kFloat32,
                              {num_embeddings, dim}, init::Normal(0, 1, seed));
  if (!weight.ok()) return weight.status();
  return RemoteEmbedding(client, *std::move(weight));
}

absl::StatusOr<Variable> RemoteEmbedding::Forward(DistAutogradContext& context,
                                                  const Tensor& indices) const {
  return RemoteOp(client_, context, weight_.worker, "embedding", {weight_.id},
                  {Variable{indices, -1}});
}

}  // namespace distopt
