"""distopt for PyTorch trainers: remote layers inside torch autograd,
DistributedOptimizer, and data-parallel ZeRO and post-local SGD, over
distopt's worker daemons.

    import distopt, torch
    client = distopt.connect()
    fc = distopt.nn.RemoteLinear(64, 10, worker="127.0.0.1:50051")
    optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.Adam, fc.remote_parameters(), lr=1e-3)
    with distopt.autograd.context() as context_id:
        loss = torch.nn.functional.cross_entropy(fc(x), y)
        loss.backward()
        optimizer.step(context_id)
"""

from distopt.errors import Error
from distopt.client import Client, RemoteParameter, connect, default_client
from distopt import autograd, nn, optim, parallel

__all__ = ["Error", "Client", "RemoteParameter", "connect", "default_client",
           "autograd", "nn", "optim", "parallel"]
