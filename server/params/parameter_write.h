// ParameterWrite: a whole-parameter write that arrives in chunks.
//
// Chunks are copied into a staging tensor on the parameter's device as they
// arrive, in any order; they must be aligned to the element size, inside the
// parameter, and must not overlap. Commit() swaps the staging tensor in at
// once if the chunks covered every byte, so readers see the old values or
// the new ones, never a mix, and a refused or abandoned write changes
// nothing. The staging bytes count against the daemon's memory budget while
// the write is open. Not thread-safe: one stream drives one write.
#ifndef DISTOPT_SERVER_PARAMS_PARAMETER_WRITE_H_
#define DISTOPT_SERVER_PARAMS_PARAMETER_WRITE_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/memory_budget.h"
#include "common/tensor.h"
#include "server/params/parameter.h"
#include "server/params/parameter_store.h"

namespace distopt {

class ParameterWrite {
 public:
  // Reserves and allocates the staging tensor; RESOURCE_EXHAUSTED over the
  // budget.
  static absl::StatusOr<std::unique_ptr<ParameterWrite>> Begin(
      std::shared_ptr<Parameter> parameter, ParameterStore& store);

  // Copies `data` to byte `offset`. INVALID_ARGUMENT naming "offset" or
  // "data" when the chunk is empty, misaligned, out of range or overlaps an
  // earlier one; the write stays open (and unchanged) after a refusal.
  absl::Status AddChunk(int64_t offset, absl::string_view data);

  // Installs the new values. INVALID_ARGUMENT when bytes are missing (the
  // stream ended short), naming the first gap.
  absl::StatusOr<ParameterInfo> Commit();

  const Parameter& parameter() const { return *parameter_; }

 private:
  ParameterWrite(std::shared_ptr<Parameter> parameter, Backend& backend,
                 Tensor staging, Reservation reservation);

  std::shared_ptr<Parameter> parameter_;
  Backend& backend_;
  Tensor staging_;
  Reservation reservation_;
  // Byte ranges written so far: start -> end (exclusive), never overlapping.
  std::map<int64_t, int64_t> written_;
  int64_t bytes_written_ = 0;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_PARAMETER_WRITE_H_
