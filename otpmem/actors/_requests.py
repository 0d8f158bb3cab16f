"""The door of a server: a request's shape checked without running any of the caller's code.

A server's ``handle_call`` gets whatever a caller sent. Comparing it with ``==``, hashing it
or asking its length runs the caller's ``__eq__``, ``__hash__`` or ``__len__``, which may
raise anything (or, as a numpy array's ``==`` does, answer something that is not a bool):
an exception no server declares as a caller error, so the server would crash. These checks
look only at exact built-in types, whose methods are the interpreter's own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ._errors import short_repr


def split_request(
    message: object,
    server: str,
    arities: Mapping[str, Collection[int]],
    error: type[Exception] = ValueError,
) -> tuple[str, tuple[Any, ...]]:
    """The operation and arguments of ``message``, a tuple ``(operation, *arguments)``.

    ``arities`` maps each operation the server answers to the argument counts it takes.
    Anything else raises ``error`` naming what is wrong: a value that is not a tuple (a
    subclass of one included, whose methods are the caller's), an operation that is not
    a str or not one of them, or the wrong number of arguments.
    """
    if type(message) is not tuple or not message:
        raise error(
            f"{server} does not understand {short_repr(message)}: a request is a tuple "
            "(operation, *arguments)"
        )
    operation, args = message[0], message[1:]
    counts = arities.get(operation) if type(operation) is str else None
    if counts is None:
        raise error(
            f"{server} does not understand {short_repr(message)}: it answers "
            f"{', '.join(sorted(arities))}"
        )
    if len(args) not in counts:
        wanted = " or ".join(str(n) for n in sorted(counts))
        raise error(
            f"{server}: {operation!r} takes {wanted} argument(s), got {len(args)}: "
            f"{short_repr(message)}"
        )
    return operation, args


def is_tagged(message: object, tag: str, size: int) -> bool:
    """Whether ``message`` is the tuple ``(tag, ...)`` of ``size`` elements (an internal
    message a server sends itself); compares nothing but exact built-in values."""
    return (
        type(message) is tuple
        and len(message) == size
        and type(message[0]) is str
        and message[0] == tag
    )
