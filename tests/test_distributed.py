"""Sharded products on torch.distributed (docs/distributed.md): world sizes 2 and 3 with gloo on
the CPU (and 2 ranks with NCCL where two GPUs are present), every layout of
ozaki.distributed.matmul and every DTensor placement pair, each rank's result bitwise equal to
single-process ozaki on the whole matrices."""

import json
import math
import socket

import pytest
import torch
import torch.multiprocessing as mp

import distributed_cases as cases
from helpers import cpu_and_cuda
from ozaki import _ops
from ozaki.distributed.inner import norm_exponents_from_sums, power_of_two

ALL = cases.all_cases()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(world, backend, tmp_path):
    mp.start_processes(cases.worker, args=(world, _free_port(), backend, str(tmp_path), None),
                       nprocs=world, join=True, start_method="spawn")
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module", params=[2, 3], ids=["gloo-2", "gloo-3"])
def gloo_results(request, tmp_path_factory):
    return _run(request.param, "gloo", tmp_path_factory.mktemp(f"gloo{request.param}"))


@pytest.fixture(scope="module")
def nccl_results(tmp_path_factory):
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL cases need two GPUs")
    return _run(2, "nccl", tmp_path_factory.mktemp("nccl"))


def _check(results, case):
    for rank, result in enumerate(results):
        outcome = result[str(case["id"])]
        assert outcome is None, f"rank {rank}: {outcome}"


@pytest.mark.parametrize("case", ALL, ids=[cases.case_name(c) for c in ALL])
def test_gloo_bitwise_equal_to_one_process(gloo_results, case):
    _check(gloo_results, case)


def test_gloo_mismatched_ranks_raise_everywhere(gloo_results):
    for rank, result in enumerate(gloo_results):
        assert result["errors"] is None, f"rank {rank}: {result['errors']}"


@pytest.mark.cuda
@pytest.mark.parametrize("case", ALL, ids=[cases.case_name(c) for c in ALL])
def test_nccl_bitwise_equal_to_one_gpu(nccl_results, case):
    _check(nccl_results, case)


@pytest.mark.cuda
def test_nccl_mismatched_ranks_raise_everywhere(nccl_results):
    for rank, result in enumerate(nccl_results):
        assert result["errors"] is None, f"rank {rank}: {result['errors']}"


# ---- the k-shard helpers that rebuild single-device values from sums ----------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_power_of_two_is_exact(device):
    exponents = torch.arange(-1022, 1024, device=device)
    expected = torch.tensor([math.ldexp(1.0, e) for e in range(-1022, 1024)], dtype=torch.float64)
    assert torch.equal(power_of_two(exponents).cpu(), expected)


def _norm_exponent(square_sum, tau):
    """csrc/crt.h norm_exponent in Python integers."""
    if square_sum == 0:
        return tau
    e = 0 if square_sum == 1 else ((square_sum - 1).bit_length() - 1 + 2) // 2
    return tau - 16 + e


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_norm_exponents_from_sums_match_the_kernel_formula(device):
    g = torch.Generator().manual_seed(8)
    edges = [0, 1, 2, 3, 4, 5, 15, 16, 17] + [(1 << b) + d for b in range(2, 50) for d in (-1, 0, 1)]
    sums = edges + torch.randint(0, 1 << 49, (200,), generator=g).tolist()
    taus = torch.randint(-1000, 1000, (len(sums),), generator=g).tolist()
    got = norm_exponents_from_sums(torch.tensor(sums, device=device),
                                   torch.tensor(taus, dtype=torch.int32, device=device))
    assert got.dtype == torch.int32
    assert got.cpu().tolist() == [_norm_exponent(s, t) for s, t in zip(sums, taus)]


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_norm_exponents_from_sums_match_row_norm_exponents(device):
    g = torch.Generator().manual_seed(9)
    a = cases.accuracy.phi_matrix(40, 300, 2.0, generator=g).to(device)
    a[3] = 0.0
    tau = _ops.row_stats(a)[0]
    assert torch.equal(norm_exponents_from_sums(_ops.row_norm_square_sums(a, tau), tau),
                       _ops.row_norm_exponents(a, tau))
