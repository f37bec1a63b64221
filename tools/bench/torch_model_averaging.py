#!/usr/bin/env python3
"""The peer of bench/local_sgd_bench.cc: PyTorch's PeriodicModelAverager over
gloo on loopback, averaging LAYERS parameters of SIZE x SIZE fp32 across
WORLD ranks, and the per-step gradient all-reduce (flattened, as DDP's
buckets and torch's averager do) that post-local SGD saves.

    torch_model_averaging.py WORLD LAYERS SIZE ITERATIONS

Prints, from rank 0: "averaging median_s" and "gradient_allreduce median_s".
"""

import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.algorithms.model_averaging.averagers as averagers

from gloo_ranks import run_on_ranks


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def run(rank, world, layers, size, iterations):
    generator = torch.Generator().manual_seed(99 + rank)
    params = [torch.nn.Parameter(torch.randn(size, size, generator=generator))
              for _ in range(layers)]
    for p in params:
        p.grad = torch.randn(size, size, generator=generator) * 1e-3
    averager = averagers.PeriodicModelAverager(period=1, warmup_steps=0)
    averaging, reducing = [], []
    for iteration in range(iterations + 1):
        dist.barrier()
        start = time.perf_counter()
        averager.average_parameters(params)
        averaging.append(time.perf_counter() - start)
        dist.barrier()
        start = time.perf_counter()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        flat /= world
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        reducing.append(time.perf_counter() - start)
    return median(averaging[1:]), median(reducing[1:])


def main():
    world, layers, size, iterations = (int(a) for a in sys.argv[1:5])
    averaging, reducing = run_on_ranks(world, run, layers, size, iterations)
    print("averaging", f"{averaging:.6f}")
    print("gradient_allreduce", f"{reducing:.6f}")


if __name__ == "__main__":
    main()
