"""What one extraction reports, and the claim that keeps two extractions of one
conversation from overlapping in this process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ...actors import Event
from ...messages import Conv
from ...stores import Fact
from .extractors import Decision


class ExtractionBusy(RuntimeError):
    """Another extraction of the conversation did not finish within the timeout."""


@dataclass
class ExtractionReport:
    """What one ``extract`` did: messages ``start..end`` processed (the cursor is now
    ``end``), the facts saved, keys deleted or confirmed, new keys refused at the cap,
    unusable decisions skipped, and the error that changed nothing, if any; ``raced``: another
    extractor moved the cursor first, so this one saved nothing and reads it again."""

    conv: Conv
    start: int = 0
    end: int = 0
    saved: list[Fact] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    skipped: list[Decision] = field(default_factory=list)
    error: str | None = None
    queued: bool = False
    raced: bool = False

    @property
    def ok(self) -> bool:
        """True when nothing went wrong (a queued extraction has not run yet)."""
        return self.error is None

    @property
    def processed(self) -> int:
        """How many messages this extraction moved the cursor over."""
        return self.end - self.start


class Claims:
    """One extraction per conversation at a time in this process: two that overlapped
    would read one cursor and could move it back (a repeat). Waits suspend a process,
    never its scheduler thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Conv, list[Event]] = {}

    @contextmanager
    def hold(self, conv: Conv, timeout: float) -> Iterator[None]:
        """Hold ``conv`` for the block; ``ExtractionBusy`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                waiters = self._held.get(conv)
                if waiters is None:
                    self._held[conv] = []
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ExtractionBusy(f"another extraction of {conv} is still running")
                freed = Event()
                waiters.append(freed)
            freed.wait(remaining)
        try:
            yield
        finally:
            with self._lock:
                for freed in self._held.pop(conv, []):
                    freed.set()


def merged(first: ExtractionReport, then: ExtractionReport) -> ExtractionReport:
    """One report of two batches in a row: the first's start, the second's end and error."""
    return ExtractionReport(
        first.conv,
        first.start,
        then.end if then.processed else first.end,
        [*first.saved, *then.saved],
        [*first.deleted, *then.deleted],
        [*first.unchanged, *then.unchanged],
        [*first.refused, *then.refused],
        [*first.skipped, *then.skipped],
        then.error,
    )
