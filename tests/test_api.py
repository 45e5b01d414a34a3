"""The public API: argument checking, empty shapes, layouts."""

import re
import warnings

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_pair

GEMMS = [(ozaki.dgemm, torch.float64), (ozaki.sgemm, torch.float32)]


def ok(dtype, *shape):
    return torch.rand(*shape, dtype=dtype) - 0.5


@pytest.mark.parametrize("gemm,dtype", GEMMS)
class TestBadInput:
    def test_not_a_tensor(self, gemm, dtype):
        with pytest.raises(TypeError, match=r"A must be a torch.Tensor, got list"):
            gemm([[1.0]], ok(dtype, 1, 1))

    def test_wrong_float_dtype_names_the_other_routine(self, gemm, dtype):
        other = torch.float32 if dtype == torch.float64 else torch.float64
        with pytest.raises(TypeError, match=rf"B must be {dtype}, got {other} \(use ozaki\.[ds]gemm"):
            gemm(ok(dtype, 2, 3), ok(other, 3, 2))

    @pytest.mark.parametrize("bad", [torch.int64, torch.int32, torch.float16, torch.complex128])
    def test_non_float_dtype(self, gemm, dtype, bad):
        with pytest.raises(TypeError, match=rf"A must be {dtype}, got {bad}"):
            gemm(torch.ones(2, 3, dtype=bad), ok(dtype, 3, 2))

    @pytest.mark.parametrize("shape", [(3,), (2, 3, 4), ()])
    def test_not_2d(self, gemm, dtype, shape):
        with pytest.raises(ValueError, match=rf"A must be 2-D, got {len(shape)}-D"):
            gemm(torch.ones(shape, dtype=dtype), ok(dtype, 3, 2))

    @pytest.mark.parametrize("arg", ["A", "B"])
    @pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr"])
    def test_sparse_operands(self, gemm, dtype, arg, layout):
        A, B = ok(dtype, 2, 3), ok(dtype, 3, 2)
        sparse = {"sparse_coo": torch.Tensor.to_sparse, "sparse_csr": torch.Tensor.to_sparse_csr}
        if arg == "A":
            A = sparse[layout](A)
        else:
            B = sparse[layout](B)
        message = rf"{arg} must be a dense \(strided\) tensor, got layout torch.{layout}"
        with pytest.raises(TypeError, match=message):
            gemm(A, B)
        with pytest.raises(TypeError, match=message):
            ozaki.plan(A, B)

    @pytest.mark.parametrize("arg", ["A", "B"])
    def test_nested_operands(self, gemm, dtype, arg):
        A, B = ok(dtype, 2, 3), ok(dtype, 3, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the strided layout of nested tensors is a prototype
            if arg == "A":
                A = torch.nested.nested_tensor([A, A[:1]])
            else:
                B = torch.nested.nested_tensor([B, B[:, :1]])
        message = rf"{arg} must be a dense \(strided\) tensor, got a nested tensor"
        with pytest.raises(TypeError, match=message):
            gemm(A, B)
        with pytest.raises(TypeError, match=message):
            ozaki.plan(A, B)

    def test_inner_sizes_differ(self, gemm, dtype):
        with pytest.raises(ValueError, match=r"inner dimensions differ: A is \(2, 3\) and B is \(4, 5\)"):
            gemm(ok(dtype, 2, 3), ok(dtype, 4, 5))

    @pytest.mark.cuda
    def test_mixed_devices(self, gemm, dtype):
        with pytest.raises(ValueError, match=r"same device, got cpu and cuda:0"):
            gemm(ok(dtype, 2, 3), ok(dtype, 3, 2).cuda())

    @pytest.mark.parametrize("slices", [0, -1, 41])
    def test_slices_out_of_range(self, gemm, dtype, slices):
        with pytest.raises(ValueError, match=rf"slices must be between 1 and 40, got {slices}"):
            gemm(ok(dtype, 2, 3), ok(dtype, 3, 2), slices=slices)

    @pytest.mark.parametrize("slices", [2.0, "3", True])
    def test_slices_wrong_type(self, gemm, dtype, slices):
        with pytest.raises(TypeError, match=r"slices must be an int or None, got"):
            gemm(ok(dtype, 2, 3), ok(dtype, 3, 2), slices=slices)

    def test_fast_wrong_type(self, gemm, dtype):
        with pytest.raises(TypeError, match=r"fast must be a bool or None, got int 1"):
            gemm(ok(dtype, 2, 3), ok(dtype, 3, 2), fast=1)

    @pytest.mark.parametrize("rounding", ["up", "Nearest", 1])
    def test_unknown_rounding(self, gemm, dtype, rounding):
        with pytest.raises(ValueError, match=r"rounding must be None or 'nearest', got"):
            gemm(ok(dtype, 2, 3), ok(dtype, 3, 2), rounding=rounding)

    def test_k_too_large_for_exact_fp16_products(self, gemm, dtype):
        k = (1 << 22) + 1
        A = torch.ones(1, k, dtype=dtype).expand(1, k)
        with pytest.raises(ValueError, match=rf"inner dimension k = {k} is too large"):
            gemm(A, torch.ones(k, 1, dtype=dtype), slices=1)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
@pytest.mark.parametrize("m,k,n", [(0, 3, 2), (2, 0, 3), (3, 2, 0), (0, 0, 0)])
def test_empty_shapes_give_zeros(device, gemm, dtype, m, k, n):
    C = gemm(torch.rand(m, k, dtype=dtype, device=device), torch.rand(k, n, dtype=dtype, device=device))
    assert C.shape == (m, n) and C.dtype == dtype and C.device.type == device
    assert torch.all(C == 0)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_layouts_give_the_same_bits(device, gemm, dtype):
    A, B = phi_pair(37, 53, 29, 1.0, seed=11, dtype=dtype, device=device)
    reference = gemm(A, B)
    # transposed views and a strided view into larger storage
    At = A.t().contiguous().t()
    Bt = B.t().contiguous().t()
    strided_A = torch.stack([A, A], dim=2)[:, :, 0]
    assert not At.is_contiguous() and not strided_A.is_contiguous()
    for a, b in [(At, B), (A, Bt), (At, Bt), (strided_A, B)]:
        assert_bitwise_equal(gemm(a, b), reference)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_result_dtype_and_device(device):
    A, B = phi_pair(4, 5, 6, 0.5, seed=1, device=device)
    C = ozaki.dgemm(A, B)
    assert C.dtype == torch.float64 and C.device == A.device and C.shape == (4, 6)
    C32 = ozaki.sgemm(A.float(), B.float())
    assert C32.dtype == torch.float32 and C32.device == A.device


def test_plan_reports_counts():
    A, B = phi_pair(8, 300, 8, 1.0, seed=2)
    p = ozaki.plan(A, B, backend="fp16", slices=6, fast=True)
    assert (p.slices, p.fast, p.beta, p.gemms) == (6, True, 7, 21)
    assert ozaki.plan(A, B, backend="fp16", slices=6, fast=False).gemms == 36
    auto = ozaki.plan(A, B, backend="fp16")
    assert auto.slices < auto.full_split_slices and auto.reason == "error bound"
    assert auto.gemms == (auto.slices * (auto.slices + 1) // 2 if auto.fast else auto.slices ** 2)
    all_pairs = ozaki.plan(A, B, backend="fp16", fast=False)
    assert not all_pairs.fast and all_pairs.gemms == all_pairs.slices ** 2
    assert "slices" in str(auto)


def test_plan_with_mixed_dtypes_asks_for_matching_b():
    A, B = phi_pair(4, 6, 3, 1.0, seed=3)
    with pytest.raises(TypeError, match=r"^ozaki\.plan: B must be torch\.float64, got "
                                        r"torch\.float32 \(B must have A's dtype\)$"):
        ozaki.plan(A, B.float())
    with pytest.raises(TypeError, match=r"B must be torch\.float32, got torch\.float64 \(B must "
                                        r"have A's dtype\)$"):
        ozaki.plan(A.float(), B)


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "abc", " 12 ", "1_0", "+5", "\u0663"])
def test_a_workspace_budget_of_other_than_ascii_digits_is_refused(value, monkeypatch):
    """OZAKI_WORKSPACE_MB is a positive integer written in ASCII digits alone (Python's int()
    would take spaces, underscores, a sign and other scripts' digits)."""
    A = ok(torch.float64, 5, 5)
    monkeypatch.setenv("OZAKI_WORKSPACE_MB", value)
    with pytest.raises(ValueError, match=f"OZAKI_WORKSPACE_MB must be a positive integer, got "
                                         f"{re.escape(repr(value))}"):
        ozaki.dgemm(A, A)


def test_a_workspace_budget_past_int64_is_refused(monkeypatch):
    """OZAKI_WORKSPACE_MB whose bytes reach 2^63 (the operators' int64) is refused by name; the
    largest one below works and gives the default bits."""
    A = ok(torch.float64, 5, 5)
    default = ozaki.dgemm(A, A)
    monkeypatch.setenv("OZAKI_WORKSPACE_MB", str(2**43))
    with pytest.raises(ValueError, match=r"OZAKI_WORKSPACE_MB must be below 2\^43 "
                                         r"\(8796093022208\), got '8796093022208'"):
        ozaki.dgemm(A, A)
    monkeypatch.setenv("OZAKI_WORKSPACE_MB", "1" * 5000)  # past int()'s own digit limit too
    with pytest.raises(ValueError, match=r"OZAKI_WORKSPACE_MB must be below 2\^43 "):
        ozaki.dgemm(A, A)
    monkeypatch.setenv("OZAKI_WORKSPACE_MB", "000" + str(2**43 - 1))
    assert_bitwise_equal(ozaki.dgemm(A, A), default)
