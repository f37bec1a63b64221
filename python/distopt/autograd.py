"""Distributed autograd contexts, as torch.distributed.autograd.

    with distopt.autograd.context() as context_id:
        loss = model(x).sum()      # remote layers record their forwards
        loss.backward()            # or distopt.autograd.backward(context_id,
                                   #                              [loss])
        optimizer.step(context_id)

Remote layers' backwards run inside torch's autograd: their gradients
accumulate in the context on the workers that own the parameters, local
layers get their .grad as usual. Leaving the `with` releases the context on
every worker it touched.
"""

import threading
from typing import Dict, List, Optional

import torch

from distopt.client import Client, RemoteParameter, default_client
from distopt._tensors import from_wire, to_wire

_lock = threading.Lock()
# Live contexts by id: what each touched, for release and get_gradients.
_contexts: Dict[int, "_ContextState"] = {}
_local = threading.local()


class _ContextState:
    def __init__(self, client: Client, context_id: int):
        self.client = client
        self.id = context_id
        # Each worker the context touched, with the client that reached it
        # (a layer's own, which has that worker's credentials).
        self.workers: Dict[str, Client] = {}
        self.lock = threading.Lock()

    def touch(self, worker: str, client: Optional[Client] = None) -> None:
        with self.lock:
            self.workers.setdefault(worker, client or self.client)


class context:
    """A distributed autograd context; `with` gives its id (an int).

    Contexts are per thread: a thread's remote layers record into the
    innermost context that thread entered.
    """

    def __init__(self, client: Optional[Client] = None):
        self._client = client or default_client()
        self._state: Optional[_ContextState] = None

    def __enter__(self) -> int:
        context_id = self._client._impl.new_context_id()
        self._state = _ContextState(self._client, context_id)
        with _lock:
            _contexts[context_id] = self._state
        _stack().append(self._state)
        return context_id

    def __exit__(self, *exc_info) -> None:
        state = self._state
        stack = _stack()
        if stack and stack[-1] is state:
            stack.pop()
        with _lock:
            _contexts.pop(state.id, None)
        with state.lock:
            touched = sorted(state.workers.items())
        for worker, client in touched:
            try:
                client._impl.release_context(worker, state.id)
            except Exception:  # A worker that is gone collects it later.
                pass
        state.client._impl.forget_context(state.id)


def _stack() -> List[_ContextState]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current_context() -> Optional[_ContextState]:
    """The innermost context this thread entered, or None."""
    stack = _stack()
    return stack[-1] if stack else None


def _state_of(context_id: int) -> _ContextState:
    with _lock:
        state = _contexts.get(context_id)
    if state is None:
        raise ValueError(
            f"context_id: {context_id} is not a live distopt.autograd.context "
            "of this process; expected the id its `with` gave")
    return state


def backward(context_id: int, roots: List[torch.Tensor],
             retain_graph: bool = False) -> None:
    """As torch.distributed.autograd.backward: backpropagates from `roots`
    (scalars) in context `context_id`; remote parameters' gradients
    accumulate in the context on their workers. A remote layer's forward is
    backpropagated at most once (a second backward through it raises,
    retain_graph or not: its worker would count it once)."""
    _state_of(context_id)
    torch.autograd.backward(roots, retain_graph=retain_graph)


def get_gradients(context_id: int) -> Dict[RemoteParameter, torch.Tensor]:
    """The gradients the context holds on every worker it touched, by remote
    parameter, as torch.distributed.autograd.get_gradients."""
    state = _state_of(context_id)
    gradients = {}
    with state.lock:
        touched = sorted(state.workers.items())
    for worker, client in touched:
        for parameter_id, wire in client._impl.get_gradients(
                worker, context_id).items():
            gradients[RemoteParameter(client, worker,
                                      parameter_id)] = from_wire(wire)
    return gradients


def accumulate_gradients(context_id: int, gradients: Dict[RemoteParameter,
                                                          torch.Tensor]):
    """Adds gradients computed here to the parameters' owners in the
    context (one call per worker)."""
    state = _state_of(context_id)
    by_worker: Dict[str, list] = {}
    for parameter, gradient in gradients.items():
        by_worker.setdefault(parameter.worker, []).append(
            (parameter.id, to_wire(gradient, f"gradients[{parameter!r}]")))
    for worker, pairs in by_worker.items():
        client = next(p.client for p in gradients if p.worker == worker)
        state.touch(worker, client)
        client._impl.accumulate_gradients(worker, context_id, pairs)
