// Durable training state through the real daemon: optimizers and their
// state are in checkpoints; a daemon SIGKILLed after a save resumes from it
// bit for bit and trains on exactly as an uninterrupted one; periodic saves
// by steps and by time; CheckpointService; a damaged optimizer section
// falls back to the previous checkpoint; a full disk fails the save and
// keeps the previous one.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/initializers.h"
#include "common/grpc_status.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/distopt/v1/checkpoint.grpc.pb.h"
#include "proto/distopt/v1/optimizer.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;
using google::protobuf::util::MessageDifferencer;
using testing::PollUntil;
using testing::Ramp;
using testing::SameBytes;
using testing::StartWorkerOrDie;

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / name;
  fs::remove_all(dir);
  return dir.string();
}

// CheckpointService through the client library.
grpc::Status SaveNow(Client& client, const std::string& address,
                     v1::CheckpointInfo* saved) {
  absl::StatusOr<v1::CheckpointInfo> info = client.SaveCheckpoint(address);
  if (info.ok()) *saved = *std::move(info);
  return ToGrpcStatus(info.status());
}

v1::ListCheckpointsResponse ListSaved(Client& client,
                                      const std::string& address) {
  absl::StatusOr<v1::ListCheckpointsResponse> listed =
      client.ListCheckpoints(address);
  EXPECT_TRUE(listed.ok()) << listed.status();
  return listed.ok() ? *std::move(listed) : v1::ListCheckpointsResponse();
}

// Two parameters and an Adam over them, driven step by step with
// gradients that depend on the step's number only: the same steps give the
// same bits on any daemon.
class Trainer {
 public:
  Trainer(Client& client, std::string address, Shape weight_shape = {3, 4})
      : client_(client),
        address_(std::move(address)),
        weight_shape_(std::move(weight_shape)) {}

  void Create() {
    auto weight = client_.CreateParameterFrom(
        address_, "weight", Ramp(weight_shape_, -0.5f, 1e-4f));
    auto bias = client_.CreateParameterFrom(address_, "bias", Ramp({5}));
    ASSERT_TRUE(weight.ok() && bias.ok());
    parameters_ = {*weight, *bias};
    auto adam = client_.CreateOptimizer(
        address_, "adam",
        {{"lr", hyper::Number(0.01)}, {"amsgrad", hyper::Flag(true)}},
        {weight->id, bias->id});
    ASSERT_TRUE(adam.ok()) << adam.status();
    optimizer_id_ = adam->id();
  }

  // After a restart: the same parameters and optimizer, found by name and
  // listing (the ids must be the saved ones).
  void Attach(const std::vector<RemoteParameter>& parameters,
              uint64_t optimizer_id) {
    parameters_ = parameters;
    for (RemoteParameter& parameter : parameters_) parameter.worker = address_;
    optimizer_id_ = optimizer_id;
  }

  // Step `n` (1, 2, ...) in context `context_id`; returns whether it was
  // applied.
  bool Step(int n, uint64_t context_id) {
    const float scale = 0.25f * static_cast<float>(n);
    absl::Status pushed = client_.AccumulateGradients(
        address_, context_id,
        {{parameters_[0].id, Ramp(weight_shape_, scale, -1e-4f)},
         {parameters_[1].id, Ramp({5}, -scale, 0.3f)}});
    EXPECT_TRUE(pushed.ok()) << pushed;
    absl::StatusOr<v1::StepResponse> stepped =
        client_.Step(address_, optimizer_id_, context_id);
    EXPECT_TRUE(stepped.ok()) << stepped.status();
    return stepped.ok() && stepped->applied();
  }

  struct State {
    std::vector<Tensor> values;
    v1::OptimizerStateDict state_dict;
    int64_t steps = 0;
  };
  State Record() {
    State state;
    for (const RemoteParameter& parameter : parameters_) {
      absl::StatusOr<Tensor> values = client_.ReadParameter(parameter);
      EXPECT_TRUE(values.ok()) << values.status();
      if (values.ok()) state.values.push_back(*values);
    }
    absl::StatusOr<v1::OptimizerStateDict> dict =
        client_.GetStateDict(address_, optimizer_id_);
    EXPECT_TRUE(dict.ok()) << dict.status();
    if (dict.ok()) state.state_dict = *dict;
    auto optimizers = v1::OptimizerService::NewStub(client_.Channel(address_));
    grpc::ClientContext context;
    v1::GetOptimizerRequest request;
    request.set_optimizer_id(optimizer_id_);
    v1::OptimizerInfo info;
    grpc::Status got = optimizers->GetOptimizer(&context, request, &info);
    EXPECT_TRUE(got.ok()) << got.error_message();
    state.steps = info.steps();
    return state;
  }

  const std::vector<RemoteParameter>& parameters() const { return parameters_; }
  uint64_t optimizer_id() const { return optimizer_id_; }

 private:
  Client& client_;
  const std::string address_;
  const Shape weight_shape_;
  std::vector<RemoteParameter> parameters_;
  uint64_t optimizer_id_ = 0;
};

void ExpectSameState(const Trainer::State& expected,
                     const Trainer::State& actual) {
  ASSERT_EQ(expected.values.size(), actual.values.size());
  for (size_t i = 0; i < expected.values.size(); ++i) {
    EXPECT_TRUE(SameBytes(expected.values[i], actual.values[i]))
        << "parameter " << i;
  }
  EXPECT_TRUE(
      MessageDifferencer::Equals(expected.state_dict, actual.state_dict))
      << "saved:\n"
      << expected.state_dict.ShortDebugString() << "\nrestored:\n"
      << actual.state_dict.ShortDebugString();
  EXPECT_EQ(expected.steps, actual.steps);
}

std::unique_ptr<LocalWorker> KillAndRestart(std::unique_ptr<LocalWorker> worker,
                                            std::vector<std::string> flags) {
  worker->Signal(SIGKILL);
  absl::StatusOr<int> code = worker->Wait(absl::Seconds(30));
  EXPECT_TRUE(code.ok() && *code == 128 + SIGKILL);
  worker.reset();
  return StartWorkerOrDie(std::move(flags));
}

TEST(DurableStateTest, AKilledDaemonResumesFromItsLastSaveBitForBit) {
  const std::vector<std::string> flags = {"--checkpoint_dir=" +
                                          FreshDir("resume")};
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  Client client;
  Trainer trainer(client, worker->address());
  ASSERT_NO_FATAL_FAILURE(trainer.Create());
  std::vector<uint64_t> contexts;
  for (int n = 1; n <= 3; ++n) {
    contexts.push_back(client.NewContextId());
    ASSERT_TRUE(trainer.Step(n, contexts.back()));
  }
  v1::CheckpointInfo saved;
  grpc::Status status = SaveNow(client, worker->address(), &saved);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(saved.parameters(), 2);
  EXPECT_EQ(saved.reason(), "on demand");
  EXPECT_TRUE(saved.whole());
  const Trainer::State at_save = trainer.Record();
  EXPECT_EQ(at_save.steps, 3);
  // Steps after the save are lost with the daemon.
  for (int n = 4; n <= 5; ++n) {
    ASSERT_TRUE(trainer.Step(n, client.NewContextId()));
  }
  const std::vector<RemoteParameter> parameters = trainer.parameters();
  const uint64_t optimizer_id = trainer.optimizer_id();

  worker = KillAndRestart(std::move(worker), flags);
  ASSERT_NE(worker, nullptr);
  Client after;
  Trainer resumed(after, worker->address());
  resumed.Attach(parameters, optimizer_id);
  ExpectSameState(at_save, resumed.Record());
  // A step retried across the restart is still applied once: the Step
  // call alone (its reply was lost; the context died with the daemon)...
  absl::StatusOr<v1::StepResponse> retried =
      after.Step(worker->address(), optimizer_id, contexts.back());
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_FALSE(retried->applied());
  ExpectSameState(at_save, resumed.Record());
  // ... and with its gradients pushed again.
  EXPECT_FALSE(resumed.Step(3, contexts.back()));
  ExpectSameState(at_save, resumed.Record());
  // A context the daemon never stepped is still unknown.
  absl::StatusOr<v1::StepResponse> unknown =
      after.Step(worker->address(), optimizer_id, after.NewContextId());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound)
      << unknown.status();
  // And training goes on as if the daemon had never died.
  ASSERT_TRUE(resumed.Step(4, after.NewContextId()));
  const Trainer::State resumed_after_4 = resumed.Record();

  std::unique_ptr<LocalWorker> reference_worker = StartWorkerOrDie();
  ASSERT_NE(reference_worker, nullptr);
  Client reference_client;
  Trainer reference(reference_client, reference_worker->address());
  ASSERT_NO_FATAL_FAILURE(reference.Create());
  for (int n = 1; n <= 4; ++n) {
    ASSERT_TRUE(reference.Step(n, reference_client.NewContextId()));
  }
  ExpectSameState(reference.Record(), resumed_after_4);
}

TEST(DurableStateTest, SavesEveryNSteps) {
  const std::vector<std::string> flags = {
      "--checkpoint_dir=" + FreshDir("by_steps"), "--checkpoint_every_steps=2"};
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  Client client;
  Trainer trainer(client, worker->address());
  ASSERT_NO_FATAL_FAILURE(trainer.Create());
  ASSERT_TRUE(trainer.Step(1, client.NewContextId()));
  // One step is not enough.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(ListSaved(client, worker->address()).checkpoints_size(), 0);
  ASSERT_TRUE(trainer.Step(2, client.NewContextId()));
  ASSERT_TRUE(PollUntil([&] {
    v1::ListCheckpointsResponse listed = ListSaved(client, worker->address());
    return listed.checkpoints_size() == 1 &&
           listed.checkpoints(0).reason() == "periodic";
  }));
  const Trainer::State at_save = trainer.Record();
  EXPECT_EQ(at_save.steps, 2);
  ASSERT_TRUE(trainer.Step(3, client.NewContextId()));

  const std::vector<RemoteParameter> parameters = trainer.parameters();
  worker = KillAndRestart(std::move(worker), flags);
  ASSERT_NE(worker, nullptr);
  Client after;
  Trainer resumed(after, worker->address());
  resumed.Attach(parameters, trainer.optimizer_id());
  ExpectSameState(at_save, resumed.Record());
}

TEST(DurableStateTest, SavesEveryInterval) {
  const std::vector<std::string> flags = {
      "--checkpoint_dir=" + FreshDir("by_time"), "--checkpoint_interval=300ms",
      "--checkpoint_keep=2"};
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  Client client;
  Trainer trainer(client, worker->address());
  ASSERT_NO_FATAL_FAILURE(trainer.Create());
  // Two saves, then a third: the newest and two kept ones.
  ASSERT_TRUE(PollUntil([&] {
    return ListSaved(client, worker->address()).checkpoints_size() == 3;
  }));
  v1::ListCheckpointsResponse listed = ListSaved(client, worker->address());
  for (const v1::CheckpointInfo& info : listed.checkpoints()) {
    EXPECT_TRUE(info.whole()) << info.folder() << ": " << info.problem();
    EXPECT_EQ(info.reason(), "periodic");
    EXPECT_EQ(info.parameters(), 2);
    EXPECT_GT(info.saved_at_unix_micros(), 0);
  }
  EXPECT_EQ(listed.checkpoints(0).folder(), "parameters");
  EXPECT_GT(listed.checkpoints(0).saved_at_unix_micros(),
            listed.checkpoints(1).saved_at_unix_micros());
}

TEST(DurableStateTest, ADamagedOptimizerSectionFallsBackToThePrevious) {
  const std::string dir = FreshDir("damaged_section");
  const std::vector<std::string> flags = {"--checkpoint_dir=" + dir};
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  Client client;
  Trainer trainer(client, worker->address());
  ASSERT_NO_FATAL_FAILURE(trainer.Create());
  ASSERT_TRUE(trainer.Step(1, client.NewContextId()));
  v1::CheckpointInfo saved;
  ASSERT_TRUE(SaveNow(client, worker->address(), &saved).ok());
  const Trainer::State first = trainer.Record();
  ASSERT_TRUE(trainer.Step(2, client.NewContextId()));
  ASSERT_TRUE(SaveNow(client, worker->address(), &saved).ok());
  EXPECT_EQ(ListSaved(client, worker->address()).checkpoints_size(), 2);
  worker->Signal(SIGKILL);
  ASSERT_TRUE(worker->Wait(absl::Seconds(30)).ok());
  worker.reset();

  // One flipped bit in the newest's optimizer state.
  const fs::path values = fs::path(dir) / "parameters" / "optimizers.bin";
  {
    std::fstream file(values, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.good());
    file.seekg(17);
    char byte = 0;
    file.read(&byte, 1);
    file.seekp(17);
    byte = static_cast<char>(byte ^ 0x10);
    file.write(&byte, 1);
  }
  worker = StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  Client after;
  Trainer resumed(after, worker->address());
  resumed.Attach(trainer.parameters(), trainer.optimizer_id());
  ExpectSameState(first, resumed.Record());
  const v1::ListCheckpointsResponse listed =
      ListSaved(after, worker->address());
  EXPECT_TRUE(absl::StrContains(listed.restore_fell_back(), "optimizers.bin"))
      << listed.restore_fell_back();
  EXPECT_TRUE(absl::StrContains(listed.restore_fell_back(), "checksum"))
      << listed.restore_fell_back();
}

// An optimizer whose parameter was deleted before the save (it could never
// step again) is left out of the restore; the checkpoint itself is whole.
TEST(DurableStateTest, AnOptimizerOverADeletedParameterIsLeftOut) {
  const std::vector<std::string> flags = {"--checkpoint_dir=" +
                                          FreshDir("deleted_parameter")};
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  Client client;
  Trainer trainer(client, worker->address());
  ASSERT_NO_FATAL_FAILURE(trainer.Create());
  ASSERT_TRUE(trainer.Step(1, client.NewContextId()));
  ASSERT_TRUE(client.DeleteParameter(trainer.parameters()[1]).ok());
  v1::CheckpointInfo saved;
  ASSERT_TRUE(SaveNow(client, worker->address(), &saved).ok());
  EXPECT_EQ(saved.parameters(), 1);
  worker = KillAndRestart(std::move(worker), flags);
  ASSERT_NE(worker, nullptr);
  Client after;
  const v1::ListCheckpointsResponse listed =
      ListSaved(after, worker->address());
  EXPECT_EQ(listed.restore_fell_back(), "");
  ASSERT_EQ(listed.checkpoints_size(), 1);
  EXPECT_TRUE(listed.checkpoints(0).whole());
  auto optimizers =
      v1::OptimizerService::NewStub(after.Channel(worker->address()));
  grpc::ClientContext context;
  v1::GetOptimizerRequest request;
  request.set_optimizer_id(trainer.optimizer_id());
  v1::OptimizerInfo info;
  EXPECT_EQ(optimizers->GetOptimizer(&context, request, &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(after.FindParameter(worker->address(), "weight").ok());
}

// A second daemon started with `flags` exits 2 (the folder is locked).
void ExpectASecondDaemonRefused(const std::vector<std::string>& flags) {
  LocalWorkerOptions options;
  options.flags = flags;
  absl::StatusOr<std::unique_ptr<LocalWorker>> second =
      LocalWorker::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(
      absl::StrContains(second.status().message(), "exited with code 2"))
      << second.status();
}

// Two daemons cannot share a checkpoint folder: they would delete each
// other's saves.
TEST(DurableStateTest, ASecondDaemonOnTheSameFolderIsRefused) {
  const std::vector<std::string> flags = {"--checkpoint_dir=" +
                                          FreshDir("shared_folder")};
  std::unique_ptr<LocalWorker> first = StartWorkerOrDie(flags);
  ASSERT_NE(first, nullptr);
  ExpectASecondDaemonRefused(flags);
  // The first goes on, and saves.
  Client client;
  v1::CheckpointInfo saved;
  EXPECT_TRUE(SaveNow(client, first->address(), &saved).ok());
}

// A folder removed under the daemon is made and locked again at the next
// save (a second daemon on that path is still refused); one replaced by a
// file fails the save with FAILED_PRECONDITION saying why.
TEST(DurableStateTest, AFolderRemovedUnderTheDaemonIsLockedAgain) {
  const std::string dir = FreshDir("removed_folder");
  const std::vector<std::string> flags = {"--checkpoint_dir=" + dir};
  std::unique_ptr<LocalWorker> first = StartWorkerOrDie(flags);
  ASSERT_NE(first, nullptr);
  fs::remove_all(dir);
  Client client;
  v1::CheckpointInfo saved;
  grpc::Status status = SaveNow(client, first->address(), &saved);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(fs::exists(fs::path(dir) / "parameters" / "index.binpb"));
  ExpectASecondDaemonRefused(flags);

  fs::remove_all(dir);
  std::ofstream(dir) << "a file";
  status = SaveNow(client, first->address(), &saved);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(status.error_message(),
                                "the folder this daemon locked at start-up "
                                "was removed, moved or replaced"))
      << status.error_message();
  fs::remove(dir);
}

// A small tmpfs as the checkpoint folder; skipped where mounts are not
// allowed (not root, or a sandbox without CAP_SYS_ADMIN).
class FullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("full_disk");
    fs::create_directories(dir_);
    if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=1m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs at " << dir_ << ": "
                   << std::strerror(errno) << " (run as root)";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }

  // chattr +i (or -i) on a folder; false where the file system has no
  // such flag.
  static bool SetImmutable(const std::string& path, bool on) {
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return false;
    int flags = 0;
    bool done = ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    if (done) {
      flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
      done = ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    }
    close(fd);
    return done;
  }

  // A daemon on the folder, with a model stepped once and saved.
  void StartAndSaveOnce() {
    worker_ = StartWorkerOrDie({"--checkpoint_dir=" + dir_});
    ASSERT_NE(worker_, nullptr);
    trainer_ = std::make_unique<Trainer>(client_, worker_->address());
    ASSERT_NO_FATAL_FAILURE(trainer_->Create());
    ASSERT_TRUE(trainer_->Step(1, client_.NewContextId()));
    v1::CheckpointInfo saved;
    ASSERT_TRUE(SaveNow(client_, worker_->address(), &saved).ok());
  }

  std::string dir_;
  bool mounted_ = false;
  Client client_;
  std::unique_ptr<LocalWorker> worker_;
  std::unique_ptr<Trainer> trainer_;
};

TEST_F(FullDiskTest, ASaveThatDoesNotFitFailsAndKeepsThePrevious) {
  ASSERT_NO_FATAL_FAILURE(StartAndSaveOnce());
  LocalWorker* worker = worker_.get();
  Trainer& trainer = *trainer_;
  v1::CheckpointInfo saved;

  // 2 MiB of values do not fit in 1 MiB.
  auto large = client_.CreateParameterFrom(worker->address(), "large",
                                           Ramp({512 * 1024}));
  ASSERT_TRUE(large.ok());
  grpc::Status full = SaveNow(client_, worker->address(), &saved);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << full.error_message();
  EXPECT_TRUE(absl::StrContains(full.error_message(), "No space left"))
      << full.error_message();
  const v1::ListCheckpointsResponse listed =
      ListSaved(client_, worker->address());
  ASSERT_EQ(listed.checkpoints_size(), 1);
  EXPECT_TRUE(listed.checkpoints(0).whole());
  EXPECT_EQ(listed.checkpoints(0).parameters(), 2);
  EXPECT_TRUE(absl::StrContains(listed.last_save_error(), "No space left"));
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "parameters.new"));

  // The daemon goes on serving and stepping, and saves once there is room.
  ASSERT_TRUE(trainer.Step(2, client_.NewContextId()));
  ASSERT_TRUE(client_.DeleteParameter(*large).ok());
  grpc::Status fits = SaveNow(client_, worker->address(), &saved);
  EXPECT_TRUE(fits.ok()) << fits.error_message();
  EXPECT_EQ(ListSaved(client_, worker->address()).last_save_error(), "");
  EXPECT_TRUE(worker->Stop().ok());
}

// A folder that can no longer be written (here made immutable, as
// chattr +i does): the save fails with FAILED_PRECONDITION naming why, for
// the operator to fix, not INTERNAL; the previous checkpoint stays, and the
// daemon saves again once the folder is writable.
TEST_F(FullDiskTest, AFolderThatCannotBeWrittenFailsTheSaveAsAPrecondition) {
  ASSERT_NO_FATAL_FAILURE(StartAndSaveOnce());
  LocalWorker* worker = worker_.get();
  Trainer& trainer = *trainer_;
  v1::CheckpointInfo saved;
  if (!SetImmutable(dir_, true)) {
    GTEST_SKIP() << "this file system has no immutable flag";
  }
  grpc::Status refused = SaveNow(client_, worker->address(), &saved);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "not permitted"))
      << refused.error_message();
  ASSERT_TRUE(SetImmutable(dir_, false));
  ASSERT_TRUE(trainer.Step(2, client_.NewContextId()));
  EXPECT_TRUE(SaveNow(client_, worker->address(), &saved).ok());
  EXPECT_EQ(ListSaved(client_, worker->address()).checkpoints_size(), 2);
  EXPECT_TRUE(worker->Stop().ok());
}

// At start-up too: a checkpoint that cannot be restored for want of write
// access (a whole interrupted save to finish, the newest checkpoint
// immutable) exits 5, as README says of a checkpoint that cannot be
// restored (it exited 3, an unavailable device's code).
TEST_F(FullDiskTest, ACheckpointThatCannotBeRestoredForWantOfAccessExits5) {
  ASSERT_NO_FATAL_FAILURE(StartAndSaveOnce());
  ASSERT_TRUE(worker_->Stop().ok());
  const fs::path root(dir_);
  fs::copy(root / "parameters", root / "parameters.new",
           fs::copy_options::recursive);
  if (!SetImmutable((root / "parameters").string(), true)) {
    GTEST_SKIP() << "this file system has no immutable flag";
  }
  LocalWorkerOptions options;
  options.flags = {"--checkpoint_dir=" + dir_};
  absl::StatusOr<std::unique_ptr<LocalWorker>> refused =
      LocalWorker::Start(options);
  ASSERT_TRUE(SetImmutable((root / "parameters").string(), false));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(), "exited with code 5"))
      << refused.status();
}

// Seeded chaos: a daemon saving after every step (so that most kills land
// in the middle of a save) is SIGKILLed 20 times at random moments and
// restarted from its folder each time. Every restart restores exactly the
// state of some step the run went through (never a torn mix), never an
// older one than the previous restart had, and the run ends bit for bit
// where an uninterrupted one does.
TEST(DurableStateTest, SurvivesTwentyKillsAtRandomMoments) {
  const Shape weight = {512, 512};
  constexpr int kSteps = 45;
  // The uninterrupted run: the state after every step.
  std::vector<Trainer::State> reference;
  {
    std::unique_ptr<LocalWorker> worker = StartWorkerOrDie();
    ASSERT_NE(worker, nullptr);
    Client client;
    Trainer trainer(client, worker->address(), weight);
    ASSERT_NO_FATAL_FAILURE(trainer.Create());
    reference.push_back(trainer.Record());
    for (int n = 1; n <= kSteps; ++n) {
      ASSERT_TRUE(trainer.Step(n, client.NewContextId()));
      reference.push_back(trainer.Record());
    }
  }

  const std::string dir = FreshDir("chaos");
  const std::vector<std::string> flags = {"--checkpoint_dir=" + dir,
                                          "--checkpoint_every_steps=1",
                                          "--checkpoint_keep=2"};
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  auto client = std::make_unique<Client>();
  auto trainer = std::make_unique<Trainer>(*client, worker->address(), weight);
  ASSERT_NO_FATAL_FAILURE(trainer->Create());
  v1::CheckpointInfo saved;
  ASSERT_TRUE(SaveNow(*client, worker->address(), &saved).ok());
  const std::vector<RemoteParameter> parameters = trainer->parameters();
  const uint64_t optimizer_id = trainer->optimizer_id();

  std::mt19937 random(20261130);
  int step = 0;
  int restored_at_least = 0;
  int mid_save = 0;
  for (int kill = 0; kill < 20; ++kill) {
    const int steps = std::uniform_int_distribution<int>(1, 3)(random);
    for (int s = 0; s < steps && step < kSteps - 5; ++s) {
      ASSERT_TRUE(trainer->Step(++step, client->NewContextId()));
    }
    absl::SleepFor(absl::Microseconds(
        std::uniform_int_distribution<int>(0, 5000)(random)));
    if (fs::exists(fs::path(dir) / "parameters.new")) ++mid_save;
    worker->Signal(SIGKILL);
    ASSERT_TRUE(worker->Wait(absl::Seconds(30)).ok());
    trainer.reset();
    client.reset();
    worker = StartWorkerOrDie(flags);
    ASSERT_NE(worker, nullptr) << "kill " << kill;
    client = std::make_unique<Client>();
    trainer = std::make_unique<Trainer>(*client, worker->address(), weight);
    trainer->Attach(parameters, optimizer_id);
    const Trainer::State restored = trainer->Record();
    SCOPED_TRACE(absl::StrCat("kill ", kill, " after step ", step,
                              ", restored step ", restored.steps));
    ASSERT_GE(restored.steps, restored_at_least);
    ASSERT_LE(restored.steps, step);
    ASSERT_NO_FATAL_FAILURE(
        ExpectSameState(reference[restored.steps], restored));
    restored_at_least = static_cast<int>(restored.steps);
    step = static_cast<int>(restored.steps);
  }
  while (step < kSteps) {
    ASSERT_TRUE(trainer->Step(++step, client->NewContextId()));
  }
  ExpectSameState(reference[kSteps], trainer->Record());
  std::printf("kills while a save was being written: %d of 20\n", mid_save);
}

// A Save whose caller gives up (its deadline passes) while an earlier save
// is written is dropped when its turn comes: nothing more is saved, and
// no queue of them holds the daemon's threads.
TEST(DurableStateTest, ASaveWhoseCallerGaveUpIsNotMade) {
  std::unique_ptr<LocalWorker> worker =
      StartWorkerOrDie({"--checkpoint_dir=" + FreshDir("abandoned")});
  ASSERT_NE(worker, nullptr);
  Client client;
  // 512 MiB, initialised by the daemon: the first save takes a while.
  for (int p = 0; p < 16; ++p) {
    ASSERT_TRUE(client
                    .CreateParameter(worker->address(), absl::StrCat("p", p),
                                     DType::kFloat32, {4096, 2048},
                                     init::Constant(p))
                    .ok());
  }
  absl::StatusOr<v1::CheckpointInfo> first;
  std::thread saving([&] { first = client.SaveCheckpoint(worker->address()); });
  absl::SleepFor(absl::Milliseconds(50));  // The first is being saved.
  auto stub = v1::CheckpointService::NewStub(client.Channel(worker->address()));
  grpc::ClientContext impatient;
  impatient.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(30));
  v1::CheckpointInfo second;
  const grpc::Status gave_up =
      stub->Save(&impatient, v1::SaveCheckpointRequest(), &second);
  saving.join();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(gave_up.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_GT(first->write_seconds(), 0.03) << "the first save was too quick "
                                             "for the second to wait for it";
  absl::SleepFor(absl::Milliseconds(500));  // The second's turn has come.
  const v1::ListCheckpointsResponse listed =
      ListSaved(client, worker->address());
  // One save only (a second would keep the first as parameters.1).
  EXPECT_EQ(listed.checkpoints_size(), 1);
  EXPECT_EQ(listed.last_save_error(), "");
}

TEST(DurableStateTest, WithoutACheckpointDirSaveIsRefused) {
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie();
  ASSERT_NE(worker, nullptr);
  Client client;
  v1::CheckpointInfo saved;
  grpc::Status status = SaveNow(client, worker->address(), &saved);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "--checkpoint_dir"))
      << status.error_message();
}

}  // namespace
}  // namespace distopt
