"""Tests for the developer scripts' command lines (scripts/*.py): arguments refused by name before
any work, with ozaki.cli's checks, and what the scripts record. Their GPU measurements are stubbed
where a test needs them: only the scripts' own logic runs."""

import json

import pytest
import torch

from helpers import assert_usage_error, load_script
from ozaki import bench

programs_bench = load_script("programs_bench")
wide_span_bench = load_script("wide_span_bench")
batched_bench = load_script("batched_bench")
planner_table = load_script("planner_table")


def test_programs_bench_takes_every_generator_seed(capsys):
    """--seed takes what torch.Generator.manual_seed takes, up to 2^64 - 1, whose right-hand
    sides draw from another seed without overflowing it."""
    largest = 2 ** 64 - 1
    assert programs_bench.parse_args(["--device", "cpu", "--seed", str(largest)]).seed == largest
    assert programs_bench.right_hand_sides(4, 2, largest, torch.device("cpu")).shape == (4, 2)
    assert not torch.equal(programs_bench.right_hand_sides(4, 2, 0, torch.device("cpu")),
                           programs_bench.right_hand_sides(4, 2, largest, torch.device("cpu")))
    assert_usage_error(programs_bench.parse_args, ["--device", "cpu", "--seed", str(2 ** 64)],
                       "argument --seed: must be an integer in 0..2^64 - 1", capsys)


@pytest.mark.parametrize("argv, message", [
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got '0'"),
    (["--sizes", "0"], "argument --sizes: must be a positive integer, got '0'"),
    (["--sizes", "-5"], "argument --sizes: must be a positive integer, got '-5'"),
    (["--parts", "fixed", "--sizes", "4194304"],
     "argument --sizes: 4194304 x 4194304 float64 A, B and C = A @ B need "),
])
def test_wide_span_bench_refuses_bad_arguments(argv, message, capsys):
    assert_usage_error(wide_span_bench.parse_args, ["--device", "cpu", *argv], message, capsys)


def test_wide_span_bench_refuses_an_out_that_is_a_file_before_measuring(tmp_path, capsys):
    plain = tmp_path / "wide_spans.json"
    plain.write_text("")
    assert_usage_error(wide_span_bench.parse_args, ["--device", "cpu", "--out", str(plain)],
                       f"argument --out: {str(plain)!r} is a file, expected a folder", capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when CUDA is absent")
def test_wide_span_bench_default_device_without_cuda(capsys):
    assert_usage_error(wide_span_bench.parse_args, [], "argument --device: 'cuda' requested but "
                       "torch.cuda.is_available() is False", capsys)


def test_wide_span_bench_names_the_gpu_of_cuda_index(monkeypatch, tmp_path):
    """--device cuda:0 is a GPU as --device cuda is: the JSON names it and the large cases run."""
    monkeypatch.setattr(wide_span_bench, "resolve_device",
                        lambda parser, text: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *device: "NVIDIA (simulated)")
    monkeypatch.setattr(wide_span_bench, "wide_rows",
                        lambda repeats, g, large: [{"large": large}])
    monkeypatch.setattr(wide_span_bench, "fixed_count_rows", lambda repeats, g, sizes: [])
    wide_span_bench.main(["--device", "cuda:0", "--parts", "wide", "--out", str(tmp_path)])
    recorded = json.loads((tmp_path / "wide_spans.json").read_text())
    assert recorded["device"] == "NVIDIA (simulated)" and recorded["wide"] == [{"large": True}]


@pytest.mark.parametrize("argv, message", [
    (["--reps", "0"], "argument --reps: must be a positive integer, got '0'"),
    (["--reps", "-3"], "argument --reps: must be a positive integer, got '-3'"),
    (["--out", "/nonexistent-folder"], "argument --out: folder '/nonexistent-folder' of "
                                       "'/nonexistent-folder/batched.json' does not exist"),
])
def test_batched_bench_refuses_bad_arguments(argv, message, capsys):
    assert_usage_error(batched_bench.main, argv, message, capsys)


def test_batched_bench_times_every_column_with_reps(monkeypatch, tmp_path, capsys):
    """Every time, the loop of ozaki.dgemm's included, is the median of --reps runs, as
    docs/benchmarks.md says (its CUDA calls run on the CPU here)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *device: "simulated")
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)
    monkeypatch.setattr(batched_bench, "CASES", [(torch.float64, 2, 8)])
    asked = []

    def on_the_cpu(fn, device, warmup, repeats):
        asked.append(repeats)
        return bench.time_call(fn, torch.device("cpu"), warmup, repeats)

    monkeypatch.setattr(batched_bench, "time_call", on_the_cpu)
    batched_bench.main(["--reps", "3", "--out", str(tmp_path)])
    assert asked == [3, 3, 3]  # native, ozaki.matmul, the loop
    assert json.loads((tmp_path / "batched.json").read_text())["rows"][0]["loop_bits_equal"]
    capsys.readouterr()


@pytest.mark.parametrize("argv, message", [
    (["--size", "0"], "argument --size: must be a positive integer, got '0'"),
    (["--ks", "0"], "argument --ks: must be a positive integer, got '0'"),
    (["--ks", "5000000"], "argument --ks: k must be at most 2^22 = 4194304"),
    (["--phis", "-1"], "argument --phis: must be a finite number >= 0, got '-1'"),
    (["--phis", "nan"], "argument --phis: must be a finite number >= 0, got 'nan'"),
    (["--phis", "1000"], "argument --phis: 1000 is too large: the 64 x 16 x 64 inputs"),
    (["--seed", "-1"], "argument --seed: must be an integer in 0..2^64 - 1"),
    (["--backends", "99"], "argument --backends: k = 99 is not among --ks (16), whose draws the "
                           "table shows"),
])
def test_planner_table_refuses_bad_arguments(argv, message, capsys):
    assert_usage_error(planner_table.parse_args, ["--ks", "16", "--phis", "1", *argv], message,
                       capsys)


def test_planner_table_prints_the_plans_of_the_ks_asked_for(capsys):
    planner_table.main(["--ks", "16", "17", "--phis", "1", "--backends", "17"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 1 and rows[0].startswith("| 1 | 17 |")
