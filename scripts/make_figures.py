"""Draw the figures in docs/img from the committed H100 data (docs/results/h100/bench-fp16-2026-11-22.json,
docs/results/h100/bench-int8-2026-11-22.json, the scheme-II bench
docs/results/h100/bench-crt-2026-11-22.json, docs/results/h100/study-fp16-2026-11-22.csv and the
scheme-II paths runs docs/results/h100/crt-paths-moved-2026-11-27.json and, for the shapes it did
not measure, crt-paths-host-2026-11-27.json and crt-paths-present-2026-11-27.json) with
ozaki.plots: the
README's figures and the benchmarks page's.

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
    study = plots.load_study_csv(DOCS / "results" / "h100" / "study-fp16-2026-11-22.csv")
    plots.plot_error_vs_slices(study, "float64").savefig(images / "accuracy-h100.png", dpi=110)
    meta, rows = plots.load_bench_json(DOCS / "results" / "h100" / "bench-fp16-2026-11-22.json")
    plots.plot_throughput(meta, rows, "float64").savefig(images / "throughput-h100.png", dpi=110)
    meta, rows = plots.load_bench_json(DOCS / "results" / "h100" / "bench-int8-2026-11-22.json")
    shown = [row for row in rows if _shown_in_int8_figure(row)]
    for dtype in ("float64", "float32"):
        figure = plots.plot_throughput(meta, shown, dtype)
        figure.savefig(images / f"throughput-int8-{dtype}-h100.png", dpi=110)
    meta, rows = plots.load_bench_json(DOCS / "results" / "h100" / "bench-crt-2026-11-22.json")
    for dtype in ("float64", "float32"):
        figure = plots.plot_throughput(meta, rows, dtype, legend_loc="upper left")
        figure.savefig(images / f"throughput-crt-{dtype}-h100.png", dpi=110)
    results = DOCS / "results" / "h100"
    meta, moved = plots.load_paths_json(results / "crt-paths-moved-2026-11-27.json")
    # that run measured the default twice per shape: the second (the first captures the graphs)
    rows = list({(row["m"], row["k"], row["n"], row["what"]): row for row in moved}.values())
    # the shapes that run did not measure, from the runs before it (docs/benchmarks.md says which)
    for earlier_run in ("crt-paths-host-2026-11-27.json", "crt-paths-present-2026-11-27.json"):
        _, earlier = plots.load_paths_json(results / earlier_run)
        measured = {(row["m"], row["k"], row["n"]) for row in rows}
        rows += [row for row in earlier if (row["m"], row["k"], row["n"]) not in measured]
    figure = plots.plot_ratio_by_shape(meta, rows, targets=SPEED_TARGETS)
    figure.savefig(images / "paths-x-native-h100.png", dpi=110)
    print(f"wrote the figures in {images}")


#: The default call's speed the project aims at per shape, x native DGEMM (docs/limitations.md,
#: "Small products and planning overhead").
SPEED_TARGETS = {(1024, 1024, 1024): 0.35, (2048, 2048, 2048): 0.7, (4096, 4096, 4096): 1.0,
                 (16384, 1024, 16384): 1.0, (16384, 16384, 64): 0.5}


def _shown_in_int8_figure(row):
    """The INT8 run's figure: natives, the library default, crt at fixed moduli and INT8 scheme I
    (its default and nearest); the rows that repeat another line's numbers are left out."""
    if row["kind"] != "ozaki":
        return True
    if row["backend"] == "auto":
        return True
    if row["backend"] == "crt":
        return row.get("moduli_requested") is not None
    return row["backend"] == "int8" and row["default"]


if __name__ == "__main__":
    main()
