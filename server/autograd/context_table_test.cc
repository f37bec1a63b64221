#include "server/autograd/context_table.h"

#include <atomic>
#include <thread>
#include <vector>

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
  absl::Status Add(AutogradContext& context, const Parameter& parameter,
                   Tensor gradient) {
    GradientUpdate update;
    update.parameter = &parameter;
    update.dense = std::move(gradient);
    return context.Accumulate({update}, CpuBackend(), budget_);
  }
  std::shared_ptr<AutogradContext> Context(uint64_t id) {
    return *table_.GetOrCreate(id);
  }

  MemoryBudget budget_{0, 0};
  ParameterStore store_{CpuBackend(), &budget_};
  ContextTable table_{absl::Minutes(10), &budget_};
};

constexpr uint64_t kOverhead = ContextTable::kContextOverheadBytes;

TEST_F(ContextTableTest, GradientsAccumulatePerContextAndParameter) {
  auto w = MakeParameter("w", DType::kFloat32, {3});
  auto b = MakeParameter("b", DType::kBFloat16, {2});
  auto first = Context(7);
  ASSERT_TRUE(Add(*first, *w, Filled(DType::kFloat32, {3}, 0.5)).ok());
  ASSERT_TRUE(Add(*first, *w, Filled(DType::kFloat32, {3}, 0.25)).ok());
  ASSERT_TRUE(Add(*first, *b, Filled(DType::kBFloat16, {2}, 2.0)).ok());
  auto second = Context(8);
  ASSERT_TRUE(Add(*second, *w, Filled(DType::kFloat32, {3}, 1.0)).ok());

  std::optional<Tensor> gw = first->Gradient(w->id());
  ASSERT_TRUE(gw.has_value());
  EXPECT_THAT(gw->host_span<float>(), ElementsAre(0.75f, 0.75f, 0.75f));
  EXPECT_EQ(second->Gradient(w->id())->host_span<float>()[0], 1.0f);
  EXPECT_FALSE(second->Gradient(b->id()).has_value());
  // Parameters' values (12 + 4 bytes), gradients (12 + 4 + 12) and the
  // two contexts.
  EXPECT_EQ(budget_.used_bytes(), 16u + 28u + 2 * kOverhead);

  const ContextInfo info = first->Info();
  EXPECT_EQ(info.id, 7u);
  EXPECT_THAT(info.parameter_ids, ElementsAre(w->id(), b->id()));
  EXPECT_EQ(info.bytes, 16u);
  EXPECT_EQ(table_.List(0, 100).contexts.size(), 2u);
}

TEST_F(ContextTableTest, ReleaseFreesAndUnknownIsANoOp) {
  auto w = MakeParameter("w", DType::kFloat32, {1000});
  ASSERT_TRUE(Add(*Context(5), *w, Filled(DType::kFloat32, {1000}, 1)).ok());
  EXPECT_EQ(budget_.used_bytes(), 8000u + kOverhead);
  EXPECT_TRUE(*table_.Release(5));
  EXPECT_EQ(budget_.used_bytes(), 4000u);
  EXPECT_FALSE(*table_.Release(5));
  EXPECT_FALSE(*table_.Release(12345));
  EXPECT_EQ(table_.Find(5).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ContextTableTest, AnAccumulationThatDoesNotFitChangesNothing) {
  MemoryBudget tight(0, 4 * 1000 + kOverhead + 4 * 1000 + 4 * 10);
  ContextTable table(absl::Minutes(10), &tight);
  ParameterStore store(CpuBackend(), &tight);
  CreateParameterSpec spec;
  spec.name = "small";
  spec.shape = {10};
  const uint64_t small_id = store.Create(spec)->id;
  spec.name = "big";
  spec.shape = {1000};
  const uint64_t big_id = store.Create(spec)->id;
  auto small = *store.Find(ParameterKey::ById(small_id));
  auto big = *store.Find(ParameterKey::ById(big_id));
  auto context = *table.GetOrCreate(1);
  GradientUpdate first;
  first.parameter = small.get();
  first.dense = Filled(DType::kFloat32, {10}, 1);
  ASSERT_TRUE(context->Accumulate({first}, CpuBackend(), tight).ok());
  // The small parameter's gradient would change, the big one's does not fit:
  // neither changes.
  GradientUpdate second;
  second.parameter = big.get();
  second.dense = Filled(DType::kFloat32, {1000}, 1);
  const uint64_t used = tight.used_bytes();
  absl::Status status =
      context->Accumulate({first, second}, CpuBackend(), tight);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("\"big\""));
  EXPECT_EQ(tight.used_bytes(), used);
  EXPECT_THAT(context->Gradient(small_id)->host_span<float>(),
              ::testing::Each(1.0f));
  EXPECT_FALSE(context->Gradient(big_id).has_value());
}

TEST_F(ContextTableTest, ContextsCountAgainstTheBudgetAndPage) {
  MemoryBudget tight(0, 3 * kOverhead);
  ContextTable table(absl::Minutes(10), &tight);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(table.GetOrCreate(id).ok());
  EXPECT_EQ(table.GetOrCreate(4).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(table.GetOrCreate(2).ok());  // Existing ones still work.
  ContextPage page = table.List(0, 2);
  ASSERT_EQ(page.contexts.size(), 2u);
  EXPECT_EQ(page.contexts[1].id, 2u);
  ASSERT_TRUE(page.next_after_id.has_value());
  page = table.List(*page.next_after_id, 2);
  ASSERT_EQ(page.contexts.size(), 1u);
  EXPECT_EQ(page.contexts[0].id, 3u);
  EXPECT_FALSE(page.next_after_id.has_value());
  table.ReleaseIfUnused(*table.Find(3));
  EXPECT_TRUE(table.GetOrCreate(4).ok());
}

// A context belongs to the identity that made it.
TEST_F(ContextTableTest, AnotherIdentityCannotUseAContext) {
  ASSERT_TRUE(table_.GetOrCreate(9, "CN=alice").ok());
  for (const char* other : {"CN=bob", ""}) {
    EXPECT_EQ(table_.Find(9, other).status().code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(table_.GetOrCreate(9, other).status().code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(table_.Release(9, other).status().code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_TRUE(table_.List(0, 10, other).contexts.empty());
  }
  EXPECT_TRUE(table_.Find(9, "CN=alice").ok());
  EXPECT_EQ(table_.List(0, 10, "CN=alice").contexts.size(), 1u);
  EXPECT_TRUE(*table_.Release(9, "CN=alice"));
}

// Accumulations, look-ups and listings from many threads at once (run
// under --config=tsan too): every accumulation counts exactly once.
TEST_F(ContextTableTest, AccumulationsFromManyThreadsAllCount) {
  auto w = MakeParameter("w", DType::kFloat32, {4});
  constexpr int kThreads = 6;
  constexpr int kAdds = 300;
  constexpr uint64_t kContexts = 5;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        const uint64_t id = 1 + (t + i) % kContexts;
        absl::StatusOr<std::shared_ptr<AutogradContext>> context =
            table_.GetOrCreate(id);
        ASSERT_TRUE(context.ok()) << context.status();
        ASSERT_TRUE(Add(**context, *w, Filled(DType::kFloat32, {4}, 1)).ok());
        if (i % 16 == 0) {
          EXPECT_LE(table_.List(0, 100).contexts.size(), kContexts);
          EXPECT_TRUE(table_.Find(id).ok());
          (*context)->Info();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  float total = 0;
  for (uint64_t id = 1; id <= kContexts; ++id) {
    total += (*table_.Find(id))->Gradient(w->id())->host_span<float>()[3];
    EXPECT_TRUE(*table_.Release(id));
  }
  EXPECT_EQ(total, static_cast<float>(kThreads * kAdds));
  EXPECT_EQ(budget_.used_bytes(), 16u);  // The parameter alone.
}

// Contexts made, used, released and collected by different threads at
// once: whatever the interleaving, nothing stays charged to the budget.
TEST_F(ContextTableTest, ReleaseAndCollectionRacingWithUseLeaveNothing) {
  auto w = MakeParameter("w", DType::kFloat32, {8});
  std::atomic<int64_t> clock_seconds{0};
  ContextTable table(absl::Seconds(1), &budget_, [&] {
    return absl::FromUnixSeconds(clock_seconds.load());
  });
  std::atomic<bool> done{false};
  std::thread collector([&] {
    while (!done.load()) {
      clock_seconds += 1;
      table.CollectIdle(absl::FromUnixSeconds(clock_seconds.load() + 2));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 5; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 400; ++i) {
        const uint64_t id = 1 + (i * 7 + t) % 9;
        absl::StatusOr<std::shared_ptr<AutogradContext>> context =
            table.GetOrCreate(id);
        ASSERT_TRUE(context.ok()) << context.status();
        Add(**context, *w, Filled(DType::kFloat32, {8}, 1)).IgnoreError();
        if (i % 3 == 0) table.Release(id).IgnoreError();
        if (i % 5 == 0) table.ReleaseIfUnused(*context);
        if (i % 4 == 0) EXPECT_LE(table.List(0, 100).contexts.size(), 9u);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done = true;
  collector.join();
  for (uint64_t id = 1; id <= 9; ++id) table.Release(id).IgnoreError();
  EXPECT_TRUE(table.List(0, 100).contexts.empty());
  EXPECT_EQ(budget_.used_bytes(), 32u);  // The parameter alone.
}

TEST(BackwardClaimTest, OnceThenRetriesWithTheSameGradientsOnly) {
  AutogradContext context(1, absl::Now(), Reservation());
  const uint64_t forward = context.AddForward({});
  using Claim = AutogradContext::BackwardClaim;
  EXPECT_EQ(*context.BeginBackward(forward, 42), Claim::kFirst);
  EXPECT_EQ(context.BeginBackward(forward, 42).status().code(),
            absl::StatusCode::kAborted);         // In progress.
  context.EndBackward(forward, /*done=*/false);  // Failed: may run again.
  EXPECT_EQ(*context.BeginBackward(forward, 7), Claim::kFirst);
  context.EndBackward(forward, /*done=*/true);
  EXPECT_EQ(*context.BeginBackward(forward, 7), Claim::kRetry);
  EXPECT_EQ(context.BeginBackward(forward, 42).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(context.BeginBackward(forward + 1, 7).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ContextCollectionTest, IdleContextsAreCollected) {
  absl::Time now = absl::FromUnixSeconds(1000);
  MemoryBudget budget(0, 0);
  ContextTable table(absl::Minutes(10), &budget, [&now] { return now; });
  ASSERT_TRUE(table.GetOrCreate(1).ok());
  ASSERT_TRUE(table.GetOrCreate(2).ok());
  now += absl::Minutes(5);
  EXPECT_EQ(table.CollectIdle(now), 0u);
  ASSERT_TRUE(table.GetOrCreate(2).ok());  // Used again: stays.
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
