"""Sharded products on torch.distributed (docs/distributed.md): world sizes 2 and 3 with gloo on
the CPU (and 2 ranks with NCCL where two GPUs are present), every layout of
ozaki.distributed.matmul and every DTensor placement pair, each rank's result bitwise equal to
single-process ozaki on the whole matrices."""

import json
import socket

import pytest
import torch
import torch.multiprocessing as mp

import distributed_cases as cases

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
