"""distopt_proto_library: C++ messages and gRPC stubs from .proto files.

A genrule runs Debian's protoc with grpc_cpp_plugin (both found on PATH by
the @system_tools repository), and a cc_library compiles what it wrote.
Imports are resolved from the workspace root, so a file imports another as
"proto/distopt/v1/tensor.proto".
"""

def distopt_proto_library(name, srcs, deps = [], grpc = True, **kwargs):
    """Compiles `srcs` (.proto) into a cc_library named `name`.

    Args:
      name: target name.
      srcs: .proto files of this library.
      deps: other distopt_proto_library targets whose files `srcs` import.
      grpc: whether to also generate gRPC service stubs.
      **kwargs: passed to the cc_library.
    """
    bases = [s[:-len(".proto")] for s in srcs]
    pkg = native.package_name()
    prefix = pkg + "/" if pkg else ""
    hdrs = [b + ".pb.h" for b in bases]
    cc_srcs = [b + ".pb.cc" for b in bases]
    if grpc:
        hdrs += [b + ".grpc.pb.h" for b in bases]
        cc_srcs += [b + ".grpc.pb.cc" for b in bases]

    plugin = "@system_tools//:grpc_cpp_plugin"
    protoc = "@system_tools//:protoc"
    grpc_flags = ""
    if grpc:
        grpc_flags = "--plugin=protoc-gen-grpc=$(location %s) --grpc_out=$(GENDIR)" % plugin
    native.genrule(
        name = name + "_protoc",
        srcs = srcs + [d + "_proto_srcs" for d in deps],
        outs = hdrs + cc_srcs,
        tools = [protoc, plugin],
        cmd = "$(location %s) --proto_path=. --cpp_out=$(GENDIR) %s %s" % (
            protoc,
            grpc_flags,
            " ".join([prefix + s for s in srcs]),
        ),
        message = "protoc " + name,
    )
    native.filegroup(
        name = name + "_proto_srcs",
        srcs = srcs + [d + "_proto_srcs" for d in deps],
    )
    native.cc_library(
        name = name,
        srcs = cc_srcs,
        hdrs = hdrs,
        deps = deps + [
            "@com_google_protobuf//:protobuf",
        ] + (["@com_github_grpc_grpc//:grpc++"] if grpc else []),
        **kwargs
    )
