"""``Memory``: one conversation's memory, with bx-ai's methods (``otpmem.memory.facade``
makes one of a kind with ``memory()``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..messages import ConvLike, InvalidMessage, as_conv, short_repr
from ..stores import EXPORT_FORMAT, EXPORT_VERSION, ChatMemory, parse_import
from ._memory_config import InvalidConfiguration, model_summarizer, snake_keys
from .pipeline import Pipeline
from .provider import BasicMemoryProvider, DefaultProvider
from .recall import Hit, RecallIndexHandle, ranked_search
from .strategies import Summarization
from .summarizers import SummarizeFn, Summarizer


class Memory:
    """One conversation's memory: its store, its conversation, its provider, perhaps an
    index; ``key`` is the name ``memory()`` found it by.

    Methods mirror bx-ai's; writes go to the store (read-your-writes), ``context()`` is
    what the provider would send to a model now. An agent takes it as ``memory=``: it then
    runs over this memory's conversation, store and provider.

    A subclass named by its class path (``memory("pkg.mod.MyMemory", ...)``) is built as
    the kind ``base_kind`` is, with the keys ``config_keys`` added to that kind's; those
    are handed to ``configure`` (snake_case) once it is built.
    """

    base_kind: ClassVar[str] = "window"
    config_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        store: ChatMemory,
        conv: ConvLike,
        provider: BasicMemoryProvider | None = None,
        index: RecallIndexHandle | None = None,
        *,
        owned: Sequence[Any] = (),
        key: str | None = None,
        kind: str | None = None,
    ) -> None:
        if not isinstance(store, ChatMemory):
            raise TypeError(f"store must implement ChatMemory, got {short_repr(store)}")
        self.store = store
        self.conv = as_conv(conv)
        self.provider = provider if provider is not None else DefaultProvider(store)
        self.index = index
        self.key = key if key is not None else self.conv.conversation_id
        self.kind = kind
        self.metric = "cosine"
        self.collection: str | None = None
        self.summarizer: Summarizer | SummarizeFn | None = None
        self.keep_recent = 5  # summarize()'s default; the summary kind's summary_threshold
        self._owned = list(owned)
        self.closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.conv}, {self.provider!r})"

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def configure(self, config: dict[str, Any]) -> None:
        """A subclass's own keys (``config_keys``), once it is built; the base reads none."""

    def close(self) -> None:
        """Stop what ``memory()`` started for this memory (index, then store; clients);
        what lives in a shared store stays there."""
        for process in reversed(self._owned):
            if hasattr(process, "alive"):
                if process.alive:
                    process.stop()
            else:
                process.close()  # an embedder's or a model's connection pool
        self._owned.clear()
        self.closed = True

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
        self,
        keep_recent: int | Mapping[str, Any] | None = None,
        summarizer: Summarizer | SummarizeFn | None = None,
    ) -> dict[str, Any] | None:
        """Fold all but the newest ``keep_recent`` unsummarized messages into a rolling
        summary now; it is stored as a pinned system message (the history stays), sent in
        place of what it covers from then on, and returned; None when there is nothing to
        fold. bx-ai's ``summarize({keepRecent: 5})`` works too (keys ``keep_recent``,
        ``summarizer``, ``provider``, ``model``)."""
        client = None
        if isinstance(keep_recent, Mapping):
            keep_recent, summarizer, client = _summarize_options(keep_recent, summarizer)
        try:
            if keep_recent is None:
                keep_recent = self.keep_recent
            if type(keep_recent) is not int or keep_recent < 0:
                raise ValueError(f"keep_recent must be an int >= 0, got {short_repr(keep_recent)}")
            step = Summarization(keep_recent + 1, keep_recent, summarizer or self.summarizer)
            saved: list[dict[str, Any]] = []
            report = Pipeline([step]).explain(self.get_all(), self.conv, saved.append)
        finally:
            if client is not None:
                client.close()
        if not saved:
            return None
        self.store.add(self.conv, saved)
        return dict(report.summary) if report.summary is not None else saved[0]

    def import_(self, data: Any) -> int:
        """Add the messages of an ``export()`` document (each conversation in it, in order)
        or a list of messages to this conversation, all validated first; return how many
        were added. Idempotent: a batch the conversation already holds (as one run of
        messages: imported before, or exported from here) is not added again, and two
        imports racing store it once (it is keyed by a digest of its messages)."""
        batches: list[list[dict[str, Any]]]
        if isinstance(data, Mapping):
            _check_document(data)
            batches = [list(messages) for _, messages in parse_import(data)]
        else:
            batches = [_messages(data)]
        held = self.get_all() if any(batches) else []
        added = 0
        for batch in batches:
            if not batch or _holds_run(held, batch):
                continue
            self.store.add(self.conv, batch, _import_key(batch))
            held = self.get_all()
            added += len(batch)
        return added

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


def _check_document(data: Mapping[str, Any]) -> None:
    """A document that is not otpmem's export is refused by name before any is read."""
    if data.get("format") != EXPORT_FORMAT or data.get("version") != EXPORT_VERSION:
        raise InvalidMessage(
            f"not an otpmem export (format {EXPORT_FORMAT!r}, version {EXPORT_VERSION}): "
            f"got {short_repr(data.get('format'))}, {short_repr(data.get('version'))}"
        )


def _holds_run(held: Sequence[Mapping[str, Any]], batch: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``batch`` appears in ``held`` as one contiguous run, in order."""
    n = len(batch)
    first = batch[0]
    return any(
        held[start] == first and all(held[start + i] == batch[i] for i in range(1, n))
        for start in range(len(held) - n + 1)
    )


def _import_key(batch: Sequence[Mapping[str, Any]]) -> str:
    """The idempotency key of an imported batch: a digest of its messages (as the stores'
    own ``import_`` keys a conversation of a document)."""
    canonical = json.dumps([dict(m) for m in batch], sort_keys=True, default=str)
    return "import:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _summarize_options(
    options: Mapping[str, Any], summarizer: Summarizer | SummarizeFn | None
) -> tuple[int | None, Summarizer | SummarizeFn | None, Any]:
    """bx-ai's ``summarize(config)``: keep_recent, and a summarizer or a provider/model."""
    given = snake_keys(options, "summarize()")
    unknown = set(given) - {"keep_recent", "summarizer", "provider", "model"}
    if unknown:
        raise InvalidConfiguration(
            f"summarize() does not take {', '.join(sorted(unknown))}; it takes keep_recent, "
            "summarizer, provider, model"
        )
    chosen = given.get("summarizer", summarizer)
    client = None
    if "provider" in given or "model" in given:
        if chosen is not None:
            raise InvalidConfiguration(
                "summarize() takes a summarizer or a provider/model, not both"
            )
        chosen, client = model_summarizer(given.get("provider"), given.get("model"), "summarize()")
    return given.get("keep_recent"), chosen, client
