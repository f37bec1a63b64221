// The limit lines of the data-parallel benchmarks: gloo's collectives on
// the same bytes with nothing around them. Two ranks as threads of this
// process over loopback TCP (the daemons' ranks use the same transport),
// through the communicator the daemons use: gloo's all-reduce, and the ring
// reduce-scatter + all-gather over W equal blocks. (The daemons' all-reduce
// of a large array is that ring too; the limit line is gloo's own.)
#ifndef DISTOPT_BENCH_RAW_COLLECTIVES_H_
#define DISTOPT_BENCH_RAW_COLLECTIVES_H_

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "bench/timing.h"
#include "server/comm/testing/gloo_threads.h"

namespace distopt {
namespace bench {

struct RawCollectiveSeconds {
  double all_reduce = -1;
  // Reduce-scatter then all-gather: what a gradient-sharded step sends.
  double reduce_scatter_all_gather = -1;
  // The cores the ranks kept busy meanwhile: CPU seconds (the process's,
  // every rank's threads and gloo's) over wall seconds, timed calls only.
  double all_reduce_cores = -1;
  double reduce_scatter_all_gather_cores = -1;
};

// The limit's ranks, kept between calls, so that a benchmark can time the
// collectives between its own steps: whatever slows this machine during a
// run (its speed drifts by more than a tenth between runs) then slows the
// step and its limit alike.
class RawCollectiveRanks {
 public:
  RawCollectiveRanks(int world, size_t elements)
      : world_(world),
        all_reduce_(world),
        sharded_(world),
        runner_([this, elements] { Run(elements); }) {}
  ~RawCollectiveRanks() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    runner_.join();
  }

  // Times one all-reduce, then one reduce-scatter + all-gather, every rank
  // starting each together; `counted` ones make the medians. False when
  // one failed: the ranks are no use after that, and Medians says so.
  bool Time(bool counted) {
    absl::MutexLock lock(&mu_);
    if (ended_ || !ok_) return false;
    done_ = 0;
    counted_ = counted;
    ++generation_;
    // A failed rank stops serving: the call ends then, not only once
    // every rank has answered (a rank whose communicator was never made
    // never answers).
    auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_ || !ok_ || done_ == world_;
    };
    Await(answered);
    if (ended_ || !ok_) return false;
    if (counted) {
      // A collective ends when its slowest rank does.
      slowest_all_reduce_.push_back(
          *std::max_element(all_reduce_.begin(), all_reduce_.end()));
      slowest_sharded_.push_back(
          *std::max_element(sharded_.begin(), sharded_.end()));
    }
    return true;
  }

  // The medians of the counted calls (-1 without any), and the cores the
  // ranks kept busy meanwhile.
  RawCollectiveSeconds Medians() const {
    absl::MutexLock lock(&mu_);
    RawCollectiveSeconds result;
    if (!ok_ || slowest_all_reduce_.empty()) return result;
    result.all_reduce = Median(slowest_all_reduce_);
    result.reduce_scatter_all_gather = Median(slowest_sharded_);
    result.all_reduce_cores = all_reduce_busy_.cores();
    result.reduce_scatter_all_gather_cores = sharded_busy_.cores();
    return result;
  }

 private:
  // Waits, holding mu_, until `condition()` holds.
  template <typename Condition>
  void Await(Condition& condition) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    mu_.Await(absl::Condition(
        +[](Condition* c) { return (*c)(); }, &condition));
  }

  void Run(size_t elements) {
    GlooOptions base;
    base.timeout = absl::Minutes(5);
    base.ring_all_reduce_min_bytes = 0;  // gloo's all-reduce.
    absl::Status made = OnGlooThreads(
        world_, base,
        [&](Communicator& comm, const GlooOptions& options, RendezvousStore*) {
          Serve(comm, options.rank, elements);
        });
    if (!made.ok()) {
      std::printf("raw gloo ranks: %s\n", made.ToString().c_str());
    }
    absl::MutexLock lock(&mu_);
    ok_ = ok_ && made.ok();
    ended_ = true;
  }

  // Rank r's part: one round of collectives per Time, until stopped.
  void Serve(Communicator& comm, int r, size_t elements) {
    std::vector<float> values(elements, 1.0f + r);
    std::vector<size_t> counts(world_, elements / world_);
    counts.back() += elements % world_;
    std::vector<size_t> byte_counts;
    for (size_t count : counts) byte_counts.push_back(count * sizeof(float));
    int64_t served = 0;
    while (true) {
      bool counted = false;
      {
        absl::MutexLock lock(&mu_);
        auto asked = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || generation_ > served;
        };
        Await(asked);
        if (stop_ || !ok_) return;
        served = generation_;
        counted = counted_ && r == 0;
      }
      // Rank 0 measures the whole process, from one barrier to the next.
      bool ok = comm.Barrier().ok();
      if (counted) all_reduce_busy_.Begin();
      const double all_reduce = SecondsOf([&] {
        ok = ok && comm.AllReduce(absl::MakeSpan(values), ReduceOp::kSum).ok();
      });
      ok = ok && comm.Barrier().ok();
      if (counted) {
        all_reduce_busy_.End();
        sharded_busy_.Begin();
      }
      const double sharded = SecondsOf([&] {
        ok = ok &&
             comm.ReduceScatterBlocks(absl::MakeSpan(values), counts,
                                      ReduceOp::kSum)
                 .ok() &&
             comm.AllGatherBlocks(AsBytes(absl::MakeSpan(values)), byte_counts)
                 .ok();
      });
      ok = ok && comm.Barrier().ok();
      if (counted) sharded_busy_.End();
      absl::MutexLock lock(&mu_);
      all_reduce_[r] = all_reduce;
      sharded_[r] = sharded;
      ok_ = ok_ && ok;
      ++done_;
      if (!ok_) return;  // The peers' next collectives fail too.
    }
  }

  const int world_;
  mutable absl::Mutex mu_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool counted_ ABSL_GUARDED_BY(mu_) = false;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool ok_ ABSL_GUARDED_BY(mu_) = true;
  // Each rank's seconds of the last call.
  std::vector<double> all_reduce_ ABSL_GUARDED_BY(mu_);
  std::vector<double> sharded_ ABSL_GUARDED_BY(mu_);
  std::vector<double> slowest_all_reduce_ ABSL_GUARDED_BY(mu_);
  std::vector<double> slowest_sharded_ ABSL_GUARDED_BY(mu_);
  // Rank 0's thread alone uses them until the counted calls are over.
  CoresBusy all_reduce_busy_, sharded_busy_;
  std::thread runner_;
};

}  // namespace bench
}  // namespace distopt

#endif  // DISTOPT_BENCH_RAW_COLLECTIVES_H_
