"""Runs a function on WORLD torch.distributed gloo ranks: spawned processes
bootstrapped over loopback, for the PyTorch peers of the benchmarks and the
golden generators.

    result = run_on_ranks(world, body, *args)

calls body(rank, world, *args) in every rank once the process group is up
and returns what rank 0's call returned.
"""

import os
import socket

import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, queue, body, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    result = body(rank, world, *args)
    if rank == 0:
        queue.put(result)
    dist.barrier()
    dist.destroy_process_group()


def run_on_ranks(world, body, *args):
    port = _free_port()
    context = mp.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_rank_main,
                                 args=(r, world, port, queue, body, args))
                 for r in range(world)]
    for p in processes:
        p.start()
    result = queue.get()
    for p in processes:
        p.join()
    return result
