"""Where the host's time of a replayed default call goes, and of a conjugate-gradient iteration
under ozaki.enable: per-call wall time in a loop that the host paces (small products, one
synchronize per loop), then the same loop under cProfile, its Python functions by their own time
(cProfile's own cost inflates every Python call alike, so read the shares, not the figures).

    PYTHONPATH=src python3 scripts/probes/replay_host.py [--sizes 64 1024] [--cg 6000] [--rhs 16]
"""

import argparse
import collections
import cProfile
import inspect
import io
import pathlib
import pstats
import sys
import time

import torch

import ozaki
from ozaki import blas, gemm_op, host_copy, prepared, product, repeated, replay, speculation
from ozaki.options import Options

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from programs_bench import conjugate_gradients, kernel_matrix, right_hand_sides  # noqa: E402
from host_parts import per_call_us  # noqa: E402  (this folder is the script's own)


def profiled(call, calls, lines, order="tottime"):
    """cProfile of `calls` calls: the `lines` functions first by `order` (own time, or
    "cumulative": time with their callees)."""
    profile = cProfile.Profile()
    torch.cuda.synchronize()
    profile.enable()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats(order).print_stats(lines)
    return "\n".join(line for line in text.getvalue().splitlines()
                     if line.strip() and not line.startswith("   Ordered"))


class Parts:
    """Inclusive time per call of the steps of a call (wrappers around them; each wrapper's own
    cost, about half a microsecond, counts in its callers)."""

    def __init__(self):
        self.ns = collections.Counter()
        self.calls = collections.Counter()
        self._undo = []

    def wrap(self, owner, name, label=None):
        own = not isinstance(owner, type) or name in owner.__dict__
        original = owner.__dict__[name] if isinstance(owner, type) and own else getattr(owner, name)
        function = original.__func__ if isinstance(original, classmethod) else original
        label = label or name

        def timed_call(*args, **kwargs):
            start = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self.ns[label] += time.perf_counter_ns() - start
                self.calls[label] += 1

        setattr(owner, name, classmethod(timed_call) if isinstance(original, classmethod)
                else timed_call)
        self._undo.append((owner, name, original if own else None))

    def undo(self):
        for owner, name, original in reversed(self._undo):
            if original is None:
                delattr(owner, name)  # inherited: the base's attribute shows again
            else:
                setattr(owner, name, original)

    def report(self, calls):
        return "\n".join(f"  {label:34s} {self.ns[label] / calls / 1e3:8.1f} us per call"
                         f" ({self.calls[label] / calls:.0f} per call)"
                         for label in sorted(self.ns, key=lambda x: -self.ns[x]))


def parts_of(call, calls, per=1):
    """(microseconds per call of `call`, the report of its steps per call) over the best of 3
    loops of `calls` calls; per: products per call (the report's steps are per product)."""
    parts = Parts()
    invoked = 0

    def counted():
        nonlocal invoked
        invoked += 1
        return call()

    for owner, name, label in (
            (blas, "check_operands", "check_operands"), (Options, "checked", "Options.checked"),
            (gemm_op, "_direct", None), (gemm_op, "real_product", "real_product"),
            (prepared, "find", "prepared.find"), (repeated, "find", "repeated.find"),
            (repeated, "confirmed", "repeated.confirmed"), (repeated, "_identity", None),
            (repeated, "_applies", "repeated._applies"),
            (repeated._Kept, "start_check", "_Kept.start_check"),
            (repeated._Kept, "serves", "_Kept.serves"), (repeated._Kept, "check", "_Kept.check"),
            (repeated._ops, "fingerprint", "_ops.fingerprint"),
            (replay, "applies", "replay.applies"), (replay, "product_of", "replay.product_of"),
            (replay, "_replayed", None), (replay, "_key", None),
            (speculation, "guess_of", None), (speculation, "remember", None),
            (product, "plan_for", None), (product.Estimates, "__init__", "Estimates()"),
            (host_copy.HostCopy, "__init__", "HostCopy()"),
            (host_copy.HostCopy, "values", "HostCopy.values"),
            (torch.cuda, "current_stream", "torch.cuda.current_stream"),
            (torch.cuda.CUDAGraph, "replay", "CUDAGraph.replay"),
            (torch.Tensor, "clone", "Tensor.clone")):
        parts.wrap(owner, name, label)
    try:
        total = per_call_us(counted, "cuda", calls, 3)
    finally:
        parts.undo()
    return total, parts.report(invoked * per)


def isolated(entry, calls=200):
    """Host microseconds of the replayed call's CUDA steps alone, each in its own loop."""
    torch.cuda.synchronize()
    graph = entry.graph
    steps = {
        "CUDAGraph.replay": graph.replay,
        "torch._C._CUDAGraph.replay": lambda: torch._C._CUDAGraph.replay(graph),
        "result.clone()": entry.result.clone,
        "HostCopy of the values": lambda: host_copy.HostCopy(entry.est_parts[-1], entry.host,
                                                              entry.copied),
        "Event.record": entry.done.record,
        "torch.cuda.current_stream()": torch.cuda.current_stream,
    }
    return "\n".join(f"  {name:36s} {per_call_us(step, 'cuda', calls, 3):8.1f} us"
                     for name, step in steps.items())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[64, 1024])
    parser.add_argument("--cg", type=int, default=6000, help="CG's matrix size (0: none)")
    parser.add_argument("--rhs", type=int, default=16)
    parser.add_argument("--lines", type=int, default=30)
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(inspect.getsource(torch.cuda.CUDAGraph.replay))
    g = torch.Generator(device="cuda").manual_seed(0)
    for n in args.sizes:
        A = torch.rand(n, n, device="cuda", dtype=torch.float64, generator=g) - 0.5
        B = torch.rand(n, n, device="cuda", dtype=torch.float64, generator=g) - 0.5
        native = per_call_us(lambda: A @ B, "cuda", 200)
        call = lambda: ozaki.dgemm(A, B)  # noqa: E731
        ozaki.dgemm(A, B), ozaki.dgemm(A, B), ozaki.dgemm(A, B)  # guessed, then captured
        ours = per_call_us(call, "cuda", 200)
        print(f"== {n}^3: native {native:.1f} us per call, ozaki.dgemm {ours:.1f} us per call; "
              f"entries {replay.info()}")
        total, report = parts_of(call, 200)
        print(f"-- steps ({total:.1f} us per call with the wrappers)\n{report}")
        if replay._entries:  # (products above replay.MAX_MULTIPLY_ADDS are not replayed)
            print("-- alone\n" + isolated(next(reversed(replay._entries.values()))))
        print(profiled(call, 200, args.lines))
    if args.cg:
        K = kernel_matrix(args.cg, 1.0, 1e-2, 0, "cuda")
        B = right_hand_sides(args.cg, args.rhs, 0, "cuda")
        run = lambda: conjugate_gradients(K, B, 50)  # noqa: E731
        native = per_call_us(run, "cuda", 3, 3) / 50
        with ozaki.enable(dtypes=(torch.float32,)):  # the mode's own cost: float64 stays torch
            mode_only = per_call_us(run, "cuda", 3, 3) / 50
        print(f"== CG, the mode alone (ozaki.enable for float32; float64 products native): "
              f"{mode_only:.1f} us per iteration against native's {native:.1f}")
        with ozaki.enable():
            run()
            kept = per_call_us(run, "cuda", 3, 3) / 50
            print(f"== CG {args.cg}, {args.rhs} right-hand sides: native {native:.1f} us per "
                  f"iteration, under ozaki.enable (K kept) {kept:.1f}; entries {replay.info()}; "
                  f"kept {ozaki.repeated.info()}")
            total, report = parts_of(run, 3, per=50)
            print(f"-- steps per iteration ({total / 50:.1f} us per iteration with the wrappers)")
            print(report)
            print(profiled(run, 3, args.lines))
            print(profiled(run, 3, args.lines, "cumulative"))
        with ozaki.enable(), ozaki.prepare(K):
            run()
            prepared_us = per_call_us(run, "cuda", 3, 3) / 50
            total, report = parts_of(run, 3, per=50)
            print(f"== CG, K prepared: {prepared_us:.1f} us per iteration; steps per iteration "
                  f"({total / 50:.1f} us with the wrappers)\n{report}")


if __name__ == "__main__":
    main()
