"""Error of ozaki's products against exact references, versus slice count, mode, phi and k, next to
torch's native matmul on the same inputs (`python -m ozaki.study accuracy`).

Each case (dtype, phi, k) draws fresh phi-matrix inputs A (size x k) and B (k x size) from a
generator seeded with the study's seed, so a case's inputs do not depend on the other cases. The
whole size x size product is compared with the exact one (Python integers, or mpmath).
"""

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

import ozaki
from ozaki import accuracy
from ozaki.bench import ieee_fp32_matmul
from ozaki.cli import DTYPE_NAMES, device_name

#: Modes the study can sweep; "native" (torch.matmul) is always measured as the baseline.
MODES = ("fast", "all-pairs", "auto", "nearest")
#: Slice counts swept by default: past the full split for typical phi and k of each format.
DEFAULT_SLICES = {torch.float64: list(range(1, 15)), torch.float32: list(range(1, 8))}
CSV_COLUMNS = ["dtype", "phi", "m", "k", "n", "mode", "slices", "fast", "gemms", "exact_plan",
               "median_rel_err", "max_rel_err", "max_comp_err", "rounded_share", "device",
               "device_name", "torch_version", "reference", "seed", "inputs"]


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
    """A product to measure: the native matmul, or an ozaki call with `options`."""

    mode: str         # "native" or one of MODES
    options: tuple    # keyword arguments of the ozaki call, as sorted (name, value) pairs


def methods(modes, slices):
    """The methods of one case, native first."""
    found = [Method("native", ())]
    for mode in MODES:
        if mode not in modes:
            continue
        if mode == "fast" or mode == "all-pairs":
            found += [Method(mode, (("fast", mode == "fast"), ("slices", s))) for s in slices]
        elif mode == "auto":
            found.append(Method(mode, ()))
        else:
            found.append(Method(mode, (("rounding", "nearest"),)))
    return found


def product(method, A, B):
    """(C, plan or None) of one method."""
    if method.mode == "native":
        with ieee_fp32_matmul():
            return torch.matmul(A, B), None
    options = dict(method.options)
    gemm = ozaki.dgemm if A.dtype == torch.float64 else ozaki.sgemm
    return gemm(A, B, **options), ozaki.plan(A, B, **options)


def error_row(case, method, C, plan, exact, magnitudes, A, B):
    """One CSV row: the method, its plan and its errors against the exact product."""
    relative = accuracy.relative_errors(C, exact)
    return {"dtype": DTYPE_NAMES[case.dtype], "phi": case.phi, "m": case.size, "k": case.k,
            "n": case.size, "mode": method.mode,
            "slices": plan.slices if plan else None, "fast": plan.fast if plan else None,
            "gemms": plan.gemms if plan else None, "exact_plan": plan.exact if plan else None,
            "median_rel_err": float(np.median(relative)), "max_rel_err": float(np.max(relative)),
            "max_comp_err": accuracy.componentwise_error(C, exact, A, B, magnitudes=magnitudes),
            "rounded_share": accuracy.correctly_rounded_share(C, exact)}


def cases_for(dtypes, phis, ks, size):
    return [Case(dtype, phi, k, size) for dtype in dtypes for phi in phis for k in ks]


def error_study(cases, modes, slices, seed, device, reference="int", progress=None):
    """Rows (dicts with CSV_COLUMNS) of every method on every case. `slices`: a list of slice
    counts for the fixed modes, or None for DEFAULT_SLICES of each dtype. `progress`: an
    ozaki.progress.Progress with one step per case, or None."""
    rows = []
    where = device_name(device)
    for case in cases:
        A, B = case.inputs(seed, device)
        exact = accuracy.exact_matmul(A, B, method=reference)
        magnitudes = accuracy.exact_matmul(A.abs(), B.abs())
        inputs = fingerprint(A, B)
        swept = slices if slices is not None else DEFAULT_SLICES[case.dtype]
        for method in methods(modes, swept):
            C, plan = product(method, A, B)
            row = error_row(case, method, C, plan, exact, magnitudes, A, B)
            row.update(device=str(device), device_name=where, torch_version=torch.__version__,
                       reference=reference, seed=seed, inputs=inputs)
            rows.append(row)
        if progress is not None:
            progress.step(case.label())
    return rows


def _case_key(row):
    return (row["dtype"], row["phi"], row["k"])


def summarize(rows):
    """Per case: the native level, what the automatic plan does, the fewest fast-mode slices that
    reach the native level, and the correctly rounded share of rounding='nearest'."""
    by_case = {}
    for row in rows:
        by_case.setdefault(_case_key(row), []).append(row)
    summary = []
    for (dtype, phi, k), case_rows in by_case.items():
        native = next(r for r in case_rows if r["mode"] == "native")
        auto = next((r for r in case_rows if r["mode"] == "auto"), None)
        nearest = next((r for r in case_rows if r["mode"] == "nearest"), None)
        reaching = [r["slices"] for r in case_rows
                    if r["mode"] == "fast" and r["max_comp_err"] <= native["max_comp_err"]]
        summary.append({
            "case": f"{dtype} phi={phi:g} k={k}",
            "native max comp err": f"{native['max_comp_err']:.1e}",
            "auto plan": (f"{auto['slices']} {'fast' if auto['fast'] else 'all pairs'}"
                          if auto else ""),
            "auto max comp err": f"{auto['max_comp_err']:.1e}" if auto else "",
            "auto RN share": f"{auto['rounded_share']:.1%}" if auto else "",
            "fast s at native level": str(min(reaching)) if reaching else "",
            "nearest RN share": f"{nearest['rounded_share']:.1%}" if nearest else ""})
    return summary
