#include "server/daemon/call_observer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/status.h"
#include "proto/distopt/v1/optimizer.pb.h"

namespace distopt {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The names of gRPC's status codes, as its documentation spells them.
absl::string_view CodeName(int code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  return code >= 0 && code < 17 ? kNames[code] : "UNKNOWN";
}

// A store lookup that finds nothing yet is the store's answer, not a
// refusal: the ranks poll it while they wait for each other (the
// rendezvous waits in slices of 200 ms), which would fill rank 0's log.
// It is still counted by code in the metrics.
bool IsStoreMiss(const CallObserverFactory::MethodMetrics& method, int code) {
  return method.service == "distopt.v1.GroupService" &&
         (method.method == "Get" || method.method == "Wait") &&
         (code == static_cast<int>(grpc::StatusCode::NOT_FOUND) ||
          code == static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED));
}

// Counts, times and (if refused) logs one call that ended with `code`.
void Record(CallObserverFactory& factory,
            CallObserverFactory::MethodMetrics& method, int code,
            absl::string_view message, double seconds,
            grpc::ServerContextBase* context) {
  if (metrics::Recording()) {
    metrics::Observe(*method.seconds, seconds);
    metrics::Add(factory.CallsEndedWith(method, code));
  }
  if (code == 0 || IsStoreMiss(method, code)) return;
  int64_t dropped = 0;
  if (!factory.refusal_log().Allow(absl::Now(), &dropped)) return;
  std::vector<log::Field> fields = {
      {"method", absl::StrCat(method.service, "/", method.method)},
      {"code", CodeName(code)},
      {"error", message},
      {"peer", context != nullptr ? context->peer() : ""}};
  if (dropped > 0) fields.emplace_back("refusals_not_logged", dropped);
  log::Warning("call refused", fields);
}

constexpr char kStepPath[] = "/distopt.v1.OptimizerService/Step";
constexpr char kStepStreamPath[] = "/distopt.v1.OptimizerService/StepStream";

class CallObserver : public grpc::experimental::Interceptor {
 public:
  // `stream_steps`: for a StepStream, the metrics of Step, which each step
  // it carries counts in (a trainer's steps are Step calls, whichever way
  // the client sends them); null for any other method.
  CallObserver(CallObserverFactory* factory,
               CallObserverFactory::MethodMetrics* method,
               CallObserverFactory::MethodMetrics* stream_steps,
               grpc::ServerContextBase* context)
      : factory_(factory),
        method_(method),
        stream_steps_(stream_steps),
        context_(context) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* call) override {
    if (call->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // Every service of the daemon is a generated protobuf one: the
      // message received is a protobuf message.
      const void* message = call->GetRecvMessage();
      if (message != nullptr) {
        received_ += static_cast<const google::protobuf::MessageLite*>(message)
                         ->ByteSizeLong();
        if (stream_steps_ != nullptr) step_began_ = absl::Now();
      }
    }
    if (call->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      // A step's outcome is read before gRPC serializes it (asking for
      // the serialized form would drop the message itself).
      const void* outcome =
          stream_steps_ != nullptr ? call->GetSendMessage() : nullptr;
      if (outcome != nullptr) {
        const auto& step = *static_cast<const v1::StepOutcome*>(outcome);
        sent_ += step.ByteSizeLong();
        Record(*factory_, *stream_steps_, step.code(), step.message(),
               absl::ToDoubleSeconds(absl::Now() - step_began_), context_);
      } else {
        const grpc::ByteBuffer* serialized = call->GetSerializedSendMessage();
        if (serialized != nullptr) sent_ += serialized->Length();
      }
    }
    if (call->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      Ended(call->GetSendStatus());
    }
    call->Proceed();
  }

 private:
  void Ended(const grpc::Status& status) {
    if (metrics::Recording()) {
      if (received_ > 0) {
        metrics::Add(*method_->received_bytes, static_cast<double>(received_));
      }
      if (sent_ > 0) {
        metrics::Add(*method_->sent_bytes, static_cast<double>(sent_));
      }
    }
    Record(*factory_, *method_, static_cast<int>(status.error_code()),
           status.error_message(), timer_.Seconds(), context_);
  }

  CallObserverFactory* const factory_;
  CallObserverFactory::MethodMetrics* const method_;
  CallObserverFactory::MethodMetrics* const stream_steps_;
  grpc::ServerContextBase* const context_;
  const metrics::Stopwatch timer_;
  // When the stream step being answered arrived (stream steps only).
  absl::Time step_began_;
  size_t received_ = 0;
  size_t sent_ = 0;
};

}  // namespace

CallObserverFactory::CallObserverFactory()
    : refusal_log_(kRefusalsPerSecond, kRefusalBurst) {}

grpc::experimental::Interceptor* CallObserverFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const std::string path = info->method();
  return new CallObserver(
      this, &MetricsOf(path),
      path == kStepStreamPath ? &MetricsOf(kStepPath) : nullptr,
      info->server_context());
}

CallObserverFactory::MethodMetrics& CallObserverFactory::MetricsOf(
    const std::string& path) {
  {
    absl::ReaderMutexLock lock(&mutex_);
    auto it = methods_.find(path);
    if (it != methods_.end()) return *it->second;
  }
  static auto& seconds = metrics::LatencyFamily(
      "distopt_rpc_duration_seconds",
      "Time from a call's arrival to its status (a stream's whole life)");
  static auto& received = metrics::CounterFamily(
      "distopt_rpc_received_bytes_total",
      "Bytes of the request messages the daemon received");
  static auto& sent =
      metrics::CounterFamily("distopt_rpc_sent_bytes_total",
                             "Bytes of the reply messages the daemon sent");
  auto method = std::make_unique<MethodMetrics>();
  // "/package.Service/Method"; anything else is kept whole as the method.
  const absl::string_view whole = path;
  const size_t slash = whole.rfind('/');
  if (!whole.empty() && whole[0] == '/' && slash != 0 &&
      slash != absl::string_view::npos) {
    method->service = std::string(whole.substr(1, slash - 1));
    method->method = std::string(whole.substr(slash + 1));
  } else {
    method->method = path;
  }
  const prometheus::Labels labels{{"service", method->service},
                                  {"method", method->method}};
  method->seconds = &metrics::LatencyWith(seconds, labels);
  method->received_bytes = &metrics::CounterWith(received, labels);
  method->sent_bytes = &metrics::CounterWith(sent, labels);
  absl::MutexLock lock(&mutex_);
  auto [it, inserted] = methods_.emplace(path, std::move(method));
  return *it->second;
}

prometheus::Counter& CallObserverFactory::CallsEndedWith(MethodMetrics& method,
                                                         int code) {
  if (code < 0 || code > 16) code = 2;  // UNKNOWN
  {
    absl::ReaderMutexLock lock(&mutex_);
    if (method.by_code[code] != nullptr) return *method.by_code[code];
  }
  static auto& calls = metrics::CounterFamily(
      "distopt_rpcs_total", "Calls served, by service, method and status code");
  prometheus::Counter& counter =
      metrics::CounterWith(calls, {{"service", method.service},
                                   {"method", method.method},
                                   {"code", std::string(CodeName(code))}});
  absl::MutexLock lock(&mutex_);
  method.by_code[code] = &counter;
  return counter;
}

}  // namespace distopt
