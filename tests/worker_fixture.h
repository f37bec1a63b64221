// A GoogleTest fixture that runs one real distopt_worker process on a port
// the OS picks, with a Client to drive it, plus small tensor helpers.
#ifndef DISTOPT_TESTS_WORKER_FIXTURE_H_
#define DISTOPT_TESTS_WORKER_FIXTURE_H_

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/local_worker.h"
#include "common/tensor.h"
#include "gtest/gtest.h"

namespace distopt {
namespace testing {

// The secret of the data-parallel groups tests start.
inline constexpr char kTestGroupSecret[] = "the secret of a test group";

// Starts a worker with `flags` (a rank of a group with `group_secret`);
// fails the test if it does not come up.
inline std::unique_ptr<LocalWorker> StartWorkerOrDie(
    std::vector<std::string> flags = {}, std::string group_secret = "") {
  LocalWorkerOptions options;
  options.flags = std::move(flags);
  options.group_secret = std::move(group_secret);
  absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
      LocalWorker::Start(options);
  EXPECT_TRUE(worker.ok()) << worker.status();
  return worker.ok() ? *std::move(worker) : nullptr;
}

// Starts a rank of a test group (the group's secret given).
inline std::unique_ptr<LocalWorker> StartRankOrDie(
    std::vector<std::string> flags) {
  return StartWorkerOrDie(std::move(flags), kTestGroupSecret);
}

// A host float32 tensor of `shape` holding start, start + step, ...
inline Tensor Ramp(const Shape& shape, float start = 0, float step = 1) {
  Tensor t = *Tensor::AllocateHost(DType::kFloat32, shape);
  float value = start;
  for (float& x : t.host_span<float>()) {
    x = value;
    value += step;
  }
  return t;
}

inline bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

class WorkerTest : public ::testing::Test {
 protected:
  // Flags for the worker; override to configure it.
  virtual std::vector<std::string> WorkerFlags() const { return {}; }
  // The group's secret, for a worker that is a rank of a group.
  virtual std::string GroupSecret() const { return ""; }

  void SetUp() override {
    worker_ = StartWorkerOrDie(WorkerFlags(), GroupSecret());
    ASSERT_NE(worker_, nullptr);
    address_ = worker_->address();
  }

  // Declared first so that it is destroyed last: the client's idle
  // connections close first, and the daemon then stops at once instead of
  // waiting for the client to notice its GOAWAY.
  std::unique_ptr<LocalWorker> worker_;
  std::string address_;
  Client client_;
};

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_TESTS_WORKER_FIXTURE_H_
