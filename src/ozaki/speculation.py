"""The default plan without a wait (docs/algorithm.md, "The plan without a wait").

The default plan reads scheme II's estimate to the host; on a GPU the device would idle while the
host reads it, plans and launches the product. Where the last two products of the same shapes,
dtype, device and options were the same scheme-II product (truncated, wide or exact) with n
moduli, that product is launched right after the estimate's read starts; once the plan is made,
it is kept if the plan is the same kind of product with n moduli, and dropped otherwise (the
plan's product then runs as it would have). The result is the plan's product either way, bit for
bit; a wrong guess costs one product.
"""

import collections
import threading

#: Devices whose products are launched before their plan is read (on the CPU nothing overlaps).
DEVICES = ("cuda",)
#: Keys remembered, least recently used dropped first.
MAX_KEYS = 64

_last = collections.OrderedDict()
_lock = threading.Lock()  # products may be called from several threads


def key(est, dtype, options):
    """What a guess is remembered by: the operands' shapes, dtype and device, and the options."""
    return key_of(est.a.device, dtype, est.a.shape, est.bt_read.shape, options)


def key_of(device, dtype, a_shape, bt_shape, options):
    """key() of rows a and bt of these shapes (a: A's, bt: B.mT's), before they are read."""
    return (device, dtype, tuple(a_shape), tuple(bt_shape), options)


def kind_and_moduli(plan):
    """("crt" (truncated), "wide" or "exact", moduli) of a scheme-II plan; None for scheme I."""
    if plan.backend != "crt":
        return None
    return ("wide" if plan.wide else "exact" if plan.exact else "crt"), plan.moduli


def guess(est, dtype, options):
    """(kind, moduli) of the last two scheme-II products of this key where they were the same
    (products of one shape that alternate between two plans, as in an iteration with two
    products per step, are not guessed) and the plan may be guessed (a default plan on one device
    of DEVICES); else None."""
    if est.shared or est.norms is None:
        return None
    return guess_of(est.a.device, dtype, est.a.shape, est.bt_read.shape, options)


def guess_of(device, dtype, a_shape, bt_shape, options):
    """guess() for rows a and bt of these shapes whose norm scales the plan reads (scheme II
    considered), on one device."""
    if device.type not in DEVICES or options.moduli is not None or options.rounding is not None:
        return None
    return guess_of_key(key_of(device, dtype, a_shape, bt_shape, options))


def guess_of_key(k):
    """guess_of() by its key_of(), for a caller that keeps the key (ozaki/replay.py)."""
    with _lock:
        last_two = _last.get(k)
    return last_two[1] if last_two is not None and last_two[0] == last_two[1] else None


def remember(est, dtype, options, plan):
    """Keeps the plan's kind and moduli, after the previous one, for the next product of this key
    (scheme II), or forgets the key (scheme I)."""
    if est.a.device.type not in DEVICES or est.shared:
        return
    k, kind = key(est, dtype, options), kind_and_moduli(plan)
    with _lock:
        if kind is None:
            _last.pop(k, None)
            return
        _last[k] = (_last.get(k, (None, None))[1], kind)
        _last.move_to_end(k)
        while len(_last) > MAX_KEYS:
            _last.popitem(last=False)


def forget():
    """Drops every remembered guess."""
    with _lock:
        _last.clear()
