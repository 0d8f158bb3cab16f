"""A supervisor's admin requests, checked whole before one runs.

A request is a tuple ``(operation, *arguments)``; the operations a supervisor class answers
are its ``_api_<operation>`` methods, read once from the methods themselves, so the check
cannot drift from them. A malformed request is the caller's error, never a crash that would
take the children down with it.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..reprs import short_repr
from ._spec import SupervisorError

_tables: dict[type, dict[str, tuple[str, ...]]] = {}


def parse_request(server: type, message: Any) -> tuple[str, tuple[Any, ...]]:
    """The operation and arguments of ``message``; ``SupervisorError`` if ``server`` does
    not answer it as given."""
    # Exact types: a tuple or str subclass brings its own __len__, __eq__ and __hash__.
    if not (type(message) is tuple and message and type(message[0]) is str):
        raise SupervisorError(
            f"not a supervisor request: {short_repr(message)} (a request is a tuple "
            "(operation, *arguments), e.g. ('which_children',))"
        )
    operation, args = message[0], message[1:]
    requests = _requests(server)
    params = requests.get(operation)
    if params is None:
        raise SupervisorError(
            f"unknown supervisor request {short_repr(operation)}; "
            f"a supervisor answers {', '.join(sorted(requests))}"
        )
    if len(args) != len(params):
        raise SupervisorError(
            f"supervisor request {operation!r} takes {_arguments(params)}, "
            f"got {len(args)}: {short_repr(message)}"
        )
    return operation, args


def _requests(server: type) -> dict[str, tuple[str, ...]]:
    # Each operation with its arguments' names, from the _api_* methods.
    table = _tables.get(server)
    if table is None:
        table = {}
        for name in dir(server):
            if name.startswith("_api_"):
                _, *params = inspect.signature(getattr(server, name)).parameters  # minus self
                table[name.removeprefix("_api_")] = tuple(params)
        _tables[server] = table
    return table


def _arguments(params: tuple[str, ...]) -> str:
    if not params:
        return "no arguments"
    return f"{len(params)} argument{'s' if len(params) > 1 else ''} ({', '.join(params)})"
