"""SHA-256 of ozaki's results on fixed inputs: the same digest before and after a change means the
change left every bit of these products alone.

    python scripts/bits_digest.py [--device cpu|cuda] [--verbose]

The inputs are drawn from torch's CPU generator with fixed seeds (so every machine gets the same
ones) and cover both formats, every backend, the default plan, fixed piece counts, fast mode,
rounding='nearest', rows of wide span, NaN/Inf, complex and batched operands, and a product cut
into workspace chunks (run under OZAKI_WORKSPACE_MB=1). Only the public API is called, so older
trees of the repository print comparable digests.
"""

import argparse
import hashlib
import os
import warnings

import torch

import ozaki


def spread_matrix(rows, cols, spread, seed, dtype):
    """Entries (u - 1/2) 2^e, u uniform in [0, 1) and e a uniform integer in [-spread, spread]:
    exact arithmetic on the generator's bits only, so every machine draws the same entries."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(rows, cols, generator=g, dtype=torch.float64)
    e = torch.randint(-spread, spread + 1, (rows, cols), generator=g)
    return torch.ldexp(u - 0.5, e).to(dtype)


#: The workspace budget (OZAKI_WORKSPACE_MB) of the cases named here: small enough that the
#: product runs in several chunks on every device (the bits are the same whatever the budget).
CHUNKED = {"f64-big": "1", "f32-big": "1"}


def cases():
    """(name, (A, B), keyword arguments of ozaki.gemm) rows; operands are made on the CPU."""
    out = []
    for dtype, name in [(torch.float64, "f64"), (torch.float32, "f32")]:
        A, B = spread_matrix(37, 300, 2, 1, dtype), spread_matrix(300, 29, 2, 2, dtype)
        wide = 60 if dtype == torch.float64 else 40  # rows spanning about 2^-wide to 2^wide
        wide_a = spread_matrix(23, 150, wide, 3, dtype)
        wide_b = spread_matrix(150, 19, wide, 4, dtype)
        special_a = A.clone()
        special_a[3, 7], special_a[5, 0] = float("nan"), float("inf")
        special_a[9, 9] = -float("inf")
        settings = [("default", {}), ("nearest", {"rounding": "nearest"}),
                    ("crt", {"backend": "crt"}), ("crt-9", {"backend": "crt", "moduli": 9}),
                    ("int8", {"backend": "int8"}), ("int8-5-fast", {"backend": "int8", "slices": 5,
                                                                    "fast": True}),
                    ("fp16", {"backend": "fp16"}), ("fp16-7", {"backend": "fp16", "slices": 7})]
        for label, options in settings:
            out.append((f"{name}-{label}", (A, B), options))
            out.append((f"{name}-{label}-wide", (wide_a, wide_b), options))
        out.append((f"{name}-special", (special_a, B), {}))
        out.append((f"{name}-big", (spread_matrix(700, 600, 4, 5, dtype),
                                    spread_matrix(600, 96, 4, 6, dtype)), {}))
        batch_a = spread_matrix(3 * 20, 64, 4, 7, dtype).reshape(3, 20, 64)
        batch_b = spread_matrix(3 * 64, 11, 4, 8, dtype).reshape(3, 64, 11)
        out.append((f"{name}-batched", (batch_a, batch_b), {}))
    complex_a = torch.complex(spread_matrix(15, 80, 4, 9, torch.float64),
                              spread_matrix(15, 80, 4, 10, torch.float64))
    complex_b = torch.complex(spread_matrix(80, 12, 4, 11, torch.float64),
                              spread_matrix(80, 12, 4, 12, torch.float64))
    out.append(("c128", (complex_a, complex_b), {}))
    return out


def _set_workspace(megabytes):
    """OZAKI_WORKSPACE_MB = megabytes (a str), or unset for None."""
    if megabytes is None:
        os.environ.pop("OZAKI_WORKSPACE_MB", None)
    else:
        os.environ["OZAKI_WORKSPACE_MB"] = megabytes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="print each case's digest too")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the fixed counts below warn that they are inaccurate
    total = hashlib.sha256()
    given = os.environ.get("OZAKI_WORKSPACE_MB")
    for name, (a, b), options in cases():
        _set_workspace(CHUNKED.get(name, given))
        result = ozaki.gemm(a.to(args.device), b.to(args.device), **options).cpu().contiguous()
        digest = hashlib.sha256(result.numpy().tobytes()).hexdigest()
        total.update(f"{name}:{digest}\n".encode())
        if args.verbose:
            print(f"{name:24s} {digest[:16]}")
    _set_workspace(given)
    print(f"ozaki {ozaki.__file__} on {args.device}: {total.hexdigest()}")


if __name__ == "__main__":
    main()
