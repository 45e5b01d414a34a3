"""Worker side of tests/test_distributed.py: every rank of a process group (gloo on the CPU, NCCL on
GPUs) runs every case and compares its part of the sharded product bitwise with single-process
ozaki on the whole matrices, which every rank draws alike from the case's seed."""

import contextlib
import json
import os
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import ozaki
import ozaki.distributed.inner
from ozaki import accuracy
from test_wide_spans import CASES as WIDE_SPAN_CASES

LAYOUT_OPTIONS = [
    {},
    {"backend": "crt", "moduli": 8},
    {"backend": "fp16"},
    {"backend": "int8", "slices": 3, "fast": True},
    {"backend": "fp16", "slices": 4, "fast": False},
    {"rounding": "nearest"},
    {"rounding": "nearest", "slices": 2, "fast": True},  # many entries left undecided
]
DATA = ["phi0.5", "phi4", "integers", "nonfinite", "zero-rows"]


def layout_cases():
    cases = []
    for layout in ("rows", "cols", "inner"):
        for options in LAYOUT_OPTIONS:
            for data in DATA:
                cases.append(dict(kind="layout", layout=layout, options=options, data=data,
                                  dtype="float64", shape=(13, 40, 11), split="even"))
        for split in ("uneven", "empty"):
            # with counts the caller fixed too: their accuracy check samples the rank's shard
            for options in ({}, {"backend": "crt", "moduli": 8}, {"backend": "fp16", "slices": 3},
                            {"backend": "int8", "slices": 4, "fast": False}):
                cases.append(dict(kind="layout", layout=layout, options=options, data="phi0.5",
                                  dtype="float64", shape=(13, 40, 11), split=split))
        for options in ({}, {"rounding": "nearest"}, {"backend": "fp16"}):
            cases.append(dict(kind="layout", layout=layout, options=options, data="phi0.5",
                              dtype="float32", shape=(9, 33, 7), split="even"))
    # data where one device plans exact scheme II (the k-shards run its correctly rounded bits by
    # scheme I: test_distributed.test_data_for_exact_scheme_two_plans_it)
    for data, dtype, shape in (("hidden", "float64", (40, 40, 40)),
                               ("spread", "float32", (9, 33, 7))):
        for options in ({}, {"backend": "crt"}):
            cases.append(dict(kind="layout", layout="inner", options=options, data=data,
                              dtype=dtype, shape=shape, split="uneven"))
    # rows of wide span (tests/test_wide_spans.py, whose one-device products are checked against
    # exact references there): the k-shards' plans and bits are the one device's
    for name, make in WIDE_SPAN_CASES.items():
        A, B = make()
        shape = (A.shape[0], A.shape[1], B.shape[1])
        dtype = str(A.dtype).removeprefix("torch.")
        for options in ({}, {"backend": "crt"}):
            cases.append(dict(kind="layout", layout="inner", options=options, data="wide:" + name,
                              dtype=dtype, shape=shape, split="even"))
        # rows or columns split with the last rank's shard empty: its plan reads (exact scheme
        # II's column exponents among them) have no rows to read
        for layout in ("rows", "cols"):
            cases.append(dict(kind="layout", layout=layout, options={}, data="wide:" + name,
                              dtype=dtype, shape=shape, split="empty"))
    # k-sharded sums combined in many row chunks (one row each), overlapped with the next chunk
    for options in ({}, {"backend": "fp16"}, {"rounding": "nearest", "slices": 2, "fast": True}):
        cases.append(dict(kind="layout", layout="inner", options=options, data="nonfinite",
                          dtype="float64", shape=(13, 40, 11), split="uneven", chunk_bytes=1))
    return cases


PLACEMENTS = [("S0", "R"), ("R", "S1"), ("S1", "S0"), ("R", "R"),  # direct
              ("S0", "S0"), ("S1", "R"), ("R", "S0"), ("S1", "S1"), ("P", "R"), ("S0", "S1")]


def dtensor_cases():
    cases = []
    for a, b in PLACEMENTS:
        for options, entry in (({}, "matmul"), ({"rounding": "nearest"}, "dgemm"),
                               ({"backend": "crt", "moduli": 9}, "matmul")):
            cases.append(dict(kind="dtensor", placements=(a, b), options=options, entry=entry,
                              data="phi0.5", dtype="float64", shape=(10, 23, 7)))
    cases.append(dict(kind="dtensor", placements=("S1", "S0"), options={}, entry="sgemm",
                      data="phi0.5", dtype="float32", shape=(10, 23, 7)))
    cases.append(dict(kind="dtensor", placements=("S1", "S0"), options={}, entry="matmul",
                      data="hidden", dtype="float64", shape=(40, 40, 40)))
    # an empty result (n = 0): its strides are a dense tensor's
    cases.append(dict(kind="dtensor", placements=("S0", "R"), options={}, entry="matmul",
                      data="phi0.5", dtype="float64", shape=(4, 3, 0)))
    # one row over two ranks: one rank's shard is empty
    for options in ({"backend": "fp16", "slices": 3}, {"backend": "crt", "moduli": 9}):
        cases.append(dict(kind="dtensor", placements=("S0", "R"), options=options, entry="matmul",
                          data="phi0.5", dtype="float64", shape=(1, 23, 7)))
    return cases


def all_cases():
    cases = layout_cases() + dtensor_cases()
    for index, case in enumerate(cases):
        case["id"] = index
    return cases


def case_name(case):
    if case["kind"] == "layout":
        chunks = "-row-chunks" if "chunk_bytes" in case else ""
        return (f"{case['layout']}{chunks}-{case['dtype']}-{case['data']}-{case['split']}-"
                f"{'-'.join(f'{k}={v}' for k, v in case['options'].items()) or 'default'}")
    return (f"dtensor-{'x'.join(case['placements'])}-{case['entry']}-"
            f"{'-'.join(f'{k}={v}' for k, v in case['options'].items()) or 'default'}")


def operands(case):
    """The whole A and B of a case (the same on every rank)."""
    m, k, n = case["shape"]
    dtype = getattr(torch, case["dtype"])
    g = torch.Generator().manual_seed(1000 + case["id"])
    data = case["data"]
    if data.startswith("wide:"):
        return WIDE_SPAN_CASES[data.removeprefix("wide:")]()
    if data == "integers":
        A = torch.randint(-20, 21, (m, k), generator=g).to(dtype)
        B = torch.randint(-20, 21, (k, n), generator=g).to(dtype)
        return A, B
    if data in ("spread", "hidden"):  # normal entries scaled by 2^e, e uniform in [-s, s]
        spread = 15 if data == "spread" else 2
        A, B = (torch.randn(shape, generator=g, dtype=dtype)
                * 2.0 ** torch.randint(-spread, spread + 1, shape, generator=g).to(dtype)
                for shape in ((m, k), (k, n)))
        if data == "hidden":  # each row's largest entry meets only zeros of B
            A[:, 0] *= 2.0 ** 12
            B[0] = 0.0
        return A, B
    phi = 4.0 if data == "phi4" else 0.5
    # (an empty side drawn as one row or column, then cut away)
    A = accuracy.phi_matrix(max(m, 1), k, phi, generator=g, dtype=dtype)[:m]
    B = accuracy.phi_matrix(k, max(n, 1), phi, generator=g, dtype=dtype)[:, :n].contiguous()
    if data == "nonfinite":
        A[1, 3] = float("nan")
        A[4, 0] = float("inf")
        B[0, 5] = 0.0          # 0 * inf: NaN in C[4, 5]
        B[7, 2] = float("-inf")
        A[6, 7] = 0.0          # 0 * -inf: NaN in C[6, 2]
        B[9, 8] = float("inf")
        A[5, 9] = -1e300       # -inf in C[5, 8]
        big = 1e300 if dtype == torch.float64 else 1e30
        A[4, 1] = -big         # -big * big overflows to -inf beside inf * 1: NaN in C[4, 6]
        B[1, 6] = big
        B[0, 6] = 1.0
    if data == "zero-rows":
        A[2] = 0.0
        B[:, 3] = 0.0
    return A, B


def split_sizes(size, world, split):
    if split == "empty":  # the last rank gets nothing, the first rank one entry
        sizes = [1] + [0] * (world - 1)
        sizes[-2 if world > 2 else 0] += size - 1
        return sizes
    if split == "uneven":
        first = max(1, size // (2 * world))
        rest = size - first
        return [first] + [rest // (world - 1) + (1 if r < rest % (world - 1) else 0)
                          for r in range(world - 1)]
    return [size // world + (1 if r < size % world else 0) for r in range(world)]


def shard(x, dim, sizes, rank):
    start = sum(sizes[:rank])
    return x.narrow(dim, start, sizes[rank])


def reference(case, A, B):
    single = ozaki.dgemm if A.dtype == torch.float64 else ozaki.sgemm
    return single(A, B, **case["options"])


def bitwise_difference(x, y):
    if x.shape != y.shape or x.dtype != y.dtype:
        return f"shape/dtype {tuple(x.shape)} {x.dtype} != {tuple(y.shape)} {y.dtype}"
    bits = {torch.float64: torch.int64, torch.float32: torch.int32}[x.dtype]
    differing = (x.cpu().contiguous().view(bits) != y.cpu().contiguous().view(bits)).sum().item()
    return f"{differing} of {x.numel()} entries differ bitwise" if differing else None


def run_layout_case(case, rank, world, device):
    A, B = operands(case)
    expected = reference(case, A, B)
    layout = case["layout"]
    m, k, n = case["shape"]
    if layout == "rows":
        sizes = split_sizes(m, world, case["split"])
        a, b, want = shard(A, 0, sizes, rank), B, shard(expected, 0, sizes, rank)
    elif layout == "cols":
        sizes = split_sizes(n, world, case["split"])
        a, b, want = A, shard(B, 1, sizes, rank), shard(expected, 1, sizes, rank)
    else:
        sizes = split_sizes(k, world, case["split"])
        a, b, want = shard(A, 1, sizes, rank), shard(B, 0, sizes, rank), expected
    saved = ozaki.distributed.inner.DEFAULT_CHUNK_BYTES
    ozaki.distributed.inner.DEFAULT_CHUNK_BYTES = case.get("chunk_bytes", saved)
    try:
        got = ozaki.distributed.matmul(a.to(device), b.to(device), layout, **case["options"])
    finally:
        ozaki.distributed.inner.DEFAULT_CHUNK_BYTES = saved
    return bitwise_difference(got, want)


def _placement(code):
    from torch.distributed.tensor import Partial, Replicate, Shard

    return {"S0": Shard(0), "S1": Shard(1), "R": Replicate(), "P": Partial()}[code]


def _distribute(x, mesh, code, rank):
    from torch.distributed.tensor import DTensor, distribute_tensor

    if code == "P":  # rank 0 holds the matrix, the others zeros: their sum is x exactly
        local = x if rank == 0 else torch.zeros_like(x)
        return DTensor.from_local(local, mesh, [_placement("P")], run_check=False)
    return distribute_tensor(x, mesh, [_placement(code)])


def run_dtensor_case(case, rank, world, device, mesh):
    A, B = operands(case)
    expected = reference(case, A, B)
    dA = _distribute(A.to(device), mesh, case["placements"][0], rank)
    dB = _distribute(B.to(device), mesh, case["placements"][1], rank)
    entry = {"matmul": ozaki.matmul, "dgemm": ozaki.dgemm, "sgemm": ozaki.sgemm}[case["entry"]]
    C = entry(dA, dB, **case["options"])
    if C.stride() != expected.stride():  # a dense tensor's strides, for empty shapes too
        return f"stride {C.stride()}, expected {expected.stride()}"
    return bitwise_difference(C.full_tensor(), expected)


def run_error_checks(rank, world, device):
    """A mismatch between ranks raises the same ValueError on every rank (no hang)."""
    A = torch.ones((4, 6), dtype=torch.float64, device=device)
    mismatch = _mismatches_name_the_values(rank, world, A)
    if mismatch:
        return mismatch
    k = 6 if rank == 0 else 5
    try:
        ozaki.distributed.matmul(A[:, :k], A[:, :k].t(), "rows")
    except ValueError as error:
        if "k (inner dimension) differs across the ranks of the group (from 5 to 6)" not in \
                str(error):
            return f"unexpected message: {error}"
    else:
        return "no error for inner dimensions that differ across ranks"
    return (_one_rank_refused_raises_everywhere(rank, world, device)
            or _unsupported_inputs_raise(device) or _enable_leaves_dtensors_to_torch(device)
            or _workspace_budgets_that_differ_give_the_one_device_bits(rank, world, device)
            or _dtensor_options_that_differ_are_named(rank, world, device))


@contextlib.contextmanager
def _environ(name, value):
    """os.environ[name] = value (None: unset) inside the block, restored after."""
    before = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _workspace_budgets_that_differ_give_the_one_device_bits(rank, world, device):
    """OZAKI_WORKSPACE_MB may differ between the ranks: a k-sharded product's row chunks (and
    their all-reduces) are cut by the smallest budget on every rank, with the one-device bits
    (a budget of 1 MiB on the last rank cuts 200 rows of 300 columns into several chunks). An
    invalid budget on one rank raises on every rank."""
    g = torch.Generator().manual_seed(43)
    A, B = (torch.randn(shape, dtype=torch.float64, generator=g).to(device)
            for shape in ((200, 96), (96, 300)))
    sizes = split_sizes(96, world, "even")
    last = rank == world - 1
    for options in ({"backend": "crt", "moduli": 12}, {"backend": "int8", "slices": 3}):
        expected = ozaki.dgemm(A, B, **options)
        with _environ("OZAKI_WORKSPACE_MB", "1" if last else None):
            got = ozaki.distributed.matmul(shard(A, 1, sizes, rank), shard(B, 0, sizes, rank),
                                           "inner", **options)
        difference = bitwise_difference(got, expected)
        if difference is not None:
            return f"rank {rank}: budgets that differ, {options}: {difference}"
    try:
        with _environ("OZAKI_WORKSPACE_MB", "-1" if last else None):
            ozaki.distributed.matmul(shard(A, 1, sizes, rank), shard(B, 0, sizes, rank), "inner")
    except ValueError as error:
        if "OZAKI_WORKSPACE_MB must be a positive integer" not in str(error):
            return f"rank {rank}: unexpected message: {error}"
    else:
        return f"rank {rank}: no error where rank {world - 1} had OZAKI_WORKSPACE_MB=-1"
    # a DTensor product names the function called, not the k-sharded product it runs (the rank
    # that refused raises its own error)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh(device.type, (world,))
    dA, dB = distribute_tensor(A, mesh, [Shard(1)]), distribute_tensor(B, mesh, [Shard(0)])
    try:
        with _environ("OZAKI_WORKSPACE_MB", "-1" if last else None):
            ozaki.dgemm(dA, dB)
    except ValueError as error:
        named = last or str(error).startswith("ozaki.dgemm: not run on any rank")
        if not named or "OZAKI_WORKSPACE_MB must be a positive integer" not in str(error):
            return f"rank {rank}: unexpected message: {error}"
    else:
        return f"rank {rank}: no DTensor error where rank {world - 1} had OZAKI_WORKSPACE_MB=-1"
    return None


def _dtensor_options_that_differ_are_named(rank, world, device):
    """DTensor products whose options or dtype differ across the ranks raise the same ValueError
    on every rank, naming the function called, for every placement pair (Replicate x Replicate,
    where every rank computes the whole product, included)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(device.type, (world,))
    A = torch.ones((4, 6), dtype=torch.float64, device=device)
    first = rank == 0
    for a_place, b_place in ((Replicate(), Replicate()), (Shard(0), Replicate())):
        dA, dB = distribute_tensor(A, mesh, [a_place]), distribute_tensor(A.t(), mesh, [b_place])
        try:
            ozaki.dgemm(dA, dB, backend="crt", moduli=8 if first else 9)
        except ValueError as error:
            if not str(error).startswith("ozaki.dgemm: moduli differs across the ranks of the "
                                         "group (from 8 to 9)"):
                return f"rank {rank}: unexpected message: {error}"
        else:
            return f"rank {rank}: no error for moduli that differ ({a_place} x {b_place})"
    return None


class _Unencodable:
    def __repr__(self):
        return "layout\ud800"


def _one_rank_refused_raises_everywhere(rank, world, device):
    """Inputs that only the last rank refuses raise on every rank, none waiting in a collective
    for it: that rank its own error, the others the same type naming it and its message."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(device.type, (world,))
    A = torch.ones((4, 6), dtype=torch.float64, device=device)
    last = rank == world - 1
    grad = A.clone().requires_grad_(last)
    checks = [
        (lambda: ozaki.distributed.matmul(grad, A.t(), "rows"), NotImplementedError,
         "gradients through distributed products are not supported"),
        (lambda: ozaki.distributed.matmul(A, A.t(), "inner", backend="crt",
                                          moduli=-3 if last else 8), ValueError, "moduli"),
        (lambda: ozaki.distributed.matmul(A.cpu().numpy() if last else A, A.t(), "cols"),
         TypeError,
         "a_local must be a torch.Tensor, got ndarray"),
        (lambda: ozaki.distributed.matmul(A, A.t()[:5] if last else A.t(), "rows"), ValueError,
         "a_local.shape[1] must equal b_local.shape[0]"),
        (lambda: ozaki.distributed.matmul(A, A.t(), "diagonal" if last else "rows"), ValueError,
         "layout must be one of"),
        # a message that UTF-8 cannot encode (a lone surrogate) reaches the other ranks escaped
        (lambda: ozaki.distributed.matmul(A, A.t(), _Unencodable() if last else "rows"),
         ValueError, "layout must be one of"),
        (lambda: ozaki.matmul(distribute_tensor(A, mesh, [Shard(0)]),
                              distribute_tensor(A.t(), mesh, [Replicate()]),
                              slices="3" if last else None), TypeError, "slices"),
        (lambda: ozaki.matmul(distribute_tensor(A, mesh, [Shard(0)]),
                              distribute_tensor(A.t(), mesh, [Replicate()]).to_local() if last
                              else distribute_tensor(A.t(), mesh, [Replicate()])), TypeError,
         "must both be DTensors or both plain tensors"),
    ]
    for call, error, message in checks:
        try:
            call()
        except error as raised:
            text = str(raised)
            named = f"rank {world - 1} raised {error.__name__}"
            if message not in text or (not last and named not in text):
                return f"rank {rank}: unexpected message: {text}"
        except Exception as raised:  # noqa: BLE001  (reported)
            return (f"rank {rank}: {type(raised).__name__} where {error.__name__} was expected: "
                    f"{raised}")
        else:
            return f"rank {rank}: no error where rank {world - 1} refused its inputs ({message})"
    return None


def _enable_leaves_dtensors_to_torch(device):
    """Under ozaki.enable, products of DTensors stay plain torch (docs/distributed.md): the same
    bits as without the mode, for every form, where some were taken by ozaki or raised."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    g = torch.Generator().manual_seed(41)
    A, B = (torch.randn(shape, dtype=torch.float64, generator=g).to(device)
            for shape in ((6, 5), (5, 4)))
    dA, dB = distribute_tensor(A, mesh, [Shard(0)]), distribute_tensor(B, mesh, [Replicate()])
    forms = {"@": lambda: dA @ dB, "torch.mm": lambda: torch.mm(dA, dB),
             "torch.matmul": lambda: torch.matmul(dA, dB),
             "F.linear": lambda: torch.nn.functional.linear(dA, dB.t())}
    for name, form in forms.items():
        plain = form().full_tensor()
        with ozaki.enable():
            moded = form().full_tensor()
        if bitwise_difference(moded, plain) is not None:
            return f"{name} of DTensors under ozaki.enable differs from plain torch"
    return None


def _mismatches_name_the_values(rank, world, A):
    """Layout, dtype and options that differ across the ranks are named in the message, with the
    ranks that passed each value (rank 0 one value, the other ranks another)."""
    others = "rank 1" if world == 2 else f"ranks {', '.join(map(str, range(1, world)))}"
    first = rank == 0
    checks = [
        (lambda: ozaki.distributed.matmul(A, A.t(), "rows", backend="crt",
                                          moduli=8 if first else 9),
         "moduli differs across the ranks of the group (from 8 to 9)"),
        (lambda: ozaki.distributed.matmul(A if first else A.float(), A.t() if first else
                                          A.t().float(), "rows"),
         f"dtype differs across the ranks of the group (torch.float64 on rank 0; torch.float32 "
         f"on {others})"),
        (lambda: ozaki.distributed.matmul(A, A.t(), "rows" if first else "cols"),
         f"layout differs across the ranks of the group ('rows' on rank 0; 'cols' on {others})"),
        (lambda: ozaki.distributed.matmul(A, A.t(), "inner" if first else "rows"),
         f"layout differs across the ranks of the group ('inner' on rank 0; 'rows' on {others})"),
        (lambda: ozaki.distributed.matmul(A, A.t(), "cols", backend="fp16",
                                          slices=3 if first else None),
         f"slices differs across the ranks of the group (3 on rank 0; None on {others})"),
        (lambda: ozaki.distributed.matmul(A, A.t(), "cols", backend="crt" if first else "int8"),
         f"backend differs across the ranks of the group ('crt' on rank 0; 'int8' on {others})"),
    ]
    for call, message in checks:
        try:
            call()
        except ValueError as error:
            if f"ozaki.distributed.matmul: {message}; every rank must pass the same" != str(error):
                return f"unexpected message: {error}"
        else:
            return f"no error for {message}"
    return None


def _unsupported_inputs_raise(device):
    """Inputs that would be silently wrong are refused with a message saying why."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    A = torch.ones((4, 6), dtype=torch.float64, device=device)
    checks = [
        (lambda: ozaki.distributed.matmul(A.requires_grad_(), A.t(), "rows"), NotImplementedError,
         "gradients through distributed products are not supported"),
        (lambda: ozaki.matmul(distribute_tensor(A.detach().to(torch.complex128), mesh, [Shard(0)]),
                              distribute_tensor(A.detach().t().to(torch.complex128), mesh,
                                                [Shard(1)])),
         TypeError, "complex DTensors are not supported"),
        (lambda: ozaki.gemm(distribute_tensor(A.detach(), mesh, [Shard(0)]), A.detach().t()),
         TypeError, "DTensor operands are taken by ozaki.matmul"),
        (lambda: ozaki.einsum("ij,jk->ik", distribute_tensor(A.detach(), mesh, [Shard(0)]),
                              A.detach().t()),
         TypeError, "ozaki.einsum: operands[0] is a DTensor; DTensor operands are taken by"),
        (lambda: ozaki.tensordot(A.detach(), distribute_tensor(A.detach().t(), mesh, [Shard(0)]),
                                 dims=1),
         TypeError, "ozaki.tensordot: b is a DTensor"),
        (lambda: ozaki.plan(distribute_tensor(A.detach(), mesh, [Shard(0)]), A.detach().t()),
         TypeError, "ozaki.plan: A is a DTensor"),
        (lambda: ozaki.distributed.matmul(A.detach(), A.detach().t(), "diagonal"), ValueError,
         "layout must be one of"),
        (lambda: ozaki.distributed.matmul(A.detach(), A.detach().t(), "rows", group="x"),
         TypeError, "group must be None (the default group) or a torch.distributed.ProcessGroup, "
                    "got str 'x'"),
    ]
    # a group of rank 0 alone (every rank creates it, as torch requires): the others are refused
    first = dist.new_group([0])
    if dist.get_rank() != 0:
        checks.append((lambda: ozaki.distributed.matmul(A.detach(), A.detach().t(), "rows",
                                                        group=first),
                       ValueError, f"this process (global rank {dist.get_rank()}) is not a member "
                                   "of the group passed"))
    for call, error, message in checks:
        try:
            call()
        except error as raised:
            if message not in str(raised):
                return f"unexpected message: {raised}"
        else:
            return f"no {error.__name__} ({message})"
    return None


def _write(path, results):
    with open(path + ".part", "w") as f:
        json.dump(results, f)
    os.replace(path + ".part", path)


def worker(rank, world, port, backend, out_dir, selected):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=120),
                            device_id=device if backend == "nccl" else None)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (world,))
    results = {}
    for case in all_cases():
        if selected is not None and case["id"] not in selected:
            continue
        try:
            if case["kind"] == "layout":
                results[case["id"]] = run_layout_case(case, rank, world, device)
            else:
                results[case["id"]] = run_dtensor_case(case, rank, world, device, mesh)
        except Exception:  # noqa: BLE001  (reported per case; the other ranks get the same)
            results[case["id"]] = traceback.format_exc(limit=6)
    path = os.path.join(out_dir, f"rank{rank}.json")
    _write(path, results)  # the cases' outcomes stand should the error checks end the process
    try:
        results["errors"] = run_error_checks(rank, world, device)
    except Exception:  # noqa: BLE001
        results["errors"] = traceback.format_exc(limit=6)
    _write(path, results)
    # Every rank is past its last collective; leave without running C++ destructors: tearing the
    # gloo group down while a peer exits aborted a rank now and then ("terminate called without
    # an active exception"), after its results were written.
    dist.barrier()
    os._exit(0)
