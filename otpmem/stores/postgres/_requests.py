"""PostgresStore's request table: which transaction each request of its door runs.

``Requests.work(message)`` checks a request (``parse_request`` and the block and reservation
doors) and names the statement set that runs it, with its arguments; the server runs that in
one transaction (an add joins a group commit instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._client import parse_request
from .._longterm_client import LONGTERM_KINDS
from ..blocks import is_block_edit, parse_block_edit
from ..reservations import is_reservation, parse_reservation
from ._blocks import BlockWrites
from ._forks import Forks
from ._holds import Holds
from ._writes import Writes


class Requests:
    """The write statements of one namespace, by the request each runs."""

    def __init__(self, namespace: str) -> None:
        self.writes = Writes(namespace)
        self.holds = Holds(namespace)
        self.blocks = BlockWrites(namespace)
        self.forks = Forks(namespace)
        self.longterm: dict[str, Callable[..., Any]] = {
            "save_facts": self.writes.save_facts,
            "save_profile": self.writes.save_profile,
            "delete_profile": self.writes.delete_profile,
            "request_extraction": self.writes.request_extraction,
            "join_scope": self.writes.scopes.join,
        }
        missing = LONGTERM_KINDS - set(self.longterm)
        assert not missing, f"no PostgresStore transaction runs {sorted(missing)}"

    def work(self, message: tuple[Any, ...]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The checked request's transaction (called with a cursor first) and arguments;
        ``ValueError`` names what is wrong with the request."""
        if is_reservation(message):
            kind, arg = parse_reservation(message, "PostgresStore")
            if kind == "release":
                return self.holds.release, (arg,)
            return self.holds.reserve, arg
        if is_block_edit(message):
            return self.blocks.edit, (parse_block_edit(message),)
        kind, arg = parse_request(message, "PostgresStore")
        if kind in LONGTERM_KINDS:
            return self.longterm[kind], arg if isinstance(arg, tuple) else (arg,)
        if kind == "add":
            return self.writes.append, arg
        if kind == "fork":
            return self.forks.fork, arg
        if kind == "import":
            return self._import, (arg,)
        if kind == "clear":
            return self.writes.clear, (arg,)
        return self.writes.forget_user, (arg,)

    def _import(self, cur: Any, entries: list[Any]) -> None:
        # As one group: its locks taken in the one order every group takes them.
        adds = [(conv, batch, key, None) for conv, batch, key in entries if batch]
        if adds:
            self.writes.append_group(cur, adds)


__all__ = ["Requests"]
