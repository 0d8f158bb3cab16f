"""Read-only values: how stores share a message without copying it, and the mutable copy.

``FrozenDict`` and ``FrozenList`` refuse mutation and compare equal to a plain dict and
list; ``thaw`` gives a mutable deep copy. ``otpmem.messages.freeze`` makes them, after
checking a message, and ``untracked`` keeps them out of the cyclic GC's work.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

_C = TypeVar("_C", bound="FrozenDict | FrozenList")


class FrozenDict(dict[str, Any]):
    """A dict that refuses mutation: how stores share a message without copying it.

    It compares equal to a plain dict; ``copy.deepcopy`` or ``thaw`` gives a mutable one.
    """

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("stored messages are read-only; copy with otpmem.messages.thaw(m)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (thaw(self),))

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        result: dict[str, Any] = thaw(self)
        return result


class FrozenList(list[Any]):
    """A list that refuses mutation (see ``FrozenDict``)."""

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("stored messages are read-only; copy with otpmem.messages.thaw(m)")

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = _refuse
    clear = reverse = sort = _refuse
    __iadd__ = __imul__ = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (thaw(self),))

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        result: list[Any] = thaw(self)
        return result


_ATOMIC = frozenset({str, int, float, bool, type(None)})
"""Value types ``thaw`` returns as they are: a call for each would cost more than the copy."""


def thaw(value: Any) -> Any:
    """A mutable deep copy of a (possibly frozen) message or value."""
    if isinstance(value, dict):
        copied = dict(value)  # in C; then only the nested values are copied on
        for k, v in value.items():
            if type(v) not in _ATOMIC:
                copied[k] = thaw(v)
        return copied
    if isinstance(value, list):
        return [v if type(v) in _ATOMIC else thaw(v) for v in value]
    return value


def _gc_untracker() -> Callable[[Any], None] | None:
    """CPython's ``PyObject_GC_UnTrack``, where there is one."""
    api = getattr(ctypes, "pythonapi", None)
    untrack = getattr(api, "PyObject_GC_UnTrack", None)
    if untrack is None or not hasattr(gc, "is_tracked"):
        return None
    untrack.argtypes = [ctypes.py_object]
    untrack.restype = None
    probe = FrozenDict()
    untrack(probe)
    return untrack if not gc.is_tracked(probe) else None


_gc_untrack = _gc_untracker()


def untracked(container: _C) -> _C:
    """``container``, just frozen, taken out of the cyclic GC's sight.

    A frozen container holds only atomic values and other frozen containers, made before
    it and never changed: no reference cycle can pass through it. Left tracked, every
    stored message is walked by every full collection: 1,000,000 messages in a
    MemoryStore made each one take 240 ms, with every thread of the process held. (CPython
    does this itself for a plain dict of atomic values, but never for a dict subclass.)
    """
    if _gc_untrack is not None:
        _gc_untrack(container)
    return container
