#include "server/daemon/worker_server.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cuda_ops.h"
#include "common/group_secret.h"
#include "common/metrics.h"
#include "common/version.h"
#include "common/wire_limits.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/server_builder.h"
#include "server/comm/etcd_rendezvous_store.h"
#include "server/daemon/call_observer.h"
#include "server/daemon/flag_files.h"
#include "server/daemon/server_credentials.h"
#include "server/optim/plugin_loader.h"
#include "server/params/checkpoint.h"

namespace distopt {
namespace {

using grpc::health::v1::HealthCheckResponse;

// The services health reports on, besides the server as a whole ("").
constexpr const char* kServedServices[] = {
    "distopt.v1.AutogradService",   "distopt.v1.GroupService",
    "distopt.v1.OptimizerService",  "distopt.v1.ParameterService",
    "distopt.v1.LocalSgdService",   "distopt.v1.ZeroService",
    "distopt.v1.CheckpointService",
};
// The services that need the group's collectives.
constexpr const char* kGroupServices[] = {
    "distopt.v1.GroupService",
    "distopt.v1.LocalSgdService",
    "distopt.v1.ZeroService",
};

// `path` made absolute (as a group checkpoint's manifest names it for the
// other ranks); empty stays empty.
std::string AbsolutePath(const std::string& path) {
  if (path.empty()) return path;
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

}  // namespace

WorkerServer::WorkerServer(const WorkerOptions& options,
                           std::shared_ptr<Backend> backend)
    : options_(options),
      budget_(options.max_tensor_bytes, options.max_total_bytes),
      parameters_(std::move(backend), &budget_),
      optimizer_kinds_(OptimizerRegistry::WithBuiltins()),
      contexts_(options.context_ttl, &budget_),
      autograd_(&contexts_, &parameters_, &ops_),
      group_store_(&budget_),
      optimizers_(&parameters_, &contexts_, optimizer_kinds_.get()),
      streams_(options.streams),
      parameter_service_(&parameters_, &streams_),
      autograd_service_(&contexts_, &autograd_, &streams_, &budget_),
      group_service_({options.rank, options.world_size, options.peers,
                      options.rendezvous, options.group_secret},
                     &group_store_, &membership_view_, &streams_),
      zero_({&parameters_, &contexts_, optimizer_kinds_.get(),
             &membership_view_, AbsolutePath(options.checkpoint_dir)}),
      zero_service_(&zero_, &streams_, &budget_),
      local_sgd_({&parameters_, &contexts_, optimizer_kinds_.get(),
                  &membership_view_, AbsolutePath(options.checkpoint_dir)}),
      local_sgd_service_(&local_sgd_, &streams_, &budget_),
      optimizer_service_(optimizer_kinds_.get(), &optimizers_, &streams_,
                         &budget_),
      checkpointer_(
          options.checkpoint_dir.empty()
              ? nullptr
              : std::make_unique<Checkpointer>(
                    CheckpointSchedule{options.checkpoint_dir,
                                       options.checkpoint_keep,
                                       options.checkpoint_interval,
                                       options.checkpoint_every_steps},
                    &parameters_, &optimizers_, &zero_, &local_sgd_,
                    [this]() -> absl::Status {
                      absl::Status damage = zero_.Damage();
                      return damage.ok() ? local_sgd_.Damage() : damage;
                    })),
      checkpoint_service_(checkpointer_.get()),
      health_service_(&health_, &streams_),
      gauges_(std::make_shared<WorkerGauges>(
          GaugeSources{options.device.ToString(), options.rank,
                       options.world_size, &parameters_, &budget_, &contexts_,
                       &optimizers_, &streams_, &membership_view_})),
      status_service_({metrics::Registry(), gauges_}) {}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerOptions& options) {
  absl::Status status = ValidateWorkerOptions(options);
  if (!status.ok()) return status;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(options.device);
  if (!backend.ok()) return backend.status();

  WorkerOptions resolved = options;
  if (!options.group_secret_file.empty()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(
        options.group_secret_file, "--group_secret_file", kMinGroupSecretBytes);
    if (!secret.ok()) return secret.status();
    resolved.group_secret = *std::move(secret);
  }
  std::unique_ptr<WorkerServer> worker(
      new WorkerServer(resolved, *std::move(backend)));
  for (const std::string& path : options.optimizer_plugins) {
    absl::StatusOr<PluginLoadResult> loaded =
        LoadOptimizerPlugin(path, *worker->optimizer_kinds_);
    if (!loaded.ok()) return loaded.status();
    for (const std::string& name : loaded->added) {
      worker->plugin_kinds_.push_back(name);
    }
    for (const std::string& name : loaded->rejected) {
      worker->rejected_plugin_kinds_.push_back(name);
    }
  }
  if (!options.checkpoint_dir.empty()) {
    absl::Status usable = CheckCheckpointDir(options.checkpoint_dir);
    if (!usable.ok()) return usable;
    absl::StatusOr<RestoredCheckpoint> restored =
        worker->checkpointer_->Restore();
    if (!restored.ok()) return restored.status();
    worker->restored_parameters_ = restored->parameters;
    worker->restored_folder_ = restored->folder;
    // Before serving: the step observer is set before the first step.
    worker->checkpointer_->Start();
  }
  worker->health_.Set("", HealthCheckResponse::NOT_SERVING);
  for (const char* service : kServedServices) {
    worker->health_.Set(service, HealthCheckResponse::NOT_SERVING);
  }

  if (!options.metrics_listen.empty()) {
    absl::Status serving = worker->ServeMetrics();
    if (!serving.ok()) return serving;
  }

  // Lets grpcurl list and describe every service without .proto files.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Two daemons must never share a port: without this, gRPC binds with
  // SO_REUSEPORT and a second daemon would silently split the traffic.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Threads in all: past the quota gRPC refuses a call with
  // RESOURCE_EXHAUSTED instead of starting a thread for it.
  grpc::ResourceQuota quota("distopt_worker");
  quota.SetMaxThreads(ThreadLimit(options));
  builder.SetResourceQuota(quota);
  // One connection cannot open streams without bound either.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             4 * options.streams.per_connection);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddListeningPort(options.listen, *credentials, &worker->port_);
  builder.RegisterService(&worker->parameter_service_);
  builder.RegisterService(&worker->optimizer_service_);
  builder.RegisterService(&worker->autograd_service_);
  builder.RegisterService(&worker->group_service_);
  builder.RegisterService(&worker->zero_service_);
  builder.RegisterService(&worker->local_sgd_service_);
  builder.RegisterService(&worker->checkpoint_service_);
  builder.RegisterService(&worker->health_service_);
  builder.RegisterService(&worker->status_service_);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      observers;
  observers.push_back(std::make_unique<CallObserverFactory>());
  builder.experimental().SetInterceptorCreators(std::move(observers));
  worker->server_ = builder.BuildAndStart();
  if (worker->server_ == nullptr || worker->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "--listen=", options.listen,
        ": cannot listen there (address in use, or not an address of this "
        "machine)"));
  }
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  worker->address_ = absl::StrCat(host, ":", worker->port_);
  worker->status_service_.Describe(worker->Description());
  // Serving from here on; the group's services follow the group's state.
  worker->health_.SetAll(HealthCheckResponse::SERVING);
  if (options.world_size > 1) {
    GroupSettings group;
    group.rank = options.rank;
    group.world_size = options.world_size;
    if (IsEtcdUrl(options.rendezvous)) {
      group.etcd_rendezvous = options.rendezvous;
      group.rank_hold_ttl = options.rank_hold_ttl;
    } else if (options.rank != 0) {
      group.rank0_address =
          options.rendezvous.empty() ? options.peers[0] : options.rendezvous;
    }
    // Peers connect to this address: a wildcard listen address is no use
    // to them, the machine's name is.
    group.hostname = host;
    if (host == "0.0.0.0" || host == "[::]") {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      group.hostname = name;
    }
    group.timeout = options.group_timeout;
    group.device = options.device;
    group.daemon_address = absl::StrCat(group.hostname, ":", worker->port_);
    group.secret = resolved.group_secret;
    // While the group's collectives are broken, its services say so.
    HealthState* health = &worker->health_;
    group.on_ready_changed = [health](bool ready) {
      for (const char* service : kGroupServices) {
        health->Set(service, ready ? HealthCheckResponse::SERVING
                                   : HealthCheckResponse::NOT_SERVING);
      }
    };
    worker->membership_ =
        std::make_unique<GroupMembership>(group, &worker->group_store_);
    worker->membership_view_ = worker->membership_.get();
  }
  WorkerServer* self = worker.get();
  worker->context_collector_ = std::thread([self] {
    const absl::Duration period =
        std::min(absl::Seconds(10), self->contexts_.time_to_live() / 4);
    while (!self->stopping_.WaitForNotificationWithTimeout(period)) {
      self->contexts_.CollectIdle(absl::Now());
    }
  });
  return worker;
}

absl::Status WorkerServer::ServeMetrics() {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options_.metrics_listen, "--metrics_listen",
                               {metrics::Registry(), gauges_});
  if (!server.ok()) return server.status();
  metrics_server_ = *std::move(server);
  metrics_address_ = metrics_server_->address();
  return absl::OkStatus();
}

v1::WorkerStatus WorkerServer::Description() const {
  v1::WorkerStatus status;
  status.set_version(kVersion);
  status.set_device(options_.device.ToString());
  status.set_cuda_built(cuda_ops::BuiltWithCuda());
  status.set_pid(getpid());
  status.set_address(address_);
  status.set_metrics_address(metrics_address_);
  status.set_rank(options_.rank);
  status.set_world_size(options_.world_size);
  status.set_checkpoint_dir(AbsolutePath(options_.checkpoint_dir));
  return status;
}

absl::Status WorkerServer::Shutdown() {
  // Never started serving, or already stopped.
  if (shut_down_ || server_ == nullptr) return absl::OkStatus();
  shut_down_ = true;
  health_.SetAll(HealthCheckResponse::NOT_SERVING);
  // Watch streams send NOT_SERVING, then end so that shutdown can finish.
  health_.Close();
  // Joining ends first, while this daemon still serves the group's store
  // (on rank 0): a rendezvous half done would otherwise wait for peers that
  // can no longer reach the store, up to the group timeout.
  if (membership_ != nullptr) membership_->StopJoining();
  // Calls waiting on the store end now, not at their timeouts.
  group_store_.Close();
  // Streams idle between requests (StepStream) end now; the ones serving a
  // request reply first.
  streams_.Close();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.shutdown_grace));
  server_->Wait();
  State running = State::kRunning;
  if (!state_.compare_exchange_strong(running, State::kCallsEnded)) {
    // AbandonCalls won: the caller exits now, without a checkpoint.
    return absl::AbortedError("the calls still running were abandoned");
  }
  calls_ended_.Notify();
  membership_view_ = nullptr;
  stopping_.Notify();
  context_collector_.join();
  absl::Status saved = SaveAtShutdown();
  // Only now: the data-parallel optimizers that the save snapshots hold the
  // group's communicators (AddressSanitizer caught the save reading a
  // communicator freed here first). Gives up a rendezvous still waiting.
  membership_.reset();
  return saved;
}

absl::Status WorkerServer::SaveAtShutdown() {
  if (checkpointer_ == nullptr) return absl::OkStatus();
  // No call is in flight any more, and no periodic save after this: the
  // values are final.
  checkpointer_->Stop();
  absl::StatusOr<SaveReport> saved = checkpointer_->SaveAtShutdown();
  if (!saved.ok()) return saved.status();
  saved_parameters_ = saved->saved.parameters;
  return absl::OkStatus();
}

WorkerServer::~WorkerServer() { Shutdown().IgnoreError(); }

}  // namespace distopt
