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
from collections.abc import Mapping
from typing import Any

from ..messages import Conv, as_conv, check_user_id, short_repr
from ..stores import ChatMemory, LevelDBStore, MemoryStore
from ._conversation_memory import InvalidConfiguration, Memory
from .pipeline import Pipeline
from .provider import DefaultProvider, MemoryProvider, PipelineProvider
from .recall import Embedder, HybridProvider, RecallIndex, RecallIndexHandle
from .strategies import Summarization


class InvalidMemoryType(ValueError):
    """``memory(kind)`` with a kind it does not know; the message lists the kinds."""


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
