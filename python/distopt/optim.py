"""DistributedOptimizer, as torch.distributed.optim.DistributedOptimizer:
one optimizer per worker that owns some of the parameters, stepped together
with one call.

    optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.Adam, model_remote_parameters, lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    with distopt.autograd.context() as context_id:
        ...
        optimizer.step(context_id)
    scheduler.step()

It is a torch.optim.Optimizer as far as schedulers see: `param_groups[0]`
holds the hyperparameters ("lr", ...), and a change there reaches every
worker before the next step.
"""

import collections
from typing import Any, Dict, Iterable, List, Optional, Union

import torch

from distopt import _distopt
from distopt.client import Client, RemoteParameter, _wire_pairs

_KINDS = {
    "SGD": "sgd", "Adam": "adam", "AdamW": "adamw", "Adagrad": "adagrad",
    "Adadelta": "adadelta", "Adamax": "adamax", "RMSprop": "rmsprop",
    "Rprop": "rprop",
}


def kind_name(optimizer: Union[str, type]) -> str:
    """The worker's kind for a torch.optim class (torch.optim.Adam ->
    "adam") or a kind name, which is passed as it is."""
    if isinstance(optimizer, str):
        return optimizer
    name = getattr(optimizer, "__name__", None)
    if name in _KINDS:
        return _KINDS[name]
    raise ValueError(
        f"optimizer: {optimizer!r}; expected a kind name or one of "
        f"torch.optim.{', torch.optim.'.join(_KINDS)}")


# Differs from every hyperparameter value: a name whose value the owners
# hold is not known here.
_NOT_SENT = object()


def _as_sent(defaults: Dict[str, Any], name: str, value: Any) -> Any:
    """`value` as the workers take it: torch.optim takes any number for a
    flag (amsgrad=0, maximize=1) as its truth value; the workers take a
    bool there, and refuse a number."""
    if (isinstance(defaults.get(name), bool) and not isinstance(value, bool)
            and not isinstance(value, (str, bytes))
            and hasattr(value, "__bool__")):
        # A number, a numpy bool or a one-element tensor.
        return bool(value)
    return value


class DistributedOptimizer(torch.optim.Optimizer):
    """Steps `params` (RemoteParameters, on any workers) with `optimizer`
    (a torch.optim class or a kind name the workers run) and
    `hyperparameters` (as the torch class takes them).

    step(context_id) applies the gradients of that context on every owner
    at once; a failure raises distopt.Error naming the failed workers and
    those that applied the step (Error.applied). A step retried after a lost
    reply is applied once. Thread-safe for concurrent steps of different
    contexts.
    """

    def __init__(self, optimizer: Union[str, type],
                 params: Iterable[RemoteParameter],
                 client: Optional[Client] = None, **hyperparameters: Any):
        # torch.optim.Optimizer.__init__ takes local tensors only: the
        # attributes schedulers read are set here instead.
        params = list(params)
        if not params:
            raise ValueError("params: empty; expected RemoteParameters")
        for i, p in enumerate(params):
            if not isinstance(p, RemoteParameter):
                raise TypeError(f"params[{i}]: {type(p).__name__}; expected "
                                "a distopt.RemoteParameter")
        self._client = client or params[0].client
        self.kind = kind_name(optimizer)
        kinds = self._client.optimizer_kinds(params[0].worker)
        if self.kind not in kinds:
            raise ValueError(f"optimizer: {self.kind!r}; expected one of "
                             f"{sorted(kinds)}")
        known = kinds[self.kind]
        for name in hyperparameters:
            if name not in known:
                raise ValueError(
                    f"hyperparameter {name!r}: not one of {self.kind}'s; "
                    f"expected one of {list(known)}")
        self.defaults = {**known, **hyperparameters}
        self.state = collections.defaultdict(dict)
        self.param_groups = [{"params": params, **self.defaults}]
        self._optimizer_step_pre_hooks = collections.OrderedDict()
        self._optimizer_step_post_hooks = collections.OrderedDict()
        self._impl = _distopt.DistributedOptimizer(
            self._client._impl, self.kind, _wire_pairs(params),
            {name: _as_sent(known, name, value)
             for name, value in hyperparameters.items()})
        self._known = known
        self._sent = {name: _as_sent(known, name, value)
                      for name, value in self.defaults.items()}

    def _sync_hyperparameters(self) -> None:
        group = self.param_groups[0]
        # Compared as sent: a flag set to 0.0 where False was sent is no
        # change, one set to 1 is.
        now = {name: _as_sent(self._known, name, group.get(name))
               for name in self._sent}
        changes = {name: value for name, value in now.items()
                   if value != self._sent[name]}
        if changes:
            self._impl.set_hyperparameters(changes)
            self._sent.update(changes)

    def step(self, context_id: int) -> None:  # type: ignore[override]
        """Applies the gradients of context `context_id` on every owner."""
        self._sync_hyperparameters()
        self._impl.step(context_id)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to do: gradients live in contexts, released with them."""

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Not supported: torch's DistributedOptimizer has one group too."""
        raise NotImplementedError(
            "DistributedOptimizer has one parameter group, as torch's")

    def owners(self) -> List[str]:
        """The workers that own the parameters, in order of first
        appearance."""
        return [worker for worker, _, _ in self._impl.owners()]

    def state_dict(self) -> Dict[str, Any]:
        """Every owner's optimizer state (serialized, opaque), with the
        hyperparameters; load_state_dict takes it back."""
        return {
            "kind": self.kind,
            "owners": self.owners(),
            "state": self._impl.state_dicts(self._client._impl),
            "param_groups": [{k: v for k, v in self.param_groups[0].items()
                              if k != "params"}],
        }

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads what state_dict() returned into every owner's optimizer (all
        or nothing per owner) and restores the hyperparameters."""
        if state_dict.get("kind") != self.kind:
            raise ValueError(f"state_dict['kind']: {state_dict.get('kind')!r};"
                             f" expected {self.kind!r}")
        # Each owner's state belongs to the parameters it holds: loading
        # another order's would step one worker with another's moments.
        if list(state_dict.get("owners", [])) != self.owners():
            raise ValueError(
                f"state_dict['owners']: {state_dict.get('owners')}; expected "
                f"{self.owners()} (the workers of this optimizer, in the "
                "order of its parameters)")
        self._impl.load_state_dicts(self._client._impl,
                                    list(state_dict["state"]))
        for name, value in state_dict["param_groups"][0].items():
            self.param_groups[0][name] = value
        # The owners now hold the hyperparameters of the state they loaded:
        # those last sent before it was saved, which a scheduler may have
        # moved on since in param_groups (step, then scheduler.step, then
        # state_dict). Every value is sent again, so the owners step with
        # param_groups' values, as torch's load_state_dict does.
        self._sent = {name: _NOT_SENT for name in self._sent}
        self._sync_hyperparameters()

    def __repr__(self) -> str:
        return (f"DistributedOptimizer({self.kind}, {len(self.owners())} "
                f"workers, {self.defaults})")
