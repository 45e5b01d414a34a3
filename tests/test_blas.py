"""ozaki.gemm (BLAS semantics: alpha, beta, C, transa/transb, batches, out=) and ozaki.dgemm /
ozaki.sgemm, all of which run the ozaki::gemm operator (ozaki/blas.py, ozaki/gemm_op.py,
docs/torch.md, "ozaki.gemm: BLAS semantics")."""

import math
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch

import ozaki
from helpers import (assert_bitwise_equal, assert_wrong_out_is_named, cpu_and_cuda, error_cases,
                     ones, phi_pair)
from helpers import seeded_operands as operands
from helpers import ALL_DTYPES, BACKENDS, COMPLEX_DTYPES, REAL_DTYPES, REAL_GEMMS, REAL_OF
from ozaki import accuracy

FLAGS = [False, True, "N", "T", "C"]
nan, inf = float("nan"), float("inf")






def scaled(x, s):
    """RN(s * x) by real IEEE operations, as the documented epilogue forms it (complex s acts on
    the parts: Re = RN(RN(sr xr) - RN(si xi)), Im = RN(RN(sr xi) + RN(si xr)))."""
    if not x.is_complex():
        return torch.mul(x, s)
    s = complex(s)
    re, im = x.real, x.imag
    if s.imag == 0:
        return torch.complex(torch.mul(re, s.real), torch.mul(im, s.real))
    return torch.complex(torch.sub(torch.mul(re, s.real), torch.mul(im, s.imag)),
                         torch.add(torch.mul(im, s.real), torch.mul(re, s.imag)))


def added(x, y):
    if not x.is_complex():
        return torch.add(x, y)
    return torch.complex(torch.add(x.real, y.real), torch.add(x.imag, y.imag))


def materialised(x, flag):
    """op(x) as a fresh contiguous tensor: x, x^T or x^H."""
    if flag in (False, "N"):
        return x.contiguous()
    if flag == "C":
        return x.mT.conj().resolve_conj().contiguous()
    return x.mT.contiguous()


def stored(shape, flag):
    """The shape to store X in so that op(X) has `shape`."""
    return shape if flag in (False, "N") else (*shape[:-2], shape[-1], shape[-2])


# ---- alpha = 1, beta = 0 ------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("options", [{}, {"backend": "fp16", "slices": 3}, {"backend": "crt"},
                                     {"rounding": "nearest"}], ids=["default", "fp16-s3", "crt",
                                                                     "nearest"])
def test_defaults_give_the_bits_of_dgemm_and_sgemm(device, dtype, options):
    """gemm(A, B) with alpha = 1, beta = 0 (given or by default, with or without a C that beta = 0
    leaves unread) is bit-identical to dgemm / sgemm with the same options."""
    A, B, C = operands([(9, 37), (37, 6), (9, 6)], dtype, seed=1, device=device)
    expected = REAL_GEMMS[dtype](A, B, **options)
    assert expected.device.type == device
    assert_bitwise_equal(ozaki.gemm(A, B, **options), expected)
    assert_bitwise_equal(ozaki.gemm(A, B, alpha=1.0, beta=0.0, **options), expected)
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=1, beta=0, **options), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
@pytest.mark.parametrize("options", [{}, {"rounding": "nearest"}], ids=["default", "nearest"])
def test_complex_defaults_equal_matmul(device, dtype, options):
    """Complex gemm(A, B) (alpha = 1, beta = 0) is bit-identical to ozaki.matmul."""
    A, B = operands([(7, 20), (20, 5)], dtype, seed=2, device=device)
    D = ozaki.gemm(A, B, **options)
    assert D.dtype == dtype and D.device.type == device
    assert_bitwise_equal(D, ozaki.matmul(A, B, **options))


# ---- The epilogue RN(alpha P) + RN(beta C) ------------------------------------------------------

C_SHAPES = {"full": (8, 5), "row": (5,), "column": (8, 1), "one": (1, 1)}
REAL_SCALARS = [(2.5, -0.75), (1.0, 1.0), (-3.0, 1.0), (1.0, 0.1), (0.1, 2)]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("c_shape", list(C_SHAPES))
@pytest.mark.parametrize("alpha, beta", REAL_SCALARS)
def test_real_epilogue_is_two_roundings_and_one_add(device, dtype, c_shape, alpha, beta):
    """D = torch.add(torch.mul(dgemm(A, B), alpha), torch.mul(C.expand(m, n), beta)) bit for bit,
    for a full C and for C broadcast from a row, a column or a single entry (alpha = 1 and
    beta = 1 exact)."""
    A, B, C = operands([(8, 30), (30, 5), C_SHAPES[c_shape]], dtype, seed=3, device=device)
    P = REAL_GEMMS[dtype](A, B)
    expected = torch.add(torch.mul(P, alpha), torch.mul(C.expand(8, 5), beta))
    D = ozaki.gemm(A, B, C, alpha=alpha, beta=beta)
    assert D.is_contiguous()
    assert_bitwise_equal(D, expected)
    if alpha == 1 and beta == 1:  # the exact shortcuts: no multiplication at all
        assert_bitwise_equal(D, torch.add(P, C.expand(8, 5)))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
@pytest.mark.parametrize("c_shape", ["full", "row", "column"])
@pytest.mark.parametrize("alpha, beta", [(0.5 - 2j, 1.5 + 0.25j), (2.5, -0.75), (1j, 1), (1, 1)])
def test_complex_epilogue_uses_real_operations(device, dtype, c_shape, alpha, beta):
    """Complex alpha and beta act on the real and imaginary parts by real IEEE operations
    (docs/torch.md: Re(alpha P) = RN(RN(ar Pr) - RN(ai Pi)))."""
    A, B, C = operands([(8, 12), (12, 5), C_SHAPES[c_shape]], dtype, seed=4, device=device)
    P = ozaki.matmul(A, B)
    expected = added(scaled(P, alpha), scaled(C.expand(8, 5), beta))
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=alpha, beta=beta), expected)


# ---- BLAS rules: alpha = 0 reads neither A nor B, beta = 0 never reads C ------------------------


def poisoned(shape, dtype, device):
    """A tensor full of NaN and +-Inf (in both parts for complex dtypes)."""
    values = torch.tensor([nan, inf, -inf, nan], dtype=REAL_OF[dtype])
    x = values.repeat(math.prod(shape))[:math.prod(shape)].reshape(shape)
    return (torch.complex(x, x.flip(-1)) if dtype.is_complex else x).to(device)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_alpha_zero_reads_neither_a_nor_b(device, dtype):
    """With alpha = 0, NaN and Inf in A and B do not reach D: D is exactly beta * C (beta = 1: C's
    bits, -0.0 entries included; a broadcast C is expanded), and zeros when beta = 0 too."""
    A, B = poisoned((6, 9), dtype, device), poisoned((9, 4), dtype, device)
    C, = operands([(6, 4)], dtype, seed=5, device=device)
    real = REAL_OF[dtype]
    signs = torch.tensor([-0.0, 0.0, -0.0, 1.0], dtype=real, device=device)
    C[1] = torch.complex(signs, signs.flip(0)) if dtype.is_complex else signs
    D = ozaki.gemm(A, B, C, alpha=0, beta=1)
    assert_bitwise_equal(D, C)
    assert D.data_ptr() != C.data_ptr()  # a fresh tensor, never C itself
    assert torch.signbit(torch.view_as_real(D) if D.is_complex() else D).any()
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=0.0, beta=-2.5), scaled(C, -2.5))
    row = C[2]
    assert_bitwise_equal(ozaki.gemm(A, B, row, alpha=0, beta=1), row.expand(6, 4).contiguous())
    zeros = torch.zeros(6, 4, dtype=dtype, device=device)
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=0, beta=0), zeros)
    assert_bitwise_equal(ozaki.gemm(A, B, alpha=0), zeros)
    if dtype.is_complex:
        assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=0j, beta=1 + 1j), scaled(C, 1 + 1j))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_beta_zero_never_reads_c(device, dtype):
    """With beta = 0, NaN and Inf in C do not leak into D, and C=None is accepted."""
    A, B = operands([(6, 15), (15, 4)], dtype, seed=6, device=device)
    expected = ozaki.gemm(A, B)
    assert expected.isfinite().all()
    assert_bitwise_equal(ozaki.gemm(A, B, poisoned((6, 4), dtype, device), beta=0), expected)
    assert_bitwise_equal(ozaki.gemm(A, B, poisoned((6, 4), dtype, device), alpha=1.0, beta=0.0), expected)
    assert_bitwise_equal(ozaki.gemm(A, B, None, beta=0), expected)
    assert_bitwise_equal(ozaki.gemm(A, B, poisoned((4,), dtype, device), alpha=-2.0, beta=0),
              scaled(expected, -2.0))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_nonzero_beta_needs_c(dtype):
    """beta != 0 with C=None raises a TypeError naming C."""
    A, B = operands([(3, 4), (4, 2)], dtype, seed=7, device="cpu")
    with pytest.raises(TypeError, match=r"ozaki.gemm: C must be a torch.Tensor when beta != 0"):
        ozaki.gemm(A, B, beta=1)
    with pytest.raises(TypeError, match=r"ozaki.gemm: C must be a torch.Tensor when beta != 0"):
        ozaki.gemm(A, B, None, alpha=0, beta=0.5)


# ---- transa / transb and layouts ----------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("transb", FLAGS, ids=str)
@pytest.mark.parametrize("transa", FLAGS, ids=str)
def test_transpose_flags_equal_materialised_copies(device, dtype, transa, transb):
    """op(X) = X, X^T or X^H ("C" is "T" for real X; False/True are "N"/"T"): the same bits as the
    product of contiguous copies of op(A) and op(B)."""
    A, B = operands([stored((7, 11), transa), stored((11, 5), transb)], dtype, seed=8,
                    device=device)
    expected = ozaki.gemm(materialised(A, transa), materialised(B, transb))
    assert expected.shape == (7, 5)
    assert_bitwise_equal(ozaki.gemm(A, B, transa=transa, transb=transb), expected)
    if not dtype.is_complex and "C" in (transa, transb):  # "C" is "T" for real operands
        plain = {"C": "T"}
        assert_bitwise_equal(ozaki.gemm(A, B, transa=plain.get(transa, transa),
                             transb=plain.get(transb, transb)), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_transpose_flags_with_a_batch_and_an_epilogue(device, dtype):
    """transa/transb act on the last two dimensions of a batch, together with alpha, beta, C."""
    A, B, C = operands([(2, 9, 6), (2, 4, 9), (6, 4)], dtype, seed=9, device=device)
    expected = ozaki.gemm(materialised(A, "C"), materialised(B, "T"), C, alpha=-1.5, beta=2.0)
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=-1.5, beta=2.0, transa="C", transb=True), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_strided_views_give_the_bits_of_contiguous_copies(device, dtype):
    """Non-contiguous inputs (strided slices, transposed views, a slice of a batch) give the same
    bits as their contiguous copies, through gemm and (real) dgemm / sgemm."""
    X, Y, Z, W = operands([(14, 13), (25, 12), (3, 10, 13), (3, 8, 12)], dtype, seed=10,
                          device=device)
    A, B = X[::2, 1:], Y[1::2, ::2]          # (7, 12) and (12, 6)
    assert not A.is_contiguous() and not B.is_contiguous()
    expected = ozaki.gemm(A.contiguous(), B.contiguous())
    assert_bitwise_equal(ozaki.gemm(A, B), expected)
    assert_bitwise_equal(ozaki.gemm(A.mT, B.mT, transa=True, transb=True), expected)
    if not dtype.is_complex:
        assert_bitwise_equal(REAL_GEMMS[dtype](A, B), expected)
        assert_bitwise_equal(REAL_GEMMS[dtype](A.t().contiguous().t(), B.t().contiguous().t()), expected)
    A3, B3 = Z[:, ::2, 1:], W[:, ::2].mT     # (3, 5, 12) and (3, 12, 4)
    assert not A3.is_contiguous() and not B3.is_contiguous()
    assert_bitwise_equal(ozaki.gemm(A3, B3), ozaki.gemm(A3.contiguous(), B3.contiguous()))


# ---- Batches: one plan for the whole batch ------------------------------------------------------


def element_product(A, B, plan, rounding):
    """dgemm / sgemm of one pair of matrices with the batch's plan."""
    gemm = REAL_GEMMS[A.dtype]
    if plan.backend == "crt" and plan.exact:  # any exact plan gives the correctly rounded bits
        return gemm(A, B, backend="crt", rounding="nearest")
    if plan.backend == "crt":
        return gemm(A, B, backend="crt", moduli=plan.moduli)
    return gemm(A, B, backend=plan.backend, slices=plan.slices, fast=plan.fast, rounding=rounding)


def spread_batch(dtype, device, seed):
    """(3, 7, 13) x (3, 13, 5) phi = 1 batches whose elements sit at very different scales and
    spreads, so a matrix on its own could get another plan than the batch."""
    A, B = operands([(3, 7, 13), (3, 13, 5)], dtype, seed=seed, device="cpu")
    A[1] *= 2.0 ** 20
    A[2, :, ::3] *= 2.0 ** -12
    B[2, ::2] *= 2.0 ** 9
    return A.to(device), B.to(device)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rounding", [None, "nearest"])
def test_batch_elements_equal_dgemm_with_the_batch_plan(device, dtype, backend, rounding):
    """Each matrix of a batched gemm is bit-identical to dgemm / sgemm of that pair with the plan
    ozaki.plan reports for the batch (moduli for crt; backend, slices and fast for scheme I)."""
    A, B = spread_batch(dtype, device, seed=11)
    plan = ozaki.plan(A, B, backend=backend, rounding=rounding)
    D = ozaki.gemm(A, B, backend=backend, rounding=rounding)
    assert D.shape == (3, 7, 5) and D.dtype == dtype
    for e in range(3):
        assert_bitwise_equal(D[e], element_product(A[e], B[e], plan, rounding))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
def test_complex_batch_under_nearest_equals_each_element(device, dtype):
    """Under rounding="nearest" the bits do not depend on the plan, so each matrix of a complex
    batch equals gemm of that pair on its own."""
    A, B = operands([(2, 5, 9), (2, 9, 3)], dtype, seed=12, device=device)
    D = ozaki.gemm(A, B, rounding="nearest")
    for e in range(2):
        assert_bitwise_equal(D[e], ozaki.gemm(A[e], B[e], rounding="nearest"))


# ---- out= ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("batch", [(), (2,)], ids=["2d", "batched"])
def test_out_is_returned_and_holds_the_result(device, dtype, batch):
    """out= returns out itself holding D; out=C with beta = 1 updates C in place."""
    A, B, C = operands([(*batch, 6, 10), (*batch, 10, 4), (*batch, 6, 4)], dtype, seed=13,
                       device=device)
    out = poisoned((*batch, 6, 4), dtype, device)
    expected = ozaki.gemm(A, B, C, alpha=0.5, beta=-1.25)
    assert ozaki.gemm(A, B, C, alpha=0.5, beta=-1.25, out=out) is out
    assert_bitwise_equal(out, expected)
    before = C.clone()
    expected = ozaki.gemm(A, B, before, beta=1)
    assert ozaki.gemm(A, B, C, beta=1, out=C) is C
    assert_bitwise_equal(C, expected)
    assert ozaki.gemm(A, B, C, alpha=2.0, beta=1, out=C) is C
    assert_bitwise_equal(C, ozaki.gemm(A, B, expected, alpha=2.0, beta=1))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_out_of_the_wrong_shape_dtype_or_type_is_named(device):
    """out must match the result's shape and dtype (and be a tensor); the message names out."""
    A, B = operands([(4, 5), (5, 3)], torch.float64, seed=14, device=device)
    assert_wrong_out_is_named("ozaki.gemm", lambda out: ozaki.gemm(A, B, out=out), (4, 3),
                              torch.float32, device)
    with pytest.raises(TypeError, match=r"ozaki.gemm: out must be a torch.Tensor, got list"):
        ozaki.gemm(A, B, out=[])


@pytest.mark.cuda
def test_out_and_c_on_the_wrong_device_are_named():
    """On CUDA operands, out and C on the CPU are rejected with messages naming them."""
    A, B = operands([(4, 5), (5, 3)], torch.float64, seed=15, device="cuda")
    with pytest.raises(ValueError, match=r"ozaki.gemm: out must have the result's device"):
        ozaki.gemm(A, B, out=torch.empty(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"ozaki.gemm: C must be on cuda"):
        ozaki.gemm(A, B, torch.ones(4, 3, dtype=torch.float64), beta=1)
    with pytest.raises(ValueError, match=r"ozaki.gemm: A and B must be on the same device"):
        ozaki.gemm(A, B.cpu())


# ---- Error messages -----------------------------------------------------------------------------

f64, f32 = torch.float64, torch.float32

_t = ones


# (id, arguments (A, B, C) and keywords, exception, message after "ozaki.gemm: ")
# AB: operands that fit.
AB = (_t(3, 4), _t(4, 2))
ERRORS = [
    ("transa-X", AB, {"transa": "X"}, ValueError,
     r"transa must be False, True, 'N', 'T' or 'C', got 'X'"),
    ("transb-lowercase", AB, {"transb": "t"}, ValueError,
     r"transb must be False, True, 'N', 'T' or 'C', got 't'"),
    ("transa-int", AB, {"transa": 1}, ValueError, r"transa must be .*, got 1"),
    ("alpha-str", AB, {"alpha": "2"}, TypeError, r"alpha must be a number, got str '2'"),
    ("alpha-bool", AB, {"alpha": True}, TypeError, r"alpha must be a number, got bool True"),
    ("beta-none", AB + (_t(3, 2),), {"beta": None}, TypeError,
     r"beta must be a number, got NoneType"),
    ("alpha-complex-real-operands", AB, {"alpha": 2j}, TypeError,
     r"alpha = 2j is complex but the operands are torch.float64"),
    ("beta-complex-real-operands", AB + (_t(3, 2),), {"beta": 1 + 1j}, TypeError,
     r"beta = \(1\+1j\) is complex but the operands are torch.float64"),
    ("C-dtype", (_t(3, 4), _t(4, 2), _t(3, 2, dtype=f32)), {"beta": 1}, TypeError,
     r"C must be torch.float64 like A and B, got torch.float32"),
    ("C-shape", (_t(3, 4), _t(4, 2), _t(4, 2)), {"beta": 1}, ValueError,
     r"C of shape \(4, 2\) does not broadcast to the result's shape \(3, 2\)"),
    ("C-bigger", (_t(3, 4), _t(4, 2), _t(2, 3, 2)), {"beta": 1}, ValueError,
     r"C of shape \(2, 3, 2\) does not broadcast to the result's shape \(3, 2\)"),
    ("C-sparse", (_t(3, 4), _t(4, 2), _t(3, 2).to_sparse()), {"beta": 1}, TypeError,
     r"C must be a dense \(strided\) tensor, got layout torch.sparse_coo"),
    ("C-sparse-csr", (_t(3, 4), _t(4, 2), _t(3, 2).to_sparse_csr()), {"beta": 1}, TypeError,
     r"C must be a dense \(strided\) tensor, got layout torch.sparse_csr"),
    ("mixed-dtypes", (_t(3, 4), _t(4, 2, dtype=f32)), {}, TypeError,
     r"B must be torch.float64, got torch.float32"),
    ("int-tensors", (_t(3, 4, dtype=torch.int32), _t(4, 2, dtype=torch.int32)), {}, TypeError,
     r"A must be torch.float64, torch.float32, torch.complex128 or torch.complex64, "
     r"got torch.int32"),
    ("A-not-a-tensor", ([[1.0]], _t(1, 2)), {}, TypeError, r"A must be a torch.Tensor, got list"),
    ("A-sparse", (_t(3, 4).to_sparse(), _t(4, 2)), {}, TypeError,
     r"A must be a dense \(strided\) tensor, got layout torch.sparse_coo"),
    ("B-sparse-csr", (_t(3, 4), _t(4, 2).to_sparse_csr()), {}, TypeError,
     r"B must be a dense \(strided\) tensor, got layout torch.sparse_csr"),
    ("A-1d", (_t(4), _t(4, 2)), {}, ValueError, r"A must be 2-D or 3-D, got 1-D with shape \(4,\)"),
    ("4d", (_t(1, 2, 3, 4), _t(1, 2, 4, 2)), {}, ValueError, r"A must be 2-D or 3-D"),
    ("batch-sizes", (_t(2, 3, 4), _t(3, 4, 2)), {}, ValueError,
     r"A is \(2, 3, 4\) and B is \(3, 4, 2\); batched operands need the same batch"),
    ("batch-and-matrix", (_t(2, 3, 4), _t(4, 2)), {}, ValueError,
     r"A is \(2, 3, 4\) and B is \(4, 2\); batched operands need the same batch size"),
    ("inner", (_t(3, 4), _t(5, 2)), {}, ValueError, r"inner dimensions differ"),
    ("inner-after-transb", AB, {"transb": "T"}, ValueError, r"inner dimensions differ"),
    ("backend", AB, {"backend": "bogus"}, ValueError,
     r"backend must be one of 'auto', 'fp16', 'int8', 'crt', got 'bogus'"),
    ("slices", AB, {"slices": 0}, ValueError, r"slices must be between 1 and 40, got 0"),
    ("rounding", AB, {"rounding": "up"}, ValueError,
     r"rounding must be None or 'nearest', got 'up'"),
    ("moduli-fp16", AB, {"backend": "fp16", "moduli": 8}, ValueError,
     r"moduli applies to backend='crt'"),
    ("slices-crt", AB, {"backend": "crt", "slices": 3}, ValueError,
     r"slices applies to the scheme-I backends"),
]


@pytest.mark.parametrize("args, kwargs, error, message", error_cases(ERRORS))
def test_errors_name_the_argument(args, kwargs, error, message):
    """Bad arguments raise before any product, with a message naming ozaki.gemm and the argument."""
    with pytest.raises(error, match="ozaki.gemm: " + message):
        ozaki.gemm(*args, **kwargs)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_complex_scalars_of_zero_imaginary_part_scale_each_part_alone(device):
    """alpha or beta of zero imaginary part (2 + 0j, or a real 2) scale the real and imaginary
    parts each alone (docs/torch.md): Inf + NaN i times 2 stays Inf + NaN i (the full complex
    product would make the real part NaN from 0 * NaN), and -0 - i times 2 keeps its -0."""
    A = torch.tensor([[math.inf + 0j]], dtype=torch.complex128, device=device)
    B = torch.tensor([[1 + 0j]], dtype=torch.complex128, device=device)
    P = ozaki.matmul(A, B)
    assert math.isinf(P.real.item()) and math.isnan(P.imag.item())
    C = torch.tensor([[complex(-0.0, -1.0)]], dtype=torch.complex128, device=device)
    for two in (2 + 0j, 2.0):
        D = ozaki.gemm(A, B, alpha=two)
        assert_bitwise_equal(D, torch.complex(2 * P.real, 2 * P.imag))
        D = ozaki.gemm(A, B, C, alpha=0, beta=two)
        assert math.copysign(1, D.real.item()) == -1 and D.imag.item() == -2


@pytest.mark.parametrize("scalars", [{"alpha": 2 + 0j}, {"beta": 2 + 0j}], ids=["alpha", "beta"])
def test_complex_typed_scalars_are_rejected_for_real_operands(scalars):
    """A Python complex, even with zero imaginary part, as alpha or beta of real operands is a
    TypeError (it would otherwise turn the float64 result complex, against the fake kernel)."""
    A, B, C = operands([(3, 4), (4, 2), (3, 2)], torch.float64, seed=16, device="cpu")
    with pytest.raises(TypeError, match="is complex but the operands are torch.float64"):
        ozaki.gemm(A, B, C, **scalars)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("alpha", [np.float32(0.5), np.int64(3), np.float64(0.1), Fraction(1, 3),
                                   2 ** 70 + 1], ids=["np.float32", "np.int64", "np.float64",
                                                      "Fraction", "big int"])
def test_scalars_of_any_real_type_give_their_float64_on_every_path(device, alpha):
    """alpha and beta of any real type act as their float64 value, whether the call runs the
    kernel directly or through the dispatched operator (an operand that requires grad), whose
    Scalar takes only Python numbers."""
    A, B, C = operands([(6, 9), (9, 4), (6, 4)], torch.float64, seed=17, device=device)
    expected = ozaki.gemm(A, B, C, alpha=float(alpha), beta=float(alpha))
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=alpha, beta=alpha), expected)
    with_grad = ozaki.gemm(A.clone().requires_grad_(), B, C, alpha=alpha, beta=alpha)
    assert_bitwise_equal(with_grad.detach(), expected)


def test_numpy_integers_and_bools_serve_as_options():
    """slices, moduli and fast may be NumPy integers and bools (from arrays and configurations):
    the same plan and bits as Python's; a NumPy float is still refused by name."""
    A, B = operands([(6, 9), (9, 4)], torch.float64, seed=20, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few slices or moduli: the fixed counts' warning
        assert_bitwise_equal(ozaki.gemm(A, B, slices=np.int64(3), fast=np.True_),
                             ozaki.gemm(A, B, slices=3, fast=True))
        assert_bitwise_equal(ozaki.gemm(A, B, moduli=np.int32(9)), ozaki.gemm(A, B, moduli=9))
    with pytest.raises(TypeError, match=r"ozaki.gemm: slices must be an int or None, got float64"):
        ozaki.gemm(A, B, slices=np.float64(3))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_float32_operands_take_alpha_and_beta_rounded_to_float32(device):
    """With float32 operands, alpha and beta are rounded to float32 first, as sgemm takes them:
    D = RN32(RN32(alpha) P) + RN32(RN32(beta) C), each product of two float32 values exact in
    float64 and rounded once."""
    A, B, C = operands([(30, 40), (40, 20), (30, 20)], torch.float32, seed=18, device=device)
    alpha, beta = 0.1, -1 / 3
    P = ozaki.sgemm(A, B)
    def rounded_product(x, s):
        return (x.double() * float(torch.tensor(s, dtype=torch.float32))).float()
    expected = torch.add(rounded_product(P, alpha), rounded_product(C, beta))
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=alpha, beta=beta), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_float32_operands_take_integer_scalars_rounded_once(device, dtype):
    """An integer alpha or beta is rounded to float32 once, as torch converts its integer Scalar,
    not through float64: 2^60 + 2^36 + 1 lies just above a float32 tie, but its float64 rounding
    lands on the tie, which rounds to even (2^60) where the integer rounds up (2^60 + 2^37). The
    same as torch.addmm's D and as the float32 value passed itself."""
    A, B, C = operands([(5, 6), (6, 4), (5, 4)], dtype, seed=29, device=device)
    value = 2 ** 60 + 2 ** 36 + 1
    single = float(torch.tensor(value, dtype=torch.int64).to(torch.float32))
    assert single == 2.0 ** 60 + 2.0 ** 37 != float(torch.tensor(float(value)).float())
    for integer in (value, np.int64(value), -value):
        rounded = single if integer > 0 else -single
        assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=integer, beta=0),
                             ozaki.gemm(A, B, C, alpha=rounded, beta=0))
        assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=0, beta=integer),
                             ozaki.gemm(A, B, C, alpha=0, beta=rounded))
    if not dtype.is_complex:
        assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=0, beta=value),
                             torch.addmm(C, A, B, alpha=0, beta=value))


@pytest.mark.parametrize("value, error, message", [
    (Decimal("2"), TypeError, r"alpha must be a real or complex number, got Decimal Decimal\('2'\)"),
    (2 ** 2000, ValueError, r"alpha = \d+ is past the float64 range"),
    (Fraction(2 ** 2000, 3), ValueError, r"alpha = Fraction\(\d+, 3\) is past the float64 range"),
], ids=["Decimal", "int", "Fraction"])
def test_scalars_no_float64_holds_are_named(value, error, message):
    """A number that is neither real nor complex, or one past the float64 range, is refused with
    the argument and the value named, before any product."""
    A, B = operands([(3, 4), (4, 2)], torch.float64, seed=19, device="cpu")
    with pytest.raises(error, match="ozaki.gemm: " + message):
        ozaki.gemm(A, B, alpha=value)


@pytest.mark.skipif(np.finfo(np.longdouble).maxexp <= 1024,
                    reason="NumPy's longdouble is float64 here: no finite value past its range")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.complex128])
def test_finite_longdoubles_past_float64_are_refused(dtype):
    """NumPy's longdouble and clongdouble hold finite values past float64's range, which float()
    turns into +-Inf: they are refused like the int and the Fraction of that size, never taken as
    infinite scales."""
    A, B = (t.to(dtype) for t in operands([(3, 4), (4, 2)], torch.float64, seed=19, device="cpu"))
    values = [np.longdouble(10.0) ** 400, -np.longdouble(10.0) ** 400]
    if dtype.is_complex:
        values += [np.clongdouble(1j) * np.longdouble(10.0) ** 400]
    for value in values:
        for arg in ("alpha", "beta"):
            with pytest.raises(ValueError, match=f"ozaki.gemm: {arg} = .* is past the float64 "
                                                 "range"):
                ozaki.gemm(A, B, A[:, :2], **{arg: value})
    assert torch.isinf(torch.tensor(float(values[0])))  # what float() alone would have taken


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("arg, value", [("alpha", 1e300), ("beta", -1e39), ("alpha", 3.5e38j),
                                        ("beta", 2.0 ** 128 - 2.0 ** 103)],
                         ids=["alpha-1e300", "beta-minus-1e39", "alpha-imaginary",
                              "beta-rounds-up"])
def test_float32_scalars_that_round_to_infinity_are_named(dtype, arg, value):
    """With float32 operands alpha and beta are rounded to float32; a finite one that rounds to
    +-Inf there (torch's addmm refuses those too) is refused by name, not run as Inf."""
    if isinstance(value, complex) and not dtype.is_complex:
        pytest.skip("complex scalars are for complex operands")
    A, B, C = operands([(3, 4), (4, 2), (3, 2)], dtype, seed=21, device="cpu")
    with pytest.raises(ValueError, match=rf"ozaki.gemm: {arg} = .* rounds to infinity in float32, "
                                         rf"the operands' precision"):
        ozaki.gemm(A, B, C, **{arg: value})


def test_float32_scalars_up_to_the_rounding_boundary_are_taken():
    """Just below the midpoint between the largest float32 and 2^128, alpha rounds to the largest
    float32 and is taken; infinite alpha is taken as Inf, as torch takes it."""
    A, B = operands([(3, 4), (4, 2)], torch.float32, seed=22, device="cpu")
    largest = float(torch.finfo(torch.float32).max)
    below = float(np.nextafter(2.0 ** 128 - 2.0 ** 103, 0))
    assert_bitwise_equal(ozaki.gemm(A, B, alpha=below), ozaki.gemm(A, B, alpha=largest))
    assert torch.isinf(ozaki.gemm(A, B, alpha=float("inf"))).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_float32_integer_scalars_are_refused_only_where_one_rounding_overflows(dtype):
    """An integer alpha or beta is rounded to float32 once: one just below the overflow midpoint
    2^128 - 2^103 is the largest float32 (through float64 it would become the midpoint, then
    Inf), and the midpoint itself is refused."""
    A, B, C = operands([(3, 4), (4, 2), (3, 2)], dtype, seed=22, device="cpu")
    largest = float(torch.finfo(torch.float32).max)
    below = 2 ** 128 - 2 ** 103 - 1
    assert float(below) == 2.0 ** 128 - 2.0 ** 103  # float64 alone would round it up
    for arg in ("alpha", "beta"):
        assert_bitwise_equal(ozaki.gemm(A, B, C, **{arg: below}),
                             ozaki.gemm(A, B, C, **{arg: largest}))
        assert_bitwise_equal(ozaki.gemm(A, B, C, **{arg: -below}),
                             ozaki.gemm(A, B, C, **{arg: -largest}))
        with pytest.raises(ValueError, match=rf"ozaki.gemm: {arg} = .* rounds to infinity"):
            ozaki.gemm(A, B, C, **{arg: 2 ** 128 - 2 ** 103})


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("tiny", [1e-50, -1e-46, 7e-46j])
def test_float32_scalars_that_round_to_zero_are_zero(device, dtype, tiny):
    """With float32 operands a scalar that rounds to 0 in float32 is 0: alpha reads neither A nor
    B, beta never reads C and needs no C (NaN does not leak), as sgemm takes them."""
    if isinstance(tiny, complex) and not dtype.is_complex:
        pytest.skip("complex scalars are for complex operands")
    A, B = poisoned((6, 9), dtype, device), poisoned((9, 4), dtype, device)
    C, = operands([(6, 4)], dtype, seed=23, device=device)
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=tiny, beta=1), C)
    A, B = operands([(6, 9), (9, 4)], dtype, seed=24, device=device)
    expected = ozaki.gemm(A, B)
    assert_bitwise_equal(ozaki.gemm(A, B, poisoned((6, 4), dtype, device), beta=tiny), expected)
    assert_bitwise_equal(ozaki.gemm(A, B, beta=tiny), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_float32_scalars_that_round_to_zero_give_zero_gradients(dtype):
    """alpha that rounds to 0 in float32 gives A and B zero gradients (never NaN from their
    entries), and beta likewise gives C one, as with alpha = 0 and beta = 0."""
    A, B = poisoned((5, 3), dtype, "cpu"), poisoned((3, 4), dtype, "cpu")
    C, = operands([(5, 4)], dtype, seed=25, device="cpu")
    A.requires_grad_(True), B.requires_grad_(True), C.requires_grad_(True)
    D = ozaki.gemm(A, B, C, alpha=1e-50, beta=1e-50)
    assert_bitwise_equal(D.detach(), torch.zeros_like(D))
    D.real.sum().backward() if dtype.is_complex else D.sum().backward()
    for x in (A, B, C):
        assert_bitwise_equal(x.grad, torch.zeros_like(x))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("alpha", [inf, nan, -2.0])
def test_empty_inner_dimension_gives_beta_c(device, dtype, alpha):
    """k = 0: D = beta C as BLAS and torch's addmm give it (alpha is not applied to the empty
    product, so alpha = Inf or NaN gives no NaN, and -0.0 entries of beta C stay -0.0)."""
    A = torch.empty(4, 0, dtype=dtype, device=device)
    B = torch.empty(0, 3, dtype=dtype, device=device)
    C, = operands([(4, 3)], dtype, seed=26, device=device)
    real = REAL_OF[dtype]
    signs = torch.tensor([-0.0, 0.0, -0.0], dtype=real, device=device)
    C[1] = torch.complex(signs, signs.flip(0)) if dtype.is_complex else signs
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=alpha, beta=1), C)
    assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=alpha, beta=-0.5), scaled(C, -0.5))
    assert_bitwise_equal(ozaki.gemm(A, B, alpha=alpha), torch.zeros(4, 3, dtype=dtype,
                                                                    device=device))
    if not dtype.is_complex:
        assert_bitwise_equal(ozaki.gemm(A, B, C, alpha=alpha, beta=-0.5),
                             torch.addmm(C, A, B, alpha=alpha, beta=-0.5))


@pytest.mark.parametrize("transa, transb, named", [
    (True, False, r"A is op\(A\) for transa=True, A as passed is \(2, 3\)\)"),
    ("N", "T", r"B is op\(B\) for transb='T', B as passed is \(3, 4\)\)"),
    ("C", True, r"A is op\(A\) for transa='C', A as passed is \(2, 3\); B is op\(B\) for "
                r"transb=True, B as passed is \(3, 4\)\)")])
def test_shape_errors_of_transposed_operands_name_the_flags(transa, transb, named):
    """An inner-dimension error about op(A) and op(B) says which of them are transposed and the
    shapes of A and B as passed."""
    A, B = operands([(2, 3), (3, 4)], torch.float64, seed=27, device="cpu")
    with pytest.raises(ValueError, match=r"ozaki.gemm: inner dimensions differ: .*" + named):
        ozaki.gemm(A, B, transa=transa, transb=transb)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("scalars", [dict(beta=2.0), dict(alpha=3.0, beta=1.0), dict(alpha=-2.0),
                                     dict(alpha=0.0, beta=0.5)], ids=str)
def test_float32_epilogue_nans_have_the_same_bits_everywhere(device, dtype, scalars):
    """NaNs that pass through the epilogue's float32 arithmetic (from C, or from A's NaN in the
    product) come out as the kernels' quiet NaN 0x7fc00000 on every device (torch's float32
    arithmetic gives 0x7fffffff on CUDA and keeps the payload on the CPU)."""
    A, B, C = operands([(4, 5), (5, 3), (4, 3)], dtype, seed=28, device=device)
    real = (lambda x: torch.view_as_real(x)) if dtype.is_complex else (lambda x: x)
    bits = real(C).view(torch.int32).view(-1)
    bits[1] = 0x7FC12345  # a quiet NaN with a payload
    bits[5] = 0x7FA00001  # a signalling NaN's bits
    real(A)[2, 0] = nan
    D = ozaki.gemm(A, B, C, **scalars)
    values = real(D)
    nans = values.isnan()
    assert nans.any()
    assert (values.view(torch.int32)[nans] == 0x7FC00000).all()
    if device == "cuda":
        assert_bitwise_equal(D.cpu(), ozaki.gemm(A.cpu(), B.cpu(), C.cpu(), **scalars))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("inner", [5, 0])
def test_float32_result_that_is_c_copies_its_nan_bits(device, dtype, inner):
    """With beta = 1 and no product term (alpha = 0, or k = 0) D is C itself: a fresh copy of C's
    bits, NaN payloads included, on every device (no epilogue arithmetic ran)."""
    A, B, C = operands([(4, inner), (inner, 3), (4, 3)], dtype, seed=29, device=device)
    real = (lambda x: torch.view_as_real(x)) if dtype.is_complex else (lambda x: x)
    real(C).view(torch.int32).view(-1)[1] = 0x7FC12345
    D = ozaki.gemm(A, B, C, alpha=0.0 if inner else 2.0, beta=1.0)
    assert D.data_ptr() != C.data_ptr()
    assert_bitwise_equal(D, C)


# ---- Accuracy -----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("phi, seed", [(0.5, 20), (2.0, 21)])
def test_gemm_is_no_less_accurate_than_native(device, dtype, phi, seed):
    """The max componentwise error of ozaki.gemm (alpha = 1, beta = 0) against the exact product
    is at most that of torch's native A @ B on the same inputs."""
    A, B = phi_pair(20, 300, 17, phi, seed=seed, dtype=dtype, device=device)
    exact = accuracy.exact_matmul(A.cpu(), B.cpu())
    magnitudes = accuracy.exact_matmul(A.cpu().abs(), B.cpu().abs())
    ozaki_error = accuracy.componentwise_error(ozaki.gemm(A, B), exact, A.cpu(), B.cpu(),
                                               magnitudes=magnitudes)
    native_error = accuracy.componentwise_error(A @ B, exact, A.cpu(), B.cpu(),
                                                magnitudes=magnitudes)
    assert ozaki_error <= native_error, (ozaki_error, native_error)
