"""Remote layers as torch.nn.Modules: the parameters live on a worker, the
forward and backward run there, and torch's autograd drives them.

    fc1 = distopt.nn.RemoteLinear(784, 128, worker="10.0.0.1:50051")
    model = torch.nn.Sequential(fc1, torch.nn.ReLU(), torch.nn.Linear(128, 10))
    with distopt.autograd.context() as context_id:
        loss = loss_fn(model(x), y)
        loss.backward()   # fc1's gradients accumulate on its worker
"""

import uuid
from typing import List, Optional

import torch
from torch.autograd.function import once_differentiable

from distopt import autograd
from distopt.client import Client, RemoteParameter, default_client
from distopt._tensors import from_wire, to_wire


class _RemoteOp(torch.autograd.Function):
    """One op on a worker inside a context; its backward asks the worker for
    the inputs' gradients (the parameters' stay in the context there).

    A forward is backpropagated at most once: the worker adds a forward's
    parameter gradients to the context once (a repeat is taken for a retry
    and not added again), so a second backward through the same graph
    (retain_graph=True) would count the remote parameters once but the
    local ones twice. It raises instead; run the forward again."""

    @staticmethod
    def forward(ctx, anchor, call, *inputs):
        state, client, worker, op, parameter_ids = call
        wires = [to_wire(x, f"{op} input {i}") for i, x in enumerate(inputs)]
        state.touch(worker, client)
        forward_id, outputs = client._impl.forward(
            worker, state.id, op, parameter_ids, wires)
        ctx.call = (state, client, worker, forward_id)
        ctx.input_count = len(inputs)
        ctx.backpropagated = False
        # Saved so that torch refuses a second backward without
        # retain_graph, as for its own ops.
        ctx.save_for_backward(anchor)
        return from_wire(outputs[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        ctx.saved_tensors  # Raises when the graph was freed.
        if ctx.backpropagated:
            raise RuntimeError(
                "distopt: a remote layer's forward was backpropagated "
                "already in this context; its worker counts a forward's "
                "gradients once, so a second backward (retain_graph=True) "
                "would count them once where torch counts them twice. "
                "Expected one backward per forward: run the forward again")
        ctx.backpropagated = True
        state, client, worker, forward_id = ctx.call
        gradients = client._impl.backward(
            worker, state.id, forward_id,
            [to_wire(output_gradient.contiguous(), "output gradient")])
        inputs = [None if g is None else from_wire(g) for g in gradients]
        inputs += [None] * (ctx.input_count - len(inputs))
        return (None, None, *inputs)


class _RemoteModule(torch.nn.Module):
    """A module whose parameters live on `worker`."""

    def __init__(self, worker: str, client: Optional[Client]):
        super().__init__()
        self.worker = worker
        self.client = client or default_client()

    def _place(self, name: str, source: torch.nn.Module) -> None:
        """Creates `source`'s parameters on the worker as "<name>.<param>"
        (float32 only); each is also the attribute `<param>_ref`."""
        for param_name, values in source.named_parameters():
            if values.dtype != torch.float32:
                raise ValueError(
                    f"init_from: {param_name} is {values.dtype}; expected "
                    "torch.float32 (the workers' linear and embedding ops "
                    "take float32)")
        self._remote = []
        for param_name, values in source.named_parameters():
            ref = self.client.create_parameter(
                self.worker, f"{name}.{param_name}", values.detach())
            setattr(self, param_name + "_ref", ref)
            self._remote.append((param_name, ref))

    def remote_parameters(self) -> List[RemoteParameter]:
        """The parameters on the worker, for DistributedOptimizer (as
        RemoteModule.remote_parameters in torch)."""
        return [ref for _, ref in self._remote]

    def _remote_state(self):
        """(name, RemoteParameter) of what state_dict() holds."""
        return list(self._remote)

    def _apply(self, fn, *args, **kwargs):
        # .half(), .double(), .to(dtype or device), .cuda() reach a module
        # through _apply: the remote parameters cannot follow, so refuse a
        # conversion that would change anything (as torch's RemoteModule
        # refuses these), and let the no-ops (.float(), .to("cpu")) pass.
        probe = torch.zeros(1)
        converted = fn(probe)
        if (converted.dtype != probe.dtype or
                converted.device != probe.device):
            raise NotImplementedError(
                f"{type(self).__name__}: its parameters live on worker "
                f"{self.worker} as float32 and stay there; a conversion to "
                f"{converted.dtype} on {converted.device} cannot move them")
        return super()._apply(fn, *args, **kwargs)

    # The remote parameters are part of the module's state_dict (read from
    # the worker) and load_state_dict writes them back, so that torch.save
    # checkpoints of a model include its remote layers.
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name, parameter in self._remote_state():
            destination[prefix + name] = parameter.to_tensor()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata,
                              strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata,
                                      strict, missing_keys, unexpected_keys,
                                      error_msgs)
        for name, parameter in self._remote_state():
            key = prefix + name
            # torch's own loader does not know the remote names.
            if key in unexpected_keys:
                unexpected_keys.remove(key)
            if key not in state_dict:
                missing_keys.append(key)
                continue
            try:
                parameter.copy_(state_dict[key])
            except (ValueError, TypeError) as error:
                error_msgs.append(f"{key}: {error}")

    def _run(self, op: str, *inputs: torch.Tensor) -> torch.Tensor:
        ids = [p.id for p in self.remote_parameters()]
        state = autograd.current_context()
        if state is not None:
            anchor = torch.empty(0, requires_grad=torch.is_grad_enabled())
            return _RemoteOp.apply(
                anchor, (state, self.client, self.worker, op, ids), *inputs)
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
                return _RemoteOp.apply(
                    torch.empty(0), (state, self.client, self.worker, op, ids),
                    *inputs)


def _unique_name(kind: str) -> str:
    # Unique on the worker across modules and processes (id() is reused
    # once a module is freed, and its parameters stay on the worker).
    return f"{kind}_{uuid.uuid4().hex}"


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
        # weight_ref and bias_ref.
        self._place(name or _unique_name("linear"), init_from)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = x W^T + b over the last dimension, as torch.nn.Linear: any
        leading dimensions (none for one sample)."""
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"x: shape {list(x.shape)}; expected [..., "
                f"{self.in_features}]")
        leading = x.shape[:-1]
        y = self._run("linear", x.reshape(-1, self.in_features))
        return y.reshape(*leading, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, "
                f"out_features={self.out_features}, worker={self.worker}")


class RemoteEmbedding(_RemoteModule):
    """torch.nn.Embedding whose weight [num_embeddings, embedding_dim] lives
    on `worker` (initialised N(0, 1) as torch's, or copied from
    `init_from`). Indices are int64 or int32, as torch's take them, and get
    no gradient."""

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
        self._place(name or _unique_name("embedding"), init_from)  # weight_ref.

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        # The worker reads int64 indices; torch.nn.Embedding takes int32 too.
        if indices.dtype == torch.int32:
            indices = indices.long()
        return self._run("embedding", indices)

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, "
                f"worker={self.worker}")
