"""NaN, +-Inf, zeros, subnormals and extreme exponents in inputs and results."""

import math

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda
from ozaki.slicing import MAX_SLICES
from ozaki import accuracy

nan, inf = float("nan"), float("inf")


def ieee_dot(row, col):
    """The plain dot product's special-value result: what the scheme must reproduce."""
    products = [a * b for a, b in zip(row, col)]
    if any(math.isnan(p) for p in products):
        return nan
    infinite = {p for p in products if math.isinf(p)}
    if len(infinite) == 2:
        return nan
    return infinite.pop() if infinite else None


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", [(ozaki.dgemm, torch.float64), (ozaki.sgemm, torch.float32)])
def test_nan_and_inf_follow_ieee(device, gemm, dtype):
    A = torch.tensor([[1.0, 2.0, 3.0], [inf, 1.0, 0.5], [-inf, 0.0, 1.0], [nan, 1.0, 1.0],
                      [inf, -inf, 1.0], [1.0, -1.0, 2.0]], dtype=dtype)
    B = torch.tensor([[1.0, 0.0, -2.0, 1.0], [3.0, 1.0, 1.0, inf], [-1.0, 2.0, 4.0, 1.0]], dtype=dtype)
    C = gemm(A.to(device), B.to(device)).cpu()
    for i, row in enumerate(A.double().tolist()):
        for j, col in enumerate(B.double().t().tolist()):
            expected = ieee_dot(row, col)
            got = C[i, j].item()
            if expected is None:
                assert got == sum(a * b for a, b in zip(row, col))
            elif math.isnan(expected):
                assert math.isnan(got), (i, j, got)
            else:
                assert got == expected, (i, j, got, expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_zero_rows_columns_and_exact_zero_results_are_plus_zero(device):
    A = torch.tensor([[0.0, -0.0, 0.0], [1.0, 2.0, -3.0], [-0.0, -0.0, -0.0]], dtype=torch.float64)
    B = torch.tensor([[1.0, -0.0], [1.0, 0.0], [1.0, -0.0]], dtype=torch.float64)
    C = ozaki.dgemm(A.to(device), B.to(device)).cpu()
    assert C.tolist() == [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    assert not torch.signbit(C).any()  # documented: exact-zero results are +0


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_extreme_exponents_are_exact_up_to_rounding(device):
    # near DBL_MAX, subnormal inputs and outputs, mixed huge/tiny entries, overflowing results
    A = torch.tensor([[1.7e308, -1.6e308], [3e-320, 5e-324], [1e300, -1e290], [1e200, 1e200]],
                     dtype=torch.float64)
    B = torch.tensor([[0.5, 1e-300], [0.25, 1e-290]], dtype=torch.float64)
    assert ozaki.plan(A, B).rounding is None  # planned without the exact fallback
    exact = accuracy.exact_matmul(A, B)
    C = ozaki.dgemm(A.to(device), B.to(device)).cpu()
    # (entry (1, 1) underflows to 0: its componentwise error is 1 for every float64 answer)
    assert accuracy.componentwise_error(C, exact, A, B) <= accuracy.componentwise_error(A @ B, exact, A, B)
    C = ozaki.dgemm(A.to(device), B.to(device), rounding="nearest").cpu()
    assert_bitwise_equal(C, accuracy.round_exact(exact))
    big = torch.tensor([[1e200, 1e200]], dtype=torch.float64)
    overflow = ozaki.dgemm(big.to(device), big.t().contiguous().to(device) * 1e150).cpu()
    assert overflow.item() == inf


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_wide_exponent_range_inputs(device):
    g = torch.Generator().manual_seed(4)
    A = accuracy.exponent_range_matrix(6, 40, -8, 8, generator=g)
    B = accuracy.exponent_range_matrix(40, 5, -8, 8, generator=g)
    exact = accuracy.exact_matmul(A, B)
    assert ozaki.plan(A, B).rounding is None  # planned without the exact fallback
    C = ozaki.dgemm(A.to(device), B.to(device)).cpu()
    native = A @ B
    assert accuracy.componentwise_error(C, exact, A, B) <= accuracy.componentwise_error(native, exact, A, B)


def test_rows_spanning_more_than_the_split_reaches():
    # a row holding 1e300 and 1e-300 spans ~2000 bits; the planner needs only the bits that
    # matter at the scale of |A||B| (docs/accuracy.md)
    A = torch.tensor([[1e300, 1e-300]], dtype=torch.float64)
    B = torch.tensor([[1.0], [1.0]], dtype=torch.float64)
    p = ozaki.plan(A, B, backend="fp16")
    assert p.rounding is None and p.reason == "error bound" and p.slices < p.full_split_slices
    assert ozaki.dgemm(A, B, backend="fp16").item() == 1e300
    # when the only products meet a side far below its maximum the estimate cannot bound the
    # truncation and the full split needs more than MAX_SLICES slices: every entry is rounded once
    # from the exact product, and the plan says why
    A = torch.tensor([[1.0, 1e-300]], dtype=torch.float64)
    B = torch.tensor([[1e-300], [1.0]], dtype=torch.float64)
    for backend in ("auto", "fp16", "int8", "crt"):
        p = ozaki.plan(A, B, backend=backend)
        assert p.rounding == "nearest" and p.full_split_slices > MAX_SLICES
        assert f"the full split needs {p.full_split_slices} slices, over {MAX_SLICES}" in p.reason
        assert "rounded once from the exact product" in str(p)
        assert ozaki.dgemm(A, B, backend=backend).item() == 2e-300
