"""cuda_library: .cu files compiled by nvcc through a genrule.

With a CUDA toolkit (see third_party/cuda/cuda_configure.bzl) the .cu sources
become one static archive linked with the CUDA runtime. Without one, the
`cpu_fallback_srcs` are compiled instead: they provide the same symbols and
report that the binary was built without CUDA.
"""

load("@local_config_cuda//:defs.bzl", "CUDA_ENABLED", "NVCC")

# Ampere and Hopper machine code, plus Hopper PTX for newer GPUs to JIT.
_NVCC_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=[sm_90,compute_90]",
]

def cuda_library(name, srcs, hdrs = [], deps = [], cpu_fallback_srcs = [],
                 nvcc_flags = [], **kwargs):
    """A cc_library whose .cu `srcs` are compiled by nvcc when CUDA is present.

    Args:
      name: target name.
      srcs: .cu files.
      hdrs: headers the .cu files and the library's users include.
      deps: cc_library deps; their headers must be listed in `hdrs` of
        those deps (nvcc sees the whole source tree through -I.).
      cpu_fallback_srcs: .cc files compiled instead when CUDA is absent.
      nvcc_flags: extra nvcc flags, e.g. ["--fmad=false"].
      **kwargs: passed to the cc_library.
    """
    if not CUDA_ENABLED:
        native.cc_library(
            name = name,
            srcs = cpu_fallback_srcs,
            hdrs = hdrs,
            deps = deps,
            **kwargs
        )
        return

    archive = "lib%s_cuda.a" % name
    native.genrule(
        name = name + "_nvcc",
        srcs = srcs + hdrs + [name + "_nvcc_headers"],
        outs = [archive],
        cmd = " ".join([
            NVCC,
            "-lib",
            "-std=c++17",
            "-O3",
            "-Xcompiler=-fPIC",
            "-I.",
            "-I$(GENDIR)",
            " ".join(_NVCC_ARCH_FLAGS),
            " ".join(nvcc_flags),
            "-o $@",
            " ".join(["$(location %s)" % s for s in srcs]),
        ]),
        message = "nvcc %s" % name,
    )

    # Makes the transitive headers of `deps` visible inside the genrule sandbox.
    native.cc_library(
        name = name + "_nvcc_headers_lib",
        deps = deps,
    )
    _transitive_headers(
        name = name + "_nvcc_headers",
        lib = name + "_nvcc_headers_lib",
    )
    native.cc_library(
        name = name,
        srcs = [archive],
        hdrs = hdrs,
        deps = deps + ["@local_config_cuda//:cudart"],
        alwayslink = True,
        **kwargs
    )

def _transitive_headers_impl(ctx):
    cc = ctx.attr.lib[CcInfo]
    return [DefaultInfo(files = cc.compilation_context.headers)]

_transitive_headers = rule(
    implementation = _transitive_headers_impl,
    attrs = {"lib": attr.label(providers = [CcInfo])},
)
