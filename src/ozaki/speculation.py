"""The default plan without a wait (docs/algorithm.md, "The plan without a wait").

The default plan reads scheme II's estimate to the host; on a GPU the device would idle while the
host reads it, plans and launches the product. Where the last product of the same shapes, dtype,
device and options was a scheme-II product (truncated, wide or exact) with n moduli, that product
is launched right after the estimate's read starts; once the plan is made, it is kept if the plan
is the same kind of product with n moduli, and dropped otherwise (the plan's product then runs as
it would have). The result is the plan's product either way, bit for bit; a wrong guess costs one
product.
"""

import collections

#: Devices whose products are launched before their plan is read (on the CPU nothing overlaps).
DEVICES = ("cuda",)
#: Keys remembered, least recently used dropped first.
MAX_KEYS = 64

_last = collections.OrderedDict()


def key(est, dtype, options):
    """What a guess is remembered by: the operands' shapes, dtype and device, and the options."""
    return (est.a.device, dtype, tuple(est.a.shape), tuple(est.bt.shape), options)


def kind_and_moduli(plan):
    """("crt" (truncated), "wide" or "exact", moduli) of a scheme-II plan; None for scheme I."""
    if plan.backend != "crt":
        return None
    return ("wide" if plan.wide else "exact" if plan.exact else "crt"), plan.moduli


def guess(est, dtype, options):
    """(kind, moduli) of the last scheme-II product of this key, where the plan may be guessed (a
    default plan on one device of DEVICES); else None."""
    if (est.a.device.type not in DEVICES or est.shared or est.norms is None
            or options.moduli is not None or options.rounding is not None):
        return None
    return _last.get(key(est, dtype, options))


def remember(est, dtype, options, plan):
    """Keeps the plan's kind and moduli for the next product of this key (scheme II), or forgets
    the key (scheme I)."""
    if est.a.device.type not in DEVICES or est.shared:
        return
    k, kind = key(est, dtype, options), kind_and_moduli(plan)
    if kind is None:
        _last.pop(k, None)
        return
    _last[k] = kind
    _last.move_to_end(k)
    while len(_last) > MAX_KEYS:
        _last.popitem(last=False)


def forget():
    """Drops every remembered guess."""
    _last.clear()
