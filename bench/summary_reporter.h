// The benchmarks' console output: Google Benchmark's table, then summary
// lines, written by each benchmark, that hold its cases against their goals
// and against the PyTorch peer. --benchmark_format=json and the other
// flags of the framework work as usual (the summary goes to stdout after
// the report).
#ifndef DISTOPT_BENCH_SUMMARY_REPORTER_H_
#define DISTOPT_BENCH_SUMMARY_REPORTER_H_

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"

namespace distopt {
namespace bench {

using BenchmarkRun = benchmark::BenchmarkReporter::Run;

// Counter `name` of `run`, or -1 when the run has none.
inline double Counter(const BenchmarkRun& run, const std::string& name) {
  auto it = run.counters.find(name);
  return it == run.counters.end() ? -1.0 : it->second.value;
}

// Runs the benchmarks the command line selects, then prints what
// `summary` makes of the runs that did not fail.
inline int RunBenchmarks(
    int argc, char** argv,
    std::function<void(const std::vector<BenchmarkRun>&)> summary) {
  class Reporter : public benchmark::ConsoleReporter {
   public:
    std::vector<BenchmarkRun> runs;
    void ReportRuns(const std::vector<Run>& reported) override {
      ConsoleReporter::ReportRuns(reported);
      for (const Run& run : reported) {
        if (!run.error_occurred) runs.push_back(run);
      }
    }
  };
  benchmark::Initialize(&argc, argv);
  Reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\n");
  summary(reporter.runs);
  return 0;
}

}  // namespace bench
}  // namespace distopt

#endif  // DISTOPT_BENCH_SUMMARY_REPORTER_H_
