"""scripts/fuzz_sequences.py, the randomized sequences through the caching layers: fixed draws
pass on the CPU (kept and prepared operands against fresh products), and the check reports a
product that returns a stale result or a result one unit off."""

import warnings

import pytest
import torch

from ozaki import repeated
from helpers import load_script, one_unit_up


@pytest.fixture(scope="module")
def fuzz():
    return load_script("fuzz_sequences")


@pytest.fixture
def kept_small(fuzz):
    """Left operands kept from the script's small threshold, and nothing kept before or after."""
    repeated.clear()
    with fuzz.kept_from(fuzz.KEPT_FROM), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    repeated.clear()


@pytest.mark.parametrize("seed", range(20261129, 20261129 + 12))
def test_drawn_sequences_pass_on_the_cpu(fuzz, kept_small, seed):
    case = fuzz.draw_sequence(seed)
    assert fuzz.run_sequence(case, "cpu") == [], fuzz.describe(case)


def test_kept_parts_serve_the_sequences(fuzz, kept_small):
    """The sequences go through the layers they check: kept parts serve calls of a left operand
    of KEPT_FROM entries or more that comes back."""
    case = fuzz.draw_sequence(5)
    case.update(m=64, k=64, n=8, dtype=torch.float64, kind="phi", options={},
                steps=["call", "call", "call", "new b", "call"])
    served = {"kept": 0, "replayed": 0}
    assert fuzz.run_sequence(case, "cpu", served) == []
    assert served["kept"] >= 2, served


def plain_sequence(fuzz, steps):
    case = fuzz.draw_sequence(7)
    case.update(m=24, k=40, n=16, dtype=torch.float64, kind="phi", options={}, steps=steps,
                enabled_share=0.0)  # every call through the product the tests replace
    return case


def test_a_stale_result_is_reported(fuzz, kept_small, monkeypatch):
    """A product that returns its first result again for the same left operand's memory (as a
    cache that missed a change would) fails at the call after B is replaced."""
    real, results = fuzz.product_function, {}

    def stale(case):
        function = real(case)

        def product(A, B, **options):
            return results.setdefault(A.data_ptr(), function(A, B, **options))

        return product

    monkeypatch.setattr(fuzz, "product_function", stale)
    failures = fuzz.run_sequence(plain_sequence(fuzz, ["call", "new b", "call"]), "cpu")
    assert len(failures) == 1 and failures[0].startswith("step 2 (call) differs"), failures


def test_a_result_one_unit_off_is_reported(fuzz, kept_small, monkeypatch):
    real = fuzz.product_function

    def off(case):
        function = real(case)

        def product(A, B, **options):
            return one_unit_up(function(A, B, **options))

        return product

    monkeypatch.setattr(fuzz, "product_function", off)
    failures = fuzz.run_sequence(plain_sequence(fuzz, ["call"]), "cpu")
    assert failures == [f"step 0 (call) differs from a fresh product in 1 of {24 * 16} entries "
                        "after: call"]
