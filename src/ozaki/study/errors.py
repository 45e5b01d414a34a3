"""Error of ozaki's products against exact references, versus backend, slice or moduli count, mode,
phi and k, next to torch's native matmul on the same inputs (`python -m ozaki.study accuracy`).

Each case (dtype, phi, k) draws fresh phi-matrix inputs A (size x k) and B (k x size) from a
generator seeded with the study's seed, so a case's inputs do not depend on the other cases. The
whole size x size product is compared with the exact one (Python integers, or mpmath). Every ozaki
call names its backend.
"""

import hashlib
import warnings
from dataclasses import dataclass

import numpy as np
import torch

import ozaki
from ozaki import accuracy
from ozaki import crt
from ozaki.bench import native_matmul
from ozaki.cli import DTYPE_NAMES, device_name
from ozaki.fixed_counts import AccuracyWarning
from ozaki.slicing import MAX_SLICES

#: Modes the study can sweep; "native" (torch.matmul) is always measured as the baseline.
MODES = ("fast", "all-pairs", "moduli", "auto", "nearest")
#: The backends the study can pass to ozaki (backend=), and the modes each runs: slice counts for
#: scheme I, moduli counts for scheme II, only the automatic plan and "nearest" for "auto".
BACKEND_MODES = {"fp16": ("fast", "all-pairs", "auto", "nearest"),
                 "int8": ("fast", "all-pairs", "auto", "nearest"),
                 "crt": ("moduli", "auto", "nearest"),
                 "auto": ("auto", "nearest")}
BACKENDS = tuple(BACKEND_MODES)
#: The backend of rows written before the study had a backend column (scheme I, FP16 slices).
LEGACY_BACKEND = "fp16"
#: Slice counts swept by default: past the full split for typical phi and k of each format.
DEFAULT_SLICES = {torch.float64: list(range(1, 15)), torch.float32: list(range(1, 8))}
#: Moduli counts swept by default: from well short of the target to the automatic plan's range.
DEFAULT_MODULI = {torch.float64: list(range(12, 17)), torch.float32: list(range(6, 11))}
CSV_COLUMNS = ["dtype", "phi", "m", "k", "n", "mode", "backend", "slices", "fast", "moduli",
               "plan_backend", "gemms", "exact_plan", "median_rel_err", "max_rel_err",
               "max_comp_err", "rounded_share", "device", "device_name", "torch_version",
               "reference", "seed", "inputs"]


@dataclass(frozen=True)
class Case:
    """One family of inputs: float `dtype` phi matrices of shapes (size x k) and (k x size)."""

    dtype: torch.dtype
    phi: float
    k: int
    size: int

    def inputs(self, seed, device):
        generator = torch.Generator().manual_seed(seed)
        A = accuracy.phi_matrix(self.size, self.k, self.phi, generator, self.dtype, device)
        B = accuracy.phi_matrix(self.k, self.size, self.phi, generator, self.dtype, device)
        return A, B

    def label(self):
        return f"{DTYPE_NAMES[self.dtype]} phi={self.phi:g} k={self.k}"


def fingerprint(A, B):
    """16 hex digits of the SHA-256 of the operands' bytes: rows of two runs are comparable bit
    for bit only where their inputs match (torch's CPU random and exp kernels may differ in the
    last bit between machines, so the same seed need not give the same inputs everywhere)."""
    digest = hashlib.sha256()
    for T in (A, B):
        digest.update(T.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Method:
    """A product to measure: the native matmul, or an ozaki call with `backend` and `options`."""

    mode: str         # "native" or one of MODES
    options: tuple    # other keyword arguments of the ozaki call, as sorted (name, value) pairs
    backend: str = None  # the ozaki call's backend= (one of BACKENDS); None for native


NATIVE = Method("native", ())


def methods(modes, slices, backend=LEGACY_BACKEND, moduli=()):
    """The ozaki methods of one case and backend: those of `modes` that the backend runs
    (BACKEND_MODES), fast / all-pairs for every count of `slices`, moduli for every count of
    `moduli`."""
    found = []
    for mode in BACKEND_MODES[backend]:
        if mode not in modes:
            continue
        if mode == "fast" or mode == "all-pairs":
            found += [Method(mode, (("fast", mode == "fast"), ("slices", s)), backend)
                      for s in slices]
        elif mode == "moduli":
            found += [Method(mode, (("moduli", n),), backend) for n in moduli]
        elif mode == "auto":
            found.append(Method(mode, (), backend))
        else:
            found.append(Method(mode, (("rounding", "nearest"),), backend))
    return found


def product(method, A, B):
    """(C, plan or None) of one method."""
    if method.mode == "native":
        with native_matmul():
            return torch.matmul(A, B), None
    options = dict(method.options, backend=method.backend)
    gemm = ozaki.dgemm if A.dtype == torch.float64 else ozaki.sgemm
    with warnings.catch_warnings():
        # the study sweeps counts short of the bound on purpose, and measures what they give
        warnings.simplefilter("ignore", AccuracyWarning)
        return gemm(A, B, **options), ozaki.plan(A, B, **options)


def error_row(case, method, C, plan, exact, magnitudes, A, B):
    """One CSV row: the method, its plan and its errors against the exact product."""
    relative = accuracy.relative_errors(C, exact)
    return {"dtype": DTYPE_NAMES[case.dtype], "phi": case.phi, "m": case.size, "k": case.k,
            "n": case.size, "mode": method.mode, "backend": method.backend,
            "slices": plan.slices if plan else None, "fast": plan.fast if plan else None,
            "moduli": plan.moduli if plan else None,
            "plan_backend": plan.backend if plan else None,
            "gemms": plan.gemms if plan else None, "exact_plan": plan.exact if plan else None,
            "median_rel_err": float(np.median(relative)), "max_rel_err": float(np.max(relative)),
            "max_comp_err": accuracy.componentwise_error(C, exact, A, B, magnitudes=magnitudes),
            "rounded_share": accuracy.correctly_rounded_share(C, exact)}


def cases_for(dtypes, phis, ks, size):
    return [Case(dtype, phi, k, size) for dtype in dtypes for phi in phis for k in ks]


def error_study(cases, modes, slices, seed, device, reference="int", progress=None,
                backends=(LEGACY_BACKEND,), moduli=None):
    """Rows (dicts with CSV_COLUMNS) of every method on every case: native first, then each backend
    of `backends` (BACKENDS) in the modes of `modes` it runs (BACKEND_MODES). `slices` / `moduli`:
    lists of counts for the fast and all-pairs / the moduli modes, or None for DEFAULT_SLICES /
    DEFAULT_MODULI of each dtype. `progress`: an ozaki.progress.Progress with one step per case,
    or None."""
    unknown = [b for b in backends if b not in BACKEND_MODES]
    if unknown:
        raise ValueError(f"error_study: backends must be among {', '.join(BACKENDS)}, got "
                         f"{unknown[0]!r}")
    _check_modes(modes, backends, slices, moduli)
    if not isinstance(device, (torch.device, str)):
        raise TypeError(f"error_study: device must be a torch.device or a str, got "
                        f"{type(device).__name__} {device!r}")
    device = torch.device(device)
    rows = []
    where = device_name(device)
    for case in cases:
        A, B = case.inputs(seed, device)
        exact = accuracy.exact_matmul(A, B, method=reference)
        magnitudes = accuracy.exact_matmul(A.abs(), B.abs())
        inputs = fingerprint(A, B)
        swept = slices if slices is not None else DEFAULT_SLICES[case.dtype]
        counts = moduli if moduli is not None else DEFAULT_MODULI[case.dtype]
        if "crt" in backends and ("moduli" in modes or "auto" in modes):
            problem = moduli_problem(counts if "moduli" in modes else [], case.k)
            if problem:
                raise ValueError(f"error_study: {problem}")
        found = [NATIVE] + [method for backend in dict.fromkeys(backends)
                            for method in methods(modes, swept, backend, counts)]
        for method in found:
            C, plan = product(method, A, B)
            row = error_row(case, method, C, plan, exact, magnitudes, A, B)
            row.update(device=str(device), device_name=where, torch_version=torch.__version__,
                       reference=reference, seed=seed, inputs=inputs)
            rows.append(row)
        if progress is not None:
            progress.step(case.label())
    return rows


def _check_modes(modes, backends, slices, moduli):
    """error_study's modes and counts: every mode among MODES, some mode that one of `backends`
    runs (else the study would measure native alone), the counts within the options' ranges."""
    if isinstance(modes, str):
        raise TypeError(f"error_study: modes must be a list of mode names (of {', '.join(MODES)}), "
                        f"got the str {modes!r}")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"error_study: modes must be among {', '.join(MODES)}, got {mode!r}")
    if not any(mode in BACKEND_MODES[b] for b in backends for mode in modes):
        raise ValueError(f"error_study: backends {tuple(backends)} run none of the modes "
                         f"{tuple(modes)}: only native would be measured")
    for arg, counts, most in (("slices", slices, MAX_SLICES), ("moduli", moduli, crt.MAX_MODULI)):
        for count in counts or ():
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= most:
                raise ValueError(f"error_study: {arg} must hold counts between 1 and {most}, got "
                                 f"{count!r}")


def moduli_problem(counts, k):
    """Why a moduli count of `counts` cannot run backend crt at inner dimension k, or None."""
    if k > crt.MAX_INNER:
        return (f"k = {k} exceeds {crt.MAX_INNER} = 2^17 - 1, the limit of backend crt (exact INT8 "
                "residue products)")
    least = crt.smallest_moduli(k)
    short = [n for n in counts if n < least]
    if short:
        return (f"{short[0]} moduli leave no scale for k = {k} (backend crt needs at least "
                f"{least})")
    return None


def _case_key(row):
    return (row["dtype"], row["phi"], row["k"])


def row_backend(row):
    """The backend an ozaki row passed (LEGACY_BACKEND for rows from before the column); None for
    native rows."""
    if row["mode"] == "native":
        return None
    return row.get("backend") or LEGACY_BACKEND


def describe_plan(row):
    """A row's plan in a few words: '7 fast', '9 all pairs', '14 moduli', with the planned backend
    in front where it is not the one asked for ('crt 14 moduli' for backend auto, 'int8 7 fast'
    for rounding='nearest' with backend crt where exact scheme II cannot hold the product)."""
    if row.get("moduli") is not None:
        text = f"{row['moduli']} moduli"
    else:
        text = f"{row['slices']} {'fast' if row['fast'] else 'all pairs'}"
    planned = row.get("plan_backend")
    return f"{planned} {text}" if planned and planned != row_backend(row) else text


def summarize(rows):
    """Per case and backend: the native level, what the automatic plan does, the fewest fast-mode
    slices (and, with backend crt, moduli) that reach the native level, and the correctly
    rounded share of rounding='nearest'. A backend column when the rows hold several backends, a
    moduli column when they hold moduli rows."""
    by_case = {}
    for row in rows:
        by_case.setdefault(_case_key(row), []).append(row)
    backends = list(dict.fromkeys(row_backend(r) for r in rows if r["mode"] != "native"))
    with_moduli = any(r["mode"] == "moduli" for r in rows)
    summary = []
    for (dtype, phi, k), case_rows in by_case.items():
        native = next(r for r in case_rows if r["mode"] == "native")
        for backend in backends or [None]:
            mine = [r for r in case_rows if row_backend(r) == backend]
            if backend is not None and not mine:
                continue
            auto = next((r for r in mine if r["mode"] == "auto"), None)
            nearest = next((r for r in mine if r["mode"] == "nearest"), None)

            def reaching(mode, count):
                found = [r[count] for r in mine
                         if r["mode"] == mode and r["max_comp_err"] <= native["max_comp_err"]]
                return str(min(found)) if found else ""

            line = {"case": f"{dtype} phi={phi:g} k={k}"}
            if len(backends) > 1:
                line["backend"] = backend
            line.update({
                "native max comp err": f"{native['max_comp_err']:.1e}",
                "auto plan": describe_plan(auto) if auto else "",
                "auto max comp err": f"{auto['max_comp_err']:.1e}" if auto else "",
                "auto RN share": f"{auto['rounded_share']:.1%}" if auto else "",
                "fast s at native level": reaching("fast", "slices")})
            if with_moduli:
                line["moduli at native level"] = reaching("moduli", "moduli")
            line["nearest RN share"] = f"{nearest['rounded_share']:.1%}" if nearest else ""
            summary.append(line)
    return summary
