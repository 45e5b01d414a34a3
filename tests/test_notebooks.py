"""The notebooks cannot rot: both are executed here at small size (OZAKI_NOTEBOOK_SMALL=1, CPU
when there is no GPU), and the committed copies must hold their executed outputs and figures."""

import copy
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
#: notebook -> figures it draws (one image/png output each), the live section's included
FIGURES = {"accuracy.ipynb": 5, "performance.ipynb": 4}


def _code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _errors(notebook):
    return [output for cell in _code_cells(notebook) for output in cell.get("outputs", [])
            if output.output_type == "error"]


def _figures(notebook):
    return sum("image/png" in output.get("data", {}) for cell in _code_cells(notebook)
               for output in cell.get("outputs", []))


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_committed_notebook_is_executed_with_its_figures(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    counts = [cell.execution_count for cell in _code_cells(notebook)]
    assert all(counts) and counts == sorted(counts), f"{name}: cells not executed in order"
    assert not _errors(notebook)
    assert _figures(notebook) == FIGURES[name]


def _text(notebook):
    return "".join(output.get("text", "") for cell in _code_cells(notebook)
                   for output in cell.get("outputs", []))


def test_committed_notebooks_show_the_committed_data():
    # re-executed after the data in docs/ was refreshed: their printed headers name that data
    from ozaki import plots
    meta, _ = plots.load_bench_json(ROOT / "docs" / "results" / "h100" / "bench-fp16-2026-11-22.json")
    performance = nbformat.read(NOTEBOOKS / "performance.ipynb", as_version=4)
    assert f"{meta['device_name']} ({meta['device']}), {meta['date']}" in _text(performance)
    study = plots.load_study_csv(ROOT / "docs" / "results" / "h100" / "study-fp16-2026-11-22.csv")
    accuracy = nbformat.read(NOTEBOOKS / "accuracy.ipynb", as_version=4)
    assert f"{len(study)} rows measured on {study[0]['device_name']}" in _text(accuracy)
    assert "identical to the H100 rows: True" in _text(accuracy)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_runs_at_small_size(name, monkeypatch):
    monkeypatch.setenv("OZAKI_NOTEBOOK_SMALL", "1")
    # the kernel imports the ozaki these tests import (the installed one in CI, src/ with an
    # extension built in place), whatever else an older install points to
    import ozaki
    package_parent = str(Path(ozaki.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [package_parent,
                                                                    os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in _code_cells(notebook):
        cell.outputs, cell.execution_count = [], None
    executed = copy.deepcopy(notebook)
    client = nbclient.NotebookClient(executed, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    assert not _errors(executed)
    assert _figures(executed) == FIGURES[name]
