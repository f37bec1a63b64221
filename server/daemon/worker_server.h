// WorkerServer: the daemon's gRPC server with every service, reflection and
// health, built from WorkerOptions. main.cc adds flags and signals around
// it; tests may run it in-process.
//
// Lifecycle: Start() binds and serves (health SERVING); Shutdown() flips
// health to NOT_SERVING, ends the streams idle between requests (see
// StreamLimits::Close), lets in-flight calls finish within the grace period,
// cancels what is left, and returns when the server has stopped. Shutdown()
// may be called from any thread, once. A call may run on past the grace (a
// step waiting in a collective for a rank that never comes ends only at the
// collective's own timeout, and gloo's waits cannot be cut short), and
// Shutdown waits for it: CallsEndedWithin lets the caller decide not to.
#ifndef DISTOPT_SERVER_DAEMON_WORKER_SERVER_H_
#define DISTOPT_SERVER_DAEMON_WORKER_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/memory_budget.h"
#include "grpcpp/server.h"
#include "server/autograd/autograd_engine.h"
#include "server/autograd/context_table.h"
#include "server/autograd/op_registry.h"
#include "server/comm/group_membership.h"
#include "server/comm/key_value_store.h"
#include "server/daemon/checkpointer.h"
#include "server/daemon/metrics_http_server.h"
#include "server/daemon/worker_gauges.h"
#include "server/daemon/worker_options.h"
#include "server/dist_optim/optimizer_table.h"
#include "server/localsgd/local_sgd_runner.h"
#include "server/optim/registry.h"
#include "server/params/parameter_store.h"
#include "server/services/autograd_service.h"
#include "server/services/checkpoint_service.h"
#include "server/services/group_service.h"
#include "server/services/health_service.h"
#include "server/services/local_sgd_service.h"
#include "server/services/optimizer_service.h"
#include "server/services/parameter_service.h"
#include "server/services/status_service.h"
#include "server/services/zero_service.h"
#include "server/zero/zero_runner.h"

namespace distopt {

class WorkerServer {
 public:
  // INVALID_ARGUMENT for bad options (a --checkpoint_dir another daemon
  // holds too), FAILED_PRECONDITION when the device is unavailable, an
  // error with the kCheckpointNotRestored payload (checkpointer.h; DATA_LOSS
  // when damaged, RESOURCE_EXHAUSTED when it does not fit, ...) when the
  // checkpoint cannot be restored, UNAVAILABLE when the address cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(
      const WorkerOptions& options);
  ~WorkerServer();

  // The bound address, with the actual port ("127.0.0.1:41234").
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // Where /metrics is served ("127.0.0.1:9400"); empty without
  // --metrics_listen.
  const std::string& metrics_address() const { return metrics_address_; }
  const WorkerOptions& options() const { return options_; }

  // Returns the error of saving the checkpoint, if any; later calls return
  // OK and do nothing.
  absl::Status Shutdown();

  // Once Shutdown has begun: true when every call has ended (and the
  // server stopped) within `timeout`, before any checkpoint is saved.
  bool CallsEndedWithin(absl::Duration timeout) {
    return calls_ended_.WaitForNotificationWithTimeout(timeout);
  }
  // Gives up on the calls still running, for a caller about to exit
  // without them: true unless they ended first. Exactly one of this and
  // Shutdown's save wins, so the daemon never exits in the middle of
  // saving a checkpoint.
  bool AbandonCalls() {
    State running = State::kRunning;
    return state_.compare_exchange_strong(running, State::kAbandoned);
  }

  // Optimizer kinds the plugins added, and names they tried to take.
  const std::vector<std::string>& plugin_kinds() const { return plugin_kinds_; }
  const std::vector<std::string>& rejected_plugin_kinds() const {
    return rejected_plugin_kinds_;
  }

  // Parameters restored from --checkpoint_dir at start-up.
  size_t restored_parameters() const { return restored_parameters_; }
  // The checkpoint folder they came from; empty when none was restored.
  const std::string& restored_folder() const { return restored_folder_; }
  // Empty, or why the previous checkpoint was restored instead of the
  // newest.
  std::string checkpoint_fell_back() const {
    return checkpointer_ == nullptr ? "" : checkpointer_->restore_fell_back();
  }
  // Parameters saved to --checkpoint_dir by Shutdown().
  size_t saved_parameters() const { return saved_parameters_; }

 private:
  // Serves /metrics on --metrics_listen; UNAVAILABLE if it cannot.
  absl::Status ServeMetrics();
  // What StatusService says the daemon is.
  v1::WorkerStatus Description() const;
  // Shutdown's last save to --checkpoint_dir, if the daemon has one.
  absl::Status SaveAtShutdown();

  WorkerServer(const WorkerOptions& options, std::shared_ptr<Backend> backend);

  const WorkerOptions options_;
  MemoryBudget budget_;
  ParameterStore parameters_;
  std::unique_ptr<OptimizerRegistry> optimizer_kinds_;
  ContextTable contexts_;
  OpRegistry ops_;
  AutogradEngine autograd_;
  KeyValueStore group_store_;
  // Joins the data-parallel group once serving (world size > 1).
  std::unique_ptr<GroupMembership> membership_;
  std::atomic<GroupMembership*> membership_view_{nullptr};
  OptimizerTable optimizers_;
  HealthState health_;
  // Bounds the calls clients keep open; the services below use it.
  StreamLimits streams_;
  ParameterServiceImpl parameter_service_;
  AutogradServiceImpl autograd_service_;
  GroupServiceImpl group_service_;
  ZeroRunner zero_;
  ZeroServiceImpl zero_service_;
  LocalSgdRunner local_sgd_;
  LocalSgdServiceImpl local_sgd_service_;
  OptimizerServiceImpl optimizer_service_;
  // Null without --checkpoint_dir.
  std::unique_ptr<Checkpointer> checkpointer_;
  CheckpointServiceImpl checkpoint_service_;
  // Notified by Shutdown once no call runs any more.
  absl::Notification calls_ended_;
  enum class State { kRunning, kCallsEnded, kAbandoned };
  std::atomic<State> state_{State::kRunning};
  // Collects idle contexts until stopping_ is notified.
  absl::Notification stopping_;
  std::thread context_collector_;
  HealthServiceImpl health_service_;
  // Read at scrape time, by /metrics and StatusService.
  std::shared_ptr<WorkerGauges> gauges_;
  StatusServiceImpl status_service_;
  // Serves /metrics; null without --metrics_listen.
  std::unique_ptr<MetricsHttpServer> metrics_server_;
  std::string metrics_address_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  bool shut_down_ = false;
  std::vector<std::string> plugin_kinds_;
  std::vector<std::string> rejected_plugin_kinds_;
  size_t restored_parameters_ = 0;
  std::string restored_folder_;
  size_t saved_parameters_ = 0;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DAEMON_WORKER_SERVER_H_
