#include "server/comm/communicator.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/backend.h"

namespace distopt {

int64_t Communicator::kept_bytes() const {
  return packing_ == nullptr ? 0 : static_cast<int64_t>(packing_->capacity());
}

absl::StatusOr<DeviceBuffer*> Communicator::Packing() {
  // On the communicator's device (its collectives' spans live there).
  if (packing_ == nullptr) {
    absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(device());
    if (!backend.ok()) return backend.status();
    packing_ = std::make_unique<DeviceBuffer>(*backend);
  }
  return packing_.get();
}

absl::Status Communicator::AllGatherSegments(
    const std::vector<std::vector<absl::Span<char>>>& blocks) {
  if (static_cast<int>(blocks.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "blocks: ", blocks.size(), "; expected one per rank (", size(), ")"));
  }
  std::vector<size_t> counts(blocks.size(), 0);
  for (size_t r = 0; r < blocks.size(); ++r) {
    for (absl::Span<char> segment : blocks[r]) counts[r] += segment.size();
  }
  size_t total = 0;
  for (size_t count : counts) total += count;
  absl::StatusOr<DeviceBuffer*> packing = Packing();
  if (!packing.ok()) return AsCollectiveFailure(packing.status());
  Backend* const backend = &(*packing)->backend();
  // Bounded by the caller's blocks (a bucket); not zero-filled: every byte
  // is written before it is read.
  absl::StatusOr<char*> reserved = (*packing)->Reserve(total);
  if (!reserved.ok()) return AsCollectiveFailure(reserved.status());
  char* const packed_data = *reserved;
  absl::Status copied;
  auto for_each_segment = [&](auto visit) {
    size_t offset = 0;
    for (size_t r = 0; r < blocks.size(); ++r) {
      for (absl::Span<char> segment : blocks[r]) {
        visit(static_cast<int>(r), segment, packed_data + offset);
        offset += segment.size();
      }
    }
  };
  for_each_segment([&](int r, absl::Span<char> segment, char* at) {
    if (r == rank() && copied.ok()) {
      copied = backend->CopyWithinDevice(at, segment.data(), segment.size());
    }
  });
  // A failed copy still takes part, so that no peer waits for this rank.
  absl::Status status =
      AllGatherBlocks(absl::MakeSpan(packed_data, total), counts);
  if (!status.ok()) return status;
  for_each_segment([&](int r, absl::Span<char> segment, char* at) {
    if (r != rank() && copied.ok()) {
      copied = backend->CopyWithinDevice(segment.data(), at, segment.size());
    }
  });
  return AsCollectiveFailure(copied);
}

absl::StatusOr<absl::Span<float>> Communicator::PackedReduceScatter(
    const std::vector<std::vector<absl::Span<const float>>>& inputs,
    ReduceOp op) {
  if (static_cast<int>(inputs.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs: ", inputs.size(), "; expected one per rank (", size(), ")"));
  }
  std::vector<size_t> counts(inputs.size(), 0);
  for (size_t r = 0; r < inputs.size(); ++r) {
    for (absl::Span<const float> segment : inputs[r]) {
      counts[r] += segment.size();
    }
  }
  size_t total = 0;
  for (size_t count : counts) total += count;
  absl::StatusOr<DeviceBuffer*> packing = Packing();
  if (!packing.ok()) return AsCollectiveFailure(packing.status());
  Backend* const backend = &(*packing)->backend();
  absl::StatusOr<absl::Span<float>> packed = (*packing)->Elements<float>(total);
  if (!packed.ok()) return AsCollectiveFailure(packed.status());
  absl::Status copied;
  size_t offset = 0, own = 0;
  for (size_t r = 0; r < inputs.size(); ++r) {
    if (static_cast<int>(r) == rank()) own = offset;
    for (absl::Span<const float> segment : inputs[r]) {
      if (copied.ok()) {
        copied =
            backend->CopyWithinDevice(packed->data() + offset, segment.data(),
                                      segment.size() * sizeof(float));
      }
      offset += segment.size();
    }
  }
  // A failed copy still takes part, so that no peer waits for this rank.
  absl::Status status = ReduceScatterBlocks(*packed, counts, op);
  if (!status.ok()) return status;
  if (!copied.ok()) return AsCollectiveFailure(copied);
  return packed->subspan(own, counts[rank()]);
}

absl::Status Communicator::ReduceScatterSegments(
    const std::vector<std::vector<absl::Span<const float>>>& inputs,
    absl::Span<float> output, ReduceOp op) {
  if (static_cast<int>(inputs.size()) == size()) {
    size_t own = 0;
    for (absl::Span<const float> segment : inputs[rank()]) {
      own += segment.size();
    }
    if (output.size() != own) {
      return absl::InvalidArgumentError(
          absl::StrCat("output: ", output.size(), " elements; expected ", own,
                       " (this rank's block)"));
    }
  }
  absl::StatusOr<absl::Span<float>> block = PackedReduceScatter(inputs, op);
  if (!block.ok()) return block.status();
  // The block lies in packing_, made by then.
  return AsCollectiveFailure(packing_->backend().CopyWithinDevice(
      output.data(), block->data(), output.size() * sizeof(float)));
}

absl::Status Communicator::ReduceScatterSegmentsPiecewise(
    const std::vector<std::vector<absl::Span<const float>>>& inputs,
    ReduceOp op, ReducedPieces take) {
  absl::StatusOr<absl::Span<float>> block = PackedReduceScatter(inputs, op);
  if (!block.ok()) return block.status();
  take(0, *block);
  return absl::OkStatus();
}

}  // namespace distopt
