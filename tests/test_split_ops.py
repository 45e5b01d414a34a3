"""The split: exact reconstruction, digit bounds, row statistics, Python/C++ formula agreement."""

from fractions import Fraction

import pytest
import torch

from helpers import assert_bitwise_equal, cpu_and_cuda, seeded
from ozaki import _ops, accuracy
from ozaki.slicing import bits_captured, digit_bits_for, grid_step_bits, slices_for_bits


def python_row_stats(row):
    """tau and bit span of a row from float.as_integer_ratio, independent of the C++ code."""
    nonzero = [x for x in row if x != 0.0]
    if not nonzero:
        return 0, 0
    tau = max(_exponent(abs(x)) for x in nonzero)
    lowest = min(_lowest_bit(x) for x in nonzero)
    return tau, tau - lowest


def _exponent(x):  # smallest e with x < 2^e
    e = 0
    f = Fraction(x)
    while f >= Fraction(2) ** e:
        e += 1
    while f < Fraction(2) ** (e - 1):
        e -= 1
    return e


def _lowest_bit(x):
    num, den = float(x).as_integer_ratio()
    num = abs(num)
    return (num & -num).bit_length() - 1 - (den.bit_length() - 1)


def test_digit_width_table_matches_design():
    # design.md: k<=4: 11, <=16: 10, <=64: 9, <=256: 8, <=1024: 7, <=4096: 6, <=16384: 5, <=65536: 4
    table = {1: 11, 4: 11, 5: 10, 16: 10, 17: 9, 64: 9, 65: 8, 256: 8, 257: 7, 1024: 7, 1025: 6,
             4096: 6, 4097: 5, 16384: 5, 16385: 4, 65536: 4}
    assert {k: digit_bits_for(k) for k in table} == table
    for k, beta in table.items():
        assert 2 * beta + (k - 1).bit_length() <= 24


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_row_stats_match_python(device, dtype):
    g = seeded(3)
    A = accuracy.exponent_range_matrix(9, 40, -30, 30, generator=g, dtype=dtype)
    A[2] = 0.0
    A[3, ::3] = 0.0
    A[4, 5] = -0.0
    tau, span, nonfinite = _ops.row_stats(A.to(device))
    for i, row in enumerate(A.double().tolist()):
        assert (tau[i].item(), span[i].item()) == python_row_stats(row)
    assert not nonfinite.any()


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_row_stats_flag_nonfinite_rows(device):
    A = torch.rand(4, 7, dtype=torch.float64)
    A[1, 3], A[3, 0] = float("nan"), float("-inf")
    tau, _, nonfinite = _ops.row_stats(A.to(device))
    assert nonfinite.tolist() == [False, True, False, True]
    assert tau[1].item() == python_row_stats([x for x in A[1].tolist() if x == x])[0]


def reconstruct(slices_row, tau, beta):
    """sum_p d_p 2^-beta * 2^(tau - p (beta + 1)) from the stored FP16 values."""
    w = grid_step_bits(beta)
    return sum(Fraction(float(v)) * Fraction(2) ** (tau - p * w) for p, v in enumerate(slices_row))


@pytest.mark.parametrize("k", [3, 20, 300, 5000])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_split_is_exact_and_bounded(k, dtype):
    g = seeded(k)
    A = accuracy.phi_matrix(4, k, 2.0, generator=g, dtype=dtype)
    tau, span, _ = _ops.row_stats(A)
    beta = digit_bits_for(k)
    full = slices_for_bits(int(span.max()), beta)
    for slices in (1, 2, full):
        S = _ops.split_rows(A, tau, slices)
        assert S.dtype == torch.float16 and S.shape == (slices, 4, k)
        digits = S.double() * 2.0 ** beta
        assert torch.all(digits == digits.round()) and digits.abs().max() <= 2 ** beta
        for i in range(4):
            for l in range(0, k, max(1, k // 7)):
                a = Fraction(A[i, l].item())
                rest = a - reconstruct(S[:, i, l].tolist(), tau[i].item(), beta)
                bound = Fraction(2) ** (tau[i].item() - bits_captured(slices, beta) - 1)
                assert abs(rest) <= bound
                if slices == full:
                    assert rest == 0


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("k", [1, 7, 64, 1025])
def test_split_cpu_equals_cuda(dtype, k):
    g = seeded(k + 1)
    A = accuracy.phi_matrix(33, k, 4.0, generator=g, dtype=dtype)
    stats_cpu = _ops.row_stats(A)
    stats_gpu = _ops.row_stats(A.cuda())
    for x, y in zip(stats_cpu, stats_gpu):
        assert torch.equal(x, y.cpu())
    for slices in (1, 5, 13):
        S_cpu = _ops.split_rows(A, stats_cpu[0], slices)
        S_gpu = _ops.split_rows(A.cuda(), stats_gpu[0], slices)
        assert torch.equal(S_cpu.view(torch.int16), S_gpu.cpu().view(torch.int16))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_extreme_exponents_split_exactly(device):
    # entries near DBL_MAX, subnormals and mixed rows: no overflow or NaN from the scaling
    A = torch.tensor([[1.7e308, -1.2e308, 3.0],
                      [5e-324, -2.5e-320, 1e-310],
                      [1e300, 1e-300, -7.0]], dtype=torch.float64)
    tau, span, _ = _ops.row_stats(A.to(device))
    beta = digit_bits_for(3)
    S = _ops.split_rows(A.to(device), tau, 40).cpu()
    assert torch.isfinite(S).all()
    for i in range(3):
        full = slices_for_bits(span[i].item(), beta)
        if full <= 40:
            for l in range(3):
                assert reconstruct(S[:, i, l].tolist(), tau[i].item(), beta) == Fraction(A[i, l].item())
