#!/usr/bin/env python3
"""The peer of bench/distributed_step_bench.cc: PyTorch's RPC
DistributedOptimizer (TensorPipe on loopback) stepping parameters held by
WORKERS worker processes.

    torch_rpc_step.py WORKERS ITERATIONS_SMALL ITERATIONS_LARGE

For each layout ("small": 10 parameters of 1K floats, "large": 4 of 1M) and
kind (sgd, adam), the trainer fills a distributed autograd context with
gradients (outside the timing) and times DistributedOptimizer.step. Prints
one line per case: "WORKERS LAYOUT KIND p50_us p99_us".
"""

import os
import socket
import sys
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from torch.distributed.optim import DistributedOptimizer

LAYOUTS = {"small": (10, 1 << 10), "large": (4, 1 << 20)}
KINDS = {
    "sgd": (torch.optim.SGD, {"lr": 1e-3}),
    "adam": (torch.optim.Adam, {"lr": 1e-3}),
}


def _make(elements):
    return torch.zeros(elements, requires_grad=True)


def _sum(rref):
    return rref.local_value().sum()


def percentile(sorted_values, fraction):
    index = min(len(sorted_values) - 1, int(fraction * len(sorted_values)))
    return sorted_values[index]


def trainer(workers, iterations):
    for layout, (count, elements) in LAYOUTS.items():
        for kind, (optimizer_class, hyper) in KINDS.items():
            params = [rpc.remote(f"worker{i % workers}", _make, args=(elements,))
                      for i in range(count)]
            optimizer = DistributedOptimizer(optimizer_class, params, **hyper)
            times = []
            for _ in range(iterations[layout]):
                with dist_autograd.context() as context_id:
                    losses = [rpc.rpc_sync(p.owner(), _sum, args=(p,))
                              for p in params]
                    dist_autograd.backward(context_id, [torch.stack(losses).sum()])
                    start = time.perf_counter()
                    optimizer.step(context_id)
                    times.append(time.perf_counter() - start)
            times.sort()
            print(f"{workers} {layout} {kind} "
                  f"{percentile(times, 0.5) * 1e6:.0f} "
                  f"{percentile(times, 0.99) * 1e6:.0f}", flush=True)


def run(rank, workers, iterations, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{port}", num_worker_threads=16)
    name = "trainer" if rank == 0 else f"worker{rank - 1}"
    torch.set_num_threads(1)
    rpc.init_rpc(name, rank=rank, world_size=workers + 1,
                 rpc_backend_options=options)
    if rank == 0:
        trainer(workers, iterations)
    rpc.shutdown()


def main():
    workers = int(sys.argv[1])
    iterations = {"small": int(sys.argv[2]), "large": int(sys.argv[3])}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(workers, iterations, port), nprocs=workers + 1,
             join=True)


if __name__ == "__main__":
    main()
