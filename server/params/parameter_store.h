// ParameterStore: the parameters one daemon owns, by id and by unique name.
//
// Every method validates its input before it touches state, so a refused
// call changes nothing. Ids are assigned in increasing order and never
// reused. Thread-safe; parameter values have their own locks (Parameter).
#ifndef DISTOPT_SERVER_PARAMS_PARAMETER_STORE_H_
#define DISTOPT_SERVER_PARAMS_PARAMETER_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/backend.h"
#include "common/memory_budget.h"
#include "server/params/initializer.h"
#include "server/params/parameter.h"

namespace distopt {

// Names a parameter by id or by name (exactly one is set).
struct ParameterKey {
  static ParameterKey ById(uint64_t id) { return {id, ""}; }
  static ParameterKey ByName(std::string name) { return {std::nullopt, name}; }

  std::optional<uint64_t> id;
  std::string name;
};

struct CreateParameterSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  Initializer initializer = ZerosInit{};
};

struct ParameterPage {
  std::vector<ParameterInfo> parameters;
  // Id to continue after; nullopt when there are no more.
  std::optional<uint64_t> next_after_id;
};

class ParameterStore {
 public:
  // Longest parameter name accepted.
  static constexpr size_t kMaxNameLength = 256;

  // Values live on `backend`'s device; every tensor is charged to `budget`,
  // which must outlive the store.
  ParameterStore(std::shared_ptr<Backend> backend, MemoryBudget* budget);
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  // ALREADY_EXISTS for a taken name; INVALID_ARGUMENT for a bad name, shape,
  // dtype or initializer; RESOURCE_EXHAUSTED over the budget.
  absl::StatusOr<ParameterInfo> Create(const CreateParameterSpec& spec);

  // NOT_FOUND for an unknown id or name.
  absl::StatusOr<std::shared_ptr<Parameter>> Find(
      const ParameterKey& key) const;

  // Parameters with ids above `after_id` whose names start with
  // `name_prefix`, at most `limit` of them, in id order.
  ParameterPage List(absl::string_view name_prefix, uint64_t after_id,
                     size_t limit) const;

  // Removes the parameter; its memory is freed once no reader holds it.
  absl::StatusOr<ParameterInfo> Delete(const ParameterKey& key);

  // Puts back parameters saved in a checkpoint, with their ids, names and
  // versions, all of them or (on any error) none; ids given out later are
  // above every restored one. `fill` writes the values into the new
  // tensors, one per info in order (all allocated first, so that one read
  // can fill them all). ALREADY_EXISTS for a taken id or name (or one twice
  // in `infos`), RESOURCE_EXHAUSTED over the budget, both before `fill` is
  // called (and a taken id or name again after it).
  absl::Status Restore(
      absl::Span<const ParameterInfo> infos,
      const std::function<absl::Status(absl::Span<Tensor>)>& fill);

  // The id the next parameter will get; every id below it has been given
  // out (and is never given again).
  uint64_t next_id() const ABSL_LOCKS_EXCLUDED(mutex_);

  // How many parameters the store holds, and their values' bytes.
  struct Census {
    size_t parameters = 0;
    uint64_t bytes = 0;
  };
  Census Count() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Ids below `next_id` are never given out (they were, before a restart).
  void ReserveIdsBelow(uint64_t next_id) ABSL_LOCKS_EXCLUDED(mutex_);

  const std::shared_ptr<Backend>& backend() const { return backend_; }
  MemoryBudget& budget() const { return *budget_; }

 private:
  // ALREADY_EXISTS for an id or name of `infos` the store has, or that
  // `infos` holds twice.
  absl::Status RestoredIdsAreFree(absl::Span<const ParameterInfo> infos) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status RestoredIdsAreFreeLocked(absl::Span<const ParameterInfo> infos)
      const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::shared_ptr<Backend> backend_;
  MemoryBudget* const budget_;

  mutable absl::Mutex mutex_;
  uint64_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, std::shared_ptr<Parameter>> by_id_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, uint64_t> id_by_name_
      ABSL_GUARDED_BY(mutex_);
};

// INVALID_ARGUMENT unless `name` has 1 to kMaxNameLength printable ASCII
// characters.
absl::Status ValidateParameterName(absl::string_view name,
                                   absl::string_view field);

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_PARAMETER_STORE_H_
