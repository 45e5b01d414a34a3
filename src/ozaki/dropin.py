"""ozaki.enable: a drop-in mode that sends torch's matrix products through ozaki (docs/torch.md,
"Drop-in mode"). A torch function mode, so it is scoped, nestable and traced by torch.compile.
Each handler returns NotImplemented for a call it does not take (another dtype or device, a
shape or argument torch rejects, a form ozaki has no counterpart of), which torch then runs."""

import functools
import math
import numbers
import sys

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import contractions, fixed_counts
from .blas import gemm
from .contractions import einsum, tensordot
from .gemm_op import REAL_OF, traced_number
from .matmul import matmul
from .operands import is_dtensor
from .options import Options


def _operands(mode, *tensors):
    """Whether ozaki takes these operands: dense tensors of one of the mode's dtypes, one device
    (sparse and nested ones stay with torch, and so do DTensors: docs/distributed.md), and not
    float32 ones under torch.autocast on their device, whose precision autocast sets."""
    first = tensors[0]
    return all(isinstance(t, torch.Tensor) and t.dtype == first.dtype and t.device == first.device
               and t.layout == torch.strided and not t.is_nested and not is_dtensor(t)
               for t in tensors) \
        and first.dtype in mode.dtypes and first.device.type in ("cpu", "cuda") \
        and not (first.dtype == torch.float32 and torch.is_autocast_enabled(first.device.type))


def _broadcasts(shape, target):
    """Whether shape broadcasts to target (torch's rule), without raising."""
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


_FLOAT32_MAX = torch.finfo(torch.float32).max


def _scalar(value, dtype):
    """alpha or beta as torch's Scalar reads it (a bool as 0 or 1, a 0-d tensor as its value, a
    complex of zero imaginary part as a real for real operands); NotImplemented for what ozaki
    cannot take the same way, and for what torch refuses: integers outside [-2^63, 2^64), finite
    values past the float32 range with float32 operands."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        value = value.item()  # NumPy's scalars (np.True_, np.complex64(2)) as Python's numbers
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 and value.numel() != 1:
            return NotImplemented
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -2**63 <= value < 2**64:
        return NotImplemented  # torch raises OverflowError converting it
    if isinstance(value, complex) and not dtype.is_complex:
        if value.imag != 0:
            return NotImplemented
        value = value.real
    if traced_number(value):
        return value
    if dtype in (torch.float32, torch.complex64):
        parts = (value.real, value.imag) if isinstance(value, complex) else (value,)
        try:
            if any(math.isfinite(p) and abs(p) > _FLOAT32_MAX for p in map(float, parts)):
                return NotImplemented
        except (TypeError, OverflowError):
            return NotImplemented
    return value


def _takes_out(out, *operands):
    """Whether ozaki writes out= (None, or a tensor of the operands' dtype and device, neither it
    nor the operands requiring grad in grad mode; the rest is torch's to refuse)."""
    if out is None:
        return True
    like = operands[0]
    return (isinstance(out, torch.Tensor) and out.dtype == like.dtype and out.device == like.device
            and not (torch.is_grad_enabled()
                     and any(t.requires_grad for t in (out, *operands))))


def _written(result, out, resize_warns=True):
    """out= as torch writes it: resized to the result's shape (with a warning at the caller's line
    where it held entries and torch warns: all but addbmm), then filled."""
    if out is None:
        return result
    if out.shape != result.shape:
        if out.numel() != 0 and resize_warns:
            fixed_counts.warn(f"ozaki.enable: out of shape {list(out.shape)} held entries and "
                              f"was resized to the result's shape {list(result.shape)}, as torch "
                              "resizes it (torch deprecates this; resize out to zero elements "
                              "first to write it silently)", UserWarning)
        out.resize_(result.shape)
    return out.copy_(result)


def _in_place(target, result):
    """target.op_(...): result written into target, which must have the result's shape (torch
    raises otherwise)."""
    if result is NotImplemented or target.shape != result.shape:
        return NotImplemented
    return target.copy_(result)


def _matmul(mode, a, b, *extra, out=None, **unknown):
    if (extra or unknown or not _operands(mode, a, b) or not _takes_out(out, a, b) or a.dim() == 0
            or b.dim() == 0):
        return NotImplemented
    inner_b = b.shape[0] if b.dim() == 1 else b.shape[-2]
    if a.shape[-1] != inner_b or not _broadcasts_together(a.shape[:-2], b.shape[:-2]):
        return NotImplemented
    return _written(matmul(a, b, **mode.options.keywords()), out)


def _broadcasts_together(first, second):
    try:
        torch.broadcast_shapes(first, second)
    except RuntimeError:
        return False
    return True


def _rmatmul(mode, b, a):
    return _matmul(mode, a, b)


def _mm(mode, a, b, *extra, out=None, **unknown):
    if (extra or unknown or not _operands(mode, a, b) or not _takes_out(out, a, b) or a.dim() != 2
            or b.dim() != 2 or a.shape[1] != b.shape[0]):
        return NotImplemented  # torch raises its own error for bad shapes
    return _written(gemm(a, b, **mode.options.keywords()), out)


def _bmm(mode, a, b, *extra, out=None, **unknown):
    if (extra or unknown or not _operands(mode, a, b) or not _takes_out(out, a, b) or a.dim() != 3
            or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]):
        return NotImplemented
    return _written(gemm(a, b, **mode.options.keywords()), out)


def _scaled_arguments(args, kwargs, method):
    """(input, first, second, beta, alpha, out) of addmm, addmv, baddbmm and addbmm in all torch's
    calling forms: op(input, first, second, *, beta, alpha, out) and the deprecated ones with
    leading scalars, op(beta, input, [alpha,] first, second) and input.op(beta, [alpha,] first,
    second); None for others. method: called as Tensor.op (input is args[0])."""
    if set(kwargs) - {"beta", "alpha", "out"}:
        return None
    args = list(args)
    if not method and len(args) > 1 and not isinstance(args[0], torch.Tensor):
        args[0], args[1] = args[1], args[0]  # the deprecated op(beta, input, ...)
    target, rest = args[0], args[1:]
    scalars = []
    while rest and not isinstance(rest[0], torch.Tensor):
        scalars.append(rest.pop(0))
    if (not isinstance(target, torch.Tensor) or len(rest) != 2 or len(scalars) > 2
            or (scalars and ("beta" in kwargs or "alpha" in kwargs))):
        return None
    beta = scalars[0] if scalars else kwargs.get("beta", 1)
    alpha = scalars[1] if len(scalars) > 1 else kwargs.get("alpha", 1)
    return target, rest[0], rest[1], beta, alpha, kwargs.get("out")


def _scaled(fits, product, resize_warns=True):
    """The handler of an op(input, first, second, *, beta, alpha, out) in all its calling forms
    (_scaled_arguments): fits(input, first, second) says whether torch takes the shapes, and
    product(input, first, second, alpha, beta, options) is beta input + alpha (first op second)
    by ozaki. resize_warns: whether torch warns as it resizes an out= that held entries."""
    def handler(mode, *args, **kwargs):
        arguments = _scaled_arguments(args, kwargs, method=False)
        if arguments is None:
            return NotImplemented
        c, a, b, beta, alpha, out = arguments
        if not _operands(mode, c, a, b) or not fits(c, a, b) or not _takes_out(out, a, b, c):
            return NotImplemented
        alpha, beta = _scalar(alpha, a.dtype), _scalar(beta, a.dtype)
        if alpha is NotImplemented or beta is NotImplemented:
            return NotImplemented
        return _written(product(c, a, b, alpha, beta, mode.options.keywords()), out, resize_warns)
    return handler


def _gemm_with_addend(c, a, b, alpha, beta, options):
    return gemm(a, b, c, alpha=alpha, beta=beta, **options)


def _addbmm_product(c, a, b, alpha, beta, options):
    """beta c + alpha sum_i a[i] b[i]: one product over the batch's inner dimensions together,
    (m, batch k) x (batch k, n)."""
    batch, m, k = a.shape
    rows = a.permute(1, 0, 2).reshape(m, batch * k)
    columns = b.reshape(batch * k, b.shape[2])
    return gemm(rows, columns, c, alpha=alpha, beta=beta, **options)


def _addmv_product(c, a, v, alpha, beta, options):
    addend = c.reshape(*c.shape, 1) if c.dim() else c
    return gemm(a, v.unsqueeze(1), addend, alpha=alpha, beta=beta, **options).squeeze(1)


_addmm = _scaled(lambda c, a, b: a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0]
                 and _broadcasts(c.shape, (a.shape[0], b.shape[1])), _gemm_with_addend)
_baddbmm = _scaled(lambda c, a, b: a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0]
                   and a.shape[2] == b.shape[1]
                   and _broadcasts(c.shape, (a.shape[0], a.shape[1], b.shape[2])),
                   _gemm_with_addend)
_addbmm = _scaled(lambda c, a, b: a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0]
                  and a.shape[2] == b.shape[1]
                  and _broadcasts(c.shape, (a.shape[1], b.shape[2])), _addbmm_product,
                  resize_warns=False)
_addmv = _scaled(lambda c, a, v: a.dim() == 2 and v.dim() == 1 and a.shape[1] == v.shape[0]
                 and _broadcasts(c.shape, (a.shape[0],)), _addmv_product)


def _in_place_of(handler):
    """Tensor.op_ of an add handler: the result of input.op(...) written into input."""
    def in_place(mode, target, *args, **kwargs):
        if "out" in kwargs:
            return NotImplemented
        arguments = _scaled_arguments((target, *args), kwargs, method=True)
        if arguments is None:
            return NotImplemented
        _, first, second, beta, alpha, _ = arguments
        return _in_place(target, handler(mode, target, first, second, beta=beta, alpha=alpha))
    return in_place


def _method(handler):
    """Tensor.op of an add handler: input first, then the deprecated scalars or the operands."""
    def method(mode, target, *args, **kwargs):
        arguments = _scaled_arguments((target, *args), kwargs, method=True)
        if arguments is None:
            return NotImplemented
        _, first, second, beta, alpha, out = arguments
        return handler(mode, target, first, second, beta=beta, alpha=alpha, out=out)
    return method


def _mv(mode, a, v, *extra, out=None, **unknown):
    if (extra or unknown or not _operands(mode, a, v) or not _takes_out(out, a, v) or a.dim() != 2
            or v.dim() != 1 or a.shape[1] != v.shape[0]):
        return NotImplemented
    return _written(matmul(a, v, **mode.options.keywords()), out)


def _dot(mode, a, b, *extra, out=None, conjugate=False, **unknown):
    if (extra or unknown or not _operands(mode, a, b) or not _takes_out(out, a, b) or a.dim() != 1
            or b.dim() != 1 or a.shape != b.shape):
        return NotImplemented
    return _written(matmul(a.conj() if conjugate else a, b, **mode.options.keywords()), out)


def _vdot(mode, a, b, *extra, out=None, **unknown):
    if extra or unknown:
        return NotImplemented
    return _dot(mode, a, b, out=out, conjugate=True)


def _inner(mode, a, b, *extra, out=None, **unknown):
    if (extra or unknown or not _operands(mode, a, b) or not _takes_out(out, a, b) or a.dim() == 0
            or b.dim() == 0 or a.shape[-1] != b.shape[-1]):
        return NotImplemented  # a 0-d operand makes inner a plain multiplication
    return _written(tensordot(a, b, ([a.dim() - 1], [b.dim() - 1]),
                              **mode.options.keywords()), out)


def _tensordot(mode, a, b, dims=2, out=None, *extra, **unknown):
    if extra or unknown or not _operands(mode, a, b) or not _takes_out(out, a, b):
        return NotImplemented
    if isinstance(dims, numbers.Integral) and not isinstance(dims, int):
        return NotImplemented  # torch refuses NumPy integers
    try:
        contractions.tensordot_dims("torch.tensordot", a, b, dims)
    except (TypeError, ValueError):
        return NotImplemented  # torch raises its own error
    return _written(tensordot(a, b, dims, **mode.options.keywords()), out)


def _einsum(mode, *args, **unknown):
    if unknown:
        return NotImplemented
    try:
        equation, operands = contractions.einsum_arguments("torch.einsum", args)
        labels, out = contractions.parse_equation("torch.einsum", equation, operands)
    except (TypeError, ValueError, AttributeError):
        return NotImplemented  # torch raises its own error
    if not operands or not _operands(mode, *operands):
        return NotImplemented
    try:
        contractions.check_sizes("torch.einsum", equation, labels, operands)
    except ValueError:
        return NotImplemented
    if len(operands) == 1 and set(labels[0]) == set(out):
        return NotImplemented  # a permutation or a diagonal: no arithmetic
    return einsum(equation, *operands, **mode.options.keywords())


def _chain_order(shapes):
    """split[i][j]: where the cheapest association of matrices i..j (shapes (rows, columns)) splits
    it, by multiply-adds, as torch's multi_dot splits it: ties go to the earliest split, except
    that a chain of three matrices goes (AB)C unless A(BC) is strictly cheaper."""
    count = len(shapes)
    cost = [[0] * count for _ in range(count)]
    split = [[0] * count for _ in range(count)]
    for length in range(2, count + 1):
        for i in range(count - length + 1):
            j = i + length - 1
            best = None
            for s in range(i, j):
                c = cost[i][s] + cost[s + 1][j] + shapes[i][0] * shapes[s][1] * shapes[j][1]
                if best is None or c < best:
                    best, split[i][j] = c, s
            cost[i][j] = best
    if count == 3:
        (a, b), (_, c), (_, d) = shapes
        split[0][2] = 0 if a * c * (b + d) > b * d * (a + c) else 1
    return split


def _multi_dot(mode, tensors, *extra, out=None, **unknown):
    """torch.linalg.multi_dot: the chain multiplied in its cheapest association, each step an
    ozaki product (a 1-D first or last operand is a row or a column vector)."""
    if (extra or unknown or not isinstance(tensors, (list, tuple)) or len(tensors) < 2
            or not _operands(mode, *tensors) or not _takes_out(out, *tensors)):
        return NotImplemented
    first, last = tensors[0].dim() == 1, tensors[-1].dim() == 1
    matrices = [tensors[0].unsqueeze(0) if first else tensors[0], *tensors[1:-1],
                tensors[-1].unsqueeze(1) if last else tensors[-1]]
    if any(t.dim() != 2 for t in matrices) or any(
            left.shape[1] != right.shape[0] for left, right in zip(matrices, matrices[1:])):
        return NotImplemented
    split = _chain_order([tuple(t.shape) for t in matrices])
    options = mode.options.keywords()

    def product(i, j):
        if i == j:
            return matrices[i]
        s = split[i][j]
        return gemm(product(i, s), product(s + 1, j), **options)
    result = product(0, len(matrices) - 1)
    if first:
        result = result.squeeze(0)
    if last:
        result = result.squeeze(-1)
    return _written(result, out)


def _chain_matmul(mode, *matrices, out=None, **unknown):
    """torch.chain_matmul: multi_dot of matrices only. torch's chain_matmul hands function modes its
    matrices without its out=, so out is read from that call's frame, to be written as torch
    would; a call ozaki does not take goes back to torch with it (torch's fallback would drop it)."""
    if out is None:
        out = _chain_matmul_out()
    result = NotImplemented
    if all(isinstance(t, torch.Tensor) and t.dim() == 2 for t in matrices):
        result = _multi_dot(mode, list(matrices), out=out, **unknown)
    if result is NotImplemented and out is not None and not unknown:
        return torch.chain_matmul(*matrices, out=out)  # this mode is off inside its handlers
    global _chain_matmul_warned
    if (result is not NotImplemented and not _chain_matmul_warned
            and not torch.compiler.is_compiling()):  # compiled code cannot warn
        _chain_matmul_warned = True  # once per process, as torch warns
        fixed_counts.warn("torch.chain_matmul is deprecated and will be removed in a future "
                          "PyTorch release. Use torch.linalg.multi_dot instead.", UserWarning)
    return result


# Whether the mode gave torch.chain_matmul's deprecation warning, which torch gives in the code the
# mode replaces (torch's deprecated overloads of addmm and the others warn before the mode runs).
_chain_matmul_warned = False


def _chain_matmul_out():
    """out= of the torch.chain_matmul call that reached the mode: a local of its frame, a few
    frames up (torch.overrides.handle_torch_function, the mode, this handler); None if not found,
    and None while torch.compile traces (its traced chain_matmul drops out= too)."""
    if torch.compiler.is_compiling():
        return None
    code = getattr(torch.functional.chain_matmul, "__code__", None)
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            return None
        if frame.f_code is code:
            return frame.f_locals.get("out")
        frame = frame.f_back
    return None


def _vecdot(mode, x, y, *extra, dim=-1, out=None, **unknown):
    """torch.linalg.vecdot: sum over dimension dim of x and y broadcast together of conj(x) y, one
    ozaki product per vector pair."""
    if (extra or unknown or not _operands(mode, x, y) or not _takes_out(out, x, y) or x.dim() == 0
            or y.dim() == 0 or isinstance(dim, bool) or not isinstance(dim, int)
            or not _broadcasts_together(x.shape, y.shape)):
        return NotImplemented
    rank = max(x.dim(), y.dim())
    if not -rank <= dim < rank:
        return NotImplemented
    # both of the broadcast rank (leading dimensions of size 1), so dim names the same dimension
    x, y = (t.reshape((1,) * (rank - t.dim()) + tuple(t.shape)) for t in (x, y))
    result = einsum("...i,...i->...", x.movedim(dim, -1).conj(), y.movedim(dim, -1),
                    **mode.options.keywords())
    return _written(result, out)


def _linear_takes(x, weight, bias):
    """Whether torch's F.linear takes these operands' shapes and strides: where x has more than
    two dimensions, torch (by version, and by x's and bias's strides) may add bias in a product of
    x's rows flattened, which refuses biases of some shapes the result would broadcast; tried on
    meta tensors of the same shapes and strides, once per layout."""
    if x.dim() <= 2:
        return True
    layouts = tuple((tuple(t.shape), t.stride(), t.dtype) for t in (x, weight, bias))
    try:
        hash(layouts)
    except TypeError:  # symbolic sizes: tried afresh
        return _linear_takes_layouts.__wrapped__(layouts)
    return _linear_takes_layouts(layouts)


@functools.lru_cache(maxsize=256)
def _linear_takes_layouts(layouts):
    """_linear_takes of operands of these (shape, strides, dtype)."""
    try:
        F.linear(*(torch.empty_strided(shape, stride, dtype=dtype, device="meta")
                   for shape, stride, dtype in layouts))
    except RuntimeError:
        return False
    return True


def _linear(mode, x, weight, bias=None, *extra, **unknown):
    if extra or unknown:
        return NotImplemented
    tensors = (x, weight) if bias is None else (x, weight, bias)
    if not _operands(mode, *tensors) or x.dim() == 0 or weight.dim() not in (1, 2) \
            or x.shape[-1] != weight.shape[-1]:
        return NotImplemented
    if weight.dim() == 1 and x.dim() == 2 and bias is not None:
        return NotImplemented  # torch's addmm path, which refuses a 1-D weight
    shape = (*x.shape[:-1], weight.shape[0]) if weight.dim() == 2 else x.shape[:-1]
    if bias is not None and not (_broadcasts(bias.shape, shape) and _linear_takes(x, weight, bias)):
        return NotImplemented
    options = mode.options.keywords()
    if weight.dim() == 1 and bias is None:  # y = x w: a product with one column
        return matmul(x, weight, **options)
    rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    columns = weight.reshape(-1, weight.shape[-1])
    if bias is not None and not _broadcasts(bias.shape, (columns.shape[0],)):
        # a bias of the output's shape, laid out as the product's rows: RN(P + bias) in the
        # epilogue, whose NaNs are those of every other ozaki result
        bias = bias.expand(shape).reshape(rows.shape[0], columns.shape[0])
    y = gemm(rows, columns, bias, beta=0 if bias is None else 1, transb=True, **options)
    return y.reshape(shape)


_HANDLERS = {
    torch.matmul: _matmul, torch.Tensor.matmul: _matmul, torch.Tensor.__matmul__: _matmul,
    torch.Tensor.__rmatmul__: _rmatmul, torch.linalg.matmul: _matmul,
    torch.mm: _mm, torch.Tensor.mm: _mm,
    torch.bmm: _bmm, torch.Tensor.bmm: _bmm,
    torch.addmm: _addmm, torch.Tensor.addmm: _method(_addmm),
    torch.Tensor.addmm_: _in_place_of(_addmm),
    torch.baddbmm: _baddbmm, torch.Tensor.baddbmm: _method(_baddbmm),
    torch.Tensor.baddbmm_: _in_place_of(_baddbmm),
    torch.addbmm: _addbmm, torch.Tensor.addbmm: _method(_addbmm),
    torch.Tensor.addbmm_: _in_place_of(_addbmm),
    torch.addmv: _addmv, torch.Tensor.addmv: _method(_addmv),
    torch.Tensor.addmv_: _in_place_of(_addmv),
    torch.mv: _mv, torch.Tensor.mv: _mv,
    torch.dot: _dot, torch.Tensor.dot: _dot, torch.vdot: _vdot, torch.Tensor.vdot: _vdot,
    torch.inner: _inner, torch.Tensor.inner: _inner,
    torch.tensordot: _tensordot, torch.einsum: _einsum,
    torch.linalg.multi_dot: _multi_dot, torch.chain_matmul: _chain_matmul,
    torch.linalg.vecdot: _vecdot,
    F.linear: _linear,
}


# torch's names of the tensor parameters the handlers take by position (a Tensor method's self is
# the first): a call that names them, torch.mm(input=a, mat2=b), is handled as the positional one.
_MATRICES = ("input", "mat2")
_ADDED = {torch.addmm: ("input", "mat1", "mat2"), torch.addmv: ("input", "mat", "vec"),
          torch.baddbmm: ("input", "batch1", "batch2"), torch.addbmm: ("input", "batch1", "batch2")}
_PARAMETERS = {
    torch.matmul: ("input", "other"), torch.Tensor.matmul: ("input", "other"),
    torch.linalg.matmul: ("input", "other"),
    torch.mm: _MATRICES, torch.Tensor.mm: _MATRICES, torch.bmm: _MATRICES,
    torch.Tensor.bmm: _MATRICES,
    torch.mv: ("input", "vec"), torch.Tensor.mv: ("input", "vec"),
    torch.dot: ("input", "tensor"), torch.Tensor.dot: ("input", "tensor"),
    torch.vdot: ("input", "other"), torch.Tensor.vdot: ("input", "other"),
    torch.inner: ("input", "other"), torch.Tensor.inner: ("input", "other"),
    torch.linalg.vecdot: ("x", "y"), F.linear: ("input", "weight", "bias"),
    torch.linalg.multi_dot: ("tensors",), torch.tensordot: ("a", "b"),
    **_ADDED,
    **{getattr(torch.Tensor, f.__name__ + suffix): names for f, names in _ADDED.items()
       for suffix in ("", "_")},
}


def _positional(func, args, kwargs):
    """(args, kwargs) with the tensor parameters of func that kwargs names moved into args, in
    order, as far as they follow the positional ones."""
    names = _PARAMETERS.get(func, ())
    if not kwargs or len(args) >= len(names):
        return args, kwargs
    args, kwargs = list(args), dict(kwargs)
    for name in names[len(args):]:
        if name not in kwargs:
            break
        args.append(kwargs.pop(name))
    return tuple(args), kwargs


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
            positional, named = _positional(func, args, kwargs)
            result = handler(self, *positional, **named)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)

    def __repr__(self):
        dtypes = ", ".join(str(d) for d in self.dtypes)
        options = "".join(f", {key}={value!r}" for key, value in self.options.keywords().items())
        return f"ozaki.enable(dtypes=({dtypes},){options})"


def enable(dtypes=(torch.float64,), *, backend="auto", slices=None, fast=None, moduli=None,
           rounding=None):
    """Within `with ozaki.enable(...):`, torch's products (matmul, @, linalg.matmul, mm, bmm, mv,
    dot, vdot, inner, addmm, baddbmm, addmv, addbmm and their in-place forms, tensordot, einsum,
    linalg.vecdot, linalg.multi_dot, chain_matmul and torch.nn.functional.linear, so nn.Linear;
    docs/torch.md lists them) on tensors of `dtypes`
    run through ozaki with the given options (ozaki.dgemm's); other dtypes, devices and functions
    stay plain torch, and leaving the block restores plain torch.

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
