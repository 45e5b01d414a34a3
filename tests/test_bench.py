"""Tests for ozaki.bench: a tiny CPU run end to end, the row arithmetic, the row selection
(--dtype, --modes, --backends), the progress bar, OOM rows and argument errors. Timings are
measured but never asserted on."""

import json
import math
import subprocess
import sys

import pytest
import torch

from helpers import assert_usage_error
from ozaki import bench
from ozaki.progress import BAR_WIDTH

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
                 + [("ozaki sgemm", True, None, None), ("ozaki plan", True, None, None),
                    ("ozaki sgemm nearest", True, None, None)])
#: The shapes of the in-process runs of run_tiny (--sizes 16 24).
TINY_SHAPES = [(16, 16, 16), (24, 24, 24)]
TINY = ["--device", "cpu", "--sizes", "16", "24", "--repeats", "1", "--warmup", "0",
        "--samples", "4"]
NATIVES_AND_FLOOR = [("native dgemm", False, None, None), ("native sgemm", False, None, None),
                     ("fp16 gemm (floor unit)", False, None, None)]


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


def row_keys(report, shape):
    """(method, default, slices requested, fast requested) of the shape's rows, in order."""
    return [(r["method"], r["default"], r["slices_requested"], r["fast_requested"])
            for r in rows_of(report, shape)]


def run_tiny(capsys, tmp_path, *options):
    """bench.main in this process at sizes 16 and 24 with `options`: (JSON report, stdout,
    stderr)."""
    json_path = tmp_path / "bench.json"
    assert bench.main([*TINY, "--json", str(json_path), *options]) == 0
    captured = capsys.readouterr()
    return json.loads(json_path.read_text()), captured.out, captured.err


def table_lines(stdout):
    """The body of the final table: the lines between its rule and the blank line after it."""
    lines = stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line) == {"-", " "})
    return lines[rule + 1:lines.index("", rule)]


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
    assert meta["dtypes"] == ["float64", "float32"]
    assert meta["modes"] == list(bench.MODES)
    assert meta["backends"] == ["fp16"]


def test_rows_in_order_for_every_shape(tiny_run):
    _, report, _ = tiny_run
    assert len(report["rows"]) == len(SHAPES) * len(EXPECTED_ROWS)
    for shape in SHAPES:
        assert row_keys(report, shape) == EXPECTED_ROWS
        for row in rows_of(report, shape):
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
        plans = rows_of(report, shape, "ozaki plan")
        assert [plan["dtype"] for plan in plans] == ["float64", "float32"]
        for plan, method in zip(plans, ("ozaki dgemm", "ozaki sgemm")):
            default = default_row(report, shape, method)
            assert (plan["slices"], plan["fast"]) == (default["slices"], default["fast"])
            assert plan["share_of_default"] == pytest.approx(plan["time_ms"] / default["time_ms"])


def test_stdout_stderr_and_markdown(tiny_run):
    process, report, markdown = tiny_run
    total = len(report["rows"])
    progress = [line for line in process.stderr.splitlines() if line.startswith("bench [")]
    assert len(progress) == total
    first = report["rows"][0]
    assert f"] 1/{total} " in progress[0] and progress[0].endswith(
        f"  n=32 native dgemm ... {bench._time(first['time_ms'])} ms "
        f"(max rel err {bench._error(first['max_rel_err'])})")
    assert f"] {total}/{total} " in progress[-1]
    assert "  m x k x n = 24x40x16 ozaki sgemm nearest default ... " in progress[-1]
    assert [line.split(":")[0] for line in process.stderr.splitlines()
            if ": inputs " in line] == ["32", "48", "24x40x16"]
    assert "bench [" not in process.stdout and ": inputs " not in process.stdout
    table_header = [line for line in process.stdout.splitlines()
                    if line.split()[:3] == ["n", "method", "backend"]]
    assert len(table_header) == 1 and "of floor" in table_header[0]
    assert len(table_lines(process.stdout)) == total
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
    (["--sgemm-slices", "3", "x"], "argument --sgemm-slices: slice counts must be integers in "
                                   "1..40, got 'x'"),
    (["--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["--modes", "default", "fast"], "argument --modes: invalid choice: 'fast'"),
    (["--backends", "int8"], "argument --backends: invalid choice: 'int8'"),
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
    assert_usage_error(bench.main, argv, message, capsys)


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
                   "--samples", "--json", "--markdown", "--device", "--phi", "--seed", "--dtype",
                   "--modes", "--backends", "--sgemm-slices", "--quiet", *bench.MODES):
        assert option in out


@pytest.mark.parametrize("option, available", [("--dtype", bench.DTYPES),
                                                ("--modes", bench.MODES),
                                                ("--backends", bench.BACKENDS)])
def test_unknown_choice_lists_the_available_ones(option, available, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([option, "unknown"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: invalid choice: 'unknown' (choose from " in err
    listed = err.split("choose from", 1)[1]
    assert all(name in listed for name in available)


def test_nearest_rows_are_correctly_rounded(tiny_run):
    _, report, _ = tiny_run
    nearest = [row for row in report["rows"] if row["method"].endswith("nearest")]
    assert len(nearest) == 2 * len(SHAPES)
    for row in nearest:
        assert row["rounded_share"] == 1.0 and row["vs_default"] > 0, row


def test_dtype_float32_measures_only_the_sgemm_rows(capsys, tmp_path):
    report, stdout, _ = run_tiny(capsys, tmp_path, "--dtype", "float32")
    assert report["meta"]["dtypes"] == ["float32"]
    for shape in TINY_SHAPES:
        assert row_keys(report, shape) == [
            ("native sgemm", False, None, None), ("fp16 gemm (floor unit)", False, None, None),
            ("ozaki sgemm", True, None, None), ("ozaki plan", True, None, None),
            ("ozaki sgemm nearest", True, None, None)]
        rows = rows_of(report, shape)
        assert {row["dtype"] for row in rows if row["kind"] != "floor_unit"} == {"float32"}
        assert rows[3]["share_of_default"] == pytest.approx(rows[3]["time_ms"] / rows[2]["time_ms"])
        assert rows[4]["vs_default"] == pytest.approx(rows[4]["time_ms"] / rows[2]["time_ms"])
        assert rows[4]["rounded_share"] == 1.0
    assert "(float32 copies for sgemm)" in stdout


def test_references_only_for_the_selected_dtypes():
    args = bench.parse_args([*TINY, "--dtype", "float64"])
    run = bench.prepare_shape((16, 16, 16), args, bench.FLOOR_FP16_OUT)
    assert set(run.operands) == set(run.references) == {torch.float64}
    meta = bench.run_metadata(args, [], bench.FLOOR_FP16_OUT)
    assert "float32 copies" not in bench.describe_run(meta)


@pytest.mark.parametrize("modes, ozaki_rows, no_ratio", [
    (["nearest"], [("ozaki dgemm nearest", True, None, None),
                   ("ozaki sgemm nearest", True, None, None)], "vs_default"),
    (["plan"], [("ozaki plan", True, None, None)] * 2, "share_of_default"),
    # given in any order, the default row still comes before the rows compared with it
    (["all-pairs", "auto", "nearest", "default"],
     [("ozaki dgemm", True, None, None), ("ozaki dgemm nearest", True, None, None),
      ("ozaki dgemm", False, None, True), ("ozaki dgemm", False, 3, False),
      ("ozaki sgemm", True, None, None), ("ozaki sgemm nearest", True, None, None)], None),
])
def test_modes_select_the_ozaki_rows(modes, ozaki_rows, no_ratio, capsys, tmp_path):
    report, stdout, _ = run_tiny(capsys, tmp_path, "--modes", *modes, "--all-pairs-slices", "3")
    assert report["meta"]["modes"] == [mode for mode in bench.MODES if mode in modes]
    for shape in TINY_SHAPES:
        assert row_keys(report, shape) == NATIVES_AND_FLOOR + ozaki_rows
    ozaki = [row for row in report["rows"] if row["kind"] in ("ozaki", "plan")]
    assert all(row["status"] == "ok" and row["time_ms"] > 0 for row in ozaki)
    if no_ratio:  # without the default row there is nothing to compare with
        assert not any(no_ratio in row for row in ozaki)
        x_default = [header for header, _, _ in bench.COLUMNS].index("x default")
        assert all(bench.COLUMNS[x_default][1](row) == "" for row in report["rows"])
    else:
        assert all(row["vs_default"] > 0 for row in ozaki if not row["default"]
                   or row["method"].endswith("nearest"))
    assert len(table_lines(stdout)) == len(report["rows"])


def test_sgemm_slices_in_fixed_mode(capsys, tmp_path):
    report, _, _ = run_tiny(capsys, tmp_path, "--sgemm-slices", "3", "--modes", "fixed",
                            "--dtype", "float32")
    for shape in TINY_SHAPES:
        native, unit, row = rows_of(report, shape)
        assert (native["method"], unit["kind"]) == ("native sgemm", "floor_unit")
        assert (row["method"], row["dtype"], row["default"]) == ("ozaki sgemm", "float32", False)
        assert (row["slices_requested"], row["slices"], row["fast"]) == (3, 3, True)
        assert row["gemms"] == 6  # 3 * 4 / 2 slice pairs in fast mode
        assert "vs_default" not in row and row["max_rel_err"] >= 0


def test_progress_bar_one_line_per_row_on_stderr(capsys, tmp_path):
    report, stdout, stderr = run_tiny(capsys, tmp_path, "--modes", "default", "fixed",
                                      "--slices", "3")
    total = len(report["rows"])
    assert total == 2 * 6  # per shape: 2 natives, the floor unit, dgemm default and s=3, sgemm
    lines = stderr.splitlines()
    bars = [line for line in lines if line.startswith("bench [")]
    assert len(bars) == total
    for index, (line, row) in enumerate(zip(bars, report["rows"]), 1):
        filled = len(line[len("bench ["):line.index("]")].rstrip("."))
        assert line.startswith(f"bench [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                               f"{index}/{total} ")
        assert abs(filled - BAR_WIDTH * index / total) < 1
        assert f"  n={row['shape']} {row['method']}" in line
        assert ("left" in line) == (index < total)
    assert lines[0].startswith("16: inputs ") and lines[1 + total // 2].startswith("24: inputs ")
    assert len(lines) == total + 2
    assert "bench [" not in stdout and len(table_lines(stdout)) == total


def test_quiet_leaves_stderr_empty_and_the_table_on_stdout(capsys, tmp_path):
    report, stdout, stderr = run_tiny(capsys, tmp_path, "--quiet", "--modes", "default")
    assert stderr == ""
    assert len(report["rows"]) == 2 * 5
    assert len(table_lines(stdout)) == len(report["rows"])
    assert "Floor unit:" in stdout


def test_rows_name_their_backend(tiny_run):
    _, report, markdown = tiny_run
    assert [header for header, _, _ in bench.COLUMNS][1:3] == ["method", "backend"]
    table = [line for line in markdown.splitlines() if line.startswith("|")][2:]
    for line, row in zip(table, report["rows"], strict=True):
        ozaki_call = row["kind"] in ("ozaki", "plan")
        assert row["backend"] == ("fp16" if ozaki_call else None), row
        assert line.split("|")[3].strip() == ("fp16" if ozaki_call else "-")


def test_plot_writes_the_throughput_figure(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "throughput.png"
    assert bench.main([*TINY, "--dtype", "float64", "--modes", "default", "--quiet", "--plot",
                       str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv,message", [
    (["--plot", "figure.txt"], "argument --plot: expected a file ending in .png, .pdf, .svg"),
    (["--shape", "4", "5", "6", "--plot", "figure.png"],
     "argument --plot: the throughput figure needs square shapes (--sizes)"),
])
def test_bad_plot_arguments(argv, message, capsys):
    assert_usage_error(bench.parse_args, ["--device", "cpu", *argv], message, capsys)

