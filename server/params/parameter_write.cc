#include "server/params/parameter_write.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<std::unique_ptr<ParameterWrite>> ParameterWrite::Begin(
    std::shared_ptr<Parameter> parameter, ParameterStore& store) {
  absl::StatusOr<Reservation> reservation = store.budget().Reserve(
      parameter->byte_size(),
      absl::StrCat("staging for the write of parameter \"", parameter->name(),
                   "\""));
  if (!reservation.ok()) return reservation.status();
  absl::StatusOr<Tensor> staging =
      Tensor::Allocate(store.backend(), parameter->dtype(), parameter->shape());
  if (!staging.ok()) return staging.status();
  return std::unique_ptr<ParameterWrite>(
      new ParameterWrite(std::move(parameter), *store.backend(),
                         *std::move(staging), *std::move(reservation)));
}

ParameterWrite::ParameterWrite(std::shared_ptr<Parameter> parameter,
                               Backend& backend, Tensor staging,
                               Reservation reservation)
    : parameter_(std::move(parameter)),
      backend_(backend),
      staging_(std::move(staging)),
      reservation_(std::move(reservation)) {}

absl::Status ParameterWrite::AddChunk(int64_t offset, absl::string_view data) {
  const int64_t size = static_cast<int64_t>(parameter_->byte_size());
  const int64_t length = static_cast<int64_t>(data.size());
  const int64_t element =
      static_cast<int64_t>(ElementSize(parameter_->dtype()));
  if (length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: empty chunk at offset ", offset,
                     "; expected at least one element"));
  }
  if (offset < 0 || offset > size || length > size - offset) {
    // Said as offset and length: offset + length may not fit 64 bits.
    return absl::InvalidArgumentError(absl::StrCat(
        "offset: a chunk of ", length, " bytes at offset ", offset,
        " is outside the parameter; expected a range within [0, ", size, ")"));
  }
  if (offset % element != 0 || length % element != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offset: chunk [", offset, ", ", offset + length,
        ") is not aligned; expected offset and length multiples of ", element,
        " (sizeof ", DTypeName(parameter_->dtype()), ")"));
  }
  const int64_t end = offset + length;
  auto next = written_.lower_bound(offset);
  if (next != written_.end() && next->first < end) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset: chunk [", offset, ", ", end, ") overlaps bytes [",
                     next->first, ", ", next->second,
                     ") written earlier; expected each byte written once"));
  }
  if (next != written_.begin() && std::prev(next)->second > offset) {
    auto previous = std::prev(next);
    return absl::InvalidArgumentError(
        absl::StrCat("offset: chunk [", offset, ", ", end, ") overlaps bytes [",
                     previous->first, ", ", previous->second,
                     ") written earlier; expected each byte written once"));
  }
  absl::Status status = backend_.CopyFromHost(
      static_cast<char*>(staging_.data()) + offset, data.data(), data.size());
  if (!status.ok()) return status;
  // Merge with touching neighbours so the map stays small for long streams.
  int64_t start = offset;
  int64_t stop = end;
  if (next != written_.begin() && std::prev(next)->second == offset) {
    auto previous = std::prev(next);
    start = previous->first;
    written_.erase(previous);
  }
  if (next != written_.end() && next->first == end) {
    stop = next->second;
    written_.erase(next);
  }
  written_[start] = stop;
  bytes_written_ += length;
  return absl::OkStatus();
}

absl::StatusOr<ParameterInfo> ParameterWrite::Commit() {
  const int64_t size = static_cast<int64_t>(parameter_->byte_size());
  if (bytes_written_ != size) {
    int64_t gap_start = 0;
    for (const auto& [start, stop] : written_) {
      if (start > gap_start) break;
      gap_start = stop;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "data: the stream ended after ", bytes_written_, " of ", size,
        " bytes (first missing byte: ", gap_start,
        "); expected chunks covering the whole parameter; the parameter is "
        "unchanged"));
  }
  absl::StatusOr<uint64_t> version =
      parameter_->ReplaceValues(std::move(staging_), std::move(reservation_));
  if (!version.ok()) return version.status();
  // The version this write made: another write may have moved it on since.
  ParameterInfo info = parameter_->Info();
  info.version = *version;
  return info;
}

}  // namespace distopt
