"""How a run's faults are injected, so that a schedule gives the same faults and the same
restarts at any number of workers.

Each fault of the schedule is injected at its point (after an agent acknowledged a turn),
into a live incarnation of its target, and only one fault at a time hits a target (a lock
per target). A fault that finds its target down (still restarting after the fault before)
waits for the next incarnation rather than counting a fault that broke nothing, and two
faults never land on one dying incarnation: so every kill and crash costs exactly one
restart. A crash-on-message plan is handed to its agent with the call it crashes on (its
next turn), under the same lock: a kill of that agent from another worker cannot take the
plan with it unfired.

What stays timing-dependent is where in another worker's turn a store or agent fault lands:
how many turn attempts it breaks (the report's ``turn retries``), never what is stored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from ..actors import CallTimeout, Handle, NoProcess, faults
from ..actors.faults import FaultPlan
from ..agents import AgentHandle
from ..stores import default_store
from ._conventions import Stopped, agent_name
from ._schedule import CRASH_PLAN, CRASH_STORE, KILL_AGENT, KILL_STORE, Fault

T = TypeVar("T")
FAULT_TIMEOUT = 30.0
"""How long a fault waits for its target to be back, or a crash to be done: a target that
a supervisor does not restart within it is an error of the run, not a skipped fault."""
WAKE = 0.05


class ChaosStuck(RuntimeError):
    """A fault's target did not come back (or did not crash) within ``FAULT_TIMEOUT``."""


class Chaos:
    """Injects faults into the store and the agents of a run of ``agents`` agents::

    chaos = Chaos(agents=20, stopping=event)
    chaos.inject(fault, victim=7)            # kills, crashes; or plans a crash of agent 7
    chaos.attempt(7, agent, lambda: ...)     # a turn attempt, carrying a planned crash
    chaos.tree_changed()                     # from a supervisor listener: wake the waits
    """

    def __init__(
        self, agents: int, stopping: threading.Event, timeout: float = FAULT_TIMEOUT
    ) -> None:
        self.stopping = stopping
        self.timeout = timeout
        self._store_lock = threading.Lock()
        self._agent_locks = [threading.Lock() for _ in range(agents)]
        self._planned: set[int] = set()
        self._guard = threading.Lock()
        self._changed = threading.Condition()

    def tree_changed(self) -> None:
        """A supervisor reported (a restart, most often): a waiting fault looks again."""
        with self._changed:
            self._changed.notify_all()

    def inject(self, fault: Fault, victim: int | None) -> None:
        """Inject ``fault`` into the store, or into agent ``victim``; return once it hit
        (a kill or crash: the incarnation is dead) or, for a crash plan, once it is planned."""
        if fault.kind == CRASH_PLAN:
            assert victim is not None
            with self._guard:
                self._planned.add(victim)
            return
        if fault.kind in (KILL_STORE, CRASH_STORE):
            with self._store_lock:
                self._hit(default_store(), fault.kind, "the store")
            return
        assert fault.kind == KILL_AGENT and victim is not None
        with self._agent_locks[victim]:
            self._hit(AgentHandle.named(agent_name(victim)), fault.kind, f"agent {victim}")

    def attempt(self, i: int, agent: AgentHandle, run: Callable[[], T]) -> T:
        """``run()``, one attempt at agent ``i``'s turn; a crash planned for the agent goes
        in with it, so the attempt's call is the message it crashes on."""
        with self._guard:
            planned = i in self._planned
        if not planned:
            return run()
        with self._agent_locks[i]:
            self.wait_live(agent, f"agent {i}", time.monotonic() + self.timeout)
            plan = FaultPlan().crash_on_message(1)
            try:
                faults.inject(agent, plan)
                return run()
            finally:
                if plan.count("crash_on_message"):
                    with self._guard:
                        self._planned.discard(i)

    def _hit(self, target: Handle, kind: str, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            self.wait_live(target, what, deadline)
            try:
                if kind in (KILL_STORE, KILL_AGENT):
                    faults.kill(target)
                else:
                    faults.crash(
                        target, RuntimeError("chaos"), max(0.1, deadline - time.monotonic())
                    )
                return
            except NoProcess:
                continue  # it went between the look and the hit: the next one is the target
            except CallTimeout:
                raise ChaosStuck(
                    f"chaos: {what} did not crash within {self.timeout:.0f} s of being asked"
                ) from None

    def wait_live(self, target: Handle, what: str, deadline: float) -> None:
        """Return once ``target`` is up (its supervisor restarts it) and its ``init`` done;
        ``Stopped`` if the run stops meanwhile, ``ChaosStuck`` past ``deadline``."""
        while not _ready(target):
            if self.stopping.is_set():
                raise Stopped
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChaosStuck(
                    f"chaos: {what} was not restarted within {self.timeout:.0f} s of its last "
                    "fault, so the next one cannot hit it"
                )
            with self._changed:
                # The restart's event may come before the name is taken: look again soon.
                self._changed.wait(min(WAKE, left))


def _ready(target: Handle) -> bool:
    """Whether ``target`` names a process whose ``init`` is done: a kill in the middle of
    one fails that restart, and the supervisor's next attempt answers two faults at once."""
    process = target.process_or_none()
    return process is not None and not process.dead and process.ready.is_set()


__all__ = ["FAULT_TIMEOUT", "Chaos", "ChaosStuck"]
