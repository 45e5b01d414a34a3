"""The kernel of the ozaki::gemm operator (schema in csrc/ozaki.cpp, registered in
ozaki/library.py): D = alpha * A @ B + beta * C with BLAS semantics, for real and complex
matrices (m, k) x (k, n) or batches (batch, m, k) x (batch, k, n); and run_gemm, the way the public
functions reach it.

The epilogue is D = RN(alpha * P) + RN(beta * C), evaluated in separate IEEE operations (never a
fused multiply-add), so it gives the same bits on every device and under torch.compile; alpha = 1
and beta = 1 are exact, alpha = 0 reads neither A nor B and beta = 0 never reads C (NaN in C does
not leak). Complex scalars act on the real and imaginary parts with real operations only, for the
same reason.
"""

import math
import numbers
import struct

import torch
import torch.autograd.forward_ad as fwAD

from . import replay
from .complex import complex_parts
from .operands import at_least, broadcast_shape, check_tensor
from .options import Options
from .product import check_operands, real_product
from .rounding import FORMATS, round_rational

REAL_OF = {torch.float64: torch.float64, torch.float32: torch.float32,
           torch.complex128: torch.float64, torch.complex64: torch.float32}


# The midpoint between float32's largest finite value and 2^128: from it on, rounding to float32
# gives infinity; float64's alike, as an int.
_FLOAT32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103
_FLOAT64_OVERFLOW = 2 ** 1024 - 2 ** 970


def traced_number(value):
    """Whether torch.compile is tracing and value is a Python number, which it may have made
    symbolic: it then reads as a plain float, and neither float32's rounding, math.isfinite nor
    complex() can be traced on it. The kernel checks and rounds each compiled call's value."""
    return torch.compiler.is_compiling() and type(value) in (int, float, complex)


def check_scalar(name, arg, value, dtype):
    """alpha and beta: real numbers (int, float, Fraction, NumPy's), or complex ones for complex
    operands; with float32 operands, none that is finite but rounds to +-Inf in float32. Returns
    the value as the Python float (complex for complex operands) that every path of ozaki::gemm
    takes: with float32 operands rounded to float32, as sgemm and torch's addmm take it, so that
    one that rounds to 0 is 0 (reading neither A and B, or C)."""
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        # traced by torch.compile as a symbolic number: the kernel checks (and rounds) the value
        # each compiled call passes
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        raise TypeError(f"{name}: {arg} must be a number, got {type(value).__name__} {value!r}")
    if not isinstance(value, numbers.Complex):  # Decimal: a Number of neither kind
        raise TypeError(f"{name}: {arg} must be a real or complex number, got "
                        f"{type(value).__name__} {value!r}")
    if not dtype.is_complex and not isinstance(value, numbers.Real):  # 2+0j would make D complex
        raise TypeError(f"{name}: {arg} = {value!r} is complex but the operands are {dtype}")
    if traced_number(value):
        if type(value) is int and not -2**63 <= value < 2**63:
            # past what the operator's Scalar holds: its float64 value (compared first, as the
            # traced float() raises its own error), or for float32 operands its one rounding to
            # float32, as eagerly (which the kernel's rounding then keeps)
            if abs(value) >= _FLOAT64_OVERFLOW:
                raise ValueError(f"{name}: {arg} = {value!r} is past the float64 range")
            if REAL_OF[dtype] == torch.float32:
                rounded = round_rational(value, 1, FORMATS[torch.float32])
                if math.isinf(rounded):
                    raise ValueError(f"{name}: {arg} = {value!r} rounds to infinity in float32, "
                                     "the operands' precision")
                return rounded
            value = float(value)
        return value
    converted = _converted(name, arg, value, dtype)
    if REAL_OF[dtype] == torch.float32:
        parts = (converted.real, converted.imag) if dtype.is_complex else (converted,)
        if isinstance(value, numbers.Integral):  # torch's Scalar holds an integer: one rounding
            rounded = [round_rational(int(value), 1, FORMATS[torch.float32]), 0.0][:len(parts)]
        else:
            rounded = [math.copysign(math.inf, p) if abs(p) >= _FLOAT32_OVERFLOW else _float32(p)
                       for p in parts]
        if any(math.isfinite(p) and math.isinf(r) for p, r in zip(parts, rounded)):
            raise ValueError(f"{name}: {arg} = {value!r} rounds to infinity in float32, the "
                             "operands' precision")
        converted = complex(*rounded) if dtype.is_complex else rounded[0]
    return converted


def _converted(name, arg, value, dtype):
    """value as a Python float (complex for complex operands); a finite value past the float64
    range (an int, a Fraction, NumPy's longdouble) is an error, never +-Inf."""
    try:
        converted = complex(value) if dtype.is_complex else float(value)
    except OverflowError:
        converted = None
    if converted is not None:
        parts = ((converted.real, value.real), (converted.imag, value.imag))
        if not any(math.isinf(p) and given == given and given != p for p, given in parts):
            return converted
    raise ValueError(f"{name}: {arg} = {value!r} is past the float64 range")


def nonzero(value, dtype):
    """Whether alpha or beta (as check_scalar returns it) is nonzero in the operands' precision:
    a value torch.compile traced is not rounded to float32 yet (the kernel rounds it), and one of
    at most 2^-150 in magnitude rounds to 0 there."""
    if REAL_OF[dtype] == torch.float32 and (traced_number(value)
                                            or isinstance(value, torch.SymFloat)):
        parts = (value.real, value.imag) if isinstance(value, complex) else (value,)
        return any(not abs(p) <= _FLOAT32_ZERO for p in parts)  # NaN is nonzero
    return value != 0


# The largest magnitude that rounds to 0 in float32: half the least subnormal (a tie, to even 0).
_FLOAT32_ZERO = 2.0 ** -150


def _float32(x):
    """x (a float64 value within float32's range, or +-Inf or NaN) rounded to float32, ties to
    even, as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def check_addend(name, C, dtype, device, shape):
    """C of D = alpha A B + beta C: a dense tensor of A's dtype and device, broadcastable to the
    result's shape."""
    if not isinstance(C, torch.Tensor):
        raise TypeError(f"{name}: C must be a torch.Tensor when beta != 0, got {type(C).__name__}")
    if C.dtype != dtype:
        raise TypeError(f"{name}: C must be {dtype} like A and B, got {C.dtype}")
    check_tensor(name, "C", C, (dtype,), at_least(0))  # a dense tensor
    if C.device != device:
        raise ValueError(f"{name}: C must be on {device} like A and B, got {C.device}")
    if broadcast_shape(tuple(C.shape), tuple(shape)) != tuple(shape):
        raise ValueError(f"{name}: C of shape {tuple(C.shape)} does not broadcast to the result's "
                         f"shape {tuple(shape)}")


def check_gemm(name, A, B, C, alpha, beta):
    """Everything ozaki::gemm needs of its tensors and scalars; returns the result's shape and
    alpha and beta as check_scalar gives them."""
    check_tensor(name, "A", A, REAL_OF, (2, 3))
    check_operands(name, A, B, A.dtype, ranks=(2, 3))
    alpha = check_scalar(name, "alpha", alpha, A.dtype)
    beta = check_scalar(name, "beta", beta, A.dtype)
    shape = (*A.shape[:-1], B.shape[-1])
    if nonzero(beta, A.dtype):
        check_addend(name, C, A.dtype, A.device, shape)
    return shape, alpha, beta


def _scale(x, s):
    """RN(s * x) for a real tensor and real s (exact and copy-free for s = 1)."""
    return x if s == 1 else torch.mul(x, s)


def _scale_parts(re, im, s):
    """(Re, Im) of s * (re + i im), one IEEE operation per step; s of zero imaginary part scales
    each part alone (docs/torch.md: no 0 * Inf from one part in the other)."""
    s = complex(s)
    if s.imag == 0:
        return _scale(re, s.real), _scale(im, s.real)
    return (torch.sub(_scale(re, s.real), torch.mul(im, s.imag)),
            torch.add(_scale(im, s.real), torch.mul(re, s.imag)))


def _parts(x):
    return (x.real, x.imag) if x.is_complex() else (x, None)


def gemm_kernel(A, B, C, alpha, beta, backend, slices, fast, moduli, rounding):
    name = "ozaki::gemm"
    shape, alpha, beta = check_gemm(name, A, B, C, alpha, beta)
    options = Options.checked(name, backend, slices, fast, moduli, rounding)
    return _checked_gemm(A, B, C, alpha, beta, options, shape)


def run_gemm(A, B, C, alpha, beta, options):
    """ozaki::gemm(A, B, C, alpha, beta, options) for arguments the caller has checked (as
    check_gemm and Options.checked do). Plain eager calls run the operator's kernel directly: the
    same bits, without the dispatcher's and the autograd wrapper's cost and the kernel's second
    check. The operator runs wherever anything may need to see it: autograd (an operand that
    requires grad, in grad mode), forward-mode AD, torch.compile, functorch transforms, tensor
    subclasses, torch function and dispatch modes (library.gemm_operator: inside an
    autograd.Function with a forward-mode formula where tangents must pass). Under the profiler
    the direct call is recorded as ozaki::gemm. A direct call of a repeated default product whose
    graph is kept is replayed first (ozaki/replay.py, quick_product: the same bits)."""
    if not _direct(A, B, C):
        from .library import gemm_operator  # library registers this module's kernel
        return gemm_operator(A, B, C, alpha, beta, *options.op_arguments())
    if C is None and alpha == 1:
        replayed = replay.quick_product(A, B, options)
        if replayed is not None:
            return replayed
    shape = (*A.shape[:-1], B.shape[-1])
    if torch._C._autograd._profiler_enabled():
        with torch.profiler.record_function("ozaki::gemm"):
            return _checked_gemm(A, B, C, alpha, beta, options, shape)
    return _checked_gemm(A, B, C, alpha, beta, options, shape)


def _direct(A, B, C):
    """Whether run_gemm may call the kernel without the operator (see run_gemm)."""
    tensors = (A, B) if C is None else (A, B, C)
    if any(type(t) is not torch.Tensor for t in tensors):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    if fwAD._current_level >= 0:  # dual tensors may carry tangents
        return False
    return not (torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled()
                or torch._C._len_torch_dispatch_stack() > 0
                or torch._C._functorch.peek_interpreter_stack() is not None)


def _checked_gemm(A, B, C, alpha, beta, options, shape):
    """gemm_kernel's work once its arguments are checked; shape: the result's."""
    complex_result = A.dtype.is_complex
    real_dtype = REAL_OF[A.dtype]

    terms = []  # (Re, Im) pairs, Im None for real operands
    # k = 0: no product term, as BLAS (alpha is not applied to the empty sum, so alpha = Inf or NaN
    # gives no NaN, and D = RN(beta C) keeps its -0.0 entries)
    product_term = alpha != 0 and A.shape[-1] != 0
    if product_term:
        if complex_result:
            re, im, _ = complex_parts(A, B, options)
            terms.append(_scale_parts(re, im, alpha))
        else:
            P, _ = real_product(A, B, real_dtype, options)
            terms.append((_scale(P, alpha), None))
    if beta != 0:
        re, im = _parts(C)
        terms.append(_scale_parts(re, im, beta) if complex_result else (_scale(re, beta), None))

    if not terms:
        return torch.zeros(shape, dtype=A.dtype, device=A.device)
    if len(terms) == 2:
        (r0, i0), (r1, i1) = terms
        re, im = torch.add(r0, r1), (torch.add(i0, i1) if complex_result else None)
    else:
        (re, im), = terms
    result = torch.complex(re, im) if complex_result else re
    # A fresh, contiguous tensor of the result's shape: never C itself, nor a broadcast view of it.
    if result.shape != shape:
        result = result.expand(shape)
    if (C is not None and result.data_ptr() == C.data_ptr()) or not result.is_contiguous():
        result = result.clone(memory_format=torch.contiguous_format)
    # the epilogue's torch operations ran: a sum, or a scaling by other than 1
    scaled = alpha != 1 if product_term else beta != 1
    if real_dtype == torch.float32 and (len(terms) == 2 or scaled):
        _canonical_float32_nans(result)
    return result


#: The NaN of ozaki's float32 results (the kernels' and the CPU's quiet NaN).
_FLOAT32_NAN_BITS = 0x7FC00000


def _canonical_float32_nans(result):
    """Every NaN of a float32 (complex64) result made by the epilogue's torch operations set to
    _FLOAT32_NAN_BITS, in place: torch's float32 arithmetic returns another NaN on CUDA
    (0x7fffffff) than on the CPU (the operand's, payload kept), and the bits are the same on every
    device. The fill is of integers, exact everywhere."""
    values = torch.view_as_real(result) if result.is_complex() else result
    values.view(torch.int32).masked_fill_(values.isnan(), _FLOAT32_NAN_BITS)
