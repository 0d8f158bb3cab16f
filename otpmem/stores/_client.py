"""The client side every store's handle shares, and the server's check of raw requests."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import telemetry
from ..actors import split_request
from ..messages import (
    Conv,
    ConvLike,
    FrozenDict,
    InvalidMessage,
    as_conv,
    check_user_id,
    freeze_batch,
    short_repr,
)
from ._base import SearchHit, StoreError, check_key
from ._documents import export_document, import_key, parse_import, rank_matches, search_scope
from ._fork import check_fork
from ._longterm_client import LONGTERM_ARITIES, parse_longterm
from .ranking import attached as attached_index

ImportEntry = tuple[Conv, list[FrozenDict], str | None]

CheckedAdd = tuple[Conv, list[FrozenDict], str | None, str | None]
"""An add, validated: the conversation, the frozen batch, its key and the key it follows."""


class StoreClient:
    """The client side every store shares, written once: writes as calls to the server
    (validated whole in the caller's thread first), and export, import and search over
    the store's own reads.

    A store's handle mixes this in before ``Handle`` and provides ``get`` and
    ``conversations``; its server answers ``("add", conv, batch, key, follows)``,
    ``("fork", conv, into, at, key)``, ``("clear", conv)``, ``("forget_user", user_id)``
    and ``("import", entries)``.
    """

    __slots__ = ()

    if TYPE_CHECKING:

        def call(self, message: Any, timeout: float | None = 5.0) -> Any: ...

    def get(
        self, conv: ConvLike, last: int | None = None, as_of: int | None = None
    ) -> list[dict[str, Any]]:
        raise NotImplementedError

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        raise NotImplementedError

    def add(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
        timeout: float | None = 10.0,
    ) -> None:
        """Append ``messages`` (all validated first, in this thread); returns once stored.

        With ``idempotency_key``, a batch the conversation already holds under that key
        stores nothing and returns normally (after a crash and a restart too), so a write
        retried after an error is stored once. With ``follows``, the batch is stored only
        while the batch keyed ``follows`` is still in the conversation; otherwise it
        raises ``ConversationCleared`` and stores nothing.
        """
        key = as_conv(conv)
        batch = freeze_batch(messages)
        idempotency_key = check_key(idempotency_key)
        follows = check_key(follows, "follows")
        if not batch:
            return
        add = (key, batch, idempotency_key, follows)
        if telemetry.ENABLED:  # every store's writes, traced and timed (nothing without OTel)
            return telemetry.store_write(self._add_checked, add, timeout, type(self).__name__)
        self._add_checked(add, timeout)

    def _add_checked(self, add: CheckedAdd, timeout: float | None) -> None:
        # A store that can take a checked add without a call overrides this.
        conv, batch, idempotency_key, follows = add
        if idempotency_key is None and follows is None:
            self.call(("add", conv, batch), timeout)
        else:
            self.call(("add", *add), timeout)

    def fork(
        self,
        conv: ConvLike,
        into: ConvLike,
        *,
        at: int | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = 30.0,
    ) -> int:
        """Copy the first ``at`` messages of ``conv`` (None: all of them) into ``into``, a
        new conversation of the same user, in one write; return how many were copied.

        ``into`` must hold nothing (else ``ConversationExists``, and nothing is written);
        another user's ``into`` is a ``ValueError`` naming both. The messages are stored as
        if added (the pinned index and the newest summary follow the add rules), but the
        fork records no usage of its own: what they spent stays the source's. With
        ``idempotency_key``, a retried fork is applied once and returns what the first
        call returned.
        """
        forked: int = self.call(("fork", *check_fork(conv, into, at, idempotency_key)), timeout)
        return forked

    def clear(self, conv: ConvLike, timeout: float | None = 30.0) -> None:
        """Delete the conversation."""
        self.call(("clear", as_conv(conv)), timeout)

    def forget_user(self, user_id: str, timeout: float | None = 60.0) -> None:
        """Delete every conversation of ``user_id``."""
        if user_id is None:
            raise ValueError("forget_user needs a user_id (None would mean every anonymous one)")
        self.call(("forget_user", check_user_id(user_id)), timeout)

    def _import(self, parsed: list[tuple[Conv, list[FrozenDict]]], timeout: float | None) -> None:
        entries: list[ImportEntry] = [
            (conv, batch, import_key(batch) if batch else None) for conv, batch in parsed
        ]
        self.call(("import", entries), timeout)

    def _scope(self, conv: ConvLike | None, user_id: str | None, all_users: bool) -> list[Conv]:
        chosen = sum([conv is not None, user_id is not None, all_users])
        if chosen != 1:
            raise ValueError("name exactly one of: a conversation, user_id=..., all_users=True")
        if conv is not None:
            return [as_conv(conv)]
        if user_id is not None:
            return [c for c in self.conversations(check_user_id(user_id)) if c.user_id == user_id]
        return self.conversations()

    def export(
        self, conv: ConvLike | None = None, *, user_id: str | None = None, all_users: bool = False
    ) -> dict[str, Any]:
        """Export one conversation, one user's, or everything (``all_users=True``) as JSON data."""
        return export_document((c, self.get(c)) for c in self._scope(conv, user_id, all_users))

    def import_(self, data: object, timeout: float | None = 30.0) -> int:
        """Append an ``export()`` document, all or nothing; return how many messages it held.

        Each conversation of the document is keyed by a digest of its messages, so the same
        document imported twice is stored once.
        """
        parsed = parse_import(data)
        self._import(parsed, timeout)
        return sum(len(messages) for _, messages in parsed)

    def search(
        self,
        query: str,
        user_id: str | None = None,
        conv: ConvLike | None = None,
        limit: int = 20,
        *,
        mode: str | None = None,
        timeout: float | None = 30.0,
    ) -> list[SearchHit]:
        """Text search within one tenant, best first.

        The scope is ``user_id``'s conversations (None: those that belong to no user), or
        just ``conv``; no search ever reads another user's messages. With a RecallIndex
        attached to this store (``RecallIndex.start_link(store)`` attaches one; the
        application attaches one to the default store) it is a query of that index, never
        a scan: ``mode="ranked"`` (the default then) ranks by BM25 (``score``: the BM25
        score), ``mode="substring"`` is bx-ai's case-insensitive substring search, most
        occurrences first (``score``: their count), then newest. With no index attached it
        is that substring search, as a scan of every message in the scope, and
        ``mode="ranked"`` raises ``StoreError``.
        """
        owner, only = search_scope(user_id, conv)
        if mode is not None and (type(mode) is not str or mode not in ("ranked", "substring")):
            raise ValueError(f"mode must be None, 'ranked' or 'substring', got {short_repr(mode)}")
        ranked = attached_index(self)
        if ranked is not None:
            return ranked(query, owner, only, limit, mode or "ranked", timeout)
        if mode == "ranked":
            raise StoreError(
                "no RecallIndex is attached to this store, so there is no ranked search; "
                "start one (RecallIndex.start_link(store)) or use mode='substring'"
            )
        scope = (
            [only]
            if only is not None
            else [c for c in self.conversations(owner) if c.user_id == owner]
        )
        return rank_matches(query, ((c, self.get(c)) for c in scope), limit)


REQUESTS: dict[str, tuple[int, ...]] = {
    "add": (2, 4),
    "fork": (4,),
    "clear": (1,),
    "forget_user": (1,),
    "import": (1,),
    **LONGTERM_ARITIES,
}
"""Every store's requests, by the argument counts each takes."""


def parse_request(
    message: object, store: str, requests: Mapping[str, Collection[int]] = REQUESTS
) -> tuple[str, Any]:
    """Check a raw store call and normalise its argument; ``ValueError`` names what is wrong.

    The one door of every store's server: handles validate in the caller's thread, and this
    is the server's own check, so a raw ``call`` with garbage gets an error back and never
    crashes the store or touches data. ``requests``: ``REQUESTS`` and the store's own
    requests of no argument (``"flush"``), which return as ``(kind, None)``. An ``add``
    normalises to ``(conv, batch, key, follows)``, a ``fork`` to a ``CheckedFork``, an
    ``import`` to a list of ``(conv, batch, key)``, a long-term request as
    ``parse_longterm`` has it.
    """
    kind, args = split_request(message, store, requests)
    if kind in LONGTERM_ARITIES:
        return parse_longterm(kind, args)
    if kind == "add":
        key, follows = (args[2], args[3]) if len(args) == 4 else (None, None)
        return kind, (
            as_conv(args[0]),
            _batch(args[1]),
            check_key(key),
            check_key(follows, "follows"),
        )
    if kind == "fork":
        return kind, check_fork(*args)
    if kind == "clear":
        return kind, as_conv(args[0])
    if kind == "forget_user":
        if type(args[0]) is not str or not args[0]:
            raise ValueError(
                f"{store}: forget_user needs a non-empty str user_id, got {short_repr(args[0])}"
            )
        return kind, args[0]
    if kind == "import":
        entries = args[0]
        if type(entries) is not list or not all(
            type(e) is tuple and len(e) in (2, 3) for e in entries
        ):
            raise ValueError(f"{store}: import takes a list of (conv, messages[, key]) entries")
        return kind, [
            (as_conv(e[0]), _batch(e[1]), check_key(e[2]) if len(e) == 3 else None) for e in entries
        ]
    return kind, None


def _batch(batch: object) -> list[FrozenDict]:
    if type(batch) is list or type(batch) is tuple:
        return freeze_batch(batch)
    if isinstance(batch, dict | str | bytes) or not isinstance(batch, Iterable):
        return freeze_batch(batch)  # refused, as a handle refuses it
    # Another iterable runs the caller's own __iter__ here: what it raises is the caller's.
    try:
        items = list(batch)
    except Exception as exc:
        raise InvalidMessage(
            f"the batch could not be read: iterating it raised {short_repr(exc)}"
        ) from None
    return freeze_batch(items)
