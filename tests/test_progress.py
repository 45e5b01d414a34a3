"""Tests for ozaki.progress: one line per step in a log, an in-place bar on a terminal."""

import io
import itertools
import re
import types

import pytest

from ozaki import progress as progress_module
from ozaki.progress import BAR_WIDTH, Progress


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def ten_seconds_a_step(monkeypatch):
    """perf_counter() returns 0, 10, 20, ... s: the start, then one reading per step."""
    clock = itertools.count(0, 10)
    monkeypatch.setattr(progress_module, "time",
                        types.SimpleNamespace(perf_counter=lambda: next(clock)))


def bar(done, total):
    filled = BAR_WIDTH * done // total
    return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total}"


def test_log_stream_gets_one_line_per_step(ten_seconds_a_step):
    stream = io.StringIO()
    progress = Progress(4, "job", stream)
    for i in range(1, 5):
        progress.step(f"item {i}")
    progress.close()
    assert stream.getvalue().splitlines() == [
        f"job {bar(1, 4)} 0:10 elapsed, ~0:30 left  item 1",
        f"job {bar(2, 4)} 0:20 elapsed, ~0:20 left  item 2",
        f"job {bar(3, 4)} 0:30 elapsed, ~0:10 left  item 3",
        f"job {bar(4, 4)} 0:40 elapsed  item 4",
    ]
    assert stream.getvalue().endswith("\n") and "\r" not in stream.getvalue()


def test_bar_fill_is_proportional_to_the_steps_done():
    stream = io.StringIO()
    progress = Progress(7, stream=stream)
    for _ in range(7):
        progress.step()
    lines = stream.getvalue().splitlines()
    fills = [len(re.match(r"\[(#*)\.*\] ", line).group(1)) for line in lines]
    assert len(fills) == 7 and fills[-1] == BAR_WIDTH
    assert all(abs(fill - BAR_WIDTH * i / 7) < 1 for i, fill in enumerate(fills, 1)), fills


def test_long_runs_show_hours(monkeypatch):
    clock = iter([0, 3725])
    monkeypatch.setattr(progress_module, "time",
                        types.SimpleNamespace(perf_counter=lambda: next(clock)))
    stream = io.StringIO()
    Progress(2, stream=stream).step()
    assert stream.getvalue() == f"{bar(1, 2)} 1:02:05 elapsed, ~1:02:05 left\n"


def test_terminal_redraws_in_place_until_close(ten_seconds_a_step, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    stream = FakeTerminal()
    progress = Progress(3, "job", stream)
    progress.step("a long first message")
    first = stream.getvalue()
    assert first == f"\rjob {bar(1, 3)} 0:10 elapsed, ~0:20 left  a long first message"
    progress.step("short")
    second = stream.getvalue()[len(first):]
    line = f"job {bar(2, 3)} 0:20 elapsed, ~0:10 left  short"
    # padded with spaces so that no character of the longer first line stays visible
    assert second == "\r" + line + " " * (len(first) - 1 - len(line))
    assert "\n" not in stream.getvalue()
    progress.close()
    assert stream.getvalue() == first + second + "\n"
    progress.close()  # a second close adds no empty line
    assert stream.getvalue().count("\n") == 1


def test_terminal_lines_are_cut_to_its_width(monkeypatch):
    # a wrapped line cannot be redrawn in place
    monkeypatch.setenv("COLUMNS", "50")
    stream = FakeTerminal()
    progress = Progress(3, "job", stream)
    progress.step("a message far too long for a terminal of fifty columns")
    assert stream.getvalue().startswith("\rjob [")
    assert len(stream.getvalue()) == 1 + 49


def test_write_puts_a_line_between_steps(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    terminal, log = FakeTerminal(), io.StringIO()
    for stream in (terminal, log):
        progress = Progress(2, "job", stream)
        progress.step("one")
        progress.write("inputs 0.1 s")
        progress.step("two")
        progress.close()
    assert terminal.getvalue().count("\n") == 3
    assert terminal.getvalue().split("\n")[1] == "inputs 0.1 s"
    assert log.getvalue().splitlines()[1] == "inputs 0.1 s"
    quiet = io.StringIO()
    Progress(1, stream=quiet, enabled=False).write("nothing")
    assert quiet.getvalue() == ""


def test_disabled_progress_writes_nothing():
    for stream in (io.StringIO(), FakeTerminal()):
        progress = Progress(2, "job", stream, enabled=False)
        progress.step("one")
        progress.step("two")
        progress.close()
        assert stream.getvalue() == ""
        assert progress.done == 2


@pytest.mark.parametrize("total, shown", [(-1, "-1"), (2.5, "2.5"), ("3", "'3'"), (None, "None"), (True, "True")])
def test_bad_total_raises_naming_the_value(total, shown):
    with pytest.raises(ValueError, match=re.escape(f"total must be an integer >= 0, got {shown}")):
        Progress(total)
