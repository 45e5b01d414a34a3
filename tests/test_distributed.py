"""Sharded products on torch.distributed (docs/distributed.md): world sizes 2 and 3 with gloo on
the CPU (and 2 ranks with NCCL where two GPUs are present), every layout of
ozaki.distributed.matmul and every DTensor placement pair, each rank's result bitwise equal to
single-process ozaki on the whole matrices."""

import json
import math
import socket
from fractions import Fraction

import pytest
import torch
import torch.multiprocessing as mp

import distributed_cases as cases
import ozaki
from helpers import cpu_and_cuda, norm_scale_code, scale_of
from ozaki import _ops
from ozaki.distributed.inner import norm_scales_from_sums
from ozaki.crt import power_of_two

ALL = cases.all_cases()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(world, backend, tmp_path):
    """Every rank's outcomes; a rank that died (an abort, a collective's timeout) reports what it
    wrote before, and the outcomes it did not reach name the cause."""
    died = None
    try:
        mp.start_processes(cases.worker, args=(world, _free_port(), backend, str(tmp_path), None),
                           nprocs=world, join=True, start_method="spawn")
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as error:
        died = f"a rank died: {str(error)[-500:]}"
    results = []
    for r in range(world):
        path = tmp_path / f"rank{r}.json"
        results.append(json.loads(path.read_text()) if path.exists() else {})
        if died is not None:
            results[-1].setdefault("died", died)
    return results


@pytest.fixture(scope="module", params=[2, 3], ids=["gloo-2", "gloo-3"])
def gloo_results(request, tmp_path_factory):
    return _run(request.param, "gloo", tmp_path_factory.mktemp(f"gloo{request.param}"))


@pytest.fixture(scope="module")
def nccl_results(tmp_path_factory):
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL cases need two GPUs")
    return _run(2, "nccl", tmp_path_factory.mktemp("nccl"))


def _check(results, case, key=None):
    for rank, result in enumerate(results):
        outcome = result.get(key or str(case["id"]), result.get("died", "no outcome written"))
        assert outcome is None, f"rank {rank}: {outcome}"


@pytest.mark.parametrize("case", [c for c in ALL if c["data"] in ("spread", "hidden")],
                         ids=lambda c: cases.case_name(c))
def test_data_for_exact_scheme_two_plans_it(case):
    """The "spread" and "hidden" cases reach what they are for: one device plans exact scheme II
    there, which has no k-shard operator (the k-shards take its correctly rounded bits from
    scheme I)."""
    A, B = cases.operands(case)
    plan = ozaki.plan(A, B, **case["options"])
    assert plan.backend == "crt" and plan.exact and plan.rounding is None, plan


@pytest.mark.parametrize("case", ALL, ids=[cases.case_name(c) for c in ALL])
def test_gloo_bitwise_equal_to_one_process(gloo_results, case):
    _check(gloo_results, case)


def test_gloo_mismatched_ranks_raise_everywhere(gloo_results):
    _check(gloo_results, None, "errors")


@pytest.mark.cuda
@pytest.mark.parametrize("case", ALL, ids=[cases.case_name(c) for c in ALL])
def test_nccl_bitwise_equal_to_one_gpu(nccl_results, case):
    _check(nccl_results, case)


@pytest.mark.cuda
def test_nccl_mismatched_ranks_raise_everywhere(nccl_results):
    _check(nccl_results, None, "errors")


# ---- the k-shard helpers that rebuild single-device values from sums ----------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_power_of_two_is_exact(device):
    exponents = torch.arange(-1022, 1024, device=device)
    expected = torch.tensor([math.ldexp(1.0, e) for e in range(-1022, 1024)], dtype=torch.float64)
    assert torch.equal(power_of_two(exponents).cpu(), expected)


def _sums_and_taus(seed):
    """Square sums with random taus: small sums, sums around powers of two (e's boundaries), sums
    on either side of each f's boundary 4^(e + 4) / (16 + f)^2, those past 2^53 that the kernel
    rounds up to 53 bits, and random ones below 2^49 (scheme II's k < 2^17)."""
    g = torch.Generator().manual_seed(seed)
    edges = [0, 1, 2, 3, 4, 5, 15, 16, 17]
    edges += [(1 << b) + d for b in range(2, 49) for d in (-1, 0, 1)]
    edges += [4 ** (e + 4) // (16 + f) ** 2 + d for e in range(1, 25) for f in range(1, 16)
              for d in (0, 1)]
    # past 2^53 (rows longer than 2^21 entries), where the kernel rounds the sum up to 53 bits
    edges += [(1 << b) + d for b in range(53, 62) for d in (-1, 0, 1, 1 << (b - 53))]
    edges += [4 ** (e + 4) // (16 + f) ** 2 + d for e in range(27, 31) for f in range(1, 16)
              for d in (0, 1, 1 << (2 * e - 53))]
    sums = edges + torch.randint(0, 1 << 49, (200,), generator=g).tolist()
    assert max(sums) < 1 << 62
    taus = torch.randint(-1000, 1000, (len(sums),), generator=g).tolist()
    return sums, taus


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_norm_scales_from_sums_match_the_kernel_formula(device):
    sums, taus = _sums_and_taus(8)
    got = norm_scales_from_sums(torch.tensor(sums, device=device),
                                torch.tensor(taus, dtype=torch.int32, device=device))
    assert got.dtype == torch.int32 and got.device.type == device
    expected = [norm_scale_code(s, t) for s, t in zip(sums, taus)]
    assert got.cpu().tolist() == expected
    assert {code % 16 for code in expected} == set(range(16))  # every significand


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_norm_scales_from_sums_match_row_norm_scales(device):
    g = torch.Generator().manual_seed(9)
    a = cases.accuracy.phi_matrix(40, 300, 2.0, generator=g).to(device)
    a[3] = 0.0
    tau = _ops.row_stats(a)[0]
    codes = _ops.row_norm_scales(a, tau)
    assert torch.equal(norm_scales_from_sums(_ops.row_norm_square_sums(a, tau), tau), codes)
    assert (codes % 16 != 0).any()
