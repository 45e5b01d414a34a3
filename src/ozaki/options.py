"""The options of every ozaki product (backend, slices, fast, moduli, rounding; docs/api.md): one
frozen object, checked where a call enters ozaki and carried as is through the layers below."""

import dataclasses
import numbers
from typing import Optional

from . import crt
from .slicing import MAX_SLICES

ROUNDING_MODES = (None, "nearest")
#: "auto" picks among the others by the rule of docs/accuracy.md, "Backends".
BACKENDS = ("auto", "fp16", "int8", "crt")


@dataclasses.dataclass(frozen=True)
class Options:
    backend: str = "auto"
    slices: Optional[int] = None
    fast: Optional[bool] = None
    moduli: Optional[int] = None
    rounding: Optional[str] = None

    @classmethod
    def checked(cls, name, backend="auto", slices=None, fast=None, moduli=None, rounding=None):
        """The options of a call to `name`; a bad value or combination raises an error that names
        the argument and the value received."""
        if (backend == "auto" and slices is None and fast is None and moduli is None
                and rounding is None and cls is Options):
            return DEFAULT  # the usual call: nothing to check
        slices, moduli = _plain_int(slices), _plain_int(moduli)
        fast = _plain_bool(fast)
        _check(name, slices, fast, rounding, backend, moduli)
        return cls(backend, slices, fast, moduli, rounding)

    def op_arguments(self):
        """The options in the order of the ozaki::gemm operator's schema."""
        return self.backend, self.slices, self.fast, self.moduli, self.rounding

    def keywords(self):
        """The options as the keyword arguments of ozaki.dgemm, in the schema's order."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


#: The default options, the one object Options.checked returns for them (compared by identity).
DEFAULT = Options()


def _plain_int(value):
    """A NumPy (or other Integral) integer as the int it stands for; anything else as it is."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
        return int(value)
    return value


def _plain_bool(value):
    """NumPy's bool as a bool; anything else as it is."""
    if type(value).__name__ in ("bool_", "bool") and type(value).__module__ == "numpy":
        return bool(value)
    return value


def _check(name, slices, fast, rounding, backend, moduli):
    if slices is not None and (isinstance(slices, bool) or not isinstance(slices, int)):
        raise TypeError(f"{name}: slices must be an int or None, got {type(slices).__name__} {slices!r}")
    if slices is not None and not 1 <= slices <= MAX_SLICES:
        raise ValueError(f"{name}: slices must be between 1 and {MAX_SLICES}, got {slices}")
    if fast is not None and not isinstance(fast, bool):
        raise TypeError(f"{name}: fast must be a bool or None, got {type(fast).__name__} {fast!r}")
    if not isinstance(rounding, (str, type(None))) or rounding not in ROUNDING_MODES:
        raise ValueError(f"{name}: rounding must be None or 'nearest', got {rounding!r}")
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"{name}: backend must be one of {', '.join(map(repr, BACKENDS))}, "
                         f"got {backend!r}")
    if moduli is not None and (isinstance(moduli, bool) or not isinstance(moduli, int)):
        raise TypeError(f"{name}: moduli must be an int or None, got {type(moduli).__name__} {moduli!r}")
    if moduli is not None and not 1 <= moduli <= crt.MAX_MODULI:
        raise ValueError(f"{name}: moduli must be between 1 and {crt.MAX_MODULI}, got {moduli}")
    if moduli is not None and backend not in ("auto", "crt"):
        raise ValueError(f"{name}: moduli applies to backend='crt', got backend={backend!r}")
    scheme_one = [arg for arg, value in (("slices", slices), ("fast", fast)) if value is not None]
    if backend == "crt" and scheme_one and rounding is None:
        raise ValueError(f"{name}: {scheme_one[0]} applies to the scheme-I backends ('fp16', "
                         f"'int8'), not to backend='crt' (use moduli=)")
    if moduli is not None and scheme_one:
        raise ValueError(f"{name}: moduli (scheme II) cannot be combined with {scheme_one[0]} "
                         "(scheme I)")
    if moduli is not None and rounding == "nearest":
        raise ValueError(f"{name}: rounding='nearest' plans the moduli its exact product needs; "
                         "moduli does not apply to it")
