// distopt.v1.ParameterService: translates between the wire messages and
// the ParameterStore. Holds no state of its own.
#ifndef DISTOPT_SERVER_SERVICES_PARAMETER_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_PARAMETER_SERVICE_H_

#include "proto/distopt/v1/parameter.grpc.pb.h"
#include "server/params/parameter_store.h"
#include "server/params/parameter_write.h"
#include "server/services/stream_limits.h"

namespace distopt {

// Largest chunk ReadParameter sends, and the default.
inline constexpr int64_t kMaxReadChunkBytes = int64_t{1} << 20;
// Largest value payload GetParameter returns inline; bigger ones stream.
inline constexpr int64_t kMaxInlineValueBytes = int64_t{3} << 20;

class ParameterServiceImpl final : public v1::ParameterService::Service {
 public:
  // Both must outlive the service.
  ParameterServiceImpl(ParameterStore* store, StreamLimits* streams)
      : store_(store), streams_(streams) {}

  grpc::Status CreateParameter(grpc::ServerContext* context,
                               const v1::CreateParameterRequest* request,
                               v1::ParameterInfo* response) override;
  grpc::Status GetParameter(grpc::ServerContext* context,
                            const v1::GetParameterRequest* request,
                            v1::GetParameterResponse* response) override;
  grpc::Status ReadParameter(
      grpc::ServerContext* context, const v1::ReadParameterRequest* request,
      grpc::ServerWriter<v1::ParameterChunk>* writer) override;
  grpc::Status WriteParameter(
      grpc::ServerContext* context,
      grpc::ServerReader<v1::WriteParameterRequest>* reader,
      v1::ParameterInfo* response) override;
  grpc::Status ListParameters(grpc::ServerContext* context,
                              const v1::ListParametersRequest* request,
                              v1::ListParametersResponse* response) override;
  grpc::Status DeleteParameter(grpc::ServerContext* context,
                               const v1::DeleteParameterRequest* request,
                               v1::DeleteParameterResponse* response) override;

 private:
  ParameterStore* const store_;
  StreamLimits* const streams_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_PARAMETER_SERVICE_H_
