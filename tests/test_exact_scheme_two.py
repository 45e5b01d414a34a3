"""Exact scheme II (ozaki::gemm_crt_exact; docs/accuracy.md, "Exact scheme II"): rows scaled by
powers of two to integers, the exact product rebuilt from up to 40 INT8 residue GEMMs and rounded
once. Every result is checked against the exact product rounded once (integer references), on the
CPU and CUDA with the same bits; the planner takes it where it is the cheapest exact plan."""

import functools
import math
import random
from fractions import Fraction

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_pair, seeded
from ozaki import accuracy
from ozaki import crt

GEMMS = {torch.float64: ozaki.dgemm, torch.float32: ozaki.sgemm}


def correctly_rounded(A, B):
    """The exact A @ B rounded once to A's dtype (Python integers; batches element by element)."""
    if A.dim() == 3:
        return torch.stack([correctly_rounded(a, b) for a, b in zip(A, B)])
    exact = accuracy.exact_matmul(A.cpu(), B.cpu())
    return accuracy.round_exact(exact, A.dtype)


def integer_bound(A, B):
    """max_ij sum_l |A'_il| |B'_lj| for the rows of A and columns of B scaled by 2^E to integers
    (E: minus the exponent of the lowest set bit), as gemm_crt_exact scales them: a bound its
    moduli must cover."""
    def scaled(rows):
        out = []
        for row in rows:
            fractions = [abs(Fraction(x)) for x in row]
            lowest = min((lowest_bit(f) for f in fractions if f), default=0)
            out.append([f / Fraction(2) ** lowest for f in fractions])
        return out
    a = scaled(A.double().tolist())
    b = scaled(B.double().t().tolist())
    return max(sum(x * y for x, y in zip(r, c)) for r in a for c in b)


def lowest_bit(f: Fraction) -> int:
    """The exponent of the lowest set bit of a dyadic f > 0."""
    n, d = f.numerator, f.denominator
    return (n & -n).bit_length() - d.bit_length()


def exact_op(A, B, moduli):
    """ozaki::gemm_crt_exact of A @ B with the rows' integer exponents."""
    a, bt = A.contiguous(), B.t().contiguous()
    stats_a, stats_b = ozaki._ops.row_stats(a), ozaki._ops.row_stats(bt)
    return ozaki._ops.gemm_crt_exact(a, bt, stats_a, stats_b, moduli)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("phi", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("shape", [(9, 37, 6), (33, 64, 17), (1, 129, 1)])
def test_nearest_is_the_exact_product_rounded_once(device, dtype, phi, shape):
    m, k, n = shape
    A, B = phi_pair(m, k, n, phi, seed=int(10 * phi) + m, dtype=dtype, device=device)
    plan = ozaki.plan(A, B, rounding="nearest")
    assert plan.backend == "crt" and plan.exact and plan.rounding == "nearest"
    C = GEMMS[dtype](A, B, rounding="nearest")
    assert_bitwise_equal(C.cpu(), correctly_rounded(A, B))
    if device == "cuda":
        assert_bitwise_equal(C.cpu(), GEMMS[dtype](A.cpu(), B.cpu(), rounding="nearest"))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("phi", [3.0, 4.0])
def test_default_takes_exact_scheme_two_where_truncation_cannot_bound(device, phi):
    """phi 3 and 4 rows: the estimate cannot resolve every entry, so no truncated plan (wide or
    not) can be shown to meet the bound; the default takes exact scheme II, not scheme I's dozens
    of GEMMs."""
    A, B = phi_pair(48, 96, 40, phi, seed=3, device=device)
    plan = ozaki.plan(A, B)
    assert plan.backend == "crt" and plan.exact, str(plan)
    assert plan.reason.startswith("exact scheme II")
    assert_bitwise_equal(ozaki.dgemm(A, B).cpu(), correctly_rounded(A, B))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_batched_and_complex(device):
    g = seeded(5)
    A = accuracy.phi_matrix(3 * 20, 50, 1.0, generator=g).reshape(3, 20, 50).to(device)
    B = accuracy.phi_matrix(3 * 50, 12, 1.0, generator=g).reshape(3, 50, 12).to(device)
    C = ozaki.matmul(A, B, rounding="nearest")
    assert ozaki.plan(A, B, rounding="nearest").exact
    assert_bitwise_equal(C.cpu(), correctly_rounded(A, B))
    Z = torch.complex(A[0], A[1])
    W = torch.complex(B[0], B[2])
    P = ozaki.zgemm(Z, W, rounding="nearest") if hasattr(ozaki, "zgemm") else ozaki.matmul(
        Z, W, rounding="nearest")
    real = correctly_rounded(torch.cat([A[0], -A[1]], 1), torch.cat([B[0], B[2]], 0))
    imag = correctly_rounded(torch.cat([A[0], A[1]], 1), torch.cat([B[2], B[0]], 0))
    assert_bitwise_equal(P.real.cpu(), real)
    assert_bitwise_equal(P.imag.cpu(), imag)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("condition", [1e6, 1e12])
def test_cancellation(device, condition):
    """Dot products cancelling down to 2^-40 |A||B| and below (GenDot pairs on the diagonal)."""
    A, B = accuracy.gendot_matrices(12, 64, 12, condition, generator=seeded(int(condition) % 97))
    A, B = A.to(device), B.to(device)
    assert ozaki.plan(A, B, rounding="nearest").exact
    assert_bitwise_equal(ozaki.dgemm(A, B, rounding="nearest").cpu(), correctly_rounded(A, B))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_subnormal_overflowing_and_zero_results(device, dtype):
    """Results below the normal range round onto the subnormal grid, results past the largest
    finite value become +-Inf, exact zeros come out +0."""
    tiny, huge = (1e-160, 1e160) if dtype == torch.float64 else (1e-21, 1e21)
    g = seeded(9)
    A = torch.randn(6, 10, generator=g, dtype=torch.float64)
    B = torch.randn(10, 5, generator=g, dtype=torch.float64)
    A[:2] *= tiny
    A[2:4] *= huge
    B[:, :2] *= tiny
    B[:, 2:4] *= huge
    A[5] = 0.0
    A, B = A.to(dtype).to(device), B.to(dtype).to(device)
    C = GEMMS[dtype](A, B, rounding="nearest")
    assert ozaki.plan(A, B, rounding="nearest").exact
    expected = correctly_rounded(A, B)
    assert torch.isinf(expected).any() and (expected[:2, :2] != 0).any()
    assert_bitwise_equal(C.cpu(), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_operator_with_every_moduli_count(device, dtype):
    """gemm_crt_exact with 1 .. 40 moduli: every count whose product covers the integer bound gives
    the exact product rounded once (k not a multiple of 8, odd sizes: the tile edges)."""
    g = seeded(11)
    A = accuracy.phi_matrix(5, 13, 1.0, generator=g, dtype=dtype)
    B = accuracy.phi_matrix(13, 3, 1.0, generator=g, dtype=dtype)
    expected = correctly_rounded(A, B)
    needed = crt.exact_moduli(integer_bound(A, B))
    assert needed is not None
    for moduli in range(needed, crt.MAX_EXACT_MODULI + 1):
        C = exact_op(A.to(device), B.to(device), moduli)
        assert_bitwise_equal(C.cpu(), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_small_integers_with_one_to_three_moduli(device):
    """Products of a few bits need one to three moduli (P of 8 to 24 bits, below one 32-bit limb of
    headroom): the exact product still."""
    g = seeded(12)
    A = torch.randint(-3, 4, (5, 6), generator=g).double()
    B = torch.randint(-3, 4, (6, 4), generator=g).double()
    assert crt.exact_moduli(integer_bound(A, B)) <= 2
    for moduli in (1, 2, 3):
        if crt.exact_moduli(integer_bound(A, B)) <= moduli:
            C = exact_op(A.to(device), B.to(device), moduli)
            assert_bitwise_equal(C.cpu(), A @ B)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_shifts_past_the_power_table(device):
    """Entries 2^260 above the row's lowest bit (past the 256 tabulated shifts) take residues by
    square-and-multiply: 2^260 - 2^260 + 3 = 3 comes out exact."""
    A = torch.tensor([[2.0 ** 260, -(2.0 ** 260), 3.0, 1.0]], dtype=torch.float64, device=device)
    B = torch.tensor([[1.0], [1.0], [1.0], [0.0]], dtype=torch.float64, device=device)
    assert exact_op(A, B, 4).item() == 3.0


def symmetric_residue(x: int, p: int) -> int:
    """x mod p in [-(p - 1)/2, (p - 1)/2] (odd p) or [-128, 127] (p = 256)."""
    r = x % p
    return r - p if r > (p - 1) // 2 else r


def rounded_scaled(a: float, exponent: int) -> int:
    """RN(a 2^exponent) as an integer, ties to even (0 for NaN and +-Inf)."""
    if not math.isfinite(a):
        return 0
    return round(Fraction(a) * Fraction(2) ** exponent)  # round(): half to even


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("moduli", [1, 2, 15, 17, 18, 24, 25, 40])
def test_left_residues_are_the_symmetric_residues_of_the_scaled_integers(device, moduli):
    """ozaki::crt_left_residues for exact and wide plans: every residue is that of RN(a 2^E) for
    its row's exponent E, checked against Python integers. The rows span 2^-300 to 2^300, with
    exponents that round some entries, make others integers up to about 2^400 (shifts past the
    256 tabulated ones) and reach NaN, +-Inf, zeros and both signs; k = 37 (not a multiple of 8 or
    16: the unaligned loads and the padded rows); 24 moduli or fewer take the unrolled CUDA kernel,
    more the run-time loop."""
    g = seeded(30 + moduli)
    m, k = 6, 37
    exponents = torch.randint(-300, 300, (m, k), generator=g)
    values = torch.ldexp(torch.rand(m, k, generator=g, dtype=torch.float64) + 0.5, exponents)
    values = torch.where(torch.rand(m, k, generator=g) < 0.5, -values, values)
    values[0, 3], values[1, 5], values[2, 7], values[3, 0] = 0.0, -0.0, math.inf, math.nan
    values[4, :] = torch.randint(-9, 10, (k,), generator=g).double()  # small integers, E = 0
    row_exponents = torch.tensor([100, 0, 120, -5, 0, 310], dtype=torch.int32)
    residues = ozaki._ops.crt_left_residues(values.to(device), row_exponents.to(device), moduli,
                                            True).cpu()
    assert residues.shape == crt.left_residue_shape((m, k), moduli)
    for r in range(m):
        scaled = [rounded_scaled(a, int(row_exponents[r])) for a in values[r].tolist()]
        for i, p in enumerate(crt.EXACT_MODULI[:moduli]):
            assert residues[i, r, :k].tolist() == [symmetric_residue(x, p) for x in scaled], (r, p)


def test_moduli_are_pairwise_coprime_and_fit_int8():
    from math import gcd
    for i, p in enumerate(crt.EXACT_MODULI):
        assert 2 <= p <= 256
        assert all(gcd(p, q) == 1 for q in crt.EXACT_MODULI[:i])


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_operator_argument_errors(device):
    a = torch.ones(3, 4, dtype=torch.float64, device=device)
    bt = torch.ones(2, 4, dtype=torch.float64, device=device)
    stats_a, stats_b = ozaki._ops.row_stats(a), ozaki._ops.row_stats(bt)
    ea, eb = ozaki._ops.integer_exponents(stats_a), ozaki._ops.integer_exponents(stats_b)
    op = torch.ops.ozaki.gemm_crt_exact
    with pytest.raises(RuntimeError, match=r"moduli must be in \[1, 40\], got 41"):
        op(a, bt, ea, eb, stats_a[2], stats_b[2], 41, 0)
    with pytest.raises(RuntimeError, match="exponent_a"):
        op(a, bt, ea.long(), eb, stats_a[2], stats_b[2], 8, 0)
    with pytest.raises(RuntimeError, match="exponent_b"):
        op(a, bt, ea, eb[:1], stats_a[2], stats_b[2], 8, 0)


def test_planner_prefers_the_cheapest_exact_plan():
    A, B = phi_pair(40, 300, 30, 0.5, seed=1)
    nearest = ozaki.plan(A, B, rounding="nearest")
    scheme_one = ozaki.plan(A, B, rounding="nearest", backend="int8")
    assert nearest.exact and nearest.backend == "crt"
    assert nearest.gemms < scheme_one.gemms
    assert "exact integers" in str(nearest)
    # a caller's scheme-I options and fixed moduli keep their paths
    assert ozaki.plan(A, B, rounding="nearest", fast=True).backend == "int8"
    fixed = ozaki.plan(A, B, backend="crt", moduli=14)
    assert fixed.moduli == 14 and not fixed.exact
    # integers of a few bits: the exact INT8 split is cheaper still
    small = torch.randint(-3, 4, (20, 30)).double()
    assert ozaki.plan(small, small.t()).backend == "int8"


def test_crt_nearest_says_why_scheme_one_runs():
    """backend="crt" with rounding="nearest" that runs INT8 scheme I says why in its reason,
    where scheme II is not considered (fast or slices given, k past its limit) too."""
    A, B = phi_pair(4, 100, 3, 0.5, seed=2)
    why = {"slices or fast given": ozaki.plan(A, B, backend="crt", rounding="nearest", fast=True)}
    long_a, long_b = phi_pair(2, crt.MAX_INNER + 1, 2, 0.5, seed=3)
    why[f"k = {crt.MAX_INNER + 1} is past scheme II's limit {crt.MAX_INNER}"] = ozaki.plan(
        long_a, long_b, backend="crt", rounding="nearest")
    for reason, plan in why.items():
        assert plan.backend == "int8" and plan.rounding == "nearest"
        assert plan.reason == f"correctly rounded (INT8 scheme I: {reason})"
        assert plan.warning is None


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_row_bounds_are_the_largest_integer_norm_bound(device):
    """crt_row_bounds: the largest bit span over all rows, and max over usable rows of
    2^(E - e) / g (E = span - tau, norm scale g 2^e), E - e clamped to +-1000, computed here with
    Fractions and rounded once; zero and NaN rows are left out of the bound, not of the span."""
    g = seeded(40)
    rows = 3000  # several rows per thread of the CUDA block
    tau = torch.randint(-1100, 1100, (rows,), generator=g, dtype=torch.int32)
    span = torch.randint(0, 60, (rows,), generator=g, dtype=torch.int32)
    nonfinite = torch.rand(rows, generator=g) < 0.1
    codes = torch.randint(-20000, 20000, (rows,), generator=g, dtype=torch.int32)
    span[:5] = torch.tensor([0, 0, 70, 3, 1], dtype=torch.int32)  # zero rows; the largest span
    nonfinite[2] = True  # the largest span is in a NaN/Inf row
    stats = (tau, span, nonfinite)
    rows_of = zip(tau.tolist(), span.tolist(), nonfinite.tolist(), codes.tolist())
    expected_bound = max((Fraction(2) ** max(-1000, min(1000, s - t - (c // 16 - 4)))
                          / (16 + c % 16) for t, s, f, c in rows_of if s > 0 and not f), default=0)
    got = ozaki._ops.crt_row_bounds(tuple(x.to(device) for x in stats), codes.to(device)).cpu()
    assert got.tolist() == [70.0, float(expected_bound)]
    empty = torch.zeros(0, dtype=torch.int32, device=device)
    none = ozaki._ops.crt_row_bounds((empty, empty, empty.bool()), empty).cpu()
    assert none.tolist() == [0.0, 0.0]


def column_exponents_reference(x):
    """Per element and column l: the largest exponent e with |x'_il| < 2^e over the usable rows i
    (x' the rows scaled by 2^E to integers), -10000 where none; from Fractions."""
    out = []
    for rows in x.reshape(-1, x.shape[-2], x.shape[-1]).double().tolist():
        usable = [r for r in rows if any(r) and all(map(math.isfinite, r))]
        scaled = [[abs(Fraction(v)) / Fraction(2) ** min(lowest_bit(abs(Fraction(w)))
                                                         for w in r if w) for v in r]
                  for r in usable]
        out += [max((int(r[l]).bit_length() for r in scaled if r[l]), default=-10000)
                for l in range(x.shape[-1])]
    return out


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("shape", [(9, 7), (3, 5, 6)])
@pytest.mark.parametrize("chunked", [False, True])
def test_column_exponents(device, shape, chunked, monkeypatch):
    """product._column_exponents: the exponents of exact scheme II's entry bound, with zero and
    NaN rows and zero columns left out, in one chunk of rows or a row per chunk."""
    from ozaki.product import _column_exponents
    x = torch.randn(shape, generator=seeded(41), dtype=torch.float64)
    x = x * torch.exp2(torch.randint(-40, 40, shape, generator=seeded(42)).double())
    x[..., 0, :] = 0.0
    x[..., 1, 2] = float("nan")
    x[..., 2:, 1] = 0.0
    x = x.to(device)
    if chunked:
        monkeypatch.setattr("ozaki.product._BOUND_CHUNK_ENTRIES", 1)
    stats = ozaki._ops.row_stats(x.reshape(-1, shape[-1]))
    got = _column_exponents(x, stats)
    assert got.dtype == torch.int64
    assert got.cpu().tolist() == column_exponents_reference(x.cpu())


def entry_bound_sum_reference(u, v):
    """crt_entry_bound_sum in Python floats (IEEE float64): per element, lane t adds the terms
    l = t, t + 128, ... in turn, the 128 lanes are added pairwise, and the largest element wins."""
    sums = []
    for ue, ve in zip(u.tolist(), v.tolist()):
        lanes = [0.0] * 128
        for l, (x, y) in enumerate(zip(ue, ve)):
            e = float(x) + float(y)
            lanes[l % 128] += 0.0 if e < -2000 else 2.0 ** min(max(e, -1000), 900)
        stride = 64
        while stride:
            lanes[:stride] = [lanes[t] + lanes[t + stride] for t in range(stride)]
            stride //= 2
        sums.append(lanes[0])
    return max(sums)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (1, 127), (1, 1000), (3, 300)])
def test_entry_bound_sum_is_one_order_on_every_device(device, dtype, shape):
    """ozaki::crt_entry_bound_sum adds in csrc/crt.h's fixed order, bit for bit the reference's.
    Each element's first term is 2^60 and the others lie below half its unit in the last place,
    so a plain left-to-right sum loses every one of them where the lanes keep their sum; with
    empty columns (-10000, adding nothing) and clamped small terms; within k roundings of the
    exact sum."""
    draw = random.Random(43)
    elements, k = shape
    v = [[draw.randrange(-40, 40) for _ in range(k)] for _ in range(elements)]
    u = [[draw.randrange(-80, 8) - y for y in row] for row in v]
    for ue, ve in zip(u, v):
        ue[0] = 60 - ve[0]
        ue[3::7] = [-10000] * len(ue[3::7])
        ve[2::13] = [-1500] * len(ve[2::13])
    u_t, v_t = (torch.tensor(x, device=device).to(dtype) for x in (u, v))
    got = ozaki._ops.crt_entry_bound_sum(u_t, v_t)
    assert got.dtype == torch.float64 and got.dim() == 0
    expected = entry_bound_sum_reference(torch.tensor(u), torch.tensor(v))
    assert got.item() == expected
    terms = [[Fraction(2) ** min(max(x + y, -1000), 900) if x + y >= -2000 else Fraction(0)
              for x, y in zip(ue, ve)] for ue, ve in zip(u, v)]
    if k >= 300:  # the lanes keep what a left-to-right sum loses (not Python's sum: compensated)
        left_to_right = max(functools.reduce(lambda s, t: s + float(t), row, 0.0)
                            for row in terms)
        assert expected > left_to_right == 2.0 ** 60
    exact = max(sum(row) for row in terms)
    assert abs(Fraction(expected) - exact) <= exact * Fraction(k, 1 << 52)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_entry_bound_sum_clamps_its_terms(device):
    """A term's exponent is clamped to [-1000, 900]; below -2000 it adds nothing; the largest
    element's sum is returned."""
    def entry_bound_sum(u, v):
        return ozaki._ops.crt_entry_bound_sum(torch.tensor(u, device=device),
                                              torch.tensor(v, device=device)).item()

    assert entry_bound_sum([[-1500, -10000]], [[0, 0]]) == 2.0 ** -1000
    assert entry_bound_sum([[1200, 0]], [[0, -3000]]) == 2.0 ** 900
    assert entry_bound_sum([[3, -2], [1, 0]], [[0, 0], [0, 0]]) == 8.25


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_entry_bound_sum_names_a_bad_argument(device):
    u = torch.zeros(2, 5, dtype=torch.int64, device=device)
    with pytest.raises(RuntimeError, match=r"exponents_a and exponents_b must be \(elements, k\) of "
                                           r"one shape with at least one element, got \[2, 5\] and "
                                           r"\[2, 4\]"):
        ozaki._ops.crt_entry_bound_sum(u, u[:, :4].contiguous())
    with pytest.raises(RuntimeError, match=r"must both be int64 or both float64, got Long and Int"):
        ozaki._ops.crt_entry_bound_sum(u, u.int())
    with pytest.raises(RuntimeError, match=r"at least one element, got \[0, 5\]"):
        ozaki._ops.crt_entry_bound_sum(u[:0], u[:0])
