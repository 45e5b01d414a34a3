"""Repeated left operands, kept without being asked (docs/api.md, "Kept without being asked"):
a program that multiplies the same matrix again and again (`K @ P` in conjugate gradients, `A @ X`
in Newton-Schulz), run as it is, gets what ozaki.prepare would keep, within a memory budget.

A left operand is kept from its second product on: when a tensor of the same storage, offset,
shape, strides and dtype comes back unchanged (the same version counter) within the last SEEN
products. Its kept parts are those of ozaki.prepare (ozaki/prepared.py), so the bits are the same.
Unlike a prepared operand's, they serve a product only once its contents are found unchanged:
each product digests the operand (ozaki::fingerprint, one read of it, on the device) and compares
the digest with the one taken when the parts were made, so writes that the version counter does
not see (a CUDA graph's replay, a NumPy or DLPack view) are caught too; a product that finds the
operand changed drops the parts and runs as without them. The parts are also dropped when the
tensor is changed in place, when its storage is freed, when clear() is called, or, least recently
used first, when another operand needs the room. All the kept parts together take at most
MAX_BYTES; an operand whose residues would not fit is kept without them (its statistics and
digits), one whose statistics and digits would not fit is not kept, and residues that would not
fit beside the others are computed per product. info() lists them.

Not kept: operands of fewer than MIN_ENTRIES entries (where the check costs more than keeping
saves), an explicitly prepared operand (its handle serves), batches, inference tensors, tensor
subclasses, and calls under graph capture, torch.compile or dispatch modes.
"""

import collections
import math
import threading
import weakref

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from . import _ops, crt, prepared
from .host_copy import HostCopy

#: Whether repeated left operands are kept at all.
ENABLED = True
#: Memory all kept parts may take together (beyond the operands themselves).
MAX_BYTES = 1 << 30
#: Left operands remembered, most recent last: one that comes back among them is kept.
SEEN = 4
#: Residue planes an operand's kept room holds beside its other parts (16 truncated moduli),
#: where they fit MAX_BYTES (else it is kept without residues).
PLANES_TO_KEEP = 16
#: Fewest entries of a kept operand. Each product of a kept operand reads it once for the digest
#: and spends 0.08-0.16 ms more on the check (at 1024^3), where keeping saves its statistics and
#: residue passes (about 23 bytes of traffic per entry): below about 2^23 entries the check costs
#: more than it saves (H100; docs/benchmarks.md, "Repeated left operands kept without being
#: asked").
MIN_ENTRIES = 1 << 23

_seen = collections.deque()  # (storage's weak reference, identity, version), the last SEEN
_kept = collections.OrderedDict()  # identity -> _Kept, least recently used first
_lock = threading.RLock()  # RLock: an operand freed while the lock is held drops its entry
_budget_seen = MAX_BYTES  # MAX_BYTES at _tidy's last look


def _identity(A):
    """What a kept operand is found by: its storage (by address: a weak reference to it keeps
    another from taking the address), offset, shape, strides, dtype, device and negative bit (as
    prepared.identity)."""
    return (A.device, A.dtype, A.untyped_storage()._cdata, A.storage_offset(), tuple(A.shape),
            A.stride(), A.is_neg())


class _Kept(prepared.Prepared):
    """A Prepared handle of an operand seen again. It holds the operand weakly: the parts go when
    the program's tensor (the base of the views it multiplies) is freed. It is not ozaki.prepare's
    (prepared.find does not return it), its residues share MAX_BYTES with every other kept
    operand's parts, and its parts serve a product only after check() found the operand's digest
    unchanged since they were made."""

    def __init__(self, A):  # Prepared.__init__ holds A and registers the handle: neither here
        # Each thread's view of the operand in its current call, which the parts read: another
        # thread's view may be gone by then (a view made afresh for one call).
        self._views = threading.local()
        self._views.current = weakref.ref(A)
        self._storage = StorageWeakRef(A.untyped_storage())
        # the callback holds the handle weakly: a handle dropped (clear(), LRU) dies at once, and
        # with it its weak references to the program's tensors (torch.utils.swap_tensors, for
        # one, refuses a tensor that has any)
        handle = weakref.ref(self)
        self._base = weakref.ref(A if A._base is None else A._base,
                                 lambda _ref: _freed(handle()))
        self._key = _identity(A)
        self._version = A._version
        self._lock = threading.RLock()
        self._generation = 0
        # The digest's pinned host buffer and event, reused by every check (one at a time).
        self._host = self._copied = None
        if A.device.type == "cuda":
            with prepared.outside_inference_mode():  # written by checks in any mode
                self._host = torch.empty((), dtype=torch.int64, pin_memory=True)
            self._copied = torch.cuda.Event()
        self._made = HostCopy(_ops.fingerprint(A)).values()  # of the contents the parts are of
        self._fixed = _fixed_bytes(A)  # the room held for its parts besides residues
        self._booked = 0  # room booked for residue sets being made (_book)
        self._checks = {}  # thread -> the HostCopy of the digest it started
        self.uses = 1
        self._clear()

    @property
    def A(self):
        view = getattr(self._views, "current", None)
        return None if view is None else view()

    def serves(self, A):
        """Whether A (found by its identity) may use these parts, pending check(): its storage is
        still this one, unchanged by anything its version counter saw."""
        return not self._storage.expired() and A._version == self._version

    def stale(self):
        """Whether the parts can serve no product again: the operand's storage is freed, or the
        program's tensor (whose views share its version counter) was changed in place."""
        base = self._base()
        return self._storage.expired() or base is None or base._version != self._version

    def start_check(self, A):
        """Starts digesting A, this call's view of the operand (which the parts then read), for
        this thread's check()."""
        self._views.current = weakref.ref(A)
        shared = () if self._checks else (self._host, self._copied)  # else another thread's
        self._checks[threading.get_ident()] = HostCopy(_ops.fingerprint(A), *shared)
        self.uses += 1

    def check(self):
        """Whether the digest this thread started last equals the parts' (waits for that digest
        alone); True where the parts were made in this call."""
        thread = threading.get_ident()
        checked = self._checks.get(thread)
        if checked is None:
            return True
        try:  # the entry stays while its copy is read: no other check takes the shared buffer
            return checked.values() == self._made
        finally:
            with _lock:
                self._checks.pop(thread, None)

    @property
    def committed(self):
        """The bytes its parts take, or may take without asking for room: the room held for its
        parts besides residues (made as products need them), the residues kept, and the room
        booked for sets being made."""
        return max(self.nbytes, self._fixed + self._residue_bytes()) + self._booked

    def _book(self, size):
        """Books room for a residue set of `size` bytes under the budget's lock, so that threads
        making sets of other operands meanwhile count it; False where it would not fit."""
        with _lock:
            if _committed() + size > MAX_BYTES:
                return False
            self._booked += size
            return True

    def _unbook(self, size):
        with _lock:
            self._booked -= size

    def __repr__(self):
        shape = "x".join(map(str, self._key[4]))
        return (f"ozaki.repeated._Kept({shape} {self._key[1]} on {self._key[0]}, "
                f"{self.nbytes / 2**20:.1f} MiB kept, {self.uses} uses)")


def _freed(kept):
    """The program's tensor of a kept operand was freed: its parts go."""
    if kept is None:
        return
    with _lock:
        if _kept.get(kept._key) is kept:
            del _kept[kept._key]
    kept._clear()


def find(A):
    """The kept parts of left operand A (a _Kept handle, its check started), kept from now on
    where A has come back unchanged among the last SEEN products and fits MAX_BYTES; None where A
    is not kept. The caller uses them only where confirmed(handle) says so. Every call first
    drops what may no longer be kept (_tidy)."""
    if _kept:
        with _lock:
            _tidy()
    if not _applies(A):
        return None
    key = _identity(A)
    with _lock:
        kept = _kept.get(key)
        if kept is not None:
            if kept.serves(A):
                _kept.move_to_end(key)
                kept.start_check(A)
                return kept
            _drop(key)  # changed in place, or freed
        if not _seen_before(A, key):
            _seen.append((StorageWeakRef(A.untyped_storage()), key, A._version))
            while len(_seen) > max(SEEN, 0):
                _seen.popleft()
            return None
        if not _make_room(_bytes_to_keep(A)):
            return None
        kept = _kept[key] = _Kept(A)
        return kept


def confirmed(kept):
    """Whether kept parts found for this call may serve its product: always for ozaki.prepare's
    (or None), and for a repeated operand's where its digest is unchanged; parts found stale are
    dropped (the call then runs as without them)."""
    if not isinstance(kept, _Kept) or kept.check():
        return True
    with _lock:
        if _kept.get(kept._key) is kept:
            _drop(kept._key)
    return False


def forget(A):
    """Drops A's kept parts, if any (ozaki.prepare(A) keeps them from now on)."""
    with _lock:
        key = _identity(A)
        if key in _kept:
            _drop(key)


def info():
    """The kept operands, most recently used last: dicts of their shape, dtype, device, the bytes
    kept and the products that used them."""
    with _lock:
        _tidy()
        return [{"shape": kept._key[4], "dtype": kept._key[1], "device": kept._key[0],
                 "bytes": kept.nbytes, "uses": kept.uses} for kept in _kept.values()]


def nbytes():
    """The memory all kept parts take now."""
    with _lock:
        _tidy()
        return sum(kept.nbytes for kept in _kept.values())


def clear():
    """Frees every kept operand's parts and forgets the operands seen."""
    with _lock:
        while _kept:
            _drop(next(iter(_kept)))
        _seen.clear()


def _applies(A):
    """Whether left operand A may be kept: a plain 2-D float matrix of an eager call."""
    if not ENABLED or type(A) is not torch.Tensor or A.dim() != 2 or A.is_inference():
        return False
    if A.numel() < MIN_ENTRIES:
        return False
    if A.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return False
    return not (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0)


def _seen_before(A, key):
    """Whether A, unchanged, is among the operands seen (it then leaves them)."""
    for index, (storage, seen_key, version) in enumerate(_seen):
        if not storage.expired() and seen_key == key and version == A._version:
            del _seen[index]
            return True
    return False


def _plane_bytes(A):
    """Bytes of one residue plane of A (one modulus), as ozaki.prepare keeps it."""
    return math.prod(crt.left_residue_shape(A.shape, 1))


def _fixed_bytes(A):
    """Bytes of A's kept parts besides its residues: the magnitude digits (one plane), its rows'
    copy where they are not contiguous, exact scheme II's column exponents, and a bound for the
    statistics and scales."""
    m, k = A.shape
    rows = 0 if A.is_contiguous() else A.numel() * A.element_size()
    return _plane_bytes(A) + rows + 8 * k + 64 * m


def _bytes_to_keep(A):
    """The room A needs to be kept: its fixed parts and PLANES_TO_KEEP residue planes, or, where
    those planes would not fit MAX_BYTES beside them, the fixed parts alone (A's residues are then
    computed per product: what keeping saves is the pass over A that its statistics and digits
    take, against the digest's read of A)."""
    fixed, residues = _fixed_bytes(A), PLANES_TO_KEEP * _plane_bytes(A)
    return fixed + residues if fixed + residues <= MAX_BYTES else fixed


def _committed():
    """The bytes the kept operands' parts take or may take (_Kept.committed)."""
    return sum(kept.committed for kept in _kept.values())


def _make_room(size):
    """Drops the least recently used kept operands until `size` more bytes fit MAX_BYTES beside
    what the others take or may take; False where they cannot."""
    if size > MAX_BYTES:
        return False
    _tidy()
    while _kept and _committed() + size > MAX_BYTES:
        _drop(next(iter(_kept)))
    return True


def _tidy():
    """Drops what may no longer be kept: the parts of operands freed (without their base's
    notice) or changed in place (their version counter moved: they can serve no product again),
    and, least recently used first, parts past a MAX_BYTES changed since the last look (the sum
    over the parts is taken then only: this runs at every product). (With ENABLED off, kept parts
    stay, unused, for when it is on again, until clear().)"""
    global _budget_seen
    for key in [key for key, kept in _kept.items() if kept.stale()]:
        _drop(key)
    if MAX_BYTES != _budget_seen:
        _budget_seen = MAX_BYTES
        while _kept and _committed() > MAX_BYTES:
            _drop(next(iter(_kept)))


def _drop(key):
    _kept.pop(key)._clear()
