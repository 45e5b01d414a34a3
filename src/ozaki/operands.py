"""The one check of tensor arguments, shared by every public function: each message names the
function, the argument and the value received, in the same words everywhere."""

import torch
import torch.distributed as dist

from . import _ops

FLOATS = (torch.float64, torch.float32)


class InnerDimensionError(ValueError):
    """A limit of the product's inner dimension k that the options or k itself exceed, with k named
    in the message. Where the product is not the caller's own (a complex product runs as one real
    product of inner dimension 2k, ozaki/complex.py; a gradient's inner dimension is n or m,
    ozaki/library.py), the message is extended with what the caller passed."""


def at_least(rank):
    """Dimension counts from rank up (for check_tensor's ranks)."""
    return range(rank, 64)


def _listed(words):
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _ranks_wanted(ranks):
    if isinstance(ranks, range) and len(ranks) > 2:
        return f"at least {ranks.start}-D"
    return _listed([f"{rank}-D" for rank in ranks])


def is_dtensor(x) -> bool:
    """Whether x is a torch.distributed DTensor (a sharded tensor, docs/distributed.md)."""
    if type(x) is torch.Tensor or not isinstance(x, torch.Tensor) or not dist.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(x, DTensor)


def check_tensor(func, arg, value, dtypes=FLOATS, ranks=(2,), *, hint="", finite=False):
    """value is a torch.Tensor of one of dtypes whose number of dimensions is in ranks (and only
    finite entries when finite), not a DTensor (those go to the functions that take them before
    any check). hint is appended to the dtype message. Returns value."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{func}: {arg} must be a torch.Tensor, got {type(value).__name__}")
    if is_dtensor(value):
        raise TypeError(f"{func}: {arg} is a DTensor; DTensor operands are taken by ozaki.matmul, "
                        "ozaki.dgemm and ozaki.sgemm (docs/distributed.md)")
    if value.layout != torch.strided:  # sparse, jagged or MKL-DNN: no entries to read in place
        raise TypeError(f"{func}: {arg} must be a dense (strided) tensor, got layout "
                        f"{value.layout} ({arg}.to_dense() gives one)")
    if value.is_nested:  # a nested tensor of the strided layout: no one shape to multiply
        raise TypeError(f"{func}: {arg} must be a dense (strided) tensor, got a nested tensor "
                        f"({arg}.to_padded_tensor(0) gives one)")
    if value.dtype not in dtypes:
        raise TypeError(f"{func}: {arg} must be {_listed([str(d) for d in dtypes])}, got "
                        f"{value.dtype}{hint}")
    if value.dim() not in ranks:
        raise ValueError(f"{func}: {arg} must be {_ranks_wanted(ranks)}, got {value.dim()}-D with "
                         f"shape {tuple(value.shape)}")
    if finite and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{func}: {arg} must contain only finite values (found inf or NaN)")
    return value


def check_alike(func, names, a, b):
    """Two tensors of one dtype on one device; names are theirs as the user passed them."""
    first, second = names
    if a.dtype != b.dtype:
        raise TypeError(f"{func}: {first} and {second} must have the same dtype, got {a.dtype} "
                        f"and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"{func}: {first} and {second} must be on the same device, got "
                         f"{a.device} and {b.device}")


def check_device(name, device):
    """The operands' device: the CPU, or a CUDA device where this build has the CUDA backend."""
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: device must be cpu or cuda, got {device}")
    if device.type == "cuda" and not _ops.CUDA_BUILT:
        raise RuntimeError(f"{name}: the inputs are on {device} but this ozaki build has no CUDA "
                           "backend (rebuild with torch's CUDA build and nvcc, OZAKI_FORCE_CUDA=1)")


def broadcast_shape(first, second):
    """torch's broadcast of two shapes, or None where they do not broadcast: in plain Python, so
    that torch.compile traces it (torch.broadcast_shapes raises its own error on traced shapes,
    before the caller could name the arguments)."""
    shape = []
    for index in range(1, max(len(first), len(second)) + 1):
        x = first[-index] if index <= len(first) else 1
        y = second[-index] if index <= len(second) else 1
        if x != y and x != 1 and y != 1:
            return None
        shape.append(y if x == 1 else x)
    return tuple(reversed(shape))
