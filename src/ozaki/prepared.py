"""ozaki.prepare: what products A @ B compute from A alone, kept for the products that follow, so
that an iterative method multiplying the same matrix many times reads it once for them
(docs/api.md, "Repeated left operands").

While the handle lives (and until it is released), every product with the same A as its left
operand (the same storage, offset, shape, strides and dtype; in any public function, under
ozaki.enable too) reuses the kept parts instead of computing them again:

- A's rows as contiguous rows (a copy only when A is not row-contiguous);
- the row statistics and norm scales the plan reads, scheme II's magnitude digits and the column
  exponents of exact scheme II's bound;
- the INT8 residues of A's rows of the last two scheme-II plans that ran (they depend on the
  moduli count and on whether the plan is truncated, wide or exact).

Every kept part is what the product computes anyway, so results are bit for bit the same with or
without it. An in-place change of A (anything that bumps its version counter) drops the kept parts
at the next product, and so does A's move to other memory (A.set_, A.data = ..., A.resize_);
changes that bypass the counter (through A.data, a NumPy or DLPack view, the storage itself, a
raw pointer, a step of torch's fused optimizers) are not seen.
"""

import contextlib
import math
import numbers
import threading
import weakref

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from . import _ops, crt
from .operands import FLOATS, check_device, check_tensor
from .streams import current_stream

#: Residue sets a handle keeps: those of the last plans that ran.
KEPT_PLANS = 2

#: Prepared._rows where A's own rows are contiguous.
_OWN_ROWS = "A's own rows"

#: Handles by the identity of their operand; an entry leaves with its handle.
REGISTRY = weakref.WeakValueDictionary()
_registry_lock = threading.Lock()
#: (identity, weak references to the handles it displaced) of nested handles collected without a
#: release: their older handles serve again from the next find() (a finalizer may run where the
#: registry's lock is held, so it only leaves a note here).
_collected = []


def _tensors(part):
    """The tensors of a kept part (a tensor, or nested tuples of them)."""
    if isinstance(part, torch.Tensor):
        return [part]
    if isinstance(part, (tuple, list)):
        return [t for item in part for t in _tensors(item)]
    return []


def outside_inference_mode():
    """A context in which what a cache keeps is made as normal tensors, in a call under
    torch.inference_mode too: a later call outside it may write them in place or return them,
    which an inference tensor refuses."""
    if torch.is_inference_mode_enabled():
        return torch.inference_mode(False)
    return contextlib.nullcontext()


def _capturing(device):
    """Whether the current stream of `device` is capturing a CUDA graph: what is made now is only
    recorded in the graph, not computed, so it serves that graph alone and is not kept."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def identity(A):
    """What a kept operand is found by: its device, dtype, address, shape and strides, and its
    negative bit (x.imag and x.conj().imag share all the rest but hold opposite values)."""
    return (A.device, A.dtype, A.data_ptr(), tuple(A.shape), A.stride(), A.is_neg())


class Prepared:
    """The kept parts of a left operand A (ozaki.prepare(A)). nbytes: the memory they take now,
    beyond A; max_bytes: the cap on the residues kept (None: those of KEPT_PLANS plans, moduli *
    m * round_up(k, 16) bytes each). Use as a context manager, or call release(), to free them."""

    _sharers = ()  # as in __init__ (repeated's handles, which share none, keep this one)
    _displaced = ()  # weak references to the handles of A this one took the place of, newest first
    _released = False
    _found = None  # as in __init__ (repeated's handles, found otherwise, read the generation)

    def __init__(self, A, max_bytes):
        self.A = A
        self.max_bytes = max_bytes
        self._key = identity(A)
        self._version = A._version
        self._storage_ref = _storage_of(A)  # (weak reference, address) of A's storage
        # other tensors over A's memory with version counters of their own (a prepared tensor
        # that moved onto it): [(weak reference, version)], their in-place changes seen too
        self._sharers = []
        self._lock = threading.RLock()  # the parts' making and the residue sets' bookkeeping
        self._generation = 0
        self._clear()
        self._found = threading.local()  # the generation each thread's product found (current)
        with _registry_lock:
            other = REGISTRY.get(self._key)
            if other is not None and _same_base(other.A, A):  # A prepared again (a nested
                # block; a view of A's base with A's identity is A): the other serves again
                # they serve again after this one, released or collected (the newest that lives)
                self._displaced = (weakref.ref(other), *other._displaced)
                ending = weakref.finalize(self, _collected.append, (self._key, self._displaced))
                ending.atexit = False
            elif other is not None:  # a handle of another tensor over this memory (moved onto it)
                for tensor in (other.A, *(ref() for ref, _ in other._sharers)):
                    if tensor is not None and tensor is not A:
                        self._share(tensor)
            if other is not None:
                other._clear_locked()  # one set of parts of this memory at a time
            REGISTRY[self._key] = self

    def _clear(self):
        # A new generation: parts that products in flight are making of older contents are not
        # kept (_kept_part). No lock: repeated drops its handles under its own lock, which their
        # residues' booking takes under the handle's.
        self._generation += 1
        self._rows = None  # A's rows copied contiguous, _OWN_ROWS where A's rows serve
        self._stats = None  # (row_stats, norm scale codes)
        self._row_bounds = None
        self._digits = None
        self._column_exponents = None
        self._residues = []  # (key, tensor) of the last plans, most recent last
        self._last_plan = None  # the key of the last product's residues, kept or not
        self._origins = {}  # part name -> (device index, raw CUDA stream, event after its making)

    def _clear_locked(self):
        """_clear under the handle's lock, so that a product's check and store of a part
        (_kept_part, residues) come wholly before or after it: the clears of ozaki.prepare's
        handles."""
        with self._lock:
            self._clear()

    def _parts(self):
        """The kept tensors."""
        return _tensors((self._rows, self._stats, self._row_bounds, self._digits,
                         self._column_exponents, [residues for _, residues in self._residues]))

    def _keep(self, name, part):
        """part, just made on the current CUDA stream and kept as `name`: where it was made is
        noted for _ready."""
        device = self._key[0]
        if device.type == "cuda" and not torch.cuda.is_current_stream_capturing():
            stream = current_stream(device.index)
            event = torch.cuda.Event()
            event.record(stream)
            self._origins[name] = (stream.device_index, stream.cuda_stream, event)
        return part

    def _ready(self, name, part):
        """Kept part `name`, ready for the current CUDA stream: where another stream made it, the
        current one waits for its making, and its memory is not reused before the current
        stream's work on it is done (record_stream). Under graph capture the capturing stream
        was ordered before the capture began (ozaki/replay.py reads kept_parts first)."""
        origin = self._origins.get(name)
        if origin is None:
            return part
        index, made_on, event = origin
        # the raw handle: a product reads several parts, and this check is on every read
        if (torch._C._cuda_getCurrentRawStream(index) == made_on
                or torch.cuda.is_current_stream_capturing()):
            return part
        stream = torch.cuda.current_stream(index)
        stream.wait_event(event)
        for tensor in _tensors(part):
            tensor.record_stream(stream)
        return part

    # ---- what products read -------------------------------------------------------------------

    def _product_generation(self):
        """The generation of the contents this thread's product found (current()), else the
        handle's: a part made by a product that began before a clear may read older contents, or
        mix them with newer ones, and is not kept."""
        found = getattr(self._found, "generation", None)
        return self._generation if found is None else found

    def _kept_part(self, attribute, name, make):
        """Part `attribute` (`name` for _ready), made by make() where missing. It is kept only
        where the handle was not cleared since this product found it (another thread's product
        saw A changed in place: a part of older contents) and the stream was not capturing a
        graph (a part not yet computed): such a part serves its own product alone."""
        part = getattr(self, attribute)
        if part is None:
            generation = self._product_generation()
            with outside_inference_mode():
                made = make()
            with self._lock:
                part = getattr(self, attribute)
                if part is None:
                    if self._generation != generation or _capturing(self._key[0]):
                        return made
                    part = made if made is _OWN_ROWS else self._keep(name, made)
                    setattr(self, attribute, part)
        return self._ready(name, part)

    def rows(self):
        """A with contiguous rows: A itself where its rows are (not held twice), else a kept
        copy."""
        from .product import row_operand  # product imports this module
        A = self.A

        def make():
            rows = row_operand(A)
            return _OWN_ROWS if rows is A else rows
        rows = self._kept_part("_rows", "rows", make)
        return A if rows is _OWN_ROWS else rows

    def stats_and_norms(self):
        """(row_stats, norm scale codes) of A's rows."""
        return self._kept_part("_stats", "stats",
                               lambda: _ops.row_stats_with_norm_scales(self.rows()))

    def row_bounds(self):
        """ozaki::crt_row_bounds of A's rows."""
        return self._kept_part("_row_bounds", "row_bounds",
                               lambda: _ops.crt_row_bounds(*self.stats_and_norms()))

    def magnitude_digits(self):
        """Scheme II's magnitude digits of A's rows (ozaki::crt_magnitude_digits), their rows
        padded with zeros to a multiple of 16 entries (as ozaki::crt_kept_plan_reads reads them)."""
        def make():
            stats, norms = self.stats_and_norms()
            digits = _ops.crt_magnitude_digits(self.rows(), stats[0], norms)
            return torch.nn.functional.pad(digits, (0, -digits.shape[1] % 16))
        return self._kept_part("_digits", "digits", make)

    def has_column_exponents(self):
        """Whether exact scheme II's column exponents of A are kept (a product needed them)."""
        return self._column_exponents is not None

    def known_column_exponents(self):
        """Exact scheme II's column exponents of A where kept, else None."""
        return self._ready("column_exponents", self._column_exponents)

    def column_exponents(self, compute):
        """Exact scheme II's column exponents of A (compute() makes them)."""
        return self._kept_part("_column_exponents", "column_exponents", compute)

    def residues(self, kind, moduli, scale):
        """A's INT8 residues for a plan of `kind` ("crt", "wide" or "exact") and `moduli`, whose
        row scales (codes, or exponents for wide and exact) are `scale`; None when they would not
        fit max_bytes beside the last product's. The last KEPT_PLANS plans' are kept (plans of
        successive products may alternate between two moduli counts)."""
        key = (kind, moduli)
        with self._lock:  # one thread at a time books the sets (_clear replaces the list)
            # scale was read by this product: its residues are kept only where the handle was not
            # cleared since the product found it (a clear after the check leaves them in the
            # list it replaced)
            kept, generation = self._residues, self._product_generation()
            last, self._last_plan = self._last_plan, key
            for index, (known, residues) in enumerate(kept):
                if known == key:
                    kept.append(kept.pop(index))
                    return self._ready(key, residues)
            size = math.prod(crt.left_residue_shape(self.A.shape, moduli))
            # The oldest sets make room, except the last product's: where only it stands in the
            # way, this plan's residues are computed for this product alone (plans that alternate
            # under a cap that holds one set then keep one, instead of computing each set again
            # every time).
            while len(kept) >= KEPT_PLANS or not self._book(size):
                index = next((i for i, (known, _) in enumerate(kept) if known != last), None)
                if index is None:
                    return None
                self._origins.pop(kept.pop(index)[0], None)
            try:  # the room is booked while the set is made (_book)
                with outside_inference_mode():
                    residues = _ops.crt_left_residues(self.rows(), scale, moduli, kind != "crt")
                # not kept where of contents A no longer holds, or not yet computed (_capturing)
                if self._generation == generation and not _capturing(self._key[0]):
                    kept.append((key, self._keep(key, residues)))
            finally:
                self._unbook(size)
            return residues

    def kept_parts(self, kind, moduli):
        """The kept tensors that a product of a plan of `kind` with `moduli` reads (A's rows, row
        statistics and norm scales, digits, row bounds, the plan's residues, and the column
        exponents where kept), computing none of them: None where one is missing. They stay the
        same objects until dropped (ozaki/replay.py compares them by identity); the rows are
        _OWN_ROWS where A's own rows serve. Each is ready for the current stream (_ready)."""
        parts = self._current_parts(kind, moduli)
        if parts is None:
            return None
        names = ("rows", "stats", "digits", "row_bounds", (kind, moduli), "column_exponents")
        return tuple(self._ready(name, part) for name, part in zip(names, parts))

    def holds(self, parts, kind, moduli):
        """Whether `parts`, of an earlier kept_parts(kind, moduli), are still the kept ones (the
        same objects), readying none of them."""
        now = self._current_parts(kind, moduli)
        return now is not None and all(x is y for x, y in zip(now, parts))

    def _current_parts(self, kind, moduli):
        """kept_parts's tuple, as kept (None where one is missing)."""
        key = (kind, moduli)
        residues = next((r for known, r in self._residues if known == key), None)
        parts = (self._rows, self._stats, self._digits, self._row_bounds, residues,
                 self._column_exponents)
        return None if any(part is None for part in parts[:5]) else parts

    def _residue_bytes(self):
        """The bytes of the residue sets kept (INT8: one byte per entry)."""
        return sum(r.numel() for _, r in self._residues)

    def _book(self, size):
        """Whether residues of `size` bytes fit beside the kept ones within max_bytes (the
        handle's lock serializes its sets, so nothing needs booking here)."""
        return self.max_bytes is None or self._residue_bytes() + size <= self.max_bytes

    def _unbook(self, size):
        """Gives back what _book booked, once the set is kept or not."""

    # ---- the handle ---------------------------------------------------------------------------

    @property
    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in self._parts())

    def current(self):
        """self, after dropping the kept parts if A (or a tensor sharing its memory, _sharers)
        changed in place since they were made."""
        version = self.A._version
        changed = version != self._version
        for index, (sharer, seen) in enumerate(self._sharers):
            tensor = sharer()
            if tensor is not None and tensor._version != seen:
                self._sharers[index] = (sharer, tensor._version)
                changed = True
        if changed:
            self._clear_locked()
            self._version = version
        self._found.generation = self._generation
        return self

    def _moved(self):
        """Whether A has moved to other memory since the handle was keyed: another identity, or
        another storage at the same address (two moves, the second back onto the old address)."""
        storage, made_from = self._storage_ref
        return (identity(self.A) != self._key or storage.expired()
                or self.A.untyped_storage()._cdata != made_from)

    def _share(self, other):
        """Also watches tensor `other`, which now reaches A's memory with a version counter of
        its own."""
        self._sharers = [(ref, seen) for ref, seen in self._sharers if ref() is not None]
        self._sharers.append((weakref.ref(other), other._version))

    def release(self):
        """Frees the kept parts, and the replayed calls' graphs that read them; later products
        compute everything again."""
        from . import replay  # which imports this module
        self._clear_locked()
        self._sharers = []  # no weak references to the program's tensors outlive the parts
        self._released = True
        with _registry_lock:
            if REGISTRY.get(self._key) is self:
                del REGISTRY[self._key]
                _serve_displaced(self._key, self._displaced)
        replay.drop_stale(self)

    def __enter__(self):
        if self._released:  # a with block on it would prepare nothing
            raise ValueError("ozaki.prepare: this handle was released; call ozaki.prepare(A) "
                             "again for a new one")
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        shape = "x".join(map(str, self.A.shape))
        return (f"ozaki.Prepared({shape} {self.A.dtype} on {self.A.device}, "
                f"{self.nbytes / 2**20:.1f} MiB kept)")


def prepare(A, *, max_bytes=None):
    """Keep what products A @ B compute from A alone, for the products that follow (module
    docstring). A: a float64 or float32 matrix on the CPU or a GPU. max_bytes: the most memory
    the kept INT8 residues may take (None: no cap); residues that would not fit are computed per
    product instead. Returns a Prepared handle; the parts stay kept while it lives."""
    name = "ozaki.prepare"
    check_tensor(name, "A", A, FLOATS, (2,))
    check_device(name, A.device)
    if A.is_inference():
        raise ValueError(f"{name}: A is an inference tensor (made under torch.inference_mode), "
                         "whose in-place changes cannot be detected; prepare a normal tensor")
    if max_bytes is not None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, numbers.Integral):
            raise TypeError(f"{name}: max_bytes must be None or an integer >= 0, got "
                            f"{type(max_bytes).__name__} {max_bytes!r}")
        max_bytes = int(max_bytes)  # NumPy's integers too
        if max_bytes < 0:
            raise ValueError(f"{name}: max_bytes must be None or an integer >= 0, got {max_bytes}")
    from . import repeated  # repeated builds on this module
    repeated.forget(A)  # the handle serves A from now on
    return Prepared(A, max_bytes)


def find(A):
    """The current Prepared handle of left operand A, or None."""
    if _collected:
        with _registry_lock:
            while _collected:
                key, displaced = _collected.pop()
                if key not in REGISTRY:
                    _serve_displaced(key, displaced)
    if A.dim() != 2 or not REGISTRY or A.is_inference():
        return None
    _follow_moved()
    kept = REGISTRY.get(identity(A))
    return None if kept is None else kept.current()


def _serve_displaced(key, displaced):
    """Under the registry's lock, where a nested handle of identity `key` left: the newest of the
    handles it displaced (weak references, newest first: directly, or through handles released
    or collected since) that lives unreleased and still has A at that identity serves again."""
    for reference in displaced:
        outer = reference()
        if outer is not None and not outer._released and identity(outer.A) == key:
            REGISTRY[key] = outer
            return


def _same_base(x, y):
    """Whether tensors x and y are views of one base (so they share its version counter)."""
    return (x if x._base is None else x._base) is (y if y._base is None else y._base)


def _storage_of(A):
    """A weak reference to A's storage and its address: while the reference lives, no other
    storage takes that address."""
    storage = A.untyped_storage()
    return StorageWeakRef(storage), storage._cdata


def _follow_moved():
    """Handles whose A has moved to other memory (A.set_, A.data = ..., A.resize_) since they were
    registered: found by A's new identity from now on, their parts (of the old contents) dropped,
    so that a tensor at the old address is not taken for A. A handle that moved onto the memory
    of another live handle's operand is not registered there: that handle serves both tensors
    and watches the moved one's version counter too."""
    with _registry_lock:
        for key, kept in list(REGISTRY.items()):
            if not kept._moved():
                continue
            del REGISTRY[key]
            now = identity(kept.A)
            kept._key, kept._version, kept._storage_ref = now, kept.A._version, _storage_of(kept.A)
            kept._clear_locked()
            other = REGISTRY.get(now)
            if other is not None and other is not kept:
                other._share(kept.A)
                other._clear_locked()
            else:
                REGISTRY[now] = kept
