"""Scheme II's CUDA paths side by side (docs/benchmarks.md, "Scheme II paths"): for each shape,
native DGEMM, then ozaki.dgemm with a fixed moduli count on each path of OZAKI_CRT_PATH (cuBLAS
per modulus, the fused kernel, the reduced GEMMs, and the shape rule), the default plan, and the
default plan with A prepared (ozaki.prepare, as for repeated products), and the default plan with
nothing reused from the calls before ("eager": ozaki.replay and ozaki.repeated off), with the
time, the ratio to native and the peak memory beyond A and B (the memory that replayed graphs and
A's automatically kept parts hold between calls is given apart); every path's result is checked
bit for bit against the first, the default, prepared and eager ones against the first of them.
The calls repeat on the same A and B, so outside "eager" A is kept from its second call on
(ozaki/repeated.py). --paths runs the paths in the order given, a path named twice twice (the
card's clock moves with what ran before: "eager default eager" shows how much). --timing
synchronized (the default) times each call alone, from a synchronized device to its result;
back-to-back times the repeats issued one after another with one synchronization at the end (as
a loop in a program issues them: the host's time of a call then overlaps the device's work of
the one before), per call; native is timed the same way.

    python scripts/probes/crt_paths.py [--shapes 1024,1024,1024 ...] [--moduli 15]
        [--paths cublas fused reduced rule default prepared eager] [--timing back-to-back]
        [--json PATH]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

import ozaki

DEFAULT_SHAPES = ["1024,1024,1024", "2048,2048,2048", "4096,4096,4096", "16384,1024,16384",
                  "16384,16384,64", "8192,8192,8192", "16384,16384,16384"]
PATHS = ["cublas", "fused", "reduced", "rule"]
#: The default call, with A prepared, and with ozaki.replay and ozaki.repeated off.
DEFAULTS = ["default", "prepared", "eager"]


def shape_value(text):
    try:
        m, k, n = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is m,k,n (three integers), got {text!r}")
    if min(m, k, n) < 1:
        raise argparse.ArgumentTypeError(f"shape sides must be >= 1, got {text!r}")
    return m, k, n


def phi_operands(m, k, n, seed=None):
    """phi = 0.5 float64 A (m, k) and B (k, n) on CUDA, drawn from seed (default m + k + n)."""
    g = torch.Generator(device="cuda").manual_seed(m + k + n if seed is None else seed)
    A = ozaki.accuracy.phi_matrix(m, k, 0.5, generator=g, device="cuda")
    B = ozaki.accuracy.phi_matrix(k, n, 0.5, generator=g, device="cuda")
    return A, B


def timed(call, repeats, back_to_back=False):
    """(seconds per call, last result, peak bytes allocated during the calls beyond what was
    allocated before them, the result included): the median of synchronized calls, or
    back_to_back, of three rows of `repeats` calls issued one after another, each row's time
    divided by `repeats`."""
    result = call()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated() - result.untyped_storage().nbytes()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(3 if back_to_back else repeats):
        del result
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats if back_to_back else 1):
            result = call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / (repeats if back_to_back else 1))
    return statistics.median(times), result, torch.cuda.max_memory_allocated() - base


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=shape_value, nargs="+",
                        default=[shape_value(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--moduli", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--paths", nargs="+", choices=PATHS + DEFAULTS, default=PATHS + DEFAULTS,
                        help="which of them to run, in this order (default: all)")
    parser.add_argument("--timing", choices=["synchronized", "back-to-back"],
                        default="synchronized")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    rows = []
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, moduli {args.moduli}, "
          f"phi 0.5, {args.timing}: " + (f"median of {args.repeats}" if args.timing ==
                                          "synchronized" else f"median of 3 rows of {args.repeats}"))
    print("| m | k | n | what | ms | x native | peak GiB beyond A, B (result included) |")
    print("|---|---|---|---|---|---|---|")
    for m, k, n in args.shapes:
        A, B = phi_operands(m, k, n)
        repeats = args.repeats if m * k * n < 8192 ** 3 else max(2, args.repeats // 2)
        back_to_back = args.timing == "back-to-back"
        native, _, native_peak = timed(lambda: A @ B, repeats, back_to_back)
        cases = [("native", None, native, native_peak, None, 0, 0)]
        reference = default = kept = None
        for path in args.paths:
            ozaki.replay.ENABLED = ozaki.repeated.ENABLED = path != "eager"
            ozaki.repeated.clear()
            if path in DEFAULTS:
                os.environ.pop("OZAKI_CRT_PATH", None)
                call = lambda: ozaki.dgemm(A, B)  # noqa: E731
                if path == "prepared":  # A's parts kept from the warm-up call on
                    kept = ozaki.prepare(A)
            else:
                if path == "rule":
                    os.environ.pop("OZAKI_CRT_PATH", None)
                else:
                    os.environ["OZAKI_CRT_PATH"] = path
                call = lambda: ozaki.dgemm(A, B, moduli=args.moduli)  # noqa: E731
            try:
                seconds, result, peak = timed(call, repeats, back_to_back)
            except torch.OutOfMemoryError:
                cases.append((path, None, None, None, "out of memory", 0, 0))
                if kept is not None:
                    kept.release()
                continue
            same = None
            replay_bytes = ozaki.replay.nbytes()  # the graphs' memory of replayed default calls
            kept_bytes = ozaki.repeated.nbytes()  # A's parts kept between calls
            if path in DEFAULTS:
                if default is None:
                    default = result
                else:
                    same = bool(torch.equal(result.view(torch.int64), default.view(torch.int64)))
                if path == "prepared":
                    kept.release()
            else:
                if reference is None:
                    reference = result
                same = bool(torch.equal(result.view(torch.int64), reference.view(torch.int64)))
            cases.append((path, same, seconds, peak, None, replay_bytes, kept_bytes))
            del result
        os.environ.pop("OZAKI_CRT_PATH", None)
        ozaki.replay.ENABLED = ozaki.repeated.ENABLED = True
        ozaki.replay.clear()
        ozaki.repeated.clear()
        for path, same, seconds, peak, note, replay_bytes, kept_bytes in cases:
            if note is not None:
                print(f"| {m} | {k} | {n} | {path} | {note} | | |")
                continue
            label = path if same is None else f"{path} (bits {'equal' if same else 'DIFFER'})"
            if replay_bytes:
                label += f", replay entries {replay_bytes / 2 ** 20:.0f} MiB"
            if kept_bytes:
                label += f", A kept {kept_bytes / 2 ** 20:.0f} MiB"
            print(f"| {m} | {k} | {n} | {label} | {seconds * 1e3:.3f} | {native / seconds:.2f} | "
                  f"{peak / 2 ** 30:.2f} |")
            rows.append({"m": m, "k": k, "n": n, "what": path, "bits_equal": same,
                         "seconds": seconds, "native_seconds": native, "peak_bytes": peak,
                         "replay_bytes": replay_bytes, "kept_bytes": kept_bytes})
        sys.stdout.flush()
        del A, B, reference, default, kept
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "moduli": args.moduli, "timing": args.timing, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
