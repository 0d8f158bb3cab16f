"""bx-ai's memory API over otpmem: a ``Memory`` bound to one conversation, and ``memory()``.

For people coming from bx-ai's ``aiMemory(type, key, userId, conversationId, config)``::

    mem = memory("hybrid", user_id="ann", conversation_id="support")
    mem.set_system_message("You are terse.")
    mem.add("I'm allergic to peanuts")              # a str is a user message
    mem.get_relevant("what am I allergic to?", limit=3)
    mem.close()                                     # stops what memory() started

Kinds (case-insensitive, with bx-ai's aliases): ``window`` (``buffer``, ``buffered``) and
``cache`` keep conversations in a ``MemoryStore``; ``summary`` adds a rolling summary;
``file`` is a ``LevelDBStore`` at ``path``; ``vector`` and ``hybrid`` add a
``RecallIndex``. ``jdbc`` (``database``, ``db``, ``postgres``, ``postgresql``) is a
``PostgresStore`` at ``dsn`` (an embedded server without one), shared by every process on
its schema; ``pgvector`` is not built. Every config key is wired or refused.

``set_system_message`` replaces: the conversation is rewritten with the new system message
first and no other (bx-ai's semantics), i.e. cleared and re-added, so every reader, every
provider and the index see one system message. The rewrite is two store calls: a crash
between them loses the conversation (it is exported first and returned, for a caller that
must not lose it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..messages import Conv, ConvLike, InvalidMessage, as_conv, check_user_id, short_repr
from ..stores import EXPORT_FORMAT, EXPORT_VERSION, ChatMemory, LevelDBStore, MemoryStore
from .pipeline import Pipeline
from .provider import BasicMemoryProvider, DefaultProvider, MemoryProvider, PipelineProvider
from .recall import Embedder, Hit, HybridProvider, RecallIndex, RecallIndexHandle, ranked_search
from .strategies import Summarization
from .summarizers import Summarizer


class InvalidMemoryType(ValueError):
    """``memory(kind)`` with a kind it does not know; the message lists the kinds."""


class InvalidConfiguration(ValueError):
    """A memory's configuration cannot work; the message names the key and why."""


KINDS = {
    "window": "window",
    "buffer": "window",
    "buffered": "window",
    "cache": "cache",
    "summary": "summary",
    "file": "file",
    "vector": "vector",
    "hybrid": "hybrid",
    "jdbc": "jdbc",
    "database": "jdbc",
    "db": "jdbc",
    "postgres": "jdbc",
    "postgresql": "jdbc",
}
NOT_YET = ("pgvector",)

_COMMON = {"store", "index", "embedder"}
_KEYS = {
    "window": {"max_messages"},
    "cache": set(),
    "summary": {"max_messages", "max_tokens", "summary_threshold", "summarizer"},
    "file": {"path", "sync", "max_messages"},
    "jdbc": {"dsn", "namespace", "pool_size", "data_dir", "max_messages"},
    "vector": set(),
    "hybrid": {"recent_limit", "semantic_limit", "total_limit", "recent_weight"},
}


class Memory:
    """One conversation's memory: its store, its key, its provider, perhaps an index.

    Methods mirror bx-ai's; writes go to the store (read-your-writes), ``context()`` is
    what the provider would send to a model now.
    """

    def __init__(
        self,
        store: ChatMemory,
        conv: ConvLike,
        provider: BasicMemoryProvider | None = None,
        index: RecallIndexHandle | None = None,
        *,
        owned: Sequence[Any] = (),
    ) -> None:
        if not isinstance(store, ChatMemory):
            raise TypeError(f"store must implement ChatMemory, got {short_repr(store)}")
        self.store = store
        self.conv = as_conv(conv)
        self.provider = provider if provider is not None else DefaultProvider(store)
        self.index = index
        self._owned = list(owned)

    def __repr__(self) -> str:
        return f"Memory({self.conv}, {self.provider!r})"

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the processes ``memory()`` started for this memory (index, then store)."""
        for process in reversed(self._owned):
            if process.alive:
                process.stop()
        self._owned.clear()

    # -- writing -------------------------------------------------------------------------

    def add(self, item: str | Mapping[str, Any] | Sequence[Any]) -> Memory:
        """Add a str (a user message), a message dict (role defaults to user), or a list of
        them; all validated before any is stored. Returns the memory, for chaining."""
        batch = _messages(item)
        if batch:
            self.provider.append(self.conv, batch)
        return self

    def set_system_message(self, text: str) -> dict[str, Any]:
        """Make ``text`` the one system message, first; return the export of the
        conversation as it was (see the module docstring)."""
        if not isinstance(text, str) or not text:
            raise InvalidMessage(f"a system message needs non-empty text, got {short_repr(text)}")
        before = self.export()
        others = [m for m in self.get_all() if m.get("role") != "system"]
        self.clear()
        self.store.add(self.conv, [{"role": "system", "content": text}, *others])
        return before

    def clear(self) -> None:
        """Forget the conversation (store, and index if any)."""
        self.provider.clear(self.conv)
        if self.index is not None:
            self.index.forget(self.conv)

    def summarize(
        self, keep_recent: int = 5, summarizer: Summarizer | None = None
    ) -> dict[str, Any] | None:
        """Fold all but the newest ``keep_recent`` unsummarized messages into a rolling
        summary now; it is stored as a pinned system message (the history stays) and
        returned, or None when there is nothing to fold."""
        if type(keep_recent) is not int or keep_recent < 0:
            raise ValueError(f"keep_recent must be an int >= 0, got {short_repr(keep_recent)}")
        step = Summarization(keep_recent + 1, keep_recent, summarizer)
        saved: list[dict[str, Any]] = []
        report = Pipeline([step]).explain(self.get_all(), self.conv, saved.append)
        if not saved:
            return None
        self.store.add(self.conv, saved)
        return dict(report.summary) if report.summary is not None else saved[0]

    def import_(self, data: Any) -> int:
        """Append messages from an ``export()`` document (every conversation in it) or a
        list of messages, all validated first; return how many were added."""
        batch = _document_messages(data) if isinstance(data, Mapping) else _messages(data)
        if batch:
            self.store.add(self.conv, batch)
        return len(batch)

    # -- reading -------------------------------------------------------------------------

    def get_all(self) -> list[dict[str, Any]]:
        """Every stored message, oldest first."""
        return self.store.get(self.conv)

    def get_recent(self, n: int = 10) -> list[dict[str, Any]]:
        """The newest ``n`` messages (system ones included, as in bx-ai)."""
        return self.store.get(self.conv, last=n)

    def get_by_role(self, role: str) -> list[dict[str, Any]]:
        """The messages of one role, oldest first."""
        return [m for m in self.get_all() if m.get("role") == role]

    def get_system_message(self) -> str | None:
        """The first system message's text, or None."""
        found = self.get_by_role("system")
        content = found[0].get("content") if found else None
        return content if isinstance(content, str) else None

    def search(self, term: str, *, substring: bool = True, limit: int = 20) -> list[Any]:
        """bx-ai's search: case-insensitive substring (``substring=False``: ranked by BM25
        when there is an index, the memory's or one attached to its store); hits name
        their position and message."""
        if self.index is not None:
            mode = "substring" if substring else "ranked"
            return ranked_search(self.index, term, conv=self.conv, limit=limit, mode=mode)
        search: Callable[..., list[Any]] | None = getattr(self.store, "search", None)
        if search is None:
            raise InvalidConfiguration(f"{self.store!r} has no search; give the memory an index")
        return search(term, conv=self.conv, limit=limit, mode="substring" if substring else None)

    def get_relevant(
        self,
        query: str,
        limit: int = 5,
        filter: Any = None,
        min_score: float = 0.0,
    ) -> list[Hit]:
        """The messages of this conversation most relevant to ``query`` (needs an index:
        ``memory("vector")`` or ``memory("hybrid")``)."""
        if self.index is None:
            raise InvalidConfiguration(
                "get_relevant needs a recall index: use memory('vector') or memory('hybrid'), "
                "or give Memory an index"
            )
        return self.index.get_relevant(
            query, conversation=self.conv, limit=limit, min_score=min_score, filter=filter
        )

    def count(self) -> int:
        """How many messages are stored."""
        return self.store.count(self.conv)

    def is_empty(self) -> bool:
        """Whether nothing is stored."""
        return self.count() == 0

    def export(self) -> dict[str, Any]:
        """The conversation as an otpmem export document (JSON data, re-importable)."""
        exporter: Callable[..., dict[str, Any]] | None = getattr(self.store, "export", None)
        if exporter is not None:
            return exporter(self.conv)
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "conversations": [
                {
                    "user_id": self.conv.user_id,
                    "conversation_id": self.conv.conversation_id,
                    "messages": self.get_all(),
                }
            ],
        }

    def context(self) -> list[Mapping[str, Any]]:
        """What the provider would send to a model now: ``prepare(history)``."""
        return self.provider.prepare(self.conv, self.provider.history(self.conv))


def _messages(item: Any) -> list[dict[str, Any]]:
    """bx-ai's add shapes, flattened: str, dict (content required, role defaults to user),
    or a (nested) list of them."""
    if isinstance(item, str):
        return [{"role": "user", "content": item}]
    if isinstance(item, Mapping):
        if "content" not in item and "tool_calls" not in item:
            raise InvalidMessage(f"a message needs 'content', got {short_repr(item)}")
        return [{"role": "user", **item}]
    if isinstance(item, Sequence) and not isinstance(item, bytes | bytearray):
        return [m for part in item for m in _messages(part)]
    raise InvalidMessage(
        f"add takes a str, a message dict or a list of them, got {type(item).__name__}"
    )


def _document_messages(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every message of an export document, in order (the store validates them on add)."""
    if data.get("format") != EXPORT_FORMAT or data.get("version") != EXPORT_VERSION:
        raise InvalidMessage(
            f"not an otpmem export (format {EXPORT_FORMAT!r}, version {EXPORT_VERSION}): "
            f"got {short_repr(data.get('format'))}, {short_repr(data.get('version'))}"
        )
    entries = data.get("conversations")
    if not isinstance(entries, list):
        raise InvalidMessage("'conversations' must be a list")
    found: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        messages = entry.get("messages") if isinstance(entry, Mapping) else None
        if not isinstance(messages, list):
            raise InvalidMessage(f"conversations[{i}] needs a list of 'messages'")
        found += messages
    return found


def _int(config: Mapping[str, Any], key: str, default: int | None, low: int) -> int | None:
    value = config.get(key, default)
    if value is None:
        return None
    if type(value) is not int or value < low:
        raise InvalidConfiguration(f"{key} must be an int >= {low}, got {short_repr(value)}")
    return value


def memory(
    kind: str = "window",
    *,
    user_id: str | None = None,
    conversation_id: str | None = None,
    **config: Any,
) -> Memory:
    """A ``Memory`` of one of bx-ai's kinds (see the module docstring).

    Config: ``store`` (an existing store: not started, not stopped), ``index`` (likewise),
    ``embedder``; window: ``max_messages`` (100); summary: ``max_messages`` (20) or
    ``max_tokens``, ``summary_threshold`` (10, the messages kept as they are),
    ``summarizer``; file: ``path`` (required), ``sync`` (True); jdbc: ``dsn`` (none: an
    embedded server under ``data_dir``), ``namespace`` ("otpmem"), ``pool_size`` (8),
    ``max_messages``; hybrid: ``recent_limit``, ``semantic_limit``, ``total_limit``,
    ``recent_weight``.
    """
    if not isinstance(kind, str):
        raise InvalidMemoryType(f"a memory kind is a str, got {short_repr(kind)}")
    name = kind.strip().lower()
    if name in NOT_YET:
        raise InvalidConfiguration(
            f"memory kind {kind!r} (vectors in PostgreSQL) is not built yet; use 'jdbc' "
            "for conversations in PostgreSQL, or 'vector' for recall"
        )
    resolved = KINDS.get(name)
    if resolved is None:
        raise InvalidMemoryType(
            f"unknown memory kind {kind!r}; choose one of {', '.join(sorted(KINDS))}"
        )
    unknown = set(config) - _COMMON - _KEYS[resolved]
    if unknown:
        raise InvalidConfiguration(
            f"memory({resolved!r}) does not take {', '.join(sorted(unknown))}; it takes "
            f"{', '.join(sorted(_COMMON | _KEYS[resolved]))}"
        )
    try:
        conv = Conv(check_user_id(user_id), conversation_id or "default")
        as_conv(conv)
    except ValueError as exc:
        raise InvalidConfiguration(str(exc)) from None
    summary_pipeline = _summary_pipeline(config) if resolved == "summary" else None
    owned: list[Any] = []
    try:
        store = config.get("store")
        if store is None:
            store = _start_store(resolved, config)
            owned.append(store)
        elif not isinstance(store, ChatMemory):
            raise InvalidConfiguration(f"store must be a ChatMemory, got {short_repr(store)}")
        index = config.get("index")
        embedder: Embedder | None = config.get("embedder")
        if index is None and resolved in ("vector", "hybrid"):
            index = RecallIndex.start_link(store, embedder)
            owned.append(index)
        provider = _provider(resolved, store, index, config, summary_pipeline)
    except BaseException:
        for process in reversed(owned):
            with contextlib.suppress(Exception):
                process.stop()
        raise
    return Memory(store, conv, provider, index, owned=owned)


def _summary_pipeline(config: Mapping[str, Any]) -> Pipeline:
    keep = _int(config, "summary_threshold", 10, 0)
    assert keep is not None
    summarizer = config.get("summarizer")
    tokens = _int(config, "max_tokens", None, 0)
    if tokens:
        explicit = _int(config, "max_messages", None, 0)
        if explicit:
            raise InvalidConfiguration(
                "summary takes max_tokens or max_messages, not both (set max_messages=0 "
                "to summarize by tokens)"
            )
        return Pipeline([Summarization(None, keep, summarizer, max_tokens=tokens)])
    count = _int(config, "max_messages", 20, 1)
    assert count is not None
    if keep >= count:
        raise InvalidConfiguration(
            f"summary_threshold ({keep}) must be below max_messages ({count}): it is how "
            "many recent messages a summary keeps"
        )
    return Pipeline([Summarization(count, keep, summarizer)])


def _start_store(kind: str, config: Mapping[str, Any]) -> ChatMemory:
    if kind == "jdbc":
        from ..stores.postgres import PostgresStore  # the extra: imported only when asked for

        options = {k: config[k] for k in ("namespace", "pool_size", "data_dir") if k in config}
        return PostgresStore.start_link(config.get("dsn"), **options)
    if kind != "file":
        return MemoryStore.start_link()
    path = config.get("path")
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise InvalidConfiguration("memory('file') needs path=<a directory for its LevelDB>")
    sync = config.get("sync", True)
    if not isinstance(sync, bool):
        raise InvalidConfiguration(f"sync must be a bool, got {short_repr(sync)}")
    return LevelDBStore.start_link(path, sync=sync)


def _provider(
    kind: str,
    store: ChatMemory,
    index: RecallIndexHandle | None,
    config: Mapping[str, Any],
    summary: Pipeline | None,
) -> MemoryProvider:
    if kind in ("window", "file", "jdbc"):
        window = _int(config, "max_messages", 100 if kind == "window" else None, 1)
        return DefaultProvider(store, window)
    if kind == "summary":
        assert summary is not None
        return PipelineProvider(store, summary)
    if kind == "hybrid":
        assert index is not None
        try:
            return HybridProvider(
                store,
                index,
                **{k: config[k] for k in _KEYS["hybrid"] if k in config},
            )
        except (TypeError, ValueError) as exc:
            raise InvalidConfiguration(str(exc)) from None
    return DefaultProvider(store)


__all__ = ["InvalidConfiguration", "InvalidMemoryType", "Memory", "memory"]
