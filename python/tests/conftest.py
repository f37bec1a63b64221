"""Fixtures: real distopt_worker daemons on loopback ($DISTOPT_WORKER, set by
run_pytest.sh), started for a test and stopped after it."""

import os
import signal
import subprocess
import tempfile
import time
from typing import List

import pytest

import distopt


class Worker:
    """One daemon: `address` is "127.0.0.1:PORT"."""

    def __init__(self, flags: List[str] = ()):
        self._dir = tempfile.TemporaryDirectory()
        port_file = os.path.join(self._dir.name, "port")
        self.process = subprocess.Popen(
            [os.environ["DISTOPT_WORKER"], "--listen=127.0.0.1:0",
             f"--port_file={port_file}", *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file) or not open(port_file).read():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"distopt_worker did not start: {flags}")
            time.sleep(0.02)
        self.address = open(port_file).read().strip()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._dir.cleanup()


@pytest.fixture
def workers():
    """Two workers, A and B."""
    started = [Worker(), Worker()]
    yield [w.address for w in started]
    for w in started:
        w.stop()


@pytest.fixture
def worker_factory():
    """Starts workers with flags; stops them after the test."""
    started = []

    def start(flags=()):
        w = Worker(list(flags))
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


@pytest.fixture
def client():
    return distopt.connect(rpc_timeout=10.0)


@pytest.fixture
def group_of_two(worker_factory, tmp_path):
    """Two ranks' daemons joined through rank 0's store: (rank0, rank1)."""
    secret = tmp_path / "secret"
    secret.write_text("the secret of the Python test group")
    flags = ["--world_size=2", f"--group_secret_file={secret}",
             "--group_timeout=60s"]
    # Rank 0 serves the group's store; rank 1 joins it there.
    rank0 = worker_factory(flags + ["--rank=0", "--rendezvous=127.0.0.1:1"])
    rank1 = worker_factory(flags + ["--rank=1",
                                    f"--rendezvous={rank0.address}"])
    return rank0, rank1
