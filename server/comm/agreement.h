// Checks that make every rank of a group reach the same verdict, so that
// no rank goes on to a collective the others skip (which would hang until
// the timeout).
#ifndef DISTOPT_SERVER_COMM_AGREEMENT_H_
#define DISTOPT_SERVER_COMM_AGREEMENT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/comm/communicator.h"

namespace distopt {

// Named parts of a specification, each rendered as text.
using SpecificationParts = std::vector<std::pair<std::string, std::string>>;

// Collective. FAILED_PRECONDITION on every rank, naming the part and the
// differing ranks, unless every rank passed the same parts.
absl::Status CheckSameOnEveryRank(Communicator& communicator,
                                  const SpecificationParts& parts);

// Collective. OK when `local` is OK on every rank; else this rank's own
// error, or FAILED_PRECONDITION naming the rank that refused `what`,
// followed by `consequence`.
absl::Status AgreeOnEveryRank(
    Communicator& communicator, const absl::Status& local,
    absl::string_view what,
    absl::string_view consequence = "nothing changed on any rank");

// An agreement that rides in a collective a call makes anyway (a step's
// header), costing no round of its own: `RefusalSlots` are this rank's
// part, one float per rank, 1 at its own when `local` refused; summed (or
// gathered) over the ranks, `VerdictOfRefusals` reads them as
// AgreeOnEveryRank does.
std::vector<float> RefusalSlots(const Communicator& communicator,
                                const absl::Status& local);
absl::Status VerdictOfRefusals(
    const Communicator& communicator, absl::Span<const float> summed,
    const absl::Status& local, absl::string_view what,
    absl::string_view consequence = "nothing changed on any rank");

// The same bytes give the same fingerprint on every rank (unlike
// absl::Hash, which is seeded per process).
uint64_t Fingerprint(absl::string_view bytes);

// An unsigned integer as four floats of 16 bits each, every one exactly
// representable, so that it crosses float collectives unchanged.
std::vector<float> EncodeAsFloats(uint64_t value);
uint64_t DecodeFromFloats(const float* four);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_AGREEMENT_H_
