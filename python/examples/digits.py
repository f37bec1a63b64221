"""The digits demo from Python: two worker daemons on loopback train a
two-layer MLP on the UCI hand-written digits, layer 1 on worker A and layer 2
on worker B, with Adam through distopt.optim.DistributedOptimizer and one
distributed autograd context per mini-batch. Prints the loss per epoch and
the accuracy on a held-out 20%.

    bazel build //python:distopt //server:distopt_worker
    PYTHONPATH=bazel-bin/python/pkg /usr/bin/python3 python/examples/digits.py

Give --workers A,B (or DISTOPT_WORKERS) to use daemons already running
instead of starting two.
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time

# The daemons stop at the end while this client is still connected: poll
# often so that each sees the client let go at once, instead of after gRPC's
# default 5 s (see README, "Running a worker").
os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import distopt  # noqa: E402


def load_digits(path):
    """(features [N, 64] in [0, 1], labels [N]) of data/digits."""
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    return (torch.from_numpy(rows[:, :64] / 16.0),
            torch.from_numpy(rows[:, 64].astype(np.int64)))


def start_worker(binary, folder, name):
    port_file = os.path.join(folder, name)
    process = subprocess.Popen([binary, "--listen=127.0.0.1:0",
                                f"--port_file={port_file}"],
                               stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (os.path.exists(port_file) and open(port_file).read()):
        if process.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"{binary} did not start")
        time.sleep(0.02)
    return process, open(port_file).read().strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default=os.environ.get("DISTOPT_WORKERS"),
                        help="A,B: running daemons to use (default: "
                             "$DISTOPT_WORKERS, as deploy/slurm's "
                             "distopt_workers.sbatch sets it)")
    parser.add_argument("--worker_binary",
                        default=os.environ.get(
                            "DISTOPT_WORKER", "bazel-bin/server/distopt_worker"))
    parser.add_argument("--data", default="data/digits/digits.csv.gz")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    processes = []
    folder = tempfile.TemporaryDirectory()
    if args.workers:
        worker_a, worker_b = args.workers.split(",")
    else:
        for name in ("a", "b"):
            process, address = start_worker(args.worker_binary, folder.name,
                                            name)
            processes.append((process, address))
        worker_a, worker_b = (address for _, address in processes)
    try:
        features, labels = load_digits(args.data)
        order = torch.randperm(len(labels),
                               generator=torch.Generator().manual_seed(0))
        split = int(0.8 * len(labels))
        train, test = order[:split], order[split:]

        torch.manual_seed(0)
        distopt.connect()
        fc1 = distopt.nn.RemoteLinear(64, 64, worker_a, name="digits.fc1")
        fc2 = distopt.nn.RemoteLinear(64, 10, worker_b, name="digits.fc2")
        model = torch.nn.Sequential(fc1, torch.nn.ReLU(), fc2)
        optimizer = distopt.optim.DistributedOptimizer(
            torch.optim.Adam,
            fc1.remote_parameters() + fc2.remote_parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(1)
        for epoch in range(args.epochs):
            shuffled = train[torch.randperm(len(train), generator=generator)]
            total = 0.0
            for start in range(0, len(shuffled), args.batch):
                batch = shuffled[start:start + args.batch]
                with distopt.autograd.context() as context_id:
                    loss = torch.nn.functional.cross_entropy(
                        model(features[batch]), labels[batch])
                    loss.backward()
                    optimizer.step(context_id)
                total += loss.item() * len(batch)
            print(f"epoch {epoch + 1}: loss {total / len(train):.4f}")
        with torch.no_grad():
            predicted = model(features[test]).argmax(dim=1)
        accuracy = (predicted == labels[test]).float().mean().item()
        print(f"held-out accuracy {accuracy:.4f}")
    finally:
        for process, _ in processes:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
