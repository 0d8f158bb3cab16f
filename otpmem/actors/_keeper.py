"""TableKeeper: an explicit heir that holds crashed owners' tables until they are claimed."""

from __future__ import annotations

from typing import Any

from ._errors import NotInProcess, short_repr
from ._genserver import GenServer
from ._handle import Handle
from ._heirs import adopt_kept_tables
from ._node import current
from ._requests import split_request
from ._signals import TableTransfer
from ._tables import Table, transfer


class TableKeeper(GenServer):
    """An heir that holds the tables of crashed owners until their successor claims them.

    Start it before the owners (e.g. first child of a ``rest_for_one`` supervisor) and name
    it as their heir; a restarted owner calls ``claim_table(keeper, name)`` in ``init``. A
    keeper restarted by its supervisor takes back what it held (see ``adopt_kept_tables``).
    """

    caller_errors = (ValueError,)

    def init(self) -> None:
        self.kept: dict[str, Table[Any, Any]] = {t.name: t for t in adopt_kept_tables()}

    def handle_info(self, message: Any) -> Any:
        if isinstance(message, TableTransfer):
            self.kept[message.table.name] = message.table
            return None
        return super().handle_info(message)

    def handle_call(self, message: Any) -> Any:
        # ("held", anything): the names it holds (the argument is the pair's, and unused).
        kind, args = split_request(message, "TableKeeper", {"claim": (1,), "held": (0, 1)})
        if kind == "held":
            return sorted(self.kept)
        name = args[0]
        if type(name) is not str:
            raise ValueError(f"TableKeeper: a table name is a str, got {short_repr(name)}")
        caller = self.caller().caller
        if caller is None:  # claim_table refuses a plain thread before it asks
            raise ValueError("TableKeeper: a table is claimed from inside a process")
        table = self.kept.pop(name, None)
        if table is None:
            return None
        # The claimer gets the table as the reply, so no TableTransfer message follows.
        if not transfer(table, self._process, caller, None, notify=False):
            self.kept[name] = table
            return None
        return table


def claim_table(keeper: Handle, name: str, timeout: float = 5.0) -> Table[Any, Any] | None:
    """From inside a server: take back table ``name`` from ``keeper`` (None if it holds none)."""
    if current() is None:
        raise NotInProcess("claim_table")
    table: Table[Any, Any] | None = keeper.call(("claim", name), timeout=timeout)
    return table
