"""Fault injection for tests: kill and crash servers, or plan faults that outlive a restart.

::

    plan = FaultPlan().crash_on_message(3).fail_init(times=2)
    spec = ChildSpec("worker", start=lambda: Worker.start_link(faults=plan))

The same plan is handed to every incarnation, so "fail init twice" spans restarts, the way
OTP's supervisor_SUITE keeps its failure flags in an ETS table that outlives the child.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._errors import KILLED, CallTimeout, ExitReason, NoProcess, short_repr
from ._signals import CrashRequest, Pid
from ._waits import sleep

if TYPE_CHECKING:
    from ._handle import Handle
    from ._process import Process


HOLD_POLL = 0.002


class InjectedCrash(Exception):
    """The default exception of an injected fault."""


def kill(target: Handle, grace: float | None = 1.0) -> None:
    """Kill ``target`` brutally (reason ``killed``, no ``terminate``); return once it is dead.

    A handler busy for longer than ``grace`` s cannot be interrupted: the process is then
    declared dead from outside and its thread left to finish as a zombie.
    """
    target.resolve().kill(KILLED, grace=grace)


def crash(target: Handle, reason: ExitReason = None, timeout: float | None = 5.0) -> None:
    """Crash ``target`` with ``reason`` after the messages already queued; ``terminate`` runs.

    Returns once it is dead; the default reason is an ``InjectedCrash`` exception.
    """
    process = target.resolve()
    if reason is None:
        reason = InjectedCrash(f"injected crash of {process!r}")
    if not process.send(CrashRequest(reason)):
        raise NoProcess(target)
    if not process.exited.wait(timeout):
        raise CallTimeout(target, timeout, what="crash")


def inject(target: Handle, plan: FaultPlan) -> None:
    """Attach ``plan`` to a running server; it applies from its next message on."""
    target.resolve().faults = plan


@dataclass
class _Rule:
    kind: str
    times: int | None  # None: every time
    exc: BaseException | None = None
    nth: int = 0
    predicate: Callable[[Any], bool] | None = None
    seconds: float = 0.0
    release: threading.Event | None = None


@dataclass
class FaultPlan:
    """Faults to inject into every incarnation of a server; thread-safe, shared on purpose.

    Each method returns the plan, so rules chain. ``fired`` records what fired, in order,
    as ``(kind, pid)`` pairs.
    """

    _rules: list[_Rule] = field(default_factory=list)
    _seen: dict[Pid, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    fired: list[tuple[str, Pid]] = field(default_factory=list)

    def crash_on_message(
        self, n: int, *, exc: BaseException | None = None, times: int | None = 1
    ) -> FaultPlan:
        """Crash on the ``n``-th message (call, cast or info) of an incarnation."""
        if n < 1:
            raise ValueError(f"crash_on_message: n must be >= 1, got {n}")
        return self._add(_Rule("crash_on_message", times, exc, nth=n))

    def crash_when(
        self,
        predicate: Callable[[Any], bool],
        *,
        exc: BaseException | None = None,
        times: int | None = 1,
    ) -> FaultPlan:
        """Crash on a message for which ``predicate(message)`` is true."""
        return self._add(_Rule("crash_when", times, exc, predicate=predicate))

    def hold_when(
        self,
        predicate: Callable[[Any], bool],
        release: threading.Event,
        *,
        timeout: float = 10.0,
        times: int | None = 1,
    ) -> FaultPlan:
        """Hold the server on a message matching ``predicate`` until ``release`` is set.

        A busy server, made on purpose: for testing what must not queue behind it. The hold
        ends after ``timeout`` s, or when the server is killed.
        """
        return self._add(
            _Rule("hold_when", times, predicate=predicate, seconds=timeout, release=release)
        )

    def fail_init(self, times: int | None = 1, *, exc: BaseException | None = None) -> FaultPlan:
        """Make ``init`` raise, ``times`` times (None: always)."""
        return self._add(_Rule("fail_init", times, exc))

    def slow_init(self, seconds: float, *, times: int | None = None) -> FaultPlan:
        """Delay ``init`` by ``seconds`` (cut short if the process is killed meanwhile)."""
        return self._add(_Rule("slow_init", times, seconds=seconds))

    def slow_terminate(self, seconds: float, *, times: int | None = None) -> FaultPlan:
        """Delay ``terminate`` by ``seconds``: exercises shutdown timeouts and the kill path."""
        return self._add(_Rule("slow_terminate", times, seconds=seconds))

    def count(self, kind: str) -> int:
        """How many times rules of ``kind`` fired."""
        with self._lock:
            return sum(1 for k, _ in self.fired if k == kind)

    def _add(self, rule: _Rule) -> FaultPlan:
        with self._lock:
            self._rules.append(rule)
        return self

    def _take(self, process: Process, kinds: tuple[str, ...], message: Any = None) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.kind not in kinds or rule.times == 0:
                    continue
                if rule.kind == "crash_on_message" and self._seen.get(process.pid) != rule.nth:
                    continue
                if rule.predicate is not None and not rule.predicate(message):
                    continue
                if rule.times is not None:
                    rule.times -= 1
                self.fired.append((rule.kind, process.pid))
                return rule
        return None

    def _before_init(self, process: Process) -> None:
        slow = self._take(process, ("slow_init",))
        if slow is not None:
            process.kill_event.wait(slow.seconds)
        failing = self._take(process, ("fail_init",))
        if failing is not None:
            raise failing.exc or InjectedCrash(f"injected init failure of {process!r}")

    def _before_message(self, process: Process, message: Any) -> None:
        with self._lock:
            self._seen[process.pid] = self._seen.get(process.pid, 0) + 1
        hold = self._take(process, ("hold_when",), message)
        if hold is not None and hold.release is not None:
            deadline = time.monotonic() + hold.seconds
            # The release is a plain threading.Event: poll it with the runtime's sleep so the
            # held process suspends instead of holding its scheduler thread.
            while not hold.release.is_set():
                if process.kill_event.is_set() or time.monotonic() > deadline:
                    break
                sleep(HOLD_POLL)
        rule = self._take(process, ("crash_on_message", "crash_when"), message)
        if rule is not None:
            raise rule.exc or InjectedCrash(
                f"injected {rule.kind} in {process!r}: {short_repr(message)}"
            )

    def _before_terminate(self, process: Process) -> None:
        slow = self._take(process, ("slow_terminate",))
        if slow is not None:
            process.kill_event.wait(slow.seconds)
