// Data parallel on GPU ranks (issue 19), through real daemons started with
// --device=cuda:N. Every test skips without a GPU (and says so); the GPU
// machine runs them from tools/gpu/run_checks.sh.
//
// - Two ranks on one GPU (they share it: "gloo-staged") train the demo's
//   digits MLP with ZeRO in each mode and with post-local SGD; the same
//   training on two CPU ranks is the reference. The ranks of a run end
//   with the same bytes; the GPU run ends within kTrainingTolerance of the
//   CPU run (cuBLAS and OpenBLAS sum the layers' products in different
//   orders, and Adam carries the difference on), at the same accuracy.
// - fp16 and bf16 parameters with gradients pushed by the trainer (no
//   forward or backward): the ZeRO step on the GPU ranks equals the CPU
//   ranks' within one unit in the last place of the dtype.
// - A group of a CPU rank and a GPU rank is refused, naming both.
// - On a machine with two GPUs, ranks on cuda:0 and cuda:1 run NCCL.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/data_parallel.h"
#include "client/dist_autograd_context.h"
#include "client/examples/digits_training.h"
#include "client/layers.h"
#include "client/local_ops.h"
#include "common/backend.h"
#include "common/cuda_ops.h"
#include "common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/group_calls.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 2;
constexpr int kBatchPerRank = 32;
constexpr int kEpochs = 3;
// Largest difference allowed between a parameter of the GPU run and of the
// CPU run after kEpochs of Adam at lr 0.01 (see the top).
constexpr float kTrainingTolerance = 5e-3f;

int GpuCount() {
  int count = 0;
  if (!cuda_ops::DeviceCount(&count).empty()) return 0;
  return count;
}

#define SKIP_WITHOUT_GPUS(n)                                             \
  if (GpuCount() < (n)) {                                                \
    GTEST_SKIP() << "needs " << (n) << " CUDA GPU(s); this machine has " \
                 << GpuCount();                                          \
  }

// Two ranks, joined, with their parameters on `devices[r]`.
struct Group {
  std::vector<std::unique_ptr<LocalWorker>> ranks;
  std::vector<std::string> addresses;
};

Group StartGroup(const std::vector<std::string>& devices) {
  Group group;
  for (size_t r = 0; r < devices.size(); ++r) {
    group.ranks.push_back(testing::StartRankOrDie(
        {absl::StrCat("--rank=", r),
         absl::StrCat("--world_size=", devices.size()),
         r == 0 ? "--rendezvous=127.0.0.1:1"
                : "--rendezvous=" + group.addresses[0],
         "--group_timeout=60s", "--device=" + devices[r]}));
    if (group.ranks.back() == nullptr) return group;
    group.addresses.push_back(group.ranks.back()->address());
  }
  return group;
}

// `call(r)` on every rank at once; the first error, or OK.
absl::Status OnEveryRank(int world,
                         const std::function<absl::Status(int)>& call) {
  std::vector<absl::Status> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { results[r] = call(r); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (!results[r].ok()) {
      return absl::Status(results[r].code(),
                          absl::StrCat("rank ", r, ": ", results[r].message()));
    }
  }
  return absl::OkStatus();
}

// What a training run ends with.
struct Trained {
  std::vector<std::vector<Tensor>> models;  // [rank][parameter], host.
  double accuracy = 0;
  std::string backend;  // GetGroup's, on rank 0.
};

// The data-parallel optimizer of a run: made on every rank, then a step of
// rank r on a context.
struct Optimizer {
  std::function<absl::Status(Client&, int r, const std::string& address)>
      create;
  std::function<absl::Status(int r, uint64_t context_id)> step;
};

Optimizer Zero(const v1::CreateZeroRequest& spec,
               std::vector<std::unique_ptr<RemoteZero>>* handles) {
  handles->resize(kWorld);
  return {[spec, handles](Client& client, int r, const std::string& address) {
            (*handles)[r] = std::make_unique<RemoteZero>(&client, address);
            return (*handles)[r]->Create(spec).status();
          },
          [handles](int r, uint64_t context) {
            return (*handles)[r]->Step(context);
          }};
}

Optimizer LocalSgd(const v1::CreatePostLocalSgdRequest& spec,
                   std::vector<std::unique_ptr<RemoteLocalSgd>>* handles) {
  handles->resize(kWorld);
  return {[spec, handles](Client& client, int r, const std::string& address) {
            (*handles)[r] = std::make_unique<RemoteLocalSgd>(&client, address);
            return (*handles)[r]->Create(spec).status();
          },
          [handles](int r, uint64_t context) {
            return (*handles)[r]->Step(context).status();
          }};
}

const char* const kParameterNames[] = {"layer1.weight", "layer1.bias",
                                       "layer2.weight", "layer2.bias"};

template <typename Request>
Request WithDigitsGroup(Request request) {
  v1::ZeroParamGroup* group = request.add_groups();
  (*group->mutable_hyperparameters())["lr"].set_number(0.01);
  for (const char* name : kParameterNames) group->add_parameter_names(name);
  request.set_timeout_ms(60000);
  return request;
}

// The demo's MLP on every rank of `group` (the same seeds everywhere),
// trained kEpochs on a seeded order of the data, every rank on its half of
// each global batch.
absl::StatusOr<Trained> TrainDigits(const Group& group,
                                    const Optimizer& optimizer) {
  absl::StatusOr<DigitsData> data =
      LoadDigits(std::string(std::getenv("TEST_SRCDIR")) +
                 "/distopt/data/digits/digits.csv.gz");
  if (!data.ok()) return data.status();
  std::mt19937_64 rng(7);
  std::vector<size_t> order(data->labels.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t train = order.size() * 4 / 5;
  std::vector<size_t> train_order(order.begin(), order.begin() + train);
  const std::vector<size_t> test_order(order.begin() + train, order.end());
  Client client;
  std::vector<RemoteLinear> layer1, layer2;
  for (int r = 0; r < kWorld; ++r) {
    auto first =
        RemoteLinear::Create(&client, group.addresses[r], "layer1", 64, 64, 1);
    auto second =
        RemoteLinear::Create(&client, group.addresses[r], "layer2", 64, 10, 11);
    if (!first.ok()) return first.status();
    if (!second.ok()) return second.status();
    layer1.push_back(*first);
    layer2.push_back(*second);
  }
  absl::Status created = OnEveryRank(kWorld, [&](int r) {
    return optimizer.create(client, r, group.addresses[r]);
  });
  if (!created.ok()) return created;
  // Whole global batches only: every rank steps every time.
  const size_t steps = train_order.size() / (kWorld * kBatchPerRank);
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    std::shuffle(train_order.begin(), train_order.end(), rng);
    absl::Status trained = OnEveryRank(kWorld, [&](int r) -> absl::Status {
      for (size_t s = 0; s < steps; ++s) {
        const size_t begin = (s * kWorld + r) * kBatchPerRank;
        DistAutogradContext context(&client);
        std::vector<int64_t> labels;
        Variable x{DigitsBatch(*data, train_order, begin, begin + kBatchPerRank,
                               &labels),
                   -1};
        auto hidden = layer1[r].Forward(context, x);
        if (!hidden.ok()) return hidden.status();
        auto logits = layer2[r].Forward(context, Relu(context, *hidden));
        if (!logits.ok()) return logits.status();
        auto ce = SoftmaxCrossEntropy(context, *logits, labels);
        if (!ce.ok()) return ce.status();
        Tensor one = *Tensor::AllocateHost(DType::kFloat32, {});
        one.host_span<float>()[0] = 1.0f;
        absl::Status status = context.Backward(ce->loss, one);
        if (status.ok()) status = optimizer.step(r, context.id());
        if (!status.ok()) return status;
      }
      return absl::OkStatus();
    });
    if (!trained.ok()) return trained;
  }
  Trained result;
  result.models.resize(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    for (const RemoteLinear* layer : {&layer1[r], &layer2[r]}) {
      for (const RemoteParameter& p : layer->parameters()) {
        absl::StatusOr<Tensor> values = client.ReadParameter(p);
        if (!values.ok()) return values.status();
        result.models[r].push_back(*std::move(values));
      }
    }
  }
  DistAutogradContext context(&client);
  std::vector<int64_t> labels;
  Variable x{DigitsBatch(*data, test_order, 0, test_order.size(), &labels), -1};
  auto hidden = layer1[0].Forward(context, x);
  if (!hidden.ok()) return hidden.status();
  auto logits = layer2[0].Forward(context, Relu(context, *hidden));
  if (!logits.ok()) return logits.status();
  auto ce = SoftmaxCrossEntropy(context, *logits, labels);
  if (!ce.ok()) return ce.status();
  int correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    correct += ce->predictions[i] == labels[i];
  }
  result.accuracy = static_cast<double>(correct) / labels.size();
  result.backend = testing::GetGroup(client, group.addresses[0]).backend();
  return result;
}

float LargestDifference(const Tensor& a, const Tensor& b) {
  const auto x = a.host_span<float>();
  const auto y = b.host_span<float>();
  float largest = 0;
  for (size_t e = 0; e < x.size(); ++e) {
    largest = std::max(largest, std::abs(x[e] - y[e]));
  }
  return largest;
}

// The GPU run against the CPU run of the same optimizer, rank by rank.
void ExpectLikeTheCpuRun(const std::string& what, bool ranks_equal,
                         const std::function<Optimizer()>& make) {
  SCOPED_TRACE(what);
  Group cpu = StartGroup({"cpu", "cpu"});
  Group gpu = StartGroup({"cuda:0", "cuda:0"});
  ASSERT_EQ(cpu.addresses.size(), 2u);
  ASSERT_EQ(gpu.addresses.size(), 2u);
  absl::StatusOr<Trained> reference = TrainDigits(cpu, make());
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<Trained> on_gpu = TrainDigits(gpu, make());
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  EXPECT_EQ(reference->backend, "gloo");
  EXPECT_EQ(on_gpu->backend, "gloo-staged");
  for (size_t p = 0; p < on_gpu->models[0].size(); ++p) {
    // ZeRO's ranks hold the same bytes after every step (post-local SGD's
    // only right after averaging).
    if (ranks_equal) {
      EXPECT_TRUE(
          testing::SameBytes(on_gpu->models[0][p], on_gpu->models[1][p]))
          << "parameter " << kParameterNames[p];
    }
    for (int r = 0; r < kWorld; ++r) {
      const float difference =
          LargestDifference(on_gpu->models[r][p], reference->models[r][p]);
      EXPECT_LE(difference, kTrainingTolerance)
          << "rank " << r << " parameter " << kParameterNames[p];
      std::printf("%s: rank %d's %s differs from the CPU run by at most %g\n",
                  what.c_str(), r, kParameterNames[p], difference);
    }
  }
  EXPECT_GE(reference->accuracy, 0.9);
  EXPECT_GE(on_gpu->accuracy, 0.9);
  EXPECT_NEAR(on_gpu->accuracy, reference->accuracy, 0.02);
}

TEST(GpuDataParallelTest, ZeroOnASharedGpuTrainsAsTheCpuRanksDo) {
  SKIP_WITHOUT_GPUS(1);
  for (int mode = 0; mode < 5; ++mode) {
    v1::CreateZeroRequest spec = WithDigitsGroup(v1::CreateZeroRequest());
    spec.set_kind("adam");
    spec.set_parameters_as_bucket_view(mode == 1);
    spec.set_overlap(mode == 2 || mode == 4);
    spec.set_gradient_sharded(mode >= 3);
    std::vector<std::unique_ptr<RemoteZero>> handles;
    ExpectLikeTheCpuRun(absl::StrCat("ZeRO mode ", mode), /*ranks_equal=*/true,
                        [&] { return Zero(spec, &handles); });
  }
}

TEST(GpuDataParallelTest, PostLocalSgdOnASharedGpuTrainsAsTheCpuRanksDo) {
  SKIP_WITHOUT_GPUS(1);
  v1::CreatePostLocalSgdRequest spec =
      WithDigitsGroup(v1::CreatePostLocalSgdRequest());
  spec.set_kind("adam");
  spec.mutable_periodic()->set_period(4);
  spec.mutable_periodic()->set_warmup_steps(10);
  spec.set_start_localsgd_iter(10);
  spec.set_subgroup_size(1);
  std::vector<std::unique_ptr<RemoteLocalSgd>> handles;
  ExpectLikeTheCpuRun("post-local SGD", /*ranks_equal=*/false,
                      [&] { return LocalSgd(spec, &handles); });
}

// fp16 and bf16 parameters, gradients pushed by the trainer: five ZeRO
// steps (gradient-sharded and not) on GPU ranks and CPU ranks end within
// one unit in the last place of the dtype.
TEST(GpuDataParallelTest, HalfPrecisionParametersStepAsOnTheCpu) {
  SKIP_WITHOUT_GPUS(1);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (bool sharded : {false, true}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " sharded=", sharded));
      std::vector<std::vector<float>> results;
      for (const char* device : {"cpu", "cuda:0"}) {
        Group group = StartGroup({device, device});
        ASSERT_EQ(group.addresses.size(), 2u);
        Client client;
        std::vector<RemoteParameter> params;
        for (int r = 0; r < kWorld; ++r) {
          auto p = client.CreateParameter(group.addresses[r], "w", dtype,
                                          {3000}, init::Normal(0, 1, 5));
          ASSERT_TRUE(p.ok()) << p.status();
          params.push_back(*p);
        }
        v1::CreateZeroRequest spec;
        spec.set_kind("adam");
        spec.set_gradient_sharded(sharded);
        spec.set_timeout_ms(60000);
        v1::ZeroParamGroup* g = spec.add_groups();
        (*g->mutable_hyperparameters())["lr"].set_number(0.01);
        g->add_parameter_names("w");
        std::vector<RemoteZero> zero;
        for (const std::string& address : group.addresses) {
          zero.emplace_back(&client, address);
        }
        ASSERT_TRUE(OnEveryRank(kWorld, [&](int r) {
                      return zero[r].Create(spec).status();
                    }).ok());
        for (int step = 0; step < 5; ++step) {
          const uint64_t context = client.NewContextId();
          ASSERT_TRUE(
              OnEveryRank(kWorld, [&](int r) -> absl::Status {
                Tensor grad = *Tensor::AllocateHost(dtype, {3000});
                std::vector<float> values(3000);
                for (size_t e = 0; e < values.size(); ++e) {
                  values[e] =
                      0.01f * static_cast<float>((e * 7 + r * 5 + step) % 23) -
                      0.1f;
                }
                NarrowFromFloat(values, dtype, grad.data());
                absl::Status pushed = client.AccumulateGradients(
                    group.addresses[r], context, {{params[r].id, grad}});
                if (!pushed.ok()) return pushed;
                return zero[r].Step(context);
              }).ok());
        }
        absl::StatusOr<Tensor> values = client.ReadParameter(params[0]);
        ASSERT_TRUE(values.ok()) << values.status();
        std::vector<float> widened(3000);
        WidenToFloat(dtype, values->data(), absl::MakeSpan(widened));
        results.push_back(widened);
      }
      // One unit in the last place: 2^-10 (fp16) or 2^-7 (bf16), relative.
      const float ulp = dtype == DType::kFloat16 ? 1.0f / 1024 : 1.0f / 128;
      for (size_t e = 0; e < results[0].size(); ++e) {
        ASSERT_LE(std::abs(results[0][e] - results[1][e]),
                  ulp * std::max(std::abs(results[0][e]), 6.1e-5f))
            << e << ": cpu " << results[0][e] << ", gpu " << results[1][e];
      }
    }
  }
}

TEST(GpuDataParallelTest, AGroupOfACpuRankAndAGpuRankIsRefused) {
  SKIP_WITHOUT_GPUS(1);
  Group group = StartGroup({"cpu", "cuda:0"});
  ASSERT_EQ(group.addresses.size(), 2u);
  Client client;
  for (const std::string& address : group.addresses) {
    ASSERT_TRUE(
        RemoteLinear::Create(&client, address, "layer1", 64, 64, 1).ok());
    ASSERT_TRUE(
        RemoteLinear::Create(&client, address, "layer2", 64, 10, 11).ok());
  }
  v1::CreateZeroRequest spec = WithDigitsGroup(v1::CreateZeroRequest());
  spec.set_kind("sgd");
  spec.set_timeout_ms(30000);
  std::vector<absl::Status> results(kWorld);
  OnEveryRank(kWorld, [&](int r) {
    RemoteZero zero(&client, group.addresses[r]);
    results[r] = zero.Create(spec).status();
    return absl::OkStatus();
  }).IgnoreError();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kFailedPrecondition)
        << results[r];
    EXPECT_THAT(results[r].message(),
                HasSubstr("rank 0 (cpu) in host memory, rank 1 (cuda:0"))
        << results[r];
    const v1::GroupInfo info = testing::GetGroup(client, group.addresses[r]);
    EXPECT_EQ(info.state(), v1::GroupInfo::FAILED);
    EXPECT_THAT(info.error(), HasSubstr("mixed group"));
  }
}

TEST(GpuDataParallelTest, RanksOnTwoGpusRunNccl) {
  SKIP_WITHOUT_GPUS(2);
  v1::CreateZeroRequest spec = WithDigitsGroup(v1::CreateZeroRequest());
  spec.set_kind("adam");
  spec.set_gradient_sharded(true);
  std::vector<std::unique_ptr<RemoteZero>> handles;
  Group gpu = StartGroup({"cuda:0", "cuda:1"});
  ASSERT_EQ(gpu.addresses.size(), 2u);
  absl::StatusOr<Trained> trained = TrainDigits(gpu, Zero(spec, &handles));
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(trained->backend, "nccl");
  EXPECT_GE(trained->accuracy, 0.9);
  for (size_t p = 0; p < trained->models[0].size(); ++p) {
    EXPECT_TRUE(
        testing::SameBytes(trained->models[0][p], trained->models[1][p]))
        << kParameterNames[p];
  }
}

}  // namespace
}  // namespace distopt
