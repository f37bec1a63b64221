"""pytest_test: one pytest file run by Debian's /usr/bin/python3, with the
package built by //python:distopt on PYTHONPATH and the worker daemon's
path in DISTOPT_WORKER, exactly as the README tells a user to run it."""

def pytest_test(name, src, size = "medium", data = []):
    native.sh_test(
        name = name,
        size = size,
        srcs = ["//python:tests/run_pytest.sh"],
        args = ["$(location %s)" % src],
        data = [
            src,
            "//python:distopt",
            "//python:tests/conftest.py",
            "//python:tests/asan_preload.sh",
            "//server:distopt_worker",
        ] + data,
    )
