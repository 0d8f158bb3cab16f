"""Sessions: bx-ai's session scope, in Python a context variable.

BoxLang keeps a ``session`` memory in the visitor's session scope: code running for a
request finds that visitor's memory without passing an id around. Here the session is
set for a block (``session_scope``), and holds for that thread or asyncio task and the
tasks it creates (a context variable: a web framework's middleware sets it per request)::

    with session_scope(request.cookies["sid"]):
        mem = memory("session")          # this visitor's conversation, in the shared store
        mem.add("hello")

``memory("session")`` is stored in the application's shared store (``otpmem.default_store()``)
under the session id, so every later block of the same session reaches it, until
``mem.clear()`` (or, for a store in memory, the application's end).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ..messages import short_repr

_current: ContextVar[str | None] = ContextVar("otpmem.memory.session", default=None)


def check_session_id(session_id: object) -> str:
    """``session_id`` if it is a non-empty str; ``ValueError`` otherwise."""
    if type(session_id) is not str or not session_id:
        raise ValueError(f"a session id is a non-empty str, got {short_repr(session_id)}")
    return session_id


@contextmanager
def session_scope(session_id: str) -> Iterator[str]:
    """Run the block in session ``session_id`` (nested blocks take the innermost)."""
    token = _current.set(check_session_id(session_id))
    try:
        yield session_id
    finally:
        _current.reset(token)


def current_session() -> str | None:
    """The session the caller runs in, or None outside every ``session_scope``."""
    return _current.get()


__all__ = ["current_session", "session_scope"]
