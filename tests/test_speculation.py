"""The default plan without a wait (ozaki/speculation.py): the product launched on the last plan's
guess is kept only where the plan is that guess, and every call gives the bits of the same call
without a guess, whether the guess holds, the plan needs more or fewer moduli, or another kind of
product (wide scheme II)."""

import pytest
import torch

import ozaki
from helpers import REAL_GEMMS, assert_bitwise_equal, cpu_and_cuda, phi_pair
from ozaki import _ops, speculation

#: (id, phi of each successive call's operands): the plans they lead to (ozaki.plan, checked).
SEQUENCES = [
    ("guess-holds", (0.5, 0.5, 0.5)),
    ("more-moduli", (0.5, 1.0)),
    ("fewer-moduli", (1.0, 0.5)),
    ("wide-then-truncated", (2.0, 0.5, 2.0)),
]
SHAPE = (70, 300, 9)


@pytest.fixture
def products(monkeypatch):
    """The truncated scheme-II products (ozaki::gemm_crt calls) made since the last reset."""
    made = []
    plain = _ops.gemm_crt

    def counted(*args, **kwargs):
        made.append(args[6])  # the moduli count
        return plain(*args, **kwargs)

    monkeypatch.setattr(_ops, "gemm_crt", counted)
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
    last = None
    for seed, phi in enumerate(phis):
        A, B = phi_pair(m, k, n, phi, seed=seed, dtype=dtype, device=device)
        plan = ozaki.plan(A, B)
        expected = without_guess(lambda: gemm(A, B), monkeypatch)
        products.clear()
        got = gemm(A, B)
        assert_bitwise_equal(got, expected)
        truncated = speculation.is_truncated(plan)
        guessed = last is not None and speculation.is_truncated(last)
        if guessed and truncated and plan.moduli == last.moduli:
            assert products == [plan.moduli]  # the guessed product, kept
        elif guessed:
            assert products == [last.moduli] + ([plan.moduli] if truncated else [])
        else:
            assert products == ([plan.moduli] if truncated else [])
        last = plan
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
        assert products in ([], [14]) and (products == [14]) == ("moduli" in kwargs)


def test_remembered_keys_are_bounded(monkeypatch):
    monkeypatch.setattr(speculation, "DEVICES", ("cpu",))
    monkeypatch.setattr(speculation, "MAX_KEYS", 3)
    speculation.forget()
    for n in range(1, 6):
        A, B = phi_pair(8, 32, n, 0.5, seed=n)
        ozaki.dgemm(A, B)
    assert len(speculation._last_moduli) == 3
    assert [key[3] for key in speculation._last_moduli] == [(n, 32) for n in (3, 4, 5)]
    speculation.forget()
