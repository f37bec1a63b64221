#include "server/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cuda_stream.h"
#include "common/metrics.h"
#include "server/comm/block_offsets.h"
#include "server/comm/collective_metrics.h"
#include "server/comm/nccl_library.h"

namespace distopt {
namespace {

// NCCL's functions, opened by CreateNcclCommunicator before any other use
// (nccl_library.h).
const NcclLibrary& Nccl() { return **LoadNccl(); }

absl::Status CudaError(absl::string_view what, cudaError_t error) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status NcclError(absl::string_view what, ncclResult_t result) {
  const std::string text =
      absl::StrCat(what, ": ", Nccl().get_error_string(result));
  return result == ncclRemoteError || result == ncclSystemError
             ? absl::UnavailableError(text)
             : absl::InternalError(text);
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream,
                   cudaEvent_t inputs_ready, cudaEvent_t done, int rank,
                   int size, int device, absl::Duration timeout)
      : comm_(comm),
        stream_(stream),
        inputs_ready_(inputs_ready),
        done_(done),
        rank_(rank),
        size_(size),
        device_(device),
        timeout_(timeout) {}

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    // Aborted already when it broke.
    if (!broken_) Nccl().comm_destroy(comm_);
    cudaEventDestroy(inputs_ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::Cuda(device_); }
  void SetTimeout(absl::Duration timeout) override { timeout_ = timeout; }

  absl::Status AllReduce(absl::Span<float> values, ReduceOp op) override {
    return Run("all-reduce", values.size() * sizeof(float), [&] {
      return Nccl().all_reduce(
          values.data(), values.data(), values.size(), ncclFloat32,
          op == ReduceOp::kSum ? ncclSum : ncclAvg, comm_, stream_);
    });
  }

  absl::Status Broadcast(absl::Span<float> values, int root) override {
    absl::Status valid = CheckRoot(root);
    if (!valid.ok()) return valid;
    return Run("broadcast", values.size() * sizeof(float), [&] {
      return Nccl().broadcast(values.data(), values.data(), values.size(),
                              ncclFloat32, root, comm_, stream_);
    });
  }

  absl::Status AllGather(absl::Span<const float> input,
                         absl::Span<float> output) override {
    if (output.size() != input.size() * size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("output: ", output.size(), " elements; expected ",
                       input.size() * size_, " (size x input)"));
    }
    return Run("all-gather", output.size() * sizeof(float), [&] {
      return Nccl().all_gather(input.data(), output.data(), input.size(),
                               ncclFloat32, comm_, stream_);
    });
  }

  absl::Status ReduceScatter(absl::Span<const float> input,
                             absl::Span<float> output, ReduceOp op) override {
    if (input.size() != output.size() * size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("input: ", input.size(), " elements; expected ",
                       output.size() * size_, " (size x output)"));
    }
    return Run("reduce-scatter", input.size() * sizeof(float), [&] {
      return Nccl().reduce_scatter(
          input.data(), output.data(), output.size(), ncclFloat32,
          op == ReduceOp::kSum ? ncclSum : ncclAvg, comm_, stream_);
    });
  }

  // In place on device memory. Blocks of one size take NCCL's own
  // reduce-scatter; others (NCCL has no "v" variant) one reduce per block
  // to its rank, fused into one group so NCCL runs them together.
  absl::Status ReduceScatterBlocks(absl::Span<float> values,
                                   absl::Span<const size_t> counts,
                                   ReduceOp op) override {
    absl::StatusOr<std::vector<size_t>> offsets =
        BlockOffsets(counts, size_, values.size(), "values");
    if (!offsets.ok()) return offsets.status();
    const ncclRedOp_t reduction = op == ReduceOp::kSum ? ncclSum : ncclAvg;
    if (EvenBlocks(counts)) {
      return Run("reduce-scatter", values.size() * sizeof(float), [&] {
        return Nccl().reduce_scatter(
            values.data(), values.data() + (*offsets)[rank_], counts[0],
            ncclFloat32, reduction, comm_, stream_);
      });
    }
    return Run("reduce-scatter", values.size() * sizeof(float), [&] {
      return PerBlock(counts, [&](int r) {
        float* block = values.data() + (*offsets)[r];
        return Nccl().reduce(block, block, counts[r], ncclFloat32, reduction, r,
                             comm_, stream_);
      });
    });
  }

  // In place: NCCL's all-gather for blocks of one size, otherwise one
  // broadcast per block from its rank, in one group.
  absl::Status AllGatherBlocks(absl::Span<char> bytes,
                               absl::Span<const size_t> counts) override {
    absl::StatusOr<std::vector<size_t>> offsets =
        BlockOffsets(counts, size_, bytes.size(), "bytes");
    if (!offsets.ok()) return offsets.status();
    if (EvenBlocks(counts)) {
      return Run("all-gather", bytes.size(), [&] {
        return Nccl().all_gather(bytes.data() + (*offsets)[rank_], bytes.data(),
                                 counts[0], ncclChar, comm_, stream_);
      });
    }
    return Run("all-gather", bytes.size(), [&] {
      return PerBlock(counts, [&](int r) {
        char* block = bytes.data() + (*offsets)[r];
        return Nccl().broadcast(block, block, counts[r], ncclChar, r, comm_,
                                stream_);
      });
    });
  }

  // NCCL has no barrier: an all-reduce of one element on the device.
  absl::Status Barrier() override {
    if (barrier_ == nullptr) {
      cudaSetDevice(device_);
      cudaError_t error = cudaMalloc(&barrier_, sizeof(float));
      if (error != cudaSuccess) return CudaError("barrier", error);
    }
    return AllReduce(absl::Span<float>(barrier_, 1), ReduceOp::kSum);
  }

  absl::Status BroadcastBytes(absl::Span<char> bytes, int root) override {
    absl::Status valid = CheckRoot(root);
    if (!valid.ok()) return valid;
    return Run("broadcast", bytes.size(), [&] {
      return Nccl().broadcast(bytes.data(), bytes.data(), bytes.size(),
                              ncclUint8, root, comm_, stream_);
    });
  }

  // NCCL has no gather: the root receives from each rank in one group of
  // point-to-point calls.
  absl::Status GatherBytes(absl::Span<const char> input,
                           absl::Span<char> output, int root) override {
    absl::Status valid = CheckRoot(root);
    if (!valid.ok()) return valid;
    if (rank_ == root && output.size() != input.size() * size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("output: ", output.size(), " bytes; expected ",
                       input.size() * size_, " (size x input)"));
    }
    return Run("gather", input.size(), [&]() -> ncclResult_t {
      ncclResult_t result = Nccl().group_start();
      if (result != ncclSuccess) return result;
      if (rank_ == root) {
        for (int r = 0; r < size_ && result == ncclSuccess; ++r) {
          char* slot = output.data() + r * input.size();
          result = r == root
                       ? (cudaMemcpyAsync(slot, input.data(), input.size(),
                                          cudaMemcpyDeviceToDevice,
                                          stream_) == cudaSuccess
                              ? ncclSuccess
                              : ncclUnhandledCudaError)
                       : Nccl().recv(slot, input.size(), ncclUint8, r, comm_,
                                     stream_);
        }
      } else {
        result = Nccl().send(input.data(), input.size(), ncclUint8, root, comm_,
                             stream_);
      }
      ncclResult_t ended = Nccl().group_end();
      return result != ncclSuccess ? result : ended;
    });
  }

 private:
  static bool EvenBlocks(absl::Span<const size_t> counts) {
    return std::adjacent_find(counts.begin(), counts.end(),
                              std::not_equal_to<size_t>()) == counts.end();
  }

  // block(r) for every rank's non-empty block, in one NCCL group.
  template <typename Block>
  ncclResult_t PerBlock(absl::Span<const size_t> counts, Block block) {
    ncclResult_t result = Nccl().group_start();
    if (result != ncclSuccess) return result;
    for (int r = 0; r < size_ && result == ncclSuccess; ++r) {
      if (counts[r] > 0) result = block(r);
    }
    const ncclResult_t ended = Nccl().group_end();
    return result != ncclSuccess ? result : ended;
  }

  absl::Status CheckRoot(int root) const {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "root: ", root, "; expected a rank from 0 to ", size_ - 1));
    }
    return absl::OkStatus();
  }

  // Ends the communicator at the failure of a collective, not at its
  // destruction: ncclCommAbort stops the collectives still queued on
  // stream_, which would otherwise go on reading and writing their tensors
  // (a bucket the step refills, parameters a recovery rewrites) now that
  // the backend's work no longer waits for the device.
  void Abort() {
    if (broken_) return;
    broken_ = true;
    Nccl().comm_abort(comm_);
  }

  // RunOnStream, recorded in /metrics as a collective over `bytes`.
  template <typename Call>
  absl::Status Run(absl::string_view what, size_t bytes, Call call) {
    const metrics::Stopwatch timer;
    absl::Status status = RunOnStream(what, call);
    RecordCollective("nccl", what, bytes, timer.Seconds(), status);
    return status;
  }

  // Enqueues `call` on the communicator's stream, ordered after the
  // caller's work by an event, and waits for the collective's own event,
  // polling NCCL's asynchronous error, up to the timeout.
  //
  // Ordering is by events, not by waiting for the device: NCCL's stream
  // waits for what the calling thread has queued on its stream (where the
  // backend's kernels and copies run, common/cuda_stream.h), so a tensor
  // handed over is read only once written; no other stream is waited for,
  // so the step's kernels on another thread (ZeroOptions::overlap) run
  // alongside the collective. The host then waits for the collective's
  // event, not the stream or the device: that wait is what gives the
  // timeout and the abort of the CPU path, and once it returns the result
  // is complete for every thread.
  template <typename Call>
  absl::Status RunOnStream(absl::string_view what, Call call) {
    if (broken_) {
      return absl::FailedPreconditionError(
          absl::StrCat(what,
                       ": the NCCL communicator was aborted after an earlier "
                       "failure; expected a new group"));
    }
    cudaSetDevice(device_);
    cudaError_t ordered = cudaEventRecord(inputs_ready_, CallerStream());
    if (ordered == cudaSuccess) {
      ordered = cudaStreamWaitEvent(stream_, inputs_ready_, 0);
    }
    if (ordered != cudaSuccess) {
      // The other ranks go on into a collective this rank cannot join.
      Abort();
      return CudaError(what, ordered);
    }
    ncclResult_t result = call();
    if (result != ncclSuccess && result != ncclInProgress) {
      Abort();
      return NcclError(what, result);
    }
    const absl::Time deadline = absl::Now() + timeout_;
    bool done_recorded = false;
    while (true) {
      ncclResult_t async = ncclSuccess;
      Nccl().comm_get_async_error(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        Abort();
        return NcclError(what, async);
      }
      // A non-blocking communicator may still be enqueueing the call
      // (ncclInProgress): the event marks its end only once it is queued.
      if (async == ncclSuccess) {
        if (!done_recorded) {
          const cudaError_t recorded = cudaEventRecord(done_, stream_);
          if (recorded != cudaSuccess) {
            Abort();
            return CudaError(what, recorded);
          }
          done_recorded = true;
        }
        const cudaError_t state = cudaEventQuery(done_);
        if (state == cudaSuccess) return absl::OkStatus();
        if (state != cudaErrorNotReady) {
          Abort();
          return CudaError(what, state);
        }
      }
      if (absl::Now() >= deadline) {
        Abort();
        return absl::DeadlineExceededError(absl::StrCat(
            what, ": timed out after ", absl::FormatDuration(timeout_),
            " waiting for the other ranks"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  const ncclComm_t comm_;
  const cudaStream_t stream_;
  // Reused by every collective (one at a time): the caller's work queued
  // before it, and its own end on stream_.
  const cudaEvent_t inputs_ready_;
  const cudaEvent_t done_;
  const int rank_;
  const int size_;
  const int device_;
  absl::Duration timeout_;
  // Aborted after a failure: every later call fails at once.
  bool broken_ = false;
  float* barrier_ = nullptr;
};

// Waits for a non-blocking communicator to finish initialising.
absl::Status AwaitInit(ncclComm_t comm, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = Nccl().comm_get_async_error(comm, &state);
    if (result != ncclSuccess) return NcclError("nccl init", result);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError("nccl init", state);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("nccl init: the other ranks did not connect within ",
                       absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

bool NcclCompiledIn() { return true; }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const NcclOptions& options, RendezvousStore* store) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", options.rank, "; expected 0 to ",
                     options.size - 1, " for a group of ", options.size));
  }
  absl::StatusOr<const NcclLibrary*> loaded = LoadNccl();
  if (!loaded.ok()) return loaded.status();
  cudaError_t error = cudaSetDevice(options.device);
  if (error != cudaSuccess) {
    return CudaError(absl::StrCat("device cuda:", options.device), error);
  }
  const std::string key = absl::StrCat(options.prefix, "/unique_id");
  ncclUniqueId id;
  if (options.rank == 0) {
    ncclResult_t result = Nccl().get_unique_id(&id);
    if (result != ncclSuccess) return NcclError("nccl unique id", result);
    absl::Status set =
        store->Set(key, std::string(id.internal, sizeof(id.internal)));
    if (!set.ok()) return set;
  } else {
    absl::StatusOr<std::string> value = store->Get(key, options.timeout);
    if (!value.ok()) return value.status();
    if (value->size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat(
          key, ": ", value->size(), " bytes; expected ", sizeof(id.internal)));
    }
    std::copy(value->begin(), value->end(), id.internal);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t result = Nccl().comm_init_rank_config(&comm, options.size, id,
                                                     options.rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return NcclError("nccl init", result);
  }
  absl::Status ready = AwaitInit(comm, options.timeout);
  if (!ready.ok()) {
    Nccl().comm_abort(comm);
    return ready;
  }
  // Its own stream, which the default stream does not wait for (nor it
  // for the default stream): ordering with the step is by events.
  cudaStream_t stream = nullptr;
  cudaEvent_t events[2] = {nullptr, nullptr};
  error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  for (cudaEvent_t& event : events) {
    if (error == cudaSuccess) {
      error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    }
  }
  if (error != cudaSuccess) {
    for (cudaEvent_t event : events) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
    Nccl().comm_abort(comm);
    return CudaError("nccl stream", error);
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(comm, stream, events[0], events[1], options.rank,
                           options.size, options.device, options.timeout));
}

}  // namespace distopt
