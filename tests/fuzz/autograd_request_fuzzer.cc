// AutogradService's unary calls, served in-process by the daemon's
// AutogradServiceImpl (a default grpc::ServerContext: plaintext, no caller
// identity) over its ContextTable, AutogradEngine, ops (linear, embedding)
// and the model of fuzz_support.h: Forward, Backward, AccumulateGradients,
// GetGradients, ReleaseContext, ListContexts. The chunked variants read
// their request with ReadChunked (chunked_message_fuzzer) and then serve it
// the same way.
//
// Input: up to 8 calls, each a method byte (modulo 6, in the order above)
// and a part (16-bit length, then the serialized request), so that a
// Backward can follow its Forward. A refused Forward, Backward or
// AccumulateGradients must leave the context's gradients as they were.
// After the calls every context is released; the budget must then be back
// to the parameters alone (nothing a context held stays reserved).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "grpcpp/server_context.h"
#include "proto/distopt/v1/autograd.pb.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace distopt;  // NOLINT

// What context `id` holds, as GetGradients reports it ("" when it does not
// exist).
std::string ContextState(fuzz::Daemon& daemon, uint64_t id) {
  v1::GetGradientsRequest request;
  request.set_context_id(id);
  v1::GetGradientsResponse response;
  grpc::ServerContext context;
  if (!daemon.autograd_service.GetGradients(&context, &request, &response)
           .ok()) {
    return "";
  }
  return "exists:" + fuzz::DeterministicBytes(response);
}

// Calls `method` with `bytes` when they parse as its request. Forward,
// Backward and AccumulateGradients add to a context: refused, they must
// leave it as it was.
template <typename Request, typename Response>
void Call(fuzz::Daemon& daemon, fuzz::AutogradMethod<Request, Response> method,
          absl::string_view bytes) {
  Request request;
  if (!fuzz::Parse(bytes, &request)) return;
  constexpr bool kAllOrNothing =
      std::is_same_v<Request, v1::ForwardRequest> ||
      std::is_same_v<Request, v1::BackwardRequest> ||
      std::is_same_v<Request, v1::AccumulateGradientsRequest>;
  uint64_t context_id = 0;
  if constexpr (kAllOrNothing) context_id = request.context_id();
  const std::string before =
      kAllOrNothing ? ContextState(daemon, context_id) : "";
  const grpc::Status status = fuzz::CallAutograd(daemon, method, request);
  fuzz::Report(request.GetTypeName(), status);
  if (kAllOrNothing && !status.ok() &&
      ContextState(daemon, context_id) != before) {
    std::fprintf(stderr, "a refused call (%s) changed context %llu\n",
                 status.error_message().c_str(),
                 static_cast<unsigned long long>(context_id));
    std::abort();
  }
}

void ReleaseEverything(fuzz::Daemon& daemon) {
  ContextPage page =
      daemon.contexts.List(0, std::numeric_limits<size_t>::max());
  for (const ContextInfo& info : page.contexts) {
    if (!daemon.contexts.Release(info.id).ok()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Daemon& daemon = fuzz::ModelDaemon();
  static const uint64_t model_bytes = daemon.budget.used_bytes();
  fuzz::InputReader in(data, size);
  for (int call = 0; call < 8 && !in.empty(); ++call) {
    const uint8_t method = in.Byte();
    const absl::string_view request = in.Part();
    fuzz::WithAutogradMethod(method, [&](auto service_method) {
      Call(daemon, service_method, request);
    });
  }
  ReleaseEverything(daemon);
  if (daemon.budget.used_bytes() != model_bytes) {
    std::fprintf(stderr, "%llu bytes still reserved after every context went\n",
                 static_cast<unsigned long long>(daemon.budget.used_bytes() -
                                                 model_bytes));
    std::abort();
  }
  return 0;
}
