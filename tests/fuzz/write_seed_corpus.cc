// Writes the seed corpora of the fuzz targets: valid inputs, made the way
// the client library and the tests make them, from the daemon's own
// objects (fuzz_support.h: the same model as the targets), into
// ROOT/tests/fuzz/corpus/<target>/<name>.
//
//   bazel run //tests/fuzz:write_seed_corpus -- "$PWD"
//
// Files of the same names are overwritten; others (crash-* regression
// inputs) are left alone. Each seed is checked to be accepted by the code it
// aims at, so that its mutations start deep.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/hyperparameters.h"
#include "client/initializers.h"
#include "common/chunked_message.h"
#include "common/wire_parameter.h"
#include "common/wire_tensor.h"
#include "grpcpp/server_context.h"
#include "proto/distopt/v1/autograd.pb.h"
#include "proto/distopt/v1/local_sgd.pb.h"
#include "proto/distopt/v1/optimizer.pb.h"
#include "proto/distopt/v1/parameter.pb.h"
#include "proto/distopt/v1/tensor.pb.h"
#include "proto/distopt/v1/zero.pb.h"
#include "server/daemon/checkpointer.h"
#include "server/optim/wire_optimizer.h"
#include "server/params/checkpoint_index.pb.h"
#include "tests/fuzz/checkpoint_files.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/state_dict_protos.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;
using fuzz::CheckOk;

std::string g_root;  // ROOT/tests/fuzz/corpus
int g_written = 0;

void Write(const std::string& target, const std::string& name,
           const std::string& bytes) {
  if (bytes.size() >= 64 << 10) {
    std::fprintf(stderr, "%s/%s: %zu bytes; expected < 64 KiB\n",
                 target.c_str(), name.c_str(), bytes.size());
    std::exit(1);
  }
  const fs::path dir = fs::path(g_root) / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s/%s\n", target.c_str(), name.c_str());
    std::exit(1);
  }
  ++g_written;
}

void WriteMessage(const std::string& target, const std::string& name,
                  const google::protobuf::Message& message) {
  Write(target, name, fuzz::DeterministicBytes(message));
}

Tensor Filled(DType dtype, const Shape& shape, int seed) {
  Tensor tensor = Tensor::AllocateHost(dtype, shape).value();
  unsigned char* bytes = static_cast<unsigned char*>(tensor.data());
  for (size_t i = 0; i < tensor.byte_size(); ++i) {
    bytes[i] = static_cast<unsigned char>(seed * 37 + i * 11);
  }
  if (dtype == DType::kFloat32) {
    float* values = static_cast<float*>(tensor.data());
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      values[i] = 0.25f * static_cast<float>((seed + i) % 9) - 1.0f;
    }
  }
  if (dtype == DType::kInt64) {
    int64_t* values = static_cast<int64_t*>(tensor.data());
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      values[i] = (seed + i) % 6;  // Rows of the embedding table.
    }
  }
  return tensor;
}

v1::TensorProto ProtoOf(const Tensor& tensor) {
  v1::TensorProto proto;
  TensorToProto(tensor, &proto);
  return proto;
}

// --- tensor_decode_fuzzer ----------------------------------------------------

void TensorSeeds(fuzz::Daemon& daemon) {
  const std::string target = "tensor_decode_fuzzer";
  struct Case {
    const char* name;
    DType dtype;
    Shape shape;
  };
  const std::vector<Case> cases = {
      {"float32_2x3", DType::kFloat32, {2, 3}},
      {"float16_4", DType::kFloat16, {4}},
      {"bfloat16_2x2", DType::kBFloat16, {2, 2}},
      {"int64_3", DType::kInt64, {3}},
      {"float32_scalar", DType::kFloat32, {}},
      {"float32_empty_0x5", DType::kFloat32, {0, 5}},
      {"float16_1x1x1x2", DType::kFloat16, {1, 1, 1, 2}},
  };
  int seed = 0;
  for (const Case& c : cases) {
    const v1::TensorProto proto = ProtoOf(Filled(c.dtype, c.shape, ++seed));
    CheckOk(TensorFromProto(proto, "seed").status(), c.name);
    WriteMessage(target, c.name, proto);
  }
  // A parameter's metadata as the daemon sends it.
  v1::ParameterInfo info;
  ParameterInfoToProto(
      daemon.parameters.Find(ParameterKey::ById(fuzz::kHalfScale))
          .value()
          ->Info(),
      &info);
  CheckOk(ParameterInfoFromProto(info).status(), "parameter info");
  WriteMessage(target, "parameter_info", info);
  Write(target, "text_bfloat16", "bfloat16");
  Write(target, "text_cuda_1", "cuda:1");
}

// --- chunked_message_fuzzer --------------------------------------------------

// Collects what WriteChunked writes.
struct Collector {
  bool Write(const v1::MessageChunk& chunk) {
    chunks.push_back(chunk);
    return true;
  }
  std::vector<v1::MessageChunk> chunks;
};

// The input of chunked_message_fuzzer for `message` (of type `type`) sent
// in `pieces` chunks with limits byte `limits`.
std::string ChunkedInput(uint8_t type, uint8_t limits,
                         const google::protobuf::Message& message, int pieces) {
  std::string input;
  fuzz::AppendByte(type, &input);
  fuzz::AppendByte(limits, &input);
  Collector collector;
  if (!WriteChunked(message, &collector)) std::exit(1);
  if (pieces <= 1) {
    for (const v1::MessageChunk& chunk : collector.chunks) {
      fuzz::AppendPart(fuzz::DeterministicBytes(chunk), &input);
    }
    return input;
  }
  // The same bytes in more, smaller chunks (the reader takes any split).
  std::string bytes;
  for (const v1::MessageChunk& chunk : collector.chunks) bytes += chunk.data();
  const size_t step = bytes.size() / pieces + 1;
  for (size_t offset = 0; offset < bytes.size() || offset == 0;
       offset += step) {
    v1::MessageChunk chunk;
    if (offset == 0) chunk.set_total_bytes(bytes.size());
    chunk.set_data(bytes.substr(offset, step));
    fuzz::AppendPart(fuzz::DeterministicBytes(chunk), &input);
    if (bytes.empty()) break;
  }
  return input;
}

// --- the daemons the state seeds come from -----------------------------------

v1::ForwardRequest LinearForward(uint64_t context_id, int rows, int seed) {
  v1::ForwardRequest request;
  request.set_context_id(context_id);
  request.set_op("linear");
  request.add_parameter_ids(fuzz::kFcWeight);
  request.add_parameter_ids(fuzz::kFcBias);
  *request.add_inputs() = ProtoOf(Filled(DType::kFloat32, {rows, 3}, seed));
  return request;
}

v1::ForwardRequest EmbeddingForward(uint64_t context_id, int seed) {
  v1::ForwardRequest request;
  request.set_context_id(context_id);
  request.set_op("embedding");
  request.add_parameter_ids(fuzz::kEmbedding);
  *request.add_inputs() = ProtoOf(Filled(DType::kInt64, {2, 3}, seed));
  return request;
}

v1::LoadStateDictRequest TableRequest(fuzz::Daemon& daemon, uint64_t id) {
  v1::LoadStateDictRequest request;
  request.set_optimizer_id(id);
  StateDictToProto(daemon.optimizers.GetStateDict(id).value(),
                   request.mutable_state_dict());
  return request;
}

// --- state_dict_fuzzer, zero_state_dict_fuzzer, local_sgd_state_dict_fuzzer,
// chunked_message_fuzzer ------------------------------------------------------

void StateDictSeeds() {
  // Fresh optimizers (no state yet, but Adagrad's), then after steps.
  fuzz::Daemon table;
  CheckOk(table.CreateModel(), "CreateModel");
  CheckOk(table.CreateTableOptimizers(), "CreateTableOptimizers");
  const std::vector<fuzz::TableOptimizerSpec> specs = fuzz::TableOptimizers();
  for (uint64_t id : {uint64_t{1}, uint64_t{4}}) {
    WriteMessage("state_dict_fuzzer",
                 absl::StrCat("fresh_", specs[id - 1].kind),
                 TableRequest(table, id));
  }
  CheckOk(table.StepEverything(1, 1), "step");
  v1::LoadStateDictRequest sgd_one_step = TableRequest(table, 1);
  WriteMessage("state_dict_fuzzer", "one_step_sgd", sgd_one_step);
  CheckOk(table.StepEverything(2, 2), "step");
  for (uint64_t id = 1; id <= specs.size(); ++id) {
    v1::LoadStateDictRequest request = TableRequest(table, id);
    CheckOk(table.optimizers.LoadStateDict(
                id, StateDictFromProto(request.state_dict()).value()),
            "a seed state dict loads");
    WriteMessage("state_dict_fuzzer",
                 absl::StrCat("two_steps_", specs[id - 1].kind), request);
  }
  // The SGD dict with momentum turned off: no momentum buffers.
  v1::LoadStateDictRequest plain = TableRequest(table, 1);
  (*plain.mutable_state_dict()
        ->mutable_param_groups(0)
        ->mutable_hyperparameters())["momentum"] = hyper::Number(0);
  (*plain.mutable_state_dict()
        ->mutable_param_groups(0)
        ->mutable_hyperparameters())["nesterov"] = hyper::Flag(false);
  for (auto& state : *plain.mutable_state_dict()->mutable_state()) {
    state.mutable_buffers()->clear();
  }
  CheckOk(table.optimizers.LoadStateDict(
              1, StateDictFromProto(plain.state_dict()).value()),
          "the plain SGD dict loads");
  WriteMessage("state_dict_fuzzer", "sgd_without_momentum", plain);

  // chunked_message_fuzzer: the same kinds of request the daemon reads in
  // chunks, in one and in several chunks.
  const uint8_t fits = 3 | (1 << 2);   // 64 KiB at most, a 1 MiB budget.
  const uint8_t tight = 3 | (2 << 2);  // A 100-byte budget.
  const uint8_t unbudgeted = 3 | 0x10;
  const v1::LoadStateDictRequest adam = TableRequest(table, 2);
  Write("chunked_message_fuzzer", "load_state_dict_1_chunk",
        ChunkedInput(0, fits, adam, 1));
  Write("chunked_message_fuzzer", "load_state_dict_3_chunks",
        ChunkedInput(0, fits, adam, 3));
  Write("chunked_message_fuzzer", "load_state_dict_over_budget",
        ChunkedInput(0, tight, sgd_one_step, 2));
  Write("chunked_message_fuzzer", "forward_2_chunks",
        ChunkedInput(1, unbudgeted, LinearForward(uint64_t{1} << 48 | 1, 2, 1),
                     2));
  Write("chunked_message_fuzzer", "empty_message",
        ChunkedInput(1, 0, v1::ForwardRequest(), 1));

  // ZeRO and post-local SGD in a group of one.
  fuzz::Daemon group;
  CheckOk(group.CreateModelInGroupOfOne(), "CreateModelInGroupOfOne");
  CheckOk(group.CreateZero(), "zero");
  CheckOk(group.CreateLocalSgd(), "local sgd");
  CheckOk(group.StepEverything(1, 1), "step");
  const v1::ZeroStateDict zero_one = fuzz::GetZeroStateDict(group).value();
  WriteMessage("zero_state_dict_fuzzer", "one_step", zero_one);
  const v1::PostLocalSgdStateDict local_one =
      fuzz::GetLocalSgdStateDict(group).value();
  WriteMessage("local_sgd_state_dict_fuzzer", "one_step", local_one);
  for (int step = 2; step <= 4; ++step) {
    CheckOk(group.StepEverything(step, step), "step");
  }
  const v1::ZeroStateDict zero_four = fuzz::GetZeroStateDict(group).value();
  CheckOk(fuzz::LoadZeroStateDict(group, zero_four), "a seed ZeRO dict loads");
  WriteMessage("zero_state_dict_fuzzer", "four_steps", zero_four);
  // The same dict saved by a model that lists fc.weight and gate the other
  // way round: names, positions and state entries swapped together.
  v1::ZeroStateDict reordered = zero_four;
  reordered.mutable_parameter_names()->SwapElements(0, 4);
  auto swap = [](int64_t p) { return p == 0 ? 4 : p == 4 ? 0 : p; };
  for (v1::ParamGroup& g :
       *reordered.mutable_state_dict()->mutable_param_groups()) {
    for (int64_t& p : *g.mutable_params()) p = swap(p);
  }
  for (v1::ParameterState& state :
       *reordered.mutable_state_dict()->mutable_state()) {
    state.set_index(swap(state.index()));
  }
  CheckOk(fuzz::LoadZeroStateDict(group, reordered),
          "the reordered ZeRO dict loads");
  WriteMessage("zero_state_dict_fuzzer", "names_reordered", reordered);
  const v1::PostLocalSgdStateDict local_four =
      fuzz::GetLocalSgdStateDict(group).value();
  CheckOk(fuzz::LoadLocalSgdStateDict(group, local_four),
          "a seed post-local SGD dict loads");
  WriteMessage("local_sgd_state_dict_fuzzer", "four_steps", local_four);
  v1::PostLocalSgdStateDict no_step = local_four;
  no_step.clear_step();
  WriteMessage("local_sgd_state_dict_fuzzer", "without_step", no_step);
  Write("chunked_message_fuzzer", "zero_state_dict",
        ChunkedInput(2, fits, zero_one, 2));
  Write("chunked_message_fuzzer", "local_sgd_state_dict",
        ChunkedInput(3, fits, local_one, 1));
}

// --- checkpoint_restore_fuzzer -----------------------------------------------

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

checkpoint::CheckpointIndex ReadIndex(const fs::path& path) {
  const std::string bytes = ReadFile(path);
  checkpoint::CheckpointIndex index;
  if (!index.ParseFromString(bytes.substr(12))) std::exit(1);
  return index;
}

// The folder `scratch`/`name`, emptied of what an earlier run left there.
std::string EmptyFolder(const std::string& scratch, const std::string& name) {
  const std::string folder = scratch + "/" + name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

// Copies the checkpoint folder `from` (parameters, parameters.1...) and all
// of its files to `to`.
void CopyCheckpoint(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
}

// Restores `dir` into a fresh daemon as the target does; the number of
// parameters restored.
size_t Restores(const std::string& dir) {
  fuzz::DaemonOptions options;
  options.checkpoint_dir = dir;
  fuzz::Daemon daemon(options);
  Checkpointer checkpointer(CheckpointSchedule{dir, 2}, &daemon.parameters,
                            &daemon.optimizers, &daemon.zero, &daemon.local_sgd,
                            [] { return absl::OkStatus(); });
  absl::StatusOr<RestoredCheckpoint> restored = checkpointer.Restore();
  CheckOk(restored.status(), "a seed checkpoint restores");
  return restored->parameters;
}

void CheckpointSeeds(const std::string& scratch) {
  const std::string target = "checkpoint_restore_fuzzer";
  // Most seeds ask the target to make the index's checksums and sizes
  // agree with the files, so that their mutations reach what those cover.
  const uint8_t kFix = fuzz::kFixIndexEnvelope | fuzz::kFixIndexContents;
  const std::string dir = EmptyFolder(scratch, "saved");
  {
    fuzz::DaemonOptions options;
    options.checkpoint_dir = dir;
    fuzz::Daemon daemon(options);
    CheckOk(daemon.CreateModel(), "CreateModel");
    CheckOk(daemon.CreateTableOptimizers(), "CreateTableOptimizers");
    CheckOk(daemon.JoinGroupOfOne(), "JoinGroupOfOne");
    CheckOk(daemon.CreateZero(), "zero");
    CheckOk(daemon.CreateLocalSgd(), "local sgd");
    Checkpointer checkpointer(
        CheckpointSchedule{dir, 2}, &daemon.parameters, &daemon.optimizers,
        &daemon.zero, &daemon.local_sgd, [] { return absl::OkStatus(); });
    CheckOk(daemon.StepEverything(1, 1), "step");
    CheckOk(checkpointer.Save("on demand", nullptr).status(), "first save");
    CheckOk(daemon.StepEverything(2, 2), "step");
    CheckOk(checkpointer.Save("periodic", nullptr).status(), "second save");
  }
  // dir: parameters (newest) and parameters.1.
  const size_t model = fuzz::kModelParameters;
  if (Restores(dir) != model) std::exit(1);
  Write(target, "two_saves", fuzz::PackCheckpointDir(dir, 0));
  Write(target, "two_saves_fixing", fuzz::PackCheckpointDir(dir, kFix));

  // The newest alone, as it is and asking for the fixes.
  const std::string one = EmptyFolder(scratch, "one");
  CopyCheckpoint(dir + "/parameters", one + "/parameters");
  if (Restores(one) != model) std::exit(1);
  Write(target, "newest_only", fuzz::PackCheckpointDir(one, kFix));
  Write(target, "newest_only_fixing_contents",
        fuzz::PackCheckpointDir(one, fuzz::kFixIndexContents));

  // An interrupted save that had written its folder whole (parameters.new),
  // over the previous one.
  const std::string fresh = EmptyFolder(scratch, "fresh");
  CopyCheckpoint(dir + "/parameters.1", fresh + "/parameters");
  CopyCheckpoint(dir + "/parameters", fresh + "/parameters.new");
  Write(target, "interrupted_save", fuzz::PackCheckpointDir(fresh, kFix));
  if (Restores(fresh) != model) std::exit(1);

  // The newest damaged (a flipped value): the previous one is restored.
  const std::string damaged = EmptyFolder(scratch, "damaged");
  CopyCheckpoint(dir + "/parameters", damaged + "/parameters");
  CopyCheckpoint(dir + "/parameters.1", damaged + "/parameters.1");
  std::string values = ReadFile(damaged + "/parameters/values.bin");
  values[5] ^= 0x10;
  WriteFile(damaged + "/parameters/values.bin", values);
  Write(target, "newest_damaged", fuzz::PackCheckpointDir(damaged, 0));
  if (Restores(damaged) != model) std::exit(1);

  // Formats 2 and 1 (a values file per parameter): the first two
  // parameters of the saved index, no sections.
  const checkpoint::CheckpointIndex saved =
      ReadIndex(dir + "/parameters/index.binpb");
  const std::string saved_values = ReadFile(dir + "/parameters/values.bin");
  for (uint32_t format : {2u, 1u}) {
    const std::string old = scratch + absl::StrCat("/format", format);
    fs::remove_all(old);
    checkpoint::CheckpointIndex index;
    index.set_format(format);
    index.set_next_id(3);
    size_t offset = 0;
    for (int i = 0; i < 2; ++i) {
      const v1::ParameterInfo& info = saved.parameters(i);
      *index.add_parameters() = info;
      const std::string bytes = saved_values.substr(offset, info.byte_size());
      offset += info.byte_size();
      WriteFile(absl::StrCat(old, "/parameters/", info.id(), ".bin"), bytes);
      if (format == 2) index.add_values_crc32(fuzz::Crc32Of(bytes));
    }
    std::string payload;
    index.SerializeToString(&payload);
    WriteFile(old + "/parameters/index.binpb",
              format == 2 ? fuzz::IndexEnvelope(payload) : payload);
    if (Restores(old) != 2) std::exit(1);
    Write(target, absl::StrCat("format_", format),
          fuzz::PackCheckpointDir(old, kFix));
  }
}

// --- hyperparameters_fuzzer --------------------------------------------------

void HyperparameterSeeds(fuzz::Daemon& daemon) {
  struct Case {
    const char* name;
    const char* kind;
    HyperparameterMap create;
    HyperparameterMap change;
    std::vector<uint64_t> ids;
  };
  const std::vector<Case> cases = {
      {"sgd_momentum",
       "sgd",
       {{"lr", hyper::Number(0.1)},
        {"momentum", hyper::Number(0.9)},
        {"nesterov", hyper::Flag(true)}},
       {{"lr", hyper::Number(0.05)}},
       {fuzz::kFcWeight, fuzz::kFcBias}},
      {"adam_amsgrad",
       "adam",
       {{"betas", hyper::Pair(0.8, 0.99)}, {"amsgrad", hyper::Flag(true)}},
       {{"eps", hyper::Number(1e-6)}, {"maximize", hyper::Flag(true)}},
       {fuzz::kEmbedding, fuzz::kHalfScale}},
      {"adamw",
       "adamw",
       {{"weight_decay", hyper::Number(0.05)}},
       {{"lr", hyper::Number(3e-4)}},
       {fuzz::kBfloatGate}},
      {"adagrad",
       "adagrad",
       {{"lr_decay", hyper::Number(0.01)},
        {"initial_accumulator_value", hyper::Number(0.1)}},
       {{"lr", hyper::Number(0.5)}},
       {fuzz::kFcWeight}},
      {"adadelta",
       "adadelta",
       {{"rho", hyper::Number(0.95)}},
       {{"weight_decay", hyper::Number(0.001)}},
       {fuzz::kFcBias}},
      {"adamax",
       "adamax",
       {{"betas", hyper::Pair(0.9, 0.999)}},
       {{"lr", hyper::Number(0.002)}},
       {fuzz::kHalfScale}},
      {"rmsprop_centered",
       "rmsprop",
       {{"alpha", hyper::Number(0.9)}, {"centered", hyper::Flag(true)}},
       {{"momentum", hyper::Number(0.5)}},
       {fuzz::kFcWeight, fuzz::kEmbedding}},
      {"rprop",
       "rprop",
       {{"etas", hyper::Pair(0.5, 1.2)}, {"step_sizes", hyper::Pair(1e-6, 50)}},
       {{"lr", hyper::Number(0.02)}},
       {fuzz::kBfloatGate, fuzz::kFcBias}},
      {"unknown_kind", "lion", {}, {}, {fuzz::kFcWeight}},
      {"bad_value", "sgd", {{"lr", hyper::Number(-1)}}, {}, {fuzz::kFcWeight}},
  };
  for (const Case& c : cases) {
    v1::CreateOptimizerRequest create;
    create.set_kind(c.kind);
    create.mutable_hyperparameters()->insert(c.create.begin(), c.create.end());
    create.mutable_parameter_ids()->Assign(c.ids.begin(), c.ids.end());
    v1::SetHyperparametersRequest change;
    change.mutable_hyperparameters()->insert(c.change.begin(), c.change.end());
    grpc::ServerContext context;
    v1::OptimizerInfo info;
    const bool made =
        daemon.optimizer_service.CreateOptimizer(&context, &create, &info).ok();
    if (made) {
      change.set_optimizer_id(info.id());
      v1::OptimizerInfo changed;
      if (!daemon.optimizer_service
               .SetHyperparameters(&context, &change, &changed)
               .ok()) {
        std::fprintf(stderr, "%s: the change is refused\n", c.name);
        std::exit(1);
      }
      v1::DeleteOptimizerRequest remove;
      remove.set_optimizer_id(info.id());
      daemon.optimizer_service.DeleteOptimizer(&context, &remove, &info);
    } else if (std::string(c.name) != "unknown_kind" &&
               std::string(c.name) != "bad_value") {
      std::fprintf(stderr, "%s: not created\n", c.name);
      std::exit(1);
    }
    change.set_optimizer_id(0);
    std::string input;
    fuzz::AppendPart(fuzz::DeterministicBytes(create), &input);
    input += fuzz::DeterministicBytes(change);
    Write("hyperparameters_fuzzer", c.name, input);
  }
}

// --- autograd_request_fuzzer -------------------------------------------------

void AppendCall(uint8_t method, const google::protobuf::Message& request,
                std::string* input) {
  fuzz::AppendByte(method, input);
  fuzz::AppendPart(fuzz::DeterministicBytes(request), input);
}

// Parses `bytes` as the request of `method` (a seed always parses) and
// calls it.
template <typename Request, typename Response>
grpc::Status CallWithBytes(fuzz::Daemon& daemon,
                           fuzz::AutogradMethod<Request, Response> method,
                           absl::string_view bytes) {
  Request request;
  fuzz::Parse(bytes, &request);
  return fuzz::CallAutograd(daemon, method, request);
}

// Checks that `input` runs its calls as the target does, every one OK.
void CheckCalls(fuzz::Daemon& daemon, const std::string& input) {
  fuzz::InputReader in(input);
  while (!in.empty()) {
    const uint8_t method = in.Byte();
    const absl::string_view bytes = in.Part();
    grpc::Status status;
    fuzz::WithAutogradMethod(method, [&](auto service_method) {
      status = CallWithBytes(daemon, service_method, bytes);
    });
    if (!status.ok()) {
      std::fprintf(stderr, "autograd seed: call %d: %s\n", method,
                   status.error_message().c_str());
      std::exit(1);
    }
  }
}

void AutogradSeeds(fuzz::Daemon& daemon) {
  const std::string target = "autograd_request_fuzzer";
  const uint64_t context = uint64_t{3} << 48 | 7;
  auto backward = [&](uint64_t forward_id, const Tensor& dy) {
    v1::BackwardRequest request;
    request.set_context_id(context);
    request.set_forward_id(forward_id);
    *request.add_output_gradients() = ProtoOf(dy);
    return request;
  };
  v1::GetGradientsRequest get;
  get.set_context_id(context);
  v1::ReleaseContextRequest release;
  release.set_context_id(context);

  std::string linear;
  AppendCall(0, LinearForward(context, 2, 1), &linear);
  AppendCall(1, backward(1, Filled(DType::kFloat32, {2, 4}, 2)), &linear);
  AppendCall(3, get, &linear);
  AppendCall(4, release, &linear);
  CheckCalls(daemon, linear);
  Write(target, "linear_forward_backward", linear);

  std::string embedding;
  AppendCall(0, EmbeddingForward(context, 3), &embedding);
  AppendCall(0, EmbeddingForward(context, 4), &embedding);
  AppendCall(1, backward(2, Filled(DType::kFloat32, {2, 3, 2}, 5)), &embedding);
  AppendCall(1, backward(1, Filled(DType::kFloat32, {2, 3, 2}, 6)), &embedding);
  AppendCall(3, get, &embedding);
  CheckCalls(daemon, embedding);
  daemon.contexts.Release(context).IgnoreError();
  Write(target, "embedding_twice", embedding);

  std::string pushed;
  v1::AccumulateGradientsRequest accumulate;
  accumulate.set_context_id(context);
  for (const CreateParameterSpec& spec : fuzz::ModelParameters()) {
    v1::ParameterGradient* gradient = accumulate.add_gradients();
    gradient->set_parameter_id(accumulate.gradients_size());
    *gradient->mutable_gradient() =
        ProtoOf(Filled(spec.dtype, spec.shape, accumulate.gradients_size()));
  }
  AppendCall(2, accumulate, &pushed);
  AppendCall(2, accumulate, &pushed);
  v1::GetGradientsRequest some = get;
  some.add_parameter_ids(fuzz::kHalfScale);
  some.add_parameter_ids(fuzz::kFcWeight);
  AppendCall(3, some, &pushed);
  v1::ListContextsRequest list;
  list.set_page_size(10);
  AppendCall(5, list, &pushed);
  AppendCall(4, release, &pushed);
  CheckCalls(daemon, pushed);
  Write(target, "accumulate_get_list", pushed);

  // A forward, then the gradients pushed, then a backward adding to them.
  std::string mixed;
  AppendCall(0, LinearForward(context, 1, 7), &mixed);
  v1::AccumulateGradientsRequest weight;
  weight.set_context_id(context);
  weight.add_gradients()->set_parameter_id(fuzz::kFcWeight);
  *weight.mutable_gradients(0)->mutable_gradient() =
      ProtoOf(Filled(DType::kFloat32, {4, 3}, 8));
  AppendCall(2, weight, &mixed);
  AppendCall(1, backward(1, Filled(DType::kFloat32, {1, 4}, 9)), &mixed);
  AppendCall(3, get, &mixed);
  AppendCall(4, release, &mixed);
  CheckCalls(daemon, mixed);
  Write(target, "forward_accumulate_backward", mixed);
}

// --- initializer_fuzzer ------------------------------------------------------

void InitializerSeeds(fuzz::Daemon& daemon) {
  struct Case {
    const char* name;
    v1::DType dtype;
    Shape shape;
    v1::Initializer initializer;
  };
  v1::Initializer values_f32;
  values_f32.mutable_values()->set_data(
      ProtoOf(Filled(DType::kFloat32, {2, 2}, 1)).data());
  v1::Initializer values_i64;
  values_i64.mutable_values()->set_data(
      ProtoOf(Filled(DType::kInt64, {3}, 2)).data());
  const std::vector<Case> cases = {
      {"zeros_float32", v1::DTYPE_FLOAT32, {3, 4}, init::Zeros()},
      {"constant_float16", v1::DTYPE_FLOAT16, {5}, init::Constant(0.5)},
      {"uniform_bfloat16", v1::DTYPE_BFLOAT16, {2, 2}, init::Uniform(-1, 1, 7)},
      {"normal_float32", v1::DTYPE_FLOAT32, {10}, init::Normal(0, 0.02, 3)},
      {"values_float32", v1::DTYPE_FLOAT32, {2, 2}, values_f32},
      {"values_int64", v1::DTYPE_INT64, {3}, values_i64},
      {"constant_scalar", v1::DTYPE_FLOAT32, {}, init::Constant(-2)},
      {"empty", v1::DTYPE_FLOAT32, {0, 3}, init::Normal(1, 2, 9)},
      {"default_zeros_int64", v1::DTYPE_INT64, {2, 1, 2}, v1::Initializer()},
  };
  for (const Case& c : cases) {
    v1::CreateParameterRequest request;
    request.set_name(absl::StrCat("layer.", c.name));
    request.set_dtype(c.dtype);
    request.mutable_shape()->Assign(c.shape.begin(), c.shape.end());
    *request.mutable_initializer() = c.initializer;
    grpc::ServerContext context;
    v1::ParameterInfo info;
    if (!daemon.parameter_service.CreateParameter(&context, &request, &info)
             .ok()) {
      std::fprintf(stderr, "initializer seed %s refused\n", c.name);
      std::exit(1);
    }
    WriteMessage("initializer_fuzzer", c.name, request);
  }
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  using namespace distopt;  // NOLINT
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_seed_corpus REPO_ROOT\n");
    return 2;
  }
  g_root = (fs::path(argv[1]) / "tests/fuzz/corpus").string();
  const char* tmp = std::getenv("TMPDIR");
  std::string scratch = std::string(tmp != nullptr ? tmp : "/tmp") +
                        "/distopt-seed-corpus-XXXXXX";
  if (mkdtemp(scratch.data()) == nullptr) return 1;

  fuzz::Daemon daemon;
  CheckOk(daemon.CreateModel(), "CreateModel");
  TensorSeeds(daemon);
  StateDictSeeds();
  CheckpointSeeds(scratch);
  HyperparameterSeeds(daemon);
  AutogradSeeds(daemon);
  InitializerSeeds(daemon);
  fs::remove_all(scratch);
  std::printf("%d seed files under %s\n", g_written, g_root.c_str());
  return 0;
}
