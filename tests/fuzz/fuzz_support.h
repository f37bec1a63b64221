// What the fuzz targets of tests/fuzz share with each other and with the
// seed corpus writer (write_seed_corpus.cc): the pieces of a daemon as
// worker_server.cc assembles them (in-process, no gRPC server), a small
// fixed model over them, and a reader that splits a fuzz input into parts.
//
// The model is the same in every target and in the seed writer, so that a
// state dict or checkpoint the writer saves loads in the targets.
#ifndef DISTOPT_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define DISTOPT_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/memory_budget.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/autograd/autograd_engine.h"
#include "server/autograd/context_table.h"
#include "server/autograd/op_registry.h"
#include "server/comm/communicator.h"
#include "server/comm/communicator_group.h"
#include "server/comm/group_membership.h"
#include "server/comm/key_value_store.h"
#include "server/dist_optim/optimizer_table.h"
#include "server/localsgd/local_sgd_runner.h"
#include "server/optim/registry.h"
#include "server/params/parameter_store.h"
#include "server/services/autograd_service.h"
#include "server/services/optimizer_service.h"
#include "server/services/parameter_service.h"
#include "server/services/stream_limits.h"
#include "server/zero/zero_runner.h"

namespace distopt {
namespace fuzz {

// Without a sanitizer (the g++ replay of `bazel test`) a decoder that
// tries to allocate without bound fails an allocation instead of taking
// the machine's memory: caps the address space once. libFuzzer builds
// keep their own limits (-rss_limit_mb, -malloc_limit_mb). Also silences
// protobuf's log of strings that are not UTF-8 (most mutated inputs).
void LimitMemoryOnce();

// With DISTOPT_FUZZ_VERBOSE set in the environment, prints `what` and
// `status` (to see how far the seeds get); nothing otherwise.
void Report(absl::string_view what, const absl::Status& status);
// The same for what a service method returned.
void Report(absl::string_view what, const grpc::Status& status);

// Aborts, printing `what` and `status`, unless `status` is OK: for the
// setup of a target, which must not fail, and for what the code under test
// promises to accept (failing, it is a finding).
void CheckOk(const absl::Status& status, absl::string_view what);

// Aborts, printing `what`, unless `actual` and `expected` are the same
// message (SameMessage): for state that a refused call must leave as it
// was, and for a saved state that must load back to itself.
void CheckSameMessage(const google::protobuf::Message& actual,
                      const google::protobuf::Message& expected,
                      absl::string_view what);

// The one Fixture of a target, kept from one input to the next: made on the
// first call, after LimitMemoryOnce, and set up by `set_up`, which aborts
// (CheckOk) when it fails; later calls return the same one and ignore
// `set_up`. Never destroyed, so that no daemon is torn down at the
// process's exit.
template <typename Fixture>
Fixture& TargetFixture(void (*set_up)(Fixture&)) {
  static Fixture* const fixture = [set_up] {
    LimitMemoryOnce();
    auto* made = new Fixture;
    set_up(*made);
    return made;
  }();
  return *fixture;
}

// Splits a fuzz input: bytes, little-endian integers, and length-prefixed
// parts. Reading past the end gives zeros and empty parts.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}
  explicit InputReader(absl::string_view bytes)
      : data_(bytes.data()), size_(bytes.size()) {}

  bool empty() const { return offset_ >= size_; }
  uint8_t Byte();
  uint16_t U16();
  // A part of U16() bytes (or what is left).
  absl::string_view Part();
  // Everything left.
  absl::string_view Rest();

 private:
  const char* data_;
  size_t size_;
  size_t offset_ = 0;
};

// Appends the part format InputReader::Part reads (a 16-bit length, then
// the bytes; at most 65535 of them).
void AppendPart(absl::string_view bytes, std::string* out);
void AppendByte(uint8_t byte, std::string* out);

// Parses `bytes` into `message`; false when they do not parse.
bool Parse(absl::string_view bytes, google::protobuf::Message* message);
// The same for a whole fuzz input.
bool Parse(const uint8_t* data, size_t size,
           google::protobuf::Message* message);
// The serialized bytes with maps in key order.
std::string DeterministicBytes(const google::protobuf::Message& message);
// Equal as messages: the same type and deterministic bytes (map order does
// not matter; NaN equals the same NaN).
bool SameMessage(const google::protobuf::Message& a,
                 const google::protobuf::Message& b);

// --- The model -------------------------------------------------------------

// The parameters every target creates first, in order (ids 1 to 5):
// fc.weight float32 [4, 3], fc.bias float32 [4], emb.weight float32 [6, 2],
// scale float16 [5], gate bfloat16 [2, 2].
std::vector<CreateParameterSpec> ModelParameters();
inline constexpr uint64_t kFcWeight = 1;
inline constexpr uint64_t kFcBias = 2;
inline constexpr uint64_t kEmbedding = 3;
inline constexpr uint64_t kHalfScale = 4;
inline constexpr uint64_t kBfloatGate = 5;
inline constexpr size_t kModelParameters = 5;

// One optimizer of the table: made in order, so the i-th has id i + 1.
struct TableOptimizerSpec {
  std::string kind;
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  std::vector<uint64_t> parameter_ids;
};
// One optimizer of every built-in kind, with hyperparameters that make all
// of its state buffers (momentum, amsgrad, centered...), over a few of the
// parameters each.
std::vector<TableOptimizerSpec> TableOptimizers();

// ZeRO and post-local SGD over the model: two groups,
// {fc.weight, fc.bias} and {emb.weight, scale, gate}.
ZeroSpec ModelZeroSpec();
LocalSgdSpec ModelLocalSgdSpec();

// --- Collectives without peers -------------------------------------------

// Rank `rank` of `size` ranks whose peers are this rank's mirror images:
// every peer passes what this rank passes, so each collective's result is
// computed here (an all-reduce sum is `size` times the input, a gather
// repeats it, a broadcast changes nothing). Lets a data-parallel optimizer
// run as one rank of a larger group, holding a share of the state.
class MirrorCommunicator : public Communicator {
 public:
  MirrorCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void SetTimeout(absl::Duration) override {}
  absl::Status AllReduce(absl::Span<float> values, ReduceOp op) override;
  absl::Status Broadcast(absl::Span<float>, int) override {
    return absl::OkStatus();
  }
  absl::Status AllGather(absl::Span<const float> input,
                         absl::Span<float> output) override;
  absl::Status ReduceScatter(absl::Span<const float> input,
                             absl::Span<float> output, ReduceOp op) override;
  absl::Status ReduceScatterBlocks(absl::Span<float> values,
                                   absl::Span<const size_t> counts,
                                   ReduceOp op) override;
  absl::Status AllGatherBlocks(absl::Span<char>,
                               absl::Span<const size_t>) override {
    return absl::OkStatus();
  }
  absl::Status AllGatherSegments(
      const std::vector<std::vector<absl::Span<char>>>&) override {
    return absl::OkStatus();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  absl::Status BroadcastBytes(absl::Span<char>, int) override {
    return absl::OkStatus();
  }
  absl::Status GatherBytes(absl::Span<const char> input,
                           absl::Span<char> output, int root) override;

 private:
  const int rank_;
  const int size_;
};

// A group of mirror ranks: every subgroup is another MirrorCommunicator.
class MirrorCommunicatorGroup : public CommunicatorGroup {
 public:
  MirrorCommunicatorGroup(int rank, int size) : global_(rank, size) {}
  Communicator& global() override { return global_; }
  absl::StatusOr<Communicator*> Subgroup(int size) override;
  void SetTimeout(absl::Duration) override {}

 private:
  MirrorCommunicator global_;
  std::map<int, std::unique_ptr<MirrorCommunicator>> subgroups_;
};

// --- A daemon's pieces ---------------------------------------------------

struct DaemonOptions {
  // The daemon's --max_tensor_bytes and --max_total_bytes.
  uint64_t max_tensor_bytes = uint64_t{4} << 20;
  uint64_t max_total_bytes = uint64_t{64} << 20;
  std::string checkpoint_dir;
};

// The objects WorkerServer holds, made the same way (worker_server.cc), in
// the same order; services are called directly, with a default
// grpc::ServerContext.
class Daemon {
 public:
  explicit Daemon(const DaemonOptions& options = {});
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Creates the model's parameters (ids 1 to 5).
  absl::Status CreateModel();
  // Creates TableOptimizers() in the optimizer table (ids 1, 2, ...).
  absl::Status CreateTableOptimizers();
  // Joins a data-parallel group of one rank (this daemon), as a daemon
  // with --world_size=1 would if it started a group: gloo over loopback.
  absl::Status JoinGroupOfOne();
  // Pushes a gradient for every model parameter into context `context_id`
  // (values from `seed`), as a trainer's backward would.
  absl::Status PushModelGradients(uint64_t context_id, int seed);
  // CreateModel, then JoinGroupOfOne: what ZeRO and post-local SGD need.
  absl::Status CreateModelInGroupOfOne();
  // Creates ZeRO (ModelZeroSpec) or post-local SGD (ModelLocalSgdSpec) over
  // the model, which StepEverything then steps too. After JoinGroupOfOne.
  absl::Status CreateZero();
  absl::Status CreateLocalSgd();
  // One step of every table optimizer (and of ZeRO and post-local SGD when
  // made) with the gradients of a fresh context.
  absl::Status StepEverything(uint64_t context_id, int seed);
  // StepEverything(1, 1), then (2, 2) up to (steps, steps): state for the
  // optimizers to save and load.
  absl::Status StepEverythingTimes(int steps);

  MemoryBudget budget;
  ParameterStore parameters;
  std::unique_ptr<OptimizerRegistry> kinds;
  ContextTable contexts;
  OpRegistry ops;
  AutogradEngine autograd;
  KeyValueStore group_store;
  std::unique_ptr<GroupMembership> membership;
  std::atomic<GroupMembership*> membership_view{nullptr};
  OptimizerTable optimizers;
  StreamLimits streams;
  ParameterServiceImpl parameter_service;
  AutogradServiceImpl autograd_service;
  ZeroRunner zero;
  LocalSgdRunner local_sgd;
  OptimizerServiceImpl optimizer_service;
  bool zero_made = false;
  bool local_sgd_made = false;
};

// A daemon with the model and nothing else, kept from one input to the next
// (TargetFixture): for the targets whose inputs only call its services.
Daemon& ModelDaemon();

// --- autograd_request_fuzzer's calls ----------------------------------------

// A method of AutogradServiceImpl, called in-process.
template <typename Request, typename Response>
using AutogradMethod = grpc::Status (AutogradServiceImpl::*)(
    grpc::ServerContext*, const Request*, Response*);

// Calls `method` of the daemon's AutogradServiceImpl with `request`, as the
// server would (a default grpc::ServerContext); the response is dropped.
template <typename Request, typename Response>
grpc::Status CallAutograd(Daemon& daemon,
                          AutogradMethod<Request, Response> method,
                          const Request& request) {
  grpc::ServerContext context;
  Response response;
  return (daemon.autograd_service.*method)(&context, &request, &response);
}

// Calls `call(method)` with the AutogradServiceImpl method that a method
// byte of an autograd_request_fuzzer input names (modulo 6): Forward,
// Backward, AccumulateGradients, GetGradients, ReleaseContext,
// ListContexts. The target and the seed writer both pick methods here, so
// that they number them alike.
template <typename Call>
void WithAutogradMethod(uint8_t method_byte, Call&& call) {
  switch (method_byte % 6) {
    case 0:
      call(&AutogradServiceImpl::Forward);
      break;
    case 1:
      call(&AutogradServiceImpl::Backward);
      break;
    case 2:
      call(&AutogradServiceImpl::AccumulateGradients);
      break;
    case 3:
      call(&AutogradServiceImpl::GetGradients);
      break;
    case 4:
      call(&AutogradServiceImpl::ReleaseContext);
      break;
    default:
      call(&AutogradServiceImpl::ListContexts);
      break;
  }
}

// --- Checkpoint folders as one input ---------------------------------------

// The files of a checkpoint directory a fuzz input describes: an input is
// a flags byte, then parts of [a file selector byte][the file's bytes].
// The selector picks from CheckpointFileNames() (modulo its size).
const std::vector<std::string>& CheckpointFileNames();
// Flags of the first byte.
inline constexpr uint8_t kFixIndexEnvelope = 1;  // Recompute the index crc.
inline constexpr uint8_t kFixIndexContents = 2;  // Recompute the values'
                                                 // and sections' sizes and
                                                 // checksums in the index.

}  // namespace fuzz
}  // namespace distopt

#endif  // DISTOPT_TESTS_FUZZ_FUZZ_SUPPORT_H_
