"""LongTermMemory: per-user facts and a profile, extracted from conversations and put in
front of the history the model is sent (seed 004's long-term memory, every key wired).

::

    ltm = LongTermMemory(store, RuleFactExtractor(), trigger="per_turn")
    agent = Agent.start_link(llm=model, memory={"store": store}, user_id="ann",
                             long_term_memory=ltm)
    agent.run("My name is Ann and I live in Lyon.")
    store.get_facts("ann")   # [Fact(key="location", value="Lyon"), Fact(key="name", ...)]

Extraction reads only the messages after the conversation's durable cursor, and saves the
facts it decided and the moved cursor in ONE ``save_facts`` write: a crash before it
changes nothing (the messages are extracted again), a crash after it leaves nothing to
repeat. ``mode="async"`` hands extractions to a supervised ``ExtractionServer`` through
the store's durable job list (``request_extraction``), so a kill loses none of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...actors import blocking
from ...llm import ChatModel
from ...messages import Conv, ConvLike, as_conv, short_repr
from ...stores import (
    MAX_FACTS_PER_USER,
    ChatMemory,
    CursorMoved,
    Fact,
    FactLimitReached,
    LongTermStore,
    Profile,
)
from ..tokens import DEFAULT_COUNTER, TokenCounter
from ._report import Claims, ExtractionReport, merged
from ._times import valid_from
from .extractors import ExtractionFailed, FactExtractor
from .injection import Injection, Rendered
from .profile import update_profile
from .relevant import MAX_CACHED, FactIndex
from .server import start_server

logger = logging.getLogger("otpmem.memory")

TRIGGERS = ("manual", "per_turn", "on_close")
MODES = ("sync", "async")
INJECT_MODES = ("relevant", "newest")
T = TypeVar("T")


def _choice(value: object, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)


def _positive_int(value: object, what: str) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{what} must be an int >= 1, got {short_repr(value)}")
    return value


def check_store(store: object) -> Any:
    """``store`` if it keeps conversations and long-term records, else a TypeError."""
    if not isinstance(store, ChatMemory) or not isinstance(store, LongTermStore):
        raise TypeError(
            f"long-term memory needs a store that keeps facts, profiles and cursors "
            f"(otpmem.stores.LongTermStore), got {short_repr(store)}"
        )
    return store


class LongTermMemory(Injection):
    """Facts and profiles per user: extracted per ``trigger``, injected before the history.

    ``trigger``: ``"manual"`` (call ``extract``), ``"per_turn"`` (after every turn of an
    agent), ``"on_close"`` (when the agent stops). ``mode="async"`` runs extractions in a
    supervised server (under ``supervisor``, else under the running application, else
    unsupervised with a warning); stop it with ``close()``. ``inject``: put the profile and
    the facts in front of every context, at most ``inject_max_tokens`` of them: with
    ``inject_mode="relevant"`` up to ``inject_max_facts`` facts, the most relevant to the
    newest user message first and the most recently updated after them (all of them when
    nothing matches); with ``"newest"`` the most recently updated that fit.
    ``max_facts_per_user``: at the cap a new key is refused and reported
    (``ExtractionReport.refused``), or with ``evict`` replaces the least recently updated
    fact. ``get_relevant(query, user_id=...)`` ranks a user's facts for any question, from
    per-user indexes kept while the user's facts do not change (at most
    ``max_cached_facts`` facts over all users).
    """

    def __init__(
        self,
        store: Any,
        extractor: FactExtractor | None = None,
        *,
        trigger: str = "manual",
        mode: str = "sync",
        inject: bool = True,
        max_facts_per_user: int = MAX_FACTS_PER_USER,
        evict: bool = False,
        inject_max_tokens: int = 1000,
        inject_mode: str = "relevant",
        inject_max_facts: int = 20,
        max_cached_facts: int = MAX_CACHED,
        counter: TokenCounter | None = None,
        batch: int = 100,
        supervisor: Any = None,
        timeout: float = 60.0,
    ) -> None:
        self.store = check_store(store)
        if extractor is not None and not isinstance(extractor, FactExtractor):
            raise TypeError(
                f"extractor must be a FactExtractor (extract(messages, known)), "
                f"got {short_repr(extractor)}"
            )
        self.extractor = extractor
        self.trigger = _choice(trigger, TRIGGERS, "trigger")
        self.mode = _choice(mode, MODES, "mode")
        if extractor is None and (self.trigger != "manual" or self.mode == "async"):
            raise ValueError(
                f"trigger={self.trigger!r}, mode={self.mode!r} extract facts: give an "
                "extractor (RuleFactExtractor() offline, ModelFactExtractor(llm))"
            )
        if not isinstance(inject, bool) or not isinstance(evict, bool):
            raise TypeError("inject and evict are bools")
        self.inject_enabled = inject
        self.evict = evict
        self.max_facts = _positive_int(max_facts_per_user, "max_facts_per_user")
        self.inject_max_tokens = _positive_int(inject_max_tokens, "inject_max_tokens")
        self.inject_mode = _choice(inject_mode, INJECT_MODES, "inject_mode")
        self.inject_max_facts = _positive_int(inject_max_facts, "inject_max_facts")
        self.index = FactIndex(self.store, max_cached_facts)
        if counter is not None and not isinstance(counter, TokenCounter):
            raise TypeError(f"counter must be a TokenCounter, got {short_repr(counter)}")
        self.counter = counter or DEFAULT_COUNTER
        self.batch = _positive_int(batch, "batch")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self._claims = Claims()
        self._rendered: dict[tuple[Any, str], Rendered] = {}
        self.server: Any = None
        if self.mode == "async":
            self.server = start_server(self, supervisor)

    def __repr__(self) -> str:
        return (
            f"LongTermMemory({self.store!r}, {self.extractor!r}, trigger={self.trigger!r}, "
            f"mode={self.mode!r})"
        )

    # -- extraction ------------------------------------------------------------------------

    def extract(self, conv: ConvLike) -> ExtractionReport:
        """Extract facts from the conversation's messages after its cursor: now (sync), or
        queued durably for the extraction server (async; the report says ``queued``)."""
        key = user_conv(conv)
        if self.server is None:
            return self.extract_now(key)
        total = self.store.count(key)
        if total > self.store.extraction_cursor(key):
            self.store.request_extraction(key, total)  # durable before we answer
            self.server.request(key, total)
        return ExtractionReport(key, queued=True)

    def extract_now(self, conv: ConvLike) -> ExtractionReport:
        """Extract here and now, in batches of ``batch`` messages, until caught up."""
        if self.extractor is None:
            raise ValueError("this LongTermMemory has no extractor: give it one to extract")
        key = user_conv(conv)
        with self._claims.hold(key, self.timeout):
            report = last = self._one_batch(key)
            while last.ok and (last.processed == self.batch or last.raced):
                last = self._one_batch(key)
                report = merged(report, last)
        return report

    def notify(self, event: str, conv: ConvLike) -> ExtractionReport | None:
        """What an agent calls after a turn (``"turn"``) and when it stops (``"close"``):
        extraction per the trigger. Never raises: a failure is logged and reported."""
        wanted = {"turn": "per_turn", "close": "on_close"}.get(event)
        if wanted is None or wanted != self.trigger:
            return None
        try:
            report = self.extract(conv)
        except Exception as exc:
            logger.exception("long-term extraction of %s after %s failed", conv, event)
            return ExtractionReport(as_conv(conv), error=f"{type(exc).__name__}: {exc}")
        if report.error is not None:
            logger.warning("long-term extraction of %s: %s", report.conv, report.error)
        return report

    def flush(self, timeout: float = 30.0) -> dict[Conv, str]:
        """Async: wait until the server has no queued extraction; return the ones that
        failed (conversation -> error; they stay pending). Sync: nothing to wait for."""
        if self.server is None:
            return {}
        failed: dict[Conv, str] = self.server.flush(timeout)
        return failed

    def close(self, timeout: float = 10.0) -> None:
        """Stop the extraction server (async); pending extractions stay in the store."""
        server, self.server = self.server, None
        if server is not None:
            server.shutdown(timeout)

    def _one_batch(self, conv: Conv) -> ExtractionReport:
        store, user = self.store, conv.user_id
        assert user is not None
        cursor = store.extraction_cursor(conv)
        new, end = self._new_messages(conv, cursor)
        report = ExtractionReport(conv, cursor, cursor)
        if not new:
            return report
        known: list[Fact] = store.get_facts(user)
        assert self.extractor is not None
        try:
            decisions = self._run(self.extractor.extract, new, known)
        except ExtractionFailed as exc:
            report.error = str(exc)
            return report
        facts: list[Fact] = []
        deletes: list[str] = []
        by_key = {f.key: f for f in known}
        for decision in decisions:
            if decision.action in ("ADD", "UPDATE") and decision.value is not None:
                at = end - 1 if decision.index is None else cursor + decision.index
                began = valid_from(new, at - cursor, by_key.get(decision.key))
                fact = Fact(user, decision.key, decision.value, source=(conv, at), valid_from=began)
                facts.append(fact)
            elif decision.action == "DELETE":
                deletes.append(decision.key)
            elif decision.action == "SKIP":
                report.skipped.append(decision)
            else:
                report.unchanged.append(decision.key)
        facts, report.refused = self._fit(facts, known)
        try:
            report.saved = store.save_facts(
                user,
                facts,
                deletes,
                cursor=(conv, end),
                cursor_from=cursor,
                max_facts=self.max_facts,
                evict=self.evict,
            )
        except FactLimitReached as exc:  # another writer filled the cap meanwhile
            report.error = str(exc)
            return report
        except CursorMoved:  # another extractor (process, node) did these turns: skip them
            report.raced = True
            return report
        report.deleted, report.end = deletes, end
        if report.refused:
            logger.warning(
                "user %r is at max_facts_per_user=%d: new facts %s were refused",
                user,
                self.max_facts,
                report.refused,
            )
        return report

    def _new_messages(self, conv: Conv, cursor: int) -> tuple[list[dict[str, Any]], int]:
        """The messages from ``cursor`` on (at most ``batch``), and where they end."""
        total = self.store.count(conv)
        want = total - cursor
        while want > 0:
            stored = self.store.window(conv, want)
            if stored.total <= cursor:
                break
            if stored.start <= cursor:
                new = stored.tail[cursor - stored.start :][: self.batch]
                return new, cursor + len(new)
            want = stored.total - cursor  # messages came in between: read further back
        return [], cursor

    def _fit(self, facts: list[Fact], known: Sequence[Fact]) -> tuple[list[Fact], list[str]]:
        """The facts that fit under the cap, and the new keys refused (none with evict)."""
        keys = {f.key for f in known}
        new = [f.key for f in facts if f.key not in keys]
        room = max(0, self.max_facts - len(keys))
        if self.evict or len(new) <= room:
            return facts, []
        refused = set(new[room:])
        return [f for f in facts if f.key not in refused], new[room:]

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # A model call holds its thread for seconds: off the schedulers with it.
        if getattr(self.extractor, "blocks", True):
            return blocking(fn, *args)
        return fn(*args)

    # -- profiles --------------------------------------------------------------------------

    def update_profile(self, user_id: str, llm: ChatModel) -> Profile:
        """Ask ``llm`` for a new profile from the user's facts (and current profile); save
        and return it. A reply that is not ``{"summary", "metadata"}`` raises
        ``ExtractionFailed`` and saves nothing."""
        return update_profile(self.store, user_id, llm)


def user_conv(conv: ConvLike) -> Conv:
    """The conversation, which must belong to a user: long-term memory is per user."""
    key = as_conv(conv)
    if key.user_id is None:
        raise ValueError(
            f"long-term memory is kept per user, and {key} has no user_id: "
            "use Conv(user_id, conversation_id)"
        )
    return key
