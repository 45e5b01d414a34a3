"""Exact references and accuracy metrics for the Ozaki-scheme matrix products.

The Ozaki scheme promises FP64/FP32 matrix products that are (nearly)
correctly rounded, so its tests and accuracy studies need something better
than another floating-point product to compare against.  This module provides:

* exact references -- :func:`exact_matmul` returns the mathematically exact
  products ``sum_l A[i, l] * B[l, j]`` as :class:`fractions.Fraction` objects,
  computed either with Python integers (``method="int"``, the fast default) or
  with mpmath at a precision chosen from the data so that nothing is rounded
  (``method="mpmath"``, an independent cross-check);
* correct rounding -- :func:`round_exact` rounds exact values to float64 or
  float32 (round to nearest, ties to even, subnormals, overflow to infinity)
  using integer arithmetic only, so float32 results are never double-rounded;
* metrics -- :func:`componentwise_error`, :func:`componentwise_errors`,
  :func:`ulps_from_nearest`, :func:`correctly_rounded_share`,
  :func:`relative_errors` and the normaliser :func:`abs_product`;
* input generators -- :func:`phi_matrix`, :func:`exponent_range_matrix`,
  :func:`gendot_matrices` (with :func:`dot_condition`) and
  :func:`sample_entries`.

Sampling convention (``rows`` / ``cols``)
-----------------------------------------
Exact products of large matrices are expensive, so every function that takes
``rows`` and ``cols`` works on the sub-grid ``rows x cols`` only:

* ``exact_matmul(A, B, rows=rows, cols=cols)`` returns an array ``E`` of shape
  ``(len(rows), len(cols))`` with ``E[a, b] = exact (A @ B)[rows[a], cols[b]]``.
* The metrics take the computed product ``C`` with its FULL shape ``(m, n)``
  together with that ``E`` and the SAME ``rows`` / ``cols``; they compare
  ``C[rows][:, cols]`` against ``E``.  Without ``rows`` / ``cols`` the whole of
  ``C`` is compared and ``E`` must have the same shape as ``C``.

Per-entry results are numpy float64 arrays of shape ``(len(rows), len(cols))``;
reductions return Python floats.  Everything is computed on the CPU; tensors on
other devices are copied over first.
"""

from __future__ import annotations

import itertools
import math
import numbers
from fractions import Fraction
from typing import Sequence

import mpmath
import numpy as np
import torch

from .crt import power_of_two
from .operands import check_tensor
from .rounding import FORMATS as _FORMATS
from .rounding import round_rational as _round_rational

__all__ = [
    "exact_matmul",
    "round_exact",
    "abs_product",
    "componentwise_error",
    "componentwise_errors",
    "ulps_from_nearest",
    "correctly_rounded_share",
    "relative_errors",
    "phi_matrix",
    "exponent_range_matrix",
    "gendot_matrices",
    "dot_condition",
    "sample_entries",
]

_SUPPORTED_DTYPES = (torch.float64, torch.float32)

# Signed int type with the same width as each float format, for bit patterns.
_BIT_VIEWS = {torch.float64: (np.float64, np.int64), torch.float32: (np.float32, np.int32)}


# ---------------------------------------------------------------------------
# Argument validation
# ---------------------------------------------------------------------------


def _check_float_matrix(func: str, name: str, value, *, finite: bool = True) -> torch.Tensor:
    """Validate a 2-D float32/float64 tensor argument and return it."""
    return check_tensor(func, name, value, finite=finite)


def _check_inner_sizes(func: str, A: torch.Tensor, B: torch.Tensor) -> None:
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"{func}: inner sizes of A {tuple(A.shape)} and B {tuple(B.shape)} do not match "
            f"({A.shape[1]} != {B.shape[0]})"
        )


def _check_dtype_argument(func: str, dtype) -> torch.dtype:
    if dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"{func}: dtype must be torch.float64 or torch.float32, got {dtype!r}")
    return dtype


def _check_positive_int(func: str, name: str, value, minimum: int = 1) -> int:
    # bool is an int subclass, but passing True as a size is always a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{func}: {name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{func}: {name} must be >= {minimum}, got {value}")
    return int(value)


def _check_indices(func: str, name: str, indices, size: int) -> np.ndarray:
    """Turn rows/cols (None or a sequence of ints) into an int64 index array."""
    if indices is None:
        return np.arange(size, dtype=np.int64)
    if isinstance(indices, torch.Tensor):
        if indices.dtype.is_floating_point or indices.dtype.is_complex or indices.dtype == torch.bool:
            raise TypeError(f"{func}: {name} must hold integers, got a tensor of dtype {indices.dtype}")
        indices = indices.cpu().tolist()
    array = np.asarray(indices)
    if array.ndim != 1:
        raise ValueError(f"{func}: {name} must be a 1-D sequence of indices, got shape {array.shape}")
    # each element as a Python int (an object array of ints, NumPy's unsigned ones), checked
    # before any conversion could wrap it
    values = array.tolist()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{func}: {name} must hold integers, got an element of type "
                            f"{type(value).__name__}: {value!r}")
    bad = next((value for value in values if not 0 <= value < size), None)
    if bad is not None:
        raise ValueError(f"{func}: {name} contains index {bad}, outside the valid range [0, {size})")
    return np.array(values, dtype=np.int64).reshape(-1)


def _check_device_argument(func: str, device) -> torch.device:
    """The generators' device: cpu, or a CUDA device this torch can use; checked before drawing,
    so that a bad one leaves the caller's generator where it was."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{func}: device must be 'cpu', 'cuda' or 'cuda:I', got {device!r}") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{func}: device must be 'cpu', 'cuda' or 'cuda:I', got {device}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{func}: device is {device} but CUDA is not available here")
    return device


def _check_generator(func: str, generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{func}: generator must be a torch.Generator or None, got {type(generator).__name__}"
        )


# ---------------------------------------------------------------------------
# Exact products
# ---------------------------------------------------------------------------


def _float_parts(values: np.ndarray):
    """Split float64 values into odd integer significands and exponents.

    Returns ``(significands, exponents, tops)`` (int64 arrays) with
    ``values == significands * 2**exponents`` exactly and ``|values| < 2**tops``;
    zeros get significand 0 (their exponents are meaningless).
    """
    fractions_part, tops = np.frexp(values)  # values = f * 2**tops, 0.5 <= |f| < 1
    # f * 2**53 is an integer for every float64 (subnormals included, since
    # frexp normalises them), so this scaling and conversion are exact.
    significands = (fractions_part * 2.0**53).astype(np.int64)
    exponents = tops.astype(np.int64) - 53
    # Strip trailing zero bits: smaller Python ints make the object matmul cheaper
    # (float32 inputs only need 24 bits) and do not change any value.
    lowest_bit = np.abs(significands) & -np.abs(significands)
    trailing = np.where(significands != 0, np.frexp(lowest_bit.astype(np.float64))[1] - 1, 0)
    significands = significands >> trailing
    exponents = exponents + trailing
    return significands, exponents, tops.astype(np.int64)


def _scaled_integers(values: np.ndarray, axis: int):
    """Write a float matrix as integers times a common power of two per line.

    ``axis=1`` gives one exponent per row (for A), ``axis=0`` one per column
    (for B).  Returns ``(integers, exponents)`` with ``integers`` a numpy object
    array of Python ints such that ``values == integers * 2**exponent`` of the
    row/column, exactly.
    """
    significands, exponents, _ = _float_parts(values)
    nonzero = significands != 0
    # The common exponent is the smallest one among the nonzero entries, so all
    # entries become integers after left shifts; all-zero lines use 0.
    sentinel = np.iinfo(np.int64).max
    line_min = np.where(nonzero, exponents, sentinel).min(axis=axis, keepdims=True, initial=sentinel)
    line_min = np.where(line_min == sentinel, 0, line_min)
    shifts = np.where(nonzero, exponents - line_min, 0)
    integers = np.left_shift(significands.astype(object), shifts.astype(object))
    return integers, np.squeeze(line_min, axis=axis)


def _scaled_to_fraction(integer: int, exponent: int) -> Fraction:
    """Return ``integer * 2**exponent`` as a Fraction (exactly)."""
    if exponent >= 0:
        return Fraction(integer << exponent)
    return Fraction(integer, 1 << -exponent)


def _as_cpu_float64(T: torch.Tensor) -> np.ndarray:
    # float32 -> float64 is exact, so one code path serves both input dtypes.
    return T.detach().to(device="cpu", dtype=torch.float64).numpy()


def _exact_int(
    A64: np.ndarray, B64: np.ndarray, rows: np.ndarray, cols: np.ndarray, magnitudes: bool = False
) -> np.ndarray:
    """Exact ``A[rows] @ B[:, cols]`` (or ``|A[rows]| @ |B[:, cols]|``) as Fractions."""
    A_int, A_exp = _scaled_integers(A64[rows], axis=1)
    B_int, B_exp = _scaled_integers(B64[:, cols], axis=0)
    if magnitudes:
        A_int, B_int = np.abs(A_int), np.abs(B_int)
    # Object-dtype matmul multiplies and adds Python ints: exact, arbitrary size.
    sums = A_int @ B_int if A64.shape[1] else np.zeros((len(rows), len(cols)), dtype=object)
    result = np.empty((len(rows), len(cols)), dtype=object)
    for a in range(len(rows)):
        for b in range(len(cols)):
            result[a, b] = _scaled_to_fraction(int(sums[a, b]), int(A_exp[a] + B_exp[b]))
    return result


def _mpmath_precision(A64: np.ndarray, B64: np.ndarray) -> int:
    """Working precision (bits) under which mpmath sums these products exactly.

    A product of row i and column j lies below 2**(topA_i + topB_j) and is a
    multiple of 2**(lowA_i + lowB_j), so every partial sum of k of them is an
    integer multiple of that power of two with at most
    spanA_i + spanB_j + ceil(log2 k) bits.  Any precision at least that large
    makes each rounding in the summation a no-op.
    """

    def largest_span(values: np.ndarray, axis: int) -> int:
        significands, exponents, tops = _float_parts(values)
        nonzero = significands != 0
        if not nonzero.any():
            return 1
        top = np.where(nonzero, tops, np.iinfo(np.int64).min).max(axis=axis)
        low = np.where(nonzero, exponents, np.iinfo(np.int64).max).min(axis=axis)
        spans = np.where(np.any(nonzero, axis=axis), top - low, 0)
        return int(spans.max())

    inner = max(A64.shape[1], 1)
    return largest_span(A64, 1) + largest_span(B64, 0) + math.ceil(math.log2(inner)) + 8


def _mpf_to_fraction(value) -> Fraction:
    mantissa = int(value.man)  # mpmath keeps the magnitude here, the sign apart
    if value < 0:
        mantissa = -mantissa
    return _scaled_to_fraction(mantissa, int(value.exp))


def _exact_mpmath(A64: np.ndarray, B64: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    A_sel, B_sel = A64[rows], B64[:, cols]
    # A private context: no change to mpmath's global precision, thread-safe.
    context = mpmath.MPContext()
    context.prec = _mpmath_precision(A_sel, B_sel)
    # mpf(float) is exact; float(np.float64) keeps the value (also -0.0, subnormals).
    A_mpf = [[context.mpf(float(v)) for v in row] for row in A_sel]
    B_mpf = [[context.mpf(float(v)) for v in col] for col in B_sel.T]
    result = np.empty((len(rows), len(cols)), dtype=object)
    for a, row in enumerate(A_mpf):
        for b, col in enumerate(B_mpf):
            result[a, b] = _mpf_to_fraction(context.fdot(row, col)) if row else Fraction(0)
    return result


def exact_matmul(
    A: torch.Tensor,
    B: torch.Tensor,
    method: str = "int",
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> np.ndarray:
    """Exact matrix product ``A @ B`` (or a sub-grid of it) as Fractions.

    Parameters
    ----------
    A, B:
        Finite float64 or float32 tensors of shapes ``(m, k)`` and ``(k, n)``,
        on any device (they are copied to the CPU).  Zeros, negative zeros and
        subnormals are fine; the two dtypes may differ.
    method:
        ``"int"`` (default): every entry is an integer significand times a power
        of two; one common exponent per row of A and per column of B turns the
        product into an integer matrix product done with Python ints.
        ``"mpmath"``: mpmath ``fdot`` at a working precision derived from the
        data that makes the summation exact.  Slower; use it as a cross-check.
    rows, cols:
        Optional row indices of A / column indices of B; only the
        ``len(rows) x len(cols)`` sub-grid is computed (see module docstring).

    Returns
    -------
    numpy.ndarray
        Object array of :class:`fractions.Fraction` with shape
        ``(len(rows), len(cols))``; entry ``[a, b]`` is exactly
        ``sum_l A[rows[a], l] * B[l, cols[b]]``.
    """
    func = "exact_matmul"
    _check_float_matrix(func, "A", A)
    _check_float_matrix(func, "B", B)
    _check_inner_sizes(func, A, B)
    if method not in ("int", "mpmath"):
        raise ValueError(f"{func}: method must be 'int' or 'mpmath', got {method!r}")
    row_index = _check_indices(func, "rows", rows, A.shape[0])
    col_index = _check_indices(func, "cols", cols, B.shape[1])
    A64, B64 = _as_cpu_float64(A), _as_cpu_float64(B)
    if method == "int":
        return _exact_int(A64, B64, row_index, col_index)
    return _exact_mpmath(A64, B64, row_index, col_index)


# ---------------------------------------------------------------------------
# Correct rounding
# ---------------------------------------------------------------------------


def _fraction_to_float(value: Fraction, fmt=_FORMATS[torch.float64]) -> float:
    """Correctly rounded conversion that overflows to inf instead of raising."""
    return _round_rational(value.numerator, value.denominator, fmt)


def _check_exact_array(func: str, E, name: str = "E") -> np.ndarray:
    array = np.asarray(E, dtype=object)
    if array.ndim != 2:
        raise ValueError(f"{func}: {name} must be a 2-D array of Fractions, got shape {array.shape}")
    for entry in array.flat:
        # numbers.Rational covers int and Fraction; bool is excluded as a likely mistake.
        if isinstance(entry, bool) or not isinstance(entry, numbers.Rational):
            raise TypeError(
                f"{func}: {name} must hold exact rationals (fractions.Fraction or int), "
                f"got an entry of type {type(entry).__name__}: {entry!r}"
            )
    return array


def _round_array(E: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    fmt = _FORMATS[dtype]
    rounded = np.empty(E.shape, dtype=np.float64)
    for index, entry in np.ndenumerate(E):
        rounded[index] = _round_rational(int(entry.numerator), int(entry.denominator), fmt)
    return rounded


def round_exact(E, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Round exact values to ``dtype`` (round to nearest, ties to even).

    Parameters
    ----------
    E:
        2-D array (numpy object array or nested lists) of
        :class:`fractions.Fraction` / ``int``, e.g. from :func:`exact_matmul`.
    dtype:
        ``torch.float64`` or ``torch.float32``.

    Returns
    -------
    torch.Tensor
        CPU tensor of ``dtype`` and the shape of ``E``.  Each entry is the IEEE
        round-to-nearest-even value of the exact one, including the subnormal
        grid (spacing 2**-1074 / 2**-149) and overflow to +-inf exactly when
        ``|x| >= max + half an ulp``.  An exact zero gives +0.0; a nonzero value
        that rounds to zero keeps its sign (-0.0 for negative values), as IEEE
        arithmetic would.  float32 results are rounded once, directly from the
        exact value (going through float64 could round twice).
    """
    func = "round_exact"
    _check_dtype_argument(func, dtype)
    array = _check_exact_array(func, E)
    # Every rounded value is representable in dtype, so this cast is exact.
    return torch.from_numpy(_round_array(array, dtype)).to(dtype)


# ---------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------


def abs_product(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Return ``|A| @ |B|`` computed in float64 on A's device.

    This is the normaliser of the componentwise error bound
    ``|C - AB| <= gamma * |A||B|``, cheap enough for whole large matrices (e.g.
    to turn a bound into absolute terms).  It is rounded: relative error about
    ``k * 2**-53`` while it stays in the normal range, and it can underflow or
    overflow for extreme exponent ranges.  :func:`componentwise_errors` uses the
    exact ``|A||B|`` of the sampled entries instead.
    """
    func = "abs_product"
    _check_float_matrix(func, "A", A, finite=False)
    _check_float_matrix(func, "B", B, finite=False)
    _check_inner_sizes(func, A, B)
    A64 = A.detach().to(torch.float64).abs()
    B64 = B.detach().to(device=A64.device, dtype=torch.float64).abs()
    return A64 @ B64


def _selected_computed(func: str, C, E, rows, cols) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate C/E/rows/cols and return (C_selected float64, E, rows, cols)."""
    _check_float_matrix(func, "C", C, finite=False)
    exact = _check_exact_array(func, E)
    m, n = C.shape
    row_index = _check_indices(func, "rows", rows, m)
    col_index = _check_indices(func, "cols", cols, n)
    expected = (len(row_index), len(col_index))
    if exact.shape != expected:
        if rows is None and cols is None:
            raise ValueError(
                f"{func}: E must have the shape of C {tuple(C.shape)} when rows/cols are not "
                f"given, got {exact.shape}"
            )
        raise ValueError(
            f"{func}: E must have shape (len(rows), len(cols)) = {expected}, got {exact.shape} "
            f"(C is passed with its full shape {tuple(C.shape)})"
        )
    C_selected = _as_cpu_float64(C)[np.ix_(row_index, col_index)]
    return C_selected, exact, row_index, col_index


def componentwise_errors(
    C: torch.Tensor,
    E,
    A: torch.Tensor,
    B: torch.Tensor,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
    *,
    magnitudes=None,
) -> np.ndarray:
    """Per-entry componentwise errors ``|C_ij - E_ij| / (|A||B|)_ij``.

    ``C`` is the computed product with its full shape ``(m, n)`` (float32 or
    float64, any device), ``E`` the exact product of the ``rows x cols``
    sub-grid from :func:`exact_matmul`.  Difference AND normaliser are exact
    (the normaliser is the exact ``|A||B|`` on the sub-grid, one more integer
    matrix product) and the quotient is rounded once to float64.  So the
    result does not depend on the sampling or on a BLAS summation order, and
    normalisers that under- or overflow float64 (extreme exponent ranges) do
    not produce fake errors.  Entries with ``(|A||B|)_ij == 0`` give 0 when
    ``C_ij == E_ij == 0`` and inf otherwise; an infinite ``C_ij`` gives inf and
    a NaN gives NaN.

    ``magnitudes``: the exact ``|A||B|`` of the same sub-grid,
    ``exact_matmul(A.abs(), B.abs(), rows=rows, cols=cols)``, when many
    products of the same A and B are compared (computed here when not given).

    Returns a float64 numpy array of shape ``(len(rows), len(cols))``.
    """
    func = "componentwise_errors"
    C_selected, exact, row_index, col_index = _selected_computed(func, C, E, rows, cols)
    _check_float_matrix(func, "A", A)
    _check_float_matrix(func, "B", B)
    _check_inner_sizes(func, A, B)
    if A.shape[0] != C.shape[0] or B.shape[1] != C.shape[1]:
        raise ValueError(
            f"{func}: C must have shape (A rows, B cols) = {(A.shape[0], B.shape[1])}, "
            f"got {tuple(C.shape)}"
        )
    if magnitudes is None:
        normaliser = _exact_int(_as_cpu_float64(A), _as_cpu_float64(B), row_index, col_index,
                                magnitudes=True)
    else:
        normaliser = _check_exact_array(func, magnitudes, "magnitudes")
        if normaliser.shape != exact.shape:
            raise ValueError(f"{func}: magnitudes must have the shape of E {exact.shape}, "
                             f"got {normaliser.shape}")
        negative = next((value for value in normaliser.flat if value < 0), None)
        if negative is not None:  # the signed product passed by mistake, say
            raise ValueError(f"{func}: magnitudes must be the exact |A||B| (no negative entry), "
                             f"got {negative}")

    errors = np.empty(exact.shape, dtype=np.float64)
    for (a, b), exact_value in np.ndenumerate(exact):
        computed = C_selected[a, b]
        if math.isnan(computed):
            errors[a, b] = math.nan
        elif math.isinf(computed):
            errors[a, b] = math.inf
        else:
            difference = abs(Fraction(computed) - exact_value)
            scale = normaliser[a, b]
            if scale == 0:
                errors[a, b] = 0.0 if difference == 0 else math.inf
            else:
                errors[a, b] = _fraction_to_float(difference / scale)
    return errors


def componentwise_error(C, E, A, B, rows=None, cols=None, *, magnitudes=None) -> float:
    """Largest componentwise error ``max |C_ij - E_ij| / (|A||B|)_ij``.

    See :func:`componentwise_errors` for the arguments and the treatment of
    zero normalisers; returns a Python float (NaN if any compared entry of C is
    NaN).
    """
    errors = componentwise_errors(C, E, A, B, rows, cols, magnitudes=magnitudes)
    if errors.size == 0:
        raise ValueError("componentwise_error: no entries to compare (empty rows, cols or matrix)")
    return float(np.max(errors))


def _ordered_keys(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Map floats to integers whose order and differences count representable
    floats: +0 and -0 both map to 0, the next float up to 1, and so on.
    """
    float_type, int_type = _BIT_VIEWS[dtype]
    bits = values.astype(float_type).view(int_type).astype(np.int64)
    magnitude = bits & np.int64(np.iinfo(int_type).max)  # clear the sign bit
    return np.where(bits < 0, -magnitude, magnitude)


def ulps_from_nearest(
    C: torch.Tensor,
    E,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> np.ndarray:
    """Distance of each ``C_ij`` from ``RN(E_ij)``, in representable numbers.

    ``RN`` rounds to C's dtype (see :func:`round_exact`).  The distance is the
    number of steps between the two values on the ordered list of floats of
    that dtype: 0 means correctly rounded, 1 means a neighbour of the correctly
    rounded value (one ulp away, also across a binade boundary), and so on.
    +0 and -0 are the same point, so a sign change counts the floats on both
    sides of zero (subnormals included); +-inf sits one step beyond the largest
    finite number.  See the module docstring for ``rows`` / ``cols``.

    Returns a float64 numpy array of integer values (exact below 2**53), with
    NaN where ``C_ij`` is NaN.
    """
    func = "ulps_from_nearest"
    C_selected, exact, _, _ = _selected_computed(func, C, E, rows, cols)
    nearest = _round_array(exact, C.dtype)
    nan_mask = np.isnan(C_selected)
    computed = np.where(nan_mask, 0.0, C_selected)
    # Keys are at most 2**63 in magnitude each: subtract as Python ints to avoid
    # int64 overflow for e.g. -inf versus +inf.
    keys_computed = _ordered_keys(computed, C.dtype)
    keys_nearest = _ordered_keys(nearest, C.dtype)
    distances = np.empty(exact.shape, dtype=np.float64)
    for index in np.ndindex(exact.shape):
        distances[index] = float(abs(int(keys_computed[index]) - int(keys_nearest[index])))
    distances[nan_mask] = math.nan
    return distances


def correctly_rounded_share(
    C: torch.Tensor,
    E,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> float:
    """Fraction of compared entries with ``C_ij == RN(E_ij)`` (C's dtype).

    Values are compared, so +0 and -0 count as equal; NaN never matches.
    Returns a Python float in [0, 1].  See the module docstring for ``rows`` /
    ``cols``.
    """
    func = "correctly_rounded_share"
    C_selected, exact, _, _ = _selected_computed(func, C, E, rows, cols)
    if exact.size == 0:
        raise ValueError(f"{func}: no entries to compare (empty rows, cols or matrix)")
    nearest = _round_array(exact, C.dtype)
    return float(np.count_nonzero(C_selected == nearest)) / exact.size


def relative_errors(
    C: torch.Tensor,
    E,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> np.ndarray:
    """Per-entry relative errors ``|C_ij - E_ij| / |E_ij|``.

    Computed exactly and rounded once to float64.  Where ``E_ij == 0`` the
    result is 0 if ``C_ij == 0`` and inf otherwise; infinite ``C_ij`` gives inf,
    NaN gives NaN.  Returns a float64 numpy array of shape
    ``(len(rows), len(cols))``; see the module docstring for ``rows`` / ``cols``.
    """
    func = "relative_errors"
    C_selected, exact, _, _ = _selected_computed(func, C, E, rows, cols)
    errors = np.empty(exact.shape, dtype=np.float64)
    for (a, b), exact_value in np.ndenumerate(exact):
        computed = C_selected[a, b]
        if math.isnan(computed) or math.isinf(computed):
            errors[a, b] = computed if math.isnan(computed) else math.inf
            continue
        exact_value = Fraction(int(exact_value.numerator), int(exact_value.denominator))
        difference = abs(Fraction(computed) - exact_value)
        if exact_value == 0:
            errors[a, b] = 0.0 if difference == 0 else math.inf
        else:
            errors[a, b] = _fraction_to_float(difference / abs(exact_value))
    return errors


# ---------------------------------------------------------------------------
# Input generators
# ---------------------------------------------------------------------------


def _source_device(generator: torch.Generator | None) -> torch.device:
    # Draw where the generator lives (CPU by default) so a CPU generator gives
    # the same numbers whatever the target device.
    return generator.device if generator is not None else torch.device("cpu")


def _finish(func: str, values: torch.Tensor, dtype: torch.dtype, device, what: str) -> torch.Tensor:
    result = values.to(dtype)
    if not bool(torch.isfinite(result).all()):
        raise ValueError(f"{func}: {what} produced values outside the range of {dtype}")
    return result.to(device)


_LOG2_E = 1.4426950408889634
# ln 2 split Cody-Waite style: the high part has 20 trailing zero bits, so n * _LN_2_HIGH is exact.
_LN_2_HIGH = 6.93147180369123816490e-01
_LN_2_LOW = 1.90821492927058770002e-10
_TAYLOR_DEGREE = 14


def _times_two_to_the(x: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """x 2^exponent (integer-valued exponents, |exponent| <= 2044) in two exact halves, so that the
    exponent may leave the normal range of one factor."""
    half = torch.div(exponent.long(), 2, rounding_mode="floor")
    return x * power_of_two(half) * power_of_two(exponent.long() - half)


def _portable_exp(x: torch.Tensor) -> torch.Tensor:
    """exp(x) in float64 from basic IEEE operations only, so that a seed gives the same inputs on
    every machine: torch.exp's vectorised CPU kernels differ in the last bit between instruction
    sets (AVX2 and AVX-512 do). exp(x) = 2^n exp(t) with n = round(x log2 e) and
    t = x - n ln 2 (|t| <= 0.35, ln 2 in two parts) by a degree-14 Taylor polynomial, truncated
    below 2^-60: a few ulps, which is all an input generator needs. 2^n is applied in two exact
    halves so that n may leave the normal exponent range of one factor."""
    n = torch.round(x * _LOG2_E)
    t = (x - n * _LN_2_HIGH) - n * _LN_2_LOW
    polynomial = torch.ones_like(t)
    for degree in range(_TAYLOR_DEGREE, 0, -1):
        polynomial = polynomial * t * (1.0 / degree) + 1.0
    return _times_two_to_the(polynomial, n.clamp(-2044, 2044))


def phi_matrix(rows: int, cols: int, phi: float, generator: torch.Generator | None = None,
               dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """Random ``rows x cols`` matrix ``(rand - 0.5) * exp(phi * randn)``.

    The standard test input of the Ozaki-scheme papers: ``phi`` (>= 0) sets the
    spread of the exponents, from ``phi = 0`` (uniform in (-0.5, 0.5)) to wide
    ranges for ``phi`` of a few units.  Values are drawn in float64 on the
    generator's device and then rounded to ``dtype`` and moved to ``device``.
    Raises ValueError if ``phi`` is so large that values overflow ``dtype``.
    """
    func = "phi_matrix"
    rows = _check_positive_int(func, "rows", rows)
    cols = _check_positive_int(func, "cols", cols)
    if isinstance(phi, bool) or not isinstance(phi, numbers.Real) or not math.isfinite(phi) or phi < 0:
        raise ValueError(f"{func}: phi must be a finite real number >= 0, got {phi!r}")
    _check_dtype_argument(func, dtype)
    _check_generator(func, generator)
    device = _check_device_argument(func, device)
    source = _source_device(generator)
    while True:
        uniform = torch.rand(rows, cols, generator=generator, dtype=torch.float64, device=source)
        normal = torch.randn(rows, cols, generator=generator, dtype=torch.float64, device=source)
        values = (uniform - 0.5) * _portable_exp(float(phi) * normal)
        result = _finish(func, values, dtype, device, f"phi={phi}")
        if bool((result != 0).any()):  # redraw the (astronomically rare) all-zero case
            return result


def exponent_range_matrix(rows: int, cols: int, low: int, high: int,
                          generator: torch.Generator | None = None,
                          dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """Random matrix ``+-(1 + 9 * rand) * 10**e`` with ``e`` uniform in [low, high].

    Every entry is nonzero with a random sign and a decimal exponent drawn
    uniformly from ``low..high`` (inclusive), so ``low=-300, high=300`` spans
    600 orders of magnitude.  Requires ``10**(high + 1)`` to be finite in
    ``dtype`` and ``10**low`` to be at least its smallest subnormal (low values
    near that limit are subnormal and coarsely rounded).
    """
    func = "exponent_range_matrix"
    rows = _check_positive_int(func, "rows", rows)
    cols = _check_positive_int(func, "cols", cols)
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{func}: {name} must be an integer, got {type(value).__name__} {value!r}")
    low, high = int(low), int(high)
    if low > high:
        raise ValueError(f"{func}: low must be <= high, got low={low}, high={high}")
    _check_dtype_argument(func, dtype)
    _check_generator(func, generator)
    device = _check_device_argument(func, device)
    info = torch.finfo(dtype)
    if Fraction(10) ** (high + 1) > Fraction(info.max):
        raise ValueError(
            f"{func}: high={high} is too large for {dtype}: entries reach 10**{high + 1}, "
            f"above its largest value {info.max:.3e}"
        )
    smallest_subnormal = Fraction(info.smallest_normal) / 2 ** (_FORMATS[dtype][0] - 1)
    if Fraction(10) ** low < smallest_subnormal:
        raise ValueError(
            f"{func}: low={low} is too small for {dtype}: 10**{low} is below its smallest "
            f"subnormal {float(smallest_subnormal):.3e}"
        )
    source = _source_device(generator)
    exponents = torch.randint(low, high + 1, (rows, cols), generator=generator, device=source)
    mantissas = 1.0 + 9.0 * torch.rand(rows, cols, generator=generator, dtype=torch.float64, device=source)
    signs = torch.where(
        torch.rand(rows, cols, generator=generator, device=source) < 0.5, -1.0, 1.0
    ).to(torch.float64)
    # 10**e as float64 on its own (correctly rounded, from a table: torch.pow's vectorised kernels
    # may differ between CPUs), then the mantissa: stays finite for high <= 307.
    table = torch.tensor([_fraction_to_float(Fraction(10) ** e) for e in range(low, high + 1)],
                         dtype=torch.float64, device=source)
    powers = table[exponents - low]
    return _finish(func, signs * mantissas * powers, dtype, device, f"high={high}")


def _gendot_pair(
    length: int,
    condition: float,
    generator: torch.Generator | None,
    dtype: torch.dtype,
) -> tuple[list[float], list[float]]:
    """One (x, y) pair of Ogita-Rump-Oishi GenDot (2005, Algorithm 6.1).

    The first half gets random exponents in [0, b/2] (b = log2 condition) with
    the extremes present; in the second half the exponents fall linearly from
    b/2 to 0 and each y_i is chosen so that x_i * y_i cancels the exact running
    dot product down to a random number of size 2**e_i.  The final dot product
    is therefore O(1) (its magnitude is kept in [1/2, 1), see below) while
    sum |x_i y_i| is about 2**b.  The running dot is
    kept as an exact Fraction and y_i is rounded once to ``dtype``.
    """
    fmt = _FORMATS[dtype]
    source = _source_device(generator)
    bits = math.log2(condition)
    half = max(1, round(length / 2))

    def signed_uniform() -> float:
        # 2*rand - 1 is exact in dtype (rand is a multiple of 2**-53 / 2**-24).
        value = torch.rand((), generator=generator, dtype=dtype, device=source) * 2 - 1
        return float(value)

    def nonzero_uniform() -> float:
        value = signed_uniform()
        while value == 0.0:  # x_i divides below; redraw the rare exact zero
            value = signed_uniform()
        return value

    first_exponents = [
        round(float(torch.rand((), generator=generator, dtype=torch.float64, device=source)) * bits / 2)
        for _ in range(half)
    ]
    first_exponents[0] = round(bits / 2) + 1
    first_exponents[-1] = 0
    x = [math.ldexp(nonzero_uniform(), e) for e in first_exponents]
    y = [math.ldexp(signed_uniform(), e) for e in first_exponents]
    running = sum((Fraction(a) * Fraction(b) for a, b in zip(x, y)), Fraction(0))

    rest = length - half
    for step in range(rest):
        # linspace(b/2, 0, rest), rounded to integers
        exponent = round(bits / 2 * (1 - step / (rest - 1))) if rest > 1 else 0
        x_i = math.ldexp(nonzero_uniform(), exponent)
        target_fraction = signed_uniform()
        if step == rest - 1:
            # The last target IS the final dot product (up to one rounding).
            # Keeping its magnitude in [1/2, 1) (the paper draws from (-1, 1))
            # stops an accidentally tiny draw from inflating the condition by
            # orders of magnitude.
            target_fraction = math.copysign(0.5 + abs(target_fraction) / 2, target_fraction)
        target = Fraction(math.ldexp(target_fraction, exponent))
        quotient = (target - running) / Fraction(x_i)
        y_i = _round_rational(quotient.numerator, quotient.denominator, fmt)
        x.append(x_i)
        y.append(y_i)
        running += Fraction(x_i) * Fraction(y_i)

    order = torch.randperm(length, generator=generator, device=source).tolist()
    return [x[p] for p in order], [y[p] for p in order]


def _gendot_reachable_bits(length: int, dtype: torch.dtype) -> int:
    """About the largest log2 of the condition that _gendot_pair reaches with `length` terms: each
    term of its second half cancels at most the format's precision of the running dot product (a
    few bits more from the rounding of the last one), and with 2 terms the first half holds only
    the exponent-0 term, which leaves nothing to cancel (conditions of 2 to 4)."""
    if length == 2:
        return 2
    half = max(1, round(length / 2))
    return (length - half) * _FORMATS[dtype][0] + 4


def gendot_matrices(m: int, k: int, n: int, condition: float,
                    generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64,
                    device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Matrices whose DIAGONAL products are ill-conditioned dot products.

    For ``p = 0 .. max(m, n) - 1`` an independent GenDot pair ``(x_p, y_p)`` of
    length ``k`` is built (Ogita, Rump, Oishi 2005, "Accurate sum and dot
    product", Algorithm 6.1); ``A[i, :] = x_i`` and ``B[:, j] = y_j``.

    The ill-conditioned entries are exactly the diagonal ones,
    ``(A @ B)[i, i]`` for ``i < min(m, n)``: their condition number
    :func:`dot_condition` is close to ``condition`` (within a few orders of
    magnitude when ``k`` is a few dozen or more). A condition that ``k`` terms
    cannot reach (about 2^(p (k - round(k/2)) + 4) for precision p; 4 for
    k = 2) is a ValueError that names the ``k`` that reaches it.  Off-diagonal
    entries pair unrelated vectors and are usually well conditioned.  The
    construction uses exact running dot products and rounds in ``dtype`` itself,
    so float32 inputs are genuine too.

    Returns ``(A, B)`` of shapes ``(m, k)`` and ``(k, n)``.
    """
    func = "gendot_matrices"
    m = _check_positive_int(func, "m", m)
    k = _check_positive_int(func, "k", k, minimum=2)
    n = _check_positive_int(func, "n", n)
    _check_dtype_argument(func, dtype)
    _check_generator(func, generator)
    device = _check_device_argument(func, device)
    if isinstance(condition, bool) or not isinstance(condition, numbers.Real) or not (
        math.isfinite(condition) and condition > 1
    ):
        raise ValueError(f"{func}: condition must be a finite real number > 1, got {condition!r}")
    # Entries reach about 2**(b/2 + 1) and products 2**(b + 2): keep well in range.
    emax = _FORMATS[dtype][2]
    if math.log2(condition) + 8 > emax:
        raise ValueError(
            f"{func}: condition={condition!r} is too large for {dtype} "
            f"(needs log2(condition) + 8 <= {emax})"
        )
    reachable = _gendot_reachable_bits(k, dtype)
    if math.log2(condition) > reachable:
        needed = next(j for j in itertools.count(k + 1)
                      if _gendot_reachable_bits(j, dtype) >= math.log2(condition))
        raise ValueError(
            f"{func}: condition={condition!r} is out of reach of k = {k} terms in {dtype}, whose "
            f"dot products reach conditions of about 2^{reachable} at most (each term of "
            f"GenDot's second half cancels at most {_FORMATS[dtype][0]} bits); k >= {needed} "
            "reaches it"
        )
    pairs = [_gendot_pair(k, float(condition), generator, dtype) for _ in range(max(m, n))]
    A = torch.tensor([pairs[i][0] for i in range(m)], dtype=torch.float64)
    B = torch.tensor([pairs[j][1] for j in range(n)], dtype=torch.float64).T.contiguous()
    # The values were built in dtype already, so this cast is exact.
    return A.to(dtype).to(device), B.to(dtype).to(device)


def dot_condition(x: torch.Tensor, y: torch.Tensor) -> float:
    """Condition number ``2 * sum|x_i y_i| / |sum x_i y_i|`` of a dot product.

    Both sums are computed exactly; the quotient is rounded once to float64
    (inf when the exact dot product is zero, NaN when both vectors give only
    zero products).  ``x`` and ``y`` are finite 1-D float32/float64 tensors of
    equal length.
    """
    func = "dot_condition"
    check_tensor(func, "x", x, ranks=(1,), finite=True)
    check_tensor(func, "y", y, ranks=(1,), finite=True)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{func}: x and y must have the same length, got {x.shape[0]} and {y.shape[0]}")
    row, col = x.reshape(1, -1), y.reshape(-1, 1)
    dot = exact_matmul(row, col)[0, 0]
    magnitude_sum = exact_matmul(row.abs(), col.abs())[0, 0]
    if dot == 0:
        return math.nan if magnitude_sum == 0 else math.inf
    return _fraction_to_float(2 * magnitude_sum / abs(dot))


def sample_entries(
    m: int,
    n: int,
    count: int,
    generator: torch.Generator | None = None,
) -> tuple[list[int], list[int]]:
    """Random row and column indices for checking a large product exactly.

    Returns ``(rows, cols)``: sorted lists of distinct indices drawn without
    replacement, of lengths ``min(count, m)`` and ``min(count, n)``.  The
    entries to check are the whole ``rows x cols`` grid; pass the same lists to
    :func:`exact_matmul` and the metrics.
    """
    func = "sample_entries"
    m = _check_positive_int(func, "m", m)
    n = _check_positive_int(func, "n", n)
    count = _check_positive_int(func, "count", count)
    _check_generator(func, generator)
    source = _source_device(generator)
    rows = torch.randperm(m, generator=generator, device=source)[: min(count, m)]
    cols = torch.randperm(n, generator=generator, device=source)[: min(count, n)]
    return sorted(rows.tolist()), sorted(cols.tolist())
