"""The caches (replayed calls, ozaki.prepare, operands kept unasked) across the modes a program
switches between: calls under torch.inference_mode followed by normal ones, a CUDA graph capture
that makes a prepared operand's parts, and a replayed call whose eager product fails. Each later
call behaves as the same call without the caches: the same bits, a normal tensor, no error."""

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, phi_pair
from ozaki import _ops, crt, prepared, product, repeated, replay, speculation
from test_repeated import unkept as uncached
from test_replay import CALLS, SHAPE

pytestmark = pytest.mark.cuda


def forget_all():
    repeated.clear()
    replay.clear()
    speculation.forget()


@pytest.fixture(autouse=True)
def fresh():
    """Nothing kept, replayed or guessed before a test, nor after it."""
    forget_all()
    yield
    forget_all()


def test_a_staged_entry_made_under_inference_mode_serves_normal_calls(monkeypatch):
    """The staged entry's operand copies, made in a call under inference_mode, are written by
    every later call of the shape at other addresses, outside it too."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=40, device="cuda")
    A2, B2 = A.clone(), B.clone()  # other addresses: the shape's staged entry
    expected = uncached(lambda: ozaki.dgemm(A, B), monkeypatch)
    with torch.inference_mode():
        for _ in range(CALLS):
            ozaki.dgemm(A, B)  # the operands' own entry
        ozaki.dgemm(A2, B2)  # the staged entry, its copies made here
    assert any(entry["staged"] for entry in replay.info()), replay.last_failure
    replays = sum(entry["replays"] for entry in replay.info())
    assert_bitwise_equal(ozaki.dgemm(A2, B2), expected)
    assert sum(entry["replays"] for entry in replay.info()) == replays + 1


def test_normal_calls_return_normal_tensors_after_inference_mode_calls(monkeypatch):
    """A replayed call's result is made by the call before it: after calls under inference_mode,
    the next normal call still returns a tensor the caller may change in place."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=41, device="cuda")
    expected = uncached(lambda: ozaki.dgemm(A, B), monkeypatch)
    with torch.inference_mode():
        for _ in range(CALLS):
            ozaki.dgemm(A, B)
    assert replay.info(), replay.last_failure
    C = ozaki.dgemm(A, B)
    assert_bitwise_equal(C, expected)
    assert not C.is_inference()
    C.add_(0)


def test_an_operand_kept_under_inference_mode_serves_normal_calls(monkeypatch):
    """An operand kept unasked in calls under inference_mode: its digest's host buffer is written
    by the checks of later normal calls."""
    monkeypatch.setattr(repeated, "MIN_ENTRIES", 0)
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=42, device="cuda")
    expected = uncached(lambda: ozaki.dgemm(A, B), monkeypatch)
    with torch.inference_mode():
        ozaki.dgemm(A, B)
        ozaki.dgemm(A, B)  # kept from this call on
    assert repeated.info()
    for _ in range(2):
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)


def test_prepared_parts_made_while_capturing_are_not_kept():
    """Parts a prepared operand's handle makes while the stream captures a graph are recorded in
    the graph, not computed: the handle does not keep them, and the next eager product makes
    its own (the CPU's bits)."""
    m, k, n = SHAPE
    moduli = 9
    A, B = phi_pair(m, k, n, 0.5, seed=43, device="cuda")
    expected = ozaki.dgemm(A.cpu(), B.cpu(), moduli=moduli)
    made = []
    with ozaki.prepare(A) as kept:
        graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            graph.capture_begin()
            try:
                stats, norms = kept.stats_and_norms()
                kept.magnitude_digits()
                kept.row_bounds()
                t_a, _ = crt.scale_bits(moduli, k)
                kept.residues("crt", moduli, _ops.crt_row_scales(norms, stats, t_a))
                made.append(True)
            finally:
                graph.capture_end()
        torch.cuda.current_stream().wait_stream(side)
        del graph  # never replayed
        assert made and kept.nbytes == 0
        got = ozaki.dgemm(A, B, moduli=moduli)
    assert_bitwise_equal(got, expected)


def test_a_handle_cleared_during_a_replay_capture_keeps_nothing_uncomputed(monkeypatch):
    """Another thread's product that sees A changed in place clears the handle between the
    capture's read of the kept parts and the capture: the capture makes the parts inside the
    graph, and the handle must not keep them. Here the handle is cleared right after the read and
    the entry is too large to keep, so its graph never runs; the call runs eagerly."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=45, device="cuda")
    expected = ozaki.dgemm(A.cpu(), B.cpu())
    with ozaki.prepare(A):
        ozaki.dgemm(A, B)  # the parts made; the first plan remembered
        ozaki.dgemm(A, B)  # the second alike: the next call is guessed and captured
        original, cleared = prepared.Prepared.kept_parts, []

        def cleared_once(self, *args):
            parts = original(self, *args)
            if not cleared:
                cleared.append(True)
                self._clear()
            return parts

        monkeypatch.setattr(prepared.Prepared, "kept_parts", cleared_once)
        monkeypatch.setattr(replay, "MAX_ENTRY_BYTES", 0)  # the captured graph is dropped
        first = ozaki.dgemm(A, B)
        assert cleared, "the call did not capture"
        second = ozaki.dgemm(A, B)
    assert_bitwise_equal(first, expected)
    assert_bitwise_equal(second, expected)


def test_an_entry_is_dropped_after_the_failed_products_kernels(monkeypatch):
    """A replayed call whose plan is not the guess runs the plan's product eagerly on the
    replayed reads; where that product fails once its kernels are queued, dropping the entry
    (which frees the graph's memory they read) still waits for them."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=46, device="cuda")
    for _ in range(CALLS):
        ozaki.dgemm(A, B)
    assert replay.info(), replay.last_failure
    with torch.no_grad():
        A.copy_(phi_pair(m, k, n, 3.0, seed=47)[0])  # another plan: the eager product runs

    def failing(*args, **kwargs):
        torch.cuda._sleep(1 << 30)  # a long kernel, then a failure
        raise RuntimeError("the plan's product failed")

    monkeypatch.setattr(product, "product_of_plan", failing)
    with pytest.raises(RuntimeError, match="the plan's product failed"):
        ozaki.dgemm(A, B)
    replay.clear()
    assert torch.cuda.current_stream().query()
