// CreateParameter's request: the name, dtype, shape and initializer (zeros,
// constant, uniform or normal with a seed, explicit values), as
// ParameterService.CreateParameter takes them (DTypeFromProto,
// InitializerFromProto, ParameterStore::Create -> ValidateParameterName,
// CheckedNumElements, ValidateInitializer, the memory budget,
// ApplyInitializer).
//
// The daemon runs with --max_tensor_bytes=4MiB --max_total_bytes=64MiB,
// the limits an operator sets against clients that ask for too much. The
// input is a serialized v1::CreateParameterRequest. A parameter that is
// made is read back (GetParameter with its values), made again under
// another name (the same request gives the same values: seeded
// initializers are deterministic), then both are deleted; the budget must
// then be back where it was.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "grpcpp/server_context.h"
#include "proto/distopt/v1/parameter.pb.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace distopt;  // NOLINT

bool Delete(fuzz::Daemon& daemon, uint64_t id) {
  grpc::ServerContext context;
  v1::DeleteParameterRequest request;
  request.mutable_parameter()->set_id(id);
  v1::DeleteParameterResponse response;
  return daemon.parameter_service.DeleteParameter(&context, &request, &response)
      .ok();
}

bool Values(fuzz::Daemon& daemon, uint64_t id, v1::GetParameterResponse* out) {
  grpc::ServerContext context;
  v1::GetParameterRequest request;
  request.mutable_parameter()->set_id(id);
  request.set_include_values(true);
  return daemon.parameter_service.GetParameter(&context, &request, out).ok();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The default limits: 4 MiB a tensor, 64 MiB in all.
  fuzz::Daemon& daemon = fuzz::ModelDaemon();
  static const uint64_t model_bytes = daemon.budget.used_bytes();
  v1::CreateParameterRequest request;
  if (!fuzz::Parse(data, size, &request)) return 0;
  grpc::ServerContext context;
  v1::ParameterInfo info;
  const grpc::Status made =
      daemon.parameter_service.CreateParameter(&context, &request, &info);
  fuzz::Report("CreateParameter", made);
  if (!made.ok()) {
    if (daemon.budget.used_bytes() != model_bytes) std::abort();
    return 0;
  }
  if (info.name() != request.name() || info.dtype() != request.dtype() ||
      info.shape_size() != request.shape_size()) {
    std::abort();
  }
  v1::GetParameterResponse first;
  const bool read = Values(daemon, info.id(), &first);
  if (read &&
      static_cast<int64_t>(first.values().data().size()) != info.byte_size()) {
    std::abort();
  }

  // The same request under another name gives the same values.
  v1::CreateParameterRequest again = request;
  again.set_name(request.name().size() < 200 ? request.name() + "~again"
                                             : "again");
  v1::ParameterInfo second_info;
  if (daemon.parameter_service.CreateParameter(&context, &again, &second_info)
          .ok()) {
    v1::GetParameterResponse second;
    if (read && Values(daemon, second_info.id(), &second) &&
        second.values().data() != first.values().data()) {
      std::abort();
    }
    if (!Delete(daemon, second_info.id())) std::abort();
  }
  if (!Delete(daemon, info.id())) std::abort();
  if (daemon.budget.used_bytes() != model_bytes) std::abort();
  return 0;
}
