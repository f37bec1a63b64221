// Checkpoint restore from files, as a daemon started with --checkpoint_dir
// does: Checkpointer::Restore -> LoadCheckpoint (the index's envelope and
// fields, every size, the values' and sections' checksums, falling back to
// an older checkpoint, finishing or dropping an interrupted save) with the
// daemon's sections restorer (ReadZeroCheckpoint, ReadLocalSgdCheckpoint,
// RestoreOptimizers -> ReadStateDicts, OptimizerTable::Restore), then
// ListCheckpoints and VisitCheckpoints (how a resharding rank reads another
// rank's folder).
//
// The input is the checkpoint folder's files (checkpoint_files.h: a flags
// byte, then [file selector, bytes] parts), written to a fresh temporary
// folder of at most 1 MiB for each input and removed afterwards. With its
// flags the index's checksums are made to agree with the files, so
// mutations get past them. Whatever a restore accepts must be usable: every
// restored optimizer steps with gradients for its parameters.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/daemon/checkpointer.h"
#include "server/localsgd/local_sgd_checkpoint.h"
#include "server/zero/zero_checkpoint.h"
#include "tests/fuzz/checkpoint_files.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace distopt;  // NOLINT
namespace fs = std::filesystem;

constexpr size_t kMaxFolderBytes = size_t{1} << 20;

const std::string& Root() {
  static const std::string* root = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") +
                          "/distopt-checkpoint-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    std::atexit([] {
      std::error_code error;
      fs::remove_all(Root(), error);
    });
    return new std::string(pattern);
  }();
  return *root;
}

// Every restored optimizer steps with a gradient for each of its
// parameters.
void StepRestored(fuzz::Daemon& daemon) {
  // Not among the contexts the seeds saved as applied (a retry is not
  // applied again).
  const uint64_t context_id = uint64_t{0x7ead} << 48 | 12345;
  for (const OptimizerInfo& info : daemon.optimizers.List()) {
    std::vector<ParameterGradient> gradients;
    for (uint64_t id : info.parameter_ids) {
      absl::StatusOr<std::shared_ptr<Parameter>> parameter =
          daemon.parameters.Find(ParameterKey::ById(id));
      fuzz::CheckOk(parameter.status(), "a restored optimizer's parameter");
      absl::StatusOr<Tensor> gradient =
          Tensor::AllocateHost((*parameter)->dtype(), (*parameter)->shape());
      fuzz::CheckOk(gradient.status(), "a gradient");
      std::memset(gradient->data(), 0x3b, gradient->byte_size());
      gradients.push_back({id, *std::move(gradient)});
    }
    fuzz::CheckOk(daemon.autograd.AccumulateGradients(context_id, gradients),
                  "gradients for a restored optimizer");
    absl::StatusOr<StepResult> stepped =
        daemon.optimizers.Step(info.id, context_id);
    fuzz::CheckOk(stepped.status(), "a step of a restored optimizer");
    // Its count of steps moves on (or stays at the largest count there
    // is).
    absl::StatusOr<OptimizerInfo> after = daemon.optimizers.Get(info.id);
    fuzz::CheckOk(after.status(), "a restored optimizer after its step");
    const bool moved = after->steps > info.steps ||
                       (after->steps == info.steps &&
                        info.steps == std::numeric_limits<int64_t>::max());
    if (stepped->applied ? !moved : after->steps != info.steps) {
      std::fprintf(stderr,
                   "optimizer %llu: %lld steps after a step from %lld\n",
                   static_cast<unsigned long long>(info.id),
                   static_cast<long long>(after->steps),
                   static_cast<long long>(info.steps));
      std::abort();
    }
    (void)daemon.optimizers.GetStateDict(info.id);
    fuzz::CheckOk(daemon.contexts.Release(context_id).status(), "Release");
  }
  // A new optimizer takes an id of its own: the restored ones all stay.
  const size_t restored = daemon.optimizers.List().size();
  ParameterPage page = daemon.parameters.List("", 0, 1 << 20);
  for (const ParameterInfo& parameter : page.parameters) {
    if (!IsFloatingPoint(parameter.dtype)) continue;
    absl::StatusOr<OptimizerInfo> made =
        daemon.optimizers.Create("sgd", {}, {parameter.id});
    if (!made.ok()) return;  // Over the budget, say.
    if (daemon.optimizers.List().size() != restored + 1) {
      std::fprintf(stderr,
                   "a new optimizer (id %llu) took the place of a restored "
                   "one\n",
                   static_cast<unsigned long long>(made->id));
      std::abort();
    }
    return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::LimitMemoryOnce();
  const std::string dir = Root() + "/checkpoints";
  std::error_code error;
  fs::remove_all(dir, error);
  fs::create_directories(dir, error);
  if (error) std::abort();
  fuzz::CheckOk(
      fuzz::WriteCheckpointInput(
          absl::string_view(reinterpret_cast<const char*>(data), size), dir,
          kMaxFolderBytes),
      "writing the checkpoint files");
  {
    fuzz::DaemonOptions options;
    options.checkpoint_dir = dir;
    fuzz::Daemon daemon(options);
    Checkpointer checkpointer(CheckpointSchedule{dir, /*keep=*/2},
                              &daemon.parameters, &daemon.optimizers,
                              &daemon.zero, &daemon.local_sgd,
                              [] { return absl::OkStatus(); });
    absl::StatusOr<RestoredCheckpoint> restored = checkpointer.Restore();
    fuzz::Report("Checkpointer::Restore", restored.status());
    if (restored.ok()) {
      fuzz::Report(absl::StrCat(restored->parameters, " parameters, ",
                                daemon.optimizers.List().size(),
                                " optimizers restored; fell back: ",
                                restored->fell_back),
                   absl::OkStatus());
      StepRestored(daemon);
    }
    (void)checkpointer.List();
  }
  (void)ListCheckpoints(dir);
  std::vector<std::string> skipped;
  (void)VisitCheckpoints(
      dir,
      [](const std::string&,
         const CheckpointSections& sections) -> absl::StatusOr<bool> {
        absl::StatusOr<std::optional<ZeroCheckpoint>> zero =
            ReadZeroCheckpoint(sections);
        if (!zero.ok()) return zero.status();
        absl::StatusOr<std::optional<LocalSgdCheckpoint>> local_sgd =
            ReadLocalSgdCheckpoint(sections);
        if (!local_sgd.ok()) return local_sgd.status();
        return false;  // On to the next one.
      },
      &skipped);
  fs::remove_all(dir, error);
  return 0;
}
