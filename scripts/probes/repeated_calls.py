"""One default product after another on the same operands, with the left operand kept unasked
(ozaki.repeated on), with keeping off, and with A prepared (ozaki.prepare): every call's time
(host clock around the call and a synchronize) and the median of the calls past the warm-up,
whether each call was replayed, and the host's time per operator (torch.profiler, CPU only: under
the profiler nothing is replayed) for the kept and prepared calls of the first shape. Feeds
docs/benchmarks.md, "Repeated left operands kept without being asked".

    python scripts/probes/repeated_calls.py [--shapes 1024,1024,1024 ...] [--calls 14] [--keep-all]

--keep-all keeps operands of every size (ozaki.repeated.MIN_ENTRIES = 0), the measurement that set
MIN_ENTRIES.
"""

import argparse
import statistics
import time

import torch

import ozaki
from crt_paths import phi_operands, shape_value  # this folder is the script's own
from ozaki import repeated, replay, speculation

DEFAULT_SHAPES = ["1024,1024,1024", "2048,2048,2048", "6000,6000,16", "4096,4096,4096"]
MODES = ("on", "off", "prepared")
WARM_UP = 6  # calls before the steady state: seen, kept, guessed, captured, ...


def fresh_state():
    repeated.clear()
    replay.clear()
    speculation.forget()


def call_times(mode, A, B, calls):
    """Milliseconds of each of `calls` synchronized dgemm(A, B) calls in `mode`, and the replays."""
    fresh_state()
    repeated.ENABLED = mode != "off"
    kept = ozaki.prepare(A) if mode == "prepared" else None
    times = []
    try:
        for _ in range(calls):
            torch.cuda.synchronize()
            start = time.perf_counter()
            ozaki.dgemm(A, B)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        return times, sum(entry["replays"] for entry in replay.info())
    finally:
        repeated.ENABLED = True
        if kept is not None:
            kept.release()


def native_ms(A, B, calls=20):
    A @ B
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        A @ B
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=shape_value, nargs="+",
                        default=[shape_value(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--calls", type=int, default=14)
    parser.add_argument("--keep-all", action="store_true",
                        help="keep operands of every size (MIN_ENTRIES = 0)")
    args = parser.parse_args(argv)
    if args.keep_all:
        repeated.MIN_ENTRIES = 0
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    if args.calls <= WARM_UP:
        parser.error(f"--calls must be more than the {WARM_UP} warm-up calls, got {args.calls}")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, phi 0.5; "
          f"steady: median of calls {WARM_UP + 1}-{args.calls}; MIN_ENTRIES {repeated.MIN_ENTRIES}")
    for m, k, n in args.shapes:
        A, B = phi_operands(m, k, n, seed=1)
        native = native_ms(A, B)
        for mode in MODES:
            times, replays = call_times(mode, A, B, args.calls)
            print(f"{m}x{k}x{n} {mode:8s} native {native:.3f} steady "
                  f"{statistics.median(times[WARM_UP:]):.3f} ms; calls "
                  + " ".join(f"{t:.3f}" for t in times) + f"; replays {replays}", flush=True)
    m, k, n = args.shapes[0]
    A, B = phi_operands(m, k, n, seed=1)
    for mode in ("on", "prepared"):
        fresh_state()
        kept = ozaki.prepare(A) if mode == "prepared" else None
        for _ in range(WARM_UP + 2):
            ozaki.dgemm(A, B)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            for _ in range(20):
                ozaki.dgemm(A, B)
                torch.cuda.synchronize()
        print(f"{m}x{k}x{n} {mode}, 20 calls")
        print(profile.key_averages().table(sort_by="cpu_time_total", row_limit=25))
        if kept is not None:
            kept.release()


if __name__ == "__main__":
    main()
