"""A text progress bar for the long-running command-line tools (bench, study).

On a terminal the bar is redrawn in place; in a log file (not a TTY) every step is one line, so a
log shows what was measured and when. The bar goes to stderr so stdout stays the tool's table.
"""

import shutil
import sys
import time

BAR_WIDTH = 24


def _duration(seconds):
    seconds = int(round(seconds))
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Progress:
    """`total` steps; `step(message)` after each one.

        progress = Progress(12, "bench")
        for item in work:
            ...
            progress.step(f"n=4096 ozaki dgemm default ... 11.2 ms")
        progress.close()
    """

    def __init__(self, total, label="", stream=None, enabled=True):
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError(f"Progress: total must be an integer >= 0, got {total!r}")
        self.total = total
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.done = 0
        self.started = time.perf_counter()
        isatty = getattr(self.stream, "isatty", None)
        self.in_place = bool(isatty and isatty())
        self._width = 0  # characters of the last in-place line (to blank it when shorter)

    def bar(self):
        """`label [#######.........] 7/20 0:41 elapsed, ~1:10 left`."""
        filled = BAR_WIDTH * self.done // self.total if self.total else BAR_WIDTH
        elapsed = time.perf_counter() - self.started
        text = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.total} " \
               f"{_duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            text += f", ~{_duration(elapsed / self.done * (self.total - self.done))} left"
        return f"{self.label} {text}" if self.label else text

    def step(self, message=""):
        self.done = min(self.done + 1, self.total)
        if not self.enabled:
            return
        line = self.bar() + (f"  {message}" if message else "")
        if self.in_place:
            # a wrapped line cannot be redrawn with a carriage return: cut it to the terminal
            line = line[:max(20, shutil.get_terminal_size().columns - 1)]
            padding = " " * max(0, self._width - len(line))
            self.stream.write("\r" + line + padding)
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def write(self, line):
        """A line of its own between steps (the bar is redrawn below it on the next step)."""
        if not self.enabled:
            return
        self.close()
        self.stream.write(line + "\n")
        self.stream.flush()

    def close(self):
        if self.enabled and self.in_place and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
