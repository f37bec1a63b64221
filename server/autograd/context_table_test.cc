#include "server/autograd/context_table.h"

#include "absl/time/clock.h"
#include "common/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/params/parameter_store.h"

namespace distopt {
namespace {

using ::testing::ElementsAre;

class ContextTableTest : public ::testing::Test {
 protected:
  std::shared_ptr<Parameter> MakeParameter(const std::string& name, DType dtype,
                                           Shape shape) {
    CreateParameterSpec spec;
    spec.name = name;
    spec.dtype = dtype;
    spec.shape = std::move(shape);
    const uint64_t id = store_.Create(spec)->id;
    return *store_.Find(ParameterKey::ById(id));
  }
  static Tensor Filled(DType dtype, Shape shape, double value) {
    Tensor t = *Tensor::AllocateHost(dtype, std::move(shape));
    CpuBackend()->Fill(t.data(), dtype, t.num_elements(), value).IgnoreError();
    return t;
  }

  MemoryBudget budget_{0, 0};
  ParameterStore store_{CpuBackend(), &budget_};
  ContextTable table_{absl::Minutes(10)};
};

TEST_F(ContextTableTest, GradientsAccumulatePerContextAndParameter) {
  auto w = MakeParameter("w", DType::kFloat32, {3});
  auto b = MakeParameter("b", DType::kBFloat16, {2});
  auto first = table_.GetOrCreate(7);
  ASSERT_TRUE(first
                  ->Accumulate(*w, Filled(DType::kFloat32, {3}, 0.5),
                               CpuBackend(), budget_)
                  .ok());
  ASSERT_TRUE(first
                  ->Accumulate(*w, Filled(DType::kFloat32, {3}, 0.25),
                               CpuBackend(), budget_)
                  .ok());
  ASSERT_TRUE(first
                  ->Accumulate(*b, Filled(DType::kBFloat16, {2}, 2.0),
                               CpuBackend(), budget_)
                  .ok());
  auto second = table_.GetOrCreate(8);
  ASSERT_TRUE(second
                  ->Accumulate(*w, Filled(DType::kFloat32, {3}, 1.0),
                               CpuBackend(), budget_)
                  .ok());

  std::optional<Tensor> gw = first->Gradient(w->id());
  ASSERT_TRUE(gw.has_value());
  EXPECT_THAT(gw->host_span<float>(), ElementsAre(0.75f, 0.75f, 0.75f));
  EXPECT_EQ(second->Gradient(w->id())->host_span<float>()[0], 1.0f);
  EXPECT_FALSE(second->Gradient(b->id()).has_value());
  // Parameters' values (12 + 4 bytes) and gradients (12 + 4 + 12).
  EXPECT_EQ(budget_.used_bytes(), 16u + 28u);

  const ContextInfo info = first->Info();
  EXPECT_EQ(info.id, 7u);
  EXPECT_THAT(info.parameter_ids, ElementsAre(w->id(), b->id()));
  EXPECT_EQ(info.bytes, 16u);
  EXPECT_EQ(table_.List().size(), 2u);
}

TEST_F(ContextTableTest, ReleaseFreesAndUnknownIsANoOp) {
  auto w = MakeParameter("w", DType::kFloat32, {1000});
  ASSERT_TRUE(table_.GetOrCreate(5)
                  ->Accumulate(*w, Filled(DType::kFloat32, {1000}, 1),
                               CpuBackend(), budget_)
                  .ok());
  EXPECT_EQ(budget_.used_bytes(), 8000u);
  EXPECT_TRUE(table_.Release(5));
  EXPECT_EQ(budget_.used_bytes(), 4000u);
  EXPECT_FALSE(table_.Release(5));
  EXPECT_FALSE(table_.Release(12345));
  EXPECT_EQ(table_.Find(5).status().code(), absl::StatusCode::kNotFound);
}

TEST(ContextCollectionTest, IdleContextsAreCollected) {
  absl::Time now = absl::FromUnixSeconds(1000);
  ContextTable table(absl::Minutes(10), [&now] { return now; });
  table.GetOrCreate(1);
  table.GetOrCreate(2);
  now += absl::Minutes(5);
  EXPECT_EQ(table.CollectIdle(now), 0u);
  table.GetOrCreate(2);  // Used again: stays.
  now += absl::Minutes(5) + absl::Seconds(1);
  EXPECT_EQ(table.CollectIdle(now), 1u);
  EXPECT_FALSE(table.Find(1).ok());
  EXPECT_TRUE(table.Find(2).ok());
}

TEST(ContextIdTest, ZeroIsRejected) {
  EXPECT_EQ(ValidateContextId(0, "context_id").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateContextId((uint64_t{3} << 48) | 1, "context_id").ok());
}

}  // namespace
}  // namespace distopt
