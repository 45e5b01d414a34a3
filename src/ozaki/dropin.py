"""ozaki.enable: a drop-in mode that sends torch's matrix products through ozaki (docs/torch.md,
"Drop-in mode"). A torch function mode, so it is scoped, nestable and traced by torch.compile."""

import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .blas import gemm
from .gemm_op import REAL_OF
from .matmul import matmul
from .options import Options


def _operands(mode, *tensors):
    """Whether ozaki takes these operands: dense tensors of one of the mode's dtypes, one device
    (sparse and nested ones stay with torch)."""
    first = tensors[0]
    return all(isinstance(t, torch.Tensor) and t.dtype == first.dtype and t.device == first.device
               and t.layout == torch.strided for t in tensors) \
        and first.dtype in mode.dtypes and first.device.type in ("cpu", "cuda")


def _broadcasts(shape, target):
    """Whether shape broadcasts to target (torch's rule), without raising."""
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


def _matmul(mode, a, b, out=None):
    if not _operands(mode, a, b) or a.dim() == 0 or b.dim() == 0:
        return NotImplemented
    inner_b = b.shape[0] if b.dim() == 1 else b.shape[-2]
    try:
        torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        return NotImplemented
    if a.shape[-1] != inner_b:
        return NotImplemented
    return matmul(a, b, out=out, **mode.options.keywords())


def _rmatmul(mode, b, a):
    return _matmul(mode, a, b)


def _mm(mode, a, b, out=None):
    if not _operands(mode, a, b) or a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        return NotImplemented  # torch raises its own error for bad shapes
    return gemm(a, b, out=out, **mode.options.keywords())


def _bmm(mode, a, b, out=None):
    if (not _operands(mode, a, b) or a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]
            or a.shape[2] != b.shape[1]):
        return NotImplemented
    return gemm(a, b, out=out, **mode.options.keywords())


def _addmm(mode, c, a, b, *, beta=1, alpha=1, out=None):
    if (not _operands(mode, c, a, b) or a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]
            or not _broadcasts(c.shape, (a.shape[0], b.shape[1]))):
        return NotImplemented
    return gemm(a, b, c, alpha=alpha, beta=beta, out=out, **mode.options.keywords())


def _linear(mode, x, weight, bias=None):
    tensors = (x, weight) if bias is None else (x, weight, bias)
    if (not _operands(mode, *tensors) or x.dim() == 0 or weight.dim() != 2
            or x.shape[-1] != weight.shape[1]
            or (bias is not None and not _broadcasts(bias.shape, (weight.shape[0],)))):
        return NotImplemented
    rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    y = gemm(rows, weight, bias, beta=0 if bias is None else 1, transb=True, **mode.options.keywords())
    return y.reshape(*x.shape[:-1], weight.shape[0])


_HANDLERS = {
    torch.matmul: _matmul, torch.Tensor.matmul: _matmul, torch.Tensor.__matmul__: _matmul,
    torch.Tensor.__rmatmul__: _rmatmul,
    torch.mm: _mm, torch.Tensor.mm: _mm,
    torch.bmm: _bmm, torch.Tensor.bmm: _bmm,
    torch.addmm: _addmm, torch.Tensor.addmm: _addmm,
    F.linear: _linear,
}


class OzakiMode(TorchFunctionMode):
    """The mode object ozaki.enable returns; use it in a with statement."""

    def __init__(self, dtypes, options):
        super().__init__()
        self.dtypes = dtypes
        self.options = options

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _HANDLERS.get(func)
        if handler is not None:
            result = handler(self, *args, **kwargs)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)

    def __repr__(self):
        dtypes = ", ".join(str(d) for d in self.dtypes)
        options = "".join(f", {key}={value!r}" for key, value in self.options.keywords().items())
        return f"ozaki.enable(dtypes=({dtypes},){options})"


def enable(dtypes=(torch.float64,), *, backend="auto", slices=None, fast=None, moduli=None,
           rounding=None):
    """Within `with ozaki.enable(...):`, torch.matmul, @, mm, bmm, addmm and
    torch.nn.functional.linear (so nn.Linear) on tensors of `dtypes` run through ozaki with the
    given options (ozaki.dgemm's); other dtypes, devices and functions stay plain torch, and
    leaving the block restores plain torch.

    Nestable: the innermost mode that takes a dtype handles it; a call it does not take goes on
    to the enclosing modes. Under torch.compile, a mode entered around the compiled call is traced
    into the graph: the products become ozaki::gemm nodes with the same bits as in eager mode
    (docs/torch.md, "Drop-in mode").
    """
    name = "ozaki.enable"
    if isinstance(dtypes, torch.dtype):
        dtypes = (dtypes,)
    if not isinstance(dtypes, (tuple, list, set, frozenset)) or not dtypes:
        raise TypeError(f"ozaki.enable: dtypes must be a non-empty tuple of dtypes, got {dtypes!r}")
    for dtype in dtypes:
        if dtype not in REAL_OF:
            raise ValueError(f"{name}: dtypes may hold {', '.join(map(str, REAL_OF))}; got {dtype!r}")
    return OzakiMode(tuple(dtypes), Options.checked(name, backend, slices, fast, moduli, rounding))
