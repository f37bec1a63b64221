#include "server/params/checkpoint.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <thread>
#include <vector>

#include "common/cpu_backend.h"
#include "common/testing/host_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/params/checkpoint_index.pb.h"
#include "server/params/parameter_write.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
  }

  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in),
                       std::istreambuf_iterator<char>());
  }

  // The index inside a format 2 envelope: 8 bytes of magic, 4 of crc32,
  // then the index.
  static bool ParseIndex(const std::string& envelope,
                         checkpoint::CheckpointIndex* index) {
    return envelope.size() >= 12 && index->ParseFromString(envelope.substr(12));
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

  // A fresh store, with a budget of its own, and dir_'s checkpoint
  // restored into it.
  struct Restored {
    MemoryBudget budget{0, 0};
    ParameterStore store{CpuBackend(), &budget};
    absl::StatusOr<RestoredCheckpoint> loaded;
  };
  std::unique_ptr<Restored> Restore() const {
    auto restored = std::make_unique<Restored>();
    restored->loaded = LoadCheckpoint(restored->store, dir_);
    return restored;
  }

  std::string dir_;
  MemoryBudget budget_{0, 0};
};

TEST_F(CheckpointTest, RestoresIdsNamesVersionsAndValues) {
  ParameterStore original(CpuBackend(), &budget_);
  Populate(original);
  absl::StatusOr<SavedCheckpoint> saved = SaveCheckpoint(original, dir_);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->parameters, 4u);

  std::unique_ptr<Restored> r = Restore();
  ParameterStore& restored = r->store;
  absl::StatusOr<RestoredCheckpoint>& loaded = r->loaded;
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->parameters, 4u);
  EXPECT_EQ(loaded->fell_back, "");
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
  EXPECT_EQ(r->budget.used_bytes(), budget_.used_bytes());
  // New ids continue above the restored ones (and above deleted ones' ids
  // that were saved, not reused).
  CreateParameterSpec spec;
  spec.name = "new";
  spec.shape = {1};
  EXPECT_GT(restored.Create(spec)->id, before.back().id);
}

// A section's bytes go straight into the reader's memory, split as it
// likes; destinations that do not hold exactly the section are refused
// before anything is read.
TEST_F(CheckpointTest, ASectionIsReadIntoTheDestinationsGiven) {
  ParameterStore original(CpuBackend(), &budget_);
  Populate(original);
  CheckpointContents contents = LiveContents(original);
  std::string state(9 << 20, '\0');  // More than one read block.
  for (size_t i = 0; i < state.size(); ++i) {
    state[i] = static_cast<char>(i * 7 + i / 4096);
  }
  contents.sections.push_back(BytesSection("state", state));
  ASSERT_TRUE(SaveCheckpoint(contents, dir_, 0).ok());

  Restored restored;
  std::string whole;
  std::string split(state.size(), '\0');
  absl::Status too_short, too_long;
  restored.loaded = LoadCheckpoint(
      restored.store, dir_, [&](const CheckpointSections& sections) {
        whole = *sections.ReadAll("state");
        // Three uneven parts, one of them empty.
        const std::vector<absl::Span<char>> parts = {
            {split.data(), 5 << 20},
            {split.data() + (5 << 20), 0},
            {split.data() + (5 << 20), split.size() - (5 << 20)}};
        absl::Status read = sections.ReadInto("state", parts);
        if (!read.ok()) return read;
        too_short = sections.ReadInto("state", {{split.data(), 100}});
        std::string longer(state.size() + 1, '\0');
        too_long = sections.ReadInto("state", {{longer.data(), longer.size()}});
        return absl::OkStatus();
      });
  ASSERT_TRUE(restored.loaded.ok()) << restored.loaded.status();
  EXPECT_TRUE(whole == state);
  EXPECT_TRUE(split == state);
  for (const absl::Status& status : {too_short, too_long}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(),
                ::testing::HasSubstr(
                    absl::StrCat("state: holds ", state.size(), " bytes")));
  }
}

// Host memory that calls itself cuda:0: a restore stages values through a
// ring of host blocks and copies each block to the "device". Its copies in
// are slow, so that the reads run ahead as far as the ring lets them.
class SlowDeviceBackend : public HostBackend {
 public:
  Device device() const override { return Device::Cuda(0); }
  absl::Status CopyFromHost(void* dst, const void* src, size_t bytes) override {
    ++copies_in;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return HostBackend::CopyFromHost(dst, src, bytes);
  }

  std::atomic<int> copies_in{0};
};

TEST_F(CheckpointTest, DeviceValuesComeThroughTheStagingRingWhole) {
  ParameterStore original(CpuBackend(), &budget_);
  Populate(original);
  CreateParameterSpec spec;
  spec.name = "odd";  // Six read blocks, the last one short.
  spec.shape = {(5 << 20) + 3};
  spec.initializer = UniformInit{-1, 1, 4};
  ASSERT_TRUE(original.Create(spec).ok());
  ASSERT_TRUE(SaveCheckpoint(original, dir_).ok());

  auto device = std::make_shared<SlowDeviceBackend>();
  MemoryBudget budget{0, 0};
  ParameterStore restored(device, &budget);
  absl::StatusOr<RestoredCheckpoint> loaded = LoadCheckpoint(restored, dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const auto before = original.List("", 0, 100).parameters;
  const auto after = restored.List("", 0, 100).parameters;
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    // The "device" memory is the host's: read in place (this build may
    // have no CUDA backend to copy it with).
    std::shared_ptr<Parameter> p =
        *restored.Find(ParameterKey::ById(after[i].id));
    absl::ReaderMutexLock lock(&p->mutex());
    const Tensor& values = p->values_shared_locked();
    const char* data = static_cast<const char*>(values.data());
    EXPECT_TRUE(std::vector<char>(data, data + values.byte_size()) ==
                Bytes(original, before[i].id))
        << after[i].name;
  }
  // "big" is 18 blocks and "odd" 6: each came through the ring.
  EXPECT_GE(device->copies_in, 24);
}

TEST_F(CheckpointTest, NoCheckpointYetRestoresNothing) {
  ParameterStore store(CpuBackend(), &budget_);
  absl::StatusOr<RestoredCheckpoint> restored = LoadCheckpoint(store, dir_);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->parameters, 0u);
  EXPECT_EQ(restored->folder, "");
  EXPECT_EQ(restored->interrupted_save, "");
}

TEST_F(CheckpointTest, ASecondSaveReplacesTheFirst) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  ASSERT_TRUE(store.Delete(ParameterKey::ByName("big")).ok());
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  EXPECT_EQ(Restore()->loaded->parameters, 3u);
  // The first save stays as the previous checkpoint.
  EXPECT_TRUE(fs::exists(dir_ + "/parameters.1"));
  EXPECT_FALSE(fs::exists(dir_ + "/parameters.new"));
}

// A crash between the renames: the newest moved aside, the new one not yet
// in place. A whole new one is put in place and restored; an unfinished one
// is removed and the previous checkpoint restored, saying so.
TEST_F(CheckpointTest, ACrashBetweenTheRenamesKeepsAWholeCheckpoint) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  ASSERT_TRUE(store.Delete(ParameterKey::ByName("big")).ok());
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());  // 3 parameters now.
  // The second save, caught between its renames.
  fs::rename(dir_ + "/parameters", dir_ + "/parameters.new");
  {
    std::unique_ptr<Restored> r = Restore();
    ASSERT_TRUE(r->loaded.ok()) << r->loaded.status();
    EXPECT_EQ(r->loaded->parameters, 3u);
    EXPECT_EQ(r->loaded->fell_back, "");
    EXPECT_THAT(r->loaded->interrupted_save, HasSubstr("was finished"));
    EXPECT_EQ(r->loaded->folder, dir_ + "/parameters");
    EXPECT_TRUE(fs::exists(dir_ + "/parameters"));
    EXPECT_FALSE(fs::exists(dir_ + "/parameters.new"));
  }
  // An unfinished save in the same place.
  fs::rename(dir_ + "/parameters", dir_ + "/parameters.new");
  fs::remove(dir_ + "/parameters.new/index.binpb");
  std::unique_ptr<Restored> r = Restore();
  ASSERT_TRUE(r->loaded.ok()) << r->loaded.status();
  EXPECT_EQ(r->loaded->parameters, 4u);  // The first save.
  EXPECT_THAT(r->loaded->fell_back, HasSubstr("did not finish"));
  // What became of the unfinished one is said too (the daemon logs it).
  EXPECT_THAT(
      r->loaded->interrupted_save,
      AllOf(HasSubstr("parameters.new was removed"), HasSubstr("index.binpb")));
  EXPECT_EQ(r->loaded->folder, dir_ + "/parameters.1");
  EXPECT_FALSE(fs::exists(dir_ + "/parameters.new"));
}

// A save caught before its rotation (the new checkpoint whole, the others
// not yet moved): the new one is newer than anything else, and wins.
TEST_F(CheckpointTest, AWholeUnrotatedSaveIsTheNewest) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  ASSERT_TRUE(store.Delete(ParameterKey::ByName("big")).ok());
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());  // 3 parameters.
  // Back to: the 4-parameter save in place, the 3-parameter one beside it.
  fs::rename(dir_ + "/parameters", dir_ + "/parameters.new");
  fs::rename(dir_ + "/parameters.1", dir_ + "/parameters");
  std::unique_ptr<Restored> r = Restore();
  ASSERT_TRUE(r->loaded.ok()) << r->loaded.status();
  EXPECT_EQ(r->loaded->parameters, 3u);
  EXPECT_TRUE(fs::exists(dir_ + "/parameters.1"));  // The 4-parameter one.
}

// Damage done to the newest of two checkpoints (the first holds "w" at its
// initial values, the second after a write): each kind is caught before
// anything is restored, and the previous checkpoint is restored, saying
// why; with no previous one it is DATA_LOSS naming the file.
class CheckpointDamageTest : public CheckpointTest {
 protected:
  // Saves twice: the previous checkpoint, then the newest.
  void SaveTwo() {
    ParameterStore store(CpuBackend(), &budget_);
    Populate(store);
    w_ = (*store.Find(ParameterKey::ByName("w")))->id();
    big_ = (*store.Find(ParameterKey::ByName("big")))->id();
    ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
    std::shared_ptr<Parameter> w = *store.Find(ParameterKey::ById(w_));
    auto write = *ParameterWrite::Begin(w, store);
    std::vector<float> values(15, -2.0f);
    ASSERT_TRUE(
        write->AddChunk(0, {reinterpret_cast<char*>(values.data()), 60}).ok());
    ASSERT_TRUE(write->Commit().ok());
    ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  }

  std::string Newest(const std::string& name) const {
    return dir_ + "/parameters/" + name;
  }
  // Format 3: every parameter's values in one file, in the index's order.
  std::string Values() const { return Newest("values.bin"); }
  std::streamoff OffsetOf(uint64_t id) const {
    checkpoint::CheckpointIndex index;
    EXPECT_TRUE(ParseIndex(ReadFile(Newest("index.binpb")), &index));
    std::streamoff offset = 0;
    for (const v1::ParameterInfo& info : index.parameters()) {
      if (info.id() == id) return offset;
      offset += info.byte_size();
    }
    ADD_FAILURE() << "no parameter " << id;
    return 0;
  }

  static void FlipByte(const std::string& path, std::streamoff offset) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(offset);
    char byte = 0;
    file.read(&byte, 1);
    byte ^= 0x10;
    file.seekp(offset);
    file.write(&byte, 1);
  }

  // Restores and checks it fell back to the previous save because of
  // `why`; returns the restored "w".
  std::vector<char> ExpectFallBack(const std::string& why) {
    std::unique_ptr<Restored> r = Restore();
    ParameterStore& restored = r->store;
    absl::StatusOr<RestoredCheckpoint>& loaded = r->loaded;
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) return {};
    EXPECT_EQ(loaded->parameters, 4u);
    EXPECT_THAT(loaded->fell_back, HasSubstr(why));
    return Bytes(restored, w_);
  }

  uint64_t w_ = 0;
  uint64_t big_ = 0;
};

TEST_F(CheckpointDamageTest, AFlippedValueByteFallsBackToThePrevious) {
  SaveTwo();
  FlipByte(Values(), OffsetOf(big_) + 12345);
  const std::vector<char> w = ExpectFallBack("checksum mismatch");
  // The previous save's "w": its initial values, not the later write's.
  std::vector<float> values(15);
  std::memcpy(values.data(), w.data(), 60);
  EXPECT_NE(values[0], -2.0f);
}

TEST_F(CheckpointDamageTest, AFlippedIndexBitFallsBackToThePrevious) {
  SaveTwo();
  const std::streamoff size =
      static_cast<std::streamoff>(fs::file_size(Newest("index.binpb")));
  FlipByte(Newest("index.binpb"), size / 2);
  ExpectFallBack("the index is damaged");
}

TEST_F(CheckpointDamageTest, SwappedOrMissingValuesFallBack) {
  SaveTwo();
  fs::rename(Values(), dir_ + "/w.bin");
  ExpectFallBack("values.bin: missing");
  SaveTwo();  // The damaged newest was set aside.
  fs::resize_file(Values(), fs::file_size(Values()) - 1);
  ExpectFallBack("the parameters' values take more");  // Truncated.
  // Another parameter's bytes in w's place: sizes agree, checksums do not.
  SaveTwo();
  {
    const std::string bytes = ReadFile(Values());
    std::fstream file(Values(),
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(OffsetOf(w_));
    file.write(bytes.data() + OffsetOf(big_), 60);
  }
  ExpectFallBack("checksum mismatch");
}

// The damaged newest is set aside when the previous one is restored, so
// the next save keeps the good one: damage to that save leaves the good
// one to fall back on again.
TEST_F(CheckpointDamageTest, ADamagedCheckpointIsNotKeptInPlaceOfAGoodOne) {
  SaveTwo();
  FlipByte(Values(), OffsetOf(w_) + 3);
  ExpectFallBack("checksum mismatch");
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());  // keep 1.
  FlipByte(Values(), OffsetOf(w_) + 5);
  ExpectFallBack("checksum mismatch");
}

// What a hostile or mistaken edit of the folder puts where a file or a
// folder of the newest checkpoint should be: each is damage (the previous
// checkpoint is restored), never a crash, a hang or unbounded reading.
TEST_F(CheckpointDamageTest, WhatIsNotARegularFileIsDamage) {
  const std::string index = Newest("index.binpb");
  SaveTwo();
  fs::remove(index);
  fs::create_symlink("/dev/zero", index);  // Endless bytes.
  ExpectFallBack("index.binpb: a device where a file of the checkpoint");
  SaveTwo();
  fs::remove(index);
  ASSERT_EQ(mkfifo(index.c_str(), 0644), 0);  // A reader would wait forever.
  ExpectFallBack("index.binpb: a FIFO where");
  SaveTwo();
  fs::remove(index);
  fs::create_directory(index);
  ExpectFallBack("index.binpb: a folder where");
  SaveTwo();
  fs::resize_file(index, (uint64_t{256} << 20) + 1);  // Sparse: no disk used.
  ExpectFallBack("expected an index of at most 268435456 bytes");
  SaveTwo();
  fs::remove(Values());
  fs::create_symlink("/dev/zero", Values());
  ExpectFallBack("values.bin: a device where");
  // The newest checkpoint's folder a file, or links in a loop.
  SaveTwo();
  fs::remove_all(dir_ + "/parameters");
  std::ofstream(dir_ + "/parameters") << "not a folder";
  ExpectFallBack("its folder is not a folder");
  SaveTwo();
  fs::remove_all(dir_ + "/parameters");
  fs::create_symlink(dir_ + "/parameters", dir_ + "/parameters");
  ExpectFallBack("a loop of symbolic links");
  // Set aside as damaged: the next save is whole and restores.
  SaveTwo();
  std::unique_ptr<Restored> r = Restore();
  ASSERT_TRUE(r->loaded.ok()) << r->loaded.status();
  EXPECT_EQ(r->loaded->fell_back, "");
}

// Kept checkpoints are numbered by this daemon: a folder with a number no
// save would reach is not one of them, and the last number there is
// refuses the next rotation instead of wrapping around.
TEST_F(CheckpointDamageTest, KeptNumbersNeverWrapAround) {
  SaveTwo();
  fs::create_directory(dir_ + "/parameters.2147483647");
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_, /*keep=*/5).ok());
  EXPECT_TRUE(fs::exists(dir_ + "/parameters.2"));
  EXPECT_TRUE(fs::exists(dir_ + "/parameters.2147483647"));  // Left alone.
  fs::rename(dir_ + "/parameters.2", dir_ + "/parameters.999999999");
  absl::StatusOr<SavedCheckpoint> refused = SaveCheckpoint(store, dir_, 5);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("parameters.999999999 is the last number"));
  std::unique_ptr<Restored> r = Restore();
  ASSERT_TRUE(r->loaded.ok()) << r->loaded.status();
  EXPECT_EQ(r->loaded->fell_back, "");
}

TEST_F(CheckpointDamageTest, WithoutAPreviousCheckpointDamageIsDataLoss) {
  SaveTwo();
  fs::remove_all(dir_ + "/parameters.1");
  FlipByte(Values(), OffsetOf(w_) + 3);
  std::unique_ptr<Restored> r = Restore();
  ParameterStore& restored = r->store;
  absl::StatusOr<RestoredCheckpoint>& loaded = r->loaded;
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("values.bin: checksum mismatch"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("\"w\""));
  EXPECT_EQ(restored.List("", 0, 100).parameters.size(), 0u);  // Nothing.
  std::ofstream(Newest("index.binpb")) << "garbage";
  EXPECT_EQ(LoadCheckpoint(restored, dir_).status().code(),
            absl::StatusCode::kDataLoss);
}

// Index fields that do not fit together are refused even in an index whose
// checksum is right (an edited checkpoint, or a writer's bug).
TEST_F(CheckpointTest, InconsistentIndexFieldsAreRefused) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  fs::remove_all(dir_ + "/parameters.1");
  const std::string index_path = dir_ + "/parameters/index.binpb";
  const std::string bytes = ReadFile(index_path);
  checkpoint::CheckpointIndex original;
  ASSERT_TRUE(ParseIndex(bytes, &original));
  auto rewrite = [&](const std::function<void(v1::ParameterInfo&)>& edit) {
    checkpoint::CheckpointIndex index = original;
    edit(*index.mutable_parameters(0));
    const std::string payload = index.SerializeAsString();
    const uint32_t crc = static_cast<uint32_t>(crc32(
        crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(payload.data()),
        static_cast<uInt>(payload.size())));
    std::string envelope = bytes.substr(0, 8);
    for (int i = 0; i < 4; ++i)
      envelope.push_back(static_cast<char>(crc >> (8 * i)));
    std::ofstream(index_path, std::ios::binary | std::ios::trunc)
        << envelope + payload;
    std::unique_ptr<Restored> r = Restore();
    ParameterStore& restored = r->store;
    absl::StatusOr<RestoredCheckpoint>& loaded = r->loaded;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    return std::string(loaded.status().message());
  };
  EXPECT_THAT(rewrite([](v1::ParameterInfo& p) { p.set_version(~0ull); }),
              HasSubstr("version 2^64-1"));
  EXPECT_THAT(rewrite([](v1::ParameterInfo& p) { p.set_id(0); }),
              HasSubstr("id 0"));
  EXPECT_THAT(rewrite([](v1::ParameterInfo& p) { p.add_shape(2); }),
              HasSubstr("the shape and dtype give"));
  // Sizes that agree with each other but not with the file: refused before
  // anything is allocated.
  EXPECT_THAT(rewrite([](v1::ParameterInfo& p) {
                p.clear_shape();
                p.add_shape(int64_t{1} << 40);
                p.set_num_elements(int64_t{1} << 40);
                p.set_byte_size(int64_t{4} << 40);
              }),
              HasSubstr("the parameters' values take more"));
  // What the store refuses (here a name it would not create) is damage
  // too, not a reason to stop.
  EXPECT_THAT(rewrite([](v1::ParameterInfo& p) { p.set_name("bad\x01name"); }),
              HasSubstr("index.binpb"));
}

TEST_F(CheckpointTest, RestoringOverTheBudgetIsResourceExhausted) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  MemoryBudget small(0, 1000);
  ParameterStore restored(CpuBackend(), &small);
  const absl::Status refused = LoadCheckpoint(restored, dir_).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  // It names the checkpoint and the parameter that did not fit.
  EXPECT_THAT(refused.message(), HasSubstr("restoring " + dir_));
  EXPECT_THAT(refused.message(), HasSubstr("parameter \""));
}

// A folder that can no longer be written (here a tmpfs remounted
// read-only) is the operator's to fix: FAILED_PRECONDITION, for a save and
// for the restore that must finish an interrupted save, not INTERNAL (nor
// RESOURCE_EXHAUSTED, which says the disk is full). Skipped where mounts
// are not allowed.
TEST_F(CheckpointTest, AFolderThatCannotBeWrittenIsAFailedPrecondition) {
  fs::create_directories(dir_);
  if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=512m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs at " << dir_ << ": "
                 << std::strerror(errno);
  }
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
  // A whole save that did not finish its renames.
  fs::copy(dir_ + "/parameters", dir_ + "/parameters.new",
           fs::copy_options::recursive);
  ASSERT_EQ(mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY,
                  "size=512m"),
            0)
      << std::strerror(errno);
  const absl::Status saved = SaveCheckpoint(store, dir_).status();
  EXPECT_EQ(saved.code(), absl::StatusCode::kFailedPrecondition) << saved;
  EXPECT_THAT(saved.message(), HasSubstr("Read-only"));
  ParameterStore restored(CpuBackend(), &budget_);
  const absl::Status loaded = LoadCheckpoint(restored, dir_).status();
  EXPECT_EQ(loaded.code(), absl::StatusCode::kFailedPrecondition) << loaded;
  EXPECT_THAT(loaded.message(), HasSubstr("Read-only"));
  umount2(dir_.c_str(), MNT_DETACH);
}

// --checkpoint_keep 2: three saves keep the two before the newest; with the
// newest two damaged the oldest is restored, naming both problems; keep 0
// keeps none. A previous checkpoint named parameters.old (as daemons of
// the first checksummed format kept it) is still a fallback.
TEST_F(CheckpointTest, KeptCheckpointsAreFallenBackOnInOrder) {
  ParameterStore store(CpuBackend(), &budget_);
  Populate(store);
  for (int save = 0; save < 3; ++save) {
    ASSERT_TRUE(SaveCheckpoint(store, dir_, /*keep=*/2).ok());
  }
  // The first save is parameters.1, the second parameters.2.
  EXPECT_TRUE(fs::exists(dir_ + "/parameters.1"));
  EXPECT_TRUE(fs::exists(dir_ + "/parameters.2"));
  EXPECT_FALSE(fs::exists(dir_ + "/parameters.3"));
  std::ofstream(dir_ + "/parameters/index.binpb") << "garbage";
  std::ofstream(dir_ + "/parameters.2/index.binpb") << "garbage";
  {
    std::unique_ptr<Restored> r = Restore();
    ASSERT_TRUE(r->loaded.ok()) << r->loaded.status();
    EXPECT_EQ(r->loaded->parameters, 4u);
    EXPECT_THAT(r->loaded->fell_back, HasSubstr("parameters.1 was restored"));
    EXPECT_THAT(r->loaded->fell_back, HasSubstr("parameters/index.binpb"));
    EXPECT_THAT(r->loaded->fell_back, HasSubstr("parameters.2/index.binpb"));
  }
  // The damaged ones were set aside; a save keeps the good one.
  EXPECT_FALSE(fs::exists(dir_ + "/parameters.2"));
  ASSERT_TRUE(SaveCheckpoint(store, dir_, /*keep=*/2).ok());
  EXPECT_TRUE(fs::exists(dir_ + "/parameters.1"));
  ASSERT_TRUE(SaveCheckpoint(store, dir_, /*keep=*/0).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/parameters.1"));
  EXPECT_FALSE(fs::exists(dir_ + "/parameters.2"));
  fs::rename(dir_ + "/parameters", dir_ + "/parameters.old");
  EXPECT_EQ(Restore()->loaded->parameters, 4u);
}

// Rewrites the newest checkpoint in an older layout: a values file per
// parameter (<id>.bin), and the index as format `format` (1: bare, no
// checksums; 2: in its envelope).
void RewriteAsFormat(const std::string& dir, uint32_t format) {
  const std::string folder = dir + "/parameters/";
  const std::string index_path = folder + "index.binpb";
  std::string envelope;
  {
    std::ifstream in(index_path, std::ios::binary);
    envelope.assign(std::istreambuf_iterator<char>(in),
                    std::istreambuf_iterator<char>());
  }
  checkpoint::CheckpointIndex index;
  ASSERT_TRUE(index.ParseFromString(envelope.substr(12)));
  std::ifstream values(folder + "values.bin", std::ios::binary);
  for (const v1::ParameterInfo& info : index.parameters()) {
    std::string bytes(info.byte_size(), '\0');
    values.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::ofstream(folder + std::to_string(info.id()) + ".bin", std::ios::binary)
        << bytes;
  }
  fs::remove(folder + "values.bin");
  index.set_format(format);
  if (format == 1) index.clear_values_crc32();
  const std::string payload = index.SerializeAsString();
  std::string bytes = payload;
  if (format == 2) {
    const uint32_t crc = static_cast<uint32_t>(crc32(
        crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(payload.data()),
        static_cast<uInt>(payload.size())));
    bytes = envelope.substr(0, 8);
    for (int i = 0; i < 4; ++i)
      bytes.push_back(static_cast<char>(crc >> (8 * i)));
    bytes += payload;
  }
  std::ofstream(index_path, std::ios::binary | std::ios::trunc) << bytes;
}

// Checkpoints written before the checksums (format 1: the bare index) and
// before the values shared one file (format 2) still load.
TEST_F(CheckpointTest, FormatOneAndTwoCheckpointsStillLoad) {
  for (uint32_t format : {1u, 2u}) {
    SCOPED_TRACE(format);
    fs::remove_all(dir_);
    ParameterStore store(CpuBackend(), &budget_);
    Populate(store);
    ASSERT_TRUE(SaveCheckpoint(store, dir_).ok());
    ASSERT_NO_FATAL_FAILURE(RewriteAsFormat(dir_, format));
    std::unique_ptr<Restored> r = Restore();
    absl::StatusOr<RestoredCheckpoint>& loaded = r->loaded;
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->parameters, 4u);
    EXPECT_EQ(loaded->fell_back, "");
    for (const ParameterInfo& info : store.List("", 0, 100).parameters) {
      EXPECT_EQ(Bytes(r->store, info.id), Bytes(store, info.id)) << info.name;
    }
  }
}

TEST(CheckpointDirTest, AFolderThatCannotBeWrittenIsRefusedAtOnce) {
  const std::string base = std::getenv("TEST_TMPDIR");
  EXPECT_TRUE(CheckCheckpointDir(base + "/made/on/demand").ok());
  std::ofstream(base + "/a_file") << "not a folder";
  absl::Status file = CheckCheckpointDir(base + "/a_file");
  EXPECT_EQ(file.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.message(),
              HasSubstr("--checkpoint_dir=" + base + "/a_file"));
  EXPECT_EQ(CheckCheckpointDir("/proc/no_folder_here").code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace distopt
