// linear and embedding: forward values, and backward against the analytic
// formula and central finite differences.
#include <cmath>
#include <random>

#include "common/backend.h"
#include "common/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/autograd/op_registry.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

Tensor Random(const Shape& shape, std::mt19937& rng) {
  Tensor t = *Tensor::AllocateHost(DType::kFloat32, shape);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (float& x : t.host_span<float>()) x = uniform(rng);
  return t;
}

// L = sum(linear(x, W, b) * r): dL/dy = r.
double Loss(const AutogradOp& op, const Tensor& x, const Tensor& w,
            const Tensor& b, const Tensor& r) {
  std::vector<Tensor> saved;
  std::vector<Tensor> y = *op.Forward({x}, {&w, &b}, &saved);
  double loss = 0;
  for (int64_t i = 0; i < r.num_elements(); ++i) {
    loss += static_cast<double>(y[0].host_span<float>()[i]) *
            r.host_span<float>()[i];
  }
  return loss;
}

TEST(LinearOpTest, ForwardAndBackwardMatchFormulaAndFiniteDifferences) {
  OpRegistry registry;
  const AutogradOp& linear = **registry.Find("linear");
  std::mt19937 rng(7);
  const int64_t n = 5, in = 4, out = 3;
  Tensor x = Random({n, in}, rng);
  Tensor w = Random({out, in}, rng);
  Tensor b = Random({out}, rng);
  Tensor r = Random({n, out}, rng);

  std::vector<Tensor> saved;
  std::vector<Tensor> y = *linear.Forward({x}, {&w, &b}, &saved);
  const float* X = x.host_span<float>().data();
  const float* W = w.host_span<float>().data();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double expected = b.host_span<float>()[o];
      for (int64_t k = 0; k < in; ++k)
        expected += X[i * in + k] * W[o * in + k];
      EXPECT_NEAR(y[0].host_span<float>()[i * out + o], expected, 1e-5);
    }
  }

  OpGradients g = *linear.Backward(saved, {&w, &b}, {r});
  const float* R = r.host_span<float>().data();
  // Analytic: dx = r W, dW = r^T x, db = column sums of r.
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < in; ++k) {
      double expected = 0;
      for (int64_t o = 0; o < out; ++o)
        expected += R[i * out + o] * W[o * in + k];
      EXPECT_NEAR(g.inputs[0]->host_span<float>()[i * in + k], expected, 1e-5);
    }
  }
  for (int64_t o = 0; o < out; ++o) {
    double db = 0;
    for (int64_t i = 0; i < n; ++i) db += R[i * out + o];
    EXPECT_NEAR(g.parameters[1].dense->host_span<float>()[o], db, 1e-5);
    for (int64_t k = 0; k < in; ++k) {
      double expected = 0;
      for (int64_t i = 0; i < n; ++i)
        expected += R[i * out + o] * X[i * in + k];
      EXPECT_NEAR(g.parameters[0].dense->host_span<float>()[o * in + k],
                  expected, 1e-5);
    }
  }
  // Finite differences on every element of W, b and x.
  const float h = 1e-2f;
  auto check = [&](Tensor& t, const Tensor& gradient) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      float& v = t.host_span<float>()[i];
      const float saved_value = v;
      v = saved_value + h;
      const double up = Loss(linear, x, w, b, r);
      v = saved_value - h;
      const double down = Loss(linear, x, w, b, r);
      v = saved_value;
      EXPECT_NEAR(gradient.host_span<float>()[i], (up - down) / (2 * h), 2e-3);
    }
  };
  check(w, *g.parameters[0].dense);
  check(b, *g.parameters[1].dense);
  check(x, *g.inputs[0]);
}

TEST(LinearOpTest, RejectsMismatchedShapes) {
  OpRegistry registry;
  const AutogradOp& linear = **registry.Find("linear");
  std::mt19937 rng(1);
  Tensor x = Random({2, 5}, rng);
  Tensor w = Random({3, 4}, rng);
  std::vector<Tensor> saved;
  absl::StatusOr<std::vector<Tensor>> y = linear.Forward({x}, {&w}, &saved);
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(),
              HasSubstr("inputs[0]: x [2, 5]; expected [N, 4]"));
  EXPECT_THAT(registry.Find("conv2d").status().message(),
              HasSubstr("expected one of embedding, linear"));
}

// Runs on a machine with a GPU; elsewhere it reports itself skipped.
TEST(LinearOpTest, GpuMatchesCpu) {
  absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(Device::Cuda(0));
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA GPU: " << gpu.status().message();
  OpRegistry registry;
  const AutogradOp& linear = **registry.Find("linear");
  std::mt19937 rng(11);
  Tensor x = Random({33, 17}, rng);
  Tensor w = Random({9, 17}, rng);
  Tensor b = Random({9}, rng);
  Tensor dy = Random({33, 9}, rng);
  Tensor w_gpu = *w.CloneTo(*gpu);
  Tensor b_gpu = *b.CloneTo(*gpu);
  std::vector<Tensor> saved_cpu, saved_gpu;
  std::vector<Tensor> y_cpu = *linear.Forward({x}, {&w, &b}, &saved_cpu);
  absl::StatusOr<std::vector<Tensor>> y_gpu =
      linear.Forward({x}, {&w_gpu, &b_gpu}, &saved_gpu);
  ASSERT_TRUE(y_gpu.ok()) << y_gpu.status();
  for (int64_t i = 0; i < y_cpu[0].num_elements(); ++i) {
    EXPECT_NEAR((*y_gpu)[0].host_span<float>()[i],
                y_cpu[0].host_span<float>()[i], 1e-4);
  }
  OpGradients g_cpu = *linear.Backward(saved_cpu, {&w, &b}, {dy});
  absl::StatusOr<OpGradients> g_gpu =
      linear.Backward(saved_gpu, {&w_gpu, &b_gpu}, {dy});
  ASSERT_TRUE(g_gpu.ok()) << g_gpu.status();
  auto expect_near = [](const Tensor& a, const Tensor& b) {
    Tensor host = *a.CloneTo(CpuBackend());
    for (int64_t i = 0; i < b.num_elements(); ++i) {
      EXPECT_NEAR(host.host_span<float>()[i], b.host_span<float>()[i], 1e-4);
    }
  };
  expect_near(*g_gpu->inputs[0], *g_cpu.inputs[0]);
  expect_near(*g_gpu->parameters[0].dense, *g_cpu.parameters[0].dense);
  expect_near(*g_gpu->parameters[1].dense, *g_cpu.parameters[1].dense);
}

// Runs on a machine with a GPU; elsewhere it reports itself skipped.
TEST(EmbeddingOpTest, GpuGatherMatchesCpu) {
  absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(Device::Cuda(0));
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA GPU: " << gpu.status().message();
  OpRegistry registry;
  const AutogradOp& embedding = **registry.Find("embedding");
  std::mt19937 rng(5);
  Tensor table = Random({50, 7}, rng);
  Tensor table_gpu = *table.CloneTo(*gpu);
  Tensor indices = *Tensor::AllocateHost(DType::kInt64, {4, 5});
  for (int i = 0; i < 20; ++i) indices.host_span<int64_t>()[i] = (i * 13) % 50;
  std::vector<Tensor> saved_cpu, saved_gpu;
  std::vector<Tensor> cpu = *embedding.Forward({indices}, {&table}, &saved_cpu);
  absl::StatusOr<std::vector<Tensor>> on_gpu =
      embedding.Forward({indices}, {&table_gpu}, &saved_gpu);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  ASSERT_EQ((*on_gpu)[0].shape(), cpu[0].shape());
  for (int64_t i = 0; i < cpu[0].num_elements(); ++i) {
    EXPECT_EQ((*on_gpu)[0].host_span<float>()[i], cpu[0].host_span<float>()[i]);
  }
}

TEST(EmbeddingOpTest, LooksUpRowsAndGivesRowGradients) {
  OpRegistry registry;
  const AutogradOp& embedding = **registry.Find("embedding");
  std::mt19937 rng(3);
  Tensor table = Random({10, 4}, rng);
  Tensor indices = *Tensor::AllocateHost(DType::kInt64, {2, 3});
  const int64_t picks[6] = {7, 0, 7, 9, 2, 2};
  for (int i = 0; i < 6; ++i) indices.host_span<int64_t>()[i] = picks[i];
  std::vector<Tensor> saved;
  std::vector<Tensor> out = *embedding.Forward({indices}, {&table}, &saved);
  ASSERT_EQ(out[0].shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 6; ++i) {
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(out[0].host_span<float>()[i * 4 + d],
                table.host_span<float>()[picks[i] * 4 + d]);
    }
  }
  Tensor dy = Random({2, 3, 4}, rng);
  OpGradients g = *embedding.Backward(saved, {&table}, {dy});
  EXPECT_FALSE(g.inputs[0].has_value());
  EXPECT_THAT(g.parameters[0].rows, ::testing::ElementsAre(7, 0, 7, 9, 2, 2));
  EXPECT_EQ(g.parameters[0].row_values.shape(), (Shape{6, 4}));

  // Finite differences of L = sum(embedding(indices) * dy) on every table
  // element: only rows 0, 2, 7 and 9 have a gradient, row 7 and row 2 twice.
  auto loss = [&]() {
    std::vector<Tensor> unused;
    std::vector<Tensor> y = *embedding.Forward({indices}, {&table}, &unused);
    double sum = 0;
    for (int64_t i = 0; i < dy.num_elements(); ++i) {
      sum += static_cast<double>(y[0].host_span<float>()[i]) *
             dy.host_span<float>()[i];
    }
    return sum;
  };
  std::vector<double> dense(40, 0.0);
  for (size_t r = 0; r < g.parameters[0].rows.size(); ++r) {
    for (int d = 0; d < 4; ++d) {
      dense[g.parameters[0].rows[r] * 4 + d] +=
          g.parameters[0].row_values.host_span<float>()[r * 4 + d];
    }
  }
  const float h = 1e-2f;
  for (int i = 0; i < 40; ++i) {
    float& v = table.host_span<float>()[i];
    const float kept = v;
    v = kept + h;
    const double up = loss();
    v = kept - h;
    const double down = loss();
    v = kept;
    EXPECT_NEAR(dense[i], (up - down) / (2 * h), 2e-3) << "element " << i;
  }

  indices.host_span<int64_t>()[4] = 10;
  std::vector<Tensor> unused;
  absl::StatusOr<std::vector<Tensor>> bad =
      embedding.Forward({indices}, {&table}, &unused);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      bad.status().message(),
      HasSubstr("index 10 at position 4 is out of range; expected 0 to 9"));
}

// A few bytes of input must not make a huge output: the limit is checked
// before anything is allocated (a weight with no input features makes an
// x of 2^26 rows and no columns, an empty tensor, into 1 GiB of output).
TEST(OpOutputLimitTest, OutputsPastTheLimitAreRefusedBeforeAllocation) {
  OpRegistry registry;
  const AutogradOp& linear = **registry.Find("linear");
  const Tensor w = *Tensor::AllocateHost(DType::kFloat32, {4, 0});
  const Tensor x =
      *Tensor::AllocateHost(DType::kFloat32, {int64_t{1} << 26, 0});
  std::vector<Tensor> saved;
  absl::StatusOr<std::vector<Tensor>> y =
      linear.Forward({x}, {&w}, &saved, /*output_limit=*/1 << 20);
  EXPECT_EQ(y.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(y.status().message(),
              HasSubstr("the outputs would take 1073741824 bytes"));
  // Rows times columns past int64 is refused too, not wrapped.
  const Tensor wide =
      *Tensor::AllocateHost(DType::kFloat32, {int64_t{1} << 40, 0});
  const Tensor tall =
      *Tensor::AllocateHost(DType::kFloat32, {int64_t{1} << 40, 0});
  y = linear.Forward({tall}, {&wide}, &saved, /*output_limit=*/1 << 20);
  EXPECT_EQ(y.status().code(), absl::StatusCode::kResourceExhausted);

  const AutogradOp& embedding = **registry.Find("embedding");
  Tensor table = *Tensor::AllocateHost(DType::kFloat32, {1, 1024});
  Tensor indices = *Tensor::AllocateHost(DType::kInt64, {1000});
  for (int64_t& i : indices.host_span<int64_t>()) i = 0;
  absl::StatusOr<std::vector<Tensor>> rows =
      embedding.Forward({indices}, {&table}, &saved, /*output_limit=*/1 << 20);
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kResourceExhausted);
  rows = embedding.Forward({indices}, {&table}, &saved,
                           /*output_limit=*/4 * 1024 * 1000);
  EXPECT_TRUE(rows.ok()) << rows.status();
}

}  // namespace
}  // namespace distopt
