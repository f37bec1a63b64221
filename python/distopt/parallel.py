"""Data-parallel optimizers on a rank's daemon, as torch's
ZeroRedundancyOptimizer and PostLocalSGDOptimizer. Each rank's trainer
drives its own daemon and makes the same calls in the same order; the
daemons run the collectives among themselves.

    zero = distopt.parallel.ZeroRedundancyOptimizer(
        my_daemon, torch.optim.Adam, ["fc1.weight", "fc1.bias"], lr=1e-3)
    with distopt.autograd.context() as context_id:
        distopt.autograd.accumulate_gradients(context_id, my_gradients)
        zero.step(context_id)
"""

import json
from typing import Any, Dict, List, Optional, Sequence, Union

from distopt import _distopt
from distopt.client import Client, default_client
from distopt.optim import kind_name


def _groups(params: Union[Sequence[str], Sequence[Dict[str, Any]]],
            defaults: Dict[str, Any]) -> List[Dict[str, Any]]:
    """torch's param groups: {"params": [names], **hyperparameters}, each
    with the defaults under its own values (checked by the extension)."""
    if params and isinstance(params[0], dict):
        return [{**defaults, **g} for g in params]
    return [{"params": list(params), **defaults}]


class ZeroRedundancyOptimizer:
    """ZeRO on this rank's daemon `worker`: optimizer state sharded across
    the ranks, updated parameters shared.

    Args:
      worker: this rank's daemon, "host:port".
      optimizer: a torch.optim class or kind name.
      params: the daemon's parameter names, or param groups
        ({"params": [names], "lr": ...}).
      parameters_as_bucket_view, overlap: as torch's (overlap_with_ddp).
      gradient_sharded: ZeRO-2 (reduce-scatter, then all-gather).
      bucket_bytes: the bound of the step's buffers (0: 25 MiB).
      timeout: seconds each collective may wait for the other ranks.
      **defaults: hyperparameters of every group.
    """

    def __init__(self, worker: str, optimizer: Union[str, type],
                 params: Union[Sequence[str], Sequence[Dict[str, Any]]], *,
                 client: Optional[Client] = None,
                 parameters_as_bucket_view: bool = False,
                 overlap: bool = False, gradient_sharded: bool = False,
                 bucket_bytes: int = 0, timeout: float = 60.0,
                 **defaults: Any):
        self.client = client or default_client()
        self.worker = worker
        self._impl = _distopt.RemoteZero(self.client._impl, worker)
        request = {
            "kind": kind_name(optimizer),
            "timeout_ms": str(int(timeout * 1000)),
            "parameters_as_bucket_view": parameters_as_bucket_view,
            "overlap": overlap,
            "gradient_sharded": gradient_sharded,
            "bucket_bytes": str(int(bucket_bytes)),
        }
        self.info = json.loads(self._impl.create(
            json.dumps(request), _groups(params, defaults)))

    def step(self, context_id: int) -> None:
        """Averages the context's gradients across the ranks and steps."""
        self._impl.step(context_id)

    def join(self, wait: float = 24 * 3600.0) -> int:
        """Once this rank's data ran out: shadows the other ranks' steps
        until all have joined; returns the steps shadowed."""
        return self._impl.join(wait)

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Adds a group ({"params": [names], **hyperparameters}) on every
        rank, as torch's add_param_group."""
        self.info = json.loads(self._impl.add_param_group(dict(param_group)))

    def set_hyperparameters(self, group: int, **changes: Any) -> None:
        """Changes group `group`'s hyperparameters on every rank."""
        self.info = json.loads(self._impl.set_hyperparameters(group, changes))

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gathers the whole state on rank `to` (every rank calls it)."""
        self._impl.consolidate_state_dict(to)

    def state_dict(self) -> bytes:
        """The consolidated state (distopt.v1.ZeroStateDict, serialized),
        on the rank it was consolidated to."""
        return self._impl.state_dict()

    def load_state_dict(self, state_dict: bytes) -> None:
        """Every rank loads the same whole state and keeps its share."""
        self._impl.load_state_dict(state_dict)

    def get(self) -> Dict[str, Any]:
        """The rank's ZeroInfo (owners, state and scratch bytes, ...)."""
        self.info = json.loads(self._impl.info())
        return self.info


class PostLocalSGDOptimizer:
    """Post-local SGD on this rank's daemon: gradients averaged until
    `start_localsgd_iter`, then local steps with the parameters averaged
    every `period` steps (or hierarchically: `periods` = [(period,
    group_size), ...]). `bucket_bytes` bounds the step's buffers (0: 25
    MiB)."""

    def __init__(self, worker: str, optimizer: Union[str, type],
                 params: Union[Sequence[str], Sequence[Dict[str, Any]]], *,
                 client: Optional[Client] = None, period: int = 4,
                 warmup_steps: int = 0, start_localsgd_iter: int = 0,
                 periods: Optional[Sequence[Sequence[int]]] = None,
                 subgroup_size: int = 0,
                 no_post_local_gradient_allreduce: bool = False,
                 bucket_bytes: int = 0, timeout: float = 60.0,
                 **defaults: Any):
        self.client = client or default_client()
        self._impl = _distopt.RemoteLocalSgd(self.client._impl, worker)
        request: Dict[str, Any] = {
            "kind": kind_name(optimizer),
            "start_localsgd_iter": str(start_localsgd_iter),
            "subgroup_size": subgroup_size,
            "no_post_local_gradient_allreduce":
                no_post_local_gradient_allreduce,
            "timeout_ms": str(int(timeout * 1000)),
            "bucket_bytes": str(int(bucket_bytes)),
        }
        if periods:
            request["hierarchical"] = {
                "periods": [{"period": str(p), "group_size": g}
                            for p, g in periods],
                "warmup_steps": str(warmup_steps)}
        else:
            request["periodic"] = {"period": str(period),
                                   "warmup_steps": str(warmup_steps)}
        self.info = json.loads(self._impl.create(
            json.dumps(request), _groups(params, defaults)))

    def step(self, context_id: int) -> int:
        """A step; returns the size of the group it averaged in (0: none)."""
        return self._impl.step(context_id)

    def set_hyperparameters(self, group: int, **changes: Any) -> None:
        """Changes group `group`'s hyperparameters on every rank."""
        self.info = json.loads(self._impl.set_hyperparameters(group, changes))

    def state_dict(self) -> bytes:
        """The rank's state (distopt.v1.PostLocalSgdStateDict, serialized):
        the optimizer's and the averager's step."""
        return self._impl.state_dict()

    def load_state_dict(self, state_dict: bytes) -> List[str]:
        """Returns the daemon's warnings."""
        return self._impl.load_state_dict(state_dict)

    def get(self) -> Dict[str, Any]:
        """The rank's PostLocalSgdInfo."""
        self.info = json.loads(self._impl.info())
        return self.info
