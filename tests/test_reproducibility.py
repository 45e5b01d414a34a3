"""Bitwise reproducibility: threads, repeats, partitions, chunking, streams, CPU vs CUDA."""

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_pair
from ozaki import _ops

GEMMS = [(ozaki.dgemm, torch.float64), (ozaki.sgemm, torch.float32)]


@pytest.mark.parametrize("backend", ["auto", "crt", "int8", "fp16"])
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_thread_count_does_not_change_bits(gemm, dtype, backend):
    A, B = phi_pair(96, 300, 80, 1.0, seed=7, dtype=dtype)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = gemm(A, B, backend=backend)
        torch.set_num_threads(2)
        two = gemm(A, B, backend=backend)
    finally:
        torch.set_num_threads(threads)
    assert_bitwise_equal(one, two)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_repeated_calls_give_the_same_bits(device, gemm, dtype):
    A, B = phi_pair(64, 257, 48, 2.0, seed=8, dtype=dtype, device=device)
    first = gemm(A, B, slices=7)
    for _ in range(3):
        assert_bitwise_equal(gemm(A, B, slices=7), first)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("gemm,dtype", GEMMS)
def test_row_and_column_partitions_give_the_same_bits(device, fast, gemm, dtype):
    A, B = phi_pair(70, 130, 50, 1.0, seed=9, dtype=dtype, device=device)
    whole = gemm(A, B, slices=6, fast=fast)
    for rows in [slice(0, 1), slice(3, 40), slice(40, 70)]:
        assert_bitwise_equal(gemm(A[rows], B, slices=6, fast=fast), whole[rows])
    for cols in [slice(0, 17), slice(17, 49), slice(49, 50)]:
        assert_bitwise_equal(gemm(A, B[:, cols], slices=6, fast=fast), whole[:, cols])


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("fast", [True, False])
def test_workspace_chunking_gives_the_same_bits(device, fast):
    A, B = phi_pair(700, 96, 600, 1.0, seed=10, device=device)
    a, bt = A.contiguous(), B.t().contiguous()
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    unchunked = _ops.gemm_slices(a, bt, stats_a, stats_b, 5, fast, workspace=1 << 40)
    chunked = _ops.gemm_slices(a, bt, stats_a, stats_b, 5, fast, workspace=1)  # forces the smallest chunks
    assert_bitwise_equal(chunked, unchunked)
    assert_bitwise_equal(unchunked, ozaki.dgemm(A, B, slices=5, fast=fast))


@pytest.mark.cuda
@pytest.mark.parametrize("gemm,dtype", GEMMS)
@pytest.mark.parametrize("phi", [0.1, 1.0, 4.0])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (33, 65, 17), (128, 1025, 96), (7, 4097, 130)])
def test_cpu_and_cuda_give_the_same_bits(gemm, dtype, phi, m, k, n):
    A, B = phi_pair(m, k, n, phi, seed=m * k + n, dtype=dtype)
    for slices, fast in [(None, None), (3, True), (8, False)]:
        cpu = gemm(A, B, slices=slices, fast=fast)
        gpu = gemm(A.cuda(), B.cuda(), slices=slices, fast=fast)
        assert_bitwise_equal(gpu, cpu)


@pytest.mark.cuda
def test_non_default_stream_gives_the_same_bits():
    A, B = phi_pair(300, 513, 200, 1.0, seed=12, device="cuda")
    reference = ozaki.dgemm(A, B, slices=6)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        on_stream = ozaki.dgemm(A, B, slices=6)
    torch.cuda.current_stream().wait_stream(stream)
    assert_bitwise_equal(on_stream, reference)
    assert_bitwise_equal(on_stream, ozaki.dgemm(A.cpu(), B.cpu(), slices=6))


@pytest.mark.cuda
def test_every_entry_is_written():
    # poison the caching allocator's memory first: an unwritten entry would show as NaN
    torch.full((4096, 4096), float("nan"), dtype=torch.float64, device="cuda")
    torch.cuda.synchronize()
    A, B = phi_pair(1000, 200, 999, 0.5, seed=13, device="cuda")
    C = ozaki.dgemm(A, B, slices=4)
    assert torch.isfinite(C).all()
    assert_bitwise_equal(C, ozaki.dgemm(A.cpu(), B.cpu(), slices=4))
