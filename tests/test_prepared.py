"""ozaki.prepare (ozaki/prepared.py): products with a prepared left operand reuse its kept parts
(rows, row statistics, digits, column exponents, INT8 residues) and give the bits of the same
products without it, on every plan that keeps something: truncated scheme II on both CUDA paths,
wide and exact scheme II, rounding='nearest', scheme I; in-place changes of A are seen."""

import contextlib
import gc
import threading
import time
import warnings

import numpy as np
import pytest
import torch

import ozaki
from helpers import (REAL_GEMMS, assert_bitwise_equal, cpu_and_cuda, crt_paths, error_test, ones,
                     phi_pair, run_in_threads, seeded)
from ozaki import _ops, accuracy, crt, prepared, repeated, replay
from ozaki.options import Options
from ozaki.product import Estimates, KeptEstimates, _kept_estimates, row_operand
from test_wide_spans import AUTOMATIC_BACKENDS, CASES, assert_no_worse_than_twice_native

#: (id, shape (m, k, n), phi, keyword arguments): the plans a prepared operand serves.
PLANS = [
    ("default", (70, 300, 9), 0.5, {}),
    ("moduli-9", (70, 300, 9), 0.5, {"moduli": 9}),
    ("wide", (24, 2048, 20), 2.0, {}),  # tests/test_wide_scheme_two.py: plans wide scheme II
    ("nearest", (33, 200, 17), 1.0, {"rounding": "nearest"}),
    ("crt-fixed", (33, 200, 17), 1.0, {"backend": "crt", "moduli": 14}),
    ("int8", (33, 200, 17), 1.0, {"backend": "int8"}),
    ("fp16-slices", (33, 200, 17), 1.0, {"backend": "fp16", "slices": 4}),
]


def fresh_right(k, n, seed, dtype, device):
    return phi_pair(1, k, n, 1.0, seed=seed, dtype=dtype, device=device)[1]


def plan_kind(A, B, kwargs):
    plan = ozaki.plan(A, B, **kwargs)
    if plan.backend != "crt":
        return None
    return "wide" if plan.wide else "exact" if plan.exact else "crt"


@pytest.mark.filterwarnings("ignore::ozaki.fixed_counts.AccuracyWarning")
@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape, phi, kwargs", [pytest.param(*p[1:], id=p[0]) for p in PLANS])
def test_prepared_products_give_the_same_bits(device, dtype, shape, phi, kwargs):
    m, k, n = shape
    A, B = phi_pair(m, k, n, phi, seed=m + k, dtype=dtype, device=device)
    gemm = REAL_GEMMS[dtype]
    others = [fresh_right(k, n + i, seed=i, dtype=dtype, device=device) for i in range(2)]
    expected = [gemm(A, X, **kwargs) for X in [B, *others]]
    kind = plan_kind(A, others[-1], kwargs)
    with ozaki.prepare(A) as kept:
        got = [gemm(A, X, **kwargs) for X in [B, *others]]
        if kind is not None:  # scheme II keeps A's residues for the last product's plan
            key, residues = kept._residues[-1]
            assert key[0] == kind and kept.nbytes >= residues.numel()
    for g, e in zip(got, expected):
        assert_bitwise_equal(g, e)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("k", [131056, 131057, 131071])
def test_the_largest_inner_dimensions_of_scheme_two_when_prepared(device, k):
    """k just below scheme II's limit of 2^17, where A's kept digits, padded to 16 columns, are
    2^17 wide: prepared products plan and multiply as unprepared ones."""
    A, B = phi_pair(2, k, 3, 0.5, seed=k, device=device)
    expected = [ozaki.dgemm(A, B), ozaki.dgemm(A, B, backend="crt")]
    with ozaki.prepare(A):
        got = [ozaki.dgemm(A, B), ozaki.dgemm(A, B, backend="crt")]
    for g, e in zip(got, expected):
        assert_bitwise_equal(g, e)


@pytest.mark.parametrize("inner_view", [lambda A: A, lambda A: A[:], lambda A: A.view(A.shape)],
                         ids=["A", "slice", "view"])
def test_an_outer_handle_of_the_same_tensor_serves_again_after_an_inner_one(inner_view):
    """ozaki.prepare(A) inside a block that prepared A already (or a view of A with A's identity,
    which is A to ozaki): the inner handle serves while it lives, and the outer one serves again
    (and keeps parts again) once the inner is released, where it served nothing for the rest of
    its block."""
    A, B = phi_pair(40, 30, 20, 0.5, seed=8)
    expected = ozaki.dgemm(A, B)
    with ozaki.prepare(A) as outer:
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
        with ozaki.prepare(inner_view(A)) as inner:
            assert prepared.find(A) is inner
            assert_bitwise_equal(ozaki.dgemm(A, B), expected)
        assert prepared.find(A) is outer
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
        assert outer.nbytes > 0
        # released first, the outer handle is not brought back by an inner one
        with ozaki.prepare(A) as inner:
            outer.release()
        assert prepared.find(A) is None
    assert prepared.find(A) is None


@pytest.mark.parametrize("ending", ["dropped", "released out of order", "middle dropped first"])
def test_an_outer_handle_serves_again_however_the_inner_ones_end(ending):
    """The inner handle dropped (collected, never released), or nested handles released middle
    first: the newest live handle below them serves A again and keeps parts again."""
    A, B = phi_pair(40, 30, 20, 0.5, seed=9)
    expected = ozaki.dgemm(A, B)
    with ozaki.prepare(A) as outer:
        if ending == "dropped":
            inner = ozaki.prepare(A)
            assert_bitwise_equal(ozaki.dgemm(A, B), expected)
            del inner
            gc.collect()
        elif ending == "released out of order":
            middle, newest = ozaki.prepare(A), ozaki.prepare(A)
            middle.release()
            newest.release()
        else:  # the middle one collected while the newest serves, a product in between
            middle, newest = ozaki.prepare(A), ozaki.prepare(A)
            del middle
            gc.collect()
            assert_bitwise_equal(ozaki.dgemm(A, B), expected)
            newest.release()
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
        assert prepared.find(A) is outer and outer.nbytes > 0


def test_a_released_handle_is_refused_as_a_block():
    """`with handle:` on a released handle would prepare nothing: refused by name."""
    A = phi_pair(8, 6, 2, 0.5, seed=10)[0]
    handle = ozaki.prepare(A)
    handle.release()
    with pytest.raises(ValueError, match="ozaki.prepare: this handle was released"):
        with handle:
            pass


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", AUTOMATIC_BACKENDS)
@pytest.mark.parametrize("device", cpu_and_cuda())
def test_rows_of_wide_span_keep_the_promise_when_prepared(device, backend, case):
    """tests/test_wide_spans.py's rows (units rescaled by 1e20, powers of two to 2^+-90,
    Vandermonde rows, one huge entry meeting one tiny): products with A prepared, the first and
    the ones that reuse its parts, are no worse than twice native against the exact product and
    give the bits of the unprepared call."""
    A, B = CASES[case]()
    gemm = REAL_GEMMS[A.dtype]
    exact = accuracy.exact_matmul(A, B)
    A, B = A.to(device), B.to(device)
    expected = gemm(A, B, backend=backend)
    with ozaki.prepare(A):
        for _ in range(2):
            C = gemm(A, B, backend=backend)
            assert_bitwise_equal(C, expected)
            assert_no_worse_than_twice_native(C, A.cpu(), B.cpu(), exact)


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(1, 5, 1), (129, 100, 65), (300, 1000, 7), (257, 200, 300)])
def test_prepared_residues_serve_every_cuda_path(shape, monkeypatch):
    m, k, n = shape
    A, B = phi_pair(m, k, n, 1.0, seed=k, device="cuda")
    A[m // 2, k // 2] = float("nan")
    cpu = ozaki.dgemm(A.cpu(), B.cpu(), backend="crt", moduli=15)
    for path in crt_paths():
        monkeypatch.setenv("OZAKI_CRT_PATH", path)
        with ozaki.prepare(A):
            for _ in range(2):
                assert_bitwise_equal(ozaki.dgemm(A, B, backend="crt", moduli=15).cpu(), cpu)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_residues_are_computed_once_per_plan(device, monkeypatch):
    """Products alternating between two moduli counts compute A's residues once for each; a
    third count replaces the older; max_bytes keeps only what fits, and does not give up the last
    product's residues for another count's (that count's are computed in its product alone) until
    a product no longer uses them."""
    A = phi_pair(50, 120, 6, 0.5, seed=3, device=device)[0]
    calls = []
    original = _ops.crt_left_residues
    monkeypatch.setattr(_ops, "crt_left_residues", lambda *a: calls.append(a[2]) or original(*a))
    with ozaki.prepare(A) as kept:
        for seed, moduli in enumerate([15, 14, 15, 14, 15, 13, 15, 14]):
            ozaki.dgemm(A, fresh_right(120, 6, seed, torch.float64, device), moduli=moduli)
        assert [key for key, _ in kept._residues] == [("crt", 15), ("crt", 14)]
    assert calls == [15, 14, 13, 14]
    calls.clear()
    with ozaki.prepare(A, max_bytes=15 * 50 * 128) as kept:
        for seed, moduli in enumerate([15, 14, 15, 14, 15]):
            ozaki.dgemm(A, fresh_right(120, 6, seed, torch.float64, device), moduli=moduli)
        assert [key for key, _ in kept._residues] == [("crt", 15)]
        assert calls == [15]
        for seed, moduli in enumerate([14, 14, 14]):
            ozaki.dgemm(A, fresh_right(120, 6, seed, torch.float64, device), moduli=moduli)
        assert [key for key, _ in kept._residues] == [("crt", 14)]
    assert calls == [15, 14]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("exact", [False, True])
def test_gemm_uses_the_residues_it_is_given(device, exact):
    """Residues of another matrix change the result: the operators read residues_a, and give the
    computed residues' bits for the right ones."""
    A, B = phi_pair(20, 64, 8, 1.0, seed=5, device=device)
    other = phi_pair(20, 64, 8, 1.0, seed=6, device=device)[0]
    a, bt = A.contiguous(), B.t().contiguous()
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    if exact:
        scale_a = _ops.integer_exponents(stats_a)
        run = lambda r: _ops.gemm_crt_exact(a, bt, stats_a, stats_b, 30, residues_a=r)  # noqa: E731
    else:
        (_, norm_a), (_, norm_b) = (_ops.row_stats_with_norm_scales(x) for x in (a, bt))
        t_a, t_b = crt.scale_bits(16, 64)
        scale_a = _ops.crt_row_scales(norm_a, stats_a, t_a)
        scale_b = _ops.crt_row_scales(norm_b, stats_b, t_b)
        run = lambda r: _ops.gemm_crt(a, bt, scale_a, scale_b, stats_a, stats_b, 16,  # noqa: E731
                                      residues_a=r)
    moduli = 30 if exact else 16
    right = _ops.crt_left_residues(a, scale_a, moduli, exact)
    wrong = _ops.crt_left_residues(other.contiguous(), scale_a, moduli, exact)
    assert_bitwise_equal(run(right), run(None))
    assert not torch.equal(run(wrong), run(None))


@pytest.mark.cuda
@pytest.mark.parametrize("exact, moduli", [(False, 13), (True, 1), (True, 17), (True, 24),
                                           (True, 25), (True, 40)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_left_residues_are_the_same_on_cpu_and_cuda(exact, moduli, dtype):
    """On CUDA, exact residues come from a kernel with the moduli unrolled up to 24 of them and
    from a loop over the moduli past that; both give the CPU's bytes."""
    A = phi_pair(37, 45, 1, 2.0, seed=7, dtype=dtype)[0]
    A[3, 4] = float("inf")
    stats, norms = _ops.row_stats_with_norm_scales(A)
    scale = _ops.integer_exponents(stats) if exact else _ops.crt_row_scales(norms, stats, 40)
    cpu = _ops.crt_left_residues(A, scale, moduli, exact)
    assert cpu.shape == (moduli, 37, 48) and not cpu[..., 45:].any()
    assert torch.equal(_ops.crt_left_residues(A.cuda(), scale.cuda(), moduli, exact).cpu(), cpu)


@pytest.mark.parametrize("device", cpu_and_cuda())
# the kept digits' path, the operator's past 2k/3, and on CUDA bt's column exponents in 16 parts
@pytest.mark.parametrize("n", [30, 61, 600])
@pytest.mark.parametrize("with_exponents", [False, True], ids=["first", "exponents-kept"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_kept_plan_reads_in_one_call_are_their_parts(device, n, with_exponents, dtype, layout):
    """ozaki::crt_kept_plan_reads, from A's kept parts, returns, bit for bit, what the plan reads
    from A itself (Estimates): bt's statistics, norm scales and usable rows, -crt_magnitude (from
    the kept digits, or the operator past 2k/3), both operands' row bounds and, once A's column
    exponents are kept, the entry bound's sum; zero and NaN rows and columns included; bt as rows
    or as B's columns in place (B.mT)."""
    A, B = phi_pair(40, 90, n, 2.0, seed=n, dtype=dtype, device=device)
    A[5] = 0.0
    A[7, 3] = float("nan")
    B[:, 4] = 0.0
    B[2, 6] = float("inf")
    bt = row_operand(B.mT)
    expected_stats, expected_norm = _ops.row_stats_with_norm_scales(bt)
    stats_a, norm_a = _ops.row_stats_with_norm_scales(A)
    plain = Estimates(A, bt, stats_a, expected_stats, norms=(norm_a, expected_norm))
    expected = plain._magnitude_values(norm_a, expected_norm)
    if with_exponents:
        expected = torch.cat([expected, plain._entry_bound_sum().reshape(1)])
    with ozaki.prepare(A) as kept:
        if with_exponents:  # kept once a product needs exact scheme II's entry bound
            KeptEstimates(kept, bt, expected_stats, expected_norm).exact_entry_bound()
        stats_b, norm_b, values = _ops.crt_kept_plan_reads(
            kept.rows(), *kept.stats_and_norms(), kept.magnitude_digits(), kept.row_bounds(),
            kept.known_column_exponents(), bt if layout == "rows" else B.mT)
    for got, want in zip((*stats_b, norm_b, stats_b.usable),
                         (*expected_stats, expected_norm, expected_stats.usable)):
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert values.numel() == (6 if with_exponents else 5)
    assert_bitwise_equal(values, expected)
    assert not stats_b.usable[4] and not stats_b.usable[6] and stats_b.usable.any()


def test_kept_plan_reads_name_a_bad_argument():
    a, bt = torch.rand(4, 6, dtype=torch.float64), torch.rand(3, 6, dtype=torch.float64)
    (stats, norm) = _ops.row_stats_with_norm_scales(a)
    digits = torch.zeros(4, 16, dtype=torch.int8)
    bounds = _ops.crt_row_bounds(stats, norm)
    with pytest.raises(RuntimeError, match=r"column_exponents_a must be a contiguous 1-D Long "
                                           r"tensor of length 6, got \[1\] Long"):
        _ops.crt_kept_plan_reads(a, stats, norm, digits, bounds, torch.zeros(1, dtype=torch.int64),
                                 bt)
    with pytest.raises(RuntimeError, match=r"same number of columns and dtype, got \[4, 6\] Double "
                                           r"and \[3, 5\] Double"):
        _ops.crt_kept_plan_reads(a, stats, norm, digits, bounds, None, bt[:, :5].contiguous())
    with pytest.raises(RuntimeError, match=r"digits_a must be contiguous int8 \(4, 16\), got Char "
                                           r"\[4, 6\]"):
        _ops.crt_kept_plan_reads(a, stats, norm, digits[:, :6].contiguous(), bounds, None, bt)
    with pytest.raises(RuntimeError, match=r"bt must be contiguous or the transpose of a "
                                           r"contiguous \(k, n\) matrix, got strides \[12, 2\]"):
        _ops.crt_kept_plan_reads(a, stats, norm, digits, bounds, None,
                                 torch.rand(3, 12, dtype=torch.float64)[:, ::2])


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("unusable", ["rows-of-a", "columns-of-b"])
def test_kept_estimate_without_usable_pairs_is_infinite(device, unusable):
    A, B = phi_pair(6, 20, 5, 1.0, seed=17, device=device)
    if unusable == "rows-of-a":
        A.zero_()
    else:
        B[0, :] = float("nan")
    bt = row_operand(B.mT)
    stats_b, norm_b = _ops.row_stats_with_norm_scales(bt)
    stats_a, norm_a = _ops.row_stats_with_norm_scales(A)
    with ozaki.prepare(A) as kept:
        got = _ops.crt_kept_plan_reads(kept.rows(), *kept.stats_and_norms(),
                                       kept.magnitude_digits(), kept.row_bounds(), None, bt)[2][0]
    expected = Estimates(A, bt, stats_a, stats_b)._crt_magnitude_bound(norm_a, norm_b)
    assert -got.item() == expected.item() == float("inf")


@contextlib.contextmanager
def held_back(monkeypatch, op):
    """Makes _ops.<op> queue a sleep of about 10 ms on its stream before its own work."""
    original = getattr(_ops, op)

    def sleeping_first(*args, **kwargs):
        torch.cuda._sleep(20_000_000)
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(_ops, op, sleeping_first)
        yield


@pytest.mark.cuda
@pytest.mark.parametrize("keep", ["prepare", "repeated"])
def test_parts_made_on_one_stream_serve_products_on_another(keep, monkeypatch):
    """Parts made on one CUDA stream and read on another: the reading stream waits for their
    making, and their memory is not reused while it may still read them. Each side is held back
    by a sleep on the device, so that without that order the products would read residues not
    made yet, or memory another allocation has taken and filled."""
    monkeypatch.setattr(replay, "ENABLED", False)
    monkeypatch.setattr(repeated, "MIN_ENTRIES", 0)
    repeated.clear()
    m, k, n = 257, 1000, 65
    A, B = phi_pair(m, k, n, 0.5, seed=31, device="cuda")
    with monkeypatch.context() as patch:
        patch.setattr(repeated, "ENABLED", False)
        expected = ozaki.dgemm(A, B)
    handle = ozaki.prepare(A) if keep == "prepare" else None
    if keep == "repeated":
        ozaki.dgemm(A, B)  # seen once: kept from the next product on
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(first):
        with held_back(monkeypatch, "crt_left_residues"):
            made = ozaki.dgemm(A, B)  # A's residues made on `first`, late
    with torch.cuda.stream(second):
        read = ozaki.dgemm(A, B)  # ... and read on `second`
        with held_back(monkeypatch, "gemm_crt"):
            read_late = ozaki.dgemm(A, B)  # read on `second`, late
    kept = handle if keep == "prepare" else next(iter(repeated._kept.values()))
    sizes = [part.numel() * part.element_size() for part in kept._parts()]
    assert kept._residues, "the products kept A's residues"
    with torch.cuda.stream(first):
        handle.release() if keep == "prepare" else repeated.clear()
        taken = [torch.full((size,), 0x55, dtype=torch.uint8, device="cuda") for size in sizes]
    torch.cuda.synchronize()
    del taken
    for C in (made, read, read_late):
        assert_bitwise_equal(C, expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_in_place_changes_of_a_are_seen(device):
    A, B = phi_pair(30, 80, 5, 0.5, seed=9, device=device)
    with ozaki.prepare(A):
        first = ozaki.dgemm(A, B)
        A.mul_(3.0).add_(0.25)
        changed = ozaki.dgemm(A, B)
        A[0, 0] = 1e200
        changed_again = ozaki.dgemm(A, B)
    assert_bitwise_equal(changed_again, ozaki.dgemm(A.clone(), B))
    assert not torch.equal(first, changed)


@pytest.mark.parametrize("move", ["set_", "data", "resize_"])
def test_a_prepared_operand_that_moves_serves_only_itself(move):
    """A prepared A that moves to other memory (A.set_, A.data = ..., A.resize_) leaves its old
    address: a view of the old memory, and any tensor placed there later, get their own bits, and
    A's products those of its new contents."""
    A, B = phi_pair(40, 64, 6, 1.0, seed=14)
    old = A[:]  # keeps the old memory, at the address the handle was found by
    with ozaki.prepare(A):
        ozaki.dgemm(A, B)
        new = phi_pair(40, 64, 1, 1.0, seed=15)[0]
        if move == "set_":
            A.set_(new)
        elif move == "data":
            A.data = new
        else:
            A.resize_(50, 64)
            A[40:] = 1.5
        old.mul_(2.0)
        assert_bitwise_equal(ozaki.dgemm(old, B), ozaki.dgemm(old.clone(), B))
        for _ in range(2):
            assert_bitwise_equal(ozaki.dgemm(A, B), ozaki.dgemm(A.clone(), B))


def test_a_prepared_operand_moved_back_to_its_old_address_is_seen():
    """A prepared A moved twice with A.data = ... between products, the second time onto new
    memory at its old address (same address, shape and version: only its storage differs), gets
    the bits of its new contents, not the parts of the old ones."""
    A, B = phi_pair(64, 64, 8, 0.5, seed=18)
    misses = 0
    with ozaki.prepare(A):
        for step in range(40):
            ozaki.dgemm(A, B)
            old = A.data_ptr()
            A.data = torch.empty(0, dtype=torch.float64)  # A's memory is freed
            held = []
            for _ in range(200):  # a new matrix at the old address
                new = torch.empty(64, 64, dtype=torch.float64)
                if new.data_ptr() == old:
                    break
                held.append(new)
            del held
            new.copy_(phi_pair(64, 64, 1, 0.5, seed=100 + step)[0])
            A.data = new
            misses += A.data_ptr() != old
            assert_bitwise_equal(ozaki.dgemm(A, B), ozaki.dgemm(A.clone(), B))
    assert misses < 40  # the allocator gave the old address back at least once


def test_a_prepared_operand_moved_onto_another_prepared_ones_memory():
    """A moved onto prepared Z's memory (A.data = Z) shares it: in-place changes through either
    tensor are seen by the products of both (Z's handle is not displaced by A's)."""
    A, Z, B = (phi_pair(32, 32, 32, 0.5, seed=19 + i)[0] for i in range(3))
    with ozaki.prepare(A), ozaki.prepare(Z):
        ozaki.dgemm(A, B), ozaki.dgemm(Z, B)
        A.data = Z
        ozaki.dgemm(Z, B)
        Z.mul_(2.0)
        assert_bitwise_equal(ozaki.dgemm(Z, B), ozaki.dgemm(Z.clone(), B))
        assert_bitwise_equal(ozaki.dgemm(A, B), ozaki.dgemm(A.clone(), B))
        A.add_(1.0)  # A's own version counter: Z's does not move
        assert_bitwise_equal(ozaki.dgemm(Z, B), ozaki.dgemm(Z.clone(), B))
        assert_bitwise_equal(ozaki.dgemm(A, B), ozaki.dgemm(A.clone(), B))


def test_prepare_of_a_tensor_whose_memory_a_moved_handle_serves():
    """Z prepared after a prepared A moved onto Z's memory and multiplied there: Z's new handle
    serves both tensors and sees in-place changes through A too."""
    A, Z, B = (phi_pair(32, 32, 32, 0.5, seed=23 + i)[0] for i in range(3))
    with ozaki.prepare(A):
        ozaki.dgemm(A, B)
        A.data = Z
        ozaki.dgemm(A, B)
        with ozaki.prepare(Z):
            ozaki.dgemm(Z, B)
            A.mul_(2.0)
            assert_bitwise_equal(ozaki.dgemm(A, B), ozaki.dgemm(A.clone(), B))
            assert_bitwise_equal(ozaki.dgemm(Z, B), ozaki.dgemm(Z.clone(), B))


@pytest.mark.parametrize("part", ["row_stats_with_norm_scales", "crt_left_residues"])
def test_parts_made_while_a_changes_are_not_kept(part, monkeypatch):
    """A part made while another thread's product finds A changed in place (and clears the
    handle) is of the old contents: it serves the product that made it, but the products after
    the change get the new contents' bits."""
    A, B = phi_pair(48, 128, 16, 1.0, seed=16)
    X2 = phi_pair(48, 128, 1, 1.0, seed=17)[0]
    expected = ozaki.dgemm(X2, B)
    with ozaki.prepare(A) as kept:
        made = getattr(_ops, part)
        changed = []

        def making_while_a_changes(*args, **kwargs):
            result = made(*args, **kwargs)
            if not changed:  # the other thread: A written, then its product sees the change
                changed.append(True)
                A.copy_(X2)
                kept.current()
            return result
        monkeypatch.setattr(_ops, part, making_while_a_changes)
        ozaki.dgemm(A, B)
        monkeypatch.setattr(_ops, part, made)
        for _ in range(2):
            assert_bitwise_equal(ozaki.dgemm(A, B), expected)


def test_a_part_stored_while_another_thread_sees_a_changed_is_not_kept():
    """A product stores a part (here A's row statistics, of the old contents) just as another
    thread's product finds A changed in place and clears the handle: the clear waits for the
    store, or the store sees the clear, so the products after the change get the new contents'
    bits (the clear landed between the check and the store, and the stale part stayed)."""
    A, B = phi_pair(48, 128, 16, 1.0, seed=18)
    X2 = phi_pair(48, 128, 1, 1.0, seed=19)[0]
    expected = ozaki.dgemm(X2, B)
    with ozaki.prepare(A) as kept:
        storing, go_on = threading.Event(), threading.Event()
        keep = kept._keep

        def slow_keep(name, part):
            if name == "stats" and not storing.is_set():
                storing.set()  # checked and about to be stored: the other thread runs now
                go_on.wait(30)
            return keep(name, part)
        kept._keep = slow_keep
        copied = threading.Event()

        def second_product():  # once the first is about to store: A changed, then multiplied
            assert storing.wait(30)
            A.copy_(X2)
            copied.set()
            ozaki.dgemm(A, B)

        def store_later():
            assert copied.wait(30)
            time.sleep(0.3)  # the second product reaches the handle's clear
            go_on.set()
        assert run_in_threads(lambda: ozaki.dgemm(A, B), second_product, store_later) == []
        del kept._keep
        for _ in range(2):
            assert_bitwise_equal(ozaki.dgemm(A, B), expected)


def _residues_paused_until(kept, event):
    """kept.residues, its first call waiting for event: a product that has read its row scales
    and not yet made its residues. Returns the event set when that call arrives."""
    arrived = threading.Event()
    residues = kept.residues

    def paused(*args):
        if not arrived.is_set():
            arrived.set()
            event.wait(30)
        return residues(*args)
    kept.residues = paused
    return arrived


def test_residues_of_scales_read_before_a_change_are_not_kept():
    """A product that read A's row scales before another thread changed A (and that thread's
    product cleared the handle) makes its residues of the new contents with the old scales:
    they serve that product alone, not the products after (they were kept: wrong bits)."""
    A, B = phi_pair(48, 128, 16, 1.0, seed=20)
    X2 = phi_pair(48, 128, 1, 1.0, seed=21)[0]
    expected = ozaki.dgemm(X2, B)
    with ozaki.prepare(A) as kept:
        changed = threading.Event()
        arrived = _residues_paused_until(kept, changed)

        def change_and_multiply():
            assert arrived.wait(30)
            A.copy_(X2)
            ozaki.dgemm(A, B, backend="int8")  # a product of any plan sees the change
            changed.set()
        assert run_in_threads(lambda: ozaki.dgemm(A, B), change_and_multiply) == []
        del kept.residues
        for _ in range(2):
            assert_bitwise_equal(ozaki.dgemm(A, B), expected)


def test_a_released_handle_keeps_nothing_products_in_flight_make():
    """Parts that a product running on another thread makes after the handle's release are not
    kept in it: release() frees the memory for good."""
    A, B = phi_pair(48, 128, 16, 1.0, seed=22)
    released = threading.Event()
    kept = ozaki.prepare(A)
    arrived = _residues_paused_until(kept, released)

    def release():
        assert arrived.wait(30)
        kept.release()
        released.set()
    assert run_in_threads(lambda: ozaki.dgemm(A, B), release) == []
    assert kept.nbytes == 0


def test_threads_cycling_plans_keep_the_bookkeeping():
    """Threads multiplying a prepared operand with moduli counts in turn, while another thread
    prepares and releases an operand of its own: every product gives its bits, no thread fails,
    and the handle keeps at most KEPT_PLANS residue sets within its cap."""
    A, B = phi_pair(32, 64, 8, 0.5, seed=18)
    other = phi_pair(32, 64, 1, 0.5, seed=19)[0]
    counts = (5, 6, 7)
    expected = {m: ozaki.dgemm(A, B, moduli=m) for m in counts}
    cap = 2 * 7 * 32 * 64
    wrong = []

    def multiply(offset):
        for i in range(300):
            m = counts[(i + offset) % 3]
            if not torch.equal(ozaki.dgemm(A, B, moduli=m), expected[m]):
                wrong.append(m)

    def prepare_and_release():
        for _ in range(300):
            with ozaki.prepare(other):
                time.sleep(0.0005)

    with warnings.catch_warnings(), ozaki.prepare(A, max_bytes=cap) as kept:
        warnings.simplefilter("ignore")  # few moduli: the fixed counts' warning
        errors = run_in_threads(prepare_and_release,
                                *(lambda i=i: multiply(i) for i in range(3)))
        assert not errors, errors[:3]
        assert not wrong
        assert len(kept._residues) <= prepared.KEPT_PLANS
        assert sum(r.numel() for _, r in kept._residues) <= cap


def test_transposed_and_other_views_of_a_are_not_confused():
    """Only the same view (storage, offset, shape, strides) reuses the kept parts: A.t() of a
    square A, a row slice and a prepared transposed view all get their own bits."""
    X = phi_pair(40, 40, 1, 1.0, seed=10)[0]
    B = phi_pair(1, 40, 6, 1.0, seed=11)[1]
    expected = {name: ozaki.dgemm(v, B) for name, v in
                [("X", X), ("Xt", X.t()), ("rows", X[:20])]}
    with ozaki.prepare(X), ozaki.prepare(X.t()):
        for _ in range(2):
            assert_bitwise_equal(ozaki.dgemm(X, B), expected["X"])
            assert_bitwise_equal(ozaki.dgemm(X.t(), B), expected["Xt"])
            assert_bitwise_equal(ozaki.dgemm(X[:20], B), expected["rows"])


def test_prepared_operand_serves_enable_and_matmul():
    A, B = phi_pair(64, 100, 8, 0.5, seed=12)
    expected = ozaki.matmul(A, B)
    with ozaki.prepare(A) as kept, ozaki.enable():
        assert_bitwise_equal(torch.matmul(A, B), expected)
        assert_bitwise_equal(A @ B, expected)
        assert kept._residues


@pytest.mark.parametrize("zero", [0, np.int64(0)], ids=["int", "numpy-int64"])
def test_release_and_max_bytes(zero):
    A, B = phi_pair(64, 100, 8, 0.5, seed=13)
    expected = ozaki.dgemm(A, B)
    kept = ozaki.prepare(A, max_bytes=zero)  # nothing of the residues fits
    assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    assert not kept._residues and 0 < kept.nbytes < 15 * 64 * 112  # stats and digits only
    assert "64x100 torch.float64 on cpu" in repr(kept)
    kept.release()
    assert kept.nbytes == 0 and prepared.find(A) is None
    assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    kept = ozaki.prepare(A)
    del kept  # the handle alone keeps the parts
    assert prepared.find(A) is None


ERRORS = [
    ("not-a-tensor", ([[1.0]],), {}, TypeError,
     r"ozaki.prepare: A must be a torch.Tensor, got list"),
    ("int", (ones(3, 3, dtype=torch.int32),), {}, TypeError,
     r"ozaki.prepare: A must be torch.float64 or torch.float32, got torch.int32"),
    ("sparse", (ones(3, 3).to_sparse(),), {}, TypeError,
     r"ozaki.prepare: A must be a dense \(strided\) tensor, got layout torch.sparse_coo"),
    ("3-D", (ones(2, 3, 3),), {}, ValueError,
     r"ozaki.prepare: A must be 2-D, got 3-D with shape \(2, 3, 3\)"),
    ("meta", (torch.empty(3, 3, dtype=torch.float64, device="meta"),), {}, ValueError,
     r"ozaki.prepare: device must be cpu or cuda, got meta"),
    ("max-bytes-negative", (ones(3, 3),), {"max_bytes": -1}, ValueError,
     r"ozaki.prepare: max_bytes must be None or an integer >= 0, got -1"),
    ("max-bytes-bool", (ones(3, 3),), {"max_bytes": True}, TypeError,
     r"ozaki.prepare: max_bytes must be None or an integer >= 0, got bool True"),
    ("max-bytes-float", (ones(3, 3),), {"max_bytes": 1.5}, TypeError,
     r"ozaki.prepare: max_bytes must be None or an integer >= 0, got float 1.5"),
    ("max-bytes-numpy-negative", (ones(3, 3),), {"max_bytes": np.int64(-2)}, ValueError,
     r"ozaki.prepare: max_bytes must be None or an integer >= 0, got -2"),
]


test_prepare_errors_name_the_argument = error_test(ozaki.prepare, ERRORS)


def test_inference_tensors_are_refused():
    with torch.inference_mode():
        A = torch.ones(3, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="ozaki.prepare: A is an inference tensor"):
        ozaki.prepare(A)


def test_wrong_residues_are_refused():
    A, B = phi_pair(5, 20, 3, 1.0, seed=14)
    a, bt = A.contiguous(), B.t().contiguous()
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    residues = _ops.crt_left_residues(a, _ops.integer_exponents(stats_a), 20, True)
    with pytest.raises(RuntimeError, match=r"residues_a must be a contiguous int8 tensor of shape "
                                           r"\[21, 5, 32\]"):
        _ops.gemm_crt_exact(a, bt, stats_a, stats_b, 21, residues_a=residues)


def misaligned_copy(x):
    """x's values in an int8 tensor that starts one byte past a 16-byte boundary."""
    buffer = torch.empty(x.numel() + 16, dtype=torch.int8, device=x.device)
    start = (16 - buffer.data_ptr() % 16) % 16 + 1
    view = buffer[start:start + x.numel()].view(x.shape)
    view.copy_(x)
    assert view.data_ptr() % 16 == 1 and view.is_contiguous()
    return view


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_misaligned_residues_and_digits_are_refused(device):
    """Prepared residues or digits that do not start at a 16-byte boundary (the tensor memory
    accelerator's loads need one) are refused by name on every device, before any kernel runs;
    the same parts aligned give the product's bits."""
    A, B = phi_pair(30, 40, 20, 1.0, seed=44, device=device)
    a, bt = A.contiguous(), B.t().contiguous()
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    residues = _ops.crt_left_residues(a, _ops.integer_exponents(stats_a), 20, True)
    expected = _ops.gemm_crt_exact(a, bt, stats_a, stats_b, 20)
    assert_bitwise_equal(_ops.gemm_crt_exact(a, bt, stats_a, stats_b, 20, residues_a=residues),
                         expected)
    with pytest.raises(RuntimeError, match=r"residues_a must start at a 16-byte boundary "
                                           r"\(crt_left_residues' result\), got an address 1 "
                                           r"byte past one"):
        _ops.gemm_crt_exact(a, bt, stats_a, stats_b, 20, residues_a=misaligned_copy(residues))
    (stats, norm) = _ops.row_stats_with_norm_scales(a)
    digits = torch.zeros(30, 48, dtype=torch.int8, device=device)
    bounds = _ops.crt_row_bounds(stats, norm)
    with pytest.raises(RuntimeError, match=r"digits_a must start at a 16-byte boundary"):
        _ops.crt_kept_plan_reads(a, stats, norm, misaligned_copy(digits), bounds, None, bt)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_entry_bound_is_read_with_the_estimate_once_a_product_needed_it(device):
    """Rows whose integer scaling Cauchy-Schwarz cannot bound within 40 moduli: once a product
    has kept A's column exponents, later products read exact_entry_bound's sum along with scheme
    II's estimate, the same value as computed alone; results and plans as without prepare."""
    g = seeded(43)
    A = torch.randn(30, 40, generator=g, dtype=torch.float64)
    A = (A * torch.exp2(torch.randint(-200, 200, (30, 40), generator=g).double())).to(device)
    B1, B2 = (torch.randn(40, 5, generator=g, dtype=torch.float64).to(device) for _ in range(2))
    expected = [(ozaki.dgemm(A, B), str(ozaki.plan(A, B))) for B in (B1, B2)]
    with ozaki.prepare(A) as kept:
        assert not kept.has_column_exponents()
        first = ozaki.dgemm(A, B1)
        assert kept.has_column_exponents()
        bt = row_operand(B2.mT)
        est = _kept_estimates(kept, bt, Options())  # as the default call reads them
        stats_b, norm_b = est.stats_b, est.norm_scales()[1]
        est.crt_magnitude(*est.norm_scales())
        assert est._entry_sum is not None  # read along
        stats_a, norm_a = _ops.row_stats_with_norm_scales(A)
        plain = Estimates(A, bt, stats_a, stats_b, norms=(norm_a, norm_b))
        assert est.exact_entry_bound() == plain.exact_entry_bound()
        second = ozaki.dgemm(A, B2)
        A.mul_(1.0)  # an in-place change drops the kept parts
        assert ozaki.prepared.find(A) is kept and not kept.has_column_exponents()
    assert_bitwise_equal(first, expected[0][0])
    assert_bitwise_equal(second, expected[1][0])
    assert str(ozaki.plan(A, B2)) == expected[1][1]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("kept", ["prepared", "repeated", "replayed"])
@pytest.mark.parametrize("first", ["plain", "negated"])
def test_views_of_opposite_sign_are_kept_apart(device, kept, first, monkeypatch):
    """x.imag and x.conj().imag share their address, shape and strides but hold opposite values
    (the second carries torch's negative bit): the kept parts of one (ozaki.prepare, ozaki.repeated)
    and its replayed graphs (CUDA) never serve the other. Each call gives the bits of the same
    product of a fresh copy of its operand."""
    replay.clear()
    repeated.clear()
    m, k, n = 70, 300, 9
    x = torch.complex(phi_pair(m, k, n, 0.5, seed=33, device=device)[0],
                      phi_pair(m, k, n, 0.5, seed=34, device=device)[0])
    B = phi_pair(m, k, n, 0.5, seed=35, device=device)[1]
    views = {"plain": x.imag, "negated": x.conj().imag}
    assert views["negated"].is_neg() and views["plain"].data_ptr() == views["negated"].data_ptr()
    expected = {name: ozaki.dgemm(view.resolve_neg().clone(), B) for name, view in views.items()}
    assert not torch.equal(expected["plain"], expected["negated"])
    second = "negated" if first == "plain" else "plain"
    monkeypatch.setattr(repeated, "MIN_ENTRIES", 0)
    monkeypatch.setattr(repeated, "ENABLED", kept == "repeated")
    with ozaki.prepare(views[first]) if kept == "prepared" else contextlib.nullcontext():
        for name in [first] * 4 + [second] * 4 + [first, second] * 2:
            assert_bitwise_equal(ozaki.dgemm(views[name], B), expected[name])
    replay.clear()
    repeated.clear()
