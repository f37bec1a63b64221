#include "server/comm/agreement.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distopt {

// FNV-1a, not absl::Hash: that one is seeded per process, and the ranks are
// different processes.
uint64_t Fingerprint(absl::string_view bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

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

std::vector<float> RefusalSlots(const Communicator& communicator,
                                const absl::Status& local) {
  std::vector<float> slots(communicator.size(), 0.0f);
  slots[communicator.rank()] = local.ok() ? 0.0f : 1.0f;
  return slots;
}

absl::Status VerdictOfRefusals(const Communicator& communicator,
                               absl::Span<const float> summed,
                               const absl::Status& local,
                               absl::string_view what,
                               absl::string_view consequence) {
  if (!local.ok()) return local;
  for (int r = 0; r < communicator.size(); ++r) {
    if (summed[r] > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": rank ", r,
                       " refused it (its own error says why); ", consequence));
    }
  }
  return absl::OkStatus();
}

absl::Status AgreeOnEveryRank(Communicator& communicator,
                              const absl::Status& local, absl::string_view what,
                              absl::string_view consequence) {
  std::vector<float> refused = RefusalSlots(communicator, local);
  absl::Status status =
      communicator.AllReduce(absl::MakeSpan(refused), ReduceOp::kSum);
  if (!status.ok()) return status;
  return VerdictOfRefusals(communicator, refused, local, what, consequence);
}

}  // namespace distopt
