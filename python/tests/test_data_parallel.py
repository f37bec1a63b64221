"""Data-parallel optimizers from Python: two trainer processes, each driving
its own rank's daemon, train the digits MLP with ZeRO on their halves of
every batch and end bit-identical; Ctrl-C interrupts a step that waits for
a rank that never comes."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import torch

import distopt

sys.path.insert(0, os.path.join(os.getcwd(), "python", "examples"))
import digits  # noqa: E402

DATA = "data/digits/digits.csv.gz"


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


def test_zero_from_two_trainer_processes(group_of_two):
    rank0, rank1 = group_of_two
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
    for a, b in zip(outcome[0][0], outcome[1][0]):
        assert torch.equal(a, b)  # Bit-identical on both ranks.
    # The model moved, and each rank holds only part of Adam's state.
    assert not torch.equal(outcome[0][0][3], torch.zeros(10))
    whole_state = 2 * 4 * (64 * 32 + 32 + 32 * 10 + 10)
    assert 0 < outcome[0][1] < whole_state
    assert outcome[0][1] + outcome[1][1] == whole_state
    # What the group is, as a trainer reads it: two ranks in host memory,
    # their tensors through gloo.
    client = distopt.connect()
    for rank, worker in enumerate((rank0, rank1)):
        group = client.group(worker.address)
        assert group["rank"] == rank
        assert group["world_size"] == 2
        assert group["state"] == "READY"
        assert group["backend"] == "gloo"
        assert group["round"] == 0


STEP_THAT_WAITS = """
import sys, threading, time
import torch, distopt
client = distopt.connect()
ranks = sys.argv[1:3]
parameter = [client.create_parameter(address, "w", torch.zeros(4))
             for address in ranks]
zeros = [None, None]
def create(rank):
    zeros[rank] = distopt.parallel.ZeroRedundancyOptimizer(
        ranks[rank], "sgd", ["w"], lr=0.1, timeout=60.0)
threads = [threading.Thread(target=create, args=(r,)) for r in (0, 1)]
for t in threads: t.start()
for t in threads: t.join()
with distopt.autograd.context() as context_id:
    distopt.autograd.accumulate_gradients(context_id,
                                          {parameter[0]: torch.ones(4)})
    print("stepping", flush=True)
    started = time.monotonic()
    try:
        zeros[0].step(context_id)  # Rank 1 never steps: waits 60 s.
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - started:.2f} s",
              flush=True)
"""


def test_ctrl_c_interrupts_a_step_waiting_for_other_ranks(group_of_two):
    rank0, rank1 = group_of_two
    trainer = subprocess.Popen(
        ["/usr/bin/python3", "-c", STEP_THAT_WAITS, rank0.address,
         rank1.address], stdout=subprocess.PIPE, text=True)
    assert trainer.stdout.readline().strip() == "stepping"
    time.sleep(1.0)
    trainer.send_signal(signal.SIGINT)
    output, _ = trainer.communicate(timeout=30)
    assert trainer.returncode == 0
    interrupted = output.strip().split()
    assert interrupted[:2] == ["interrupted", "after"], output
    # Within a moment of the signal, not at the collective's 60 s timeout.
    assert float(interrupted[2]) < 3.0, output
    # Rank 0's daemon still waits in the abandoned step's collective; its
    # graceful shutdown would wait out the grace (30 s) for it: end it now.
    rank0.kill()
