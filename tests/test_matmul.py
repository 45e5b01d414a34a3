"""ozaki.matmul: torch.matmul's shape rules (1-D, batched, broadcasting), the three ways a batch
runs (folded into rows, folded into columns, batched GEMM) giving the same bits, complex products
as one real product, out= and errors (ozaki/matmul.py, ozaki/complex.py, docs/torch.md)."""

import math
import warnings
from fractions import Fraction

import pytest
import torch

import ozaki
from helpers import (assert_bitwise_equal, assert_special_values_follow_ieee,
                     assert_wrong_out_is_named, cpu_and_cuda, error_test, ones, seeded)
from helpers import seeded_operands as operands
from helpers import ALL_DTYPES, BACKENDS, COMPLEX_DTYPES, REAL_DTYPES, REAL_GEMMS, REAL_OF
from ozaki import accuracy

#: Relative tolerance against torch.matmul, per real dtype.
RTOL = {torch.float64: 1e-12, torch.float32: 1e-5}
nan, inf = float("nan"), float("inf")
f64 = torch.float64






# ---- Shapes -------------------------------------------------------------------------------------

SHAPES = [
    ((7,), (7,)),                    # dot product -> 0-d
    ((7,), (7, 4)),                  # row vector
    ((5, 7), (7,)),                  # column vector
    ((5, 7), (7, 4)),
    ((3, 5, 7), (7, 4)),             # shared right operand
    ((5, 7), (3, 7, 4)),             # shared left operand
    ((3, 5, 7), (3, 7, 4)),          # batched
    ((2, 1, 5, 7), (3, 7, 4)),       # broadcast batch
    ((2, 1, 5, 7), (1, 3, 7, 4)),
    ((7,), (3, 7, 4)),
    ((3, 5, 7), (7,)),
    ((1, 5, 7), (2, 3, 7, 4)),
    ((0, 5, 7), (7, 4)),             # empty batch
    ((0, 5, 7), (0, 7, 4)),
    ((5, 7), (0, 7, 4)),
    ((2, 1, 5, 7), (0, 7, 4)),
    ((3, 0, 7), (7, 4)),             # m = 0
    ((3, 5, 7), (7, 0)),             # n = 0
    ((5, 7), (3, 7, 0)),
    ((0, 7), (7, 4)),
    ((5, 7), (7, 0)),
]


def shape_id(shapes):
    return "@".join("x".join(map(str, s)) or "0d" for s in shapes)


def reference(a, b):
    """torch.matmul and a scale for the tolerance: the largest entry of |a| @ |b|."""
    expected = torch.matmul(a, b)
    scale = torch.matmul(a.abs().to(REAL_OF[a.dtype]), b.abs().to(REAL_OF[a.dtype]))
    return expected, (scale.max().item() if scale.numel() else 1.0)


def check_against_torch(a, b, **options):
    result = ozaki.matmul(a, b, **options)
    expected, scale = reference(a, b)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    assert result.device == a.device
    rtol = RTOL[REAL_OF[a.dtype]]
    torch.testing.assert_close(result, expected, rtol=rtol, atol=rtol * scale)
    return result


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shapes", SHAPES, ids=shape_id)
def test_shapes_dtypes_and_values_follow_torch_matmul(device, dtype, shapes):
    """The result has torch.matmul's shape and dtype (0-d for two vectors, broadcast batches,
    empty batches and matrices) and values close to it."""
    a, b = operands(shapes, dtype, seed=1, device=device)
    result = check_against_torch(a, b)
    assert result.is_contiguous()
    assert result.stride() == torch.matmul(a, b).stride()  # empty results' too


@pytest.mark.parametrize("shapes", [((5, 0), (0, 4)), ((0,), (0,)), ((3, 5, 0), (0, 4)),
                                    ((5, 0), (3, 0, 4)), ((2, 0, 7), (2, 7, 4)),
                                    ((2, 5, 0), (2, 0, 4))], ids=shape_id)
def test_empty_inner_dimension_and_empty_batched_rows(shapes):
    """k = 0 gives zeros of torch.matmul's shape, as dgemm does; m = 0 in a batch gives an empty
    result."""
    a, b = operands(shapes, torch.float64, seed=2, device="cpu")
    result = ozaki.matmul(a, b)
    expected = torch.matmul(a, b)
    assert result.shape == expected.shape
    assert_bitwise_equal(result, expected)


# ---- One plan, three ways to run a batch --------------------------------------------------------


def element_product(A, B, plan):
    """dgemm / sgemm of one pair of matrices with the batch's plan."""
    gemm = REAL_GEMMS[A.dtype]
    if plan.backend == "crt":
        return gemm(A, B, backend="crt", moduli=plan.moduli)
    return gemm(A, B, backend=plan.backend, slices=plan.slices, fast=plan.fast)


def spread(x, dim):
    """x with its slices along dim at very different scales (so that a matrix on its own could
    get another plan than the batch)."""
    x = x.clone()
    x.select(dim, 1).mul_(2.0 ** 18)
    x.select(dim, -1)[..., ::3].mul_(2.0 ** -11)
    return x


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_right_operand_folds_into_rows(device, dtype, backend):
    """(b, m, k) @ (k, n) gives the bits of (b, m, k) @ (k, n).expand(b, k, n), and each matrix
    those of dgemm / sgemm with the batch's plan."""
    a3, b2 = operands([(3, 6, 11), (11, 5)], dtype, seed=3, device=device)
    a3 = spread(a3, 0)
    expanded = b2.expand(3, 11, 5)
    result = ozaki.matmul(a3, b2, backend=backend)
    assert_bitwise_equal(result, ozaki.matmul(a3, expanded, backend=backend))
    plan = ozaki.plan(a3, expanded, backend=backend)
    for e in range(3):
        assert_bitwise_equal(result[e], element_product(a3[e], b2, plan))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_left_operand_folds_into_columns(device, dtype, backend):
    """(m, k) @ (b, k, n) gives the bits of (m, k).expand(b, m, k) @ (b, k, n), and each matrix
    those of dgemm / sgemm with the batch's plan."""
    a2, b3 = operands([(6, 11), (3, 11, 5)], dtype, seed=4, device=device)
    b3 = spread(b3, 0)
    expanded = a2.expand(3, 6, 11)
    result = ozaki.matmul(a2, b3, backend=backend)
    assert result.is_contiguous()
    assert_bitwise_equal(result, ozaki.matmul(expanded, b3, backend=backend))
    plan = ozaki.plan(expanded, b3, backend=backend)
    for e in range(3):
        assert_bitwise_equal(result[e], element_product(a2, b3[e], plan))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", ["auto", "int8"])
def test_broadcast_batch_equals_the_expanded_batch(device, dtype, backend):
    """Broadcast batch dimensions give the bits of the explicitly expanded batch, and the folds
    the bits of the expanded operand, for real and complex dtypes."""
    a, b, a3, b2 = operands([(2, 1, 5, 9), (3, 9, 4), (3, 5, 9), (9, 4)], dtype, seed=5,
                            device=device)
    assert_bitwise_equal(ozaki.matmul(a, b, backend=backend),
              ozaki.matmul(a.expand(2, 3, 5, 9).contiguous(), b.expand(2, 3, 9, 4).contiguous(),
                           backend=backend))
    assert_bitwise_equal(ozaki.matmul(a3, b2, backend=backend),
              ozaki.matmul(a3, b2.expand(3, 9, 4), backend=backend))
    assert_bitwise_equal(ozaki.matmul(b2.mT, a3.mT, backend=backend),
              ozaki.matmul(b2.mT.expand(3, 4, 9), a3.mT, backend=backend))


def _huge_in_their_own_columns(dtype, device, batch=16, k=18, seed=0):
    """(batch, 1, k) @ (k, 2) whose matrices are huge in a column of their own (2^267 beside 1
    in float64, 2^52 beside 2^-120 in float32) and whose B is huge in its last rows: the bound of
    all rows together exceeds each matrix's (their columns' largest exponents add up across the
    batch), by enough to take exact scheme II past 40 moduli in float64 and one modulus further
    in float32."""
    g = torch.Generator().manual_seed(seed)
    big, other, small = (267, 234, 0) if dtype == torch.float64 else (52, 100, -120)

    def signed(*shape):  # +-(1 + q 2^-10): 11-bit significands
        q = torch.randint(0, 1 << 10, shape, generator=g).double() / (1 << 10)
        return (1 + q) * (torch.randint(0, 2, shape, generator=g).double() * 2 - 1)

    A, B = signed(batch, 1, k) * 2.0 ** small, signed(k, 2)
    for e in range(batch):
        A[e, 0, e] *= 2.0 ** (big - small)
    B[batch:, 0] *= 2.0 ** other
    return A.to(dtype).to(device), B.to(dtype).to(device)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_folded_batched_and_mapped_forms_share_the_plan_where_elements_differ(device, dtype):
    """The plan does not depend on how the batch reaches the engine: folded into rows (shared
    right operand) or columns (shared left operand), run as a batched GEMM, through einsum or
    vmap, the same plan and the same bits, also where the matrices' own exponents differ so much
    that exact scheme II's bound of one matrix and of all rows together differ."""
    A, B = _huge_in_their_own_columns(dtype, device)
    batch, _, k = A.shape
    expanded = B.expand(batch, k, 2)
    folded = ozaki.matmul(A, B)
    plan = ozaki.plan(A, expanded)
    assert str(ozaki.plan(A.reshape(batch, k), B)) == str(plan)
    assert_bitwise_equal(folded, ozaki.matmul(A, expanded))
    assert_bitwise_equal(folded, ozaki.einsum("bik,kj->bij", A, B))
    assert_bitwise_equal(folded, torch.func.vmap(ozaki.matmul, in_dims=(0, None))(A, B))
    left = ozaki.matmul(B.mT, A.mT)  # shared left operand: the batch folds into B's columns
    assert_bitwise_equal(left, ozaki.matmul(B.mT.expand(batch, 2, k), A.mT))
    assert_bitwise_equal(left, folded.mT)


def _far_below_its_scale(E, m, k, n):
    """A batch whose row (0, 2) has its products far below the row's scale (a fixed moduli count
    warns when the accuracy check samples it), and B shared."""
    a = torch.randn(E, m, k, dtype=f64, generator=seeded(7))
    a[0, 2] = 2.0 ** -40
    a[0, 2, 0] = 1.0
    b = torch.ones(k, n, dtype=f64)
    b[0] = 0
    return a, b


@pytest.mark.parametrize("form", ["folded rows", "batched", "vector", "folded columns"])
def test_plan_takes_matmuls_operands_and_reports_the_calls_plan(form):
    """ozaki.plan(a, b) takes what ozaki.matmul(a, b) takes and reports the plan of the product
    matmul runs, folded as matmul folds it: with a fixed count its warning is the call's (a
    shared right operand's batch is folded into A's rows, whose check samples other rows than
    the batched form's)."""
    a, b = _far_below_its_scale(6, 70, 64, 8)
    if form == "batched":
        b = b.expand(6, 64, 8)
    elif form == "vector":
        b = b[:, 1]
    elif form == "folded columns":
        a, b = b.mT, a.mT
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ozaki.matmul(a, b, moduli=16)
    plan = ozaki.plan(a, b, moduli=16)
    assert (plan.warning is not None) == bool(caught)
    assert str(ozaki.plan(a, b)) == str(ozaki.plan(*_folded_as_matmul(a, b)))


def _folded_as_matmul(a, b):
    """The 2-D or batched operands of the product ozaki.matmul(a, b) runs, folded by hand."""
    if b.dim() == 1:
        b = b.unsqueeze(-1)
    if b.dim() == 2 and a.dim() == 3:
        return a.reshape(-1, a.shape[-1]), b
    if a.dim() == 2 and b.dim() == 3:
        return a, b.mT.reshape(-1, b.shape[-2]).mT
    return a, b


@pytest.mark.parametrize("A, B, error, message", [
    ((6, 7, 4), (3, 2), ValueError, r"inner dimensions differ: A is \(6, 7, 4\) and B is \(3, 2\)"),
    ((2, 3, 4), (5, 4, 2), RuntimeError,
     r"the batch dimensions of A \(2,\) and B \(5,\) do not broadcast"),
    ((0, 4), (4,), ValueError, r"A is \(0, 4\) and B is \(4,\); an empty product has nothing"),
], ids=["inner", "batch", "empty"])
def test_plan_of_matmuls_operands_names_what_is_wrong(A, B, error, message):
    with pytest.raises(error, match="ozaki.plan: " + message):
        ozaki.plan(torch.ones(A, dtype=f64), torch.ones(B, dtype=f64))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_vectors_equal_the_matrix_products(device, dtype):
    """A 1-D operand is a row (a) or a column (b) vector: the same bits as the matrix product
    with the added dimension, squeezed."""
    v, a, w = operands([(9,), (9, 4), (5, 9)], dtype, seed=6, device=device)
    assert_bitwise_equal(ozaki.matmul(v, a), ozaki.matmul(v[None], a)[0])
    assert_bitwise_equal(ozaki.matmul(w, v), ozaki.matmul(w, v[:, None])[:, 0])
    assert_bitwise_equal(ozaki.matmul(v, v), ozaki.matmul(v[None], v[:, None])[0, 0])


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
def test_conjugate_views_give_the_bits_of_resolved_copies(device, dtype):
    """Lazily conjugated operands (x.conj(), is_conj set) give the bits of resolved contiguous
    copies on every path: folded into rows or columns and batched."""
    a, b, b3 = operands([(3, 4, 5), (5, 2), (3, 5, 2)], dtype, seed=17, device=device)
    for x, y in ((a.conj(), b), (a, b.conj()), (a[0].conj(), b3), (a.conj(), b3.conj())):
        assert x.is_conj() or y.is_conj()
        assert_bitwise_equal(ozaki.matmul(x, y), ozaki.matmul(x.resolve_conj().contiguous(),
                                                   y.resolve_conj().contiguous()))


# ---- Sizes that are not multiples of 8 ----------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shapes", [((13, 29), (29, 11)), ((2, 13, 29), (2, 29, 11)),
                                    ((3, 29), (29, 1))], ids=shape_id)
def test_odd_sizes_on_every_backend(device, dtype, backend, shapes):
    """Sizes that are not multiples of 8: "nearest" gives the correctly rounded product and the
    default stays within 4 units of roundoff of |A||B|, on every backend, 2-D and batched."""
    a, b = operands(shapes, dtype, seed=7, device=device)
    u = 2.0 ** -(53 if dtype == torch.float64 else 24)
    nearest = ozaki.matmul(a, b, backend=backend, rounding="nearest")
    default = ozaki.matmul(a, b, backend=backend)
    for e in range(a.shape[0] if a.dim() == 3 else 1):
        A, B = (a[e], b[e]) if a.dim() == 3 else (a, b)
        N, D = (nearest[e], default[e]) if a.dim() == 3 else (nearest, default)
        exact = accuracy.exact_matmul(A.cpu(), B.cpu())
        assert_bitwise_equal(N, accuracy.round_exact(exact, dtype).to(device))
        assert accuracy.componentwise_error(D, exact, A.cpu(), B.cpu()) <= 4 * u


# ---- Complex products ---------------------------------------------------------------------------


def exact_complex(a, b):
    """The exact complex product as (Re, Im) nested lists of Fractions, from each part's exact
    value: Re = sum(ar br - ai bi), Im = sum(ai br + ar bi)."""
    def fractions(part):
        return [[Fraction(x) for x in row] for row in part.cpu().double().tolist()]

    (m, k), n = a.shape, b.shape[1]
    ar, ai, br, bi = map(fractions, (a.real, a.imag, b.real, b.imag))
    re = [[sum(ar[i][l] * br[l][j] - ai[i][l] * bi[l][j] for l in range(k)) for j in range(n)]
          for i in range(m)]
    im = [[sum(ai[i][l] * br[l][j] + ar[i][l] * bi[l][j] for l in range(k)) for j in range(n)]
          for i in range(m)]
    return re, im


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("backend", BACKENDS)
def test_complex128_nearest_rounds_each_part_correctly(device, backend):
    """rounding="nearest": every real and imaginary part of a complex128 product is float() of
    its exact Fraction (correctly rounded), on every backend, 2-D and in a batch."""
    a, b = operands([(2, 4, 6), (2, 6, 3)], torch.complex128, seed=8, device=device)
    result = ozaki.matmul(a, b, backend=backend, rounding="nearest")
    for e in range(2):
        re, im = exact_complex(a[e], b[e])
        expected = torch.complex(torch.tensor([[float(x) for x in row] for row in re], dtype=f64),
                                 torch.tensor([[float(x) for x in row] for row in im], dtype=f64))
        assert_bitwise_equal(result[e], expected.to(device))
        assert_bitwise_equal(ozaki.matmul(a[e], b[e], backend=backend, rounding="nearest"), result[e])


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_complex64_nearest_rounds_each_part_once_to_float32(device):
    """rounding="nearest" on complex64: each part is its exact value rounded once, straight to
    float32 (ozaki.accuracy.round_exact, no double rounding through float64)."""
    a, b = operands([(4, 6), (6, 3)], torch.complex64, seed=9, device=device)
    result = ozaki.matmul(a, b, rounding="nearest")
    re, im = exact_complex(a, b)
    expected = torch.complex(accuracy.round_exact(re, torch.float32),
                             accuracy.round_exact(im, torch.float32))
    assert_bitwise_equal(result, expected.to(device))


def stacked_real(a, b):
    """The real product of docs/torch.md: rows [Re a, -Im a; Im a, Re a] (2m, 2k) and columns
    [Re b; Im b] (2k, n), on the CPU."""
    a, b = a.cpu(), b.cpu()
    rows = torch.cat([torch.cat([a.real, -a.imag], 1), torch.cat([a.imag, a.real], 1)], 0)
    return rows, torch.cat([b.real, b.imag], 0)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
@pytest.mark.parametrize("seed", [10, 11, 12])
def test_complex_default_is_no_less_accurate_than_native(device, dtype, seed):
    """Default mode: the max componentwise error of both parts against the exact product, each
    relative to the magnitudes of its 2k-term dot product (|Re a||Re b| + |Im a||Im b| for Re),
    is at most that of torch's native complex matmul."""
    a, b = operands([(12, 256), (256, 10)], dtype, seed=seed, device=device)
    rows, cols = stacked_real(a, b)
    exact = accuracy.exact_matmul(rows, cols)
    magnitudes = accuracy.exact_matmul(rows.abs(), cols.abs())

    def error(product):
        parts = torch.cat([product.real, product.imag], 0).cpu()
        return accuracy.componentwise_error(parts, exact, rows, cols, magnitudes=magnitudes)

    ozaki_error, native_error = error(ozaki.matmul(a, b)), error(torch.matmul(a, b))
    assert ozaki_error <= native_error, (ozaki_error, native_error)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_complex_special_values_follow_the_real_dot_products(device):
    """NaN and Inf follow each part's real dot product: (Inf + 0i)(1 + 0i) has Re = Inf, Im = NaN
    (Im sums Inf * 0), as docs/torch.md says."""
    a = torch.tensor([[complex(inf, 0.0), 1.0], [1.0, 2.0]], dtype=torch.complex128)
    b = torch.tensor([[1.0], [1.0]], dtype=torch.complex128)
    result = ozaki.matmul(a.to(device), b.to(device)).cpu()
    assert result[0, 0].real.item() == inf and math.isnan(result[0, 0].imag.item())
    assert result[1, 0].item() == 3.0


def _complex_operands(m, k, n):
    a = torch.complex(torch.rand(m, k, dtype=f64) - 0.5, torch.rand(m, k, dtype=f64) - 0.5)
    b = torch.complex(torch.rand(k, n, dtype=f64) - 0.5, torch.rand(k, n, dtype=f64) - 0.5)
    return a, b


@pytest.mark.parametrize("product", [ozaki.matmul, ozaki.gemm], ids=["matmul", "gemm"])
def test_complex_inner_dimension_limits_name_the_callers_k(product):
    """A complex product of inner dimension k runs as one real product of inner dimension 2k, so
    the limits on the inner dimension are those of 2k. A count or backend that k alone would allow
    is refused with both the caller's k and 2k named, not only an inner dimension that the caller
    never passed; the smallest count that 2k allows runs (coarsely: few moduli capture few
    bits)."""
    from ozaki.crt import MAX_INNER, smallest_moduli
    k = next(k for k in range(1, 4096) if smallest_moduli(k) < smallest_moduli(2 * k))
    too_few = smallest_moduli(k)
    a, b = _complex_operands(3, k, 2)
    with pytest.raises(ValueError, match=(
            rf"moduli = {too_few} is too few for inner dimension k = {2 * k}: .* \(a complex "
            rf"product of inner dimension k = {k} runs as one real product of inner dimension "
            rf"2k = {2 * k}\)$")):
        product(a, b, backend="crt", moduli=too_few)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fixed count's check finds it coarse
        enough = product(a, b, backend="crt", moduli=smallest_moduli(2 * k))
    assert enough.shape == (3, 2) and bool(torch.isfinite(enough).all())
    long_k = MAX_INNER // 2 + 1  # k within the limit, 2k past it
    a, b = _complex_operands(1, long_k, 1)
    with pytest.raises(ValueError, match=(
            rf"inner dimension k = {2 * long_k} is too large for backend='crt' .* \(a complex "
            rf"product of inner dimension k = {long_k} runs as one real product of inner "
            rf"dimension 2k = {2 * long_k}\)$")):
        product(a, b, backend="crt")


# ---- IEEE special values ------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("backend", ["auto", "crt", "fp16"])
@pytest.mark.parametrize("batched_b", [False, True], ids=["shared-b", "batched-b"])
def test_special_values_follow_ieee_in_a_batch(device, dtype, backend, batched_b):
    """NaN or Inf in a row of a matrix of the batch give that row the IEEE result of the plain
    dot product; the other entries are the exact sums of small integers."""
    g = seeded(13)
    a = torch.randint(-8, 9, (3, 5, 6), generator=g).to(dtype)
    b = torch.randint(-8, 9, (3, 6, 4) if batched_b else (6, 4), generator=g).to(dtype)
    a[0, 1, 2] = nan
    a[1, 3, 0] = inf
    a[2, 0, 4], a[2, 0, 5] = inf, -inf
    a[2, 4, 1] = -inf
    if batched_b:
        b[1, 0, 2] = 0.0   # Inf * 0 in matrix 1
    result = ozaki.matmul(a.to(device), b.to(device), backend=backend)
    assert result.shape == (3, 5, 4)
    for e in range(3):
        assert_special_values_follow_ieee(result[e], a[e], b[e] if batched_b else b)


# ---- out= and errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shapes", [((5, 7), (7, 4)), ((3, 5, 7), (7,)), ((7,), (7,))],
                         ids=shape_id)
def test_out_is_returned_and_holds_the_result(device, dtype, shapes):
    """out= returns out itself holding the result's bits."""
    a, b = operands(shapes, dtype, seed=14, device=device)
    expected = ozaki.matmul(a, b)
    out = torch.full_like(expected, nan)
    assert ozaki.matmul(a, b, out=out) is out
    assert_bitwise_equal(out, expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_out_of_the_wrong_shape_or_dtype_is_named(device):
    a, b = operands([(5, 7), (7, 4)], torch.float64, seed=15, device=device)
    assert_wrong_out_is_named("ozaki.matmul", lambda out: ozaki.matmul(a, b, out=out), (5, 4),
                              torch.complex128, device)


_t = ones


MATMUL_ERRORS = [
    ("dtypes", (_t(3, 4), _t(4, 2, dtype=torch.float32)), {}, TypeError,
     r"ozaki.matmul: a and b must have the same dtype, got torch.float64 and torch.float32"),
    ("real-and-complex", (_t(3, 4), _t(4, 2, dtype=torch.complex128)), {}, TypeError,
     r"ozaki.matmul: a and b must have the same dtype"),
    ("int", (_t(3, 4, dtype=torch.int64), _t(4, 2, dtype=torch.int64)), {}, TypeError,
     r"ozaki.matmul: a must be torch.float64, torch.float32, torch.complex128 or "
     r"torch.complex64, got torch.int64"),
    ("half-b", (_t(3, 4), _t(4, 2, dtype=torch.float16)), {}, TypeError,
     r"ozaki.matmul: b must be torch.float64, .* or torch.complex64, got torch.float16"),
    ("not-a-tensor", (_t(3, 4), [[1.0]]), {}, TypeError,
     r"ozaki.matmul: b must be a torch.Tensor, got list"),
    ("sparse-a", (_t(3, 4).to_sparse(), _t(4, 2)), {}, TypeError,
     r"ozaki.matmul: a must be a dense \(strided\) tensor, got layout torch.sparse_coo "
     r"\(a.to_dense\(\) gives one\)"),
    ("sparse-csr-b", (_t(3, 4), _t(4, 2).to_sparse_csr()), {}, TypeError,
     r"ozaki.matmul: b must be a dense \(strided\) tensor, got layout torch.sparse_csr"),
    ("0d-a", (_t(), _t(4, 2)), {}, ValueError,
     r"ozaki.matmul: a must be at least 1-D, got 0-D with shape \(\)"),
    ("0d-b", (_t(4), _t()), {}, ValueError,
     r"ozaki.matmul: b must be at least 1-D, got 0-D with shape \(\)"),
    ("inner", (_t(3, 4), _t(5, 2)), {}, ValueError,
     r"ozaki.matmul: a of shape \(3, 4\) and b of shape \(5, 2\) cannot be multiplied "
     r"\(4 != 5\)"),
    ("inner-vector", (_t(2, 3, 4), _t(5)), {}, ValueError,
     r"ozaki.matmul: a of shape \(2, 3, 4\) and b of shape \(5,\) cannot be multiplied"),
    ("meta", (_t(3, 4).to("meta"), _t(4, 2).to("meta")), {}, ValueError,
     r"ozaki.matmul: device must be cpu or cuda, got meta"),
    ("meta-batched", (_t(2, 3, 4).to("meta"), _t(4).to("meta")), {}, ValueError,
     r"ozaki.matmul: device must be cpu or cuda, got meta"),
    ("backend", (_t(3, 4), _t(4, 2)), {"backend": "x"}, ValueError,
     r"ozaki.matmul: backend must be one of"),
    ("moduli-nearest", (_t(3, 4), _t(4, 2)), {"moduli": 8, "rounding": "nearest"}, ValueError,
     r"ozaki.matmul: rounding='nearest' plans the moduli its exact product needs; moduli does not "
     r"apply to it"),
]


test_errors_name_the_argument = error_test(ozaki.matmul, MATMUL_ERRORS)


def test_batches_that_do_not_broadcast_raise_like_torch():
    """Batch dimensions that do not broadcast raise the RuntimeError torch.matmul raises, naming
    the arguments and their shapes."""
    a, b = _t(2, 3, 4), _t(3, 4, 5)
    with pytest.raises(RuntimeError):
        torch.matmul(a, b)
    with pytest.raises(RuntimeError, match=r"ozaki.matmul: the batch dimensions of a \(2,\) and b "
                                           r"\(3,\) do not broadcast \(a is \(2, 3, 4\), b is "
                                           r"\(3, 4, 5\)\)"):
        ozaki.matmul(a, b)


@pytest.mark.cuda
def test_operands_on_different_devices_are_named():
    a, b = operands([(3, 4), (4, 2)], torch.float64, seed=16, device="cpu")
    with pytest.raises(ValueError, match=r"ozaki.matmul: a and b must be on the same device"):
        ozaki.matmul(a, b.cuda())
    with pytest.raises(ValueError, match=r"ozaki.matmul: out must have the result's device"):
        ozaki.matmul(a.cuda(), b.cuda(), out=torch.empty(3, 2, dtype=torch.float64))
