// Trains a two-layer MLP on the UCI hand-written digits through two worker
// daemons: layer 1 on one, layer 2 on the other, Adam through
// DistributedOptimizer, one distributed autograd context per mini-batch.
// The demo and its test share this.
#ifndef DISTOPT_CLIENT_EXAMPLES_DIGITS_TRAINING_H_
#define DISTOPT_CLIENT_EXAMPLES_DIGITS_TRAINING_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tensor.h"

namespace distopt {

struct DigitsOptions {
  std::string data_path;  // digits.csv.gz
  std::string worker_a;   // Holds layer 1.
  std::string worker_b;   // Holds layer 2.
  int hidden = 64;
  int epochs = 25;
  int batch_size = 64;
  double learning_rate = 0.01;
  uint64_t seed = 1;
  // Called after every epoch with (epoch, mean loss, train accuracy).
  std::function<void(int, double, double)> on_epoch;
  // A training batch that fails (a worker restarting from its checkpoint,
  // say) is tried again, in a new context, for up to this long; zero: the
  // training fails with it.
  absl::Duration retry_for = absl::ZeroDuration();
};

struct DigitsResult {
  int train_examples = 0;
  int test_examples = 0;
  double final_loss = 0;
  double test_accuracy = 0;
};

// The 1797 examples: 64 pixels in [0, 16] and a label, from the CSV.
struct DigitsData {
  std::vector<std::vector<float>> pixels;
  std::vector<int64_t> labels;
};
absl::StatusOr<DigitsData> LoadDigits(const std::string& path);

// Rows `order[begin, end)` of the data as a [n, 64] tensor scaled to
// [0, 1], and their labels.
Tensor DigitsBatch(const DigitsData& data, const std::vector<size_t>& order,
                   size_t begin, size_t end, std::vector<int64_t>* labels);

absl::StatusOr<DigitsResult> TrainDigits(const DigitsOptions& options);

}  // namespace distopt

#endif  // DISTOPT_CLIENT_EXAMPLES_DIGITS_TRAINING_H_
