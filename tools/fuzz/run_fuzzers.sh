#!/usr/bin/env bash
# Fuzzes every target of tests/fuzz with libFuzzer for a bounded time
# (issue 16): built with clang under ASan + UBSan (--config=fuzz), each
# target gets an equal share of TOTAL_SECONDS (default 300), starting from
# its seed corpus in the repo. New inputs go to a scratch folder, never into
# the repo. Prints, per target, the executions, the coverage reached
# (libFuzzer's cov: edges and ft: features) and the corpus size; exits
# non-zero when a target crashed, leaked or hung, naming the input it saved
# (keep that input in tests/fuzz/corpus/<target>/ once fixed).
#
#   tools/fuzz/run_fuzzers.sh [TOTAL_SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../.."

total_seconds=${1:-300}
shift || true
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(bazel query --output=label \
    'attr(tags, "\bfuzz\b", tests(//tests/fuzz/...))' 2>/dev/null | sed 's|.*:||')
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "run_fuzzers: no fuzz targets found" >&2
  exit 1
fi
per_target=$((total_seconds / ${#targets[@]}))
if [ "$per_target" -lt 5 ]; then per_target=5; fi

labels=()
for target in "${targets[@]}"; do labels+=("//tests/fuzz:${target}"); done
bazel build --config=fuzz "${labels[@]}"
bin_dir=$(bazel info --config=fuzz bazel-bin)/tests/fuzz

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
report="$scratch/report"
failed=0
printf '%-32s %10s %8s %8s %8s %7s %s\n' target executions exec/s cov ft corpus result >"$report"
for target in "${targets[@]}"; do
  seeds="tests/fuzz/corpus/${target}"
  work="$scratch/${target}/corpus"
  artifacts="$scratch/${target}/artifacts"
  mkdir -p "$work" "$artifacts"
  flags=(-max_total_time="$per_target" -timeout=20 -rss_limit_mb=2560
         -max_len=65536 -print_final_stats=1
         -artifact_prefix="$artifacts/")
  if [ -f "tests/fuzz/dicts/${target}.dict" ]; then
    flags+=(-dict="tests/fuzz/dicts/${target}.dict")
  fi
  log="$scratch/${target}/log"
  echo "run_fuzzers: ${target} for ${per_target} s"
  set +e
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin_dir/$target" "${flags[@]}" "$work" "$seeds" >"$log" 2>&1
  code=$?
  set -e
  executions=$(grep -oE 'stat::number_of_executed_units:[[:space:]]+[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  per_second=$(grep -oE 'stat::average_exec_per_sec:[[:space:]]+[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  # (Nothing matches when a target dies before its first input: the
  # report below still names it.)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || echo 0)
  ft=$(grep -oE 'ft: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || echo 0)
  corpus=$(grep -oE 'corp: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || echo 0)
  result=ok
  if [ "$code" -ne 0 ] || [ -n "$(ls -A "$artifacts")" ]; then
    result="FAILED (exit ${code})"
    failed=1
    tail -60 "$log"
    for artifact in "$artifacts"/*; do
      [ -e "$artifact" ] || continue
      echo "run_fuzzers: ${target} saved ${artifact}:"
      base64 -w 76 "$artifact" | head -40
    done
  fi
  printf '%-32s %10s %8s %8s %8s %7s %s\n' "$target" "$executions" \
    "$per_second" "$cov" "$ft" "$corpus" "$result" >>"$report"
done
cat "$report"
if [ "$failed" -ne 0 ]; then
  echo "run_fuzzers: a target failed (inputs printed above, base64)" >&2
  exit 1
fi
echo "run_fuzzers: ${#targets[@]} targets, no crash, leak or hang"
