// The gradients of one data-parallel step, reduced bucket by bucket so that
// no scratch buffer grows with the model: a plan cuts the parameters that
// have a gradient on some rank into buckets of at most `bucket_elements`
// float32 values, every rank planning the same buckets. A parameter larger
// than an owner's share of a bucket either stays whole (alone, when it is
// larger than a bucket) or is cut into slices across consecutive buckets
// (see Slicing). Within a bucket the parameters are grouped by owner rank
// (block r holds owner r's), so that a reduce-scatter of the bucket gives
// each rank its own parameters' sums; each bucket takes about as much from
// every owner, so that the ring stays balanced. fp16 and bf16 gradients are
// widened, so the average is taken in fp32.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_
#define DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/backend.h"
#include "common/device_buffer.h"
#include "common/tensor.h"
#include "server/data_parallel/param_groups.h"
#include "server/optim/functional_optimizer.h"

namespace distopt {

// DDP's bucket_cap_mb: the default bucket of both data-parallel optimizers.
inline constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

// present[g][i]: parameter i of group g has a gradient on some rank.
using Presence = std::vector<std::vector<bool>>;

// Elements [begin, begin + count) of one parameter's gradient: all of it,
// or one slice of a parameter cut across buckets.
struct BucketEntry {
  int group = 0;
  int index = 0;
  int owner = 0;
  int64_t offset = 0;  // Where its gradient starts in the bucket.
  int64_t count = 0;   // Elements.
  int64_t begin = 0;   // The slice's first element in the parameter.
  // The parameter's elements: the entry is its last slice (or all of it)
  // when begin + count == total.
  int64_t total = 0;
};

struct GradientBucket {
  std::vector<BucketEntry> entries;  // By owner, then in plan order.
  std::vector<size_t> blocks;        // Elements per owner rank.
  int64_t size = 0;                  // Elements in all.
};

// What a plan does with a parameter larger than an owner's share of a
// bucket (bucket_elements / owners). kWhole: it stays whole, in a bucket
// that then takes less (or nothing) from the other owners, down to one
// parameter alone when it is larger than a bucket: a reduce-scatter of
// such a bucket moves bytes mostly one way. kSliced: it is cut so that
// every bucket takes an equal share from every owner that has gradients
// left, and the ring's links all carry bytes at once; its owner steps it
// slice by slice, each with its bucket (StepBucket, or piece by piece,
// StepReducedPiece), so that no buffer puts a parameter's averages
// together.
enum class Slicing { kWhole, kSliced };

// owner[g][i] in [0, owners): the rank that owns parameter i of group g
// (every parameter has owner 0 when every rank needs every average, as
// post-local SGD's all-reduce). Sliced, `block_elements` > 0 caps what one
// owner takes of a bucket (its block), also once the others have no
// gradients left: a reduce-scatter's ring then keeps no more than that of
// a block (its chunks, and at W > 2 its partial sums).
std::vector<GradientBucket> PlanGradientBuckets(
    const std::vector<ParamGroup>& groups,
    const std::vector<std::vector<int>>& owner, int owners,
    const Presence& present, int64_t bucket_elements,
    Slicing slicing = Slicing::kWhole, int64_t block_elements = 0);

// The largest bucket of a plan, in elements: the scratch a step needs.
int64_t LargestBucket(const std::vector<GradientBucket>& plan);
// The largest block of owner `rank` in a plan's buckets: what a reduce-
// scatter of the buckets keeps of one block (at W > 2, the ring's partial
// sums).
int64_t LargestBlock(const std::vector<GradientBucket>& plan, int rank);

// Copies this rank's gradients of the bucket's parameters into `values`
// (bucket.size elements, as fp32, on `device` with the gradients); a null
// one, for a parameter present elsewhere, counts as zeros. The gradients
// are checked already (CheckGradients).
absl::Status FillBucket(const GradientBucket& bucket,
                        const GroupGradientPointers& grads,
                        absl::Span<float> values, Backend& device);

// The bucket's gradients where they are, block by block (block r: owner
// r's entries, in bucket order), for Communicator::ReduceScatterSegments:
// every one must be present on this rank, float32, in host memory.
std::vector<std::vector<absl::Span<const float>>> GradientSpans(
    const GradientBucket& bucket, const GroupGradientPointers& grads);

// Where owner `rank`'s block begins in the bucket, in elements.
int64_t BlockBegin(const GradientBucket& bucket, int rank);

// What a rank steps of one parameter group: its optimizer, the parameters
// that optimizer was made over (in its order), and position[i], where the
// group's parameter i is among them (-1: another rank steps it).
struct GroupStepper {
  FunctionalOptimizer* optimizer = nullptr;
  std::vector<Tensor*> params;
  std::vector<int> position;
};

// Each group's optimizer.
std::vector<FunctionalOptimizer*> OptimizersOf(
    const std::vector<GroupStepper>& steppers);

// Steps the bucket's parameters that this rank steps (steppers[g] per
// group) with their averaged gradients from `values` (the bucket's, on the
// parameters' device; other owners' blocks unread): fp32 ones read in place,
// fp16/bf16 ones rounded to nearest even into `narrowed` (on that device too,
// kept by the caller from step to step: at most half a bucket). A slice of a
// parameter cut across buckets is stepped on its own
// (FunctionalOptimizer::StepSlice): buckets must come in plan order, and
// once a bucket is stepped, its parameters and slices hold their new
// values. `*changing` turns true before the first parameter changes.
absl::Status StepBucket(const GradientBucket& bucket,
                        const std::vector<ParamGroup>& groups,
                        absl::Span<float> values,
                        const std::vector<GroupStepper>& steppers,
                        DeviceBuffer* narrowed, std::atomic<bool>* changing);

// Steps what this rank steps of the bucket's elements [piece_begin,
// piece_begin + averages.size()) with their averaged gradients: a piece of
// its block as a reduce-scatter completes it
// (Communicator::ReduceScatterSegmentsPiecewise), fp32 parameters in host
// memory. Every parameter, whole or a slice, among them is stepped a slice
// at a time (FunctionalOptimizer::StepSlice, the kinds' updates being
// elementwise, with the same roundings as a whole step), so the pieces of
// a step must come in plan order. `*next_entry` (0 before a bucket's
// first piece) keeps where the next piece's entries begin, so that a
// bucket of many entries is walked once. `*changing` turns true before the
// first parameter changes. An entry of no elements is in no piece: the
// caller steps such parameters otherwise.
absl::Status StepReducedPiece(const GradientBucket& bucket,
                              const std::vector<ParamGroup>& groups,
                              int64_t piece_begin,
                              absl::Span<const float> averages,
                              const std::vector<GroupStepper>& steppers,
                              size_t* next_entry, std::atomic<bool>* changing);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_
