"""Repeated left operands kept without being asked (ozaki/repeated.py): a matrix multiplied again
and again is kept from its second product on, every product gives the bits of the same product
run without keeping, writes its version counter did not see are caught by the digest, and the
kept memory stays within its budget and visible."""

import gc
import itertools
import threading
import warnings

import pytest
import torch

import ozaki
from helpers import (REAL_GEMMS, assert_bitwise_equal, cpu_and_cuda, phi_pair, run_in_threads,
                     seeded)
from ozaki import _ops, accuracy, repeated, replay, speculation
# Plan kinds (truncated scheme II in both dtypes, wide and exact), odd sizes with k not a multiple
# of 16, and calls per case: the replay tests'.
from test_replay import CALLS, KINDS, SHAPE
from test_wide_spans import AUTOMATIC_BACKENDS, CASES, assert_no_worse_than_twice_native


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Nothing kept or replayed before a test; small operands kept (MIN_ENTRIES is a speed rule)."""
    monkeypatch.setattr(repeated, "MIN_ENTRIES", 0)
    for state in (repeated, replay, speculation):
        (state.forget if state is speculation else state.clear)()
    yield
    repeated.clear()
    replay.clear()
    speculation.forget()


def unkept(call, monkeypatch):
    """call() with nothing kept or replayed: the plain product's bits."""
    with monkeypatch.context() as patch:
        patch.setattr(repeated, "ENABLED", False)
        patch.setattr(replay, "ENABLED", False)
        return call()


def alias(A):
    """A tensor over A's storage that is not a view of A: its writes leave A's version as it is."""
    return torch.empty(0, dtype=A.dtype, device=A.device).set_(
        A.untyped_storage(), A.storage_offset(), A.shape, A.stride())


def rights(n, seed, dtype, device, phi=0.5):
    k = SHAPE[1]
    return [phi_pair(1, k, n, phi, seed=seed + i, dtype=dtype, device=device)[1]
            for i in range(CALLS)]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype, phi", [pytest.param(d, p, id=i) for i, d, p in KINDS])
@pytest.mark.parametrize("backend", ["auto", "fp16"])
def test_a_repeated_operand_is_kept_and_gives_the_same_bits(device, dtype, phi, backend,
                                                            monkeypatch):
    """K @ P over new right-hand sides, as an iterative solver multiplies: kept from the second
    product on, through dgemm and under ozaki.enable (whose matmul multiplies views of K)."""
    m, k, n = SHAPE
    K = phi_pair(m, k, 1, phi, seed=1, dtype=dtype, device=device)[0]
    Ps = rights(n, 10, dtype, device, phi)
    gemm = REAL_GEMMS[dtype]
    expected = [unkept(lambda: gemm(K, P, backend=backend), monkeypatch) for P in Ps]
    for i, P in enumerate(Ps):
        assert_bitwise_equal(gemm(K, P, backend=backend), expected[i])
        assert len(repeated.info()) == min(i, 1)
    [entry] = repeated.info()
    assert entry["shape"] == (m, k) and entry["dtype"] == dtype and entry["uses"] == CALLS - 1
    assert 0 < entry["bytes"] == repeated.nbytes() <= repeated.MAX_BYTES
    repeated.clear()
    with ozaki.enable((dtype,), backend=backend):
        for i, P in enumerate(Ps):
            assert_bitwise_equal(K @ P, expected[i])
    assert repeated.info()[0]["uses"] == CALLS - 1


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("backend", AUTOMATIC_BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("residues", ["kept", "not-kept"])
def test_rows_of_wide_span_keep_the_promise_when_kept(device, backend, case, residues,
                                                      monkeypatch):
    """tests/test_wide_spans.py's rows (units rescaled by 1e20, powers of two to 2^+-90,
    Vandermonde rows, one huge entry meeting one tiny), multiplied again and again: the products
    that keep A, and those that reuse its parts, are no worse than twice native against the exact
    product and give the bits of the call without keeping; also where a budget below A's residues
    keeps its statistics and digits alone."""
    A, B = CASES[case]()
    gemm = REAL_GEMMS[A.dtype]
    exact = accuracy.exact_matmul(A, B)
    A, B = A.to(device), B.to(device)
    expected = unkept(lambda: gemm(A, B, backend=backend), monkeypatch)
    if residues == "not-kept":
        monkeypatch.setattr(repeated, "MAX_BYTES", repeated._fixed_bytes(A))
    for _ in range(3):
        C = gemm(A, B, backend=backend)
        assert_bitwise_equal(C, expected)
        assert_no_worse_than_twice_native(C, A.cpu(), B.cpu(), exact)
    [entry] = repeated.info()
    assert entry["uses"] == 2
    if residues == "not-kept":
        assert entry["bytes"] <= repeated._fixed_bytes(A)


def kept_operand(device, seed, rights_seed):
    """(K, P): a phi = 0.5 K of SHAPE, kept after three products K @ P."""
    m, k, n = SHAPE
    K = phi_pair(m, k, 1, 0.5, seed=seed, device=device)[0]
    P = rights(n, rights_seed, torch.float64, device)[0]
    for _ in range(3):
        ozaki.dgemm(K, P)
    assert len(repeated.info()) == 1
    return K, P


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_writes_the_version_counter_misses_are_caught(device, monkeypatch):
    """A write through another tensor over K's storage (as a CUDA graph's replay or a NumPy view
    writes) leaves K's version as it was: the digest sees it, the product gives the new contents'
    bits and K is kept again from the next product."""
    K, P = kept_operand(device, seed=2, rights_seed=20)
    version = K._version
    rows = torch.tensor([0, 1], device=device)
    for change in (lambda X: X.mul_(-0.5), lambda X: X[3, 7].copy_(X[3, 7] * (1 + 2**-52)),
                   lambda X: X.index_copy_(0, rows, X[[1, 0]])):
        change(alias(K))
        assert K._version == version
        expected = unkept(lambda: ozaki.dgemm(K.clone(), P), monkeypatch)
        assert_bitwise_equal(ozaki.dgemm(K, P), expected)
        assert repeated.info() == []  # the stale parts were dropped
        for _ in range(2):
            assert_bitwise_equal(ozaki.dgemm(K, P), expected)
        assert repeated.info()[0]["uses"] == 1  # kept again, made from the new contents


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("written", [True, False], ids=["stale", "unchanged"])
def test_an_error_of_the_kept_product_stands_only_where_the_parts_are_current(device, written,
                                                                             monkeypatch):
    """The product of kept parts runs before their digest is compared: what it raises is
    discarded with it where the operand was written behind its version counter (the call then
    runs without the parts), and raised where the parts are current."""
    from ozaki import product
    K, P = kept_operand(device, seed=4, rights_seed=30)
    if written:
        alias(K).mul_(-0.5)
    expected = unkept(lambda: ozaki.dgemm(K.clone(), P), monkeypatch)
    planned = product.planned_product

    def failing_with_kept_parts(est, dtype, options, kept=None):
        if kept is not None:
            raise RuntimeError("a product of kept parts failed")
        return planned(est, dtype, options, kept)

    monkeypatch.setattr(product, "planned_product", failing_with_kept_parts)
    monkeypatch.setattr(replay, "ENABLED", False)
    if written:
        assert_bitwise_equal(ozaki.dgemm(K, P), expected)
        assert repeated.info() == []  # the stale parts were dropped
    else:
        with pytest.raises(RuntimeError, match="a product of kept parts failed"):
            ozaki.dgemm(K, P)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, phi", [pytest.param(d, p, id=i) for i, d, p in KINDS])
def test_replayed_products_of_a_repeated_operand_catch_unseen_writes(dtype, phi, monkeypatch):
    """The replayed graphs read a kept operand's parts: a write the version counter missed
    (here by a CUDA graph of our own) gives the new contents' bits all the same."""
    m, k, n = SHAPE
    K, P = phi_pair(m, k, n, phi, seed=3, dtype=dtype, device="cuda")
    source = K.clone().mul_(-2.0)
    gemm = REAL_GEMMS[dtype]
    expected = unkept(lambda: gemm(K, P), monkeypatch)
    for _ in range(CALLS):
        assert_bitwise_equal(gemm(K, P), expected)
    assert sum(e["replays"] for e in replay.info()) >= CALLS - 2, replay.last_failure
    graph = torch.cuda.CUDAGraph()
    writer = alias(K)
    with torch.cuda.graph(graph):
        writer.copy_(source)
    graph.replay()
    expected = unkept(lambda: gemm(source, P), monkeypatch)
    for _ in range(CALLS):
        assert_bitwise_equal(gemm(K, P), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("streams", ["shared", "own"])
def test_threads_sharing_a_kept_operand_get_its_bits(device, streams, monkeypatch):
    """Two threads multiplying the same K at once, on the same CUDA stream or each on its own:
    each product checks its own digest, reads parts the other thread may have made on its
    stream, and gives the bits of the product without keeping."""
    if streams == "own" and device == "cpu":
        pytest.skip("streams are CUDA's")
    m, k, n = SHAPE
    K = phi_pair(m, k, 1, 0.5, seed=11, device=device)[0]
    Ps = rights(n, 60, torch.float64, device)
    expected = [unkept(lambda: ozaki.dgemm(K, P), monkeypatch) for P in Ps]
    results = {}

    def work(name):
        stream = torch.cuda.Stream() if streams == "own" else None
        with torch.cuda.stream(stream):
            results[name] = [ozaki.dgemm(K, Ps[i % CALLS]) for i in range(4 * CALLS)]
            if stream is not None:
                stream.synchronize()

    threads = [threading.Thread(target=work, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in ("a", "b"):
        for i, C in enumerate(results[name]):
            assert_bitwise_equal(C, expected[i % CALLS])
    assert repeated.info()[0]["uses"] >= 4 * CALLS


def test_threads_multiplying_fresh_views_of_a_kept_operand(monkeypatch):
    """Threads that each multiply a view made afresh per call (ozaki.matmul of a batch of rows
    folds it into one matrix) read their own view, never another thread's that may be gone."""
    K = phi_pair(2 * 64, 150, 1, 0.5, seed=12)[0].reshape(2, 64, 150)
    P = phi_pair(1, 150, 16, 0.5, seed=13)[1]
    expected = unkept(lambda: ozaki.matmul(K, P), monkeypatch)
    results = []

    def work():
        for _ in range(400):
            results.append(ozaki.matmul(K, P))

    errors = run_in_threads(work, work, work)
    assert not errors, errors[:3]
    for C in results:
        assert_bitwise_equal(C, expected)


def test_threads_keeping_operands_of_their_own(monkeypatch):
    """Two threads, each multiplying its own kept operand with moduli counts in turn: the budget's
    count of the kept parts reads the kept operands under the lock, so no thread fails while
    the other's find reorders them, and every product gives its bits."""
    As = [phi_pair(32, 64, 1, 0.5, seed=40 + i)[0] for i in range(2)]
    B = phi_pair(1, 64, 8, 0.5, seed=42)[1]
    counts = (5, 6, 7)
    expected = [{m: unkept(lambda: ozaki.dgemm(A, B, moduli=m), monkeypatch) for m in counts}
                for A in As]
    wrong = []

    def work(index):
        for i in range(1500):
            m = counts[i % 3]
            if not torch.equal(ozaki.dgemm(As[index], B, moduli=m), expected[index][m]):
                wrong.append(m)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few moduli: the fixed counts' warning
        errors = run_in_threads(lambda: work(0), lambda: work(1))
    assert not errors, errors[:3]
    assert not wrong


def test_parts_made_after_keeping_stay_within_the_budget(monkeypatch):
    """Operands kept while only scheme I ran (their statistics alone made) hold room for their
    digits: made later by scheme II products, the parts of all still fit MAX_BYTES."""
    Ks = [phi_pair(256, 256, 1, 0.5, seed=20 + i)[0] for i in range(4)]
    P = phi_pair(1, 256, 8, 0.5, seed=24)[1]
    monkeypatch.setattr(repeated, "MAX_BYTES", 2 * repeated._fixed_bytes(Ks[0]))
    for K in Ks:
        for _ in range(2):
            ozaki.dgemm(K, P, backend="int8")
    for K in Ks:
        ozaki.dgemm(K, P)
        assert repeated.nbytes() <= repeated.MAX_BYTES


def test_threads_making_residues_of_their_own_operands_stay_within_the_budget(monkeypatch):
    """Two threads, each making a residue set of its own kept operand, under a budget with room
    for one set beside both operands' fixed parts: the room is booked before a set is made, so
    one thread's set is kept and the other's computed for its product alone."""
    Ks = [phi_pair(256, 512, 1, 0.5, seed=50 + i)[0] for i in range(2)]
    B = phi_pair(1, 512, 8, 0.5, seed=52)[1]
    one_set = 12 * 256 * 512
    monkeypatch.setattr(repeated, "MAX_BYTES",
                        2 * repeated._fixed_bytes(Ks[0]) + one_set + one_set // 2)
    for K in Ks:
        for _ in range(2):
            ozaki.dgemm(K, B, backend="int8")  # kept: statistics alone
    expected = [unkept(lambda K=K: ozaki.dgemm(K, B, moduli=12), monkeypatch) for K in Ks]
    results = [None, None]

    def work(index):
        results[index] = ozaki.dgemm(Ks[index], B, moduli=12)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 12 moduli: the fixed count's warning
        errors = run_in_threads(lambda: work(0), lambda: work(1))
    assert not errors, errors
    assert repeated.nbytes() <= repeated.MAX_BYTES
    for got, wanted in zip(results, expected):
        assert_bitwise_equal(got, wanted)


def test_seen_is_read_at_each_product(monkeypatch):
    """ozaki.repeated.SEEN set by the program takes effect: with SEEN = 1, an operand that comes
    back after another one is not kept."""
    m, k, n = SHAPE
    K1, K2 = (phi_pair(m, k, 1, 0.5, seed=30 + i)[0] for i in range(2))
    P = rights(n, 32, torch.float64, "cpu")[0]
    monkeypatch.setattr(repeated, "SEEN", 1)
    for K in (K1, K2, K1, K2):
        ozaki.dgemm(K, P)
    assert repeated.info() == []
    monkeypatch.setattr(repeated, "SEEN", 2)
    repeated.clear()
    for K in (K1, K2, K1):
        ozaki.dgemm(K, P)
    assert len(repeated.info()) == 1


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_in_place_changes_and_freed_operands_drop_the_parts(device, monkeypatch):
    m, k, n = SHAPE
    K = phi_pair(m, k, 1, 0.5, seed=4, device=device)[0]
    P = rights(n, 30, torch.float64, device)[0]
    for _ in range(3):
        ozaki.dgemm(K, P)
    K.add_(0.125)  # seen by the version counter
    expected = unkept(lambda: ozaki.dgemm(K.clone(), P), monkeypatch)
    assert_bitwise_equal(ozaki.dgemm(K, P), expected)
    assert repeated.info() == []
    # An operand changed before every product is never kept.
    for _ in range(CALLS):
        K.mul_(1.0)
        ozaki.dgemm(K, P)
    assert repeated.info() == []
    for _ in range(2):
        ozaki.dgemm(K, P)
    assert len(repeated.info()) == 1
    del K
    gc.collect()
    assert repeated.info() == [] and repeated.nbytes() == 0


def test_a_dropped_handle_leaves_no_weak_reference_to_the_operand():
    """Once its parts are dropped (clear()), a kept operand is a tensor like any other at once,
    without waiting for the cyclic garbage collector: torch.utils.swap_tensors, which refuses a
    tensor that any weak reference reaches, swaps it."""
    m, k, n = SHAPE
    K = phi_pair(m, k, 1, 0.5, seed=5)[0]
    P = rights(n, 30, torch.float64, torch.device("cpu"))[0]
    for _ in range(3):
        ozaki.dgemm(K, P)
    assert len(repeated.info()) == 1
    other = torch.zeros_like(K)
    collecting = gc.isenabled()
    gc.disable()
    try:
        repeated.clear()
        torch.utils.swap_tensors(K, other)
    finally:
        if collecting:
            gc.enable()
    assert not K.any()


def _swappable(K):
    """Whether torch.utils.swap_tensors takes K now, without the cyclic garbage collector: no
    weak reference of a kept handle is left on it (swapped back after)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        other = torch.empty_like(K)
        torch.utils.swap_tensors(K, other)
        torch.utils.swap_tensors(K, other)
        return True
    except RuntimeError:
        return False
    finally:
        if collecting:
            gc.enable()


@pytest.mark.parametrize("change", ["in place", "through a view", "budget lowered"])
def test_parts_that_can_serve_no_more_go_at_the_next_product(change, monkeypatch):
    """Kept parts that can never serve again are freed at the next product of any operand (not
    when their operand comes back, nor at the budget's next admission): the operand changed in
    place (through itself or a view, which shares its version counter), or a budget lowered below
    them."""
    m, k, n = SHAPE
    K = phi_pair(m, k, 1, 0.5, seed=7)[0]
    P = rights(n, 30, torch.float64, "cpu")[0]
    other = phi_pair(3, k, 1, 0.5, seed=8)[0]
    for _ in range(3):
        ozaki.dgemm(K, P)
    assert repeated._kept and not _swappable(K)
    if change == "in place":
        K.mul_(2.0)
    elif change == "through a view":
        K[1:3, :5] = 0.5
    else:
        monkeypatch.setattr(repeated, "MAX_BYTES", repeated.nbytes() - 1)
    ozaki.dgemm(other, P)
    assert not repeated._kept and _swappable(K)
    assert repeated.info() == [] and repeated.nbytes() == 0


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_the_budget_holds_and_drops_the_least_recently_used(device, monkeypatch):
    """Two operands of a budget that holds one: the newer one is kept and the older dropped;
    a budget below one operand's residues keeps its statistics and digits alone, one below
    those keeps nothing; the products' bits never change."""
    m, k, n = SHAPE
    K1 = phi_pair(m, k, 1, 0.5, seed=5, device=device)[0]
    K2 = phi_pair(m, k, 1, 0.5, seed=6, device=device)[0]
    P = rights(n, 40, torch.float64, device)[0]
    expected = {id(K): unkept(lambda: ozaki.dgemm(K, P), monkeypatch) for K in (K1, K2)}
    for K in (K1, K1):
        ozaki.dgemm(K, P)
    one = repeated.nbytes()
    monkeypatch.setattr(repeated, "MAX_BYTES", one + one // 2)
    for K in (K2, K2, K1, K2):
        assert_bitwise_equal(ozaki.dgemm(K, P), expected[id(K)])
        assert len(repeated.info()) == 1 and repeated.nbytes() <= repeated.MAX_BYTES
    fixed = repeated._fixed_bytes(K1)
    monkeypatch.setattr(repeated, "MAX_BYTES", fixed + repeated._plane_bytes(K1))
    repeated.clear()
    for _ in range(3):
        assert_bitwise_equal(ozaki.dgemm(K1, P), expected[id(K1)])
    [entry] = repeated.info()
    assert entry["uses"] == 2 and 0 < entry["bytes"] <= fixed  # no residue set fits
    monkeypatch.setattr(repeated, "MAX_BYTES", fixed // 2)
    repeated.clear()
    for _ in range(3):
        assert_bitwise_equal(ozaki.dgemm(K1, P), expected[id(K1)])
    assert repeated.info() == []


def test_what_is_not_kept(monkeypatch):
    """Switched off, below MIN_ENTRIES, an explicitly prepared operand (its handle serves, and
    takes the operand over), batches and inference tensors: nothing is kept unasked."""
    m, k, n = SHAPE
    K, P = phi_pair(m, k, n, 0.5, seed=7)
    for name, value in [("ENABLED", False), ("MIN_ENTRIES", m * k + 1)]:
        with monkeypatch.context() as patch:
            patch.setattr(repeated, name, value)
            for _ in range(3):
                ozaki.dgemm(K, P)
            assert repeated.info() == []
    for _ in range(2):
        ozaki.dgemm(K, P)
    assert len(repeated.info()) == 1
    with ozaki.prepare(K) as kept:
        assert repeated.info() == []
        for _ in range(3):
            ozaki.dgemm(K, P)
        assert kept._residues and repeated.info() == []
    batch = torch.stack([K, K])
    for _ in range(3):
        ozaki.matmul(batch, torch.stack([P, P]))
    with torch.inference_mode():
        frozen = K.clone()
    for _ in range(3):
        ozaki.dgemm(frozen, P)
    assert repeated.info() == []


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (64, 130), (300, 1), (257, 1001)])
def test_fingerprint_is_the_same_everywhere_and_sees_every_change(dtype, shape):
    """The digest does not depend on the strides, the data's alignment (matrices contiguous by
    rows or by columns that start 1 to 3 entries past a 16-byte boundary: CUDA reads both in
    memory order, in 16-byte vectors) or the device; a change of one bit anywhere, or two entries
    trading places, changes it; an empty matrix's digest is 0."""
    A = torch.randn(shape, generator=seeded(8), dtype=torch.float64).to(dtype)
    digest = int(_ops.fingerprint(A))
    assert int(_ops.fingerprint(A.t().contiguous().t())) == digest
    padded = torch.zeros(shape[0], shape[1] + 3, dtype=dtype)
    padded[:, 1:-2] = A
    assert int(_ops.fingerprint(padded[:, 1:-2])) == digest
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    for device, offset in itertools.product(devices, (1, 2, 3)):
        buffer = torch.zeros(A.numel() + 4, dtype=dtype, device=device)
        buffer[offset:offset + A.numel()] = A.flatten()
        shifted = buffer[offset:offset + A.numel()].view(shape)
        assert shifted.is_contiguous() and int(_ops.fingerprint(shifted)) == digest
        buffer[offset:offset + A.numel()] = A.t().flatten()
        columns = buffer[offset:offset + A.numel()].view(shape[1], shape[0]).t()
        assert torch.equal(columns.cpu(), A) and int(_ops.fingerprint(columns)) == digest
    if torch.cuda.is_available():
        assert int(_ops.fingerprint(A.cuda())) == digest
        assert int(_ops.fingerprint(A.t().contiguous().cuda().t())) == digest
    bits = A.view(torch.int64 if dtype == torch.float64 else torch.int32)
    width = bits.element_size() * 8
    for index in range(0, A.numel(), max(1, A.numel() // 7)):
        for bit in (0, 17, width - 1):
            flipped = bits.clone()
            mask = 1 << bit if bit < width - 1 else -(1 << bit)  # the sign bit as a signed integer
            flipped.view(-1)[index] ^= mask
            assert int(_ops.fingerprint(flipped.view(dtype))) != digest
    if A.numel() > 1:
        swapped = A.flatten().roll(1).reshape(shape)
        assert int(_ops.fingerprint(swapped)) != digest
    assert int(_ops.fingerprint(torch.empty(0, 4, dtype=dtype))) == 0


def test_fingerprint_names_a_bad_argument():
    with pytest.raises(RuntimeError, match=r"ozaki::fingerprint: a must be 2-D \(m, k\), got 3-D"):
        _ops.fingerprint(torch.ones(2, 2, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="ozaki::fingerprint: a must be float64 or float32"):
        _ops.fingerprint(torch.ones(2, 2, dtype=torch.int32))
