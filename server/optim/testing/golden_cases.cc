#include "server/optim/testing/golden_cases.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace distopt {
namespace {

double ParseHex(const std::string& text) {
  return std::strtod(text.c_str(), nullptr);
}

std::vector<float> ParseFloats(std::istringstream& in) {
  std::vector<float> values;
  std::string word;
  while (in >> word) values.push_back(static_cast<float>(ParseHex(word)));
  return values;
}

template <typename T>
T& Slot(std::vector<T>& slots, size_t index) {
  if (slots.size() <= index) slots.resize(index + 1);
  return slots[index];
}

}  // namespace

std::string GoldenFilePath() {
  const char* root = std::getenv("TEST_SRCDIR");
  return absl::StrCat(root == nullptr ? "." : root,
                      "/distopt/server/optim/testdata/optimizer_golden.txt");
}

absl::StatusOr<std::vector<GoldenCase>> ReadGoldenCases(
    const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<GoldenCase> cases;
  std::string line;
  int line_number = 0;
  while (std::getline(file, line)) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string record;
    in >> record;
    if (record == "case") {
      cases.emplace_back();
      in >> cases.back().name;
      continue;
    }
    if (cases.empty()) {
      return absl::DataLossError(
          absl::StrCat(path, ":", line_number, ": record before a case"));
    }
    GoldenCase& current = cases.back();
    size_t index = 0;
    if (record == "kind") {
      in >> current.kind;
    } else if (record == "dtype") {
      std::string name;
      in >> name;
      absl::StatusOr<DType> dtype = ParseDType(name);
      if (!dtype.ok()) return dtype.status();
      current.dtype = *dtype;
    } else if (record == "hyper") {
      std::string name, type, a, b;
      in >> name >> type >> a;
      if (type == "number") {
        current.hyperparameters[name] = ParseHex(a);
      } else if (type == "bool") {
        current.hyperparameters[name] = a == "1";
      } else {
        in >> b;
        current.hyperparameters[name] =
            std::make_pair(ParseHex(a), ParseHex(b));
      }
    } else if (record == "param") {
      std::string shape;
      in >> index >> shape;
      Shape dims;
      if (shape != "-") {
        for (absl::string_view dim : absl::StrSplit(shape, ',')) {
          int64_t value = 0;
          if (!absl::SimpleAtoi(dim, &value)) {
            return absl::DataLossError(
                absl::StrCat(path, ":", line_number, ": bad shape"));
          }
          dims.push_back(value);
        }
      }
      Slot(current.shapes, index) = dims;
      Slot(current.initial_params, index) = ParseFloats(in);
    } else if (record == "step") {
      current.steps.emplace_back();
    } else if (current.steps.empty()) {
      return absl::DataLossError(
          absl::StrCat(path, ":", line_number, ": record before a step"));
    } else if (record == "grad") {
      in >> index;
      GoldenStep& step = current.steps.back();
      if (line.find("none") != std::string::npos) {
        Slot(step.grads, index) = std::nullopt;
      } else {
        Slot(step.grads, index) = ParseFloats(in);
      }
    } else if (record == "expect_param") {
      in >> index;
      Slot(current.steps.back().expected_params, index) = ParseFloats(in);
    } else if (record == "expect_step") {
      int64_t count = 0;
      in >> index >> count;
      Slot(current.steps.back().expected_steps, index) = count;
    } else if (record == "expect_state") {
      std::string name;
      in >> index >> name;
      Slot(current.steps.back().expected_state, index)[name] = ParseFloats(in);
    } else if (record != "end") {
      return absl::DataLossError(
          absl::StrCat(path, ":", line_number, ": unknown record ", record));
    }
  }
  return cases;
}

}  // namespace distopt
