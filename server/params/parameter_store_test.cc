#include "server/params/parameter_store.h"

#include <atomic>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/params/parameter_write.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

class ParameterStoreTest : public ::testing::Test {
 protected:
  CreateParameterSpec Spec(const std::string& name, Shape shape,
                           Initializer init = ZerosInit{}) {
    CreateParameterSpec spec;
    spec.name = name;
    spec.shape = std::move(shape);
    spec.initializer = init;
    return spec;
  }

  std::vector<float> Values(uint64_t id) {
    std::shared_ptr<Parameter> p = *store_.Find(ParameterKey::ById(id));
    ParameterInfo info = p->Info();
    std::vector<float> out(info.num_elements);
    EXPECT_TRUE(p->ReadBytes(info.version, 0, info.byte_size, out.data()).ok());
    return out;
  }

  MemoryBudget budget_{0, 0};
  ParameterStore store_{CpuBackend(), &budget_};
};

TEST_F(ParameterStoreTest, CreatesAndFindsByIdAndName) {
  absl::StatusOr<ParameterInfo> a =
      store_.Create(Spec("a", {2, 2}, ConstantInit{3}));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->id, 1u);
  EXPECT_EQ(a->version, 1u);
  EXPECT_EQ(budget_.used_bytes(), 16u);
  EXPECT_EQ((*store_.Find(ParameterKey::ByName("a")))->id(), a->id);
  EXPECT_THAT(Values(a->id), ::testing::Each(3.0f));
  EXPECT_EQ(store_.Find(ParameterKey::ById(99)).status().code(),
            absl::StatusCode::kNotFound);
}

ParameterInfo Saved(uint64_t id, const std::string& name, int64_t count) {
  ParameterInfo info;
  info.id = id;
  info.name = name;
  info.shape = {count};
  info.num_elements = count;
  info.byte_size = count * 4;
  info.version = 7;
  return info;
}

// A checkpoint's parameters come back together: every tensor is there for
// one fill, and all are added with their ids, names and versions.
TEST_F(ParameterStoreTest, RestoresEveryParameterAtOnce) {
  const std::vector<ParameterInfo> infos = {Saved(4, "a", 3), Saved(9, "b", 2)};
  ASSERT_TRUE(store_
                  .Restore(infos,
                           [](absl::Span<Tensor> values) {
                             EXPECT_EQ(values.size(), 2u);
                             for (size_t i = 0; i < values.size(); ++i) {
                               for (float& x : values[i].host_span<float>()) {
                                 x = static_cast<float>(i + 1);
                               }
                             }
                             return absl::OkStatus();
                           })
                  .ok());
  EXPECT_THAT(Values(4), ::testing::ElementsAre(1, 1, 1));
  EXPECT_THAT(Values(9), ::testing::ElementsAre(2, 2));
  EXPECT_EQ((*store_.Find(ParameterKey::ByName("b")))->Info().version, 7u);
  EXPECT_EQ(store_.next_id(), 10u);
  EXPECT_EQ(budget_.used_bytes(), 20u);
}

// A fill that fails leaves the store (and the budget) as it was.
TEST_F(ParameterStoreTest, AFailedRestoreAddsNothing) {
  const std::vector<ParameterInfo> infos = {Saved(4, "a", 3), Saved(9, "b", 2)};
  const absl::Status status = store_.Restore(
      infos, [](absl::Span<Tensor>) { return absl::DataLossError("damaged"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store_.Count().parameters, 0u);
  EXPECT_EQ(budget_.used_bytes(), 0u);
}

// Taken ids or names, and ids or names twice in one checkpoint, are
// refused before anything is read.
TEST_F(ParameterStoreTest, ARestoreOfTakenOrRepeatedIdsReadsNothing) {
  ASSERT_TRUE(store_.Create(Spec("taken", {1})).ok());  // Id 1.
  const std::vector<std::vector<ParameterInfo>> refused = {
      {Saved(1, "other", 1)},
      {Saved(5, "taken", 1)},
      {Saved(5, "x", 1), Saved(5, "y", 1)},
      {Saved(5, "x", 1), Saved(6, "x", 1)},
  };
  for (const std::vector<ParameterInfo>& infos : refused) {
    bool filled = false;
    const absl::Status status = store_.Restore(infos, [&](absl::Span<Tensor>) {
      filled = true;
      return absl::OkStatus();
    });
    EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
    EXPECT_FALSE(filled) << status;
  }
  EXPECT_EQ(store_.Count().parameters, 1u);
}

// Over the budget: refused before anything is read, naming the parameter.
TEST(ParameterStoreBudgetTest, ARestoreOverTheBudgetReadsNothing) {
  MemoryBudget budget(0, 64);
  ParameterStore store(CpuBackend(), &budget);
  bool filled = false;
  const absl::Status status = store.Restore(
      {Saved(1, "fits", 8), Saved(2, "over", 16)}, [&](absl::Span<Tensor>) {
        filled = true;
        return absl::OkStatus();
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("\"over\""));
  EXPECT_FALSE(filled);
  EXPECT_EQ(budget.used_bytes(), 0u);
}

// Ids are never reused, not even after a checkpoint that used them up:
// the last one ends them instead of wrapping around to 0 and 1.
TEST_F(ParameterStoreTest, IdsNeverWrapAround) {
  store_.ReserveIdsBelow(std::numeric_limits<uint64_t>::max() - 1);
  absl::StatusOr<ParameterInfo> last = store_.Create(Spec("last", {1}));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->id, std::numeric_limits<uint64_t>::max() - 1);
  absl::StatusOr<ParameterInfo> more = store_.Create(Spec("more", {1}));
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(more.status().message(), HasSubstr("no parameter ids left"));
  EXPECT_EQ(store_.List("", 0, 10).parameters.size(), 1u);
}

TEST_F(ParameterStoreTest, RefusalsChangeNothing) {
  ASSERT_TRUE(store_.Create(Spec("a", {4})).ok());
  EXPECT_EQ(store_.Create(Spec("a", {4})).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_.Create(Spec("", {4})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Create(Spec(std::string(257, 'x'), {4})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Create(Spec("b", {-4})).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string three_bytes = "abc";
  EXPECT_EQ(
      store_.Create(Spec("c", {1}, ValuesInit{three_bytes})).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.List("", 0, 100).parameters.size(), 1u);
  EXPECT_EQ(budget_.used_bytes(), 16u);
  // The next id is not consumed by refusals.
  EXPECT_EQ(store_.Create(Spec("d", {1}))->id, 2u);
}

TEST_F(ParameterStoreTest, ListsInIdOrderWithPrefixAndPages) {
  for (const char* name : {"x.1", "y.1", "x.2", "x.3"}) {
    ASSERT_TRUE(store_.Create(Spec(name, {1})).ok());
  }
  ParameterPage page = store_.List("x.", 0, 2);
  ASSERT_EQ(page.parameters.size(), 2u);
  EXPECT_EQ(page.parameters[0].name, "x.1");
  EXPECT_EQ(page.parameters[1].name, "x.2");
  ASSERT_TRUE(page.next_after_id.has_value());
  page = store_.List("x.", *page.next_after_id, 2);
  ASSERT_EQ(page.parameters.size(), 1u);
  EXPECT_EQ(page.parameters[0].name, "x.3");
  EXPECT_FALSE(page.next_after_id.has_value());
}

TEST_F(ParameterStoreTest, DeleteFreesTheNameAndTheBudget) {
  ASSERT_TRUE(store_.Create(Spec("a", {8})).ok());
  absl::StatusOr<ParameterInfo> deleted =
      store_.Delete(ParameterKey::ByName("a"));
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(budget_.used_bytes(), 0u);
  EXPECT_EQ(store_.Delete(ParameterKey::ByName("a")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.Create(Spec("a", {8}))->id, 2u);
}

TEST_F(ParameterStoreTest, RandomInitializersAreDeterministic) {
  const uint64_t a = store_.Create(Spec("a", {257}, UniformInit{-1, 1, 5}))->id;
  const uint64_t b = store_.Create(Spec("b", {257}, UniformInit{-1, 1, 5}))->id;
  const uint64_t c = store_.Create(Spec("c", {257}, NormalInit{0, 1, 5}))->id;
  const uint64_t d = store_.Create(Spec("d", {257}, NormalInit{0, 1, 5}))->id;
  EXPECT_EQ(Values(a), Values(b));
  EXPECT_EQ(Values(c), Values(d));
  EXPECT_NE(Values(a), Values(c));
}

// A chunk at an offset near the largest there is is refused, its message
// made without computing where it would end (found by the wire fuzzer
// under UBSan: offset INT64_MAX + 15 bytes overflowed).
TEST_F(ParameterStoreTest, AChunkAtAHugeOffsetIsRefused) {
  const uint64_t id = store_.Create(Spec("a", {4}, ConstantInit{1}))->id;
  std::shared_ptr<Parameter> p = *store_.Find(ParameterKey::ById(id));
  auto write = *ParameterWrite::Begin(p, store_);
  const std::string bytes(15, 'x');
  for (int64_t offset : {std::numeric_limits<int64_t>::max(),
                         std::numeric_limits<int64_t>::max() - 7,
                         std::numeric_limits<int64_t>::min()}) {
    absl::Status status = write->AddChunk(offset, bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << offset;
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("a chunk of 15 bytes at offset ", offset,
                                       " is outside the parameter")));
  }
}

TEST_F(ParameterStoreTest, WriteCommitsAllOrNothing) {
  const uint64_t id = store_.Create(Spec("a", {4}, ConstantInit{1}))->id;
  std::shared_ptr<Parameter> p = *store_.Find(ParameterKey::ById(id));
  const float next[4] = {5, 6, 7, 8};
  const absl::string_view bytes(reinterpret_cast<const char*>(next), 16);
  {
    auto write = *ParameterWrite::Begin(p, store_);
    EXPECT_EQ(budget_.used_bytes(), 32u);  // The staging copy counts.
    ASSERT_TRUE(write->AddChunk(8, bytes.substr(8)).ok());
    EXPECT_EQ(write->AddChunk(4, bytes.substr(4, 8)).code(),
              absl::StatusCode::kInvalidArgument);
    absl::StatusOr<ParameterInfo> short_write = write->Commit();
    EXPECT_EQ(short_write.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(short_write.status().message(),
                HasSubstr("first missing byte: 0"));
  }  // Abandoned: nothing changes and the staging bytes come back.
  EXPECT_EQ(budget_.used_bytes(), 16u);
  EXPECT_THAT(Values(id), ::testing::Each(1.0f));
  EXPECT_EQ(p->Info().version, 1u);

  auto write = *ParameterWrite::Begin(p, store_);
  ASSERT_TRUE(write->AddChunk(8, bytes.substr(8)).ok());
  ASSERT_TRUE(write->AddChunk(0, bytes.substr(0, 8)).ok());
  absl::StatusOr<ParameterInfo> info = write->Commit();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version, 2u);
  EXPECT_EQ(Values(id), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(budget_.used_bytes(), 16u);
}

TEST_F(ParameterStoreTest, WriteToADeletedParameterIsNotFound) {
  const uint64_t id = store_.Create(Spec("a", {1}))->id;
  auto write =
      *ParameterWrite::Begin(*store_.Find(ParameterKey::ById(id)), store_);
  const float one = 1;
  ASSERT_TRUE(write
                  ->AddChunk(0, absl::string_view(
                                    reinterpret_cast<const char*>(&one), 4))
                  .ok());
  ASSERT_TRUE(store_.Delete(ParameterKey::ById(id)).ok());
  EXPECT_EQ(write->Commit().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ParameterStoreTest, ReadersSeeOldOrNewValuesNeverAMix) {
  constexpr int kElements = 1 << 16;
  const uint64_t id =
      store_.Create(Spec("a", {kElements}, ConstantInit{0}))->id;
  std::shared_ptr<Parameter> p = *store_.Find(ParameterKey::ById(id));
  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::vector<float> values(kElements);
    for (int round = 1; round <= 200; ++round) {
      std::fill(values.begin(), values.end(), static_cast<float>(round));
      auto write = *ParameterWrite::Begin(p, store_);
      const char* bytes = reinterpret_cast<const char*>(values.data());
      // Two halves, so a torn commit would show up as two values.
      ASSERT_TRUE(write->AddChunk(0, {bytes, kElements * 2}).ok());
      ASSERT_TRUE(
          write->AddChunk(kElements * 2, {bytes + kElements * 2, kElements * 2})
              .ok());
      ASSERT_TRUE(write->Commit().ok());
    }
    done = true;
  });
  std::vector<float> out(kElements);
  int reads = 0;
  while (!done) {
    const ParameterInfo info = p->Info();
    absl::Status status =
        p->ReadBytes(info.version, 0, info.byte_size, out.data());
    if (!status.ok()) {
      ASSERT_EQ(status.code(), absl::StatusCode::kAborted);
      continue;
    }
    ++reads;
    for (float v : out) ASSERT_EQ(v, out[0]);
  }
  writer.join();
  EXPECT_GT(reads, 0);
  EXPECT_THAT(Values(id), ::testing::Each(200.0f));
  EXPECT_EQ(p->Info().version, 201u);
}

TEST(MemoryBudgetTest, EnforcesPerTensorAndTotalLimits) {
  MemoryBudget budget(100, 250);
  EXPECT_EQ(budget.Reserve(101, "t").status().code(),
            absl::StatusCode::kResourceExhausted);
  absl::StatusOr<Reservation> a = budget.Reserve(100, "a");
  absl::StatusOr<Reservation> b = budget.Reserve(100, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<Reservation> c = budget.Reserve(51, "c");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("expected at most 50"));
  EXPECT_TRUE(budget.Reserve(50, "d").ok());  // Released at once.
  { Reservation moved = *std::move(a); }
  EXPECT_EQ(budget.used_bytes(), 100u);
}

// Creations, look-ups, listings and deletions from many threads at once
// (run under --config=tsan too): every parameter made is found, listed
// consistently and deleted, and the budget is whole again at the end.
TEST_F(ParameterStoreTest, CreatesFindsListsAndDeletesFromManyThreads) {
  constexpr int kThreads = 6;
  constexpr int kRounds = 150;
  std::atomic<bool> done{false};
  std::atomic<int> listed{0};
  std::thread lister([&] {
    while (!done.load()) {
      ParameterPage page = store_.List("", 0, 1000);
      for (size_t i = 1; i < page.parameters.size(); ++i) {
        ASSERT_LT(page.parameters[i - 1].id, page.parameters[i].id);
      }
      listed += static_cast<int>(page.parameters.size());
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const std::string name =
            "t" + std::to_string(t) + "/" + std::to_string(r);
        absl::StatusOr<ParameterInfo> made = store_.Create(Spec(name, {16}));
        ASSERT_TRUE(made.ok()) << made.status();
        absl::StatusOr<std::shared_ptr<Parameter>> found =
            store_.Find(ParameterKey::ByName(name));
        ASSERT_TRUE(found.ok()) << found.status();
        ASSERT_EQ((*found)->id(), made->id);
        ASSERT_TRUE(store_.Delete(ParameterKey::ById(made->id)).ok());
        EXPECT_EQ(store_.Find(ParameterKey::ById(made->id)).status().code(),
                  absl::StatusCode::kNotFound);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done = true;
  lister.join();
  EXPECT_TRUE(store_.List("", 0, 1000).parameters.empty());
  EXPECT_EQ(budget_.used_bytes(), 0u);
}

// Reservations taken, resized and given back from many threads never pass
// the total limit, and all of them come back.
TEST(MemoryBudgetTest, HoldsItsLimitsUnderManyThreads) {
  constexpr uint64_t kTotal = 10000;
  MemoryBudget budget(1000, kTotal);
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      uint64_t seed = 12345 + t;
      std::vector<Reservation> held;
      for (int i = 0; i < 3000; ++i) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const uint64_t bytes = 1 + (seed >> 33) % 1000;
        switch ((seed >> 20) % 4) {
          case 0:
          case 1: {
            absl::StatusOr<Reservation> r = budget.Reserve(bytes, "t");
            if (r.ok()) {
              held.push_back(*std::move(r));
            } else {
              ++refused;
            }
            break;
          }
          case 2:
            if (!held.empty()) {
              if (!budget.Resize(held.back(), bytes, "t").ok()) ++refused;
            }
            break;
          case 3:
            if (!held.empty()) held.pop_back();
            break;
        }
        ASSERT_LE(budget.used_bytes(), kTotal);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_GT(refused.load(), 0) << "the limit was never reached";
  EXPECT_EQ(budget.used_bytes(), 0u);
}

}  // namespace
}  // namespace distopt
