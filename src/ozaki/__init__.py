"""ozaki: FP64 and FP32 matrix products from exact low-precision tensor-core products: Ozaki
scheme II on INT8 residues (backend="crt"), scheme I on INT8 or FP16 slices ("int8", "fp16"),
chosen per product by backend="auto" (the default).

    >>> import torch, ozaki
    >>> C = ozaki.dgemm(torch.randn(64, 32, dtype=torch.float64), torch.randn(32, 16, dtype=torch.float64))

See docs/ for the algorithm, the accuracy contract and the benchmarks.
"""

import importlib

from . import distributed  # noqa: F401  (ozaki.distributed.matmul; DTensor operands)
from . import library  # noqa: F401  (registers the kernels of ozaki::gemm and the fake kernels)
from . import repeated  # noqa: F401  (ozaki.repeated.info() and clear(): operands kept unasked)
from . import replay  # noqa: F401  (ozaki.replay.info() and clear(): the replayed calls' graphs)
from .blas import dgemm, gemm, sgemm
from .contractions import einsum, tensordot
from .dropin import enable
from .matmul import matmul
from .prepared import Prepared, prepare
from .product import plan
from .slicing import SlicePlan

__version__ = "0.1.0"
__all__ = ["dgemm", "sgemm", "gemm", "matmul", "tensordot", "einsum", "enable", "plan", "prepare",
           "Prepared", "SlicePlan", "accuracy", "distributed", "repeated", "replay", "__version__"]


def __getattr__(name):
    # ozaki.accuracy pulls in mpmath and numpy: load it on first use only.
    if name == "accuracy":
        return importlib.import_module(".accuracy", __name__)
    raise AttributeError(f"module 'ozaki' has no attribute {name!r}")
