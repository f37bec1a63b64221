"""system_tools: build tools from Debian packages, found on PATH.

Nothing is downloaded: the rule links each tool into the repository, or
fails with a message that names the Debian package to install.
"""

def _system_tools_impl(ctx):
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
    lines = ['package(default_visibility = ["//visibility:public"])', ""]
    for tool, package in ctx.attr.tools.items():
        path = ctx.which(tool)
        if path == None:
            fail("'%s' is not on PATH. Run tools/install_deps.sh to install %s." % (tool, package))
        ctx.symlink(path, tool)
        lines.append('exports_files(["%s"])' % tool)
    ctx.file("BUILD.bazel", "\n".join(lines) + "\n")

system_tools = repository_rule(
    implementation = _system_tools_impl,
    attrs = {
        # tool name on PATH -> Debian package that provides it
        "tools": attr.string_dict(mandatory = True),
    },
    local = True,
)
