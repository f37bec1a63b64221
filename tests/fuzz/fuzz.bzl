"""distopt_fuzz_test: one libFuzzer target, two ways to build it.

By default (g++, `bazel test //...`) the target is a test that replays its
seed corpus, tests/fuzz/corpus/<name>/ (every crash ever found is kept there
as a regression input), plus a fixed number of deterministic mutations of
each seed, through the same LLVMFuzzerTestOneInput: a decoder that crashes
on a known input fails CI even without clang.

Under `--config=fuzz` (clang, libFuzzer, ASan + UBSan; see .bazelrc) the
same sources link libFuzzer's own main instead: tools/fuzz/run_fuzzers.sh
builds them that way and fuzzes each one for a bounded time.
"""

def distopt_fuzz_test(name, deps = [], dict = None, **kwargs):
    """The target <name>.cc, over fuzz_support and `deps`."""
    corpus = "tests/fuzz/corpus/" + name
    native.cc_test(
        name = name,
        srcs = [name + ".cc"],
        deps = deps + ["//tests/fuzz:fuzz_support"] + select({
            "//tests/fuzz:libfuzzer": [],
            "//conditions:default": ["//tests/fuzz:replay_main"],
        }),
        linkopts = select({
            "//tests/fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        data = native.glob(["corpus/%s/**" % name]) + ([dict] if dict else []),
        args = [corpus],
        tags = kwargs.pop("tags", []) + ["fuzz"],
        **kwargs
    )

def distopt_fuzz_library(name, deps = []):
    """A testonly helper of the targets: <name>.cc and <name>.h."""
    native.cc_library(
        name = name,
        testonly = True,
        srcs = [name + ".cc"],
        hdrs = [name + ".h"],
        deps = deps,
    )
