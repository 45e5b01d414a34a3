"""Replayed calls (ozaki/replay.py): repeated default products on CUDA run from captured graphs,
and every call gives the bits of the same call run eagerly, whatever changed in between: the
operands' contents, the plan they lead to, the stream, a prepared left operand."""

import gc
import weakref
from contextlib import nullcontext

import pytest
import torch

import ozaki
from helpers import REAL_GEMMS, assert_bitwise_equal, crt_paths, phi_pair
from ozaki import product, repeated, replay, speculation
from ozaki.options import Options

#: (id, dtype, phi): truncated scheme II in both dtypes, wide and exact scheme II.
KINDS = [
    ("truncated-float64", torch.float64, 0.5),
    ("truncated-float32", torch.float32, 0.5),
    ("wide", torch.float64, 2.0),
    ("exact", torch.float64, 4.0),
]
#: Tile edges of the GEMMs and residue rows (odd sizes, k not a multiple of 16).
SHAPE = (70, 300, 9)
CALLS = 5


@pytest.fixture(autouse=True)
def fresh():
    replay.clear()
    speculation.forget()
    yield
    replay.clear()
    speculation.forget()


def eager(call, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(replay, "ENABLED", False)
        return call()


def replays():
    return sum(entry["replays"] for entry in replay.info())


def test_nothing_is_replayed_on_the_cpu():
    A, B = phi_pair(*SHAPE, 0.5, seed=1)
    assert not replay.applies(A, B, Options())
    for _ in range(CALLS):
        ozaki.dgemm(A, B)
    assert replay.info() == [] and replay.nbytes() == 0


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("dtype, phi", [pytest.param(d, p, id=i) for i, d, p in KINDS])
def test_replayed_calls_give_the_eager_bits(dtype, phi, layout, monkeypatch):
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, phi, seed=2, dtype=dtype, device="cuda")
    if layout == "columns":  # A's rows and B's columns strided: the graphs copy them
        A, B = A.t().contiguous().t(), B.t().contiguous().t()
    gemm = REAL_GEMMS[dtype]
    expected = eager(lambda: gemm(A, B), monkeypatch)
    for _ in range(CALLS):
        assert_bitwise_equal(gemm(A, B), expected)
    planned = speculation.kind_and_moduli(ozaki.plan(A, B))
    assert [e["plan"] for e in replay.info()] == [planned]
    assert replays() >= CALLS - 2, replay.last_failure  # eager first calls, then replays


@pytest.mark.cuda
def test_every_crt_path_replays_its_bits(monkeypatch):
    """Each CUDA path replays the eager bits into a fresh result (the reduced and fused paths by
    moving their graph's result writers, the others by copying the graph's result; poisoned_call
    below), and earlier results keep theirs."""
    A, B = phi_pair(*SHAPE, 1.0, seed=3, device="cuda")
    expected = eager(lambda: ozaki.dgemm(A, B), monkeypatch)
    for path in crt_paths():
        with monkeypatch.context() as patch:
            patch.setenv("OZAKI_CRT_PATH", path)
            if not path:
                patch.delenv("OZAKI_CRT_PATH")
            replay.clear()
            kept = []
            for _ in range(CALLS):
                assert_bitwise_equal(poisoned_call(lambda: ozaki.dgemm(A, B), expected, kept)[0],
                                     expected)
            for got in kept:
                assert_bitwise_equal(got, expected)
            assert replays() >= CALLS - 1, (path, replay.last_failure)
            if path in ("reduced", "fused") and replay.MOVES_RESULTS:
                assert [e["result"] for e in replay.info()] == ["moved"], path


def full_path_calls(monkeypatch):
    """A list that grows by one each time a call reaches replay.product_of (the full path), not
    served by replay.quick_product."""
    calls = []
    product_of = replay.product_of
    monkeypatch.setattr(replay, "product_of", lambda *args: calls.append(1) or product_of(*args))
    return calls


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, phi", [pytest.param(d, p, id=i) for i, d, p in KINDS])
def test_repeated_default_calls_are_found_at_once(dtype, phi, monkeypatch):
    """Once captured, the entry of a default call is found by quick_product through every public
    entry (dgemm/sgemm, matmul, gemm, torch.matmul under ozaki.enable): the full path is never
    reached, every call replays, and the bits are the eager call's."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, phi, seed=19, dtype=dtype, device="cuda")
    gemm = REAL_GEMMS[dtype]
    expected = eager(lambda: gemm(A, B), monkeypatch)
    for _ in range(CALLS):
        gemm(A, B)
    assert len(replay.info()) == 1, replay.last_failure
    full = full_path_calls(monkeypatch)
    before = replays()
    entries = [lambda: gemm(A, B), lambda: ozaki.matmul(A, B), lambda: ozaki.gemm(A, B),
               lambda: ozaki.gemm(A, B, beta=0.0, alpha=1.0)]
    for call in entries:
        assert_bitwise_equal(call(), expected)
    with ozaki.enable(dtypes=(dtype,)):
        assert_bitwise_equal(A @ B, expected)
        assert_bitwise_equal(torch.matmul(A, B), expected)
    assert full == [] and replays() == before + len(entries) + 2


@pytest.mark.cuda
@pytest.mark.parametrize("change", ["grad", "options", "prepared", "path", "workspace", "view",
                                    "disabled", "plan"])
def test_calls_that_may_differ_take_the_full_path(change, monkeypatch):
    """quick_product serves none of the calls whose entry or plan could differ: each reaches the
    full path (or runs eagerly) and gives the CPU's bits (references on the CPU, which neither
    replays nor guesses plans)."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=20, device="cuda")
    for _ in range(CALLS):
        ozaki.dgemm(A, B)
    assert len(replay.info()) == 1, replay.last_failure
    full = full_path_calls(monkeypatch)
    before = replays()
    call = ozaki.dgemm
    if change == "grad":
        A.requires_grad_()
    elif change == "options":
        call = lambda a, b: ozaki.dgemm(a, b, backend="crt")  # noqa: E731
    elif change == "prepared":  # a prepared operand, even another one, takes the full path
        other = ozaki.prepare(torch.ones(4, 4, dtype=torch.float64, device="cuda"))  # noqa: F841
    elif change == "path":
        monkeypatch.setenv("OZAKI_CRT_PATH", "cublas")
    elif change == "workspace":
        monkeypatch.setenv("OZAKI_WORKSPACE_MB", "64")
    elif change == "view":  # the address and shape of a kept entry's operand, other strides
        square, right = A[:, :m], B[:m]
        for _ in range(CALLS):
            ozaki.dgemm(square, right)
        assert len(replay.info()) == 2, replay.last_failure
        full.clear()
        A, B = square.t(), right
    elif change == "disabled":
        monkeypatch.setattr(replay, "ENABLED", False)
    elif change == "plan":  # data whose plan is another: replayed against the guess once
        with torch.no_grad():
            A.copy_(phi_pair(m, k, n, 3.0, seed=21)[0])
    expected = call(A.detach().cpu(), B.cpu())
    assert_bitwise_equal(call(A, B), expected)
    if change == "plan":
        assert full == [] and replays() == before + 1  # replayed, then the plan's product ran
        assert_bitwise_equal(call(A, B), expected)
        assert full == [1]  # no guess now: the full path decides
    elif change == "disabled":
        assert full == [] and replays() == before
    else:
        assert full == [1]


@pytest.mark.cuda
def test_calls_under_the_profiler_are_not_replayed(monkeypatch):
    A, B = phi_pair(*SHAPE, 0.5, seed=22, device="cuda")
    expected = eager(lambda: ozaki.dgemm(A, B), monkeypatch)
    for _ in range(CALLS):
        ozaki.dgemm(A, B)
    before = replays()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    assert replays() == before


@pytest.mark.cuda
def test_the_values_copy_to_the_host_inside_a_graph():
    """ozaki._C.copy_to_host queues its copy on the current stream: captured, each replay copies
    the values the device holds then."""
    values = torch.randn(6, dtype=torch.float64, device="cuda")
    host = torch.zeros(8, dtype=torch.float64, pin_memory=True)
    replay._C.copy_to_host(values.get_device(), values.data_ptr(), host.data_ptr(), 48)
    torch.cuda.current_stream().synchronize()
    assert_bitwise_equal(host[:6], values)
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph.capture_begin()
        replay._C.copy_to_host(values.get_device(), values.data_ptr(), host.data_ptr(), 48)
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        values.copy_(torch.randn(6, dtype=torch.float64, generator=g))
        graph.replay()
        torch.cuda.current_stream().synchronize()
        assert_bitwise_equal(host[:6], values)
    assert host[6:].eq(0).all()


@pytest.mark.cuda
def test_batched_products_replay(monkeypatch):
    g = torch.Generator().manual_seed(4)
    A = torch.randn(3, 40, 130, generator=g, dtype=torch.float64).cuda()
    B = torch.randn(3, 130, 20, generator=g, dtype=torch.float64).cuda()
    expected = eager(lambda: ozaki.matmul(A, B), monkeypatch)
    for _ in range(CALLS):
        assert_bitwise_equal(ozaki.matmul(A, B), expected)
    assert replays() >= CALLS - 2, replay.last_failure


@pytest.mark.cuda
def test_replays_read_the_operands_present_contents(monkeypatch):
    """In-place changes between calls: the same plan, then data whose plan is another (more
    moduli, then wide scheme II, then back); every result is the eager call's, and results
    returned earlier keep their values."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=5, device="cuda")
    kept = []  # (result, its expected bits)
    seed = 10
    for phi, calls in [(0.5, 4), (1.0, 4), (2.0, 3), (0.5, 4)]:
        for _ in range(calls):
            A_new, B_new = phi_pair(m, k, n, phi, seed=seed, device="cuda")
            seed += 1
            A.copy_(A_new)
            B.copy_(B_new)
            expected = eager(lambda: ozaki.dgemm(A_new, B_new), monkeypatch)
            got = ozaki.dgemm(A, B)
            assert_bitwise_equal(got, expected)
            kept.append((got, expected))
        # the last calls of each phase replayed the product of its plan, from the operands' own
        # entry, captured again (not the shape's staged one, which would copy them)
        planned = speculation.kind_and_moduli(ozaki.plan(A, B))
        assert [(e["plan"], e["staged"]) for e in replay.info()] == [(planned, False)]
        assert replays() >= 2, (phi, replay.last_failure)
    for got, expected in kept:
        assert_bitwise_equal(got, expected)


@pytest.mark.cuda
def test_a_prepared_operand_replays(monkeypatch):
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=6, device="cuda")
    rights = [B] + [phi_pair(m, k, n, phi, seed=7 + i, device="cuda")[1]
                    for i, phi in enumerate((0.5, 3.0))]
    expected = {id(b): eager(lambda: ozaki.dgemm(A, b), monkeypatch) for b in rights}
    with ozaki.prepare(A) as kept:
        for b in [rights[0]] * CALLS + [rights[1]] * CALLS:
            assert_bitwise_equal(ozaki.dgemm(A, b), expected[id(b)])
        assert replays() >= 2 * (CALLS - 2), replay.last_failure
        for b in [rights[2]] * 3:  # another plan: the staged entry rights[1] used is dropped
            assert_bitwise_equal(ozaki.dgemm(A, b), expected[id(b)])
        A.mul_(1)  # an in-place change drops the kept parts: the entries reading them go too
        for _ in range(CALLS):
            assert_bitwise_equal(ozaki.dgemm(A, B), expected[id(B)])
        assert kept.nbytes > 0
    for _ in range(CALLS):  # released: the products compute everything again
        assert_bitwise_equal(ozaki.dgemm(A, B), expected[id(B)])


@pytest.mark.cuda
def test_entries_free_the_kept_parts_their_handle_dropped(monkeypatch):
    """An entry of a prepared operand holds the kept parts its graph reads. Once the handle drops
    them (an in-place change of A, or leaving ozaki.prepare) the entry can no longer replay: it is
    freed, at the next look at the entries or at the release, so that nothing outside MAX_BYTES'
    count holds the parts' memory."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, 0.5, seed=30, device="cuda")
    expected = eager(lambda: ozaki.dgemm(A, B), monkeypatch)

    def kept_residues():
        entries = [entry for key, entry in replay._entries.items() if key.prepared]
        assert entries, replay.last_failure
        return weakref.ref(entries[0].kept_parts[4])

    with ozaki.prepare(A):
        for _ in range(CALLS):
            ozaki.dgemm(A, B)
        residues = kept_residues()
        A.mul_(1)  # the handle drops its parts at the next product
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
        replay.info()
        gc.collect()
        assert residues() is None
        for _ in range(CALLS):
            assert_bitwise_equal(ozaki.dgemm(A, B), expected)
        residues = kept_residues()
    gc.collect()
    assert residues() is None
    assert not any(key.prepared for key in replay._entries)


@pytest.mark.cuda
def test_operands_prepared_one_after_another_keep_replaying():
    """A program that prepares a new operand for each of many solves (a kernel matrix per step
    of an outer loop): each release gives its entries' captures back, so the shape still
    replays after more solves than MAX_CAPTURES."""
    m, k, n = SHAPE
    for solve in range(replay.MAX_CAPTURES + 2):
        A, B = phi_pair(m, k, n, 0.5, seed=31 + solve, device="cuda")
        before = replays()
        with ozaki.prepare(A):
            for _ in range(CALLS):
                ozaki.dgemm(A, B)
            assert replays() > before, (solve, replay.last_failure)


@pytest.mark.cuda
def test_another_stream_replays_after_the_last_calls_reads(monkeypatch):
    A, B = phi_pair(*SHAPE, 0.5, seed=8, device="cuda")
    expected = eager(lambda: ozaki.dgemm(A, B), monkeypatch)
    results = [ozaki.dgemm(A, B) for _ in range(CALLS)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        results += [ozaki.dgemm(A, B) for _ in range(2)]
    torch.cuda.current_stream().wait_stream(side)
    results.append(ozaki.dgemm(A, B))
    for got in results:
        assert_bitwise_equal(got, expected)
    assert replays() >= CALLS, replay.last_failure


@pytest.mark.cuda
def test_memory_is_bounded_and_visible(monkeypatch):
    shapes = [(70, 300, 9), (33, 100, 65), (128, 64, 40)]
    pairs = [phi_pair(*shape, 0.5, seed=9 + i, device="cuda") for i, shape in enumerate(shapes)]
    monkeypatch.setattr(replay, "MAX_ENTRIES", 2)
    for _ in range(CALLS):
        for A, B in pairs:
            ozaki.dgemm(A, B)
    entries = replay.info()
    assert len(entries) == 2 and [e["a"] for e in entries] == [(33, 100), (128, 64)]
    assert replay.nbytes() == sum(e["bytes"] for e in entries) > 0
    # the dropped entry left quick_product's index too
    assert sorted(replay._quick.values()) == sorted(replay._entries) and len(replay._quick) == 2
    monkeypatch.setattr(replay, "MAX_BYTES", max(e["bytes"] for e in entries))
    replay.clear()
    for _ in range(CALLS):
        for A, B in pairs[1:]:
            ozaki.dgemm(A, B)
    assert len(replay.info()) <= 1 and replay.nbytes() <= replay.MAX_BYTES
    replay.clear()
    assert replay.info() == [] and replay.nbytes() == 0 and replay._quick == {}


@pytest.mark.cuda
def test_a_shape_whose_entry_is_too_large_stays_eager(monkeypatch):
    A, B = phi_pair(*SHAPE, 0.5, seed=14, device="cuda")
    expected = eager(lambda: ozaki.dgemm(A, B), monkeypatch)
    monkeypatch.setattr(replay, "MAX_ENTRY_BYTES", 0)
    monkeypatch.setattr(repeated, "ENABLED", False)  # A unkept: its calls are the unprepared ones
    captured = []
    capture = replay._capture
    monkeypatch.setattr(replay, "_capture", lambda *args: captured.append(1) or capture(*args))
    for _ in range(CALLS):
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    assert replay.info() == [] and captured == [1]  # captured once, then never again
    monkeypatch.undo()
    with ozaki.prepare(A):  # a prepared operand's calls are keyed apart
        for _ in range(CALLS):
            assert_bitwise_equal(ozaki.dgemm(A, B), expected)
        assert replays() >= CALLS - 3, replay.last_failure


@pytest.mark.cuda
@pytest.mark.parametrize("kwargs", [{"moduli": 14}, {"rounding": "nearest"}, {"backend": "int8"},
                                    {"backend": "fp16"}])
def test_only_default_plans_replay(kwargs):
    A, B = phi_pair(*SHAPE, 0.5, seed=10, device="cuda")
    for _ in range(CALLS):
        ozaki.dgemm(A, B, **kwargs)
    assert replay.info() == []


@pytest.mark.cuda
def test_large_products_do_not_replay(monkeypatch):
    m, k, n = SHAPE
    monkeypatch.setattr(replay, "MAX_MULTIPLY_ADDS", m * k * n - 1)
    A, B = phi_pair(m, k, n, 0.5, seed=11, device="cuda")
    for _ in range(CALLS):
        ozaki.dgemm(A, B)
    assert replay.info() == []


@pytest.mark.cuda
def test_the_path_and_workspace_are_part_of_the_key(monkeypatch):
    A, B = phi_pair(*SHAPE, 0.5, seed=12, device="cuda")
    for workspace in (None, "64"):
        if workspace is not None:
            monkeypatch.setenv("OZAKI_WORKSPACE_MB", workspace)
        for _ in range(CALLS):
            ozaki.dgemm(A, B)
    assert len(replay.info()) == 2


@pytest.mark.cuda
def test_a_failed_capture_leaves_the_eager_call(monkeypatch):
    A, B = phi_pair(*SHAPE, 0.5, seed=13, device="cuda")
    expected = eager(lambda: ozaki.dgemm(A, B), monkeypatch)

    def failing(*args):
        raise RuntimeError("capture failed")

    monkeypatch.setattr(replay, "_capture", failing)
    for _ in range(CALLS):
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    assert replay.info() == []


def poisoned_call(call, like, kept, poisoned=None):
    """call() right after a NaN-filled tensor shaped like `like` is freed, so that a fresh result
    allocated then (by this call or, where each call makes the next one's result, by this call for
    the next) likely takes its block: an entry that no replayed kernel wrote then holds NaN. The
    results stay in `kept` (their blocks are not the poison's). poisoned: the set of every poison's
    address so far, which this call's poison joins. Returns (result, whether the result took a
    poisoned block)."""
    poisoned = set() if poisoned is None else poisoned
    poison = torch.full_like(like, float("nan"))
    poisoned.add(poison.data_ptr())
    del poison
    result = call()
    kept.append(result)
    return result, result.data_ptr() in poisoned


def assert_replays_copy_their_result(seed, monkeypatch):
    """Repeated default calls on fresh phi = 0.5 operands replay with their graph's own result
    copied out: the eager bits, also where the result's memory held NaN just before, and earlier
    results keep theirs."""
    A, B = phi_pair(*SHAPE, 0.5, seed=seed, device="cuda")
    expected = eager(lambda: ozaki.dgemm(A, B), monkeypatch)
    kept = []
    for _ in range(CALLS):
        assert_bitwise_equal(poisoned_call(lambda: ozaki.dgemm(A, B), expected, kept)[0], expected)
    for got in kept:
        assert_bitwise_equal(got, expected)
    assert replays() >= CALLS - 2, replay.last_failure
    assert [e["result"] for e in replay.info()] == ["copied"]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, phi", [pytest.param(d, p, id=i) for i, d, p in KINDS])
def test_replays_write_their_result_into_a_fresh_tensor(dtype, phi, monkeypatch):
    """Where the graph's result writers can be moved, every replay writes a fresh tensor
    (no copy of the graph's own result): every entry written with the eager bits, also where the
    tensor's memory held NaN just before, and the results of earlier calls left as they were."""
    m, k, n = SHAPE
    A, B = phi_pair(m, k, n, phi, seed=15, dtype=dtype, device="cuda")
    gemm = REAL_GEMMS[dtype]
    expected = eager(lambda: gemm(A, B), monkeypatch)
    kept, hits, poisoned = [], 0, set()
    for _ in range(2 * CALLS):
        got, hit = poisoned_call(lambda: gemm(A, B), expected, kept, poisoned)
        assert_bitwise_equal(got, expected)
        hits += hit
    for got in kept:
        assert_bitwise_equal(got, expected)
    assert replays() >= 2 * CALLS - 2, replay.last_failure
    if "reduced" in crt_paths() and replay.MOVES_RESULTS:  # the default path on this GPU
        assert [e["result"] for e in replay.info()] == ["moved"]
        assert hits >= CALLS, "the poisoned block was never the result's: the test saw nothing"


@pytest.mark.cuda
def test_a_kernel_reading_the_result_after_its_writers_keeps_it_copied(monkeypatch):
    """The graph's result writers are moved only where no other node touches the result after
    them (the plan's reads before them may: the poisoned tests above replay those moved): with a
    kernel that reads the product's result captured after it, each replay copies the graph's own
    result instead, with the same bits."""
    if "reduced" not in crt_paths() or not replay.MOVES_RESULTS:
        pytest.skip("this GPU's default path copies its replayed results")
    scheme_two_product = product.scheme_two_product

    def read_after(*args):
        result = scheme_two_product(*args)
        torch.abs(result)  # a node after the writers with the result among its arguments
        return result

    monkeypatch.setattr(product, "scheme_two_product", read_after)
    assert_replays_copy_their_result(seed=19, monkeypatch=monkeypatch)


@pytest.mark.cuda
def test_a_result_that_cannot_be_moved_drops_the_entry(monkeypatch):
    """A failure to point the graph at the call's result leaves that call eager (the same bits)
    and drops the entry, whose graph may be half moved; later calls capture it again."""
    A, B = phi_pair(*SHAPE, 0.5, seed=17, device="cuda")
    expected = eager(lambda: ozaki.dgemm(A, B), monkeypatch)
    for _ in range(CALLS):
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    if not any(e["result"] == "moved" for e in replay.info()):
        pytest.skip("this GPU's default path copies its replayed results")

    class Failing:
        graph_result_sites = staticmethod(replay._C.graph_result_sites)

        @staticmethod
        def retarget_graph_result(*args):
            raise RuntimeError("cannot move")

    with monkeypatch.context() as patch:
        patch.setattr(replay, "_C", Failing)
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
        assert replay.info() == []
    for _ in range(CALLS):
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    assert [e["result"] for e in replay.info()] == ["moved"]


@pytest.mark.cuda
def test_without_graph_updates_replays_copy_their_result(monkeypatch):
    """Where torch cannot keep a captured graph for reading (replay.MOVES_RESULTS off), each replay
    copies the graph's own result: the same bits, and earlier results keep theirs."""
    monkeypatch.setattr(replay, "MOVES_RESULTS", False)
    assert_replays_copy_their_result(seed=18, monkeypatch=monkeypatch)


def in_layout(X, layout):
    """X (contents unchanged) as rows (itself), columns (the transpose of a contiguous matrix) or
    rows at a storage offset of one row."""
    if layout == "columns":
        return X.t().contiguous().t()
    if layout == "offset":
        padded = torch.empty((X.shape[0] + 1, X.shape[1]), dtype=X.dtype, device=X.device)
        padded[1:] = X
        return padded[1:]
    return X


def scaled_pairs(A, B, count, layout):
    """`count` pairs at addresses of their own, all alive: (A, B) scaled by (-2)^i and 2^-i (the
    same plan, each pair's product another), in the layout."""
    return [(in_layout(A * (-2.0) ** i, layout), in_layout(B * 2.0 ** -i, layout))
            for i in range(count)]


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["rows", "columns", "offset"])
@pytest.mark.parametrize("dtype, phi", [pytest.param(d, p, id=i) for i, d, p in KINDS])
def test_fresh_operands_replay_the_shapes_staged_entry(dtype, phi, layout, monkeypatch):
    """Calls on operands at new addresses (fresh tensors of one shape each call) replay the shape's
    staged entry, found at once: its graph reads its own copies of each call's operands. Every
    result is the eager call's (a read of an earlier call's operands would be off by a power of
    two), and the operands of the shape's first capture keep their own entry."""
    m, k, n = SHAPE
    gemm = REAL_GEMMS[dtype]
    pairs = scaled_pairs(*phi_pair(m, k, n, phi, seed=30, dtype=dtype, device="cuda"), 8, layout)
    expected = [eager(lambda: gemm(A, B), monkeypatch) for A, B in pairs]
    for (A, B), want in zip(pairs, expected):
        assert_bitwise_equal(gemm(A, B), want)
    entries = replay.info()
    assert [e["staged"] for e in entries] == [False, True], replay.last_failure
    assert entries[1]["replays"] >= 4
    full = full_path_calls(monkeypatch)
    before = replays()
    for (A, B), want in reversed(list(zip(pairs, expected))):
        assert_bitwise_equal(gemm(A, B), want)
    assert full == [] and replays() == before + len(pairs)
    assert len(replay.info()) == 2


@pytest.mark.cuda
def test_a_staged_call_reads_its_operands_before_later_writes(monkeypatch):
    """The copies into the staged entry's operands are queued before the call returns: writes to
    the operands right after it (on the same stream) do not reach its result, nor the results
    of other streams' calls made after the last call's reads."""
    pairs = scaled_pairs(*phi_pair(*SHAPE, 0.5, seed=31, device="cuda"), 6, "rows")
    expected = [eager(lambda: ozaki.dgemm(A, B), monkeypatch) for A, B in pairs]
    results = []
    for A, B in pairs:
        results.append(ozaki.dgemm(A, B))
        A.mul_(3.0)
        B.fill_(float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    fresh = scaled_pairs(*phi_pair(*SHAPE, 0.5, seed=32, device="cuda"), 2, "rows")
    fresh_expected = [eager(lambda: ozaki.dgemm(A, B), monkeypatch) for A, B in fresh]
    with torch.cuda.stream(side):
        fresh_results = [ozaki.dgemm(A, B) for A, B in fresh]
    torch.cuda.current_stream().wait_stream(side)
    for got, want in zip(results + fresh_results, expected + fresh_expected):
        assert_bitwise_equal(got, want)
    assert any(e["staged"] and e["replays"] >= 4 for e in replay.info()), replay.last_failure


@pytest.mark.cuda
@pytest.mark.parametrize("operands", ["negative view", "expanded", "kept, right negative"])
def test_operands_a_copy_cannot_hold_are_not_staged(operands, monkeypatch):
    """Operands with a negative bit or overlapping entries (an expanded column), and right
    operands with a negative bit beside a kept left operand, get no staged entry: their calls give
    the eager bits by the other paths."""
    m, k, n = SHAPE
    pairs = scaled_pairs(*phi_pair(m, k, n, 0.5, seed=33, device="cuda"), 5, "rows")
    if operands == "negative view":
        pairs = [(torch._neg_view(A), B) for A, B in pairs]
    elif operands == "expanded":
        pairs = [(A, B[:, :1].expand(k, n)) for A, B in pairs]
    else:
        pairs = [(pairs[0][0], torch._neg_view(B)) for _, B in pairs]
    expected = [eager(lambda: ozaki.dgemm(A, B), monkeypatch) for A, B in pairs]
    with ozaki.prepare(pairs[0][0]) if operands.startswith("kept") else nullcontext():
        for (A, B), want in zip(pairs, expected):
            assert_bitwise_equal(ozaki.dgemm(A, B), want)
    assert not any(e["staged"] for e in replay.info())


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("kept", ["prepared", "repeated"])
@pytest.mark.parametrize("dtype, phi", [pytest.param(d, p, id=i) for i, d, p in KINDS])
def test_a_kept_left_operand_stages_fresh_right_operands(dtype, phi, kept, layout, monkeypatch):
    """K @ P with K kept (prepared, or kept unasked) and P a new tensor each call, as in an
    iterative solver: the calls replay K's one staged entry, whose graph reads K's kept parts and
    a copy of each call's P, made before the call returns (P is overwritten right after each call
    here). Every result is the eager call's; a write to K that its version counter misses is
    still caught (the digest of a kept unasked operand)."""
    m, k, n = SHAPE
    monkeypatch.setattr(repeated, "MIN_ENTRIES", 0)
    gemm = REAL_GEMMS[dtype]
    K, P = phi_pair(m, k, n, phi, seed=35, dtype=dtype, device="cuda")
    rights = [in_layout(P * 2.0 ** -i, layout) for i in range(8)]
    expected = [eager(lambda: gemm(K, B), monkeypatch) for B in rights]
    handle = ozaki.prepare(K) if kept == "prepared" else nullcontext()
    with handle:
        for B, want in zip(rights, expected):
            values = B.clone()
            assert_bitwise_equal(gemm(K, B), want)
            B.fill_(float("nan"))
            B.copy_(values)
        entries = replay.info()
        assert [e["staged"] for e in entries] == [True], replay.last_failure
        assert entries[0]["replays"] >= len(rights) - 2  # the first two calls plan eagerly
        before = replays()
        for B, want in reversed(list(zip(rights, expected))):
            assert_bitwise_equal(gemm(K, B), want)
        assert replays() == before + len(rights)
        if kept == "repeated":  # contents the version counter does not see
            source = K.clone().mul_(-2.0)
            graph = torch.cuda.CUDAGraph()
            writer = torch.empty(0, dtype=dtype, device="cuda").set_(  # K's version unchanged
                K.untyped_storage(), K.storage_offset(), K.shape, K.stride())
            with torch.cuda.graph(graph):
                writer.copy_(source)
            graph.replay()
            for B in rights[:3]:
                assert_bitwise_equal(gemm(K, B), eager(lambda: gemm(source, B), monkeypatch))


def test_which_operands_a_staged_entry_takes():
    """replay.stageable: plain tensors whose shape and strides a copy holds exactly."""
    A, B = torch.randn(6, 5, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    assert replay.stageable(A, B)
    assert replay.stageable(A.t().contiguous().t(), B[1:])
    assert not replay.stageable(A[:, ::2], B[:3])  # gaps between rows' entries
    assert not replay.stageable(A, B[:, :1].expand(5, 4))  # overlapping entries
    assert not replay.stageable(torch._neg_view(A), B)

    class Sub(torch.Tensor):
        pass

    assert not replay.stageable(A.as_subclass(Sub), B)


@pytest.mark.cuda
@pytest.mark.parametrize("kept", [False, True])
def test_a_staged_entry_counts_its_operands_memory(kept, monkeypatch):
    """A staged entry's bytes are its graph's (as an entry's own: the next call's result, where
    it moves its results) and its copies of the operands: both, or B's alone beside a kept left
    operand. (What the captures reserve is held at 0 here: the caching allocator's state would
    make it differ between captures.)"""
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 1 << 30)
    pairs = scaled_pairs(*phi_pair(*SHAPE, 0.5, seed=34, device="cuda"), 4, "rows")
    if kept:
        pairs = [(pairs[0][0], B) for _, B in pairs]
    with ozaki.prepare(pairs[0][0]) if kept else nullcontext():
        for A, B in pairs:
            C = ozaki.dgemm(A, B)
        entries = replay.info()
        held = replay.nbytes()  # inside: leaving ozaki.prepare frees the kept entry
    assert [e["staged"] for e in entries] == ([True] if kept else [False, True])
    A, B = pairs[0]
    operands = (0 if kept else A.numel() * A.element_size()) + B.numel() * B.element_size()
    result = C.numel() * C.element_size() if entries[-1]["result"] == "moved" else 0
    assert entries[-1]["bytes"] == result + operands, replay.last_failure
    assert held == sum(e["bytes"] for e in entries)
    replay.clear()
    assert replay._quick == {} and replay.nbytes() == 0

