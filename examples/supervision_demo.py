"""Supervision in one screen: a tree of workers, crashes injected, restarts observed.

Run with ``make demo``. Each line shows what the supervisor reported, so you can watch
OTP's rules at work: one_for_one restarts only the crashed worker, rest_for_one restarts
the crashed worker and everything started after it, and too many crashes too fast make
the supervisor give up and exit with ``shutdown``.
"""

from __future__ import annotations

import threading
from typing import Any

from otpmem.actors import GenServer, NoProcess, ServerExited, faults
from otpmem.supervisors import ChildSpec, Supervisor, SupervisorEvent


class Counter(GenServer):
    """A worker that counts the calls it answered in this incarnation."""

    def init(self, label: str) -> None:
        self.label = label
        self.count = 0

    def handle_call(self, message: Any) -> Any:
        self.count += 1
        return f"{self.label} (pid {self.pid}) answered {self.count} call(s)"


def report(event: SupervisorEvent) -> None:
    """Print a supervisor event as it happens."""
    reason = "" if event.reason is None else f" reason={event.reason!r}"
    child = "" if event.child_id is None else f" {event.child_id}"
    print(f"  [{event.supervisor}] {event.kind}{child}{reason}")


def spec(label: str) -> ChildSpec:
    """A permanent Counter child."""
    return ChildSpec(label, start=lambda: Counter.start_link(label))


def main() -> None:
    """Run the three scenes."""
    print("1. one_for_one: kill 'b', only 'b' comes back")
    sup = Supervisor.start_link(
        [spec("a"), spec("b"), spec("c")], intensity=3, period=5.0, name="demo", listeners=[report]
    )
    before = {c.id: c.pid for c in sup.which_children()}
    faults.kill(sup.child("b"))
    sup.sync()
    after = {c.id: c.pid for c in sup.which_children()}
    for child_id in before:
        state = "restarted" if before[child_id] != after[child_id] else "untouched"
        print(f"  {child_id}: {before[child_id]} -> {after[child_id]} ({state})")
    print(" ", sup.child("b").call("hello"))
    sup.stop()

    print("2. rest_for_one: crash 'b', 'b' and 'c' come back, 'a' is untouched")
    sup = Supervisor.start_link(
        [spec("a"), spec("b"), spec("c")], strategy="rest_for_one", intensity=3, listeners=[report]
    )
    faults.crash(sup.child("b"), RuntimeError("disk on fire"))
    sup.sync()
    sup.stop()

    print("3. intensity 2 in 5 s: the third crash makes the supervisor give up")
    gone = threading.Event()
    sup = Supervisor.start_link(
        [spec("a")],
        intensity=2,
        listeners=[report, lambda e: e.kind == "shutdown" and gone.set()],
    )
    for _ in range(3):
        worker = sup.child("a")
        if worker is None:
            break
        faults.kill(worker)
        if sup.alive:
            try:
                sup.sync()
            except (NoProcess, ServerExited):  # it may exit while we ask
                break
    gone.wait(5.0)
    print(f"  supervisor alive: {sup.alive}, exit reason: {sup.exit_reason!r}")


if __name__ == "__main__":
    main()
