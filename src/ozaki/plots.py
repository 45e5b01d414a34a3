"""Figures of the accuracy study (ozaki.study CSV) and the benchmark (ozaki.bench JSON).

Used by the notebooks and by scripts/make_figures.py (the README's figure). Needs matplotlib,
which ozaki itself does not: it is imported when a figure is drawn.
"""

import csv
import json
import math

#: How CSV columns of ozaki.study are read back (the rest stay strings).
_STUDY_TYPES = {"phi": float, "m": int, "k": int, "n": int, "slices": int, "moduli": int,
                "gemms": int, "median_rel_err": float, "max_rel_err": float,
                "max_comp_err": float, "rounded_share": float, "seed": int}
_BOOLEANS = {"True": True, "False": False}
#: The backend of study rows written before the CSV had a backend column (ozaki.study.errors).
_LEGACY_BACKEND = "fp16"
#: Markers per phi and per mode, so the figures also read in black and white.
_MARKERS = "osD^v<>p*h"
#: The marker of a line with a point that has no neighbour to draw a segment to (one size): a
#: horizontal dash, so that the level still shows.
_LONE_POINT = {"marker": "_", "ms": 14, "mew": 2}
#: Line styles per backend where a figure holds several.
_LINE_STYLES = ["-", "-.", ":", (0, (5, 1, 1, 1, 1, 1))]
NATIVE_NAMES = {"float64": "native DGEMM", "float32": "native SGEMM"}


def _pyplot():
    import matplotlib.pyplot as plt  # optional dependency: only for figures
    return plt


def save(figure, path):
    """Write a figure to a file (format from the suffix) and release it."""
    figure.savefig(path, dpi=110, bbox_inches="tight")
    _pyplot().close(figure)


def _study_value(column, text):
    if text == "":
        return None
    if text in _BOOLEANS:
        return _BOOLEANS[text]
    return _STUDY_TYPES.get(column, str)(text)


def _with_backend(row):
    """A study row from before the backend columns: its ozaki rows ran scheme I with FP16 slices."""
    if "backend" not in row:
        ozaki_row = row.get("mode") != "native"
        row["backend"] = row["plan_backend"] = _LEGACY_BACKEND if ozaki_row else None
        row["moduli"] = None
    return row


def load_study_csv(path):
    """Rows of an `ozaki.study accuracy --csv` file with numbers and booleans typed. Files written
    before the backend column get backend (and plan_backend) "fp16" on ozaki rows and moduli
    None."""
    with open(path, newline="") as handle:
        return [_with_backend({column: _study_value(column, text) for column, text in row.items()})
                for row in csv.DictReader(handle)]


def load_bench_json(path):
    """(meta, rows) of an `ozaki.bench --json` file."""
    with open(path) as handle:
        data = json.load(handle)
    return data["meta"], data["rows"]


def _select(rows, **fields):
    return [row for row in rows if all(row.get(key) == value for key, value in fields.items())]


def _distinct(rows, key):
    return sorted({row[key] for row in rows})


def _backend(row):
    """The backend of an ozaki study row (rows from before the column: fp16); None for native."""
    if row["mode"] == "native":
        return None
    return row.get("backend") or _LEGACY_BACKEND


def _backends(rows):
    """The backends of the ozaki rows, in order of appearance."""
    return list(dict.fromkeys(_backend(row) for row in rows if row["mode"] != "native"))


def plot_error_vs_slices(rows, dtype="float64", metric="max_comp_err", ks=None, axes=None):
    """Error of fast mode against the slice count, one line per phi (and per scheme-I backend,
    named in the legend, where the rows hold both fp16 and int8) and one panel per k, with the
    native product's error on the same inputs as a dashed line of the same colour and each
    automatic plan with a slice count as a star (hollow where it runs all pairs, whose error
    fast mode's line does not show). Rows of backend crt have no slice count and are not drawn.
    Returns the figure."""
    plt = _pyplot()
    rows = _select(rows, dtype=dtype)
    if not rows:
        raise ValueError(f"plot_error_vs_slices: no rows with dtype {dtype!r}")
    backends = _backends(_select(rows, mode="fast"))
    if not backends:
        raise ValueError(f"plot_error_vs_slices: no fast-mode rows with dtype {dtype!r} (fast "
                         "mode runs with backend fp16 or int8)")
    several = len(backends) > 1
    ks = ks or _distinct(rows, "k")
    if axes is None:
        figure, axes = plt.subplots(1, len(ks), figsize=(4.2 * len(ks), 3.8), sharey=True,
                                    squeeze=False)
        axes = axes[0]
    # zero errors (exact results) sit at the bottom of the log axis
    floor = 2.0 ** -80 if dtype == "float64" else 2.0 ** -50
    for ax, k in zip(axes, ks):
        for index, phi in enumerate(_distinct(_select(rows, k=k), "phi")):
            case = _select(rows, k=k, phi=phi)
            colour = f"C{index}"
            for position, backend in enumerate(backends):
                fast = sorted((r for r in _select(case, mode="fast") if _backend(r) == backend),
                              key=lambda row: row["slices"])
                ax.semilogy([r["slices"] for r in fast], [max(r[metric], floor) for r in fast],
                            marker=_MARKERS[index % len(_MARKERS)], color=colour, ms=4,
                            ls=_LINE_STYLES[position % len(_LINE_STYLES)],
                            mfc=colour if position == 0 else "none",
                            label=f"phi = {phi:g}" + (f" [{backend}]" if several else ""))
            for native in _select(case, mode="native"):
                ax.axhline(max(native[metric], floor), color=colour, ls="--", lw=1)
            for auto in _select(case, mode="auto"):
                if auto["slices"] is not None:  # hollow: a plan in all-pairs mode
                    ax.plot(auto["slices"], max(auto[metric], floor), marker="*", ms=13,
                            color=colour, markeredgecolor="black", zorder=5,
                            mfc=colour if auto.get("fast", True) is not False else "none")
        ax.set_title(f"k = {k}")
        ax.set_xlabel("slices (fast mode)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel(_METRIC_LABELS[metric])
    axes[0].legend(fontsize=8, title=f"dashed: {NATIVE_NAMES[dtype]}\nstar: automatic plan "
                                     "(hollow: all pairs)",
                   title_fontsize=8)
    figure = axes[0].figure
    figure.suptitle(f"ozaki {'dgemm' if dtype == 'float64' else 'sgemm'}: error vs slice count"
                    f" ({_where(rows)})")
    figure.tight_layout()
    return figure


_METRIC_LABELS = {"max_comp_err": "max |C - AB| / (|A||B|)",
                  "median_rel_err": "median |C - AB| / |AB|",
                  "max_rel_err": "max |C - AB| / |AB|"}


def _where(rows):
    names = {row.get("device_name") or row.get("device") for row in rows}
    return ", ".join(sorted(str(name) for name in names))


def plot_rounded_share(rows, dtype="float64"):
    """Share of correctly rounded entries per mode (native, automatic plan, rounding='nearest';
    the ozaki modes per backend, named in the legend, where the rows hold several) for every
    (phi, k). Returns the figure."""
    plt = _pyplot()
    rows = _select(rows, dtype=dtype)
    if not rows:
        raise ValueError(f"plot_rounded_share: no rows with dtype {dtype!r}")
    cases = sorted({(row["phi"], row["k"]) for row in rows})
    backends = _backends(rows)
    several = len(backends) > 1
    modes = [("native", None, NATIVE_NAMES[dtype])]
    for backend in backends:
        tag = f" [{backend}]" if several else ""
        modes += [("auto", backend, "ozaki automatic" + tag),
                  ("nearest", backend, "ozaki rounding='nearest'" + tag)]
    modes = [(mode, backend, label) for mode, backend, label in modes
             if any(_backend(row) == backend for row in _select(rows, mode=mode))]
    figure, ax = plt.subplots(figsize=(min(14.0, max(6.0, 0.3 * len(cases) * len(modes))), 4.0))
    width = 0.8 / len(modes)
    for index, (mode, backend, label) in enumerate(modes):
        shares = []
        for phi, k in cases:
            found = [row for row in _select(rows, mode=mode, phi=phi, k=k)
                     if _backend(row) == backend]
            shares.append(100 * found[0]["rounded_share"] if found else math.nan)
        positions = [c + (index - (len(modes) - 1) / 2) * width for c in range(len(cases))]
        ax.bar(positions, shares, width, label=label, color=f"C{index}",
               hatch=["", "//", "..", "xx", "\\\\"][index % 5], edgecolor="black", lw=0.5)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"phi={phi:g}\nk={k}" for phi, k in cases], fontsize=8)
    ax.set_ylabel("correctly rounded entries (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(modes), 4),
              frameon=False)
    figure.suptitle(f"{dtype}: share of entries equal to the correctly rounded exact product "
                    f"({_where(rows)})", fontsize=10)
    figure.tight_layout()
    return figure


def bench_label(row, with_backend=False):
    """A benchmark row's name: 'native dgemm', 'ozaki dgemm default', 'ozaki dgemm nearest',
    'ozaki dgemm s=10 fast'; with the backend appended (' [fp16]') when asked."""
    if row["kind"] not in ("ozaki", "plan"):
        return row["method"]
    if row["default"]:
        label = row["method"] if row["method"].endswith("nearest") else f"{row['method']} default"
    elif row.get("moduli_requested") is not None:
        label = f"{row['method']} m={row['moduli_requested']}"
    else:
        slices = "auto" if row["slices_requested"] is None else f"s={row['slices_requested']}"
        label = f"{row['method']} {slices} {'fast' if row['fast_requested'] else 'all pairs'}"
    return f"{label} [{row['backend']}]" if with_backend and row.get("backend") else label


def _series_style(index):
    """(colour, marker) of the index-th series of a figure: matplotlib's ten colours, each ten
    series later with the next marker, so that no two of the first 100 series look alike (the
    colour cycle and the markers both repeat after ten)."""
    return f"C{index % 10}", _MARKERS[(index + index // 10) % len(_MARKERS)]


def _lone_points(values):
    """_LONE_POINT where some finite value has no finite neighbour (a line through it draws
    nothing: a run of one size, or a floor between missing ones), else no marker options."""
    finite = [math.isfinite(value) for value in values]
    lone = any(here and not (i > 0 and finite[i - 1])
               and not (i + 1 < len(finite) and finite[i + 1]) for i, here in enumerate(finite))
    return dict(_LONE_POINT) if lone else {}


def _square(rows):
    return [row for row in rows if row["m"] == row["k"] == row["n"]]


def _by_label(rows):
    """Measured rows with a throughput, grouped by name (the backend named only when the rows
    hold several)."""
    several = len({row.get("backend") for row in rows if row["kind"] == "ozaki"}) > 1
    series = {}
    for row in rows:
        if row.get("status", "ok") == "ok" and row.get("tflops"):
            series.setdefault(bench_label(row, several), []).append(row)
    return series


def plot_throughput(meta, rows, dtype="float64", show_floor=True, legend_loc="best"):
    """DGEMM-equivalent TFLOPS against n, one line per ozaki mode of `dtype`, next to native DGEMM
    and SGEMM; the dotted line of the same colour is the mode's GEMM floor (its GEMM count times
    the measured FP16 or INT8 GEMM of its backend). Square shapes only; legend_loc: where the
    legend goes (matplotlib's loc). Returns the figure."""
    plt = _pyplot()
    square = _square(rows)
    series = _by_label(square)
    if not series:
        raise ValueError("plot_throughput: no measured square shapes in the rows")
    figure, ax = plt.subplots(figsize=(7.5, 4.6))
    for label, colour, name in [("native dgemm", "black", NATIVE_NAMES["float64"]),
                                ("native sgemm", "grey", NATIVE_NAMES["float32"])]:
        if label in series:
            points = sorted(series[label], key=lambda row: row["n"])
            tflops = [r["tflops"] for r in points]
            ax.plot([r["n"] for r in points], tflops, color=colour, lw=2.5, label=name,
                    **_lone_points(tflops))
    ozaki_labels = [label for label in series if label.startswith("ozaki")
                    and series[label][0]["dtype"] == dtype and series[label][0]["kind"] == "ozaki"]
    for index, label in enumerate(ozaki_labels):
        points = sorted(series[label], key=lambda row: row["n"])
        n = [r["n"] for r in points]
        colour, marker = _series_style(index)
        ax.plot(n, [r["tflops"] for r in points], marker=marker, color=colour,
                label=label.replace("ozaki ", ""))
        if show_floor:
            floors = [2.0 * r["n"] ** 3 / (r["floor_ms"] * 1e-3) / 1e12 if r.get("floor_ms")
                      else math.nan for r in points]
            ax.plot(n, floors, ls=":", color=colour, lw=1, **_lone_points(floors))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({row["n"] for row in square}))
    ax.get_xaxis().set_major_formatter(_integer_formatter())
    ax.set_xlabel("n (n x n times n x n)")
    ax.set_ylabel("DGEMM-equivalent TFLOPS (2n³ / time)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2, title="dotted: GEMM floor of the mode (FP16 or INT8 units)",
              title_fontsize=8, loc=legend_loc)
    ax.set_title(f"{meta['device_name']}, torch {meta['torch_version']}, {meta['date'][:10]}",
                 fontsize=10)
    figure.tight_layout()
    return figure


def _integer_formatter():
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda value, _: f"{value:g}")


def plot_error_vs_n(meta, rows, dtype="float64", metric="max_rel_err"):
    """Error on the benchmark's sampled entries against n for every mode of `dtype` and its native
    routine. Square shapes only (another shape has no single n). Returns the figure."""
    plt = _pyplot()
    series = {label: points for label, points in _by_label(_square(rows)).items()
              if points[0]["dtype"] == dtype and points[0]["kind"] in ("ozaki", "native")}
    if not series:
        raise ValueError(f"plot_error_vs_n: no measured square shapes of dtype {dtype!r} in the "
                         "rows")
    figure, ax = plt.subplots(figsize=(7.5, 4.0))
    for index, (label, points) in enumerate(series.items()):
        points = sorted(points, key=lambda row: row["n"])
        native = points[0]["kind"] == "native"
        colour, marker = _series_style(index)
        ax.semilogy([r["n"] for r in points], [max(r[metric], 1e-300) for r in points],
                    marker=marker, color="black" if native else colour,
                    lw=2.5 if native else 1.5, label=label)
    ax.set_xscale("log", base=2)
    ax.get_xaxis().set_major_formatter(_integer_formatter())
    ax.set_xlabel("n")
    ax.set_ylabel(_METRIC_LABELS[metric])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{dtype} errors on {meta['samples']}x{meta['samples']} sampled entries, "
                 f"{meta['device_name']}", fontsize=10)
    figure.tight_layout()
    return figure


def load_paths_json(path):
    """(meta, rows) of a scripts/probes/crt_paths.py --json file: rows of m, k, n, what (native,
    a path, default, prepared, eager), seconds and native_seconds."""
    with open(path) as f:
        data = json.load(f)
    return {key: value for key, value in data.items() if key != "rows"}, data["rows"]


def plot_ratio_by_shape(meta, rows, modes=("eager", "default", "prepared"), targets=None):
    """Speed against native per product shape (native's time over the mode's, both measured in
    the same run): one horizontal bar per mode of `modes` found in the rows, where a mode measured
    twice for a shape shows its first measurement; targets: {(m, k, n): ratio} drawn as a tick
    per shape. Returns the figure."""
    plt = _pyplot()
    shapes = list(dict.fromkeys((row["m"], row["k"], row["n"]) for row in rows))
    first = {}
    for row in rows:
        first.setdefault((row["m"], row["k"], row["n"], row["what"]), row)
    shown = [mode for mode in modes if any((*shape, mode) in first for shape in shapes)]
    if not shown:
        raise ValueError(f"plot_ratio_by_shape: none of the modes {list(modes)} is in the rows")
    figure, ax = plt.subplots(figsize=(7.5, 0.32 * len(shapes) * len(shown) + 1.6))
    height = 0.8 / len(shown)
    for index, mode in enumerate(shown):
        where, ratios = [], []
        for y, shape in enumerate(shapes):
            row = first.get((*shape, mode))
            if row is not None and row.get("seconds"):
                where.append(y + (index - (len(shown) - 1) / 2) * height)
                ratios.append(row["native_seconds"] / row["seconds"])
        bars = ax.barh(where, ratios, height=height, color=f"C{index}", label=mode)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    for y, shape in enumerate(shapes):
        if targets and shape in targets:
            ax.plot([targets[shape]] * 2, [y - 0.45, y + 0.45], color="crimson", lw=1.2,
                    ls="--", zorder=0,
                    label="target" if y == min(i for i, s in enumerate(shapes) if s in targets)
                    else None)
    ax.axvline(1.0, color="grey", lw=1, zorder=0)
    ax.set_xlim(0, 1.15 * max(ax.get_xlim()[1], 1.0))
    ax.set_yticks(range(len(shapes)))
    ax.set_yticklabels([f"{m} x {k} x {n}" for m, k, n in shapes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("x native (native time / ozaki time); right of the grey line: faster")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    title = meta.get("device", "")
    if meta.get("timing"):
        title += f", {meta['timing']} calls"
    ax.set_title(title, fontsize=10)
    figure.tight_layout()
    return figure
