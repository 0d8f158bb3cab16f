"""The simulation's progress on stderr: a Rich bar on a terminal; in a log (a pipe, a file,
CI) plain lines now and then, never ``\\r`` frames. Both count this run's turns over the
wall time since the run started, as the report's throughput does."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Protocol

from .output import errors

LINE_EVERY = 10.0  # seconds between two progress lines in a log, at most
LINE_STEPS = 10  # and one line per tenth of the turns


class Progress(Protocol):
    """What the simulate command tells about the run as it goes."""

    def start(self, done: int, planned: int) -> None:
        """The store is open: ``done`` of ``planned`` turns are in the ledger already."""

    def advance(self, turns: int) -> None:
        """``turns`` more turns were acknowledged."""

    def close(self) -> None:
        """The run is over (or failed): draw the last state, stop drawing."""


class NoProgress:
    """``--no-progress`` and ``--json``: nothing."""

    def start(self, done: int, planned: int) -> None:
        """Nothing to draw."""

    def advance(self, turns: int) -> None:
        """Nothing to draw."""

    def close(self) -> None:
        """Nothing to draw."""


def _rate(turns: int, since: float) -> float:
    elapsed = time.monotonic() - since
    return turns / elapsed if elapsed > 0 else 0.0


class LineProgress:
    """``simulating: 40/200 turns (20%), 35.2 turns/s, 1.1 s``, a line at a time."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self._lock = threading.Lock()
        self.done = self.initial = self.planned = 0
        self._next_count = 0
        self._next_time = 0.0
        self._started = False

    def _print(self, final: bool = False) -> None:
        share = 100 * self.done // self.planned if self.planned else 100
        rate = _rate(self.done - self.initial, self.t0)
        elapsed = time.monotonic() - self.t0
        text = (
            f"simulating: {self.done}/{self.planned} turns ({share}%), "
            f"{rate:.1f} turns/s, {elapsed:.2f} s"
        )
        if final:
            text += " (done)" if self.done == self.planned else " (stopped)"
        errors().print(text, markup=False, soft_wrap=True)

    def _schedule(self) -> None:
        step = max(1, math.ceil((self.planned - self.initial) / LINE_STEPS))
        self._next_count = self.done + step
        self._next_time = time.monotonic() + LINE_EVERY

    def start(self, done: int, planned: int) -> None:
        """Print the first line: where the run starts."""
        with self._lock:
            self.done = self.initial = done
            self.planned = planned
            self._started = True
            self._print()
            self._schedule()

    def advance(self, turns: int) -> None:
        """Count; print when a tenth more is done or ``LINE_EVERY`` s have passed."""
        with self._lock:
            self.done += turns
            if self.done >= self._next_count or time.monotonic() >= self._next_time:
                if self.done < self.planned:
                    self._print()
                self._schedule()

    def close(self) -> None:
        """The last line, once."""
        with self._lock:
            if self._started:
                self._print(final=True)
                self._started = False


class TerminalProgress:
    """A Rich progress bar on stderr: turns, this run's rate, elapsed, time left."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self._bar: Any = None
        self._task: Any = None
        self._initial = 0

    def start(self, done: int, planned: int) -> None:
        """Draw the bar, already at ``done``."""
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        t0, self._initial = self.t0, done

        class Rate(TextColumn):
            def render(self, task: Any) -> Any:
                from rich.text import Text

                return Text(f"{_rate(int(task.completed) - done, t0):.1f} turns/s")

        self._bar = Progress(
            TextColumn("simulating"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("turns"),
            Rate(""),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("left"),
            console=errors(),
        )
        self._task = self._bar.add_task("simulating", total=planned, completed=done)
        self._bar.start()

    def advance(self, turns: int) -> None:
        """Move the bar."""
        if self._bar is not None:
            self._bar.advance(self._task, turns)

    def close(self) -> None:
        """Leave the last frame on screen."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def make_progress(enabled: bool, t0: float) -> Progress:
    """The right progress for stderr: a bar on a terminal, lines in a log, or none."""
    if not enabled:
        return NoProgress()
    if errors().is_terminal:
        return TerminalProgress(t0)
    return LineProgress(t0)


__all__ = ["LineProgress", "NoProgress", "Progress", "TerminalProgress", "make_progress"]
