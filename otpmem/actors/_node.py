"""The node: every live process, and a clean stop at interpreter exit."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._errors import KILLED, Killed, NotInProcess
from ._scheduler import running_process
from ._signals import Pid

if TYPE_CHECKING:
    from ._process import Process

logger = logging.getLogger("otpmem.actors")

_pid_counter = itertools.count(1)
_hook_lock = threading.Lock()
_hook_installed = False
READY_POLL = 0.01  # how often a reader waiting for init checks whether the process died


class _LiveTable:
    """Every process not yet exited, in start order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[Pid, Process] = {}

    def add(self, process: Process) -> None:
        with self._lock:
            self._live[process.pid] = process

    def remove(self, process: Process) -> None:
        with self._lock:
            self._live.pop(process.pid, None)

    def snapshot(self) -> list[Process]:
        with self._lock:
            return list(self._live.values())


live_table = _LiveTable()


def current() -> Process | None:
    """The process running this code (or whose blocking work this is), or None."""
    process: Process | None = running_process()
    return process


def check_not_killed() -> None:
    """Raise ``Killed`` if the calling code runs for a process that was killed."""
    process = running_process()
    if process is not None and process.killed:
        raise Killed(process)


def calling_process(what: str) -> Process:
    """The process calling ``what`` (link, monitor...); ``NotInProcess`` from a plain thread."""
    process = current()
    if process is None:
        raise NotInProcess(what)
    check_not_killed()
    return process


def on_exit(cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` when the calling server exits, however it exits (kill included).

    Cleanups run newest first, before the process's tables and name are released and
    before anyone is told of the exit: the place to close files and databases.
    """
    process = current()
    if process is None:
        raise NotInProcess("on_exit")
    process.cleanups.append(cleanup)


def live_processes(kind: str | None = None) -> list[Process]:
    """Every process not yet exited, in start order; only those of ``kind`` if given."""
    processes = live_table.snapshot()
    if kind is None:
        return processes
    return [p for p in processes if p.kind == kind]


def install_exit_hook() -> None:
    """Stop every live process when the interpreter exits (once per interpreter)."""
    global _hook_installed
    with _hook_lock:
        if _hook_installed:
            return
        # Plain atexit runs after non-daemon threads are joined, i.e. never
        # (otp_pykka.md §3.1); this hook runs before that join.
        threading._register_atexit(_stop_all_at_exit)  # type: ignore[attr-defined]
        _hook_installed = True


def stop_all(timeout: float = 5.0) -> None:
    """Stop every live process: roots first, newest first, each as a supervisor would."""
    for _ in range(1000):
        procs = live_processes()
        if not procs:
            return
        roots = [p for p in procs if p.parent is None or p.parent.dead]
        for proc in reversed(roots or procs):
            if proc.request_shutdown("shutdown") and proc.exited.wait(timeout):
                continue
            if not proc.exited.is_set():
                proc.kill(KILLED, grace=timeout)


def _stop_all_at_exit() -> None:
    if live_processes():
        logger.info("interpreter exiting: stopping every live process")
        stop_all()
