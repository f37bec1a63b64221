#include "tests/fuzz/fuzz_support.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cpu_backend.h"
#include "common/grpc_status.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/logging.h"

namespace distopt {
namespace fuzz {
namespace {

// A sanitizer reserves terabytes of address space for its shadow memory:
// under one, an address-space limit would fail its first allocation.
#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || \
    defined(ABSL_HAVE_THREAD_SANITIZER) || defined(ABSL_HAVE_MEMORY_SANITIZER)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Enough for the daemon's threads (gRPC, gloo, OpenBLAS, the thread pool)
// and the largest input a target accepts, far below the machine's memory.
constexpr rlim_t kAddressSpaceBytes = rlim_t{6} << 30;

}  // namespace

void LimitMemoryOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*,
                                       int, const std::string&) {});
    if (kSanitized) return;
    rlimit limit;
    if (getrlimit(RLIMIT_AS, &limit) != 0) return;
    if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur <= kAddressSpaceBytes)
      return;
    limit.rlim_cur = kAddressSpaceBytes;
    setrlimit(RLIMIT_AS, &limit);
  });
}

void Report(absl::string_view what, const absl::Status& status) {
  static const bool verbose = std::getenv("DISTOPT_FUZZ_VERBOSE") != nullptr;
  if (!verbose) return;
  std::fprintf(stderr, "  %s: %s\n", std::string(what).c_str(),
               status.ToString().c_str());
}

void Report(absl::string_view what, const grpc::Status& status) {
  Report(what, FromGrpcStatus(status));
}

void CheckOk(const absl::Status& status, absl::string_view what) {
  if (status.ok()) return;
  std::fprintf(stderr, "fuzz setup: %s: %s\n", std::string(what).c_str(),
               status.ToString().c_str());
  std::abort();
}

void CheckSameMessage(const google::protobuf::Message& actual,
                      const google::protobuf::Message& expected,
                      absl::string_view what) {
  if (SameMessage(actual, expected)) return;
  std::fprintf(stderr, "%s\n", std::string(what).c_str());
  std::abort();
}

uint8_t InputReader::Byte() {
  if (offset_ >= size_) return 0;
  return static_cast<uint8_t>(data_[offset_++]);
}

uint16_t InputReader::U16() {
  const uint16_t low = Byte();
  const uint16_t high = Byte();
  return static_cast<uint16_t>(low | (high << 8));
}

absl::string_view InputReader::Part() {
  const size_t wanted = U16();
  const size_t left = offset_ < size_ ? size_ - offset_ : 0;
  const size_t length = std::min(wanted, left);
  absl::string_view part(data_ + offset_, length);
  offset_ += length;
  return part;
}

absl::string_view InputReader::Rest() {
  if (offset_ >= size_) return {};
  absl::string_view rest(data_ + offset_, size_ - offset_);
  offset_ = size_;
  return rest;
}

void AppendPart(absl::string_view bytes, std::string* out) {
  const size_t length = std::min<size_t>(bytes.size(), 0xffff);
  out->push_back(static_cast<char>(length & 0xff));
  out->push_back(static_cast<char>(length >> 8));
  out->append(bytes.data(), length);
}

void AppendByte(uint8_t byte, std::string* out) {
  out->push_back(static_cast<char>(byte));
}

bool Parse(absl::string_view bytes, google::protobuf::Message* message) {
  return message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

bool Parse(const uint8_t* data, size_t size,
           google::protobuf::Message* message) {
  return Parse(absl::string_view(reinterpret_cast<const char*>(data), size),
               message);
}

std::string DeterministicBytes(const google::protobuf::Message& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

bool SameMessage(const google::protobuf::Message& a,
                 const google::protobuf::Message& b) {
  return a.GetDescriptor() == b.GetDescriptor() &&
         DeterministicBytes(a) == DeterministicBytes(b);
}

// --- The model -------------------------------------------------------------

std::vector<CreateParameterSpec> ModelParameters() {
  std::vector<CreateParameterSpec> specs(kModelParameters);
  specs[0] = {"fc.weight", DType::kFloat32, {4, 3}, UniformInit{-0.5, 0.5, 1}};
  specs[1] = {"fc.bias", DType::kFloat32, {4}, ConstantInit{0.125}};
  specs[2] = {"emb.weight", DType::kFloat32, {6, 2}, NormalInit{0, 1, 2}};
  specs[3] = {"scale", DType::kFloat16, {5}, ConstantInit{0.5}};
  specs[4] = {"gate", DType::kBFloat16, {2, 2}, UniformInit{-1, 1, 3}};
  return specs;
}

std::vector<TableOptimizerSpec> TableOptimizers() {
  using Pair = std::pair<double, double>;
  return {
      {"sgd",
       {{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", true}},
       {kFcWeight, kFcBias}},
      {"adam",
       {{"lr", 0.01}, {"amsgrad", true}, {"betas", Pair{0.8, 0.9}}},
       {kFcWeight, kEmbedding, kHalfScale}},
      {"adamw", {{"weight_decay", 0.1}}, {kBfloatGate, kFcBias}},
      {"adagrad", {{"initial_accumulator_value", 0.5}}, {kEmbedding}},
      {"adadelta", {{"rho", 0.8}}, {kFcWeight, kHalfScale}},
      {"adamax", {}, {kFcBias, kBfloatGate}},
      {"rmsprop",
       {{"centered", true}, {"momentum", 0.5}},
       {kFcWeight, kEmbedding, kBfloatGate}},
      {"rprop", {{"etas", Pair{0.4, 1.3}}}, {kHalfScale, kFcWeight}},
  };
}

namespace {

std::vector<NamedGroupSpec> ModelGroups() {
  NamedGroupSpec first;
  first.hyperparameters = {{"lr", 0.05}};
  first.parameter_names = {"fc.weight", "fc.bias"};
  NamedGroupSpec second;
  second.hyperparameters = {{"lr", 0.02}, {"weight_decay", 0.01}};
  second.parameter_names = {"emb.weight", "scale", "gate"};
  return {first, second};
}

}  // namespace

ZeroSpec ModelZeroSpec() {
  ZeroSpec spec;
  spec.kind = "adam";
  spec.groups = ModelGroups();
  spec.timeout = absl::Seconds(20);
  return spec;
}

LocalSgdSpec ModelLocalSgdSpec() {
  LocalSgdSpec spec;
  spec.kind = "sgd";
  spec.groups = ModelGroups();
  spec.groups[0].hyperparameters["momentum"] = 0.9;
  spec.groups[1].hyperparameters["momentum"] = 0.5;
  spec.options.averager.kind = AveragerSpec::Kind::kPeriodic;
  spec.options.averager.periods = {{3, 1}};
  spec.options.averager.warmup_steps = 2;
  spec.options.start_localsgd_iter = 2;
  spec.options.subgroup_size = 1;
  spec.timeout = absl::Seconds(20);
  return spec;
}

// --- Collectives without peers -------------------------------------------

absl::Status MirrorCommunicator::AllReduce(absl::Span<float> values,
                                           ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (float& v : values) v *= static_cast<float>(size_);
  }
  return absl::OkStatus();
}

absl::Status MirrorCommunicator::AllGather(absl::Span<const float> input,
                                           absl::Span<float> output) {
  if (output.size() != input.size() * size_) {
    return absl::InvalidArgumentError("AllGather: output size");
  }
  for (int r = 0; r < size_; ++r) {
    std::copy(input.begin(), input.end(), output.begin() + r * input.size());
  }
  return absl::OkStatus();
}

absl::Status MirrorCommunicator::ReduceScatter(absl::Span<const float> input,
                                               absl::Span<float> output,
                                               ReduceOp op) {
  if (input.size() != output.size() * size_) {
    return absl::InvalidArgumentError("ReduceScatter: input size");
  }
  const float scale = op == ReduceOp::kSum ? static_cast<float>(size_) : 1.0f;
  for (size_t i = 0; i < output.size(); ++i) {
    output[i] = input[rank_ * output.size() + i] * scale;
  }
  return absl::OkStatus();
}

absl::Status MirrorCommunicator::ReduceScatterBlocks(
    absl::Span<float> values, absl::Span<const size_t> counts, ReduceOp op) {
  if (op != ReduceOp::kSum) return absl::OkStatus();
  size_t offset = 0;
  for (int r = 0; r < rank_ && r < static_cast<int>(counts.size()); ++r) {
    offset += counts[r];
  }
  if (rank_ >= static_cast<int>(counts.size()) ||
      offset + counts[rank_] > values.size()) {
    return absl::InvalidArgumentError("ReduceScatterBlocks: counts");
  }
  for (size_t i = 0; i < counts[rank_]; ++i) {
    values[offset + i] *= static_cast<float>(size_);
  }
  return absl::OkStatus();
}

absl::Status MirrorCommunicator::GatherBytes(absl::Span<const char> input,
                                             absl::Span<char> output,
                                             int root) {
  if (rank_ != root) return absl::OkStatus();
  if (output.size() != input.size() * size_) {
    return absl::InvalidArgumentError("GatherBytes: output size");
  }
  for (int r = 0; r < size_; ++r) {
    std::copy(input.begin(), input.end(), output.begin() + r * input.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<Communicator*> MirrorCommunicatorGroup::Subgroup(int size) {
  if (size == global_.size()) return &global_;
  if (size < 1 || global_.size() % size != 0) {
    return absl::InvalidArgumentError("Subgroup: size");
  }
  std::unique_ptr<MirrorCommunicator>& subgroup = subgroups_[size];
  if (subgroup == nullptr) {
    subgroup =
        std::make_unique<MirrorCommunicator>(global_.rank() % size, size);
  }
  return subgroup.get();
}

// --- A daemon's pieces ---------------------------------------------------

Daemon::Daemon(const DaemonOptions& options)
    : budget(options.max_tensor_bytes, options.max_total_bytes),
      parameters(CpuBackend(), &budget),
      kinds(OptimizerRegistry::WithBuiltins()),
      contexts(absl::Minutes(30), &budget),
      autograd(&contexts, &parameters, &ops),
      group_store(&budget),
      optimizers(&parameters, &contexts, kinds.get()),
      streams(StreamLimitOptions{}),
      parameter_service(&parameters, &streams),
      autograd_service(&contexts, &autograd, &streams, &budget),
      zero({&parameters, &contexts, kinds.get(), &membership_view,
            options.checkpoint_dir}),
      local_sgd({&parameters, &contexts, kinds.get(), &membership_view,
                 options.checkpoint_dir}),
      optimizer_service(kinds.get(), &optimizers, &streams, &budget) {}

Daemon::~Daemon() {
  if (membership != nullptr) membership->StopJoining();
  group_store.Close();
  streams.Close();
}

absl::Status Daemon::CreateModel() {
  for (const CreateParameterSpec& spec : ModelParameters()) {
    absl::StatusOr<ParameterInfo> info = parameters.Create(spec);
    if (!info.ok()) return info.status();
  }
  return absl::OkStatus();
}

absl::Status Daemon::CreateTableOptimizers() {
  for (const TableOptimizerSpec& spec : TableOptimizers()) {
    absl::StatusOr<OptimizerInfo> info =
        optimizers.Create(spec.kind, spec.hyperparameters, spec.parameter_ids);
    if (!info.ok()) return info.status();
  }
  return absl::OkStatus();
}

absl::Status Daemon::JoinGroupOfOne() {
  GroupSettings settings;
  settings.rank = 0;
  settings.world_size = 1;
  settings.hostname = "127.0.0.1";
  settings.timeout = absl::Seconds(30);
  membership = std::make_unique<GroupMembership>(settings, &group_store);
  membership_view = membership.get();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (membership->state() == GroupMembership::State::kJoining &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (membership->state() != GroupMembership::State::kReady) {
    return absl::UnavailableError(absl::StrCat("a group of one did not form: ",
                                               membership->error().ToString()));
  }
  return absl::OkStatus();
}

absl::Status Daemon::CreateModelInGroupOfOne() {
  absl::Status status = CreateModel();
  if (!status.ok()) return status;
  return JoinGroupOfOne();
}

absl::Status Daemon::CreateZero() {
  absl::Status status = zero.Create(ModelZeroSpec()).status();
  if (!status.ok()) return status;
  zero_made = true;
  return absl::OkStatus();
}

absl::Status Daemon::CreateLocalSgd() {
  absl::Status status = local_sgd.Create(ModelLocalSgdSpec()).status();
  if (!status.ok()) return status;
  local_sgd_made = true;
  return absl::OkStatus();
}

absl::Status Daemon::PushModelGradients(uint64_t context_id, int seed) {
  std::vector<ParameterGradient> gradients;
  for (uint64_t id = 1; id <= kModelParameters; ++id) {
    absl::StatusOr<std::shared_ptr<Parameter>> parameter =
        parameters.Find(ParameterKey::ById(id));
    if (!parameter.ok()) return parameter.status();
    absl::StatusOr<Tensor> gradient =
        Tensor::AllocateHost((*parameter)->dtype(), (*parameter)->shape());
    if (!gradient.ok()) return gradient.status();
    // Small distinct values of any dtype: every element one byte pattern
    // per (seed, id, element), read as what the dtype makes of it. The
    // high byte of each element stays small so that no value is NaN.
    const size_t element = ElementSize(gradient->dtype());
    unsigned char* bytes = static_cast<unsigned char*>(gradient->data());
    for (size_t i = 0; i < gradient->byte_size(); ++i) {
      const bool high = i % element == element - 1;
      bytes[i] =
          high ? 0x3c : static_cast<unsigned char>(seed * 31 + id * 7 + i);
    }
    if (gradient->dtype() == DType::kFloat32) {
      float* values = static_cast<float*>(gradient->data());
      for (int64_t i = 0; i < gradient->num_elements(); ++i) {
        values[i] =
            0.01f * static_cast<float>((seed * 13 + id * 5 + i) % 17) - 0.08f;
      }
    }
    gradients.push_back({id, *std::move(gradient)});
  }
  return autograd.AccumulateGradients(context_id, gradients);
}

absl::Status Daemon::StepEverything(uint64_t context_id, int seed) {
  absl::Status status = PushModelGradients(context_id, seed);
  if (!status.ok()) return status;
  for (const OptimizerInfo& info : optimizers.List()) {
    absl::StatusOr<StepResult> result = optimizers.Step(info.id, context_id);
    if (!result.ok()) return result.status();
  }
  if (zero_made) {
    status = zero.Step(context_id);
    if (!status.ok()) return status;
  }
  if (local_sgd_made) {
    absl::StatusOr<int> stepped = local_sgd.Step(context_id);
    if (!stepped.ok()) return stepped.status();
  }
  return contexts.Release(context_id).status();
}

absl::Status Daemon::StepEverythingTimes(int steps) {
  for (int step = 1; step <= steps; ++step) {
    absl::Status status = StepEverything(step, step);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("step ", step, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

Daemon& ModelDaemon() {
  return TargetFixture<Daemon>(
      [](Daemon& daemon) { CheckOk(daemon.CreateModel(), "CreateModel"); });
}

// --- Checkpoint folders as one input ---------------------------------------

const std::vector<std::string>& CheckpointFileNames() {
  static const auto* names = [] {
    auto* list = new std::vector<std::string>;
    for (const char* folder :
         {"parameters", "parameters.1", "parameters.new"}) {
      for (const char* file :
           {"index.binpb", "values.bin", "1.bin", "2.bin", "optimizers.binpb",
            "optimizers.bin", "zero.binpb", "zero.bin", "local_sgd.binpb",
            "local_sgd.bin"}) {
        list->push_back(absl::StrCat(folder, "/", file));
      }
    }
    return list;
  }();
  return *names;
}

}  // namespace fuzz
}  // namespace distopt
