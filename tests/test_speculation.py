"""The default plan without a wait (ozaki/speculation.py): the product launched on the last plan's
guess is kept only where the plan is that guess, and every call gives the bits of the same call
without a guess, whether the guess holds, the plan needs more or fewer moduli, or another kind of
scheme-II product (truncated, wide, exact)."""

import pytest
import torch

import ozaki
from helpers import REAL_GEMMS, assert_bitwise_equal, cpu_and_cuda, phi_pair
from ozaki import _ops, replay, speculation

#: (id, phi of each successive call's operands): the plans they lead to (ozaki.plan, checked).
SEQUENCES = [
    ("guess-holds", (0.5, 0.5, 0.5, 0.5)),
    ("more-moduli", (0.5, 0.5, 1.0)),
    ("fewer-moduli", (1.0, 1.0, 0.5)),
    ("alternating", (0.5, 2.0, 0.5, 2.0, 0.5)),
    ("wide-then-truncated", (2.0, 2.0, 0.5, 0.5, 2.0)),
    ("wide-holds", (2.0, 2.0, 2.0, 3.0)),
    ("exact", (4.0, 4.0, 4.0, 0.5)),
]
SHAPE = (70, 300, 9)


@pytest.fixture
def products(monkeypatch):
    """The scheme-II products made since the last reset, as (kind, moduli): ozaki::gemm_crt
    ("crt") and ozaki::gemm_crt_exact calls (exact, or wide where exponents are given)."""
    made = []
    truncated, exact = _ops.gemm_crt, _ops.gemm_crt_exact
    monkeypatch.setattr(replay, "ENABLED", False)  # replayed products are not calls to count

    def counted_truncated(*args, **kwargs):
        made.append(("crt", args[6]))
        return truncated(*args, **kwargs)

    def counted_exact(a, bt, stats_a, stats_b, moduli, workspace=0, exponents=None,
                      residues_a=None):
        exact_exponents = _ops.integer_exponents(stats_a), _ops.integer_exponents(stats_b)
        wide = exponents is not None and not all(
            torch.equal(e, x) for e, x in zip(exponents, exact_exponents))
        made.append(("wide" if wide else "exact", moduli))
        return exact(a, bt, stats_a, stats_b, moduli, workspace, exponents, residues_a)

    monkeypatch.setattr(_ops, "gemm_crt", counted_truncated)
    monkeypatch.setattr(_ops, "gemm_crt_exact", counted_exact)
    return made


def without_guess(call, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(speculation, "DEVICES", ())
        return call()


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("phis", [pytest.param(s[1], id=s[0]) for s in SEQUENCES])
def test_guessed_products_give_the_plans_bits(phis, dtype, device, products, monkeypatch):
    monkeypatch.setattr(speculation, "DEVICES", (device,))
    speculation.forget()
    gemm = REAL_GEMMS[dtype]
    m, k, n = SHAPE
    history = []  # the kinds and moduli of the earlier products' plans
    for seed, phi in enumerate(phis):
        A, B = phi_pair(m, k, n, phi, seed=seed, dtype=dtype, device=device)
        plan = ozaki.plan(A, B)
        expected = without_guess(lambda: gemm(A, B), monkeypatch)
        products.clear()
        got = gemm(A, B)
        assert_bitwise_equal(got, expected)
        planned = speculation.kind_and_moduli(plan)
        guessed = (None if len(history) < 2 or history[-1] != history[-2] else history[-1])
        if guessed is not None and guessed == planned:
            assert products == [planned]  # the guessed product, kept
        else:
            assert products == [p for p in (guessed, planned) if p is not None]
        history.append(planned)
    if dtype == torch.float64 and len(set(phis)) > 1:  # the sequence does change the plan
        plans = {(p.moduli, p.wide) for p in (ozaki.plan(*phi_pair(m, k, n, phi, seed=s,
                                                                   dtype=dtype))
                                              for s, phi in enumerate(phis))}
        assert len(plans) > 1


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_guessed_products_with_a_prepared_operand(device, products, monkeypatch):
    monkeypatch.setattr(speculation, "DEVICES", (device,))
    speculation.forget()
    m, k, n = SHAPE
    A, _ = phi_pair(m, k, n, 0.5, seed=7, dtype=torch.float64, device=device)
    rights = [phi_pair(m, k, n, phi, seed=8 + i, device=device)[1]
              for i, phi in enumerate((0.5, 0.5, 3.0, 0.5))]
    expected = [without_guess(lambda: ozaki.dgemm(A, B), monkeypatch) for B in rights]
    with ozaki.prepare(A):
        for B, e in zip(rights, expected):
            assert_bitwise_equal(ozaki.dgemm(A, B), e)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_no_guess_for_fixed_counts_or_nearest(device, products, monkeypatch):
    monkeypatch.setattr(speculation, "DEVICES", (device,))
    speculation.forget()
    A, B = phi_pair(*SHAPE, 0.5, seed=3, device=device)
    ozaki.dgemm(A, B)
    for kwargs in ({"moduli": 14}, {"rounding": "nearest"}, {"backend": "int8"}):
        products.clear()
        ozaki.dgemm(A, B, **kwargs)
        planned = speculation.kind_and_moduli(ozaki.plan(A, B, **kwargs))
        assert products == ([] if planned is None else [planned])  # no guessed product first


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_a_guessed_product_that_does_not_fit_leaves_the_plans_product(device, products,
                                                                      monkeypatch):
    """Out of memory in the guessed product (launched before the plan): the call goes on with
    the plan, and gives its bits."""
    monkeypatch.setattr(speculation, "DEVICES", (device,))
    speculation.forget()
    A, B = phi_pair(*SHAPE, 0.5, seed=4, device=device)
    expected = without_guess(lambda: ozaki.dgemm(A, B), monkeypatch)
    for _ in range(2):
        ozaki.dgemm(A, B)
    counted = _ops.gemm_crt
    failed = []

    def out_of_memory_once(*args, **kwargs):
        if not failed:
            failed.append(args[6])
            raise torch.OutOfMemoryError("no room for the guessed product")
        return counted(*args, **kwargs)

    monkeypatch.setattr(_ops, "gemm_crt", out_of_memory_once)
    products.clear()
    assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    assert failed == [ozaki.plan(A, B).moduli] and products == [("crt", failed[0])]


def test_remembered_keys_are_bounded(monkeypatch):
    monkeypatch.setattr(speculation, "DEVICES", ("cpu",))
    monkeypatch.setattr(speculation, "MAX_KEYS", 3)
    speculation.forget()
    for n in range(1, 6):
        A, B = phi_pair(8, 32, n, 0.5, seed=n)
        ozaki.dgemm(A, B)
    assert len(speculation._last) == 3
    assert [key[3] for key in speculation._last] == [(n, 32) for n in (3, 4, 5)]
    speculation.forget()
