"""Where the GPU waits inside one eager default ozaki.dgemm call, and what the host was doing then:
the call profiled with torch.profiler (host and CUDA activities; replay stays off under the
profiler, so every call runs eagerly), its kernels and copies laid out on the host's clock, and
each stretch of at least --gap microseconds in which no kernel or copy ran, from the call's start
to its synchronize, listed with the host events that overlapped it (the innermost of them, such
as cudaStreamSynchronize or cudaMemcpyAsync, say whether the host was waiting or launching).
--replayed profiles replayed calls instead (ozaki.replay.UNDER_PROFILER), and --timeline lists
every kernel, copy and CUDA runtime call of the last call on one clock.

    python scripts/probes/gpu_gaps.py [--shapes 16384,1024,16384 ...] [--gap 20] [--calls 3]
        [--replayed] [--timeline]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crt_paths import phi_operands, shape_value, timed  # noqa: E402

import ozaki  # noqa: E402
from ozaki import replay  # noqa: E402

SHAPES = ["16384,1024,16384", "2048,2048,2048", "6000,6000,16"]
CALL = "gpu_gaps.call"


def spans(events, device):
    """(start, end, name) of the events on `device` ("cpu" or "cuda"), by start time (µs)."""
    cuda = torch.autograd.DeviceType.CUDA
    # (the call's own range also shows on the CUDA timeline, as a user annotation: left out)
    on_gpu = device == "cuda"
    chosen = [e for e in events
              if (e.device_type == cuda) == on_gpu and not (on_gpu and e.name == CALL)]
    return sorted((e.time_range.start, e.time_range.end, e.name) for e in chosen)


def idle_stretches(busy, start, end, least):
    """The stretches of [start, end] of at least `least` µs that no (start, end) of busy covers."""
    stretches, reached = [], start
    for b_start, b_end, _ in busy:
        if b_end <= reached:
            continue
        if b_start - reached >= least:
            stretches.append((reached, min(b_start, end)))
        reached = max(reached, b_end)
        if reached >= end:
            break
    if end - reached >= least:
        stretches.append((reached, end))
    return stretches


def innermost_overlaps(host, start, end, limit=6):
    """The host events overlapping [start, end] that contain no other overlapping event, longest
    overlap first, then the library's operators that overlap it: what the host was doing while
    the GPU waited."""
    overlapping = [h for h in host if h[0] < end and h[1] > start and h[2] != CALL]
    inner = [h for h in overlapping
             if not any(o is not h and h[0] <= o[0] and o[1] <= h[1] for o in overlapping)]
    inner.sort(key=lambda h: -(min(h[1], end) - max(h[0], start)))
    # and the library's operators around them (ozaki::...), which say which step of the call ran
    steps = [h for h in overlapping if h[2].startswith("ozaki::") and h not in inner]
    return [f"{h[2][:60]} ({min(h[1], end) - max(h[0], start):.0f} us)"
            for h in inner[:limit] + steps[:limit]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", type=shape_value,
                        default=[shape_value(s) for s in SHAPES])
    parser.add_argument("--gap", type=float, default=20.0, help="least idle stretch listed, µs")
    parser.add_argument("--calls", type=int, default=3, help="calls profiled; the last is shown")
    parser.add_argument("--moduli", type=int, help="a fixed moduli count instead of the default")
    parser.add_argument("--replayed", action="store_true",
                        help="replay repeated default calls under the profiler too")
    parser.add_argument("--timeline", action="store_true",
                        help="list the last call's kernels, copies and CUDA runtime calls")
    args = parser.parse_args()
    replay.UNDER_PROFILER = args.replayed
    print("#", torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    for m, k, n in args.shapes:
        A, B = phi_operands(m, k, n)
        native_s, _, _ = timed(lambda: A @ B, 11)
        for _ in range(4):  # the guess, A kept from its second product on, then steady calls
            ozaki.dgemm(A, B, moduli=args.moduli)
        torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(args.calls):
                with torch.profiler.record_function(CALL):
                    ozaki.dgemm(A, B, moduli=args.moduli)
                    torch.cuda.synchronize()
        events = prof.events()
        host = spans(events, "cpu")
        call_start, call_end, _ = [h for h in host if h[2] == CALL][-1]
        gpu = [g for g in spans(events, "cuda") if g[1] > call_start and g[0] < call_end]
        # the time some kernel or copy ran (their union: events may overlap or repeat)
        busy = (call_end - call_start) - sum(
            end - start for start, end in idle_stretches(gpu, call_start, call_end, 0.0))
        stretches = idle_stretches(gpu, call_start, call_end, args.gap)
        idle = sum(end - start for start, end in stretches)
        print(f"== {m}x{k}x{n}: native {native_s * 1e3:.3f} ms; profiled call "
              f"{(call_end - call_start) / 1e3:.3f} ms, the GPU busy {busy / 1e3:.3f} ms, idle "
              f"stretches of {args.gap:g} us or more {idle / 1e3:.3f} ms", flush=True)
        for start, end in stretches:
            print(f"   idle {start - call_start:9.0f} .. {end - call_start:9.0f} us "
                  f"({end - start:7.0f}): " + "; ".join(innermost_overlaps(host, start, end)),
                  flush=True)
        if args.replayed:
            print(f"   replayed entries: {[(e['a'], e['replays']) for e in replay.info()]}")
        if args.timeline:
            runtime = [h for h in host if h[2].startswith("cuda") and h[1] > call_start
                       and h[0] < call_end]
            for start, end, name, where in sorted([(*g, "gpu ") for g in gpu]
                                                  + [(*h, "host") for h in runtime]):
                print(f"   {where} {start - call_start:9.1f} .. {end - call_start:9.1f} us "
                      f"({end - start:7.1f}) {name[:90]}")
        del A, B
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
