#include "server/zero/zero_specification.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distopt {
namespace {

// FNV-1a, not absl::Hash: that one is seeded per process, and the ranks are
// different processes.
uint64_t Fingerprint(absl::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace

std::vector<float> EncodeAsFloats(uint64_t value) {
  std::vector<float> floats;
  for (int shift = 0; shift < 64; shift += 16) {
    floats.push_back(static_cast<float>((value >> shift) & 0xffff));
  }
  return floats;
}

uint64_t DecodeFromFloats(const float* four) {
  uint64_t value = 0;
  for (int k = 0; k < 4; ++k) {
    value |= static_cast<uint64_t>(four[k]) << (16 * k);
  }
  return value;
}

SpecificationParts DescribeSpecification(
    const std::string& kind_name, const std::vector<ZeroParamGroup>& groups,
    const ZeroOptions& options, int first_group) {
  std::string hyperparameters;
  std::string parameters;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::string> sorted;
    for (const auto& [name, value] : groups[g].hyperparameters) {
      sorted.push_back(absl::StrCat(name, "=", HyperValueToString(value)));
    }
    std::sort(sorted.begin(), sorted.end());
    absl::StrAppend(&hyperparameters, "group ", first_group + g, ": ",
                    absl::StrJoin(sorted, " "), ";");
    absl::StrAppend(&parameters, "group ", first_group + g, ":");
    for (const Tensor* p : groups[g].params) {
      absl::StrAppend(&parameters, " ", DTypeName(p->dtype()),
                      ShapeToString(p->shape()));
    }
    absl::StrAppend(&parameters, ";");
  }
  return {{"optimizer kind", kind_name},
          {"hyperparameters", hyperparameters},
          {"parameter groups, dtypes and shapes", parameters},
          {"options", absl::StrCat("parameters_as_bucket_view=",
                                   options.parameters_as_bucket_view,
                                   " overlap=", options.overlap)}};
}

absl::Status CheckSameOnEveryRank(Communicator& communicator,
                                  const SpecificationParts& parts) {
  std::vector<float> mine;
  for (const auto& part : parts) {
    for (float f : EncodeAsFloats(Fingerprint(part.second))) {
      mine.push_back(f);
    }
  }
  std::vector<float> all(mine.size() * communicator.size());
  absl::Status status = communicator.AllGather(mine, absl::MakeSpan(all));
  if (!status.ok()) return status;
  for (size_t part = 0; part < parts.size(); ++part) {
    std::vector<int> differing;
    for (int r = 1; r < communicator.size(); ++r) {
      if (DecodeFromFloats(&all[r * mine.size() + part * 4]) !=
          DecodeFromFloats(&all[part * 4])) {
        differing.push_back(r);
      }
    }
    if (!differing.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          parts[part].first, ": rank(s) ", absl::StrJoin(differing, ", "),
          " differ from rank 0 (this rank, ", communicator.rank(), ", has ",
          parts[part].second,
          "); expected the same specification on every rank"));
    }
  }
  return absl::OkStatus();
}

}  // namespace distopt
