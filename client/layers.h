// Remote layers: modules whose parameters live on a worker daemon and whose
// forward and backward run there, recorded on a DistAutogradContext's tape.
// Like torch.nn.Linear and torch.nn.Embedding, with the same default
// initialisation (uniform in +-1/sqrt(in_features); normal(0, 1)).
#ifndef DISTOPT_CLIENT_LAYERS_H_
#define DISTOPT_CLIENT_LAYERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/dist_autograd_context.h"
#include "client/remote_parameter.h"

namespace distopt {

class RemoteLinear {
 public:
  // Creates "<name>.weight" [out, in] and "<name>.bias" [out] on `worker`.
  static absl::StatusOr<RemoteLinear> Create(
      Client* client, const std::string& worker, const std::string& name,
      int64_t in_features, int64_t out_features, uint64_t seed);
  // y = x W^T + b on the worker; x is [N, in_features] float32.
  absl::StatusOr<Variable> Forward(DistAutogradContext& context,
                                   const Variable& x) const;
  std::vector<RemoteParameter> parameters() const { return {weight_, bias_}; }

 private:
  RemoteLinear(Client* client, RemoteParameter weight, RemoteParameter bias)
      : client_(client), weight_(std::move(weight)), bias_(std::move(bias)) {}
  Client* client_;
  RemoteParameter weight_;
  RemoteParameter bias_;
};

class RemoteEmbedding {
 public:
  // Creates "<name>.weight" [num_embeddings, dim] on `worker`.
  static absl::StatusOr<RemoteEmbedding> Create(Client* client,
                                                const std::string& worker,
                                                const std::string& name,
                                                int64_t num_embeddings,
                                                int64_t dim, uint64_t seed);
  // Rows of the table for int64 `indices`; the output is indices.shape +
  // [dim]. The indices get no gradient.
  absl::StatusOr<Variable> Forward(DistAutogradContext& context,
                                   const Tensor& indices) const;
  std::vector<RemoteParameter> parameters() const { return {weight_}; }

 private:
  RemoteEmbedding(Client* client, RemoteParameter weight)
      : client_(client), weight_(std::move(weight)) {}
  Client* client_;
  RemoteParameter weight_;
};

}  // namespace distopt

#endif  // DISTOPT_CLIENT_LAYERS_H_
