#!/usr/bin/env python3
"""Golden schedules of torch's model averagers, for
server/localsgd/model_averager_test.cc.

Runs WORLD=4 gloo ranks on loopback with Debian's python3-torch; for each
case it builds torch's PeriodicModelAverager or HierarchicalModelAverager,
calls average_parameters STEPS times on a parameter with a gradient, and
records at each step the size of the group it averaged in (0: none), by
wrapping torch's own averaging function. Writes one line per case:

    KIND WARMUP PERIOD:SIZE[,PERIOD:SIZE...] SIZE_AT_STEP_0 ... SIZE_AT_STEP_N

    python3 tools/golden/generate_averager_golden.py \
        > server/localsgd/testdata/averager_golden.txt
"""

import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.distributed.algorithms.model_averaging.averagers as averagers
import torch.distributed.algorithms.model_averaging.hierarchical_model_averager as hierarchical
import torch.distributed.algorithms.model_averaging.utils as utils

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from gloo_ranks import run_on_ranks  # noqa: E402

WORLD = 4
STEPS = 24
CASES = [
    ("periodic", 0, [(1, 4)]),
    ("periodic", 0, [(2, 4)]),
    ("periodic", 0, [(4, 4)]),
    ("periodic", 3, [(2, 4)]),
    ("periodic", 5, [(4, 4)]),
    ("periodic", 2, [(1, 4)]),
    ("periodic", 7, [(3, 4)]),
    ("hierarchical", 0, [(2, 2), (4, 4)]),
    ("hierarchical", 3, [(2, 2), (4, 4)]),
    ("hierarchical", 0, [(1, 1), (2, 2), (4, 4)]),
    ("hierarchical", 5, [(1, 2), (3, 4)]),
    ("hierarchical", 2, [(4, 4)]),
    ("hierarchical", 6, [(2, 2), (6, 4)]),
]


def run(rank, world):
    warnings.simplefilter("ignore")
    recorded = []
    original = utils.average_parameters_or_parameter_groups

    def recording(params, process_group):
        recorded.append(dist.get_world_size(group=process_group))
        return original(params, process_group)

    utils.average_parameters_or_parameter_groups = recording
    # torch 1.13's new_subgroups refuses to run without CUDA although, given
    # a group size, it only makes gloo groups of contiguous ranks; the check
    # is lifted while an averager is made (averaging itself checks again).
    cuda_available = torch.cuda.is_available
    lines = []
    for kind, warmup, periods in CASES:
        param = torch.nn.Parameter(torch.full((3,), float(rank)))
        param.grad = torch.ones(3)
        if kind == "periodic":
            averager = averagers.PeriodicModelAverager(
                period=periods[0][0], warmup_steps=warmup)
        else:
            torch.cuda.is_available = lambda: True
            averager = hierarchical.HierarchicalModelAverager(
                period_group_size_dict=dict(periods), warmup_steps=warmup)
            torch.cuda.is_available = cuda_available
        sizes = []
        for _ in range(STEPS):
            recorded.clear()
            averager.average_parameters([param])
            sizes.append(recorded[0] if recorded else 0)
        lines.append(" ".join(
            [kind, str(warmup), ",".join(f"{p}:{g}" for p, g in periods)] +
            [str(s) for s in sizes]))
    return lines


def main():
    lines = run_on_ranks(WORLD, run)
    print(f"# torch {torch.__version__}, world size {WORLD}, {STEPS} steps")
    for line in lines:
        print(line)


if __name__ == "__main__":
    sys.exit(main())
