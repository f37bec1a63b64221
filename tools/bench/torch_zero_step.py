#!/usr/bin/env python3
"""The peer of bench/zero_step_bench.cc: PyTorch's ZeroRedundancyOptimizer
(and, for comparison, a plain torch.optim.Adam on every rank) over gloo on
loopback, with the seed tutorial's model: LAYERS linear weights of
SIZE x SIZE, Adam.

    torch_zero_step.py WORLD LAYERS SIZE ITERATIONS

Each rank sets its own gradients (outside the timing). A timed step is what
a data-parallel step needs after backward: the gradients averaged across
ranks (DDP's all-reduce, one per parameter here) and then optimizer.step();
the step alone is timed too. Prints, from rank 0, lines of
"MODE median_step_s median_allreduce_plus_step_s state_bytes_rank0
state_bytes_rank1 ...", MODE being "zero" or "plain".
"""

import sys
import time

import torch
import torch.distributed as dist

from gloo_ranks import run_on_ranks
from torch.distributed.optim import ZeroRedundancyOptimizer


def state_bytes(optimizer):
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.dim() > 0:
                total += value.numel() * value.element_size()
    return total


def run(rank, world, layers, size, iterations):
    generator = torch.Generator().manual_seed(1234 + rank)
    params = [torch.nn.Parameter(torch.randn(size, size, generator=generator))
              for _ in range(layers)]
    for p in params:
        p.grad = torch.randn(size, size, generator=generator) * 1e-3
    results = []
    for mode in ("zero", "plain"):
        if mode == "zero":
            optimizer = ZeroRedundancyOptimizer(
                params, optimizer_class=torch.optim.Adam, lr=1e-3)
            local = optimizer.optim
        else:
            optimizer = torch.optim.Adam(params, lr=1e-3)
            local = optimizer
        steps, totals = [], []
        for iteration in range(iterations + 2):
            dist.barrier()
            start = time.perf_counter()
            for p in params:
                dist.all_reduce(p.grad)
                p.grad.div_(world)
            reduced = time.perf_counter()
            optimizer.step()
            end = time.perf_counter()
            if iteration >= 2:  # Two warm-up steps make the state.
                steps.append(end - reduced)
                totals.append(end - start)
        mine = torch.tensor([state_bytes(local)], dtype=torch.int64)
        everyone = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(everyone, mine)
        steps.sort()
        totals.sort()
        results.append((mode, steps[len(steps) // 2], totals[len(totals) // 2],
                        [int(t.item()) for t in everyone]))
        del optimizer, local
    return results


def main():
    world, layers, size, iterations = (int(a) for a in sys.argv[1:5])
    results = run_on_ranks(world, run, layers, size, iterations)
    for mode, step, total, states in results:
        print(mode, f"{step:.6f}", f"{total:.6f}", *states)


if __name__ == "__main__":
    main()
