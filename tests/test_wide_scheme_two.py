"""Wide scheme II (docs/accuracy.md, "Wide scheme II"): rows scaled by powers of two to norms past
scheme II's 62 bits, rounded to integers, their product rebuilt exactly by exact scheme II's
operator and rounded once. The operator's bits are checked against integer references, the plan's
accuracy against exact products and the native product, and CPU against CUDA."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_pair, seeded
from ozaki import _ops, accuracy
from ozaki import crt

#: Wide data (phi = 2) and an inner dimension long enough that truncated scheme II's 62-bit scales
#: cannot meet the bound: the default plans wide scheme II.
WIDE_SHAPE = (24, 2048, 20)


def rounded_integers(rows, exponents):
    """RN(x 2^E) of every entry (ties to even) as Python integers, E per row."""
    return [[round(Fraction(x) * Fraction(2) ** e) for x in row]
            for row, e in zip(rows.double().tolist(), exponents.tolist())]


def reference(A, B, exponent_a, exponent_b):
    """The product of A's rows and B's columns scaled by 2^E and rounded to integers, computed
    exactly and rounded once after scaling back (Python's round is ties to even)."""
    a = rounded_integers(A.cpu(), exponent_a.cpu())
    b = rounded_integers(B.cpu().t(), exponent_b.cpu())
    exact = np.empty((len(a), len(b)), dtype=object)
    for i, (row, ea) in enumerate(zip(a, exponent_a.tolist())):
        for j, (col, eb) in enumerate(zip(b, exponent_b.tolist())):
            exact[i, j] = Fraction(sum(x * y for x, y in zip(row, col))) / Fraction(2) ** (ea + eb)
    return accuracy.round_exact(exact, A.dtype)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_operator_rounds_scaled_entries_then_the_product_once(device, dtype):
    """Exponents below the rows' integer exponents: entries with bits below 2^-E are rounded to
    integers (ties to even included: halves are planted), the rest is exact."""
    m, k, n = 7, 45, 5
    A, B = phi_pair(m, k, n, 2.0, seed=31, dtype=dtype, device=device)
    a, bt = A.contiguous(), B.t().contiguous()
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    g = seeded(32)
    exponent_a = (20 - stats_a[0] + torch.randint(-3, 4, (m,), generator=g).to(device)).int()
    exponent_b = (30 - stats_b[0] + torch.randint(-3, 4, (n,), generator=g).to(device)).int()
    a[0, :3] = torch.tensor([2.5, 3.5, -0.5], dtype=dtype) * 2.0 ** -exponent_a[0].item()
    moduli = crt.exact_moduli(Fraction(k) * 2 ** 54)
    C = _ops.gemm_crt_exact(a, bt, stats_a, stats_b, moduli, exponents=(exponent_a, exponent_b))
    expected = reference(a, bt.t(), exponent_a, exponent_b)
    assert_bitwise_equal(C.cpu(), expected)
    unscaled = accuracy.round_exact(accuracy.exact_matmul(a.cpu(), bt.t().cpu()), dtype)
    assert not torch.equal(C.cpu(), unscaled)  # the rounding of the entries shows
    if device == "cuda":
        a, bt = a.cpu(), bt.cpu()
        cpu = _ops.gemm_crt_exact(a, bt, _ops.row_stats(a), _ops.row_stats(bt), moduli,
                                  exponents=(exponent_a.cpu(), exponent_b.cpu()))
        assert_bitwise_equal(C.cpu(), cpu)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("t", [0, 33, 140])
def test_wide_exponents_are_the_norm_scales_times_the_budget(device, t):
    """ozaki::crt_wide_exponents: floor(log2 c) + t for a usable row's norm scale c = (16 + f)
    2^(e - 4) (code 16 e + f, e of either sign), exact scheme II's bit_span - tau for a zero row or
    one holding NaN/Inf."""
    A = phi_pair(9, 20, 1, 4.0, seed=33, device=device)[0]
    A[2] = 0.0
    A[4, 3] = float("nan")
    A[5, 0] = float("-inf")
    A[6] *= 2.0 ** 300
    stats, norms = _ops.row_stats_with_norm_scales(A)
    got = _ops.crt_wide_exponents(norms, stats, t)
    assert got.dtype == torch.int32
    for i, (code, tau, span) in enumerate(zip(norms.tolist(), stats[0].tolist(),
                                              stats[1].tolist())):
        c = crt.scale_value(code)
        floor_log2 = c.numerator.bit_length() - c.denominator.bit_length()
        if Fraction(2) ** floor_log2 > c:
            floor_log2 -= 1
        assert got[i].item() == (floor_log2 + t if i not in (2, 4, 5) else span - tau), i
    with pytest.raises(RuntimeError, match=r"t must be in \[0, 4096\], got -1"):
        _ops.crt_wide_exponents(norms, stats, -1)
    with pytest.raises(RuntimeError, match=r"usable must be a contiguous 1-D Bool tensor of "
                                           r"length 9, got \[8\] Bool"):
        torch.ops.ozaki.crt_wide_exponents(norms, stats[0], stats[1], stats.usable[:8], 3)


def componentwise_error(C, A, B):
    """max_ij |C - AB|_ij / (|A||B|)_ij against exact products."""
    exact = accuracy.exact_matmul(A.cpu(), B.cpu())
    return accuracy.componentwise_errors(C.cpu(), exact, A.cpu(), B.cpu()).max().item()


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("seed", [5, 6])
def test_default_takes_wide_scheme_two_on_wide_data(device, seed):
    """(float32 rows need 62 bits only at spreads whose estimate no longer resolves: exact scheme II
    serves those.)"""
    dtype = torch.float64
    m, k, n = WIDE_SHAPE
    A, B = phi_pair(m, k, n, 2.0, seed=seed, dtype=dtype, device=device)
    plan = ozaki.plan(A, B)
    assert plan.backend == "crt" and plan.wide and not plan.exact, str(plan)
    assert plan.bits_captured > crt.MAX_SCALE_BITS
    assert plan.reason.startswith("error bound (wide scheme II")
    assert "powers of two" in str(plan)
    exact_plan = ozaki.plan(A, B, rounding="nearest")
    assert plan.moduli < exact_plan.moduli  # cheaper than the exact product
    gemm = ozaki.dgemm if dtype == torch.float64 else ozaki.sgemm
    C = gemm(A, B)
    error = componentwise_error(C, A, B)
    native = componentwise_error(A.cpu() @ B.cpu(), A, B)
    unit = 2.0 ** -(53 if dtype == torch.float64 else 24)
    assert error <= min(unit, native), (error, native)
    if device == "cuda":
        assert_bitwise_equal(C.cpu(), gemm(A.cpu(), B.cpu()))


def test_wide_plan_meets_its_criterion():
    """Every count of wide_crt_plan: the predicted truncation within 2^-(p + 3) of the magnitude,
    and the scaled norms' product within what the moduli recover; one count fewer fails."""
    k = 4096
    for magnitude in (0.5, 1e-3, 1e-6):
        plan = ozaki.planner.wide_crt_plan(k, torch.float64, magnitude)
        target = Fraction(magnitude) / 2 ** 56
        assert crt.wide_predicted_error(plan.moduli, k) <= target
        t_a, t_b = crt.wide_scale_bits(plan.moduli, k)
        g = crt.rounding_growth(k)
        product = math.prod(crt.EXACT_MODULI[:plan.moduli])
        assert 2 * ((1 << t_a) + g) * ((1 << t_b) + g) < product
        fewer = crt.wide_scale_bits(plan.moduli - 1, k)
        assert fewer is None or crt.wide_predicted_error(plan.moduli - 1, k) > target
    assert ozaki.planner.wide_crt_plan(k, torch.float64, 0.0) is None
    assert ozaki.planner.wide_crt_plan(k, torch.float64, 1e-60) is None  # past 40 moduli


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_batched_wide_plan_gives_each_element_its_own_bits(device):
    """One wide plan for the batch; each element's rows keep their own exponents, so an element
    planned alike alone gives the same bits."""
    m, k, n = WIDE_SHAPE
    g = seeded(41)
    A = accuracy.phi_matrix(2 * m, k, 2.0, generator=g).reshape(2, m, k).to(device)
    B = accuracy.phi_matrix(2 * k, n, 2.0, generator=g).reshape(2, k, n).to(device)
    plan = ozaki.plan(A, B)
    assert plan.wide, str(plan)
    C = ozaki.matmul(A, B)
    for e in range(2):
        alone = ozaki.plan(A[e], B[e])
        if alone.wide and alone.moduli == plan.moduli:
            assert_bitwise_equal(C[e].cpu(), ozaki.dgemm(A[e], B[e]).cpu())
    same = [e for e in range(2) if ozaki.plan(A[e], B[e]).moduli == plan.moduli]
    assert same, "no element planned alike: the comparison above checked nothing"
