"""Connections to distopt workers, and remote parameters (distopt's RRef)."""

import json
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from distopt import _distopt
from distopt._tensors import (TensorLike, dtype_name, from_wire, to_wire,
                              torch_dtype)


class Client:
    """Calls to distopt worker daemons: one channel per worker, shared.

    Thread-safe; every blocking call releases the GIL. Failed calls raise
    distopt.Error.

    Args:
      rpc_timeout: seconds each call may take (streams get more for their
        payload, and data-parallel calls the group's collective timeout).
      tls_root_certs: PEM CAs that sign the workers' certificates; TLS when
        given, plaintext otherwise.
      tls_client_cert, tls_client_key: PEM certificate and key, for workers
        that require mutual TLS.
      auth_token: sent as "authorization: Bearer <token>" (needs TLS).
    """

    def __init__(self, rpc_timeout: float = 30.0, tls_root_certs: str = "",
                 tls_client_cert: str = "", tls_client_key: str = "",
                 auth_token: str = ""):
        if auth_token and not tls_root_certs:
            raise ValueError(
                "auth_token: given without tls_root_certs; expected TLS "
                "(a bearer token is never sent in plaintext)")
        self._impl = _distopt.Client(
            rpc_timeout=rpc_timeout, tls_root_certs=tls_root_certs,
            tls_client_cert=tls_client_cert, tls_client_key=tls_client_key,
            auth_token=auth_token)

    def create_parameter(self, worker: str, name: str,
                         values: Optional[TensorLike] = None, *,
                         shape: Optional[Sequence[int]] = None,
                         dtype: torch.dtype = torch.float32,
                         init: Tuple = ("zeros",)) -> "RemoteParameter":
        """A new parameter on `worker`: a copy of `values`, or of `shape` and
        `dtype` filled by `init` (("zeros",), ("constant", v),
        ("uniform", low, high, seed) or ("normal", mean, std, seed))."""
        _check_str(worker, "worker")
        _check_str(name, "name")
        if isinstance(init, str):
            init = (init,)
        if values is not None:
            array, name_of_dtype = to_wire(values, "values")
            parameter_id = self._impl.create_parameter_from(
                worker, name, array, name_of_dtype)
        else:
            if shape is None:
                raise ValueError("shape: None; expected values or a shape")
            if isinstance(shape, int) or not all(
                    isinstance(d, int) for d in shape):
                raise TypeError(f"shape: {shape!r}; expected a sequence of "
                                "ints")
            parameter_id = self._impl.create_parameter(
                worker, name, dtype_name(dtype), list(shape), tuple(init))
        return RemoteParameter(self, worker, parameter_id)

    def find_parameter(self, worker: str, name: str) -> "RemoteParameter":
        """The parameter called `name` on `worker`."""
        _check_str(worker, "worker")
        _check_str(name, "name")
        return RemoteParameter(self, worker,
                               self._impl.find_parameter(worker, name))

    def optimizer_kinds(self, worker: str) -> Dict[str, Dict[str, Any]]:
        """The optimizer kinds `worker` runs: name -> {hyperparameter name:
        default value}, in torch.optim's order."""
        kinds = {}
        for text in self._impl.list_optimizer_kinds(worker):
            info = json.loads(text)
            defaults = {}
            for hyper in info.get("hyperparameters", []):
                value = hyper.get("default_value", {})
                if "pair" in value:
                    pair = value["pair"]
                    defaults[hyper["name"]] = (pair.get("first", 0.0),
                                               pair.get("second", 0.0))
                elif "flag" in value:
                    defaults[hyper["name"]] = bool(value["flag"])
                else:
                    defaults[hyper["name"]] = float(value.get("number", 0.0))
            kinds[info["name"]] = defaults
        return kinds

    def save_checkpoint(self, worker: str) -> Dict[str, Any]:
        """Saves a checkpoint on `worker` now (it needs --checkpoint_dir) and
        returns it once it is on disk: folder, reason, parameters, sections,
        bytes, snapshot_seconds (how long steps waited for the copy) and
        write_seconds. A full disk raises distopt.Error with code
        RESOURCE_EXHAUSTED; the previous checkpoints are kept."""
        _check_str(worker, "worker")
        return _checkpoint_info(json.loads(self._impl.save_checkpoint(worker)))

    def list_checkpoints(self, worker: str) -> Dict[str, Any]:
        """The checkpoints `worker` keeps, newest first ("checkpoints"), and
        "restore_fell_back" / "last_save_error" when there is something to
        say."""
        _check_str(worker, "worker")
        listed = json.loads(self._impl.list_checkpoints(worker))
        listed["checkpoints"] = [
            _checkpoint_info(c) for c in listed.get("checkpoints", [])]
        return listed

    def group(self, worker: str) -> Dict[str, Any]:
        """The data-parallel group `worker` belongs to, as its GetGroup
        answers: rank, world_size, state ("SINGLE", "JOINING", "READY" or
        "FAILED"), backend (what carries the group's tensors: "gloo",
        "nccl" or "gloo-staged"; "" until the group has joined), round,
        error, peers, rendezvous, lost_ranks and replacements."""
        _check_str(worker, "worker")
        info = json.loads(self._impl.get_group(worker))
        info["round"] = int(info.get("round", 0))  # JSON's 64-bit string.
        return info


def _checkpoint_info(info: Dict[str, Any]) -> Dict[str, Any]:
    # JSON carries 64-bit integers as strings.
    for field in ("saved_at_unix_micros", "parameters", "bytes"):
        info[field] = int(info.get(field, 0))
    return info


def _check_str(value: Any, argument: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{argument}: {type(value).__name__}; expected a str")


_default_lock = threading.Lock()
_default_client: Optional[Client] = None


def connect(**options) -> Client:
    """A Client with `options` (see Client), which also becomes the default
    that layers, contexts and optimizers use when given none."""
    global _default_client
    client = Client(**options)
    with _default_lock:
        _default_client = client
    return client


def default_client() -> Client:
    """The last client connect() made (one with default options if none)."""
    global _default_client
    with _default_lock:
        if _default_client is None:
            _default_client = Client()
        return _default_client


class RemoteParameter:
    """A reference to a parameter a worker owns, as torch's RRef to one.

    Plain data: equal when worker and id are.
    """

    def __init__(self, client: Client, worker: str, parameter_id: int):
        self.client = client
        self.worker = worker
        self.id = parameter_id

    def owner(self) -> str:
        """The owning worker's address, "host:port"."""
        return self.worker

    def info(self) -> Dict[str, Any]:
        """id, name, dtype, shape, device and version, as the worker has
        them."""
        return self.client._impl.get_parameter(self.worker, self.id)

    def to_tensor(self) -> torch.Tensor:
        """The values, copied here as a CPU tensor."""
        return from_wire(self.client._impl.read_parameter(self.worker, self.id))

    def to_here(self) -> torch.Tensor:
        """As RRef.to_here(): the values here (see to_tensor)."""
        return self.to_tensor()

    def copy_(self, values: TensorLike) -> "RemoteParameter":
        """Replaces the values with `values` (its dtype and shape); all or
        nothing. Returns self, as torch's in-place methods do."""
        info = self.info()
        array, name = to_wire(values, "values", dtype=info["dtype"],
                              shape=info["shape"])
        self.client._impl.write_parameter(self.worker, self.id, array, name)
        return self

    def delete(self) -> None:
        """Deletes the parameter on its worker."""
        self.client._impl.delete_parameter(self.worker, self.id)

    @property
    def shape(self) -> torch.Size:
        """The parameter's shape (asked of its worker)."""
        return torch.Size(self.info()["shape"])

    @property
    def dtype(self) -> torch.dtype:
        """The parameter's torch dtype (asked of its worker)."""
        return torch_dtype(self.info()["dtype"])

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RemoteParameter) and
                other.worker == self.worker and other.id == self.id)

    def __hash__(self) -> int:
        return hash((self.worker, self.id))

    def __repr__(self) -> str:
        return f"RemoteParameter({self.worker}/{self.id})"


def _wire_pairs(parameters: List[RemoteParameter]) -> List[Tuple[str, int]]:
    return [(p.worker, p.id) for p in parameters]
