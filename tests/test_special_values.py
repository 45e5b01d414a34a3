"""NaN, +-Inf, zeros, subnormals and extreme exponents in inputs and results."""

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, assert_special_values_follow_ieee, cpu_and_cuda
from ozaki.slicing import MAX_SLICES
from ozaki import accuracy

nan, inf = float("nan"), float("inf")


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", [(ozaki.dgemm, torch.float64), (ozaki.sgemm, torch.float32)])
def test_nan_and_inf_follow_ieee(device, gemm, dtype):
    A = torch.tensor([[1.0, 2.0, 3.0], [inf, 1.0, 0.5], [-inf, 0.0, 1.0], [nan, 1.0, 1.0],
                      [inf, -inf, 1.0], [1.0, -1.0, 2.0]], dtype=dtype)
    B = torch.tensor([[1.0, 0.0, -2.0, 1.0], [3.0, 1.0, 1.0, inf], [-1.0, 2.0, 4.0, 1.0]], dtype=dtype)
    assert_special_values_follow_ieee(gemm(A.to(device), B.to(device)), A, B)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("options", [{}, {"backend": "crt"}, {"backend": "int8"},
                                     {"backend": "fp16"}, {"rounding": "nearest"}],
                         ids=["default", "crt", "int8", "fp16", "nearest"])
def test_a_finite_product_past_the_range_counts_as_infinite(device, dtype, options):
    """In a dot product that meets +-Inf, a product of finite entries that overflows the format
    is infinite too, as in the plain dot product: big * big beside 1 * -Inf is NaN, not -Inf
    (float32: the product overflows float32 though float64 holds it)."""
    big, tiny = (1e300, 5e-324) if dtype == torch.float64 else (1e30, 1e-45)
    A = torch.tensor([[big, 1.0, 2.0], [inf, 1.0, -big], [big, -1.0, 1.0], [-big, 2.0, 1.0]],
                     dtype=dtype)
    B = torch.tensor([[big, tiny, -big], [-inf, big, 1.0], [0.0, inf, inf]], dtype=dtype)
    C = ozaki.matmul(A.to(device), B.to(device), **options)
    assert_special_values_follow_ieee(C, A, B)
    assert C[0, 0].isnan() and C[2, 0] == inf and C[3, 0] == -inf and C[0, 2].isnan()


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
