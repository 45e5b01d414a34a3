"""Randomized sequences of products through ozaki's caching layers, on inputs that no test fixes.

    python scripts/fuzz_sequences.py [--device cuda|cpu] [--seconds 120] [--seed S] [--cases N]

The layers that keep state between calls (kept left operands, ozaki.repeated; prepared ones,
ozaki.prepare; replayed CUDA graphs and their staged entries, ozaki.replay; guessed plans,
ozaki.speculation) must give every call the bits a fresh call gives. Each case draws a shape, a
dtype, a kind of data (scripts/fuzz_bits.py's) and a call (the default plan mostly, else a
backend, a fixed moduli count or rounding="nearest"), then runs a sequence of steps on the same
operand tensors:

- the call again, unchanged;
- a write of an entry of A or B, through an in-place torch operation (seen by the version
  counter), through .data or a DLPack alias (not seen by it), of a small or a plan-changing value
  (a far larger or smaller one, NaN or Inf);
- a row of A scaled by a power of two, in place or through .data;
- B, or A, replaced by a new tensor of the same shape and layout (A stored by rows, by columns,
  or as a window of a larger tensor, whose writes through that tensor count as A's);
- the call under ozaki.prepare(A), its handle made and released around that one call;
- the call on a side CUDA stream;
- a share of the other calls (ENABLED_SHARE) as A @ B under ozaki.enable with the case's options.

After every call its result must equal, bit for bit, the product of copies of the operands' values
on the CPU with nothing kept. Left operands are kept from ozaki.repeated.MIN_ENTRIES = 2^10
entries here (2^23 in the library), so that small, fast products go through every layer. Every
failing case prints its seed (rerun it alone with --seed S --cases 1). Exits 1 on any failure.
"""

import contextlib
import math
import random
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.utils.dlpack

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_bits  # noqa: E402

import ozaki  # noqa: E402
from ozaki import replay, repeated  # noqa: E402
from ozaki.crt import smallest_moduli  # noqa: E402

#: Left operands kept from this many entries in the sequences (the library's default is 2^23).
KEPT_FROM = 1 << 10
STEPS = ["call", "write", "write", "scale row", "new b", "new a", "prepared", "side stream"]
CHANNELS = ["in place", "data", "dlpack"]
#: How A is stored: by rows, by columns (the transpose of a contiguous matrix), or as a window
#: (rows 1..m, columns 2..k + 1) of a larger contiguous tensor.
LAYOUTS = ["rows", "columns", "window"]
#: The share of plain calls made as A @ B under ozaki.enable.
ENABLED_SHARE = 0.3


def draw_sequence(seed):
    """The parameters of one case and its steps, all from `seed`."""
    rng = random.Random(seed)
    case = {
        "seed": seed,
        "m": fuzz_bits.side(rng, 300),
        "k": fuzz_bits.side(rng, 600),
        "n": rng.choice([1, 2, 8, 16, 33, 64, fuzz_bits.side(rng, 300)]),
        "dtype": rng.choice([torch.float64, torch.float64, torch.float32]),
        "kind": rng.choice(fuzz_bits.KINDS),
    }
    choice = rng.random()
    if choice < 0.6:
        options = {}
    elif choice < 0.75:
        options = {"backend": "crt"}
    elif choice < 0.85:
        options = {"backend": "crt", "moduli": rng.randint(smallest_moduli(case["k"]), 16)}
    elif choice < 0.95:
        options = {"rounding": "nearest"}
    else:
        options = {"backend": rng.choice(["int8", "fp16"])}
    case["options"] = options
    steps = ["call"]
    for _ in range(rng.randint(4, 14)):
        step = rng.choice(STEPS)
        steps.append(step)
        if step not in ("call", "prepared", "side stream"):
            steps.append("call")  # a change is followed by a call that must see it
    case["steps"] = steps
    case["layout"] = random.Random(seed + 2).choice(LAYOUTS)  # a stream of its own
    case["enabled_share"] = ENABLED_SHARE
    return case


def product_function(case):
    """The product the sequence calls (tests replace it to check that failures are reported)."""
    return fuzz_bits.real_product_of(case["dtype"])


def reference(case, A, B):
    """The product of copies of A's and B's values on the CPU, with nothing kept."""
    saved = repeated.ENABLED
    repeated.ENABLED = False
    try:
        fresh = fuzz_bits.real_product_of(case["dtype"])
        return fresh(A.cpu().clone(), B.cpu().clone(), **case["options"])
    finally:
        repeated.ENABLED = saved


def new_value(rng, old, dtype):
    """A value to write over `old`: one close to it (the same plan, most likely), one far larger
    or smaller (the plan may change), zero, NaN or Inf."""
    choice = rng.random()
    if choice < 0.4 and math.isfinite(old) and old != 0.0:
        return old * (1.0 + rng.choice([1, -1]) * 2.0 ** -rng.randint(5, 40))
    if choice < 0.75:
        span = 60 if dtype == torch.float64 else 20
        return rng.uniform(-1.0, 1.0) * 2.0 ** rng.randint(-span, span)
    if choice < 0.85:
        return 0.0
    return rng.choice([math.nan, math.inf, -math.inf])


def alias(x, channel):
    """A tensor over x's memory: x itself (writes bump its version counter), x.data or a DLPack
    alias (writes the version counter does not see)."""
    if channel == "data":
        return x.data
    if channel == "dlpack":
        return torch.utils.dlpack.from_dlpack(x)
    return x


def layer_uses():
    """(products served by kept parts, replayed products) so far, over the entries kept now."""
    return (sum(entry["uses"] for entry in repeated.info()),
            sum(entry["replays"] for entry in replay.info()))


def run_sequence(case, device="cuda", served=None):
    """The failures of one case's sequence, as messages (empty: it passed). served: a dict whose
    "kept" and "replayed" counts grow by the calls that kept parts served and that were replayed."""
    rng = random.Random(case["seed"] + 1)
    gen = torch.Generator().manual_seed(case["seed"])
    m, k, n, dtype, kind = case["m"], case["k"], case["n"], case["dtype"], case["kind"]

    def new_a():
        """A in the case's layout, and the larger tensor it is a window of (else None)."""
        if case["layout"] == "window":
            base = fuzz_bits.operand(rng, gen, m + 2, k + 3, kind, dtype).to(device)
            return base[1:m + 1, 2:k + 2], base
        values = fuzz_bits.operand(rng, gen, m, k, kind, dtype).to(device)
        return fuzz_bits.as_layout(values, case["layout"] == "columns"), None

    def new_b():
        return fuzz_bits.operand(rng, gen, k, n, kind, dtype).to(device)

    (A, base), B = new_a(), new_b()
    product = product_function(case)
    routes = random.Random(case["seed"] + 3)  # its own stream: the other draws stay as they were
    failures, done = [], []
    for index, step in enumerate(case["steps"]):
        done.append(step)
        if step == "write":
            target = A if rng.random() < 0.6 else B
            through_base = target is A and base is not None and rng.random() < 0.5
            channel = rng.choice(CHANNELS)
            i, j = rng.randrange(target.shape[0]), rng.randrange(target.shape[1])
            value = new_value(rng, float(target[i, j]), dtype)
            if through_base:  # the same entry of A, written through the tensor A is a window of
                alias(base, channel)[i + 1, j + 2] = value
            else:
                alias(target, channel)[i, j] = value
            done[-1] = (f"write {'A' if target is A else 'B'}[{i}, {j}] = {value!r} ({channel}"
                        f"{', through the tensor A is a window of' if through_base else ''})")
            continue
        if step == "scale row":
            i, shift = rng.randrange(m), rng.choice([-30, -3, 1, 4, 25])
            channel = rng.choice(["in place", "data"])
            alias(A, channel)[i].mul_(2.0**shift)
            done[-1] = f"scale row {i} of A by 2^{shift} ({channel})"
            continue
        if step in ("new a", "new b"):
            if step == "new a":
                A, base = new_a()
            else:
                B = new_b()
            continue
        before = layer_uses()
        if step == "prepared":
            with ozaki.prepare(A):
                got = product(A, B, **case["options"])
        elif step == "side stream" and device == "cuda":
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                got = product(A, B, **case["options"])
            torch.cuda.current_stream().wait_stream(stream)
        elif routes.random() < case["enabled_share"]:  # A @ B as a program runs it
            with ozaki.enable((dtype,), **case["options"]):
                got = A @ B
            done[-1] = "A @ B under ozaki.enable"
        else:
            got = product(A, B, **case["options"])
        after = layer_uses()
        if served is not None:
            served["kept"] += after[0] > before[0]
            served["replayed"] += after[1] > before[1]
        expected = reference(case, A, B)
        got = got.cpu()
        if not fuzz_bits.same_bits(got, expected):
            count = fuzz_bits.mismatches(got, expected)
            failures.append(f"step {index} ({step}) differs from a fresh product in {count} of "
                            f"{got.numel()} entries after: {'; '.join(done)}")
            break
    return failures


@contextlib.contextmanager
def kept_from(entries):
    """ozaki.repeated keeps left operands from `entries` entries for the block."""
    saved = repeated.MIN_ENTRIES
    repeated.MIN_ENTRIES = entries
    try:
        yield
    finally:
        repeated.MIN_ENTRIES = saved


def describe(case):
    """The case's parameters on one line (its steps are in the failure's message)."""
    return fuzz_bits.describe({key: value for key, value in case.items() if key != "steps"})


def main():
    parser = fuzz_bits.run_arguments(
        __doc__.splitlines()[0],
        "cuda (default): the CUDA layers against the CPU; cpu: the CPU's own layers (kept and "
        "prepared operands) against fresh products")
    args = parser.parse_args()
    first = fuzz_bits.start_run("fuzz_sequences", parser, args, "runs the CPU's layers", "CPU")
    start, done, failed, calls = time.monotonic(), 0, 0, 0
    served = {"kept": 0, "replayed": 0}
    with kept_from(KEPT_FROM), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fixed counts warn where they predict poor accuracy
        while time.monotonic() - start < args.seconds and (args.cases is None or done < args.cases):
            case = draw_sequence(first + done)
            try:
                failures = run_sequence(case, args.device, served)
            except Exception as error:  # reported with the seed like any other failure
                failures = [f"raised {type(error).__name__}: {error}"]
            done += 1
            calls += sum(step in ("call", "prepared", "side stream") for step in case["steps"])
            if failures:
                failed += 1
                print(f"FAILED seed={case['seed']}: {'; '.join(failures)}\n  {describe(case)}",
                      flush=True)
            if done % 25 == 0:
                print(f"  {done} cases, {failed} failed, {time.monotonic() - start:.0f} s",
                      flush=True)
    print(f"# {done} cases ({calls} calls, {served['kept']} served by kept parts, "
          f"{served['replayed']} replayed), {failed} failed, seeds {first}..{first + done - 1}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
