"""The backends (ozaki.dgemm docstring, "backend"): Ozaki scheme II ("crt") against its exact
integer definition, INT8 scheme I ("int8"), the "auto" rule, option errors, special values, the
limits on k, and bitwise reproducibility.

Scheme II is checked operator by operator (ozaki._ops, as ozaki.gemm calls it) against Python
integers: the scaled operands A' = RN(a_il c_a_i) (ties to even; c_a_i the row's scale, a number
with a 5-bit significand held as a scale code), their exact product X = A'B' with |X| < P / 2, and
the result RN(X / (c_a_i c_b_j)) rounded once to the output format (ozaki.accuracy.round_exact
rounds float32 straight from the exact value).
"""

import math
from fractions import Fraction
from functools import cached_property

import numpy as np
import pytest
import torch

import ozaki
from helpers import (assert_bitwise_equal, assert_special_values_follow_ieee, cpu_and_cuda,
                     norm_scale_code, phi_pair, scale_of, seeded)
from ozaki import _ops, accuracy, crt, planner
from ozaki.slicing import SIGNIFICAND_BITS, digit_bits_for

GEMMS = {torch.float64: ozaki.dgemm, torch.float32: ozaki.sgemm}
DTYPES = [pytest.param(torch.float64, id="float64"), pytest.param(torch.float32, id="float32")]
BACKENDS = ("auto", "fp16", "int8", "crt")
INT8_BACKENDS = ["crt", "int8"]  # the backends built on INT8 GEMMs
#: A power of two that lifts entries of order 1 near the top of each format's range.
HUGE = {torch.float64: 2.0 ** 1000, torch.float32: 2.0 ** 120}
#: A power of two that takes entries of order 1 far down, still clear of the subnormals.
TINY_SCALE = {torch.float64: 2.0 ** -1000, torch.float32: 2.0 ** -90}
LEAST_SUBNORMAL = {torch.float64: 2.0 ** -1074, torch.float32: 2.0 ** -149}
nan, inf = float("nan"), float("inf")


def unit_roundoff(dtype):
    return 2.0 ** -SIGNIFICAND_BITS[dtype]


def correctly_rounded(A, B):
    return accuracy.round_exact(accuracy.exact_matmul(A.cpu(), B.cpu()), A.dtype)


class ExactProduct:
    """The exact A @ B (and |A||B|, when asked) of finite operands, for the errors of many C."""

    def __init__(self, A, B):
        self.A, self.B = A.cpu(), B.cpu()
        self.exact = accuracy.exact_matmul(self.A, self.B)

    @cached_property
    def magnitudes(self):
        return accuracy.exact_matmul(self.A.abs(), self.B.abs())

    def errors(self, C):
        """Per entry |C - AB| / (|A||B|)."""
        return accuracy.componentwise_errors(C.cpu(), self.exact, self.A, self.B,
                                             magnitudes=self.magnitudes)

    def max_error(self, C):
        return float(self.errors(C).max())

    def native_error(self):
        return self.max_error(self.A @ self.B)


def uniform_pair(m, k, n, seed, dtype=torch.float64):
    """Fresh (A, B) uniform in [-1/2, 1/2): cheap to draw for a long inner dimension."""
    g = seeded(seed)
    return (torch.rand(m, k, generator=g, dtype=dtype) - 0.5,
            torch.rand(k, n, generator=g, dtype=dtype) - 0.5)


def edge_value_pair(m, k, n, dtype, seed):
    """phi = 1 operands (m >= 5, n >= 4) with the rows and columns that stress the scaling: a zero
    and a -0 row of A, a zero and a -0 column of B, a row of subnormals, a row near the top of the
    exponent range whose products overflow with column 2 and stay finite with column 3, and a row
    mixing normal and subnormal magnitudes."""
    A, B = phi_pair(m, k, n, 1.0, seed, dtype=dtype)
    tiny = torch.finfo(dtype).tiny
    A[0] = 0.0
    A[1] = -0.0
    A[2] *= tiny * 2.0 ** -8
    A[3] *= HUGE[dtype]
    A[4, ::2] *= tiny
    B[:, 0] = 0.0
    B[:, 1] = -0.0
    B[:, 2] *= 2.0 ** 30
    B[:, 3] *= 2.0 ** -30
    return A, B


# ---- Scheme II against its exact definition ----------------------------------------------------


def crt_operands(A, B, device):
    """What ozaki.gemm hands scheme II: A's rows and B's columns as contiguous rows, their
    row_stats and the codes of their norm scales c (||row||_2 c <= 1)."""
    a, bt = A.contiguous().to(device), B.t().contiguous().to(device)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    norm_a = _ops.row_norm_scales(a, stats_a[0])
    norm_b = _ops.row_norm_scales(bt, stats_b[0])
    return a, bt, stats_a, stats_b, norm_a, norm_b


def crt_product(A, B, moduli_count, device, workspace=0, every_row_by_norm=False):
    """(C, a, bt, scale_a, scale_b): A @ B by _ops.gemm_crt with the scaling of ozaki.gemm,
    _ops.crt_row_scales of the norm scales with (t_a, t_b) = crt.scale_bits(moduli_count, k)
    (checked against its rule); every_row_by_norm: every row by its norm scale times 2^t instead."""
    a, bt, stats_a, stats_b, norm_a, norm_b = crt_operands(A, B, device)
    t_a, t_b = crt.scale_bits(moduli_count, A.shape[1])
    if every_row_by_norm:
        scale_a = crt.times_power_of_two(norm_a, t_a)
        scale_b = crt.times_power_of_two(norm_b, t_b)
    else:
        scale_a = _ops.crt_row_scales(norm_a, stats_a, t_a)
        scale_b = _ops.crt_row_scales(norm_b, stats_b, t_b)
        assert_scales_follow_the_rule(a, scale_a, norm_a, t_a)
        assert_scales_follow_the_rule(bt, scale_b, norm_b, t_b)
    C = _ops.gemm_crt(a, bt, scale_a, scale_b, stats_a, stats_b, moduli_count, workspace)
    return C, a, bt, scale_a, scale_b


def assert_scales_follow_the_rule(rows, codes, norm_codes, t):
    """_ops.crt_row_scales: a row keeps its norm scale times 2^t, unless the power of two 2^(t - nu)
    (the norm scale without its fraction f) already scales every entry to an integer: then that."""
    for row, code, norm in zip(rows.cpu().tolist(), codes.cpu().tolist(),
                               norm_codes.cpu().tolist()):
        power_of_two = scale_of(norm - norm % 16) * Fraction(2) ** t
        exact = all((Fraction(x) * power_of_two).denominator == 1 for x in row if math.isfinite(x))
        assert code == (norm - norm % 16 if exact else norm) + 16 * t, (row[:3], code, norm, t)


def scaled_integers(rows, codes):
    """RN(x c) for every entry x of each row and the scale c of its code, ties to even (round() on
    a Fraction rounds half to even), as Python ints: scheme II's A' (or B'^T)."""
    return [[round(Fraction(x) * scale_of(code)) for x in row] for row, code in zip(rows, codes)]


def scheme_two_reference(a, bt, scale_a, scale_b):
    """(X, scaled): the exact integer product X = A'B' and X / (c_a_i c_b_j), both (m, n) object
    arrays of Python ints and Fractions."""
    ca = [scale_of(code) for code in scale_a.cpu().tolist()]
    cb = [scale_of(code) for code in scale_b.cpu().tolist()]
    A_int = scaled_integers(a.cpu().tolist(), scale_a.cpu().tolist())
    B_int = scaled_integers(bt.cpu().tolist(), scale_b.cpu().tolist())
    X = np.empty((len(A_int), len(B_int)), dtype=object)
    scaled = np.empty(X.shape, dtype=object)
    for i, row in enumerate(A_int):
        for j, col in enumerate(B_int):
            X[i, j] = sum(x * y for x, y in zip(row, col))
            scaled[i, j] = X[i, j] / (ca[i] * cb[j])
    return X, scaled


def check_scheme_two_is_exact(A, B, moduli_count, device, every_row_by_norm=False):
    """gemm_crt returns RN(A'B' / (c_a c_b)) bit for bit, with |A'B'| < P / 2; returns the
    correctly rounded reference and the scale codes (scale_a, scale_b) as lists."""
    C, a, bt, scale_a, scale_b = crt_product(A, B, moduli_count, device,
                                             every_row_by_norm=every_row_by_norm)
    assert scale_a.dtype == scale_b.dtype == torch.int32
    X, scaled = scheme_two_reference(a, bt, scale_a, scale_b)
    largest = max(abs(x) for x in X.flat)
    assert 2 * largest < crt.moduli_product(moduli_count)
    expected = accuracy.round_exact(scaled, A.dtype)
    assert C.device.type == device
    assert_bitwise_equal(C, expected)
    return expected, (scale_a.cpu().tolist(), scale_b.cpu().tolist())


def fractional(codes):
    """Whether some scale has a significand other than 16 (f != 0): X / (c_a c_b) is then not a
    power-of-two scaling of X, and the reconstruction really divides."""
    return any(code % 16 != 0 for code in codes)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(7, 33, 5), (1, 1, 1), (16, 100, 9)])
@pytest.mark.parametrize("moduli_count", [1, 3, 8, 14, 16])
@pytest.mark.parametrize("phi", [0.5, 2.0])
@pytest.mark.parametrize("every_row_by_norm", [False, True])
def test_scheme_two_rounds_the_exact_scaled_integer_product_once(device, dtype, m, k, n,
                                                                 moduli_count, phi,
                                                                 every_row_by_norm):
    A, B = phi_pair(m, k, n, phi, seed=100 * moduli_count + k + int(10 * phi), dtype=dtype)
    _, (scale_a, scale_b) = check_scheme_two_is_exact(A, B, moduli_count, device,
                                                      every_row_by_norm)
    if every_row_by_norm:  # the reconstruction really divides
        assert fractional(scale_a + scale_b), (scale_a, scale_b)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("moduli_count", [1, 2])
def test_scheme_two_rounds_scaled_ties_to_even(device, dtype, moduli_count):
    # Nonzero integers below 2^(4 moduli) in rows of 5 scale (t = 3 for one modulus, 7 for two)
    # by c 2^t = (16 + f) 2^-6 or (16 + f) 2^-5, between 1/4 and 3/4: some entries land exactly
    # halfway between two integers.
    g = seeded(10 + moduli_count)
    shape = (2, 12, 5)
    magnitudes = torch.randint(1, 2 ** (4 * moduli_count), shape, generator=g)
    signs = torch.randint(0, 2, shape, generator=g) * 2 - 1
    a, bt = (magnitudes * signs).to(dtype)
    _, (scale_a, scale_b) = check_scheme_two_is_exact(a, bt.t(), moduli_count, device)
    scaled = [(Fraction(x) * scale_of(code), code)
              for rows, codes in ((a, scale_a), (bt, scale_b))
              for row, code in zip(rows.tolist(), codes) for x in row]
    ties = [(x, code) for x, code in scaled if x.denominator == 2]
    # ties that round down (even below) and up (odd below): ties away from zero fails one kind
    assert {math.floor(x) % 2 for x, _ in ties} == {0, 1}, ties
    # and some on rows whose scale is no power of two, where x (16 + f) is what gets rounded
    assert fractional([code for _, code in ties]), ties


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("moduli_count", [3, 14, 16])
@pytest.mark.parametrize("every_row_by_norm", [False, True])
def test_scheme_two_is_exact_on_zero_subnormal_and_huge_rows(device, dtype, moduli_count,
                                                             every_row_by_norm):
    A, B = edge_value_pair(7, 40, 6, dtype, seed=20 + moduli_count)
    # Nonzero rows whose norm bound is a power of two, so their scale is one too (f = 0): one
    # entry 2^-3 (a norm of exactly 2^-3), and 16 ones (a norm of exactly 4).
    A[5] = 0.0
    A[5, 7] = 2.0 ** -3
    B[:, 5] = 0.0
    B[:16, 5] = 1.0
    expected, (scale_a, scale_b) = check_scheme_two_is_exact(A, B, moduli_count, device,
                                                             every_row_by_norm)
    assert scale_a[5] % 16 == 0 and scale_b[5] % 16 == 0, (scale_a, scale_b)
    if every_row_by_norm:  # (the library scales rows of few bits by powers of two)
        assert fractional(scale_a) and fractional(scale_b), (scale_a, scale_b)
    # the case reaches what it is meant to: overflow, subnormal results, exact zeros
    assert expected[3, 2].isinf()
    assert ((expected != 0) & (expected.abs() < torch.finfo(dtype).tiny)).any()
    assert (expected[:2] == 0).all() and not torch.signbit(expected[:2]).any()
    assert (expected[:, :2] == 0).all() and not torch.signbit(expected[:, :2]).any()


def test_scale_codes_decode_and_take_powers_of_two():
    # scale_value against the decoding of the tests (helpers.scale_of), codes of either sign;
    # consecutive codes give increasing scales, and the code 16 e is the power of two 2^e
    codes = list(range(-80, 81)) + [-16 * 1100 + 5, 16 * 1100 + 11]
    values = [crt.scale_value(code) for code in codes]
    assert values == [scale_of(code) for code in codes]
    assert all(isinstance(v, Fraction) for v in values)
    assert all(low < high for low, high in zip(values[:160], values[1:161]))
    assert [crt.scale_value(16 * e) for e in (-3, 0, 2)] == [Fraction(1, 8), 1, 4]
    assert crt.scale_value(-5) == Fraction(27, 32)  # 16 (-1) + 11: 27 2^-5
    tensor = torch.tensor(codes, dtype=torch.int32)
    for t in (-7, 0, 1, 30, 62):
        scaled = crt.times_power_of_two(tensor, t)
        assert scaled.dtype == torch.int32
        assert [scale_of(code) for code in scaled.tolist()] == [v * Fraction(2) ** t
                                                                for v in values]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_norm_scales_are_the_largest_proven_for_every_row(device, dtype):
    A, B = edge_value_pair(10, 100, 6, dtype, seed=31)
    info = torch.finfo(dtype)
    A[5] = info.max                  # a norm of 10 max: beyond the format, not beyond the scale
    A[6, 1:] = 0.0                   # one entry: the norm is its magnitude
    A[7] = LEAST_SUBNORMAL[dtype]    # the least subnormal, k times
    A[8, :50] = 0.0
    A[9] = 1.0                       # a norm of exactly 10 on the 2^-16 grid of the row maximum
    for rows in (A, B.t()):
        a = rows.contiguous().to(device)
        tau = _ops.row_stats(a)[0]
        codes = _ops.row_norm_scales(a, tau)
        assert codes.dtype == torch.int32 and codes.device.type == device
        assert codes.shape == (a.shape[0],)
        for row, code, t in zip(rows.tolist(), codes.cpu().tolist(), tau.cpu().tolist()):
            c = crt.scale_value(code)
            square = sum(Fraction(x) ** 2 for x in row)
            assert square * c ** 2 <= 1, (row[:3], code)  # ||row||_2 c <= 1
            if square:
                # and the largest: the next scale up, at most 17/16 of c, fails even with the
                # 2^-16 grid's rounding up (a hair, here below 1/256 of the square)
                assert square * c ** 2 * Fraction(17, 16) ** 2 * (1 + Fraction(1, 256)) > 1, (
                    row[:3], code)
            else:  # the zero and -0 rows (and columns) of edge_value_pair
                assert code == -16 * t, (row[:3], code)
        if rows is A:
            # a norm of exactly 10: c = 25 2^-8 (10 c = 250/256; 26 2^-8 would give 260/256)
            assert codes[9].item() == -16 * 4 + 9
            assert crt.scale_value(codes[9].item()) == Fraction(25, 256)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("k", [(1 << 21) + 1, 5 << 20, 3 << 24])
def test_norm_scales_of_long_rows_stay_within_the_bound(device, k):
    """Rows past 2^21 entries near their maximum (square sums past 2^53, where the codes' products
    would overflow): the code is the kernel formula's (the sum rounded up to 53 bits,
    tests/helpers.py) and its scale keeps ||row||_2 c <= 1; the fused operator agrees."""
    value = 1.0 - 2.0 ** -24  # the largest float32 below 1: each entry adds 2^32 units
    a = torch.full((1, k), value, dtype=torch.float32, device=device)
    tau = _ops.row_stats(a)[0]
    code = _ops.row_norm_scales(a, tau).item()
    assert code == norm_scale_code(k << 32, tau.item())
    assert Fraction(value) ** 2 * k * crt.scale_value(code) ** 2 <= 1
    assert _ops.row_stats_with_norm_scales(a)[1].item() == code


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 7, 256, 257, 2049, 9001])
def test_row_stats_with_norm_scales_match_the_two_operators(device, dtype, k):
    # the fused call (one block of up to 1024 threads per row on CUDA, 9001 entries fill them all)
    # gives row_stats and row_norm_scales bit for bit, on rows of every kind: zero, -0,
    # subnormal, huge, mixed, NaN, +-Inf
    A, _ = edge_value_pair(9, k, 4, dtype, seed=40 + k)
    A[5, k // 2] = nan
    A[6, 0] = -inf
    A[7] = torch.finfo(dtype).max
    a = A.contiguous().to(device)
    stats, norms = _ops.row_stats_with_norm_scales(a)
    expected_stats = _ops.row_stats(a)
    for got, expected in zip(stats, expected_stats):
        assert got.dtype == expected.dtype and got.device == expected.device
        assert torch.equal(got, expected)
    assert torch.equal(norms, _ops.row_norm_scales(a, expected_stats[0]))
    assert stats[2].tolist() == [False] * 5 + [True, True, False, False]


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_crt_row_scales_keep_powers_of_two_only_where_they_are_exact(device):
    # codes of either sign, t from 0 to 62: the norm scale c = (16 + f) 2^(-nu - 4) times 2^t,
    # or its power of two 2^(-nu) times 2^t where 2^(t - nu) turns every multiple of
    # 2^(tau - span) into an integer (tau - span + t - nu >= 0)
    g = seeded(41)
    norm = torch.randint(-20000, 20000, (400,), generator=g, dtype=torch.int32)
    tau = torch.randint(-1100, 1100, (400,), generator=g, dtype=torch.int32)
    span = torch.randint(0, 1100, (400,), generator=g, dtype=torch.int32)
    for t in (0, 1, 31, 62):
        codes = _ops.crt_row_scales(norm.to(device), (tau.to(device), span.to(device)), t)
        assert codes.dtype == torch.int32 and codes.device.type == device
        for code, c, e, s in zip(codes.tolist(), norm.tolist(), tau.tolist(), span.tolist()):
            nu = -(c // 16)
            if e - s + t - nu >= 0:
                assert scale_of(code) == Fraction(2) ** (t - nu), (code, c, e, s, t)
            else:
                assert scale_of(code) == scale_of(c) * Fraction(2) ** t, (code, c, e, s, t)
    some_exact = _ops.crt_row_scales(norm, (tau, span), 62)
    assert (some_exact % 16 == 0).any() and (some_exact % 16 != 0).any()


def test_scale_operator_errors():
    with pytest.raises(RuntimeError,
                       match="ozaki::row_stats_with_norm_scales: a must be 2-D, got 1-D"):
        _ops.row_stats_with_norm_scales(torch.ones(4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="a must be float64 or float32, got Half"):
        _ops.row_stats_with_norm_scales(torch.ones(4, 3, dtype=torch.float16))
    codes = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="t must be in \\[0, 62\\], got 63"):
        _ops.crt_row_scales(codes, (codes, codes), 63)
    with pytest.raises(RuntimeError, match="t must be in \\[0, 62\\], got -1"):
        _ops.crt_row_scales(codes, (codes, codes), -1)
    with pytest.raises(RuntimeError, match="tau must be a contiguous 1-D Int tensor of length 4"):
        _ops.crt_row_scales(codes, (codes[:3], codes), 5)
    with pytest.raises(RuntimeError, match="bit_span must be a contiguous 1-D Int tensor"):
        _ops.crt_row_scales(codes, (codes, codes.long()), 5)
    with pytest.raises(RuntimeError, match="norm_scales must be 1-D, got 2-D"):
        _ops.crt_row_scales(codes.view(2, 2), (codes, codes), 5)


# ---- INT8 scheme I -----------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("phi", [0.5, 2.0, 4.0])
def test_int8_exact_split_is_correctly_rounded(device, dtype, phi):
    A, B = phi_pair(9, 130, 7, phi, seed=40 + int(10 * phi), dtype=dtype, device=device)
    full = ozaki.plan(A, B, backend="int8").full_split_slices
    plan = ozaki.plan(A, B, backend="int8", slices=full, fast=False)
    assert plan.backend == "int8" and plan.exact and plan.gemms == full * full
    C = GEMMS[dtype](A, B, backend="int8", slices=full, fast=False)
    # All pairs of the full split sum to the exact product; its compensated sum (then the cast to
    # float32) misses the correctly rounded value only for a product within about u^2 (u 2^-29 for
    # float32) of a rounding boundary, which random data never hits.
    expected = correctly_rounded(A, B)
    assert_bitwise_equal(C, expected)
    assert_bitwise_equal(GEMMS[dtype](A, B, backend="int8", rounding="nearest"), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("phi", [0.5, 2.0])
def test_int8_more_slices_converge_to_below_native(device, dtype, phi):
    A, B = phi_pair(10, 150, 8, phi, seed=50 + int(10 * phi), dtype=dtype)
    reference = ExactProduct(A, B)
    native, u = reference.native_error(), unit_roundoff(dtype)
    full = ozaki.plan(A, B, backend="int8").full_split_slices
    A, B = A.to(device), B.to(device)
    by_mode = {}
    for fast in (True, False):
        errors = [reference.max_error(GEMMS[dtype](A, B, backend="int8", slices=s, fast=fast))
                  for s in range(1, full + 1)]
        assert errors[0] > native  # one 6-bit slice is far from float accuracy
        for coarse, finer in zip(errors, errors[1:]):
            assert finer <= coarse + u, errors  # never worse by more than a rounding
            if coarse > 64 * u:
                assert finer <= coarse / 8, errors  # each slice adds 7 bits (some lost to fast)
        assert errors[-1] <= native, errors
        by_mode[fast] = errors
    # all pairs keep what fast mode drops
    assert all(a <= f + u for a, f in zip(by_mode[False], by_mode[True])), by_mode


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("k", [1, 16, 17, 1025, 2 ** 17, 2 ** 19 - 1, 2 ** 19, 2 ** 19 + 1])
def test_int8_digit_width(device, k):
    g = seeded(k)
    A = (torch.rand(1, k, generator=g) - 0.5).to(device)
    B = (torch.rand(k, 2, generator=g) - 0.5).to(device)
    plan = ozaki.plan(A, B, backend="int8")
    assert plan.backend == "int8" and plan.beta == digit_bits_for(k, "int8")
    assert plan.beta == (6 if k < 2 ** 19 else 5)  # k 2^(2 beta) < 2^31, beta <= 6


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_int8_extreme_digits_at_the_largest_k_of_six_bit_digits(device, dtype):
    # Entries in [1 - 2^-7, 1 - 2^-8] scale (tau = 0) to at least 63.5 2^-6: every leading digit
    # is the largest, 64, so the leading slice GEMM sums k = 2^19 - 1 products 2^12, reaching
    # 2^31 - 2^12, the most INT32 accumulation meets with 6-bit digits (at k = 2^19 it would be
    # 2^31, one past INT32: beta drops to 5 there).
    k = 2 ** 19 - 1
    g = seeded(61)
    A = 1 - 2.0 ** -8 * (1 + torch.rand(1, k, generator=g, dtype=dtype))
    B = 1 - 2.0 ** -8 * (1 + torch.rand(k, 1, generator=g, dtype=dtype))
    assert ozaki.plan(A, B, backend="int8").beta == 6
    exact = accuracy.exact_matmul(A, B)
    gemm, A, B = GEMMS[dtype], A.to(device), B.to(device)
    for options in ({"backend": "int8"}, {}):  # auto runs INT8 scheme I here too (k > 2^17)
        assert accuracy.ulps_from_nearest(gemm(A, B, **options), exact).max() <= 1, options
    assert_bitwise_equal(gemm(A, B, rounding="nearest"), accuracy.round_exact(exact, dtype))


# ---- rounding="nearest": the same bits with every backend --------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["phi 0.5", "phi 4", "edge values"])
def test_nearest_gives_the_same_bits_with_every_backend(device, dtype, case):
    if case == "edge values":
        A, B = edge_value_pair(7, 40, 6, dtype, seed=70)
    else:
        phi = 0.5 if case == "phi 0.5" else 4.0
        A, B = phi_pair(9, 65 if phi < 1 else 257, 7, phi, seed=71 + int(phi), dtype=dtype)
    expected = correctly_rounded(A, B)
    for backend in BACKENDS:
        C = GEMMS[dtype](A.to(device), B.to(device), backend=backend, rounding="nearest")
        assert C.device.type == device
        assert_bitwise_equal(C, expected)
    if case == "edge values":  # what the case is there for
        assert expected.isinf().any() and (expected[:2] == 0).all()
        assert ((expected != 0) & (expected.abs() < torch.finfo(dtype).tiny)).any()


# ---- Special values ----------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", INT8_BACKENDS)
def test_nan_and_inf_follow_ieee(device, dtype, backend):
    A = torch.tensor([[1.0, 2.0, 3.0], [inf, 1.0, 0.5], [-inf, 0.0, 1.0], [nan, 1.0, 1.0],
                      [inf, -inf, 1.0], [1.0, -1.0, 2.0], [0.0, -0.0, 0.0]], dtype=dtype)
    B = torch.tensor([[1.0, 0.0, -2.0, 1.0], [3.0, 1.0, 1.0, inf], [-1.0, 2.0, 4.0, 1.0]],
                     dtype=dtype)
    for options in ({}, {"rounding": "nearest"}):
        C = GEMMS[dtype](A.to(device), B.to(device), backend=backend, **options)
        assert_special_values_follow_ieee(C, A, B)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", INT8_BACKENDS)
def test_nonfinite_rows_leave_the_other_entries_alone(device, dtype, backend):
    A, B = phi_pair(8, 30, 6, 1.0, seed=80, dtype=dtype)
    A[2, 7], A[5, 0], B[11, 3] = inf, nan, -inf
    finite_rows, finite_cols = [0, 1, 3, 4, 6, 7], [0, 1, 2, 4, 5]
    options = {"backend": backend} if backend == "crt" else {"backend": backend, "slices": 7}
    gemm = GEMMS[dtype]
    C = gemm(A.to(device), B.to(device), **options).cpu()
    assert_special_values_follow_ieee(C[[2, 5]], A[[2, 5]], B)
    assert_special_values_follow_ieee(C[:, [3]], A, B[:, [3]])
    # the other entries are the finite product's (scheme II's plan ignores rows and columns that
    # meet NaN or Inf; scheme I's split of a row does not depend on the other rows)
    finite = gemm(A[finite_rows].to(device), B[:, finite_cols].to(device), **options).cpu()
    assert_bitwise_equal(C[finite_rows][:, finite_cols], finite)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", INT8_BACKENDS)
def test_zero_rows_and_exact_zero_results_are_plus_zero(device, dtype, backend):
    A, B = phi_pair(5, 24, 4, 1.0, seed=90, dtype=dtype)
    A[0] = 0.0
    A[1] = -0.0
    B[:, 0] = -0.0
    A[2, 1::2] = A[2, ::2]                               # pairs of equal entries ...
    B[:, 1] = torch.tensor([1.0, -1.0] * 12, dtype=dtype) * B[0, 1].abs()  # ... cancel exactly
    C = GEMMS[dtype](A.to(device), B.to(device), backend=backend).cpu()
    for zero in (C[0], C[1], C[:, 0], C[2, 1:2]):
        assert (zero == 0).all() and not torch.signbit(zero).any(), C
    assert (C[3:, 1:] != 0).all()


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", INT8_BACKENDS)
def test_overflowing_results_and_huge_inputs(device, dtype, backend):
    gemm, top = GEMMS[dtype], torch.finfo(dtype).max
    # Sums through +-Inf in a plain float loop that end at +-max; sums past the top overflow.
    A = torch.tensor([[top, top, -top], [-top, -top, top], [top, top / 2, 0.0],
                      [-top, 0.0, -top / 2]], dtype=dtype)
    B = torch.ones(3, 1, dtype=dtype)
    C = gemm(A.to(device), B.to(device), backend=backend).cpu()
    assert C[:, 0].tolist() == [top, -top, inf, -inf]
    # Entries above 2^977 (2^105 in float32) are scaled without overflow: scaling A up and B down
    # by powers of two (both exact: no subnormal appears) scales C by their product.
    A, B = phi_pair(6, 40, 5, 0.5, seed=100, dtype=dtype)
    huge, down = HUGE[dtype], TINY_SCALE[dtype]
    assert (A.abs() * huge > 2.0 ** (977 if dtype == torch.float64 else 105)).float().mean() > 0.9
    assert (B * down).abs().min() >= torch.finfo(dtype).tiny
    reference = gemm(A.to(device), B.to(device), backend=backend)
    assert_bitwise_equal(gemm((A * huge).to(device), (B * down).to(device), backend=backend),
                         reference * (huge * down))
    assert_bitwise_equal(gemm((A * huge).to(device), B.to(device), backend=backend),
                         reference * huge)
    # Near-max entries with results on both sides of the overflow threshold
    A[:, 0] = top * 0.75
    B = B / 64
    B[0, :] = torch.tensor([1.0, -1.0, 0.5, 1.25, 2.0], dtype=dtype)
    expected = correctly_rounded(A, B)
    C = gemm(A.to(device), B.to(device), backend=backend).cpu()
    assert expected.isinf().any() and expected.isfinite().any()
    assert torch.equal(C.isinf(), expected.isinf()) and torch.equal(C.signbit(), expected.signbit())
    finite = expected.isfinite()
    assert accuracy.ulps_from_nearest(C, accuracy.exact_matmul(A, B))[finite.numpy()].max() <= 1


# ---- The auto rule and the plans ---------------------------------------------------------------


def scheme_one_cost(plan):
    """The auto rule's cost in FP16-GEMM units: an INT8 GEMM counts half."""
    return plan.gemms * (1 if plan.backend == "int8" else 2)


def assert_meets_plan(C, A, B, plan, reference):
    """The accuracy the plan stands for: correctly rounded when exact or rounding="nearest", the
    predicted componentwise error plus the final rounding otherwise (every automatic plan has a
    finite prediction or is exact)."""
    u = unit_roundoff(A.dtype)
    if plan.exact or plan.rounding == "nearest":
        assert_bitwise_equal(C.cpu(), accuracy.round_exact(reference.exact, A.dtype))
    else:
        assert plan.predicted_error is not None and math.isfinite(plan.predicted_error), plan
        assert reference.max_error(C) <= plan.predicted_error + u, (plan, reference.max_error(C))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 33, 4097])  # k = MAX_INNER: test_crt_needs_k_below_2_to_the_17
def test_auto_picks_crt_for_phi_half_data(dtype, k):
    A, B = phi_pair(2, k, 3, 0.5, seed=110 + k, dtype=dtype)
    plan = ozaki.plan(A, B)
    assert plan.backend == "crt" and plan.gemms == plan.moduli
    assert plan == ozaki.plan(A, B, backend="crt")
    truncated = planner.crt_plan(k, dtype, product_magnitude(A, B))
    if plan.exact:  # exact scheme II needs fewer moduli than the truncated plan (short rows)
        assert plan.moduli < truncated.moduli
        assert plan.reason == f"exact scheme II: the truncated plan needs {truncated.moduli} moduli"
        plan = truncated
    assert plan.reason == "error bound"
    assert crt.smallest_moduli(k) <= plan.moduli <= crt.MAX_MODULI
    assert plan.bits_captured == crt.scale_bits(plan.moduli, k)[0]
    assert plan.predicted_error <= unit_roundoff(dtype)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("phi", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("k", [33, 1025])
def test_crt_default_no_worse_than_native(device, dtype, phi, k):
    A, B = phi_pair(8, k, 8, phi, seed=120 + k + int(10 * phi), dtype=dtype)
    reference = ExactProduct(A, B)
    plan = ozaki.plan(A, B)
    assert plan.backend == "crt" and plan.reason == "error bound"
    assert plan.predicted_error <= unit_roundoff(dtype)
    gemm, A, B = GEMMS[dtype], A.to(device), B.to(device)
    C = gemm(A, B)
    assert_bitwise_equal(C, gemm(A, B, backend="crt"))
    assert_bitwise_equal(C, gemm(A, B, backend="crt", moduli=plan.moduli))
    ours = reference.max_error(C)
    assert ours <= reference.native_error(), (plan, ours)
    # the planned truncation, then one rounding
    assert ours <= plan.predicted_error + unit_roundoff(dtype), (plan, ours)


def crt_unreachable_pair(case, dtype):
    if case == "phi 4":
        return phi_pair(8, 300, 6, 4.0, seed=130, dtype=dtype)
    # rows of A alternating entries of order 1 and 2^-100, columns of B the other way round:
    # C[0, 0] is 2^-100 of what the rows' norms bound, out of reach of 16 moduli
    A, B = phi_pair(6, 40, 5, 0.5, seed=131, dtype=dtype)
    A[0, 1::2] *= 2.0 ** -100
    B[0::2, 0] *= 2.0 ** -100
    return A, B


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["phi 4", "rows mixing 1 and 2^-100"])
def test_exact_scheme_two_keeps_the_promise_where_no_moduli_count_meets_it(device, dtype, case):
    A, B = crt_unreachable_pair(case, dtype)
    assert planner.crt_plan(A.shape[1], dtype, product_magnitude(A, B)) is None
    plan = ozaki.plan(A, B)
    assert plan.backend == "crt" and plan.exact and plan.rounding is None
    assert plan.reason.startswith("exact scheme II: ")
    # backend="crt" takes it too; the scheme-I backends keep their own plans
    assert ozaki.plan(A, B, backend="crt") == plan
    assert ozaki.plan(A, B, backend="int8").backend == "int8"
    gemm = GEMMS[dtype]
    C = gemm(A.to(device), B.to(device))
    assert_bitwise_equal(C, gemm(A.to(device), B.to(device), rounding="nearest"))
    assert_bitwise_equal(gemm(A.to(device), B.to(device), backend="crt"), C)
    reference = ExactProduct(A, B)
    assert_meets_plan(C, A, B, plan, reference)
    assert reference.max_error(C) <= reference.native_error()


def product_magnitude(A, B):
    """ozaki::crt_magnitude of A @ B (scheme II's estimate) as a float."""
    a, bt = A.contiguous(), B.t().contiguous()
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    norms = (_ops.row_norm_scales(a, stats_a[0]), _ops.row_norm_scales(bt, stats_b[0]))
    return _ops.crt_magnitude(a, bt, stats_a, stats_b, *norms, stats_a[1] > 0,
                              stats_b[1] > 0).item()


@pytest.mark.parametrize("dtype", DTYPES)
def test_scheme_one_options_under_auto_run_fp16_and_nearest_runs_int8(dtype):
    A, B = phi_pair(7, 65, 5, 0.5, seed=140, dtype=dtype)
    gemm = GEMMS[dtype]
    for options in ({"slices": 5}, {"fast": True}, {"fast": False}, {"slices": 4, "fast": False}):
        plan = ozaki.plan(A, B, **options)
        assert plan.backend == "fp16" and plan == ozaki.plan(A, B, backend="fp16", **options)
        assert_bitwise_equal(gemm(A, B, **options), gemm(A, B, backend="fp16", **options))
    expected_backend = {"auto": "crt", "int8": "int8", "crt": "crt", "fp16": "fp16"}
    for backend, digits in expected_backend.items():
        plan = ozaki.plan(A, B, backend=backend, rounding="nearest")
        assert plan.backend == digits and plan.rounding == "nearest"
        assert (plan.moduli is None) == (digits != "crt") and (plan.exact or digits != "crt")


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [3, 9, 16])
def test_requested_moduli(device, dtype, count):
    A, B = phi_pair(7, 65, 5, 1.0, seed=150 + count, dtype=dtype, device=device)
    for backend in ("auto", "crt"):
        plan = ozaki.plan(A, B, backend=backend, moduli=count)
        assert (plan.backend, plan.moduli, plan.gemms, plan.reason) == ("crt", count, count,
                                                                       "requested")
        assert plan.bits_captured == crt.scale_bits(count, 65)[0]
        assert f"{count} moduli" in str(plan)
    C = GEMMS[dtype](A, B, moduli=count)
    assert_bitwise_equal(C, GEMMS[dtype](A, B, backend="crt", moduli=count))
    assert_bitwise_equal(C, crt_product(A, B, count, device)[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_modulus_adds_four_bits_per_operand(dtype):
    A, B = phi_pair(8, 200, 6, 0.5, seed=160, dtype=dtype)
    reference = ExactProduct(A, B)
    u = unit_roundoff(dtype)
    errors = [reference.max_error(GEMMS[dtype](A, B, moduli=count))
              for count in range(3, crt.MAX_MODULI + 1)]
    for coarse, finer in zip(errors, errors[1:]):
        assert finer <= coarse + u, errors
        if coarse > 1024 * u:  # 2^-(t + 1): t grows by 3 to 4 bits per modulus
            assert finer <= coarse / 4, errors
    assert errors[-1] <= reference.native_error()


# ---- Option errors -----------------------------------------------------------------------------

PRODUCTS = [pytest.param(ozaki.dgemm, torch.float64, "ozaki.dgemm", id="dgemm"),
            pytest.param(ozaki.sgemm, torch.float32, "ozaki.sgemm", id="sgemm"),
            pytest.param(ozaki.plan, torch.float64, "ozaki.plan", id="plan")]


@pytest.mark.parametrize("product,dtype,name", PRODUCTS)
class TestOptionErrors:
    @staticmethod
    def call(product, dtype, **options):
        A, B = phi_pair(3, 4, 2, 0.5, seed=170, dtype=dtype)
        return product(A, B, **options)

    def test_unknown_backend_is_named(self, product, dtype, name):
        with pytest.raises(ValueError, match=rf"^{name}: backend must be one of 'auto', 'fp16', "
                                             r"'int8', 'crt', got 'bogus'$"):
            self.call(product, dtype, backend="bogus")
        with pytest.raises(ValueError, match=r"backend must be one of .*, got None"):
            self.call(product, dtype, backend=None)

    @pytest.mark.parametrize("count", [0, 17, -1])
    def test_moduli_out_of_range(self, product, dtype, name, count):
        with pytest.raises(ValueError, match=rf"^{name}: moduli must be between 1 and 16, "
                                             rf"got {count}$"):
            self.call(product, dtype, moduli=count)

    @pytest.mark.parametrize("count,shown", [(2.0, "float 2.0"), (True, "bool True"),
                                             ("3", "str '3'")])
    def test_moduli_of_the_wrong_type(self, product, dtype, name, count, shown):
        with pytest.raises(TypeError, match=rf"^{name}: moduli must be an int or None, "
                                            rf"got {shown}$"):
            self.call(product, dtype, moduli=count)

    @pytest.mark.parametrize("backend", ["fp16", "int8"])
    def test_moduli_with_a_scheme_one_backend(self, product, dtype, name, backend):
        with pytest.raises(ValueError, match=rf"^{name}: moduli applies to backend='crt', "
                                             rf"got backend='{backend}'$"):
            self.call(product, dtype, backend=backend, moduli=4)

    @pytest.mark.parametrize("option", [{"slices": 3}, {"fast": True}, {"fast": False}])
    def test_scheme_one_options_with_crt(self, product, dtype, name, option):
        [argument] = option
        with pytest.raises(ValueError, match=rf"^{name}: {argument} applies to the scheme-I "
                                             r"backends \('fp16', 'int8'\), not to backend='crt'"):
            self.call(product, dtype, backend="crt", **option)

    @pytest.mark.parametrize("option", [{"slices": 3}, {"fast": True}])
    def test_moduli_with_scheme_one_options(self, product, dtype, name, option):
        [argument] = option
        with pytest.raises(ValueError, match=rf"^{name}: moduli \(scheme II\) cannot be combined "
                                             rf"with {argument} \(scheme I\)$"):
            self.call(product, dtype, moduli=5, **option)

    @pytest.mark.parametrize("backend", ["auto", "crt"])
    def test_moduli_with_nearest(self, product, dtype, name, backend):
        with pytest.raises(ValueError, match=rf"^{name}: rounding='nearest' plans the moduli its "
                                             r"exact product needs; moduli does not apply to it$"):
            self.call(product, dtype, backend=backend, moduli=5, rounding="nearest")


@pytest.mark.parametrize("k,count", [(1000, 1), (crt.MAX_INNER, 2)])
def test_too_few_moduli_for_k_are_named(k, count):
    A, B = uniform_pair(2, k, 3, seed=175)
    needed = crt.smallest_moduli(k)
    assert count < needed and crt.scale_bits(count, k) is None
    message = rf"moduli = {count} is too few for inner dimension k = {k}.*at least {needed}"
    for product in (ozaki.dgemm, ozaki.plan):
        for backend in ("auto", "crt"):
            with pytest.raises(ValueError, match=message):
                product(A, B, backend=backend, moduli=count)
    assert ozaki.plan(A, B, moduli=needed).moduli == needed
    assert ozaki.dgemm(A, B, moduli=needed).isfinite().all()


# ---- Reproducibility ---------------------------------------------------------------------------


#: Plans for the larger products below, cheap on the CPU: the default and a requested moduli count
#: for scheme II, fast mode and all pairs for INT8 scheme I (whose default is all pairs of ~10).
CHUNKED_PLANS = {"crt": [{}, {"moduli": 6}], "int8": [{"slices": 3}, {"slices": 3, "fast": False}]}


def product_through_ops(A, B, plan, workspace, device):
    """A @ B by the operator of plan.backend with an explicit workspace budget (bytes)."""
    if plan.backend == "crt":
        return crt_product(A, B, plan.moduli, device, workspace)[0]
    a, bt = A.contiguous().to(device), B.t().contiguous().to(device)
    return _ops.gemm_slices(a, bt, _ops.row_stats(a), _ops.row_stats(bt), plan.slices, plan.fast,
                            workspace=workspace, int8=plan.backend == "int8")


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", INT8_BACKENDS)
def test_workspace_chunking_gives_the_same_bits(device, dtype, backend):
    # More than 256 rows and columns, so the smallest budget really cuts the product into chunks
    A, B = phi_pair(300, 40, 270, 1.0, seed=190, dtype=dtype, device=device)
    for options in CHUNKED_PLANS[backend]:
        plan = ozaki.plan(A, B, backend=backend, **options)
        assert plan.backend == backend
        unchunked = product_through_ops(A, B, plan, 1 << 40, device)
        chunked = product_through_ops(A, B, plan, 1, device)  # forces the smallest chunks
        assert_bitwise_equal(chunked, unchunked)
        assert_bitwise_equal(unchunked, GEMMS[dtype](A, B, backend=backend, **options))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("backend", INT8_BACKENDS)
def test_workspace_budget_from_the_environment_gives_the_same_bits(device, backend, monkeypatch):
    A, B = phi_pair(520, 50, 300, 0.5, seed=200, device=device)
    options = {"backend": backend, **CHUNKED_PLANS[backend][-1]}
    monkeypatch.delenv("OZAKI_WORKSPACE_MB", raising=False)
    default = ozaki.dgemm(A, B, **options)
    monkeypatch.setenv("OZAKI_WORKSPACE_MB", "1")  # below one chunk of the whole product
    assert _ops.workspace_bytes() == 1 << 20
    assert_bitwise_equal(ozaki.dgemm(A, B, **options), default)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("phi", [0.1, 1.0, 4.0])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (37, 130, 19), (33, 65, 17), (20, 1000, 30)])
def test_cpu_and_cuda_give_the_same_bits(dtype, phi, m, k, n):
    A, B = phi_pair(m, k, n, phi, seed=m * k + n, dtype=dtype)
    for options in ({}, {"backend": "crt"}, {"backend": "crt", "moduli": 5},
                    {"backend": "crt", "moduli": 16}, {"backend": "int8"},
                    {"backend": "int8", "slices": 3},
                    {"backend": "int8", "slices": 7, "fast": False},
                    {"backend": "crt", "rounding": "nearest"}):
        assert ozaki.plan(A, B, **options) == ozaki.plan(A.cuda(), B.cuda(), **options), options
        cpu = GEMMS[dtype](A, B, **options)
        gpu = GEMMS[dtype](A.cuda(), B.cuda(), **options)
        assert_bitwise_equal(gpu, cpu)


# ---- Limits on k -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_crt_needs_k_below_2_to_the_17(device, dtype):
    k = crt.MAX_INNER + 1
    assert k == 2 ** 17
    A, B = uniform_pair(1, k, 1, seed=210, dtype=dtype)
    gemm, A_, B_ = GEMMS[dtype], A.to(device), B.to(device)
    message = r"inner dimension k = 131072 is too large for backend='crt' .*k <= 131071"
    with pytest.raises(ValueError, match=message):
        gemm(A_, B_, backend="crt")
    with pytest.raises(ValueError, match=message):
        ozaki.plan(A_, B_, backend="crt")
    # auto falls back to scheme I, and meets its plan
    plan = ozaki.plan(A_, B_)
    assert plan.backend in ("int8", "fp16")
    C = gemm(A_, B_)
    assert_bitwise_equal(C, gemm(A_, B_, backend=plan.backend, slices=plan.slices, fast=plan.fast))
    reference = ExactProduct(A, B)
    assert_meets_plan(C, A, B, plan, reference)
    # rounding="nearest" never runs scheme II, so it has no such limit
    assert_bitwise_equal(gemm(A_, B_, backend="crt", rounding="nearest"),
                         accuracy.round_exact(reference.exact, dtype))
    # one term less, scheme II runs, and auto picks it for such data
    A, B = A[:, 1:], B[1:]
    plan = ozaki.plan(A.to(device), B.to(device))
    assert plan.backend == "crt" and plan.reason == "error bound"
    assert plan.moduli >= crt.smallest_moduli(crt.MAX_INNER)
    assert plan.predicted_error <= unit_roundoff(dtype)
    C = gemm(A.to(device), B.to(device), backend="crt")
    assert_meets_plan(C, A, B, plan, ExactProduct(A, B))


def test_requested_moduli_are_kept_under_auto_even_where_int8_is_exact():
    # Small integers: the exact INT8 split (1 GEMM) beats any scheme-II plan, and auto takes it,
    # but moduli= asks for scheme II: the user's count is kept.
    g = seeded(77)
    A = torch.randint(-5, 5, (12, 30), generator=g).double()
    B = torch.randint(-5, 5, (30, 9), generator=g).double()
    assert ozaki.plan(A, B).backend == "int8"
    plan = ozaki.plan(A, B, moduli=9)
    assert (plan.backend, plan.moduli, plan.reason) == ("crt", 9, "requested")
