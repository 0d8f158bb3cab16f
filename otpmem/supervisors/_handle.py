"""The client side of a supervisor: its admin API as typed calls."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from ..actors import Handle, NoProcess, ServerExited
from ._spec import same_id

if TYPE_CHECKING:
    from ._spec import ChildCounts, ChildInfo, ChildSpec, SupervisorEvent

QUERY_TIMEOUT = 5.0
# Starting or stopping a child waits for its init or shutdown, which may take a while.
ADMIN_TIMEOUT = 60.0


class SupervisorHandle(Handle):
    """A handle to a supervisor: ``Handle`` plus OTP's supervisor API."""

    __slots__ = ()

    def which_children(self, timeout: float | None = QUERY_TIMEOUT) -> list[ChildInfo]:
        """Every child in start order, with pid and handle (None when not running)."""
        result: list[ChildInfo] = self.call(("which_children",), timeout)
        return result

    def count_children(self, timeout: float | None = QUERY_TIMEOUT) -> ChildCounts:
        """Counts of specs, running children, supervisors and workers."""
        result: ChildCounts = self.call(("count_children",), timeout)
        return result

    def start_child(
        self, spec_or_args: ChildSpec | tuple[Any, ...], timeout: float | None = ADMIN_TIMEOUT
    ) -> Handle | None:
        """Add and start a child (a spec; extra args under simple_one_for_one).

        Returns its handle, or None if its start ignored; raises ``ChildAlreadyStarted``,
        ``ChildAlreadyPresent``, ``StartChildFailed`` or ``InvalidChildSpec``.
        """
        result: Handle | None = self.call(("start_child", spec_or_args), timeout)
        return result

    def terminate_child(self, child: Any, timeout: float | None = ADMIN_TIMEOUT) -> None:
        """Stop a child, keeping its spec (by id; by pid or handle under simple_one_for_one)."""
        self.call(("terminate_child", child), timeout)

    def restart_child(
        self, child_id: Hashable, timeout: float | None = ADMIN_TIMEOUT
    ) -> Handle | None:
        """Start again a child that was terminated; ``ChildRunning`` if it runs."""
        result: Handle | None = self.call(("restart_child", child_id), timeout)
        return result

    def delete_child(self, child_id: Hashable, timeout: float | None = QUERY_TIMEOUT) -> None:
        """Forget a stopped child's spec; ``ChildRunning`` if it runs."""
        self.call(("delete_child", child_id), timeout)

    def get_childspec(self, child: Any, timeout: float | None = QUERY_TIMEOUT) -> ChildSpec:
        """The spec of a child, defaults filled in."""
        result: ChildSpec = self.call(("get_childspec", child), timeout)
        return result

    def subscribe(
        self, listener: Callable[[SupervisorEvent], None], timeout: float | None = QUERY_TIMEOUT
    ) -> None:
        """Call ``listener(event)`` on the supervisor's thread for every event from now on."""
        self.call(("subscribe", listener), timeout)

    def unsubscribe(
        self, listener: Callable[[SupervisorEvent], None], timeout: float | None = QUERY_TIMEOUT
    ) -> None:
        """Stop sending events to ``listener``."""
        self.call(("unsubscribe", listener), timeout)

    def info(self, timeout: float | None = QUERY_TIMEOUT) -> dict[str, Any]:
        """Strategy, intensity, period, auto_shutdown, and ``restarts_in_period``: the
        restarts the intensity window holds now (one more than ``intensity`` gives up)."""
        result: dict[str, Any] = self.call(("info",), timeout)
        return result

    def sync(self, timeout: float | None = QUERY_TIMEOUT) -> None:
        """Return once every message queued before this call has been handled."""
        self.call(("sync",), timeout)

    def sync_tree(self, timeout: float | None = QUERY_TIMEOUT) -> None:
        """``sync`` for the whole subtree: every exit queued in it so far has been handled.

        After ``faults.kill(x)`` anywhere below, the restart it causes is done when this
        returns, even if supervisors gave up on the way and one above restarted them.
        """
        for info in self.which_children(timeout):
            below = info.handle
            if info.type != "supervisor" or not isinstance(below, SupervisorHandle):
                continue
            try:
                below.sync_tree(timeout)
            except (NoProcess, ServerExited):
                # It gave up: once it has exited, its exit is queued here, before our sync.
                below.wait(timeout)
        self.sync(timeout)

    def child(self, child_id: Hashable, timeout: float | None = QUERY_TIMEOUT) -> Handle | None:
        """The handle of the running child ``child_id``, or None."""
        for info in self.which_children(timeout):
            if same_id(info.id, child_id):
                return info.handle
        return None
