// A ZeRO rank's memory, measured as a user would: the daemon's peak RSS
// (VmHWM) over one step, with the gradients already in the context. In
// every mode the step may add only its partition's optimizer state (the
// first step) and scratch bounded by the bucket, never a buffer the size of
// the model. A control case with a bucket larger than the model shows that
// the measurement sees a model-sized buffer when there is one.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/data_parallel.h"
#include "client/initializers.h"
#include "common/at_once.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

constexpr int kWorld = 2;
constexpr int kParameters = 32;
constexpr int64_t kRows = 256;
constexpr int64_t kColumns = 1024;
constexpr int64_t kParameterBytes = kRows * kColumns * 4;  // 1 MiB.
constexpr int64_t kModelBytes = kParameters * kParameterBytes;
constexpr int64_t kBucketBytes = int64_t{2} << 20;
// The scratch a step may keep: a bucket of gradients (two with overlap)
// and a bucket of parameters the owners broadcast (the bucket view's; the
// parameters here, 1 MiB each, are too large to be packed without it).
constexpr int64_t kScratchBytes = 3 * kBucketBytes;
// What a step may add beyond the state and the scratch: the daemon's own
// transient allocations (gRPC, gloo, threads' stacks touched).
constexpr int64_t kSlackBytes = int64_t{6} << 20;

enum Mode { kPerParameter, kBucketView, kOverlap, kSharded, kShardedOverlap };

std::string ModeName(const ::testing::TestParamInfo<int>& info) {
  const char* names[] = {"PerParameter", "BucketView", "Overlap", "Sharded",
                         "ShardedOverlap"};
  return names[info.param];
}

class ZeroMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < kWorld; ++r) {
      ranks_.push_back(testing::StartRankOrDie(
          {absl::StrCat("--rank=", r), absl::StrCat("--world_size=", kWorld),
           "--rendezvous=" +
               (r == 0 ? std::string("127.0.0.1:1") : ranks_[0]->address()),
           "--group_timeout=60s"}));
      ASSERT_NE(ranks_[r], nullptr);
    }
    ids_.resize(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      for (int p = 0; p < kParameters; ++p) {
        absl::StatusOr<RemoteParameter> parameter = client_->CreateParameter(
            ranks_[r]->address(), absl::StrCat("layer", p, ".weight"),
            DType::kFloat32, {kRows, kColumns}, init::Normal(0.0, 0.02, p));
        ASSERT_TRUE(parameter.ok()) << parameter.status();
        ids_[r].push_back(parameter->id);
      }
    }
  }

  void TearDown() override {
    client_.reset();
    while (!ranks_.empty()) ranks_.pop_back();
  }

  // Runs `call(rank)` on every rank at once; fails the test on any error.
  void OnEveryRank(const std::function<absl::Status(int)>& call) {
    const std::vector<absl::Status> results = AtOnce(kWorld, call);
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    }
  }

  std::vector<v1::ZeroInfo> Create(int mode, int64_t bucket_bytes) {
    v1::CreateZeroRequest spec;
    spec.set_kind("adam");
    spec.set_timeout_ms(60000);
    spec.set_parameters_as_bucket_view(mode == kBucketView);
    spec.set_overlap(mode == kOverlap || mode == kShardedOverlap);
    spec.set_gradient_sharded(mode == kSharded || mode == kShardedOverlap);
    spec.set_bucket_bytes(bucket_bytes);
    v1::ZeroParamGroup* group = spec.add_groups();
    (*group->mutable_hyperparameters())["lr"].set_number(1e-3);
    for (int p = 0; p < kParameters; ++p) {
      group->add_parameter_names(absl::StrCat("layer", p, ".weight"));
    }
    std::vector<v1::ZeroInfo> infos(kWorld);
    OnEveryRank([&](int r) -> absl::Status {
      absl::StatusOr<v1::ZeroInfo> info =
          RemoteZero(client_.get(), ranks_[r]->address()).Create(spec);
      if (info.ok()) infos[r] = *info;
      return info.status();
    });
    return infos;
  }

  // Each rank's gradients of every parameter in a new context.
  uint64_t PushGradients(int step) {
    const uint64_t context_id = client_->NewContextId();
    OnEveryRank([&](int r) -> absl::Status {
      Tensor gradient =
          *Tensor::AllocateHost(DType::kFloat32, {kRows, kColumns});
      absl::Span<float> values = gradient.host_span<float>();
      for (size_t e = 0; e < values.size(); ++e) {
        values[e] = 1e-3f * static_cast<float>((e + r * 5 + step) % 13);
      }
      for (uint64_t id : ids_[r]) {
        absl::Status pushed = client_->AccumulateGradients(
            ranks_[r]->address(), context_id, {{id, gradient}});
        if (!pushed.ok()) return pushed;
      }
      return absl::OkStatus();
    });
    return context_id;
  }

  // How far each rank's RSS peaked above where it stood before one step of
  // `context_id`, in bytes.
  std::vector<int64_t> StepPeakRise(uint64_t context_id) {
    std::vector<int64_t> before(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(ranks_[r]->ResetPeakMemory());
      before[r] = ranks_[r]->ProcStatus("VmRSS");
    }
    OnEveryRank([&](int r) {
      return RemoteZero(client_.get(), ranks_[r]->address()).Step(context_id);
    });
    std::vector<int64_t> rise(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      rise[r] = (ranks_[r]->ProcStatus("VmHWM") - before[r]) * 1024;
    }
    return rise;
  }

  std::vector<std::unique_ptr<LocalWorker>> ranks_;
  std::vector<std::vector<uint64_t>> ids_;
  std::unique_ptr<Client> client_ = std::make_unique<Client>();
};

class ZeroModeMemoryTest : public ZeroMemoryTest,
                           public ::testing::WithParamInterface<int> {};

TEST_P(ZeroModeMemoryTest, AStepAddsStateAndBucketsNotTheModel) {
  const std::vector<v1::ZeroInfo> infos = Create(GetParam(), kBucketBytes);
  if (HasFailure()) return;

  // The first step makes this rank's share of the Adam state.
  const std::vector<int64_t> first = StepPeakRise(PushGradients(0));
  // Later steps make nothing that lasts: only scratch.
  const std::vector<int64_t> second = StepPeakRise(PushGradients(1));
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<v1::ZeroInfo> info =
        RemoteZero(client_.get(), ranks_[r]->address()).Get();
    ASSERT_TRUE(info.ok()) << info.status();
    // Two fp32 moments of half the model.
    EXPECT_EQ(info->state_bytes(), kModelBytes);
    EXPECT_EQ(info->gradient_bytes(), kModelBytes);
    // Scratch is bounded by the bucket, not by the model, both as the rank
    // reports it and as the kernel sees it.
    EXPECT_GT(info->scratch_bytes(), 0) << "rank " << r;
    EXPECT_LE(info->scratch_bytes(), kScratchBytes) << "rank " << r;
    EXPECT_LE(first[r], info->state_bytes() + kScratchBytes + kSlackBytes)
        << "rank " << r << ": the first step peaked " << first[r]
        << " bytes above the gradients; the state is " << info->state_bytes()
        << ", the model " << kModelBytes;
    EXPECT_LE(second[r], kScratchBytes + kSlackBytes)
        << "rank " << r << ": a later step peaked " << second[r]
        << " bytes above the gradients; the model is " << kModelBytes;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ZeroModeMemoryTest,
                         ::testing::Values(kPerParameter, kBucketView, kOverlap,
                                           kSharded, kShardedOverlap),
                         ModeName);

// The control: with a bucket as large as the model, the scratch is
// model-sized, and the measurement above sees it.
TEST_F(ZeroMemoryTest, AModelSizedBucketIsSeen) {
  Create(kPerParameter, 2 * kModelBytes);
  if (HasFailure()) return;
  const std::vector<int64_t> first = StepPeakRise(PushGradients(0));
  const int64_t state_bytes = kModelBytes;  // Two moments of half the model.
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_GE(first[r], state_bytes + kModelBytes * 3 / 4) << "rank " << r;
  }
}

}  // namespace
}  // namespace distopt
