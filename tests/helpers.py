"""Helpers shared by the test modules."""

import pytest
import torch

from ozaki import accuracy


def cpu_and_cuda():
    """Device parameters: the CUDA case is marked so conftest skips it where no GPU is usable."""
    return [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def phi_pair(m, k, n, phi, seed, dtype=torch.float64, device="cpu"):
    """Fresh (A, B) with the (rand - 0.5) * exp(phi * randn) distribution, drawn on the CPU."""
    g = seeded(seed)
    A = accuracy.phi_matrix(m, k, phi, generator=g, dtype=dtype)
    B = accuracy.phi_matrix(k, n, phi, generator=g, dtype=dtype)
    return A.to(device), B.to(device)


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor):
    """Same shape, dtype and bits (NaN payloads and signed zeros included)."""
    assert x.shape == y.shape and x.dtype == y.dtype
    int_type = {torch.float64: torch.int64, torch.float32: torch.int32}[x.dtype]
    xb = x.detach().cpu().contiguous().view(int_type)
    yb = y.detach().cpu().contiguous().view(int_type)
    differing = (xb != yb).sum().item()
    assert differing == 0, f"{differing} of {x.numel()} entries differ bitwise"


def assert_usage_error(parse, argv, message, capsys):
    """A command line rejected by argparse: exit status 2 and `message` on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err

