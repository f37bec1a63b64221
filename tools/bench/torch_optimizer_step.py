#!/usr/bin/env python3
"""Times torch.optim steps for bench/optimizer_step_bench.cc (the peer).

    torch_optimizer_step.py KIND TENSORS ELEMENTS_PER_TENSOR STEPS [DEVICE]

Prints one line: "seconds_per_step=S". Uses the foreach implementation on
fp32 tensors (DEVICE: cpu, the default, or cuda) with the benchmark's
hyperparameters.
"""

import sys
import time

import torch

KINDS = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9,
                                              foreach=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-2, foreach=True),
}


def main():
    kind, tensors, elements, steps = sys.argv[1], *map(int, sys.argv[2:5])
    device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
    params = [torch.zeros(elements, device=device, requires_grad=True)
              for _ in range(tensors)]
    for p in params:
        p.grad = torch.full_like(p, 0.01)
    optimizer = KINDS[kind](params)
    optimizer.step()  # Creates the state outside the timing.
    if device != "cpu":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    if device != "cpu":
        torch.cuda.synchronize()
    print(f"seconds_per_step={(time.perf_counter() - start) / steps}")


if __name__ == "__main__":
    main()
