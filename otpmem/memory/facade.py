"""bx-ai's memory API over otpmem: a ``Memory`` bound to one conversation, and ``memory()``.

For people coming from bx-ai's ``aiMemory(memory, key, userId, conversationId, config)``::

    mem = memory("hybrid", key="chat-42", user_id="ann", config={"recentLimit": 5})
    mem.set_system_message("You are terse.")
    mem.add("I'm allergic to peanuts")              # a str is a user message
    mem.get_relevant("what am I allergic to?", limit=3)
    agent = Agent.start_link(llm=model, memory=mem) # runs over this conversation
    mem.close()                                     # stops what memory() started

Kinds (case-insensitive, with bx-ai's aliases): ``window`` (``buffer``, ``buffered``),
``summary`` (a rolling summary), ``vector`` (``boxvector``) and ``hybrid`` (a
``RecallIndex``): a store of their own, or with a key the shared store; ``cache``: always
the application's shared store (``otpmem.default_store()``); ``session``: the shared
store, under the current session (``otpmem.memory.sessions``); ``file``: a
``LevelDBStore`` at ``path``; ``jdbc`` (``database``, ``db``, ``postgres``,
``postgresql``): a ``PostgresStore`` at ``dsn``; a full class path: that ``Memory``
subclass. bx-ai's vector databases (chroma, pinecone, ...) are refused by name.

The key names the memory: a memory whose key is given lives in the shared store, so a
later ``memory(kind, key=k)`` in the process reaches the same conversation; the default
key is a fresh uuid (nobody can name it again, so it gets a store of its own). The
conversation is ``Conv(user_id, key)``, or ``key:conversation_id`` with both (bx-ai's
``key:userId:conversationId``); ``collection`` puts its name in front.

``set_system_message`` replaces: the conversation is rewritten with the new system message
first and no other (bx-ai's semantics), i.e. cleared and re-added, so every reader, every
provider and the index see one system message. The rewrite is two store calls: a crash
between them loses the conversation (it is exported first and returned, for a caller that
must not lose it).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import uuid
from collections.abc import Mapping
from typing import Any

from ..messages import Conv, as_conv, check_user_id, short_repr
from ..stores import ChatMemory, MemoryStore, default_store
from ._conversation_memory import Memory
from ._covered import HybridMemoryProvider, WindowMemoryProvider
from ._file_stores import open_file_store
from ._memory_config import (
    IDENTITY,
    VECTOR_KEYS,
    InvalidConfiguration,
    InvalidMemoryType,
    check_keys,
    int_key,
    merged,
    snake_keys,
    summarizer_of,
    window_size,
    with_aliases,
)
from ._vector_config import EXTERNAL_STORES, VectorSettings, check_vector_provider, vector_settings
from .pipeline import Pipeline
from .provider import MemoryProvider, PipelineProvider
from .recall import RecallIndex, RecallIndexHandle
from .recall.default import default_index
from .sessions import current_session
from .strategies import Summarization
from .summarizers import Summarizer

KINDS = {
    "window": "window",
    "buffer": "window",
    "buffered": "window",
    "session": "session",
    "cache": "cache",
    "summary": "summary",
    "file": "file",
    "vector": "vector",
    "boxvector": "vector",
    "hybrid": "hybrid",
    "jdbc": "jdbc",
    "database": "jdbc",
    "db": "jdbc",
    "postgres": "jdbc",
    "postgresql": "jdbc",
}
SHARED_KINDS = ("cache", "session")
"""Kinds that always live in the application's shared store."""
HYBRID_LIMITS = ("recent_limit", "semantic_limit", "total_limit", "recent_weight")
WINDOWS = {"window": 100, "session": 100}
"""Each windowed kind's default ``max_messages`` (bx-ai's); the others send everything."""


def memory(
    kind: str = "window",
    *,
    key: str | None = None,
    user_id: str | None = None,
    conversation_id: str | None = None,
    config: Mapping[str, Any] | None = None,
    **options: Any,
) -> Memory:
    """A ``Memory`` of one of bx-ai's kinds (see the module docstring and README).

    ``config`` (a dict) and keyword options are one configuration, camelCase or
    snake_case; ``key``, ``userId`` and ``conversationId`` may be in it too. Common:
    ``store``, ``index`` (existing ones: not started, not stopped). window/session/cache:
    ``max_messages`` (100, 100, all; 0: all); summary: ``max_messages`` (20) or
    ``max_tokens``, ``summary_threshold`` (10), ``summarizer`` or ``summary_provider``
    and ``summary_model``; file: ``path`` (``directory_path``), ``sync``; jdbc: ``dsn``
    (``datasource``), ``namespace`` (``table``), ``pool_size``, ``data_dir``; vector and
    hybrid: the vector keys (``otpmem.memory._vector_config``); hybrid: ``recent_limit``,
    ``semantic_limit``, ``total_limit``, ``recent_weight``, ``vector_provider``,
    ``vector_config``; cache: ``cache_name`` ("default", the shared store).
    """
    cls, resolved = _kind(kind)
    settings = with_aliases(resolved, merged(config, options))
    ids = _identity(settings, key=key, user_id=user_id, conversation_id=conversation_id)
    check_keys(resolved, settings, cls.config_keys)
    own = {k: settings.pop(k) for k in cls.config_keys if k in settings}
    if resolved == "cache" and settings.get("cache_name", "default") != "default":
        raise InvalidConfiguration(
            "cache_name names the shared store a cache memory lives in; otpmem has one, "
            f"'default' (otpmem.default_store()), got {short_repr(settings['cache_name'])}; "
            "pass store= for another"
        )
    owned: list[Any] = []  # what close() stops, and a failure below too
    try:
        vector = _vector(resolved, settings)
        owned += vector.closing if vector is not None else []
        conv, name, shared = _address(resolved, ids, vector)
        summarizer, client = summarizer_of(settings) if resolved == "summary" else (None, None)
        if client is not None:
            owned.append(client)
        pipeline = _summary_pipeline(settings, summarizer) if resolved == "summary" else None
        in_shared = shared and "store" not in settings and resolved not in ("file", "jdbc")
        store = _store(resolved, settings, in_shared, owned)
        index = _index(settings, store, vector, in_shared, owned)
        provider = _provider(resolved, store, index, settings, pipeline)
        mem = cls(store, conv, provider, index, owned=owned, key=name, kind=resolved)
    except BaseException:
        _stop(owned)
        raise
    if vector is not None:
        mem.metric, mem.collection = vector.metric, vector.collection
    if resolved == "summary":
        mem.summarizer = summarizer
        mem.keep_recent = int_key(settings, "summary_threshold", 10, 0) or 0
    try:
        mem.configure(own)
    except BaseException:
        mem.close()
        raise
    return mem


def _kind(kind: object) -> tuple[type[Memory], str]:
    if not isinstance(kind, str):
        raise InvalidMemoryType(f"a memory kind is a str, got {short_repr(kind)}")
    name = kind.strip().lower()
    if name in EXTERNAL_STORES and name not in KINDS:
        raise InvalidConfiguration(
            f"memory kind {kind!r} is a vector database otpmem does not talk to; use "
            "'vector' (a RecallIndex over the conversation store) or 'hybrid', or 'jdbc' "
            "for conversations in PostgreSQL"
        )
    resolved = KINDS.get(name)
    if resolved is not None:
        return Memory, resolved
    if "." in kind.strip():
        cls = memory_class(kind.strip())
        base = KINDS.get(str(cls.base_kind).lower())
        if base is None:
            raise InvalidMemoryType(
                f"memory class {kind!r} has base_kind {cls.base_kind!r}, not a memory kind"
            )
        return cls, base
    external = ", ".join(sorted(set(EXTERNAL_STORES) - set(KINDS)))
    raise InvalidMemoryType(
        f"unknown memory kind {kind!r}; choose one of {', '.join(sorted(KINDS))}, or give a "
        f"full class path (package.module.Class); the vector databases {external} are "
        "refused (InvalidConfiguration): use 'vector'"
    )


def _identity(settings: dict[str, Any], **given: Any) -> dict[str, Any]:
    """key, user_id, conversation_id: from the arguments or from the config, not both."""
    ids = dict(given)
    for name in IDENTITY:
        if name in settings:
            value = settings.pop(name)
            if ids[name] is not None:
                raise InvalidConfiguration(f"{name} given as an argument and in config")
            ids[name] = value
    for name in ("key", "conversation_id"):
        value = ids[name]
        if value is not None and (type(value) is not str or not value):
            raise InvalidConfiguration(f"{name} must be a non-empty str, got {short_repr(value)}")
    try:
        ids["user_id"] = check_user_id(ids["user_id"])
    except ValueError as exc:
        raise InvalidConfiguration(str(exc)) from None
    return ids


def _vector(kind: str, settings: dict[str, Any]) -> VectorSettings | None:
    """The vector keys (hybrid's may sit in ``vector_config``), checked and built."""
    if kind == "hybrid":
        check_vector_provider(settings.get("vector_provider"))
        nested = settings.get("vector_config") or {}
        if not isinstance(nested, Mapping):
            raise InvalidConfiguration(f"vector_config must be a dict, got {short_repr(nested)}")
        nested = snake_keys(nested, "vector_config")
        unknown = set(nested) - VECTOR_KEYS
        if unknown:
            raise InvalidConfiguration(
                f"vector_config does not take {', '.join(sorted(unknown))}; it takes "
                f"{', '.join(sorted(VECTOR_KEYS))}"
            )
        twice = sorted(set(nested) & set(settings))
        if twice:
            raise InvalidConfiguration(f"{', '.join(twice)} given in vector_config and beside it")
        return vector_settings({**settings, **nested}, "")
    if kind == "vector":
        return vector_settings(settings, "")
    return None


def _address(
    kind: str, ids: Mapping[str, Any], vector: VectorSettings | None
) -> tuple[Conv, str, bool]:
    """(the conversation, the key, whether the memory lives in a shared store)."""
    key, conversation_id = ids["key"], ids["conversation_id"]
    named = key is not None or kind in SHARED_KINDS
    if kind == "session" and key is None:
        key = current_session()
        if key is None:
            raise InvalidConfiguration(
                "memory('session') needs a session: call it inside "
                "otpmem.memory.sessions.session_scope(session_id), or give key="
            )
    if key is None:
        key = uuid.uuid4().hex
    if conversation_id is None:
        conv_id = key
    else:
        conv_id = (
            f"{key}:{conversation_id}"
            if ids["key"] is not None or kind == "session"
            else conversation_id
        )
    collection = vector.collection if vector is not None else None
    if collection is not None:
        alone = ids["key"] is None and conversation_id is None
        conv_id = collection if alone else f"{collection}/{conv_id}"
        named = True
    try:
        conv = as_conv(Conv(ids["user_id"], conv_id))
    except ValueError as exc:
        raise InvalidConfiguration(str(exc)) from None
    return conv, key, named


def _summary_pipeline(config: Mapping[str, Any], summarizer: Summarizer | None) -> Pipeline:
    keep = int_key(config, "summary_threshold", 10, 0)
    assert keep is not None
    tokens = int_key(config, "max_tokens", None, 0)
    if tokens:
        explicit = int_key(config, "max_messages", None, 0)
        if explicit:
            raise InvalidConfiguration(
                "summary takes max_tokens or max_messages, not both (set max_messages=0 "
                "to summarize by tokens)"
            )
        return Pipeline([Summarization(None, keep, summarizer, max_tokens=tokens)])
    count = int_key(config, "max_messages", 20, 1)
    assert count is not None
    if keep >= count:
        raise InvalidConfiguration(
            f"summary_threshold ({keep}) must be below max_messages ({count}): it is how "
            "many recent messages a summary keeps"
        )
    return Pipeline([Summarization(count, keep, summarizer)])


def _store(kind: str, config: Mapping[str, Any], in_shared: bool, owned: list[Any]) -> ChatMemory:
    store = config.get("store")
    if store is not None:
        if not isinstance(store, ChatMemory):
            raise InvalidConfiguration(f"store must be a ChatMemory, got {short_repr(store)}")
        return store
    if kind == "jdbc":
        from ..stores.postgres import PostgresStore  # the extra: imported only when asked for

        options = {k: config[k] for k in ("namespace", "pool_size", "data_dir") if k in config}
        started: ChatMemory = PostgresStore.start_link(config.get("dsn"), **options)
    elif kind == "file":
        path = config.get("path")
        if not isinstance(path, str | os.PathLike) or not os.fspath(path):
            raise InvalidConfiguration("memory('file') needs path=<a directory for its LevelDB>")
        sync = config.get("sync", True)
        if not isinstance(sync, bool):
            raise InvalidConfiguration(f"sync must be a bool, got {short_repr(sync)}")
        try:
            started, lease = open_file_store(path, sync)
        except ValueError as exc:
            raise InvalidConfiguration(str(exc)) from None
        owned.append(lease)
        return started
    elif in_shared:
        # Found by name at every call: it follows the application's restarts of it.
        return default_store()  # type: ignore[no-any-return]
    else:
        started = MemoryStore.start_link()
    owned.append(started)
    return started


def _index(
    config: Mapping[str, Any],
    store: ChatMemory,
    vector: VectorSettings | None,
    in_shared: bool,
    owned: list[Any],
) -> RecallIndexHandle | None:
    index = config.get("index")
    if index is not None:
        if not isinstance(index, RecallIndexHandle):
            raise InvalidConfiguration(
                f"index must be a RecallIndex handle, got {short_repr(index)}"
            )
        return index
    if vector is None:
        return None
    if in_shared and vector.default_index:
        return default_index()  # the application's, over the shared store
    started = RecallIndex.start_link(store, vector.embedder)
    owned.append(started)
    return started


def _provider(
    kind: str,
    store: ChatMemory,
    index: RecallIndexHandle | None,
    config: Mapping[str, Any],
    summary: Pipeline | None,
) -> MemoryProvider:
    if kind == "summary":
        assert summary is not None
        return PipelineProvider(store, summary)
    if kind == "hybrid":
        assert index is not None
        limits = {k: config[k] for k in HYBRID_LIMITS if k in config}
        try:
            return HybridMemoryProvider(store, index, **limits)
        except (TypeError, ValueError) as exc:
            raise InvalidConfiguration(str(exc)) from None
    return WindowMemoryProvider(store, window_size(config, WINDOWS.get(kind)))


def _stop(owned: list[Any]) -> None:
    for thing in reversed(owned):
        with contextlib.suppress(Exception):
            if hasattr(thing, "alive"):
                thing.stop()
            else:
                thing.close()


__all__ = ["InvalidConfiguration", "InvalidMemoryType", "Memory", "memory"]


def memory_class(path: str) -> type[Memory]:
    """The ``Memory`` subclass a full class path names; ``InvalidMemoryType`` naming the
    path and why otherwise."""
    module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise InvalidMemoryType(f"memory class {path!r} is not a full class path (module.Class)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidMemoryType(
            f"memory class {path!r}: cannot import {module_name!r} ({exc})"
        ) from None
    found = getattr(module, attribute, None)
    if found is None:
        raise InvalidMemoryType(f"memory class {path!r}: {module_name!r} has no {attribute!r}")
    if not isinstance(found, type) or not issubclass(found, Memory):
        raise InvalidMemoryType(
            f"memory class {path!r} is {short_repr(found)}, not a subclass of otpmem.memory.Memory"
        )
    return found
