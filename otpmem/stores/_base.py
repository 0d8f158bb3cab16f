"""What every store shares: the ChatMemory protocol, errors, export format and search."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..messages import (
    Conv,
    ConvLike,
    FrozenDict,
    InvalidMessage,
    as_conv,
    check_user_id,
    freeze_batch,
    short_repr,
    text_of,
)

EXPORT_FORMAT = "otpmem.export"
EXPORT_VERSION = 1

STORE_INTENSITY = 20
STORE_PERIOD = 5.0
"""How often a store's own supervisor (``child_spec``) restarts it: 20 times in 5 s.

Giving up costs no data (the store's table, or its directory, outlives its supervisor) and
only hands the problem to the next supervisor up, which counts it as one restart. So this
budget is sized to absorb bursts, not to detect a crash loop: 20 in 5 s rides out a store
killed every quarter of a second for ever, and a burst of 21 kills costs the next
supervisor one restart. A crash loop still escalates within milliseconds, since restarts
are immediate.
"""


class StoreError(Exception):
    """A store cannot do what was asked; the message says why and what to do."""


class StoreLocked(StoreError):
    """Another process (or a zombie incarnation) holds the LevelDB directory's lock."""


class StoreCorrupt(StoreError):
    """The LevelDB directory is damaged; ``plyvel.repair_db(path)`` may recover it."""


class StoreUnavailable(StoreError):
    """The store's directory cannot be opened (missing, not a directory, no permission)."""


@runtime_checkable
class ChatMemory(Protocol):
    """Storage of conversations: append, read back, forget. No policy lives here."""

    def add(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> None:
        """Append ``messages`` (validated as a whole first); returns once they are stored."""

    def get(self, conv: ConvLike, last: int | None = None) -> list[dict[str, Any]]:
        """The conversation oldest first; ``last=n``: only the newest n, read without the rest."""

    def clear(self, conv: ConvLike) -> None:
        """Delete the conversation."""

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        """The conversations held: all of them, or one user's."""

    def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds."""

    def forget_user(self, user_id: str) -> None:
        """Delete every conversation of ``user_id``."""


@dataclass(frozen=True)
class SearchHit:
    """One message that matched a search: where it is and how well it matched."""

    conv: Conv
    index: int
    message: dict[str, Any]
    score: int


def check_last(last: object) -> int | None:
    """Return ``last`` if it is None or an int >= 0, else raise ``ValueError``."""
    if last is None:
        return None
    if type(last) is not int or last < 0:
        raise ValueError(f"last must be None or an int >= 0, got {short_repr(last)}")
    return last


def export_document(
    conversations: Iterable[tuple[Conv, Sequence[Mapping[str, Any]]]],
) -> dict[str, Any]:
    """Build the documented export: JSON-serialisable, re-importable, exact."""
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "conversations": [
            {
                "user_id": conv.user_id,
                "conversation_id": conv.conversation_id,
                "messages": [dict(m) for m in messages],
            }
            for conv, messages in conversations
        ],
    }


def parse_import(data: object) -> list[tuple[Conv, list[FrozenDict]]]:
    """Validate a whole export document before anything is written; raise naming the fault."""
    if not isinstance(data, Mapping):
        raise InvalidMessage(f"an import is a dict from export(), got {type(data).__name__}")
    if data.get("format") != EXPORT_FORMAT:
        raise InvalidMessage(
            f"'format' must be {EXPORT_FORMAT!r}, got {short_repr(data.get('format'))}"
        )
    if data.get("version") != EXPORT_VERSION:
        raise InvalidMessage(
            f"unsupported export version {short_repr(data.get('version'))} "
            f"(this otpmem reads {EXPORT_VERSION})"
        )
    entries = data.get("conversations")
    if not isinstance(entries, list):
        raise InvalidMessage("'conversations' must be a list")
    parsed = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise InvalidMessage(f"conversations[{i}] must be a dict")
        try:
            conv = as_conv(Conv(entry.get("user_id"), entry.get("conversation_id")))  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"conversations[{i}]: {exc}") from None
        try:
            messages = freeze_batch(entry.get("messages"))
        except InvalidMessage as exc:
            raise InvalidMessage(f"conversations[{i}] ({conv.conversation_id}): {exc}") from None
        parsed.append((conv, messages))
    return parsed


def search_scope(user_id: str | None, conv: ConvLike | None) -> tuple[str | None, Conv | None]:
    """Check that a search names one tenant: a conversation's user must be ``user_id``."""
    user_id = check_user_id(user_id)
    if conv is None:
        return user_id, None
    key = as_conv(conv)
    if user_id is not None and key.user_id != user_id:
        raise ValueError(
            f"conversation {key.conversation_id!r} belongs to {key.user_id!r}, not {user_id!r}"
        )
    return key.user_id, key


def rank_matches(
    query: str, conversations: Iterable[tuple[Conv, Sequence[Mapping[str, Any]]]], limit: int
) -> list[SearchHit]:
    """Case-insensitive substring search: most occurrences first, then newest first."""
    if not isinstance(query, str) or not query:
        raise ValueError(f"a search query must be a non-empty str, got {short_repr(query)}")
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {short_repr(limit)}")
    needle = query.casefold()
    hits = []
    for order, (conv, messages) in enumerate(conversations):
        for index, message in enumerate(messages):
            score = text_of(message).casefold().count(needle)
            if score:
                hits.append((score, order, index, conv, message))
    # Newest first among equal scores: later messages, and later conversations, win.
    hits.sort(key=lambda h: (-h[0], -h[2], -h[1]))
    return [
        SearchHit(conv, index, dict(message), score)
        for score, _, index, conv, message in hits[:limit]
    ]


class StoreClient:
    """The client side every store shares, written once: writes as calls to the server
    (validated whole in the caller's thread first), and export, import and search over
    the store's own reads.

    A store's handle mixes this in before ``Handle`` and provides ``get`` and
    ``conversations``; its server answers ``("add", conv, batch)``, ``("clear", conv)``,
    ``("forget_user", user_id)`` and ``("import", parsed)``.
    """

    __slots__ = ()

    if TYPE_CHECKING:

        def call(self, message: Any, timeout: float | None = 5.0) -> Any: ...

    def get(self, conv: ConvLike, last: int | None = None) -> list[dict[str, Any]]:
        raise NotImplementedError

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        raise NotImplementedError

    def add(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]], timeout: float | None = 10.0
    ) -> None:
        """Append ``messages`` (all validated first, in this thread); returns once stored."""
        key = as_conv(conv)
        batch = freeze_batch(messages)
        if batch:
            self.call(("add", key, batch), timeout)

    def clear(self, conv: ConvLike, timeout: float | None = 30.0) -> None:
        """Delete the conversation."""
        self.call(("clear", as_conv(conv)), timeout)

    def forget_user(self, user_id: str, timeout: float | None = 60.0) -> None:
        """Delete every conversation of ``user_id``."""
        if user_id is None:
            raise ValueError("forget_user needs a user_id (None would mean every anonymous one)")
        self.call(("forget_user", check_user_id(user_id)), timeout)

    def _import(self, parsed: list[tuple[Conv, list[FrozenDict]]], timeout: float | None) -> None:
        self.call(("import", parsed), timeout)

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
        """Append an ``export()`` document, all or nothing; return how many messages it held."""
        parsed = parse_import(data)
        self._import(parsed, timeout)
        return sum(len(messages) for _, messages in parsed)

    def search(
        self,
        query: str,
        user_id: str | None = None,
        conv: ConvLike | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        """Case-insensitive text search within one tenant, most matches first, then newest.

        The scope is ``user_id``'s conversations (None: those that belong to no user), or
        just ``conv``; no search ever reads another user's messages.
        """
        owner, only = search_scope(user_id, conv)
        scope = (
            [only]
            if only is not None
            else [c for c in self.conversations(owner) if c.user_id == owner]
        )
        return rank_matches(query, ((c, self.get(c)) for c in scope), limit)


def parse_request(message: object, store: str) -> tuple[str, Any]:
    """Check a raw store call and normalise its argument; ``ValueError`` names what is wrong.

    Handles validate in the caller's thread; this is the server's own check, so a raw
    ``call`` with garbage gets an error back and never crashes the store or touches data.
    """
    if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
        raise ValueError(f"{store} does not understand {short_repr(message)}")
    kind, args = message[0], message[1:]
    arity = {"add": 2, "clear": 1, "forget_user": 1, "import": 1}.get(kind, 0)
    if len(args) != arity:
        raise ValueError(
            f"{store}: {short_repr(kind)} takes {arity} argument(s), got {short_repr(message)}"
        )
    if kind == "add":
        return kind, (as_conv(args[0]), freeze_batch(args[1]))
    if kind == "clear":
        return kind, as_conv(args[0])
    if kind == "forget_user":
        if not isinstance(args[0], str) or not args[0]:
            raise ValueError(
                f"{store}: forget_user needs a non-empty str user_id, got {short_repr(args[0])}"
            )
        return kind, args[0]
    if kind == "import":
        entries = args[0]
        if not isinstance(entries, list) or not all(
            isinstance(e, tuple) and len(e) == 2 for e in entries
        ):
            raise ValueError(f"{store}: import takes a list of (conv, messages) pairs")
        return kind, [(as_conv(conv), freeze_batch(batch)) for conv, batch in entries]
    return kind, None
