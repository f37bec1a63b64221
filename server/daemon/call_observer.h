// Watches every call the daemon serves, at the edge: /metrics counts calls
// by service, method and status code, times them (a histogram by service
// and method; a stream's time is its lifetime) and counts the bytes of the
// messages received and sent (each step a StepStream carries is counted,
// timed and logged as a Step call too: a trainer's steps are Step calls,
// whichever way its client sends them); a refused call (any code but OK)
// is logged with its code and message (which names the field), at most
// kRefusalsPerSecond a second on average, so that a client that sends bad
// calls on purpose cannot flood the log: the next line it lets through
// says how many it left out.
#ifndef DISTOPT_SERVER_DAEMON_CALL_OBSERVER_H_
#define DISTOPT_SERVER_DAEMON_CALL_OBSERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

namespace distopt {

class CallObserverFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  static constexpr double kRefusalsPerSecond = 5;
  static constexpr double kRefusalBurst = 20;

  CallObserverFactory();

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // The metrics of one method ("/distopt.v1.ParameterService/Create...").
  struct MethodMetrics {
    std::string service;
    std::string method;
    prometheus::Histogram* seconds = nullptr;
    prometheus::Counter* received_bytes = nullptr;
    prometheus::Counter* sent_bytes = nullptr;
    // By status code (0 to 16), made at the first call that ends so.
    prometheus::Counter* by_code[17] = {};
  };
  MethodMetrics& MetricsOf(const std::string& path) ABSL_LOCKS_EXCLUDED(mutex_);
  prometheus::Counter& CallsEndedWith(MethodMetrics& method, int code)
      ABSL_LOCKS_EXCLUDED(mutex_);
  log::RateLimiter& refusal_log() { return refusal_log_; }

 private:
  absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::unique_ptr<MethodMetrics>> methods_
      ABSL_GUARDED_BY(mutex_);
  log::RateLimiter refusal_log_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DAEMON_CALL_OBSERVER_H_
