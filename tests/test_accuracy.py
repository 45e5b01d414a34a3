"""Accuracy against exact references: the default is no worse than native matmul, and more
slices are never worse."""

import pytest
import torch

import ozaki
from helpers import cpu_and_cuda, phi_pair
from ozaki import accuracy

# k at and across every threshold of the digit-width table (design.md)
INNER_SIZES = [1, 4, 5, 16, 17, 64, 65, 256, 257, 1024, 1025, 4097]
PHIS = [0.1, 1.0, 4.0]


def errors_against_exact(C, native, A, B):
    exact = accuracy.exact_matmul(A, B)
    return (accuracy.componentwise_error(C, exact, A, B),
            accuracy.componentwise_error(native, exact, A, B))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("k", INNER_SIZES)
def test_default_dgemm_no_worse_than_native(device, phi, k):
    A, B = phi_pair(5, k, 4, phi, seed=1000 + k, device=device)
    ours, native = errors_against_exact(ozaki.dgemm(A, B), A @ B, A, B)
    assert ours <= native, f"ozaki {ours:.3e} > native {native:.3e}"


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("k", INNER_SIZES)
def test_default_sgemm_no_worse_than_native(device, phi, k):
    A, B = phi_pair(5, k, 4, phi, seed=2000 + k, dtype=torch.float32, device=device)
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # native SGEMM, not TF32
    try:
        native_product = A @ B
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    ours, native = errors_against_exact(ozaki.sgemm(A, B), native_product, A, B)
    assert ours <= native, f"ozaki {ours:.3e} > native {native:.3e}"


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("phi,k", [(0.1, 300), (1.0, 1025), (4.0, 64)])
def test_more_slices_never_worse(device, fast, phi, k):
    A, B = phi_pair(6, k, 5, phi, seed=k, device=device)
    exact = accuracy.exact_matmul(A, B)
    full = ozaki.plan(A, B, backend="fp16").full_split_slices
    unit_roundoff = 2.0 ** -53
    previous = None
    for slices in range(1, min(full, 40) + 1):
        C = ozaki.dgemm(A, B, backend="fp16", slices=slices, fast=fast)
        err = accuracy.componentwise_error(C, exact, A, B)
        if previous is not None:
            # once at the level of the final rounding, it may only stay there
            assert err <= max(previous, unit_roundoff), (slices, err, previous)
        previous = err
    assert previous <= unit_roundoff


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_ill_conditioned_dot_products(device):
    # GenDot: heavy cancellation on the diagonal; the default stays at native's componentwise
    # level, and the correctly rounded mode keeps the error at the rounding of the result, far
    # below native's condition-number-sized error
    g = torch.Generator().manual_seed(5)
    A, B = accuracy.gendot_matrices(4, 64, 4, 1e25, generator=g)
    A, B = A.to(device), B.to(device)
    exact = accuracy.exact_matmul(A, B)
    assert (accuracy.componentwise_error(ozaki.dgemm(A, B), exact, A, B)
            <= accuracy.componentwise_error(A @ B, exact, A, B))
    ours = accuracy.relative_errors(ozaki.dgemm(A, B, rounding="nearest"), exact)
    native = accuracy.relative_errors(A @ B, exact)
    for i in range(4):
        assert ours[i, i] <= 2.0 ** -53
        assert ours[i, i] <= native[i, i]
