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
#include <vector>

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

// Median seconds of `iterations` collectives of `elements` fp32 values on
// `world` ranks, after one untimed warm-up of each; -1 where one failed.
inline RawCollectiveSeconds TimeRawCollectives(int world, size_t elements,
                                               int iterations) {
  std::vector<std::vector<double>> all_reduce(world), sharded(world);
  std::vector<bool> failed(world, false);
  // Rank 0's measure of the whole process, from one barrier to the next.
  CoresBusy all_reduce_busy, sharded_busy;
  GlooOptions base;
  base.timeout = absl::Minutes(5);
  base.ring_all_reduce_min_bytes = 0;  // gloo's all-reduce.
  absl::Status made = OnGlooThreads(
      world, base,
      [&](Communicator& comm, const GlooOptions& options, RendezvousStore*) {
        const int r = options.rank;
        std::vector<float> values(elements, 1.0f + r);
        std::vector<size_t> counts(world, elements / world);
        counts.back() += elements % world;
        std::vector<size_t> byte_counts;
        for (size_t count : counts) {
          byte_counts.push_back(count * sizeof(float));
        }
        for (int it = 0; it <= iterations; ++it) {
          // The first of each is a warm-up; every call starts together.
          bool ok = comm.Barrier().ok();
          const bool counted = it > 0 && r == 0;
          if (counted) all_reduce_busy.Begin();
          double seconds = SecondsOf([&] {
            ok = ok &&
                 comm.AllReduce(absl::MakeSpan(values), ReduceOp::kSum).ok();
          });
          if (it > 0) all_reduce[r].push_back(seconds);
          ok = ok && comm.Barrier().ok();
          if (counted) {
            all_reduce_busy.End();
            sharded_busy.Begin();
          }
          seconds = SecondsOf([&] {
            ok = ok &&
                 comm.ReduceScatterBlocks(absl::MakeSpan(values), counts,
                                          ReduceOp::kSum)
                     .ok() &&
                 comm.AllGatherBlocks(AsBytes(absl::MakeSpan(values)),
                                      byte_counts)
                     .ok();
          });
          if (it > 0) sharded[r].push_back(seconds);
          ok = ok && comm.Barrier().ok();
          if (counted) sharded_busy.End();
          if (!ok) {
            failed[r] = true;
            return;
          }
        }
      });
  if (!made.ok()) {
    std::printf("raw gloo ranks: %s\n", made.ToString().c_str());
    return RawCollectiveSeconds();
  }
  RawCollectiveSeconds result;
  for (bool f : failed) {
    if (f) return result;
  }
  // A collective ends when its slowest rank does.
  std::vector<double> slowest_all_reduce, slowest_sharded;
  for (int it = 0; it < iterations; ++it) {
    double a = 0, s = 0;
    for (int r = 0; r < world; ++r) {
      a = std::max(a, all_reduce[r][it]);
      s = std::max(s, sharded[r][it]);
    }
    slowest_all_reduce.push_back(a);
    slowest_sharded.push_back(s);
  }
  result.all_reduce = Median(slowest_all_reduce);
  result.reduce_scatter_all_gather = Median(slowest_sharded);
  result.all_reduce_cores = all_reduce_busy.cores();
  result.reduce_scatter_all_gather_cores = sharded_busy.cores();
  return result;
}

}  // namespace bench
}  // namespace distopt

#endif  // DISTOPT_BENCH_RAW_COLLECTIVES_H_
