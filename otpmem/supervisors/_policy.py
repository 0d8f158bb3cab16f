"""A supervisor's policy, in one place: OTP's restart table, its intensity, its strategies.

What a child's exit means (``restart_action``), how many restarts are too many
(``RestartIntensity``), which siblings go down and come back with a restarted child
(``restart_round``), and when a significant child's exit stops the supervisor
(``auto_shutdown``). The mechanism (starting, stopping and finding children) is
``_children``; the supervisor asks here and applies the answer there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Literal

from ..actors import ExitReason, is_normal_exit
from ._children import Child
from ._spec import AutoShutdown, Flags, RestartType, Strategy

Action = Literal["restart", "keep", "delete"]
"""What becomes of an exited child: started again, kept stopped, or forgotten."""


def restart_action(restart: RestartType, reason: ExitReason) -> Action:
    """OTP's exit-reason table (otp_pykka.md §1.5): a child of restart type ``restart``
    exited with ``reason``."""
    match restart:
        case "permanent":
            return "restart"
        case "transient":
            return "keep" if is_normal_exit(reason) else "restart"
        case _:
            return "delete"


class RestartIntensity:
    """OTP's restart intensity: at most ``intensity`` restarts within ``period`` s."""

    __slots__ = ("clock", "intensity", "period", "restarts")

    def __init__(self, flags: Flags, clock: Callable[[], float]) -> None:
        self.intensity = flags.intensity
        self.period = flags.period
        self.clock = clock
        self.restarts: deque[float] = deque()

    def add(self) -> bool:
        """Count a restart now; False if it is one too many (the supervisor gives up)."""
        # OTP's add_restart, on the clock's float seconds where OTP truncates to whole
        # seconds: a restart counts while it is at most `period` seconds old.
        now = self.clock()
        restarts = self.restarts
        restarts.append(now)
        horizon = now - self.period
        while restarts and restarts[0] < horizon:
            restarts.popleft()
        return len(restarts) <= self.intensity

    def in_period(self) -> int:
        """The restarts the window holds now (one more than ``intensity`` gives up)."""
        horizon = self.clock() - self.period
        return sum(1 for t in self.restarts if t >= horizon)


def restart_round(
    strategy: Strategy, children: list[Child], child: Child
) -> tuple[list[Child], list[Child]]:
    """The siblings a restart of ``child`` stops, and the children it starts again, each
    in the order to do it (temporary siblings stopped are not started again)."""
    if strategy == "one_for_all":
        stop = [c for c in reversed(children) if c is not child]
        return stop, [c for c in children if c.spec.restart != "temporary"]
    if strategy == "rest_for_one":
        rest = children[children.index(child) :]
        return list(reversed(rest[1:])), [c for c in rest if c.spec.restart != "temporary"]
    return [], [child]  # one_for_one, simple_one_for_one


def auto_shutdown(mode: AutoShutdown, children: list[Child]) -> bool:
    """A significant child exited for good: does the supervisor stop too?"""
    if mode == "any_significant":
        return True
    if mode == "all_significant":
        return not any(c.spec.significant and c.process is not None for c in children)
    return False
