"""Tests for ozaki.bench: a tiny CPU run end to end, the row arithmetic, OOM rows and argument
errors. Timings are measured but never asserted on."""

import json
import math
import subprocess
import sys

import pytest
import torch

from ozaki import bench

SLICES = (3, 4)
ALL_PAIRS = (3,)
SHAPES = [(32, 32, 32), (48, 48, 48), (24, 40, 16)]
ERROR_FIELDS = ("median_rel_err", "max_rel_err", "max_comp_err")
# (method, default, slices requested, fast requested)
EXPECTED_ROWS = ([("native dgemm", False, None, None), ("native sgemm", False, None, None),
                  ("fp16 gemm (floor unit)", False, None, None), ("ozaki dgemm", True, None, None),
                  ("ozaki plan", True, None, None), ("ozaki dgemm nearest", True, None, None),
                  ("ozaki dgemm", False, None, True)]
                 + [("ozaki dgemm", False, s, True) for s in SLICES]
                 + [("ozaki dgemm", False, s, False) for s in ALL_PAIRS]
                 + [("ozaki sgemm", True, None, None), ("ozaki sgemm nearest", True, None, None)])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """`python -m ozaki.bench` on the CPU at tiny sizes: (completed process, JSON, markdown)."""
    folder = tmp_path_factory.mktemp("bench")
    json_path, markdown_path = folder / "bench.json", folder / "bench.md"
    command = [sys.executable, "-m", "ozaki.bench", "--sizes", "32", "48", "--shape", "24", "40",
               "16", "--repeats", "1", "--warmup", "1", "--samples", "8", "--slices",
               *map(str, SLICES), "--all-pairs-slices", *map(str, ALL_PAIRS), "--device", "cpu",
               "--json", str(json_path), "--markdown", str(markdown_path)]
    process = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    return process, json.loads(json_path.read_text()), markdown_path.read_text()


def rows_of(report, shape, method=None):
    label = bench.shape_label(shape)
    return [row for row in report["rows"]
            if row["shape"] == label and (method is None or row["method"] == method)]


def default_row(report, shape, method):
    return next(row for row in rows_of(report, shape, method) if row["default"])


def test_metadata(tiny_run):
    _, report, _ = tiny_run
    meta = report["meta"]
    assert meta["complete"] is True
    assert meta["device"] == "cpu"
    assert meta["shapes"] == [list(s) for s in SHAPES]
    assert meta["phi"] == 0.5 and meta["seed"] == 0 and meta["samples"] == 8
    assert meta["torch_version"] == torch.__version__
    assert meta["floor_gemm"] in (bench.FLOOR_FP32_OUT, bench.FLOOR_FP16_OUT)
    for key in ("device_name", "cuda_version", "date", "argv", "ozaki_version"):
        assert key in meta
    assert "--sizes" in meta["argv"]


def test_rows_in_order_for_every_shape(tiny_run):
    _, report, _ = tiny_run
    assert len(report["rows"]) == len(SHAPES) * len(EXPECTED_ROWS)
    for shape in SHAPES:
        rows = rows_of(report, shape)
        assert [(r["method"], r["default"], r["slices_requested"], r["fast_requested"])
                for r in rows] == EXPECTED_ROWS
        for row in rows:
            assert row["status"] == "ok"
            assert (row["m"], row["k"], row["n"]) == shape
            assert len(row["times_ms"]) == 1 and row["time_ms"] == row["times_ms"][0]


def test_errors_finite_and_ozaki_no_worse_than_native(tiny_run):
    _, report, _ = tiny_run
    for shape in SHAPES:
        for row in rows_of(report, shape):
            if row["kind"] in ("native", "ozaki"):
                for key in ERROR_FIELDS:
                    assert math.isfinite(row[key]) and row[key] >= 0, (shape, row)
            else:
                assert not any(key in row for key in ERROR_FIELDS)
        for ours, native in (("ozaki dgemm", "native dgemm"), ("ozaki sgemm", "native sgemm")):
            mine, theirs = default_row(report, shape, ours), rows_of(report, shape, native)[0]
            assert mine["max_rel_err"] <= theirs["max_rel_err"], shape
            assert mine["max_comp_err"] <= theirs["max_comp_err"], shape


def test_gemm_counts_floor_and_speedups(tiny_run):
    _, report, _ = tiny_run
    for shape in SHAPES:
        m, k, n = shape
        native = {row["dtype"]: row["time_ms"] for row in rows_of(report, shape)
                  if row["kind"] == "native"}
        unit = rows_of(report, shape, "fp16 gemm (floor unit)")[0]["time_ms"]
        for row in rows_of(report, shape):
            assert row["tflops" if row["kind"] != "plan" else "time_ms"] > 0
            if row["kind"] != "plan":
                assert row["tflops"] == pytest.approx(2 * m * k * n / row["time_ms"] / 1e9)
            if row["kind"] != "ozaki":
                continue
            s = row["slices"]
            if row["slices_requested"] is not None:
                assert s == row["slices_requested"]
            if row["fast_requested"] is not None:
                assert row["fast"] == row["fast_requested"]
            assert row["gemms"] == (s * (s + 1) // 2 if row["fast"] else s * s)
            assert row["floor_ms"] == pytest.approx(row["gemms"] * unit)
            assert row["of_floor"] == pytest.approx(row["floor_ms"] / row["time_ms"])
            assert row["speedup"] == pytest.approx(native[row["dtype"]] / row["time_ms"])
        plan = rows_of(report, shape, "ozaki plan")[0]
        default = default_row(report, shape, "ozaki dgemm")
        assert (plan["slices"], plan["fast"]) == (default["slices"], default["fast"])
        assert 0 < plan["share_of_default"]


def test_stdout_and_markdown(tiny_run):
    process, report, markdown = tiny_run
    total = len(report["rows"])
    assert f"[1/{total}] n=32 native dgemm ... " in process.stdout
    assert f"[{total}/{total}] m x k x n = 24x40x16 ozaki sgemm nearest default ... " in process.stdout
    table_header = [line for line in process.stdout.splitlines()
                    if line.split()[:2] == ["n", "method"]]
    assert len(table_header) == 1 and "of floor" in table_header[0]
    assert "OOM" not in process.stdout
    lines = markdown.splitlines()
    assert lines[0].startswith("**") and "torch" in lines[0] and "CUDA" in lines[0]
    table = [line for line in lines if line.startswith("|")]
    assert table[0] == "| " + " | ".join(h for h, _, _ in bench.COLUMNS) + " |"
    assert len(table) == 2 + total
    assert all(line.count("|") == len(bench.COLUMNS) + 1 for line in table)


def test_inputs_depend_only_on_seed_and_shape():
    cpu = torch.device("cpu")
    A1, B1, rows1, cols1 = bench.make_inputs((8, 12, 6), 0.5, 3, 4, cpu)
    bench.make_inputs((16, 16, 16), 0.5, 3, 4, cpu)
    A2, B2, rows2, cols2 = bench.make_inputs((8, 12, 6), 0.5, 3, 4, cpu)
    assert torch.equal(A1, A2) and torch.equal(B1, B2) and (rows1, cols1) == (rows2, cols2)
    assert A1.dtype == torch.float64 and A1.shape == (8, 12) and B1.shape == (12, 6)
    assert len(rows1) == 4 and len(cols1) == 4


def test_time_call_returns_last_result_and_all_times():
    calls = []
    times, result = bench.time_call(lambda: calls.append(1) or len(calls), torch.device("cpu"),
                                    warmup=2, repeats=3)
    assert len(times) == 3 and len(calls) == 5 and result == 5


def test_ieee_fp32_matmul_restores_setting():
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        with bench.ieee_fp32_matmul():
            assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def test_out_of_memory_becomes_an_oom_row(monkeypatch):
    def out_of_memory(spec, run):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setitem(bench.MEASURE, "ozaki", out_of_memory)
    args = bench.parse_args(["--sizes", "16", "--device", "cpu", "--repeats", "1",
                             "--warmup", "0", "--samples", "4"])
    run = bench.prepare_shape((16, 16, 16), args, bench.FLOOR_FP16_OUT)
    native = bench.measure_row(bench.RowSpec("native dgemm", "native", torch.float64), run)
    row = bench.measure_row(bench.RowSpec("ozaki dgemm", "ozaki", torch.float64, 8, True), run)
    assert native["status"] == "ok" and row["status"] == "OOM" and "time_ms" not in row
    table = bench.format_table([native, row]).splitlines()
    assert "OOM" in table[-1] and "OOM" not in table[-2]


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "0"], "argument --sizes: must be a positive integer, got '0'"),
    (["--sizes", "abc"], "argument --sizes: must be a positive integer, got 'abc'"),
    (["--shape", "4", "4"], "argument --shape: expected 3 arguments"),
    (["--slices", "0"], "argument --slices: slice counts must be integers in 1..40, got '0'"),
    (["--all-pairs-slices", "41"], "argument --all-pairs-slices: slice counts must be integers "
                                   "in 1..40, got '41'"),
    (["--phi", "-1"], "argument --phi: must be a finite number >= 0, got '-1'"),
    (["--phi", "nan"], "argument --phi: must be a finite number >= 0, got 'nan'"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got '0'"),
    (["--warmup", "-1"], "argument --warmup: must be an integer >= 0, got '-1'"),
    (["--samples", "x"], "argument --samples: must be a positive integer, got 'x'"),
    (["--device", "tpu"], "argument --device: expected cpu, cuda or cuda:I, got 'tpu'"),
    (["--device", "cpu", "--shape", "2", str(2 ** 22 + 1), "2"],
     "inner dimension k = 4194305 exceeds 2^22"),
    (["--device", "cpu", "--json", "/nonexistent-folder/bench.json"],
     "argument --json: folder '/nonexistent-folder' of '/nonexistent-folder/bench.json' "
     "does not exist"),
])
def test_bad_arguments_name_the_argument_and_value(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when CUDA is absent")
def test_cuda_requested_without_cuda(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--device", "cuda"])
    assert "argument --device: 'cuda' requested but torch.cuda.is_available() is False" in \
        capsys.readouterr().err


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--sizes", "--shape", "--slices", "--all-pairs-slices", "--repeats",
                   "--samples", "--json", "--markdown", "--device", "--phi", "--seed"):
        assert option in out


def test_nearest_rows_are_correctly_rounded(tiny_run):
    _, report, _ = tiny_run
    nearest = [row for row in report["rows"] if row["method"].endswith("nearest")]
    assert len(nearest) == 2 * len(SHAPES)
    for row in nearest:
        assert row["rounded_share"] == 1.0 and row["vs_default"] > 0, row
