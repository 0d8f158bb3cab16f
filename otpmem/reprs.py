"""``short_repr``: a value described for an error or a log line, bounded in depth and
length, and never raising, whatever a caller sent."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from itertools import islice
from typing import Any

SHORT_REPR_MAX = 300
"""The longest description of a value that ``short_repr`` gives."""


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr, which also bounds what reprlib hands to plain ``repr``:
    container subclasses (``Conv``, frozen messages), exceptions and huge ints."""

    _BUILTINS = frozenset({str, int, list, tuple, dict, set, frozenset})

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxstring = 160  # an exception's message is the long string errors often carry
        self.maxother = 80
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = 6

    def repr1(self, x: Any, level: int) -> str:
        kind = type(x)
        if kind in self._BUILTINS:
            # reprlib dispatches on the type's name, right only for the builtins themselves.
            return super().repr1(x, level)
        if isinstance(x, tuple) and hasattr(kind, "_fields"):
            fields = (
                f"{f}={self.repr1(v, level - 1)}" for f, v in zip(kind._fields, x, strict=True)
            )
            return f"{kind.__name__}({', '.join(fields)})"
        if isinstance(x, BaseException):
            return f"{kind.__name__}({self._items(x.args, level, self.maxtuple)})"
        own_repr: object = kind.__repr__
        for base in (dict, list, tuple, set, frozenset):
            if isinstance(x, base) and own_repr is base.__repr__:
                return str(getattr(self, f"repr_{base.__name__}")(x, level))
        return self.repr_instance(x, level)

    def _items(self, items: Iterable[Any], level: int, most: int, size: int = -1) -> str:
        pieces = [self.repr1(item, level - 1) for item in islice(items, most)]
        if size > most:
            pieces.append("...")
        return ", ".join(pieces)

    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int over 4,300 digits raises ValueError (CPython's conversion limit).
        if x.bit_length() > 256:
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    # reprlib sorts dicts and sets first, O(n log n) on garbage; repr shows insertion order.

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        pieces = [
            f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
            for k, v in islice(x.items(), self.maxdict)
        ]
        if len(x) > self.maxdict:
            pieces.append("...")
        return "{" + ", ".join(pieces) + "}"

    def repr_set(self, x: set[Any], level: int) -> str:
        if not x:
            return "set()"
        return "{" + ("..." if level <= 0 else self._items(x, level, self.maxset, len(x))) + "}"

    def repr_frozenset(self, x: frozenset[Any], level: int) -> str:
        if not x:
            return "frozenset()"
        inner = "..." if level <= 0 else self._items(x, level, self.maxfrozenset, len(x))
        return "frozenset({" + inner + "})"


_short = _ShortRepr()


def short_repr(value: object) -> str:
    """``repr(value)`` bounded in depth and length, for errors and logs; it never raises.

    Whatever a caller sends may be described in an error: a value nested 1,000 levels deep
    makes plain ``repr`` raise RecursionError, and a huge one makes a message nobody reads.
    """
    try:
        text = _short.repr(value)
    except Exception:
        text = f"<{type(value).__name__} object>"
    if len(text) > SHORT_REPR_MAX:
        text = text[: SHORT_REPR_MAX - 3] + "..."
    return text


__all__ = ["SHORT_REPR_MAX", "short_repr"]
