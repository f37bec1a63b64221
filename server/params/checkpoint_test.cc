#include "server/params/checkpoint.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/params/parameter_write.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
  }

  static std::vector<char> Bytes(const ParameterStore& store, uint64_t id) {
    std::shared_ptr<Parameter> p = *store.Find(ParameterKey::ById(id));
    const ParameterInfo info = p->Info();
    std::vector<char> out(info.byte_size);
    EXPECT_TRUE(p->ReadBytes(info.version, 0, out.size(), out.data()).ok());
    return out;
  }

  // Fills `store` with parameters of every dtype, a 0-d, an empty and one
  // larger than a copy block; bumps one version with a write.
  void Populate(ParameterStore& store) {
    CreateParameterSpec spec;
    spec.name = "w";
    spec.shape = {3, 5};
    spec.initializer = UniformInit{-1, 1, 3};
    ASSERT_TRUE(store.Create(spec).ok());
    spec.name = "scalar";
    spec.dtype = DType::kBFloat16;
    spec.shape = {};
    spec.initializer = ConstantInit{2.5};
    ASSERT_TRUE(store.Create(spec).ok());
    spec.name = "gone";
    ASSERT_TRUE(store.Create(spec).ok());
    ASSERT_TRUE(store.Delete(ParameterKey::ByName("gone")).ok());
    spec.name = "empty";
    spec.dtype = DType::kInt64;
    spec.shape = {0, 7};
    spec.initializer = ZerosInit{};
    ASSERT_TRUE(store.Create(spec).ok());
    spec.name = "big";  // 72 MiB of fp16: more than one 64 MiB block.
    spec.dtype = DType::kFloat16;
    spec.shape = {9, 4 << 20};
    spec.initializer = NormalInit{0, 1, 9};
    ASSERT_TRUE(store.Create(spec).ok());
    std::shared_ptr<Parameter> w = *store.Find(ParameterKey::ByName("w"));
    auto write = *ParameterWrite::Begin(w, store);
    std::vector<float> values(15, 0.75f);
    ASSERT_TRUE(
        write->AddChunk(0, {reinterpret_cast<char*>(values.data()), 60}).ok());
    ASSERT_TRUE(write->Commit().ok());
  }

  std::string dir_;
  MemoryBudget budget_{0, 0};
};

TEST_F(CheckpointTest, RestoresIdsNamesVersionsAndValues) {
  ParameterStore original(CpuBackend(), &budget_);
  Populate(original);
  absl::StatusOr<size_t> saved = SaveCheckpoint(original, dir_);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(*saved, 4u);

  MemoryBudget budget(0, 0);
  ParameterStore restored(CpuBackend(), &budget);
  absl::StatusOr<size_t> loaded = LoadCheckpoint(restored, dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, 4u);
  const auto before = original.List("", 0, 100).parameters;
  const auto after = restored.List("", 0, 100).parameters;
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].id, before[i].id);
    EXPECT_EQ(after[i].name, before[i].name);
    EXPECT_EQ(after[i].dtype, before[i].dtype);
    EXPECT_EQ(after[i].shape, before[i].shape);
    EXPECT_EQ(after[i].version, before[i].version);
    EXPECT_TRUE(Bytes(restored, after[i].id) == Bytes(original, before[i].id))
        << after[i].name;
  }
  EXPECT_EQ(budget.used_bytes(), budget_.used_bytes());
  // New ids continue above the restored ones (and above deleted ones' ids
  // that were saved, not reused).
  CreateParameterSpec spec;
  spec.name = "new";
  spec.shape = {1};
  EXPECT_GT(restored.Create(spec)->id, before.back().id);
}

TEST_F(CheckpointTest, NoCheckpointYetRestoresNothing) {
  ParameterStore store(CpuBackend(), &budget_);
  EXPECT_EQ(*LoadCheckpoint(store, dir_), 0u);
}

TEST_F(CheckpointTest, ASecondSaveReplacesTheFirst) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  ASSERT_TRUE(store.Delete(ParameterKey::ByName("big")).ok());
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  MemoryBudget budget(0, 0);
  ParameterStore restored(CpuBackend(), &budget);
  EXPECT_EQ(*LoadCheckpoint(restored, dir_), 3u);
  EXPECT_FALSE(fs::exists(dir_ + "/parameters.old"));
  EXPECT_FALSE(fs::exists(dir_ + "/parameters.new"));
}

TEST_F(CheckpointTest, ACrashBetweenTheRenamesKeepsTheOldCheckpoint) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  fs::rename(dir_ + "/parameters", dir_ + "/parameters.old");
  fs::create_directory(dir_ + "/parameters.new");  // An unfinished save.
  MemoryBudget budget(0, 0);
  ParameterStore restored(CpuBackend(), &budget);
  EXPECT_EQ(*LoadCheckpoint(restored, dir_), 4u);
}

TEST_F(CheckpointTest, DamageIsDataLoss) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  const uint64_t w = (*store.Find(ParameterKey::ByName("w")))->id();
  fs::resize_file(dir_ + "/parameters/" + std::to_string(w) + ".bin", 12);
  {
    MemoryBudget budget(0, 0);
    ParameterStore restored(CpuBackend(), &budget);
    absl::StatusOr<size_t> loaded = LoadCheckpoint(restored, dir_);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(loaded.status().message(), ::testing::HasSubstr("\"w\""));
  }
  std::ofstream(dir_ + "/parameters/index.binpb") << "garbage";
  MemoryBudget budget(0, 0);
  ParameterStore restored(CpuBackend(), &budget);
  EXPECT_EQ(LoadCheckpoint(restored, dir_).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(CheckpointTest, RestoringOverTheBudgetIsResourceExhausted) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  MemoryBudget small(0, 1000);
  ParameterStore restored(CpuBackend(), &small);
  EXPECT_EQ(LoadCheckpoint(restored, dir_).status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace distopt
