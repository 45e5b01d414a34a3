"""The default plan without a wait (docs/algorithm.md, "The plan without a wait").

The default plan reads scheme II's estimate to the host; on a GPU the device would idle while the
host reads it, plans and launches the product. Where the last product of the same shapes, dtype,
device and options was a truncated scheme-II product with n moduli, that product is launched
right after the estimate's read starts; once the plan is made, it is kept if the plan is the same
truncated product with n moduli, and dropped otherwise (the plan's product then runs as it would
have). The result is the plan's product either way, bit for bit; a wrong guess costs one product.
"""

import collections

#: Devices whose products are launched before their plan is read (on the CPU nothing overlaps).
DEVICES = ("cuda",)
#: Keys remembered, least recently used dropped first.
MAX_KEYS = 64

_last_moduli = collections.OrderedDict()


def key(est, dtype, options):
    """What a guess is remembered by: the operands' shapes, dtype and device, and the options."""
    return (est.a.device, dtype, tuple(est.a.shape), tuple(est.bt.shape), options)


def guess(est, dtype, options):
    """The moduli count of the last truncated scheme-II product of this key, where the plan may be
    guessed (a default plan on one device of DEVICES); else None."""
    if (est.a.device.type not in DEVICES or est.shared or est.norms is None
            or options.moduli is not None or options.rounding is not None):
        return None
    return _last_moduli.get(key(est, dtype, options))


def remember(est, dtype, options, plan):
    """Keeps the plan's moduli count for the next product of this key (truncated scheme II), or
    forgets the key."""
    if est.a.device.type not in DEVICES or est.shared:
        return
    k = key(est, dtype, options)
    if is_truncated(plan):
        _last_moduli[k] = plan.moduli
        _last_moduli.move_to_end(k)
        while len(_last_moduli) > MAX_KEYS:
            _last_moduli.popitem(last=False)
    else:
        _last_moduli.pop(k, None)


def is_truncated(plan):
    """Whether the plan is truncated scheme II (not exact, not wide)."""
    return plan.backend == "crt" and not plan.exact and not plan.wide


def forget():
    """Drops every remembered guess."""
    _last_moduli.clear()
