"""ozaki.plots' figure of scheme II's paths (scripts/probes/crt_paths.py --json): a bar per mode
and shape at native's time over the mode's, the first of a mode measured twice, targets as ticks."""

import json

import pytest

from ozaki import plots

SHAPES = [(1024, 1024, 1024), (16384, 16384, 64)]


def paths_file(tmp_path):
    """A crt_paths JSON of two shapes: native, eager, default (twice) and prepared."""
    rows = []
    for (m, k, n), native in zip(SHAPES, (0.07e-3, 0.8e-3)):
        for what, ratio in [("native", 1.0), ("eager", 0.2), ("default", 0.25), ("prepared", 0.4),
                            ("default", 0.9)]:
            rows.append({"m": m, "k": k, "n": n, "what": what, "seconds": native / ratio,
                         "native_seconds": native})
    path = tmp_path / "paths.json"
    path.write_text(json.dumps({"device": "a GPU", "timing": "synchronized", "rows": rows}))
    return path


def test_ratio_by_shape_draws_each_mode_s_first_measurement(tmp_path):
    pytest.importorskip("matplotlib")
    meta, rows = plots.load_paths_json(paths_file(tmp_path))
    assert meta == {"device": "a GPU", "timing": "synchronized"}
    figure = plots.plot_ratio_by_shape(meta, rows, targets={SHAPES[1]: 0.5})
    ax = figure.axes[0]
    widths = {label: [] for label in ("eager", "default", "prepared")}
    for container in ax.containers:
        widths[container.get_label()] = [round(bar.get_width(), 6) for bar in container]
    assert widths == {"eager": [0.2, 0.2], "default": [0.25, 0.25], "prepared": [0.4, 0.4]}
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1024 x 1024 x 1024",
                                                            "16384 x 16384 x 64"]
    targets = [line for line in ax.lines if line.get_label() == "target"]
    assert len(targets) == 1 and list(targets[0].get_xdata()) == [0.5, 0.5]
    assert ax.get_title() == "a GPU, synchronized calls"
    plots.save(figure, tmp_path / "ratio.png")
    assert (tmp_path / "ratio.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ratio_by_shape_names_modes_it_cannot_find(tmp_path):
    pytest.importorskip("matplotlib")
    meta, rows = plots.load_paths_json(paths_file(tmp_path))
    with pytest.raises(ValueError, match=r"none of the modes \['cublas'\] is in the rows"):
        plots.plot_ratio_by_shape(meta, rows, modes=("cublas",))
