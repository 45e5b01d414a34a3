"""Accuracy and reproducibility studies of ozaki's products (`python -m ozaki.study`).

    python -m ozaki.study accuracy --phi 0.1 1 4 --k 64 1024 --csv errors.csv
    python -m ozaki.study reproducibility --threads 1 2 4

`errors` sweeps slice count, mode, phi and k against exact references next to the native matmul;
`reproducibility` compares result bits across CPU thread counts, CUDA devices and streams.
"""

from .errors import CSV_COLUMNS, Case, error_study, summarize
from .reproducibility import Report, check

__all__ = ["CSV_COLUMNS", "Case", "error_study", "summarize", "Report", "check"]
