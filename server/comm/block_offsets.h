// The block layout of the in-place collectives over blocks of any size
// (Communicator::ReduceScatterBlocks, AllGatherBlocks): one count per rank,
// in rank order, adding up to the buffer.
#ifndef DISTOPT_SERVER_COMM_BLOCK_OFFSETS_H_
#define DISTOPT_SERVER_COMM_BLOCK_OFFSETS_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace distopt {

// Where each block starts. INVALID_ARGUMENT unless there is a count per
// rank (`ranks` of them) and they add up to `total`, the size of the buffer
// named `field`.
absl::StatusOr<std::vector<size_t>> BlockOffsets(
    absl::Span<const size_t> counts, int ranks, size_t total,
    absl::string_view field);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_BLOCK_OFFSETS_H_
