"""Links and monitors: who hears of a process's death, and what an exit signal does to it.

A link runs both ways and carries exit signals: when one end exits, the other dies of it
unless it traps exits (then an ``Exit`` message arrives). A monitor runs one way and only
informs: the watcher gets a ``Down`` message. The graph changes and is told of an exit under
one lock, so a link or monitor made to a process that has already told its partners gets
``noproc`` at once instead of waiting forever.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any

from ._errors import NORMAL, ExitReason, is_reason
from ._signals import Down, Exit, Pid

if TYPE_CHECKING:
    from ._process import Process

# One lock for the whole graph: linking touches two processes, and per-process locks taken
# in two orders would deadlock.
link_lock = threading.Lock()
_monitor_refs = itertools.count(1)


def next_monitor_ref() -> int:
    """A fresh monitor reference."""
    return next(_monitor_refs)


class Linked:
    """A process's side of the graph: its links, its watchers, and its exit signals.

    ``Process`` is the rest of it (its mailbox, its start and its exit); this half only
    reads its ``pid``, its ``parent``, and the three ways a signal reaches it.
    """

    # Set by Process.__init__, which spares a spawn the call of an __init__ here.
    __slots__ = ("links", "told", "trap_exits", "watchers")
    links: set[Linked]
    watchers: dict[int, Linked]  # monitor ref -> the process watching this one
    trap_exits: bool
    told: bool  # set, under the lock, once links and watchers were told of its exit

    pid: Pid
    parent: Process | None

    if TYPE_CHECKING:

        def send(self, message: Any) -> bool: ...
        def request_shutdown(self, reason: ExitReason) -> bool: ...
        def signal_kill(self, reason: ExitReason) -> None: ...

    def link(self, other: Linked) -> None:
        """Link both ways; if ``other`` is already dead, this process gets ``noproc``."""
        with link_lock:
            if not other.told:
                self.links.add(other)
                other.links.add(self)
                return
        self.exit_signal(other.pid, "noproc")

    def unlink(self, other: Linked) -> None:
        """Remove the link both ways; no exit signal will follow."""
        with link_lock:
            self.links.discard(other)
            other.links.discard(self)

    def monitor(self, other: Linked) -> int:
        """Watch ``other``: a ``Down`` message arrives when it exits (at once if dead)."""
        ref = next_monitor_ref()
        with link_lock:
            if not other.told:
                other.watchers[ref] = self
                return ref
        self.send(Down(ref, other.pid, "noproc"))
        return ref

    def demonitor(self, other: Linked, ref: int) -> None:
        """Stop watching; no ``Down`` for ``ref`` is sent after this returns."""
        with link_lock:
            other.watchers.pop(ref, None)

    def exit_signal(self, source: Pid, reason: ExitReason) -> None:
        """A linked process exited: trap it as an ``Exit`` message, or die of it."""
        parent = self.parent
        if parent is not None and source == parent.pid and self.trap_exits:
            # A server that traps exits still dies with its parent (gen_server rule), after
            # the message it handles now, running terminate.
            self.request_shutdown(reason)
        elif self.trap_exits:
            self.send(Exit(source, reason))
        elif not is_reason(reason, NORMAL):
            self.signal_kill(reason)

    def tell_exit(self, reason: ExitReason) -> None:
        """Cut every link and monitor, then signal the links and tell the watchers."""
        with link_lock:
            self.told = True
            partners = list(self.links)
            for partner in partners:
                partner.links.discard(self)
            self.links.clear()
            watchers = list(self.watchers.items())
            self.watchers.clear()
        for partner in partners:
            partner.exit_signal(self.pid, reason)
        for ref, watcher in watchers:
            watcher.send(Down(ref, self.pid, reason))
