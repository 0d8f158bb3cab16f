"""What every store shares: the ChatMemory protocol, its errors and its small types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..actors import ServerExited, is_tagged
from ..messages import Conv, ConvLike, short_repr

EXPORT_FORMAT = "otpmem.export"
EXPORT_VERSION = 1

KEYS_KEPT = 1024
"""How many idempotency keys a store remembers per conversation: the newest 1,024.

A key exists to make a retry exact, and a retry follows its failure within seconds: an
agent's turn writes at most a few dozen keyed batches, so 1,024 covers the retries of the
last 40 or more turns of a conversation, while a store of a million conversations spends
at most that many small entries on each. A key older than the newest 1,024 of its
conversation is forgotten, and a batch sent again with it is stored again.
"""
MAX_KEY_LENGTH = 256

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


class LeaseLost(StoreError):
    """A fenced write found that its lease is no longer its writer's (another owner claimed
    it since), so nothing was stored: the conversation is another writer's now."""


class ConversationExists(StoreError, ValueError):
    """A fork's target conversation already holds messages (or another fork's retry key
    names a batch that was no fork), so nothing was written: fork into a new one."""


class ConversationCleared(StoreError):
    """A write that continues an earlier batch (``follows=key``) found that batch gone: the
    conversation was cleared (or its user forgotten) since, so nothing was stored."""


@dataclass(frozen=True)
class StoredWindow:
    """The newest messages of a conversation and the pinned ones before them, read at once.

    ``pinned`` holds ``(position, message)`` for every pinned message (system, ``metadata.
    pinned``, the newest summary) before ``start``; ``tail`` the messages from ``start`` on;
    ``total`` the conversation's length; ``pinned_before`` how many pinned messages come
    before ``start``, superseded summaries included (so ``start - pinned_before`` unpinned
    ones do); ``tail_pinned`` how many of ``tail`` are pinned (None: not counted). What a
    windowed turn needs, whatever the length.
    """

    pinned: list[tuple[int, dict[str, Any]]]
    tail: list[dict[str, Any]]
    start: int
    total: int
    pinned_before: int = 0
    tail_pinned: int | None = None

    def messages(self) -> list[dict[str, Any]]:
        """The pinned messages, oldest first, then the tail."""
        return [message for _, message in self.pinned] + self.tail


@runtime_checkable
class ChatMemory(Protocol):
    """Storage of conversations: append, read back, forget. No policy lives here."""

    def add(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
    ) -> None:
        """Append ``messages`` (validated as a whole first); returns once they are stored.

        A batch whose ``idempotency_key`` the conversation already holds stores nothing;
        with ``follows``, the batch is stored only while the batch keyed ``follows`` is
        still there (else ``ConversationCleared``).
        """

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

    def pinned(self, conv: ConvLike) -> list[tuple[int, dict[str, Any]]]:
        """The pinned index: ``(position, message)`` of every system and pinned message and
        of the newest summary, oldest first; O(pinned), whatever the length."""

    def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` messages and the pinned ones before them, in one read."""

    def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        """Where the batch stored with ``idempotency_key`` begins, or None if none is."""


@runtime_checkable
class ForkStore(ChatMemory, Protocol):
    """A ``ChatMemory`` that forks conversations and reads them as they were (every otpmem
    store): a branch of a scenario at any point, a rewind for a recovery demo::

        store.fork(Conv("ann", "c1"), Conv("ann", "c1-b"), at=4)  # the first 4 messages
        store.get(Conv("ann", "c1"), as_of=4) == store.get(Conv("ann", "c1-b"))

    A separate contract, as ``LongTermStore`` is: a store wrapper that only reads and
    appends (a provider's spy, a counting store) stays a ``ChatMemory`` without forking.
    ``ForkConformance`` in ``otpmem.stores.testing`` checks a store.
    """

    def get(
        self, conv: ConvLike, last: int | None = None, as_of: int | None = None
    ) -> list[dict[str, Any]]:
        """The conversation oldest first; ``as_of=n``: as it was after its n-th message (its
        first n; ``last`` then counts back from there), read in O(n) or better."""

    def fork(
        self,
        conv: ConvLike,
        into: ConvLike,
        *,
        at: int | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Copy the first ``at`` messages of ``conv`` (None: all) into the new conversation
        ``into`` of the same user, in one write; how many were copied. ``into`` holding
        anything is ``ConversationExists``; a retry with its ``idempotency_key`` forks once
        and returns what the first call did. The copy records no usage of its own."""


@dataclass(frozen=True)
class SearchHit:
    """One message that matched a search: where it is and how well it matched (``score``:
    the BM25 score of a ranked search, the occurrence count of a substring search)."""

    conv: Conv
    index: int
    message: dict[str, Any]
    score: float


def check_last(last: object) -> int | None:
    """Return ``last`` if it is None or an int >= 0, else raise ``ValueError``."""
    if last is None:
        return None
    if type(last) is not int or last < 0:
        raise ValueError(f"last must be None or an int >= 0, got {short_repr(last)}")
    return last


def check_as_of(as_of: object) -> int | None:
    """Return ``as_of`` if it is None or an int >= 0, else raise ``ValueError``."""
    if as_of is None:
        return None
    if type(as_of) is not int or as_of < 0:
        raise ValueError(f"as_of must be None or an int >= 0, got {short_repr(as_of)}")
    return as_of


def check_key(
    key: object, what: str = "idempotency_key", longest: int = MAX_KEY_LENGTH
) -> str | None:
    """Return ``key`` if it is None or a non-empty str of at most ``longest`` characters."""
    if key is None:
        return None
    if type(key) is not str or not key or len(key) > longest:
        raise ValueError(
            f"{what} must be None or a non-empty str of at most {longest} "
            f"characters, got {short_repr(key)}"
        )
    return key


WRITE_CRASHED = "write_crashed"


def crash_server(server: Any, target: object, exc: BaseException) -> ServerExited:
    """What an add on a caller's thread raises after hitting a bug: the server is told to
    crash with it (and restarts, as a call's would); the caller hears it exited."""
    server.send((WRITE_CRASHED, exc))
    return ServerExited(target, exc)


def raise_write_crash(message: object) -> None:
    """In a store's ``handle_info``: crash with what a caller-thread write hit."""
    if is_tagged(message, WRITE_CRASHED, 2):
        crash = message[1]  # type: ignore[index]  # is_tagged: a tuple of two
        if isinstance(crash, BaseException):
            raise crash
