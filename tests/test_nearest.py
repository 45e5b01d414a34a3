"""rounding="nearest": every entry is the exact product rounded once (docs/accuracy.md).

Each case compares with the exact product (Python integers) rounded by ozaki.accuracy.round_exact,
on random and adversarial inputs, for several slice plans (any plan must give the same bits: a
coarse one pushes most entries through the exact slow path), and CPU against CUDA.
"""

import pathlib
import shutil
import subprocess

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_pair, seeded
from ozaki import accuracy

GEMMS = [pytest.param(ozaki.dgemm, torch.float64, id="dgemm"),
         pytest.param(ozaki.sgemm, torch.float32, id="sgemm")]
# Exponents of the least subnormal and of the spacing of the top binade.
LEAST_EXPONENT = {torch.float64: -1074, torch.float32: -149}
TOP_SPACING_EXPONENT = {torch.float64: 971, torch.float32: 104}
# The planner's choice, the exact slow path for nearly every entry, a coarse fast plan, all pairs.
PLANS = [{}, {"slices": 1}, {"slices": 3, "fast": True}, {"fast": False}]


def correctly_rounded(A, B):
    return accuracy.round_exact(accuracy.exact_matmul(A.cpu(), B.cpu()), A.dtype)


def check_nearest(gemm, A, B, device, plans=PLANS):
    expected = correctly_rounded(A, B)
    for options in plans:
        C = gemm(A.to(device), B.to(device), rounding="nearest", **options)
        assert C.device.type == device
        assert_bitwise_equal(C, expected)
    return expected


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
@pytest.mark.parametrize("k", [1, 5, 16, 17, 64, 65, 256, 257, 1025])
@pytest.mark.parametrize("phi", [0.1, 1.0, 4.0])
def test_random_inputs(device, gemm, dtype, k, phi):
    A, B = phi_pair(9, k, 7, phi, seed=k * 10 + int(phi * 10), dtype=dtype)
    check_nearest(gemm, A, B, device)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_gendot_cancellation(device, gemm, dtype):
    condition = 1e40 if dtype == torch.float64 else 1e15
    A, B = accuracy.gendot_matrices(8, 96, 8, condition, generator=seeded(3), dtype=dtype)
    expected = check_nearest(gemm, A, B, device)
    # the ill-conditioned diagonal is where a plain sum loses every digit
    native = (A @ B).diagonal()
    assert not torch.equal(native, expected.diagonal())


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_mixed_huge_and_tiny_entries(device, gemm, dtype):
    # +-(1..10) * 10^e with e across most of the exponent range, in every row and column; the
    # products stay finite, so every entry is a long exact sum of wildly different magnitudes.
    low, high = (-150, 150) if dtype == torch.float64 else (-18, 18)
    g = seeded(5)
    A = accuracy.exponent_range_matrix(7, 40, low, high, generator=g, dtype=dtype)
    B = accuracy.exponent_range_matrix(40, 6, low, high, generator=g, dtype=dtype)
    check_nearest(gemm, A, B, device)
    # 1e300-style entries next to 1e-300-style ones in a single row and column
    big, tiny = (1e300, 1e-300) if dtype == torch.float64 else (1e36, 1e-36)
    A = torch.tensor([[big, tiny, 1.0, -big], [tiny, -tiny, big / 3, 2.0]], dtype=dtype)
    B = torch.tensor([[1e-300 if dtype == torch.float64 else 1e-36, 1.0],
                      [big, 3.0], [tiny, -1.0], [1e-300 if dtype == torch.float64 else 1e-36, 0.5]],
                     dtype=dtype)
    check_nearest(gemm, A, B, device)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_subnormal_and_underflowing_results(device, gemm, dtype):
    info = torch.finfo(dtype)
    scale = 2.0 ** (LEAST_EXPONENT[dtype] // 2 + 6)  # products a few bits above the least subnormal
    A, B = phi_pair(8, 30, 6, 1.0, seed=11, dtype=dtype)
    A, B = A * scale, B * scale
    expected = check_nearest(gemm, A, B, device)
    subnormal = (expected != 0) & (expected.abs() < info.tiny)
    assert subnormal.sum() > 10  # the case really exercises the subnormal grid
    # a negative result below half the least subnormal rounds to -0, an exact zero is +0
    least = 2.0 ** LEAST_EXPONENT[dtype]
    A = torch.tensor([[least, 0.0], [least, -least]], dtype=dtype)
    B = torch.tensor([[-0.25, 1.0], [0.0, 1.0]], dtype=dtype)
    C = gemm(A.to(device), B.to(device), rounding="nearest").cpu()
    assert C[0, 0].item() == 0 and torch.signbit(C[0, 0])   # -least/4 -> -0
    assert C[1, 1].item() == 0 and not torch.signbit(C[1, 1])  # least - least -> +0


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_overflowing_and_near_max_results(device, gemm, dtype):
    info = torch.finfo(dtype)
    # Entries near the largest finite value: the scaling must neither overflow nor lose bits.
    A, B = phi_pair(6, 20, 5, 0.5, seed=13, dtype=dtype)
    A[:, 0] = info.max * 0.75
    B = B / 64
    B[0, :] = torch.tensor([1.0, -1.0, 0.5, 1.25, 2.0], dtype=dtype)
    expected = check_nearest(gemm, A, B, device)
    assert expected.isinf().any() and expected.isfinite().any()
    # Sums right at the overflow threshold: max + half an ulp overflows (ties away from the odd
    # largest significand), anything below stays finite.
    ulp = 2.0 ** TOP_SPACING_EXPONENT[dtype]  # spacing of the top binade
    A = torch.tensor([[info.max, ulp / 2], [info.max, ulp / 4], [info.max, -info.max]], dtype=dtype)
    B = torch.tensor([[1.0], [1.0]], dtype=dtype)
    C = gemm(A.to(device), B.to(device), rounding="nearest").cpu()
    assert C[0, 0].item() == float("inf")
    assert C[1, 0].item() == info.max
    assert C[2, 0].item() == 0


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_ties_round_to_even(device, gemm, dtype):
    eps = torch.finfo(dtype).eps
    rows = [[1.0, eps / 2], [1.0 + eps, eps / 2], [1.0, eps / 2 + eps * eps], [-1.0, -eps / 2],
            [1.0, -eps / 4], [1.0, -3 * eps / 8]]
    A = torch.tensor(rows, dtype=dtype)
    B = torch.ones(2, 1, dtype=dtype)
    C = gemm(A.to(device), B.to(device), rounding="nearest").cpu()[:, 0].tolist()
    # 1 - eps/4 is halfway between 1 - eps/2 (odd) and 1 (even)
    assert C == [1.0, 1.0 + 2 * eps, 1.0 + eps, -1.0, 1.0, 1.0 - eps / 2]
    check_nearest(gemm, A, B, device)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_zero_rows_signed_zeros_and_subnormal_inputs(device, gemm, dtype):
    info = torch.finfo(dtype)
    A, B = phi_pair(7, 24, 6, 1.0, seed=17, dtype=dtype)
    A[2] = 0.0
    A[3] = -0.0
    B[:, 4] = 0.0
    A[4, :6] = info.tiny * torch.rand(6, generator=seeded(1), dtype=dtype)  # subnormal entries
    B[:6, 1] *= info.tiny
    expected = check_nearest(gemm, A, B, device)
    assert not torch.signbit(expected[2:4]).any()  # exact zeros are +0


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_special_values(device, gemm, dtype):
    nan, inf = float("nan"), float("inf")
    A = torch.tensor([[1.0, 2.0], [inf, 1.0], [nan, 0.0], [inf, -inf], [0.0, inf]], dtype=dtype)
    B = torch.tensor([[1.0, 0.0, -1.0], [2.0, 1.0, 1.0]], dtype=dtype)
    C = gemm(A.to(device), B.to(device), rounding="nearest").cpu()
    D = gemm(A.to(device), B.to(device)).cpu()
    assert_bitwise_equal(C, D)  # the IEEE patch-up is shared by every mode
    assert C[0].tolist() == [5.0, 2.0, 1.0]
    assert C[1, 0].item() == inf and torch.isnan(C[1, 1]) and C[1, 2].item() == -inf
    assert torch.isnan(C[2]).all() and torch.isnan(C[3, :2]).all() and C[3, 2].item() == -inf
    assert C[4, 0].item() == inf and C[4, 1].item() == inf and C[4, 2].item() == inf


@pytest.mark.cuda
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_cpu_and_cuda_agree_at_larger_sizes(gemm, dtype):
    # Enough entries that the rigorous bound leaves some undecided: both paths run on both devices.
    A, B = phi_pair(300, 2000, 260, 0.5, seed=19, dtype=dtype)
    for options in ({}, {"slices": 6, "fast": True}):
        assert_bitwise_equal(gemm(A, B, rounding="nearest", **options),
                             gemm(A.cuda(), B.cuda(), rounding="nearest", **options))


def test_the_dropped_parts_interval_holds_every_inner_dimension(tmp_path):
    """The interval rounding="nearest" leaves around the kept pairs' sum for the dropped part,
    bound = k (2 s + 1) 2^shift units, is exactly [-bound, bound] for every slice count and mode
    up to the INT8 limit k < 2^29, where k (2 s + 1) passes 2^32 (it once wrapped in int64 there,
    narrowing the interval: undecided entries were rounded as decided), and the long integer's
    add_wide that carries it and the level sums into the limbs. Host code compiled here
    (scripts/probes/dropped_bound_check.cpp, csrc/exact.h as the CPU and the GPU build it)."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    root = pathlib.Path(__file__).resolve().parent.parent
    program = tmp_path / "check"
    subprocess.run([compiler, "-std=c++20", "-O2", "-fwrapv", f"-I{root / 'csrc'}",
                    str(root / "scripts" / "probes" / "dropped_bound_check.cpp"), "-o",
                    str(program)], check=True)
    run = subprocess.run([str(program)], capture_output=True, text=True)
    # 800 intervals, then 200000 sums of add_wide (which both the bound and the level sums go
    # through) against 128-bit integers
    assert run.returncode == 0 and run.stdout.strip() == "cases 200800 wrong 0", run.stdout
