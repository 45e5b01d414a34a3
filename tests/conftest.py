"""Shared test setup: CUDA cases carry the `cuda` mark and are skipped without a GPU build."""

import pytest
import torch

import ozaki
from ozaki import _ops


def cuda_usable() -> bool:
    return torch.cuda.is_available() and _ops.cuda_backend_built()


def pytest_collection_modifyitems(config, items):
    if cuda_usable():
        return
    reason = ("no CUDA device" if not torch.cuda.is_available()
              else "ozaki was built without its CUDA backend")
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    return (f"ozaki {ozaki.__version__}, torch {torch.__version__}, CUDA backend built: "
            f"{_ops.cuda_backend_built()}, CUDA device: {torch.cuda.is_available()}")
