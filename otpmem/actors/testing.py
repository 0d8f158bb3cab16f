"""Test support: a pytest fixture that fails any test leaking threads or processes.

Use it in a conftest.py::

    from otpmem.actors.testing import no_leaks  # noqa: F401  (an autouse fixture)

or call ``assert_no_leaks(baseline)`` yourself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ._node import live_processes, stop_all
from ._process import Process
from ._scheduler import runtime_thread

LEAK_GRACE = 5.0


def snapshot() -> tuple[set[threading.Thread], set[Process]]:
    """The threads and processes alive right now."""
    return set(threading.enumerate()), set(live_processes())


def assert_no_leaks(
    baseline: tuple[set[threading.Thread], set[Process]], grace: float = LEAK_GRACE
) -> None:
    """Fail if processes or threads beyond ``baseline`` are still alive after ``grace`` s.

    Leaked processes are then stopped, so one leaky test does not fail the ones after it.
    """
    threads_before, processes_before = baseline
    deadline = time.monotonic() + grace
    leaked_processes = [p for p in live_processes() if p not in processes_before]
    for process in leaked_processes:
        process.exited.wait(max(0.0, deadline - time.monotonic()))
    leaked_processes = [p for p in leaked_processes if not p.exited.is_set()]
    if leaked_processes:
        stop_all(timeout=1.0)
    leaked_threads = []
    for thread in threading.enumerate():
        if thread in threads_before or thread is threading.current_thread():
            continue
        if runtime_thread(thread):
            continue  # schedulers and the blocking pool live as long as the runtime
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            leaked_threads.append(thread)
    problems = []
    if leaked_processes:
        problems.append(f"processes left running: {leaked_processes}")
    if leaked_threads:
        problems.append(f"threads left running: {[t.name for t in leaked_threads]}")
    if problems:
        pytest.fail("test leaked " + "; ".join(problems), pytrace=False)


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves processes or threads behind (autouse when imported)."""
    baseline = snapshot()
    yield
    assert_no_leaks(baseline)
