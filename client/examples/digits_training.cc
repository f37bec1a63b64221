#include "client/examples/digits_training.h"

#include <zlib.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/dist_autograd_context.h"
#include "client/distributed_optimizer.h"
#include "client/layers.h"
#include "client/local_ops.h"

namespace distopt {

absl::StatusOr<DigitsData> LoadDigits(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  }
  DigitsData data;
  char line[4096];
  while (gzgets(file, line, sizeof(line)) != nullptr) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(line), ',');
    if (fields.size() != 65) continue;
    std::vector<float> pixels(64);
    int64_t label = 0;
    bool ok = absl::SimpleAtoi(fields[64], &label);
    for (int i = 0; i < 64 && ok; ++i)
      ok = absl::SimpleAtof(fields[i], &pixels[i]);
    if (!ok) {
      gzclose(file);
      return absl::DataLossError(absl::StrCat(path, ": malformed row"));
    }
    data.pixels.push_back(std::move(pixels));
    data.labels.push_back(label);
  }
  gzclose(file);
  if (data.labels.empty()) {
    return absl::DataLossError(absl::StrCat(path, ": no rows"));
  }
  return data;
}

// Rows `order[begin, end)` of the data as a [n, 64] tensor in [0, 1].
Tensor DigitsBatch(const DigitsData& data, const std::vector<size_t>& order,
                   size_t begin, size_t end, std::vector<int64_t>* labels) {
  Tensor x = *Tensor::AllocateHost(DType::kFloat32,
                                   {static_cast<int64_t>(end - begin), 64});
  float* values = static_cast<float*>(x.data());
  labels->clear();
  for (size_t i = begin; i < end; ++i) {
    for (int p = 0; p < 64; ++p) {
      values[(i - begin) * 64 + p] = data.pixels[order[i]][p] / 16.0f;
    }
    labels->push_back(data.labels[order[i]]);
  }
  return x;
}

absl::StatusOr<DigitsResult> TrainDigits(const DigitsOptions& options) {
  absl::StatusOr<DigitsData> data = LoadDigits(options.data_path);
  if (!data.ok()) return data.status();
  // A fixed shuffle; the last 20% is held out.
  std::vector<size_t> order(data->labels.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(options.seed);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t train = order.size() * 4 / 5;
  std::vector<size_t> train_order(order.begin(), order.begin() + train);
  std::vector<size_t> test_order(order.begin() + train, order.end());

  Client client;
  absl::StatusOr<RemoteLinear> layer1 = RemoteLinear::Create(
      &client, options.worker_a, "layer1", 64, options.hidden, options.seed);
  if (!layer1.ok()) return layer1.status();
  absl::StatusOr<RemoteLinear> layer2 =
      RemoteLinear::Create(&client, options.worker_b, "layer2", options.hidden,
                           10, options.seed + 10);
  if (!layer2.ok()) return layer2.status();
  std::vector<RemoteParameter> parameters = layer1->parameters();
  for (const RemoteParameter& p : layer2->parameters()) parameters.push_back(p);
  absl::StatusOr<std::unique_ptr<DistributedOptimizer>> optimizer =
      DistributedOptimizer::Create(
          &client, "adam", parameters,
          {{"lr", hyper::Number(options.learning_rate)}});
  if (!optimizer.ok()) return optimizer.status();

  // One batch, indices[begin, end), in a context of its own: adds its
  // loss and correct predictions (only once it went through) and trains
  // when `learn` is set.
  auto run_batch = [&](std::vector<size_t>& indices, size_t begin, size_t end,
                       bool learn, double* total_loss,
                       int* correct) -> absl::Status {
    std::vector<int64_t> labels;
    DistAutogradContext context(&client);
    Variable x{DigitsBatch(*data, indices, begin, end, &labels), -1};
    absl::StatusOr<Variable> hidden = layer1->Forward(context, x);
    if (!hidden.ok()) return hidden.status();
    absl::StatusOr<Variable> logits =
        layer2->Forward(context, Relu(context, *hidden));
    if (!logits.ok()) return logits.status();
    absl::StatusOr<CrossEntropyResult> ce =
        SoftmaxCrossEntropy(context, *logits, labels);
    if (!ce.ok()) return ce.status();
    if (learn) {
      Tensor one = *Tensor::AllocateHost(DType::kFloat32, {});
      one.host_span<float>()[0] = 1.0f;
      absl::Status status = context.Backward(ce->loss, one);
      if (status.ok()) status = (*optimizer)->Step(context.id());
      if (!status.ok()) return status;
    }
    *total_loss += ce->loss.value.host_span<float>()[0] * (end - begin);
    for (size_t i = 0; i < labels.size(); ++i) {
      *correct += ce->predictions[i] == labels[i];
    }
    return absl::OkStatus();
  };

  // One pass over `indices`; trains when `learn` is set.
  auto run = [&](std::vector<size_t>& indices, bool learn, double* loss,
                 double* accuracy) -> absl::Status {
    double total_loss = 0;
    int correct = 0;
    for (size_t begin = 0; begin < indices.size();
         begin += options.batch_size) {
      const size_t end = std::min(indices.size(), begin + options.batch_size);
      absl::Status batch;
      const absl::Time give_up = absl::Now() + options.retry_for;
      while (true) {
        batch = run_batch(indices, begin, end, learn, &total_loss, &correct);
        if (batch.ok() || absl::Now() >= give_up) break;
        absl::SleepFor(absl::Milliseconds(50));
      }
      if (!batch.ok()) return batch;
    }
    *loss = total_loss / indices.size();
    *accuracy = static_cast<double>(correct) / indices.size();
    return absl::OkStatus();
  };

  DigitsResult result;
  result.train_examples = static_cast<int>(train_order.size());
  result.test_examples = static_cast<int>(test_order.size());
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    std::shuffle(train_order.begin(), train_order.end(), rng);
    double loss = 0, accuracy = 0;
    absl::Status status = run(train_order, true, &loss, &accuracy);
    if (!status.ok()) return status;
    result.final_loss = loss;
    if (options.on_epoch) options.on_epoch(epoch, loss, accuracy);
  }
  double test_loss = 0;
  absl::Status status =
      run(test_order, false, &test_loss, &result.test_accuracy);
  if (!status.ok()) return status;
  return result;
}

}  // namespace distopt
