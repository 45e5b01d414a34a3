"""ozaki::fingerprint alone (the digest by which ozaki.repeated finds a kept operand unchanged)
against a clone of the same matrix, on contiguous float64 n x n matrices and on one read through
its transpose's strides: CUDA events, median of 11 after a warm-up; the rate counts the bytes
read (docs/benchmarks.md, "Repeated left operands kept without being asked").

    python scripts/probes/fingerprint_rate.py [--sizes 4096 6000 16384]
"""

import argparse
import pathlib
import sys

import torch

from ozaki import _ops

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from crt_profile import time_ms  # noqa: E402  (CUDA events, median after a warm-up call)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 6000, 16384])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}: ozaki::fingerprint "
          "against a clone, median of 11")
    for n in args.sizes:
        A = torch.randn(n, n, dtype=torch.float64, device="cuda")
        strided = A.t().contiguous().t()  # the same entries through a transpose's strides
        assert int(_ops.fingerprint(A)) == int(_ops.fingerprint(strided))
        gigabytes = A.numel() * A.element_size() / 1e9
        for name, call in (("fingerprint", lambda: _ops.fingerprint(A)),
                           ("fingerprint, strided", lambda: _ops.fingerprint(strided)),
                           ("clone", lambda: A.clone())):
            ms = time_ms(call, 11)
            print(f"{n} {name}: {ms:.4f} ms, {gigabytes / ms * 1e3:.0f} GB/s read", flush=True)
        del A, strided


if __name__ == "__main__":
    main()
