"""scripts/fuzz_bits.py, the randomized differential check: fixed draws of its cases pass on the
CPU (one thread against the default threads, sampled entries against exact references), and its
checks report a wrong result of each kind they look for."""

import math

import pytest
import torch

import ozaki
from helpers import load_script, one_unit_up


@pytest.fixture(scope="module")
def fuzz():
    return load_script("fuzz_bits")


@pytest.mark.parametrize("seed", range(20261128, 20261128 + 40))
def test_drawn_cases_pass_on_the_cpu(fuzz, seed):
    case = fuzz.draw_case(seed, large_share=0.0)
    assert fuzz.check_case(case, "cpu") == [], fuzz.describe(case)


def test_a_seed_draws_the_same_case(fuzz):
    assert fuzz.draw_case(7) == fuzz.draw_case(7)
    A1, B1 = fuzz.make_operands(fuzz.draw_case(7))
    A2, B2 = fuzz.make_operands(fuzz.draw_case(7))
    assert fuzz.same_bits(A1, A2) and fuzz.same_bits(B1, B2)


def test_same_bits_tells_signed_zeros_apart_and_matches_nan_positions(fuzz):
    x = torch.tensor([0.0, math.nan, 1.5], dtype=torch.float64)
    assert fuzz.same_bits(x, x.clone())
    assert not fuzz.same_bits(x, torch.tensor([-0.0, math.nan, 1.5], dtype=torch.float64))
    assert not fuzz.same_bits(x, torch.tensor([0.0, 2.0, 1.5], dtype=torch.float64))
    assert not fuzz.same_bits(x, x.float())
    z = torch.complex(x, x)
    assert fuzz.same_bits(z, z.clone())
    assert not fuzz.same_bits(z, torch.complex(x, -x))


def plain_case(fuzz, options):
    case = fuzz.draw_case(11, large_share=0.0)
    case.update(m=24, k=40, n=16, dtype=torch.float64, kind="phi", batch=None, complex=False,
                transpose_a=False, transpose_b=True, workspace_mb=None, tile_waves=None,
                options=options)
    return case


def wrapped_dgemm(monkeypatch, change):
    """ozaki.dgemm with change(call number, result) applied to each result."""
    real, calls = ozaki.dgemm, []

    def dgemm(A, B, **options):
        calls.append(None)
        return change(len(calls), real(A, B, **options))

    monkeypatch.setattr(ozaki, "dgemm", dgemm)


def test_a_result_one_unit_off_is_reported(fuzz, monkeypatch):
    wrapped_dgemm(monkeypatch, lambda call, C: one_unit_up(C) if call == 2 else C)
    failures = fuzz.check_case(plain_case(fuzz, {"backend": "auto"}), "cpu")
    assert any("one CPU thread and CPU bits differ (1 of" in f for f in failures), failures


def test_a_second_call_with_other_bits_is_reported(fuzz, monkeypatch):
    wrapped_dgemm(monkeypatch, lambda call, C: one_unit_up(C) if call == 3 else C)
    failures = fuzz.check_case(plain_case(fuzz, {"backend": "auto"}), "cpu")
    assert any("a second call" in f for f in failures), failures


def test_the_layout_changing_the_bits_is_reported(fuzz, monkeypatch):
    wrapped_dgemm(monkeypatch, lambda call, C: one_unit_up(C) if call == 4 else C)
    failures = fuzz.check_case(plain_case(fuzz, {"backend": "auto"}), "cpu")
    assert any("contiguous operands" in f for f in failures), failures


def test_gradients_that_differ_are_reported(fuzz, monkeypatch):
    """A gradient of B one unit off in the second device's backward is reported; equal gradients
    pass."""
    case = plain_case(fuzz, {"backend": "auto"})
    case["grad"] = True
    assert fuzz.check_case(case, "cpu") == []
    real, calls = fuzz.gradients, []

    def gradients(*args):
        calls.append(None)
        grad_a, grad_b = real(*args)
        return (grad_a, one_unit_up(grad_b)) if len(calls) == 2 else (grad_a, grad_b)

    monkeypatch.setattr(fuzz, "gradients", gradients)
    assert fuzz.check_case(case, "cpu") == ["one CPU thread and CPU gradients of B differ"]


def test_an_inaccurate_default_plan_is_reported(fuzz, monkeypatch):
    wrapped_dgemm(monkeypatch, lambda call, C: C * (1 + 1e-9))
    failures = fuzz.check_case(plain_case(fuzz, {"backend": "auto"}), "cpu")
    assert len(failures) == 1 and "errs beyond k u |A||B|" in failures[0], failures


def test_nearest_one_unit_off_is_reported(fuzz, monkeypatch):
    wrapped_dgemm(monkeypatch, lambda call, C: one_unit_up(C))
    case = plain_case(fuzz, {"backend": "auto", "rounding": "nearest"})
    case.update(m=1, n=1)  # the one entry changed is the one sampled
    failures = fuzz.check_case(case, "cpu")
    assert failures == ["rounding='nearest' differs from the exact product rounded once"]


def test_a_case_that_raises_is_reported_with_its_seed(fuzz, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    for name in ("dgemm", "sgemm", "matmul", "gemm"):
        monkeypatch.setattr(ozaki, name, broken)
    monkeypatch.setattr("sys.argv", ["fuzz_bits.py", "--device", "cpu", "--cases", "2",
                                     "--seed", "5", "--large-share", "0"])
    with pytest.raises(SystemExit) as exit_:
        fuzz.main()
    assert exit_.value.code == 1
    out = capsys.readouterr().out
    assert "FAILED seed=5: raised RuntimeError: boom" in out
    assert "FAILED seed=6: raised RuntimeError: boom" in out
    assert "2 failed, seeds 5..6" in out


@pytest.mark.parametrize("argv, message", [
    (["--seconds", "0"], "--seconds must be positive, got 0.0"),
    (["--seconds", "nan"], "--seconds must be positive, got nan"),
    (["--cases", "0"], "--cases must be positive, got 0"),
    (["--large-share", "1.5"], "--large-share must lie in [0, 1], got 1.5"),
])
def test_bad_arguments_are_named(fuzz, monkeypatch, capsys, argv, message):
    monkeypatch.setattr("sys.argv", ["fuzz_bits.py", "--device", "cpu"] + argv)
    with pytest.raises(SystemExit):
        fuzz.main()
    assert message in capsys.readouterr().err
