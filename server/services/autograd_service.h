// distopt.v1.AutogradService: translates between the wire messages and the
// AutogradEngine (and the ContextTable for releasing and listing contexts).
// Holds no state of its own.
#ifndef DISTOPT_SERVER_SERVICES_AUTOGRAD_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_AUTOGRAD_SERVICE_H_

#include "common/memory_budget.h"
#include "proto/distopt/v1/autograd.grpc.pb.h"
#include "server/autograd/autograd_engine.h"
#include "server/autograd/context_table.h"
#include "server/services/stream_limits.h"

namespace distopt {

class AutogradServiceImpl final : public v1::AutogradService::Service {
 public:
  // All must outlive the service; `budget` is charged for chunked requests
  // while they arrive.
  AutogradServiceImpl(ContextTable* contexts, AutogradEngine* engine,
                      StreamLimits* streams, MemoryBudget* budget)
      : contexts_(contexts),
        engine_(engine),
        streams_(streams),
        budget_(budget) {}

  grpc::Status Forward(grpc::ServerContext* context,
                       const v1::ForwardRequest* request,
                       v1::ForwardResponse* response) override;
  grpc::Status Backward(grpc::ServerContext* context,
                        const v1::BackwardRequest* request,
                        v1::BackwardResponse* response) override;

  grpc::Status AccumulateGradients(
      grpc::ServerContext* context,
      const v1::AccumulateGradientsRequest* request,
      v1::AccumulateGradientsResponse* response) override;
  grpc::Status GetGradients(grpc::ServerContext* context,
                            const v1::GetGradientsRequest* request,
                            v1::GetGradientsResponse* response) override;
  grpc::Status ReleaseContext(grpc::ServerContext* context,
                              const v1::ReleaseContextRequest* request,
                              v1::ReleaseContextResponse* response) override;
  grpc::Status ListContexts(grpc::ServerContext* context,
                            const v1::ListContextsRequest* request,
                            v1::ListContextsResponse* response) override;

  // The four tensor-carrying calls with request and reply in chunks.
  using ChunkStream =
      grpc::ServerReaderWriter<v1::MessageChunk, v1::MessageChunk>;
  grpc::Status ForwardChunked(grpc::ServerContext* context,
                              ChunkStream* stream) override;
  grpc::Status BackwardChunked(grpc::ServerContext* context,
                               ChunkStream* stream) override;
  grpc::Status AccumulateGradientsChunked(grpc::ServerContext* context,
                                          ChunkStream* stream) override;
  grpc::Status GetGradientsChunked(grpc::ServerContext* context,
                                   ChunkStream* stream) override;

 private:
  // The calls themselves, for both transports: `reply_limit` bounds the
  // tensor bytes of the reply (see AutogradEngine).
  absl::Status ServeForward(const v1::ForwardRequest& request,
                            v1::ForwardResponse* response, int64_t reply_limit,
                            absl::string_view caller);
  absl::Status ServeBackward(const v1::BackwardRequest& request,
                             v1::BackwardResponse* response,
                             int64_t reply_limit, absl::string_view caller);
  absl::Status ServeAccumulateGradients(
      const v1::AccumulateGradientsRequest& request,
      v1::AccumulateGradientsResponse* response, int64_t reply_limit,
      absl::string_view caller);
  absl::Status ServeGetGradients(const v1::GetGradientsRequest& request,
                                 v1::GetGradientsResponse* response,
                                 int64_t reply_limit, absl::string_view caller);

  // One of the calls above as a chunked call: the whole request, the call,
  // then the whole reply.
  template <typename Request, typename Response>
  grpc::Status ServeChunked(
      grpc::ServerContext* context, ChunkStream* stream, absl::string_view call,
      absl::Status (AutogradServiceImpl::*serve)(const Request&, Response*,
                                                 int64_t, absl::string_view));

  ContextTable* const contexts_;
  AutogradEngine* const engine_;
  StreamLimits* const streams_;
  MemoryBudget* const budget_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_AUTOGRAD_SERVICE_H_
