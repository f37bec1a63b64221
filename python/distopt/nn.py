"""Remote layers as torch.nn.Modules: the parameters live on a worker, the
forward and backward run there, and torch's autograd drives them.

    fc1 = distopt.nn.RemoteLinear(784, 128, worker="10.0.0.1:50051")
    model = torch.nn.Sequential(fc1, torch.nn.ReLU(), torch.nn.Linear(128, 10))
    with distopt.autograd.context() as context_id:
        loss = loss_fn(model(x), y)
        loss.backward()   # fc1's gradients accumulate on its worker
"""

import math
from typing import List, Optional, Sequence

import torch

from distopt import autograd
from distopt.client import Client, RemoteParameter, default_client
from distopt._tensors import from_wire, to_wire


class _RemoteOp(torch.autograd.Function):
    """One op on a worker inside a context; its backward asks the worker for
    the inputs' gradients (the parameters' stay in the context there)."""

    @staticmethod
    def forward(ctx, anchor, call, *inputs):
        state, worker, op, parameter_ids = call
        wires = [to_wire(x, f"{op} input {i}") for i, x in enumerate(inputs)]
        state.touch(worker)
        forward_id, outputs = state.client._impl.forward(
            worker, state.id, op, parameter_ids, wires)
        ctx.call = (state, worker, forward_id)
        ctx.input_count = len(inputs)
        return from_wire(outputs[0])

    @staticmethod
    def backward(ctx, output_gradient):
        state, worker, forward_id = ctx.call
        gradients = state.client._impl.backward(
            worker, state.id, forward_id,
            [to_wire(output_gradient, "output gradient")])
        inputs = [None if g is None else from_wire(g) for g in gradients]
        inputs += [None] * (ctx.input_count - len(inputs))
        return (None, None, *inputs)


class _RemoteModule(torch.nn.Module):
    """A module whose parameters live on `worker`."""

    def __init__(self, worker: str, client: Optional[Client]):
        super().__init__()
        self.worker = worker
        self.client = client or default_client()

    def remote_parameters(self) -> List[RemoteParameter]:
        """The parameters on the worker, for DistributedOptimizer (as
        RemoteModule.remote_parameters in torch)."""
        raise NotImplementedError

    def _run(self, op: str, *inputs: torch.Tensor) -> torch.Tensor:
        ids = [p.id for p in self.remote_parameters()]
        state = autograd.current_context()
        if state is not None:
            anchor = torch.empty(0, requires_grad=torch.is_grad_enabled())
            return _RemoteOp.apply(anchor, (state, self.worker, op, ids),
                                   *inputs)
        if torch.is_grad_enabled() and any(
                x.requires_grad for x in inputs):
            raise RuntimeError(
                f"{type(self).__name__}: a forward that needs gradients "
                "outside a distopt.autograd.context(); enter one, or run "
                "under torch.no_grad()")
        # Inference: a context just for this forward.
        with autograd.context(self.client):
            with torch.no_grad():
                state = autograd.current_context()
                return _RemoteOp.apply(torch.empty(0), (state, self.worker,
                                                        op, ids), *inputs)


class RemoteLinear(_RemoteModule):
    """torch.nn.Linear whose weight [out, in] and bias [out] live on
    `worker`, initialised as torch.nn.Linear initialises them (or copied
    from `init_from`)."""

    def __init__(self, in_features: int, out_features: int, worker: str, *,
                 name: Optional[str] = None, client: Optional[Client] = None,
                 init_from: Optional[torch.nn.Linear] = None):
        super().__init__(worker, client)
        self.in_features = in_features
        self.out_features = out_features
        if init_from is None:
            init_from = torch.nn.Linear(in_features, out_features)
        if (init_from.in_features, init_from.out_features) != (in_features,
                                                                out_features):
            raise ValueError(
                f"init_from: Linear({init_from.in_features}, "
                f"{init_from.out_features}); expected Linear({in_features}, "
                f"{out_features})")
        if init_from.bias is None:
            raise ValueError("init_from: a Linear without bias; expected one "
                             "with a bias")
        name = name or f"linear_{id(self):x}"
        self.weight_ref = self.client.create_parameter(
            worker, name + ".weight", init_from.weight.detach())
        self.bias_ref = self.client.create_parameter(
            worker, name + ".bias", init_from.bias.detach())

    def remote_parameters(self) -> List[RemoteParameter]:
        return [self.weight_ref, self.bias_ref]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._run("linear", x)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, "
                f"out_features={self.out_features}, worker={self.worker}")


class RemoteEmbedding(_RemoteModule):
    """torch.nn.Embedding whose weight [num_embeddings, embedding_dim] lives
    on `worker` (initialised N(0, 1) as torch's, or copied from
    `init_from`). Indices are int64 and get no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, worker: str,
                 *, name: Optional[str] = None,
                 client: Optional[Client] = None,
                 init_from: Optional[torch.nn.Embedding] = None):
        super().__init__(worker, client)
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if init_from is None:
            init_from = torch.nn.Embedding(num_embeddings, embedding_dim)
        if tuple(init_from.weight.shape) != (num_embeddings, embedding_dim):
            raise ValueError(
                f"init_from: weight {list(init_from.weight.shape)}; expected "
                f"[{num_embeddings}, {embedding_dim}]")
        name = name or f"embedding_{id(self):x}"
        self.weight_ref = self.client.create_parameter(
            worker, name + ".weight", init_from.weight.detach())

    def remote_parameters(self) -> List[RemoteParameter]:
        return [self.weight_ref]

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return self._run("embedding", indices)

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, "
                f"worker={self.worker}")
