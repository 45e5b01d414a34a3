"""Draw the figures in docs/img from the committed H100 data (docs/bench-h100.json and
docs/study-h100.csv) with ozaki.plots: the README's figure and the benchmarks page's.

    python scripts/make_figures.py
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

from ozaki import plots  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs"


def main():
    images = DOCS / "img"
    images.mkdir(exist_ok=True)
    study = plots.load_study_csv(DOCS / "study-h100.csv")
    plots.plot_error_vs_slices(study, "float64").savefig(images / "accuracy-h100.png", dpi=110)
    meta, rows = plots.load_bench_json(DOCS / "bench-h100.json")
    plots.plot_throughput(meta, rows, "float64").savefig(images / "throughput-h100.png", dpi=110)
    print(f"wrote {images / 'accuracy-h100.png'} and {images / 'throughput-h100.png'}")


if __name__ == "__main__":
    main()
