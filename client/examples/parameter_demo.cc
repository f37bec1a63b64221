// The quick-start demo: starts a worker daemon on loopback, then creates,
// writes, reads, lists and deletes parameters through the client library,
// printing what it does, and stops the worker.
//
//   bazel run //client/examples:parameter_demo
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/local_worker.h"
#include "common/shape.h"

namespace {

using distopt::Client;
using distopt::DType;
using distopt::ParameterInfo;
using distopt::RemoteParameter;
using distopt::Tensor;

void Describe(const ParameterInfo& info) {
  std::printf(
      "  id=%-3llu %-16s %-8s shape=%-12s %10lld bytes on %s, version %llu\n",
      static_cast<unsigned long long>(info.id), info.name.c_str(),
      std::string(distopt::DTypeName(info.dtype)).c_str(),
      distopt::ShapeToString(info.shape).c_str(),
      static_cast<long long>(info.byte_size), info.device.ToString().c_str(),
      static_cast<unsigned long long>(info.version));
}

// Everything the demo does through the client library.
absl::Status UseWorker(const std::string& address) {
  Client client;
  // A layer's weight from a seeded uniform initializer, its bias as zeros.
  absl::StatusOr<RemoteParameter> weight =
      client.CreateParameter(address, "fc.weight", DType::kFloat32, {64, 32},
                             distopt::init::Uniform(-0.18, 0.18, /*seed=*/1));
  if (!weight.ok()) return weight.status();
  absl::StatusOr<RemoteParameter> bias =
      client.CreateParameter(address, "fc.bias", DType::kBFloat16, {64});
  if (!bias.ok()) return bias.status();
  std::printf("created fc.weight (%s) and fc.bias (%s)\n",
              weight->ToString().c_str(), bias->ToString().c_str());

  // An embedding table of 16 MiB: more than one gRPC message holds, so the
  // client streams it in 1 MiB chunks.
  absl::StatusOr<Tensor> table =
      Tensor::AllocateHost(DType::kFloat32, {4096, 1024});
  if (!table.ok()) return table.status();
  float* values = static_cast<float*>(table->data());
  for (int64_t i = 0; i < table->num_elements(); ++i) values[i] = 0.001f * i;
  const absl::Time start = absl::Now();
  absl::StatusOr<RemoteParameter> embedding =
      client.CreateParameterFrom(address, "embedding", *table);
  if (!embedding.ok()) return embedding.status();
  absl::StatusOr<Tensor> read_back = client.ReadParameter(*embedding);
  if (!read_back.ok()) return read_back.status();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const bool intact =
      std::memcmp(read_back->data(), table->data(), table->byte_size()) == 0;
  std::printf("wrote and read back embedding (%zu MiB) in %.3f s: %s\n",
              table->byte_size() >> 20, seconds,
              intact ? "intact" : "CORRUPTED");
  if (!intact) return absl::DataLossError("embedding came back different");

  // Overwrite the weight and read a few values.
  absl::StatusOr<Tensor> ones = Tensor::AllocateHost(DType::kFloat32, {64, 32});
  if (!ones.ok()) return ones.status();
  for (float& x : ones->host_span<float>()) x = 1.0f;
  absl::StatusOr<ParameterInfo> written = client.WriteParameter(*weight, *ones);
  if (!written.ok()) return written.status();
  absl::StatusOr<Tensor> weight_values = client.ReadParameter(*weight);
  if (!weight_values.ok()) return weight_values.status();
  std::printf("overwrote fc.weight with ones: now version %llu, w[0]=%.1f\n",
              static_cast<unsigned long long>(written->version),
              weight_values->host_span<float>()[0]);

  absl::StatusOr<std::vector<ParameterInfo>> listed =
      client.ListParameters(address);
  if (!listed.ok()) return listed.status();
  std::printf("parameters on %s:\n", address.c_str());
  for (const ParameterInfo& info : *listed) Describe(info);

  // Bad input gets a clear error and changes nothing.
  absl::StatusOr<RemoteParameter> duplicate =
      client.CreateParameter(address, "fc.bias", DType::kFloat32, {1});
  std::printf("creating fc.bias again is refused: %s\n",
              duplicate.status().ToString().c_str());

  absl::StatusOr<ParameterInfo> deleted = client.DeleteParameter(*embedding);
  if (!deleted.ok()) return deleted.status();
  std::printf("deleted %s; %zu parameters remain\n", deleted->name.c_str(),
              client.ListParameters(address)->size());
  return absl::OkStatus();
}

absl::Status Run() {
  absl::StatusOr<std::unique_ptr<distopt::LocalWorker>> worker =
      distopt::LocalWorker::Start({});
  if (!worker.ok()) return worker.status();
  std::printf("started distopt_worker (pid %d) on %s\n", (*worker)->pid(),
              (*worker)->address().c_str());
  // The client is gone (its connections closed) before the worker stops, so
  // the worker need not wait for it to acknowledge the shutdown.
  absl::Status status = UseWorker((*worker)->address());
  if (!status.ok()) return status;
  absl::StatusOr<int> exit_code = (*worker)->Stop();
  if (!exit_code.ok()) return exit_code.status();
  std::printf("stopped the worker (exit code %d)\n", *exit_code);
  return absl::OkStatus();
}

}  // namespace

int main() {
  absl::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "demo failed: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
