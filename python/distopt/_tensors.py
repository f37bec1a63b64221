"""Tensors to and from the extension: CPU torch tensors and numpy arrays of
float32, float16, bfloat16 and int64, passed as buffers without a copy."""

from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch

TensorLike = Union[torch.Tensor, np.ndarray]

_TORCH_DTYPES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
}
_NUMPY_DTYPES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float16): "float16",
    np.dtype(np.int64): "int64",
}
_FROM_NAME = {name: dtype for dtype, name in _TORCH_DTYPES.items()}


def dtype_name(dtype: Union[torch.dtype, str]) -> str:
    """distopt's name of a torch dtype ("float32", ...)."""
    if isinstance(dtype, str):
        if dtype in _FROM_NAME:
            return dtype
    elif dtype in _TORCH_DTYPES:
        return _TORCH_DTYPES[dtype]
    raise ValueError(
        f"dtype: {dtype}; expected torch.float32, torch.float16, "
        "torch.bfloat16 or torch.int64")


def torch_dtype(name: str) -> torch.dtype:
    return _FROM_NAME[name]


def to_wire(value: TensorLike, argument: str,
            dtype: Optional[str] = None,
            shape: Optional[Sequence[int]] = None) -> Tuple[np.ndarray, str]:
    """(buffer, dtype name) for the extension. Raises TypeError or ValueError
    naming `argument` for another type, device, dtype or shape than expected
    (`dtype` and `shape`, when given)."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError(
                f"{argument}: a tensor on {value.device}; expected a CPU tensor")
        if value.dtype not in _TORCH_DTYPES:
            raise ValueError(
                f"{argument}: dtype {value.dtype}; expected torch.float32, "
                "torch.float16, torch.bfloat16 or torch.int64")
        name = _TORCH_DTYPES[value.dtype]
        value = value.detach().contiguous()
        if value.dtype == torch.bfloat16:
            array = value.view(torch.int16).numpy()
        else:
            array = value.numpy()
    elif isinstance(value, np.ndarray):
        if value.dtype not in _NUMPY_DTYPES:
            raise ValueError(
                f"{argument}: dtype {value.dtype}; expected float32, float16 "
                "or int64 (bfloat16 as a torch tensor)")
        name = _NUMPY_DTYPES[value.dtype]
        # Not np.ascontiguousarray: it makes a 0-d array 1-d.
        array = value if value.flags.c_contiguous else value.copy(order="C")
    else:
        raise TypeError(
            f"{argument}: {type(value).__name__}; expected a torch.Tensor or "
            "a numpy.ndarray")
    if dtype is not None and name != dtype:
        raise ValueError(f"{argument}: dtype {name}; expected {dtype}")
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise ValueError(
            f"{argument}: shape {list(array.shape)}; expected {list(shape)}")
    return array, name


def from_wire(wire: Tuple[np.ndarray, str]) -> torch.Tensor:
    """A torch tensor over the extension's array (no copy)."""
    array, name = wire
    tensor = torch.from_numpy(array)
    if name == "bfloat16":
        tensor = tensor.view(torch.bfloat16)
    return tensor
