"""The Python digits demo as the README runs it, and ZeRO from Python: two
trainer processes, each driving its own rank's daemon, train the digits MLP
on their halves of every batch and end bit-identical."""

import multiprocessing
import os
import subprocess
import sys
import tempfile

import torch

import distopt

sys.path.insert(0, os.path.join(os.getcwd(), "python", "examples"))
import digits  # noqa: E402

DATA = "data/digits/digits.csv.gz"


def test_digits_demo_reaches_95_percent():
    result = subprocess.run(
        ["/usr/bin/python3", "python/examples/digits.py"],
        capture_output=True, text=True, timeout=300, check=True)
    accuracy = float(result.stdout.strip().splitlines()[-1].split()[-1])
    assert accuracy >= 0.95, result.stdout


def train_rank(rank, address, steps, results):
    """One rank's trainer: the MLP's layers on this rank's daemon, ZeRO over
    them, this rank's half of each batch."""
    client = distopt.connect()
    torch.manual_seed(0)  # The same initial model on every rank.
    fc1 = distopt.nn.RemoteLinear(64, 32, address, name="fc1")
    fc2 = distopt.nn.RemoteLinear(32, 10, address, name="fc2")
    model = torch.nn.Sequential(fc1, torch.nn.ReLU(), fc2)
    zero = distopt.parallel.ZeroRedundancyOptimizer(
        address, torch.optim.Adam,
        ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], lr=1e-2,
        client=client)
    features, labels = digits.load_digits(DATA)
    for step in range(steps):
        batch = slice(step * 64 + rank * 32, step * 64 + rank * 32 + 32)
        with distopt.autograd.context() as context_id:
            torch.nn.functional.cross_entropy(
                model(features[batch]), labels[batch]).backward()
            zero.step(context_id)
    info = zero.get()
    # As numpy arrays: they pickle by value (a torch tensor would be shared
    # through a file descriptor this process takes with it when it exits).
    results.put((rank, [p.to_tensor().numpy() for p in
                        fc1.remote_parameters() + fc2.remote_parameters()],
                 int(info["state_bytes"])))


def test_zero_from_two_trainer_processes(worker_factory):
    secret = tempfile.NamedTemporaryFile("w", delete=False)
    secret.write("the secret of the Python test group")
    secret.close()
    flags = ["--world_size=2", f"--group_secret_file={secret.name}",
             "--group_timeout=60s"]
    # Rank 0 serves the group's store; rank 1 joins it there.
    rank0 = worker_factory(flags + ["--rank=0",
                                    "--rendezvous=127.0.0.1:1"])
    rank1 = worker_factory(flags + ["--rank=1",
                                    f"--rendezvous={rank0.address}"])
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    trainers = [spawn.Process(target=train_rank,
                              args=(rank, worker.address, 20, results))
                for rank, worker in enumerate((rank0, rank1))]
    for trainer in trainers:
        trainer.start()
    outcome = {}
    for _ in trainers:
        rank, values, state = results.get(timeout=120)
        outcome[rank] = ([torch.from_numpy(v) for v in values], state)
    for trainer in trainers:
        trainer.join(timeout=60)
        assert trainer.exitcode == 0
    os.unlink(secret.name)
    for a, b in zip(outcome[0][0], outcome[1][0]):
        assert torch.equal(a, b)  # Bit-identical on both ranks.
    # The model moved, and each rank holds only part of Adam's state.
    assert not torch.equal(outcome[0][0][3], torch.zeros(10))
    whole_state = 2 * 4 * (64 * 32 + 32 + 32 * 10 + 10)
    assert 0 < outcome[0][1] < whole_state
    assert outcome[0][1] + outcome[1][1] == whole_state
