"""Memory providers: how an agent loads, stores and prepares a conversation.

The provider is the policy over a store (seed 000's second layer): ``history`` loads what
a turn needs, ``append`` stores (the full history is always kept), ``prepare`` turns the
list about to be sent into what is sent, ``clear`` forgets; ``key_position``, ``window``
and ``count`` are what a retried turn reads back (``MemoryProvider``'s exactly-once half,
which ``StoreProvider`` hands to the store).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast, runtime_checkable

from ..messages import Conv, ConvLike, as_conv, is_pinned, short_repr
from ..protocols import conforms
from ..stores import ChatMemory, StoredWindow
from .longterm import LongTermMemory
from .pipeline import Pipeline, PrepareReport, report
from .reads import History, LastReads, read_for
from .strategies import PrepareContext
from .tokens import DEFAULT_COUNTER, TokenCounter
from .window import safe_window


@runtime_checkable
class BasicMemoryProvider(Protocol):
    """The four members every provider has. Contract: ``history`` sees every message whose
    ``append`` returned (read-your-writes), and ``prepare`` never changes what is stored of
    the messages given.

    An agent over a provider of only these stores its turns without keys: a turn retried
    with its ``turn_id`` may store its messages twice. ``MemoryProvider`` adds what makes
    the retry exact.
    """

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        """The stored messages a turn needs, oldest first."""

    def append(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> None:
        """Store ``messages``; returns once they are stored."""

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """What to send of ``messages`` (never a tool result without its call)."""

    def clear(self, conv: ConvLike) -> None:
        """Forget the conversation."""


@runtime_checkable
class MemoryProvider(BasicMemoryProvider, Protocol):
    """The policy layer, with the exactly-once contract an agent's turns rely on: keyed
    writes (``ChatMemory.add``'s ``idempotency_key`` and ``follows``), and the reads a
    retried turn makes to find what its earlier attempt stored (``key_position``,
    ``window``, ``count``, of the whole stored conversation, as a store answers them).
    Every provider otpmem ships implements it."""

    def append(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
    ) -> None:
        """Store ``messages``; returns once they are stored. A batch whose
        ``idempotency_key`` the conversation holds stores nothing; with ``follows``, it is
        stored only while the batch keyed ``follows`` is (else ``ConversationCleared``)."""

    def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        """Where the batch stored with ``idempotency_key`` begins, or None if none is."""

    def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` stored messages and the pinned ones before them, in one read."""

    def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds."""


EXACTLY_ONCE = ("key_position", "window", "count")
"""What ``MemoryProvider`` adds to ``BasicMemoryProvider``'s members (besides ``append``'s
keys): a provider that has some of them but not all is refused, not downgraded."""


def check_provider(provider: object) -> BasicMemoryProvider:
    """``provider`` if it is a ``MemoryProvider``, or a ``BasicMemoryProvider`` with none of
    the exactly-once members; else a TypeError naming what it lacks."""
    if conforms(provider, MemoryProvider):
        return cast(MemoryProvider, provider)
    has = [name for name in EXACTLY_ONCE if callable(getattr(provider, name, None))]
    if conforms(provider, BasicMemoryProvider):
        if not has:
            return cast(BasicMemoryProvider, provider)
        lacks = [name for name in EXACTLY_ONCE if name not in has]
        raise TypeError(
            f"{short_repr(provider)} keeps part of the exactly-once contract: it lacks "
            f"{', '.join(lacks)} (a MemoryProvider has {', '.join(EXACTLY_ONCE)}; a "
            "BasicMemoryProvider none of them)"
        )
    basic = ("history", "append", "prepare", "clear")
    lacks = [name for name in basic if not callable(getattr(provider, name, None))]
    raise TypeError(
        f"a memory provider needs {', '.join(basic)} (and for exactly-once turns "
        f"{', '.join(EXACTLY_ONCE)}: otpmem.memory.MemoryProvider); {short_repr(provider)} "
        f"lacks {', '.join(lacks)}"
    )


def check_store(store: object) -> ChatMemory:
    """``store`` if it implements ``ChatMemory``; else a TypeError naming what it lacks."""
    if conforms(store, ChatMemory):
        return cast(ChatMemory, store)
    needed = ("add", "get", "clear", "conversations", "count", "forget_user", "pinned")
    missing = [name for name in (*needed, "window", "key_position") if not hasattr(store, name)]
    raise TypeError(
        f"store must implement ChatMemory; {store!r} lacks {', '.join(missing) or 'nothing'}"
        " (the conformance suite in otpmem.stores.testing checks a store)"
    )


class StoreProvider:
    """What every provider over a ``ChatMemory`` store shares: its writes, its ``clear``,
    and the reads a retried turn makes go to ``store`` as they are. Subclass it with a
    ``history`` and a ``prepare`` for a ``MemoryProvider`` of your own over a store::

        class Newest(StoreProvider):
            def history(self, conv):
                return self.store.get(conv, last=10)

            def prepare(self, conv, messages):
                return safe_window(messages, 10)

    An agent checks ``long_term_memory`` and ``guardrails`` against ``store``: the usage
    budgets read is the store's, and long-term memory must read the store written here.
    """

    long_term_memory: LongTermMemory | None = None
    """The long-term memory this provider's ``prepare`` puts in front itself (an agent
    then does not put it there again); None: it does not."""

    def __init__(self, store: ChatMemory) -> None:
        self.store = check_store(store)

    def append(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
    ) -> None:
        """Store ``messages`` (validated whole first); keys as ``ChatMemory.add`` takes them."""
        self.store.add(conv, messages, idempotency_key, follows=follows)

    def clear(self, conv: ConvLike) -> None:
        """Forget the conversation."""
        self.store.clear(conv)

    def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        """Where the batch stored with ``idempotency_key`` begins, or None if none is."""
        return self.store.key_position(conv, idempotency_key)

    def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` stored messages and the pinned ones before them, in one read."""
        return self.store.window(conv, last)

    def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds."""
        return self.store.count(conv)


class DefaultProvider(StoreProvider):
    """Stores everything; ``prepare`` applies ``safe_window(messages, window)`` when a window
    is set. With a window, ``history`` reads only the newest messages from the store::

        provider = DefaultProvider(MemoryStore.start_link(), window=20)
    """

    def __init__(
        self, store: ChatMemory, window: int | None = None, counter: TokenCounter | None = None
    ) -> None:
        super().__init__(store)
        if window is not None and (type(window) is not int or window < 1):
            raise ValueError(f"window must be None or an int >= 1, got {window!r}")
        # Not ``window``: that is the protocol's read of the store.
        self.window_size = window
        self.counter = counter or DEFAULT_COUNTER

    def __repr__(self) -> str:
        return f"DefaultProvider({self.store!r}, window={self.window_size})"

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        """All of it, or with a window the pinned messages (system, ``metadata.pinned``,
        the newest summary) and the newest ``window`` others: pinned index + tail, so a
        turn's cost does not grow with the conversation."""
        if self.window_size is None:
            return self.store.get(conv)
        want = self.window_size
        while True:
            stored = self.store.window(conv, want)
            if stored.start == 0:
                return stored.tail  # the whole conversation
            pinned = stored.tail_pinned
            if pinned is None:  # a store that does not count them
                pinned = sum(1 for m in stored.tail if is_pinned(m))
            others = len(stored.tail) - pinned
            if others < self.window_size:
                # Pinned messages in the tail took places of others: read further back.
                want += self.window_size - others
            elif stored.tail[0].get("role") == "tool":
                # The tail starts inside a tool round: reach back to the call, so a turn can
                # see (and heal) the round whole.
                want += 1
            else:
                return History(stored.messages(), stored.start - stored.pinned_before)

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """``safe_window(messages, window)``, or the messages as they are without a window."""
        as_conv(conv)
        if self.window_size is None:
            return list(messages)
        return safe_window(messages, self.window_size)

    def explain(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> PrepareReport:
        """``prepare``, and what became of each input message."""
        context = PrepareContext(self.counter, as_conv(conv))
        output = self.prepare(conv, messages)
        if self.window_size is not None and len(output) < len(messages):
            context.reasons.append(
                f"safe_window(n={self.window_size}): kept pinned messages and the newest "
                f"{self.window_size} others, minus tool results whose call fell out"
            )
        return report(messages, output, context, self.counter)


class PipelineProvider(StoreProvider):
    """A provider whose ``prepare`` runs a ``Pipeline`` (or a preset by name)::

        provider = PipelineProvider(store, "summarize")

    ``history`` reads the pinned index and as much of the tail as the pipeline's strategies
    need (a window's length, the messages no summary covers yet, a token budget's worth),
    not the whole conversation. ``prepare`` is pure: a rolling summary it makes is stored
    with the conversation's next ``append``, in the same write.

    With ``long_term_memory``, ``prepare`` puts the user's profile and facts in front of
    the pipeline's output (PhoenixAI's ``apply_memory(..., inject_long_term_memory=True)``).
    """

    def __init__(
        self,
        store: ChatMemory,
        pipeline: Pipeline | str = "default",
        *,
        long_term_memory: LongTermMemory | None = None,
    ) -> None:
        super().__init__(store)
        if isinstance(pipeline, str):
            pipeline = Pipeline.preset(pipeline)
        if not isinstance(pipeline, Pipeline):
            raise TypeError(f"pipeline must be a Pipeline or a preset name, got {pipeline!r}")
        if long_term_memory is not None and not isinstance(long_term_memory, LongTermMemory):
            raise TypeError(f"long_term_memory must be a LongTermMemory, got {long_term_memory!r}")
        self.pipeline = pipeline
        self.long_term_memory = long_term_memory
        # conversation -> the summary its latest prepare rolled, stored with the next append
        self._pending: dict[Conv, dict[str, Any]] = {}
        self._reads = LastReads()

    def __repr__(self) -> str:
        return f"PipelineProvider({self.store!r}, {self.pipeline!r})"

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        """The pinned messages and the newest ones the pipeline needs, oldest first (a
        ``History``: it says how many unpinned messages come before it unread)."""
        key = as_conv(conv)
        found = read_for(self.store, key, self.pipeline)
        self._reads.remember(key, found)
        return found

    def append(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
    ) -> None:
        """Store ``messages``, after the summary the last ``prepare`` rolled (if any)."""
        key = as_conv(conv)
        summary = self._pending.pop(key, None)
        batch = [summary, *messages] if summary is not None else messages
        self.store.add(key, batch, idempotency_key, follows=follows)

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """Run the pipeline; nothing is stored (a new summary waits for the next append).

        ``messages`` is what ``history`` returned, as it is or with the turn's new messages
        after it (``history + [question]``, beamai's order, or read after the question was
        appended): either way the summaries are numbered over the whole conversation."""
        key = as_conv(conv)

        def keep(summary: dict[str, Any]) -> None:
            self._pending[key] = summary

        # run, not explain: the report's token accounting would cost more than the pipeline
        out = self.pipeline.run(messages, key, keep, offset=self._reads.offset_of(key, messages))
        if self.long_term_memory is not None:
            return self.long_term_memory.inject(out, key.user_id)  # in front, never stored
        return out

    def explain(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        *,
        keep_summary: bool = False,
    ) -> PrepareReport:
        """What ``prepare`` sends, and what became of each input message; with
        ``keep_summary``, a summary it rolls is stored with the next append, as
        ``prepare``'s is."""
        key = as_conv(conv)

        def keep(summary: dict[str, Any]) -> None:
            self._pending[key] = summary

        return self.pipeline.explain(
            messages,
            key,
            save_summary=keep if keep_summary else None,
            offset=self._reads.offset_of(key, messages),
        )

    def clear(self, conv: ConvLike) -> None:
        """Forget the conversation, summaries included."""
        key = as_conv(conv)
        self._pending.pop(key, None)
        self._reads.forget(key)
        self.store.clear(key)
