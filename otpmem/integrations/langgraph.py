"""``OtpmemStore``: LangGraph's long-term ``BaseStore`` over otpmem's facts and recall;
``OtpmemSaver`` (from ``langgraph_checkpoint``): its checkpointer over any otpmem store.

::

    store = OtpmemStore(otpmem.default_store(), tenant_index=1)   # ("memories", user_id)
    graph = builder.compile(checkpointer=InMemorySaver(), store=store)

Layout (``otpmem[langgraph]``):

- An item is a **fact** of its tenant: ``Fact(user_id=tenant, key='langgraph:["ns", ...,
  "key"]', value=json)``; the store versions it, dates it (``created_at``/``updated_at``
  become the item's) and keeps the one before in ``fact_history``. Durable on LevelDB,
  supervised, and gone with ``forget_user`` like the rest of the tenant's memory.
- A put that is indexed (``index=None``: the ``fields`` given at construction, default the
  whole value; ``index=[...]``: those fields; ``False``: none) also appends the item's text
  to the tenant's conversation ``"langgraph:index"``, tagged with its namespace, key and
  fact version. ``search(prefix, query=...)`` asks the ``RecallIndex`` within that one
  conversation and keeps only records whose version is the item's current one, so an
  overwritten or deleted item is never found by its old text.
- The **tenant** is fixed (``user_id="ann"``: every namespace is Ann's) or read from the
  namespace (``tenant_index=1``: ``("memories", "ann", ...)`` is Ann's); an operation whose
  namespace or prefix does not reach that position is refused, so no search or listing
  ever crosses tenants. TTLs are not supported (``supports_ttl = False``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import get_text_at_path

from .. import aio
from ..memory.recall import STANDALONE, RecallIndex, RecallIndexHandle
from ..messages import Conv, freeze_value, short_repr, thaw
from ..stores import ChatMemory, Fact
from .langgraph_checkpoint import OtpmemSaver

KEY_PREFIX = "langgraph:"
INDEX_CONVERSATION = "langgraph:index"
RECORD_KEY = "langgraph"
MAX_ITEMS = 100_000
"""Items one tenant may hold (the facts cap the store applies to each save)."""


class OtpmemStore(BaseStore):
    """A LangGraph ``BaseStore`` kept in an otpmem store and searched by its recall index."""

    supports_ttl = False

    def __init__(
        self,
        store: ChatMemory,
        index: RecallIndexHandle | None = None,
        *,
        user_id: str | None = None,
        tenant_index: int | None = None,
        fields: Sequence[str] = ("$",),
        max_items: int = MAX_ITEMS,
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(store, ChatMemory) or not hasattr(store, "save_fact"):
            raise TypeError(f"store must be an otpmem store with facts, got {store!r}")
        if (user_id is None) == (tenant_index is None):
            raise ValueError("give exactly one of user_id= (a fixed tenant) or tenant_index=")
        if tenant_index is not None and (type(tenant_index) is not int or tenant_index < 0):
            raise ValueError(f"tenant_index must be an int >= 0, got {tenant_index!r}")
        self.store: Any = store
        self.user_id = user_id
        self.tenant_index = tenant_index
        self.fields = _check_fields(fields, "fields")
        self.max_items = max_items
        self.timeout = timeout
        self._owns_index = index is None
        self.index = index if index is not None else RecallIndex.start_link(store)

    def close(self) -> None:
        """Stop the recall index this store started (none if it was given one)."""
        if self._owns_index and self.index.alive:
            self.index.stop()

    # -- tenancy and keys -------------------------------------------------------------------

    def _tenant(self, namespace: tuple[str, ...]) -> str:
        if self.user_id is not None:
            return self.user_id
        assert self.tenant_index is not None
        if len(namespace) <= self.tenant_index or not namespace[self.tenant_index]:
            raise ValueError(
                f"namespace {namespace!r} names no tenant: its label {self.tenant_index} "
                "is the user id (tenant_index), so every namespace and prefix must reach it"
            )
        return namespace[self.tenant_index]

    def _facts(self, tenant: str) -> dict[tuple[str, ...], tuple[Fact, Any]]:
        """Every item of the tenant: (namespace + key) -> (its fact, its value)."""
        found = {}
        for fact in self.store.get_facts(tenant):
            if fact.key.startswith(KEY_PREFIX):
                path = tuple(json.loads(fact.key[len(KEY_PREFIX) :]))
                found[path] = (fact, json.loads(fact.value))
        return found

    # -- BaseStore --------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; one result per op (None for a put)."""
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise TypeError(f"unknown LangGraph store operation {op!r}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch``, awaited through ``otpmem.aio`` (no executor thread)."""
        return await aio.run(self.batch, list(ops))

    def _get(self, op: GetOp) -> Item | None:
        _check_path(op.namespace, op.key)
        tenant = self._tenant(op.namespace)
        fact = self.store.get_fact(tenant, _fact_key(op.namespace, op.key))
        return None if fact is None else _item(op.namespace, op.key, fact, json.loads(fact.value))

    def _put(self, op: PutOp) -> None:
        _check_path(op.namespace, op.key)
        tenant = self._tenant(op.namespace)
        key = _fact_key(op.namespace, op.key)
        if op.value is None:
            self.store.delete_fact(tenant, key)
            return
        if not isinstance(op.value, Mapping):
            raise TypeError(
                f"put({op.key!r}): a LangGraph item's value is a dict, got "
                f"{type(op.value).__name__} {short_repr(op.value)}"
            )
        index = (
            op.index if op.index is None or op.index is False else _check_fields(op.index, "index")
        )
        # The rules of a message's metadata (NaN, nesting, JSON types), as in every store.
        checked = thaw(freeze_value(dict(op.value), "value"))
        value = json.dumps(checked, sort_keys=True, separators=(",", ":"), allow_nan=False)
        saved = self.store.save_fact(Fact(tenant, key, value), max_facts=self.max_items)
        fields = self.fields if index is None else index
        if fields is False or not fields:
            return
        texts = [t for path in fields for t in get_text_at_path(op.value, path)]
        record = {"ns": list(op.namespace), "key": op.key, "version": saved.version}
        self.store.add(
            Conv(tenant, INDEX_CONVERSATION),
            [
                {
                    "role": "user",
                    "content": "\n".join(texts),
                    "metadata": {RECORD_KEY: record, STANDALONE: True},
                }
            ],
        )

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        _check_path(prefix)
        tenant = self._tenant(prefix)
        if op.filter is not None and not isinstance(op.filter, Mapping):
            raise TypeError(
                f"search filter is a dict of field -> value, got "
                f"{type(op.filter).__name__} {short_repr(op.filter)}"
            )
        wanted = None if op.filter is None else thaw(freeze_value(dict(op.filter), "filter"))
        items = {
            path: entry
            for path, entry in self._facts(tenant).items()
            if path[: len(prefix)] == prefix and _matches(entry[1], wanted)
        }
        ranked: list[tuple[tuple[str, ...], float | None]] = []
        if op.query:
            versions = {path: fact.version for path, (fact, _) in items.items()}

            def current(message: Mapping[str, Any]) -> bool:
                metadata = message.get("metadata")
                record = metadata.get(RECORD_KEY) if isinstance(metadata, Mapping) else None
                if not isinstance(record, Mapping):
                    return False
                path = (*record["ns"], record["key"])
                return bool(versions.get(path) == record["version"])

            hits = self.index.get_relevant(
                op.query,
                conversation=Conv(tenant, INDEX_CONVERSATION),
                limit=op.offset + op.limit,
                filter=current,
                timeout=self.timeout,
            )
            for hit in hits:
                record = hit.message["metadata"][RECORD_KEY]
                ranked.append(((*record["ns"], record["key"]), hit.score))
        chosen = {path for path, _ in ranked}
        # Then the rest, newest first: a query ranks what it matches, a listing is by date
        # (LangGraph's InMemoryStore pads a query's results with unscored items the same way).
        rest = sorted(
            (p for p in items if p not in chosen),
            key=lambda p: items[p][0].updated_at,
            reverse=True,
        )
        ranked.extend((p, None) for p in rest)
        window = ranked[op.offset : op.offset + op.limit]
        return [_search_item(path, items[path], score) for path, score in window]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefixes = [tuple(c.path) for c in conditions if c.match_type == "prefix"]
        if self.user_id is not None:
            tenants = [self.user_id]
        else:
            reach = self._reach()
            tenants = [
                self._tenant(p) for p in prefixes if len(p) >= reach and "*" not in p[:reach]
            ]
            if not tenants:
                raise ValueError(
                    "list_namespaces needs a prefix that names the tenant (its label "
                    f"{self.tenant_index}): no listing crosses tenants"
                )
        found: set[tuple[str, ...]] = set()
        for tenant in dict.fromkeys(tenants):
            for path in self._facts(tenant):
                namespace = path[:-1]
                if all(_condition(c.match_type, tuple(c.path), namespace) for c in conditions):
                    found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
        return sorted(found)[op.offset : op.offset + op.limit]

    def _reach(self) -> int:
        return 0 if self.tenant_index is None else self.tenant_index + 1


def _check_path(namespace: Any, key: object = "") -> None:
    """A namespace is a tuple of non-empty str labels, a key a str (``TypeError`` naming it)."""
    # Exact types: a subclass's __iter__ would be the caller's.
    if type(namespace) not in (tuple, list) or not all(
        type(label) is str and label for label in namespace
    ):
        raise TypeError(f"a namespace is a tuple of non-empty str, got {short_repr(namespace)}")
    if type(key) is not str:
        raise TypeError(f"an item key is a str, got {short_repr(key)}")


def _check_fields(fields: object, name: str) -> list[str]:
    """Index fields are a list of str paths (``TypeError`` naming ``name``: a bare str is
    one path, not its letters)."""
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise TypeError(
            f"{name} is a list of field paths such as ['text'], got {short_repr(fields)}"
        )
    if not all(isinstance(f, str) for f in fields):
        raise TypeError(f"{name} is a list of str field paths, got {short_repr(fields)}")
    return list(fields)


def _fact_key(namespace: tuple[str, ...], key: str) -> str:
    encoded = KEY_PREFIX + json.dumps([*namespace, key], separators=(",", ":"))
    if len(encoded) > 200:
        raise ValueError(
            f"namespace and key {(*namespace, key)!r} are too long for an otpmem fact key "
            "(at most 200 characters, encoded)"
        )
    return encoded


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _item(namespace: tuple[str, ...], key: str, fact: Fact, value: Any) -> Item:
    return Item(
        value=value,
        key=key,
        namespace=namespace,
        created_at=_when(fact.created_at),
        updated_at=_when(fact.updated_at),
    )


def _search_item(path: tuple[str, ...], entry: tuple[Fact, Any], score: float | None) -> SearchItem:
    fact, value = entry
    return SearchItem(
        path[:-1], path[-1], value, _when(fact.created_at), _when(fact.updated_at), score
    )


def _condition(kind: str, pattern: tuple[str, ...], namespace: tuple[str, ...]) -> bool:
    if len(pattern) > len(namespace):
        return False
    part = namespace[: len(pattern)] if kind == "prefix" else namespace[-len(pattern) :]
    return all(p == "*" or p == n for p, n in zip(pattern, part, strict=True))


_OPERATORS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _matches(value: Mapping[str, Any], wanted: Mapping[str, Any] | None) -> bool:
    """LangGraph's search filter: each field equal, or ``{"$gt": x, ...}`` comparisons."""
    for field, expected in (wanted or {}).items():
        actual = value.get(field)
        if isinstance(expected, Mapping) and expected and all(k in _OPERATORS for k in expected):
            try:
                if not all(_OPERATORS[k](actual, v) for k, v in expected.items()):
                    return False
            except TypeError:
                return False
        elif actual != expected:
            return False
    return True


__all__ = ["INDEX_CONVERSATION", "KEY_PREFIX", "OtpmemSaver", "OtpmemStore"]
