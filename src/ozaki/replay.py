"""Replayed calls: repeated small default products launched from CUDA graphs (docs/algorithm.md,
"Replayed calls").

A small default call on CUDA is paced by the host: about fifteen kernel launches and two dozen
allocations around two short bursts of GPU work (the plan's reads, then the product). Where the
plan is guessed (ozaki/speculation.py: the last two products of the key planned alike), the
call's device work is captured once into one CUDA graph, the plan's reads followed by the guessed
product, and later calls on the same operands (the same addresses, shapes, strides, dtype and
negative bits; any contents) replay it: one graph launch. Operands of a shape captured before, at
other addresses (fresh tensors each call), get the shape's staged entry: its graph reads tensors
of its own, and each call first copies its operands into them (two copies on the GPU; the same
bits, as the graph computes on the operands' exact contents), so that operands that keep moving
neither capture a graph per call nor push the shape's other entries out. A kept left operand
(ozaki.prepare, ozaki.repeated) has one staged entry per shape of B, which copies B alone (K @ P
in an iterative solver, P a new tensor each step). The values' copy to
pinned host memory (csrc/graph_result.h) branches off after the reads, beside the product, and
ends in an event record node (an external event) that the host waits for, so the host plans
while the product runs. Calls with the default options find their entry in one lookup by what
they can read at once (quick_product, from ozaki::gemm's direct calls: the operands' addresses,
shapes, strides, dtypes, devices and negative bits, then the same without the addresses for a
staged entry), before the layers a first call passes through. At the end of each
call, while its GPU work runs, the graph's result writers are pointed at a fresh tensor, the next
call's result; where the graph cannot be read for them, the graph's own result is copied instead.
The graph runs the same kernels on the same data as the eager call, so the bits are the same;
every call still reads its plan's values, plans on the host and keeps the product only where the
plan is the guess (else the plan's product runs eagerly, as without replay).

The graphs keep their memory (workspace, residues, result, the next call's result, a staged
entry's operands) between calls:
at most MAX_ENTRIES entries, MAX_ENTRY_BYTES each and MAX_BYTES of GPU memory in all, least
recently used dropped first; info() lists them and clear() frees them. Products of more than
MAX_MULTIPLY_ADDS multiply-adds are not replayed (the GPU, not the host, sets their pace).
"""

import collections
import dataclasses
import inspect
import os
import threading
import typing
import weakref

import torch

from . import _C, _ops, prepared, product, repeated, speculation
from .host_copy import HostCopy
from .options import DEFAULT
from .streams import current_stream

#: Whether calls may be replayed at all.
ENABLED = True
#: Entries kept, least recently used dropped first.
MAX_ENTRIES = 16
#: GPU memory the entries' graphs may keep in all.
MAX_BYTES = 1 << 30
#: GPU memory one entry may keep; a shape whose entry takes more stays eager (such products, as
#: 6000^2 x 16 with its 17 moduli of residues, gain little from replay).
MAX_ENTRY_BYTES = 384 << 20
#: Largest product replayed, in multiply-adds (batch * m * n * k): 2048^3.
MAX_MULTIPLY_ADDS = 1 << 33
#: Captures per operand shape, after which its calls stay eager (plans that keep changing).
MAX_CAPTURES = 8
#: float64 values the graph copies to the host at most (the plan's values are 5 or 6).
MAX_VALUES = 8
#: Whether calls are replayed under torch's profiler too. Off: a trace shows each kernel of the
#: eager call; scripts/probes/gpu_gaps.py --replayed turns it on to see the replayed call itself.
UNDER_PROFILER = False

#: Whether this torch keeps a captured graph for reading and updates its instantiated form
#: (CUDAGraph(keep_graph=True), raw_cuda_graph_exec): without, every replay copies its result.
MOVES_RESULTS = hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec")
#: Whether this torch records events as graph nodes that the host can wait for (Event(external=
#: True)); without, calls are not replayed (their host would wait for the whole graph).
EXTERNAL_EVENTS = "external" in inspect.signature(torch.cuda.Event.__new__).parameters

#: Why the last capture that failed did (its calls then ran eagerly); None if none failed.
last_failure = None

_entries = collections.OrderedDict()
_quick = {}  # quick_key() -> the key of the entry of default options that quick_product replays
_captures = collections.Counter()
_lock = threading.Lock()


@dataclasses.dataclass
class _Entry:
    """One key's graph and the tensors it writes (the graph's own memory)."""
    guess: tuple  # (kind, moduli) of the product captured
    graph: torch.cuda.CUDAGraph  # the plan's reads (est's statistics, norms, values), the product
    est_parts: tuple  # (a or None, bt or None, stats_a, stats_b, norm_a, norm_b, values)
    result: torch.Tensor
    sites: list  # the graph's result writers (graph_result_sites); [] copies the result
    kept_parts: tuple  # the kept tensors the graph reads (ozaki.prepare), None without
    host: torch.Tensor  # pinned copy of the values, written by the graph
    copied: torch.cuda.Event  # external: recorded by the graph once the values' copy is done
    done: torch.cuda.Event  # recorded after the last call's work on the graph's memory
    stream: object  # the stream of the last call
    nbytes: int
    next_result: typing.Optional[torch.Tensor] = None  # what the graph writes at its next replay
    guess_key: typing.Optional[tuple] = None  # speculation.key_of() of the calls it serves
    quick_key: typing.Optional[tuple] = None  # its key in _quick, for default options
    staging: typing.Optional[tuple] = None  # a staged entry's copies of (A or None, B) it reads
    kept_handle: typing.Optional[weakref.ref] = None  # the handle of kept_parts, None without
    replays: int = 0

    def stale(self):
        """Whether the entry reads kept parts that their handle dropped (released, changed in
        place, residues replaced): it can no longer replay, and only it holds their memory."""
        if self.kept_parts is None:
            return False
        handle = self.kept_handle()
        return handle is None or not handle.holds(self.kept_parts, *self.guess)


def applies(A, B, options):
    """Whether a call of validated operands A and B with these options may be replayed: a default
    plan (scheme II considered, no fixed count or rounding) on the current CUDA device (where the
    graph is captured and replayed), small enough, outside graph capture, torch.compile,
    dispatch modes and the profiler (whose traces then show each kernel)."""
    if not (ENABLED and EXTERNAL_EVENTS) or A.device.type != "cuda":
        return False
    if not product._default_scheme_two_plan(A.shape[-1], options):
        return False
    if A.get_device() != torch._C._cuda_getDevice():  # torch.cuda.current_device(), in one step
        return False
    multiply_adds = A.numel() * B.shape[-1]
    if multiply_adds > MAX_MULTIPLY_ADDS:
        return False
    return not (torch._C._cuda_isCurrentStreamCapturing() or torch.compiler.is_compiling()
                or torch._C._len_torch_dispatch_stack() > 0
                or (torch._C._autograd._profiler_enabled() and not UNDER_PROFILER))


def product_of(A, B, dtype, options, kept):
    """(C, plan) of A @ B from the key's graph, captured now where the plan is guessed and none
    are kept; None where the call is not replayed (then it runs eagerly)."""
    guess = speculation.guess_of(A.device, dtype, A.shape, B.mT.shape, options)
    if guess is None:
        return None
    key = _key(A, B, dtype, options, kept)
    with _lock:
        if kept is not None and stageable(A, B, kept):
            # a kept left operand's entry copies B, whatever its address (B's copy costs 1/m of
            # the product): one capture serves every right operand of the shape
            key = key.for_staging(kept=True)
            entry = _current_entry(key, guess, kept)
        else:
            own = key in _entries  # these operands' own entry (dropped below if its plan changed)
            entry = _current_entry(key, guess, kept)
            if entry is None and not own and stageable(A, B):
                # operands at other addresses than the shape's first capture: its staged entry
                staged_key = key.for_staging()
                entry = _current_entry(staged_key, guess, kept)
                if entry is None and _captures[key.of_shape()] > 0:
                    entry = _captured(A, B, dtype, options, kept, guess, staged_key)
                if entry is not None:
                    key = staged_key
        if entry is None:
            entry = _captured(A, B, dtype, options, kept, guess, key)
            if entry is None:
                return None
        _entries.move_to_end(key)
        try:
            return _replayed(entry, A, B, dtype, options, kept)
        except _NotMoved:
            _drop(key)  # its graph may be half moved: never replayed again
            return None


def stageable(A, B, kept=None):
    """Whether a staged entry may serve operands A and B: plain tensors that copies of their shape
    and strides hold exactly (no overlapping entries, no gaps, no negative bit); with A's kept
    parts (kept), B alone, as A is read where it lies."""
    return all(type(X) is torch.Tensor and not X.is_neg() and _dense(X)
               for X in ((B,) if kept is not None else (A, B)))


def _dense(X):
    """Whether X's entries fill a block of memory, each once: ordered by stride, each dimension's
    stride is the product of the sizes of those before it (dimensions of one entry aside)."""
    expected = 1
    for stride, size in sorted((t, s) for s, t in zip(X.shape, X.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _current_entry(key, guess, kept):
    """The entry of key where it still replays this call's plan guess and kept parts; an entry
    whose plan changed, or whose kept parts were dropped, is dropped."""
    entry = _entries.get(key)
    if entry is not None and (entry.guess != guess or not _kept_parts_hold(entry, kept)):
        _drop(key)
        entry = None
    return entry


def quick_product(A, B, options):
    """C = A @ B replayed from the entry product_of would replay, found with the least host work,
    for a call that ozaki::gemm runs directly (gemm_op.run_gemm after gemm_op._direct: plain
    tensors, checked, no autograd, torch.compile, dispatch or function mode or functorch
    transform); None where that entry is not found at once, the options are not the default, or
    anything else could change the call: the profiler, graph capture, another current device, a
    prepared or repeated left operand, a plan guessed differently now (the full path then runs
    and gives the same bits). Operands at other addresses than the entry's are served by their
    shape's staged entry, if it has one."""
    if not _quick or options is not DEFAULT:
        return None
    key = _quick.get(quick_key(A, B))
    if key is None:
        key = _quick.get(quick_key(A, B, staged=True))
    if key is None or A.get_device() != torch._C._cuda_getDevice():
        return None
    if torch._C._cuda_isCurrentStreamCapturing() or torch._C._autograd._profiler_enabled():
        return None
    if (prepared.REGISTRY or A.numel() * B.shape[-1] > MAX_MULTIPLY_ADDS
            or (repeated.ENABLED and A.numel() >= repeated.MIN_ENTRIES)
            or os.environ.get("OZAKI_CRT_PATH") != key.crt_path
            or _ops.workspace_bytes() != key.workspace):
        return None
    with _lock:
        entry = _entries.get(key) if ENABLED else None
        if entry is None or speculation.guess_of_key(entry.guess_key) != entry.guess:
            return None  # product_of drops or captures it
        _entries.move_to_end(key)
        try:
            C = _replayed(entry, A, B, A.dtype, options, None)[0]
        except _NotMoved:
            _drop(key)  # its graph may be half moved; the call runs eagerly, as product_of's
            C = None
    if C is None:
        C, _ = product.planned_product(product.estimates_of(A, B, options), A.dtype, options)
    return C if C.is_contiguous() else C.contiguous()  # as ozaki::gemm returns its results


def quick_key(A, B, staged=False):
    """What quick_product finds an entry by: everything of the operands the graph depends on (for
    a staged entry, which reads copies of them, all but their addresses)."""
    a, b = (None, None) if staged else (A.data_ptr(), B.data_ptr())
    return (a, b, A.shape, B.shape, A.stride(), B.stride(), A.dtype, B.dtype, A.get_device(),
            B.get_device(), A.is_neg(), B.is_neg())


def info():
    """The kept entries, most recently used last: dicts of the operands' shapes, dtype, the guessed
    plan (kind, moduli), the bytes kept and the replays so far."""
    with _lock:
        _drop_stale()
        return [{"a": key.a_shape, "b": key.b_shape, "dtype": key.dtype, "plan": entry.guess,
                 "bytes": entry.nbytes, "replays": entry.replays,
                 "result": "moved" if entry.sites else "copied", "staged": key.staged}
                for key, entry in _entries.items()]


def nbytes():
    """The GPU memory the kept entries hold."""
    with _lock:
        _drop_stale()
        return sum(entry.nbytes for entry in _entries.values())


def drop_stale(released=None):
    """Frees the entries whose kept parts their handle dropped. released: a handle just released
    (Prepared.release), whose entries' captures no longer count against MAX_CAPTURES: the next
    operand prepared in a loop (a solve per step) gets its own."""
    with _lock:
        _drop_stale(released)


def _drop_stale(released=None):
    for key in [key for key, entry in _entries.items() if entry.stale()]:
        if released is not None and _entries[key].kept_handle() is released:
            _captures[key.of_shape()] -= 1
        _drop(key)


def clear():
    """Frees every kept entry (and forgets how often each shape was captured)."""
    with _lock:
        while _entries:
            _drop(next(iter(_entries)))
        _captures.clear()


def _drop(key):
    """Frees an entry once the GPU is done with its graph's memory (the last call's work)."""
    entry = _entries.pop(key)
    if entry.quick_key is not None and _quick.get(entry.quick_key) == key:
        del _quick[entry.quick_key]
    entry.done.synchronize()


class _Key(typing.NamedTuple):
    """What an entry is found by: everything its graph reads by address or fixed at capture."""
    device: torch.device
    dtype: torch.dtype
    a_shape: tuple
    a_strides: tuple
    a_address: typing.Optional[int]  # None in of_shape()
    b_shape: tuple
    b_strides: tuple
    b_address: typing.Optional[int]
    negated: tuple  # the operands' negative bits: views of one memory with opposite values
    options: object
    prepared: bool
    crt_path: object  # OZAKI_CRT_PATH
    workspace: int
    staged: bool = False  # the graph reads copies of the operands, at any addresses

    def of_shape(self):
        """The key without the operands' addresses (what MAX_CAPTURES counts by)."""
        return self._replace(a_address=None, b_address=None, staged=False)

    def for_staging(self, kept=False):
        """The key of the shape's staged entry; kept: of a kept left operand's entry, which reads
        A where it lies (its address stays in the key) and a copy of B."""
        if kept:
            return self._replace(b_address=None, staged=True)
        return self.of_shape()._replace(staged=True)


def _key(A, B, dtype, options, kept):
    return _Key(A.device, dtype, tuple(A.shape), A.stride(), A.data_ptr(), tuple(B.shape),
                B.stride(), B.data_ptr(), (A.is_neg(), B.is_neg()), options, kept is not None,
                os.environ.get("OZAKI_CRT_PATH"), _ops.workspace_bytes())


def _kept_parts_hold(entry, kept):
    """Whether the kept tensors the entry's graph reads are still the ones kept."""
    if entry.kept_parts is None:
        return kept is None
    parts = None if kept is None else kept.kept_parts(*entry.guess)
    return parts is not None and all(x is y for x, y in zip(parts, entry.kept_parts))


def _captured(A, B, dtype, options, kept, guess, key):
    """A new entry for key, its graph captured from this call's operands (nothing runs yet), or
    None where the shape has been captured MAX_CAPTURES times, the kept parts are incomplete, the
    capture failed (the call then runs eagerly, and reports any error itself) or the entry would
    take more than MAX_ENTRY_BYTES or MAX_BYTES."""
    global last_failure
    shape_key = key.of_shape()
    kept_parts = None if kept is None else kept.kept_parts(*guess)
    if _captures[shape_key] >= MAX_CAPTURES or (kept is not None and kept_parts is None):
        return None
    _captures[shape_key] += 1
    try:
        # the graph's tensors serve later calls in either mode (prepared.outside_inference_mode)
        with prepared.outside_inference_mode():
            if key.staged:
                staging = _staging(A, B, kept)
                staged_a, staged_b = staging
                entry = _capture(A if staged_a is None else staged_a, staged_b, options, kept,
                                 kept_parts, guess)
                entry.staging = staging
                entry.nbytes += sum(X.untyped_storage().nbytes() for X in staging
                                    if X is not None)
            else:
                entry = _capture(A, B, options, kept, kept_parts, guess)
    except Exception as error:  # noqa: BLE001 (the eager call that follows raises what is wrong)
        last_failure = f"{type(error).__name__}: {error}"
        return None
    if entry.nbytes > min(MAX_ENTRY_BYTES, MAX_BYTES):
        _captures[shape_key] = MAX_CAPTURES  # the next calls of the shape stay eager at once
        return None
    _make_room(entry.nbytes)
    _entries[key] = entry
    if kept is not None:
        entry.kept_handle = weakref.ref(kept)
    entry.guess_key = speculation.key_of(A.device, dtype, A.shape, B.mT.shape, options)
    if options is DEFAULT and kept is None:
        entry.quick_key = quick_key(A, B, staged=key.staged)
        _quick[entry.quick_key] = key
    return entry


def _staging(A, B, kept=None):
    """Tensors of A's and B's shapes and strides that a staged entry's graph reads and each of its
    calls copies its operands into, first; with A's kept parts, None for A (read where it lies)."""
    def copy_of(X):
        return torch.empty_strided(X.shape, X.stride(), dtype=X.dtype, device=X.device)

    return (None if kept is not None else copy_of(A)), copy_of(B)


def _capture(A, B, options, kept, kept_parts, guess):
    """The entry of the graph captured from this call's operands: the plan's reads, then the
    guessed product; the values' copy on a branch of its own after the reads, ending in the
    external event `copied`, so that neither the product waits for the copy nor the host for the
    product."""
    device = A.device
    current = current_stream(device.index)
    side, branch = torch.cuda.Stream(device), torch.cuda.Stream(device)
    side.wait_stream(current)
    # kept for graph_result_sites, instantiated once read
    graph = torch.cuda.CUDAGraph(keep_graph=True) if MOVES_RESULTS else torch.cuda.CUDAGraph()
    copied = torch.cuda.Event(external=True)
    reserved = torch.cuda.memory_reserved(device)
    kind, moduli = guess
    host = torch.empty(MAX_VALUES, dtype=torch.float64, pin_memory=True)
    with torch.cuda.stream(side):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            est = product.estimates_of(A, B, options, kept)
            inputs = product._CrtInputs(est)
            values = est._magnitude_values(inputs.norm_a, inputs.norm_b, floor=kind == "wide")
            if (values.dtype != torch.float64 or values.dim() != 1 or not values.is_contiguous()
                    or values.numel() > MAX_VALUES):
                raise RuntimeError(f"ozaki: the plan's values ({values.dtype}, "
                                   f"{tuple(values.shape)}) do not fit the replay's host copy")
            host = host[:values.numel()]
            branch.wait_stream(side)
            with torch.cuda.stream(branch):
                _C.copy_to_host(device.index, values.data_ptr(), host.data_ptr(),
                                values.numel() * values.element_size())
                copied.record(branch)
            result = product.scheme_two_product(est, inputs, kind, moduli, kept)
            side.wait_stream(branch)  # the branch joins before the capture ends
        finally:
            graph.capture_end()
    current.wait_stream(side)
    sites = []
    if MOVES_RESULTS:
        sites = _result_sites(graph, result)
        graph.instantiate()
    size = max(torch.cuda.memory_reserved(device) - reserved, 0)
    if sites:  # the next call's result, made at the end of each call
        size += result.numel() * result.element_size()
    a = None if est.a.data_ptr() == A.data_ptr() else est.a
    bt = None if est.bt_read.data_ptr() == B.data_ptr() else est.bt_read
    return _Entry(guess, graph,
                  (a, bt, est.stats_a, est.stats_b, inputs.norm_a, inputs.norm_b, values),
                  result, sites, kept_parts, host, copied, torch.cuda.Event(), current, size)


def _result_sites(graph, result):
    """The kept graph's result writers, where its result is one whole storage of its own and every
    node that reaches it, except those that run before every writer (the plan's reads), is such a
    writer; else [] (each replay then copies the result)."""
    nbytes = result.numel() * result.element_size()
    if (not result.is_contiguous() or result.storage_offset() != 0
            or result.untyped_storage().nbytes() != nbytes or nbytes == 0):
        return []
    return _C.graph_result_sites(result.get_device(), graph.raw_cuda_graph(), result.data_ptr(),
                                 nbytes)


class _NotMoved(Exception):
    """The graph's result writers could not be pointed at a call's result."""


def _moved_result(entry):
    """A fresh result tensor that the entry's graph writes from its next replay on, or None where
    the entry copies its graph's result instead."""
    if not entry.sites:
        return None
    with prepared.outside_inference_mode():  # the result of a call in either mode
        C = torch.empty_like(entry.result)
    try:
        _C.retarget_graph_result(C.get_device(), entry.graph.raw_cuda_graph_exec(), entry.sites,
                                 C.data_ptr())
    except RuntimeError as error:
        raise _NotMoved(str(error)) from error
    return C


def _make_room(size):
    """Drops the entries that can no longer replay (_drop_stale), then the least recently used
    ones until one of `size` bytes fits both limits."""
    _drop_stale()
    while _entries and (len(_entries) >= MAX_ENTRIES
                        or sum(e.nbytes for e in _entries.values()) + size > MAX_BYTES):
        _drop(next(iter(_entries)))


def _replayed(entry, A, B, dtype, options, kept):
    """(C, plan): the entry's graph replayed on A and B, the plan read and made as the eager call
    makes it; the guessed product is the result where the plan is the guess, else the plan's
    product runs eagerly on the replayed reads. The graph is pointed at the next call's result
    once this call's work is queued."""
    stream = current_stream(A.get_device())
    if stream is not entry.stream:  # the last call's reads of the graph's tensors may be queued
        stream.wait_event(entry.done)
        entry.stream = stream
        entry.next_result = None  # made on the other stream: a fresh one below
    C = entry.next_result if entry.next_result is not None else _moved_result(entry)
    entry.next_result = None
    if entry.staging is not None:  # this call's operands, where the graph reads them
        staged_a, staged_b = entry.staging
        if staged_a is not None:
            staged_a.copy_(A)
        staged_b.copy_(B)
    entry.graph.replay()
    entry.replays += 1
    try:
        if C is None:
            C = entry.result.clone()
    finally:  # done follows every read of the graph's memory, also where one failed
        entry.done.record(stream)
    # while the graph runs; _NotMoved here (the graph may be half moved) drops the entry
    entry.next_result = _moved_result(entry)
    a, bt, stats_a, stats_b, norm_a, norm_b, values = entry.est_parts
    a = A if a is None else a
    bt = B.mT if bt is None else bt
    if kept is None:
        est = product.Estimates(a, bt, stats_a, stats_b, norms=(norm_a, norm_b), values=values)
    else:
        est = product.KeptEstimates(kept, bt, stats_b, norm_b, values)
    est._started = (norm_a, norm_b, HostCopy.queued(entry.host, entry.copied))
    plan, inputs = product.planned(est, dtype, options)
    speculation.remember(est, dtype, options, plan)
    if speculation.kind_and_moduli(plan) == entry.guess:
        return C, plan
    del C
    try:
        return product.product_of_plan(est, dtype, plan, inputs, kept)
    finally:  # after the plan's product, which reads the replayed statistics
        entry.done.record(stream)
