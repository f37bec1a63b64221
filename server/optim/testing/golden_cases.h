// Reads the golden vectors that tools/golden/generate_optimizer_golden.py
// writes from torch.optim (testdata/optimizer_golden.txt), for the parity
// tests of every optimizer implementation (CPU and CUDA).
#ifndef DISTOPT_SERVER_OPTIM_TESTING_GOLDEN_CASES_H_
#define DISTOPT_SERVER_OPTIM_TESTING_GOLDEN_CASES_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/shape.h"
#include "server/optim/hyperparameters.h"

namespace distopt {

struct GoldenStep {
  // Per parameter: the gradient, or nullopt when it has none this step.
  std::vector<std::optional<std::vector<float>>> grads;
  std::vector<std::vector<float>> expected_params;
  // Per parameter: torch's state["step"], when it keeps one.
  std::vector<std::optional<int64_t>> expected_steps;
  // Per parameter: state buffer name -> values.
  std::vector<std::map<std::string, std::vector<float>>> expected_state;
};

struct GoldenCase {
  std::string name;
  std::string kind;
  DType dtype = DType::kFloat32;
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> initial_params;
  std::vector<GoldenStep> steps;
};

// Parses the golden file at `path`.
absl::StatusOr<std::vector<GoldenCase>> ReadGoldenCases(
    const std::string& path);

// The golden file shipped with the tests, found through Bazel's runfiles.
std::string GoldenFilePath();

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_TESTING_GOLDEN_CASES_H_
