"""RecallIndex: a supervised server that ranks a store's messages for a query.

It pulls, never pushes: on every query it first brings the querying tenant level with the
store through the store's public reads (``tenants.Tenants``: read-your-writes with no hook
in the write path), then ranks that tenant's partition alone. It also answers the store's
own ``search`` while it runs (``otpmem.stores.ranking``).

Over a LevelDBStore or a PostgresStore it keeps its partitions beside the store
(``snapshots``), so after a crash, a restart or a reopen a tenant's first query reloads
that tenant's snapshot and indexes only what is newer; over a MemoryStore (or with
``snapshots=False``) a tenant's first query re-indexes it from the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...actors import (
    CallTimeout,
    GenServer,
    NoProcess,
    blocking,
    current,
    is_tagged,
    on_exit,
    send_after,
)
from ...messages import Conv, short_repr
from ...stores import ChatMemory, SearchHit, StoreError
from ...stores.ranking import attach_index, detach_index
from .base import Embedder, EmbedderError
from .handle import Owner, RecallIndexHandle, check_request, ranked_search

if TYPE_CHECKING:
    from .queries import Engine

MAX_DOCUMENTS = 5_000_000
"""Past this many indexed messages, the least recently queried tenants are evicted (and
re-indexed on their next query)."""

DEFAULT_WEIGHTS = (1.0, 0.0)
"""(lexical, vector) without an embedder of your own: BM25 alone. ``HashingEmbedder``
fused at any weight lowered recall@10 on benchmarks/recall_eval (on four of its six
conversations: 0.604 alone; fused at 0.1, 0.567; at 1, 0.525), so by default no vector is
computed or held at all."""

EMBEDDER_WEIGHTS = (1.0, 1.0)
"""(lexical, vector) with an embedder you give: equal weight, until your measurements say
otherwise (benchmarks/recall_eval.py runs on your embedder too)."""

CONTEXT = (0.5, 0.3, 1.0)
"""How much a document's context counts beside its own text's BM25: (the previous
message's text, the following message's, its speaker and date). Chosen on four of the six
conversations of benchmarks/recall_eval; over all six, recall@10 is 0.515 with the own
text alone and 0.601 with these."""

FLUSH_DELAY = 0.05
"""Seconds after an answer before the snapshot chunks it queued are written (batched)."""
RETRY_DELAY = 5.0
"""Seconds before a failed snapshot write's deletions are tried again."""
STOP_FLUSH = 3.0
"""Seconds a stopping index spends writing queued chunks at most (the rest is re-indexed)."""


class RecallIndex(GenServer):
    """Ranked, tenant-safe recall over a store::

        store = MemoryStore.start_link()
        index = RecallIndex.start_link(store)
        store.add(Conv("ann", "c1"), [{"role": "user", "content": "I'm allergic to peanuts"}])
        index.get_relevant("what allergies do I have?", user_id="ann")[0].message

    ``weights=(lexical, vector)`` weighs the two rankings in the fusion: ``(1, 0)`` is BM25
    alone (the default without an ``embedder``), ``(0, 1)`` the embedder alone (with an
    ``embedder``, the default is ``(1, 1)``). ``context=(previous, following, meta)``
    weighs what a message's neighbours and its speaker and date add to its own BM25. Give
    it a named handle of a supervised store (``MemoryStore.named("memory")``) so its reads
    follow the store across restarts; supervise it with ``child_spec``.
    """

    caller_errors = (ValueError, TypeError, EmbedderError, NoProcess, StoreError, CallTimeout)
    handle_class = RecallIndexHandle

    @classmethod
    def start_link(
        cls,
        store: ChatMemory,
        embedder: Embedder | None = None,
        name: str | None = None,
        *,
        max_documents: int = MAX_DOCUMENTS,
        weights: tuple[float, float] | None = None,
        context: tuple[float, float, float] = CONTEXT,
        snapshots: bool = True,
        start_timeout: float | None = 5.0,
    ) -> RecallIndexHandle:
        """Start an index over ``store`` (BM25 with context; fused with ``embedder``'s
        vectors when given), linked to the caller. ``snapshots=False``: keep nothing
        beside a durable store (see ``snapshots``); every restart then re-indexes."""
        args = (*_checked(store, embedder, max_documents, weights, context), _flag(snapshots))
        handle = cls.spawn(args, {}, link=True, name=name, start_timeout=start_timeout)
        assert isinstance(handle, RecallIndexHandle)
        return handle

    @classmethod
    def start(
        cls,
        store: ChatMemory,
        embedder: Embedder | None = None,
        name: str | None = None,
        *,
        max_documents: int = MAX_DOCUMENTS,
        weights: tuple[float, float] | None = None,
        context: tuple[float, float, float] = CONTEXT,
        snapshots: bool = True,
        start_timeout: float | None = 5.0,
    ) -> RecallIndexHandle:
        """Like ``start_link``, without the link (nobody is told when it exits)."""
        args = (*_checked(store, embedder, max_documents, weights, context), _flag(snapshots))
        handle = cls.spawn(args, {}, link=False, name=name, start_timeout=start_timeout)
        assert isinstance(handle, RecallIndexHandle)
        return handle

    @classmethod
    def child_spec(
        cls,
        store: ChatMemory,
        name: str,
        embedder: Embedder | None = None,
        child_id: str | None = None,
        *,
        snapshots: bool = True,
    ) -> Any:
        """A ChildSpec for a supervisor: the index named ``name`` over ``store``."""
        from ...supervisors import ChildSpec

        _flag(snapshots)
        return ChildSpec(
            child_id or name,
            start=lambda: cls.start_link(store, embedder, name, snapshots=snapshots),
        )

    def init(
        self,
        store: ChatMemory,
        embedder: Embedder | None,
        max_documents: int,
        weights: tuple[float, float] = DEFAULT_WEIGHTS,
        context: tuple[float, float, float] = CONTEXT,
        snapshots: bool = True,
    ) -> None:
        self.config = (store, embedder, max_documents, weights, context)
        self.keeps = snapshots
        self._engine: Engine | None = None
        self._flush_due = False
        self._attach(store)
        on_exit(self._closed)

    def engine(self) -> Engine:
        """The index's state and queries, built on first use: the numpy import and the
        embedder's construction wait for the first query, not the start."""
        if self._engine is None:
            from .queries import Engine
            from .snapshots import Snapshots

            engine = Engine(*self.config)
            if self.keeps:
                engine.tenants.snapshots = Snapshots(self.config[0], engine.embedder)
            self._engine = engine
        return self._engine

    def _snapshots(self) -> Any:
        return None if self._engine is None else self._engine.tenants.snapshots

    def _write_later(self, delay: float = FLUSH_DELAY) -> None:
        """Have the chunks queued so far written shortly (after this answer goes out)."""
        snapshots = self._snapshots()
        if snapshots is not None and snapshots.due and not self._flush_due:
            self._flush_due = True
            send_after(delay, self.handle, ("write_snapshots",))

    def handle_info(self, message: Any) -> Any:
        if not is_tagged(message, "write_snapshots", 1):
            return super().handle_info(message)
        self._flush_due = False
        snapshots = self._snapshots()
        if snapshots is not None:
            from .snapshots import FLUSH_MESSAGES

            failed = blocking(snapshots.flush, FLUSH_MESSAGES) < 0
            self._write_later(RETRY_DELAY if failed else 0.0)
        return None

    def terminate(self, reason: Any) -> None:
        snapshots = self._snapshots()
        if snapshots is not None:
            import time

            blocking(snapshots.drain, ..., time.monotonic() + STOP_FLUSH)
            blocking(snapshots.close, False)

    def _closed(self) -> None:
        # After a kill (no terminate): the shelf is parked, for a restart to adopt.
        snapshots = self._snapshots()
        if snapshots is not None:
            snapshots.close(True)

    def _attach(self, store: ChatMemory) -> None:
        """Answer ``store.search`` from this incarnation until it exits (see stores.ranking)."""
        me = RecallIndexHandle(current())

        def search(
            query: str,
            owner: Owner,
            only: Conv | None,
            limit: int,
            mode: str,
            timeout: float | None,
        ) -> list[SearchHit]:
            return ranked_search(me, query, owner, only, limit, mode=mode, timeout=timeout)

        try:
            token = attach_index(store, search)
        except ValueError:
            return  # not a store handle: its search (if any) is not StoreClient's
        on_exit(lambda: detach_index(token))

    def handle_call(self, message: Any) -> Any:
        kind, args = check_request(message)
        engine = self.engine()
        try:
            return self._answer(engine, kind, args)
        finally:
            self._write_later()

    def _answer(self, engine: Engine, kind: str, args: tuple[Any, ...]) -> Any:
        if kind == "flush":
            snapshots = engine.tenants.snapshots
            return snapshots is None or snapshots.off or bool(blocking(snapshots.drain))
        if kind == "relevant":
            return engine.relevant(*args)
        if kind == "lexical":
            return engine.lexical(*args)
        if kind == "substring":
            return engine.substring(*args)
        if kind == "group":
            return engine.group(*args)
        if kind == "refresh":
            return engine.refresh(*args)
        if kind == "forget":
            engine.tenants.forget(*args)
            return None
        if kind == "forget_user":
            engine.tenants.forget_user(*args)
            return None
        return engine.stats()  # "stats", the only other request check_request lets through


def _flag(snapshots: object) -> bool:
    if type(snapshots) is not bool:
        raise TypeError(f"snapshots must be True or False, got {short_repr(snapshots)}")
    return snapshots


def _checked(
    store: object, embedder: object, max_documents: object, weights: object, context: object
) -> tuple[ChatMemory, Embedder | None, int, tuple[float, float], tuple[float, float, float]]:
    """``start_link``'s arguments, checked in the caller's thread (embedder None: no vectors,
    unless ``weights`` give them a weight: then ``HashingEmbedder()``, made with the engine
    on the first query)."""
    if not isinstance(store, ChatMemory):
        raise TypeError(f"store must implement ChatMemory, got {short_repr(store)}")
    if embedder is not None and not isinstance(embedder, Embedder):
        raise TypeError(f"embedder must have dim and embed(texts), got {short_repr(embedder)}")
    if type(max_documents) is not int or max_documents < 1:
        raise ValueError(f"max_documents must be an int >= 1, got {max_documents!r}")
    if weights is None:
        weights = DEFAULT_WEIGHTS if embedder is None else EMBEDDER_WEIGHTS
    if (
        not isinstance(weights, tuple)
        or len(weights) != 2
        or not all(isinstance(w, int | float) and w >= 0 for w in weights)
        or not sum(weights) > 0
    ):
        raise ValueError(
            f"weights must be (lexical, vector) numbers >= 0, not both 0, got {weights!r}"
        )
    if (
        not isinstance(context, tuple)
        or len(context) != 3
        or not all(
            isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 for w in context
        )
    ):
        raise ValueError(
            f"context must be (previous, following, meta) numbers >= 0, got {short_repr(context)}"
        )
    lexical, vector = (float(w) for w in weights)
    before, after, meta = (float(w) for w in context)
    return store, embedder, max_documents, (lexical, vector), (before, after, meta)
