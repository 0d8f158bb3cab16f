"""Requests, policies, violations, and the check that runs them before a model call."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast, runtime_checkable

from ..frozen import FrozenDict
from ..memory import TokenCounter
from ..messages import Conv, ConvLike, as_conv, short_repr
from ..protocols import conforms
from ..stores import Usage


@dataclass(frozen=True)
class Request:
    """One model call about to be made: the messages to send, and whose it is.

    ``user_id`` defaults to the conversation's user; ``metadata`` is free for policies.
    """

    messages: Sequence[Mapping[str, Any]]
    conv: Conv | None = None
    user_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.conv is not None:
            conv = as_conv(self.conv)
            object.__setattr__(self, "conv", conv)
            if self.user_id is None:
                object.__setattr__(self, "user_id", conv.user_id)

    @classmethod
    def of(cls, messages: Sequence[Mapping[str, Any]], conv: ConvLike | None) -> Request:
        """The request of a conversation's model call."""
        return cls(list(messages), None if conv is None else as_conv(conv))

    def with_messages(self, messages: Sequence[Mapping[str, Any]]) -> Request:
        """The same request with other messages (a policy that rewrites what is sent)."""
        return replace(self, messages=list(messages))


class PolicyViolation(Exception):
    """A policy refused a model call before it was made: ``policy`` (the policy object),
    ``reason`` (what to tell the user), ``metadata`` (the figures behind it) and, from an
    agent, ``stored`` (the messages the refused turn had stored)."""

    def __init__(self, policy: object, reason: str, metadata: Mapping[str, Any] | None = None):
        super().__init__(reason)
        self.policy = policy
        self.reason = reason
        self.metadata: dict[str, Any] = dict(metadata or {})
        # Set by an agent: what the refused turn had stored before the refusal (nothing
        # when its first call was refused; the tool rounds before a later one).
        self.stored: list[dict[str, Any]] = []

    def __reduce__(self) -> Any:
        return (type(self), (self.policy, self.reason, self.metadata))


class UsageReader(Protocol):
    """What budgets read of a store: recorded usage, whole or since a time."""

    def usage(self, conv: ConvLike, since: float | None = None) -> Usage:
        """The conversation's recorded usage."""

    def user_usage(self, user_id: str, since: float | None = None) -> Usage:
        """The user's recorded usage across conversations."""


@runtime_checkable
class Policy(Protocol):
    """A guardrail: ``check`` returns the request (possibly rewritten) or raises
    ``PolicyViolation``; it must not call the model or write anything."""

    def check(self, request: Request, store: UsageReader) -> Request:
        """Pass (return the request to send) or raise ``PolicyViolation``."""


class _Reads:
    """One check's view of the store: a usage read twice (two budgets of one scope) is
    read once, so two guardrails cost one lookup, not two; so are the tokens of one list
    of messages counted twice by one counter."""

    __slots__ = ("_counted", "_seen", "store")

    def __init__(self, store: UsageReader) -> None:
        self.store = store
        self._seen: dict[tuple[Any, ...], Usage] = {}
        self._counted: dict[tuple[int, int], tuple[object, int]] = {}

    def count(self, counter: TokenCounter, messages: Sequence[Mapping[str, Any]]) -> int:
        """``count_all(counter, messages)``, counted once per check."""
        key = (id(counter), id(messages))
        found = self._counted.get(key)
        if found is None or found[0] is not messages:
            found = self._counted[key] = (messages, count_messages(counter, messages))
        return found[1]

    def usage(self, conv: ConvLike, since: float | None = None) -> Usage:
        """The conversation's recorded usage (read once per check)."""
        key = ("conv", as_conv(conv), since)
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = self.store.usage(conv, since)
        return found

    def user_usage(self, user_id: str, since: float | None = None) -> Usage:
        """The user's recorded usage (read once per check)."""
        key = ("user", user_id, since)
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = self.store.user_usage(user_id, since)
        return found


def counted(
    store: UsageReader, counter: TokenCounter, messages: Sequence[Mapping[str, Any]]
) -> int:
    """The tokens of ``messages``; counted once per check when ``store`` is its view."""
    if isinstance(store, _Reads):
        return store.count(counter, messages)
    return count_messages(counter, messages)


MEMO_SIZE = 4096
_memo: dict[tuple[int, int], tuple[object, object, int]] = {}


def count_messages(counter: TokenCounter, messages: Iterable[Mapping[str, Any]]) -> int:
    """``count_all``, remembering the count of every read-only message (a stored one, which
    cannot change): a budget holding each call of a long conversation counts its history
    once, not at every call (measured: most of what a hold cost a MemoryStore turn)."""
    total = 0
    for message in messages:
        if not isinstance(message, FrozenDict):
            total += counter.count(message)
            continue
        key = (id(counter), id(message))
        hit = _memo.get(key)
        if hit is None or hit[0] is not message or hit[1] is not counter:
            if len(_memo) >= MEMO_SIZE:
                _memo.clear()  # bounded: a cleared memo only counts again
            hit = _memo[key] = (message, counter, counter.count(message))
        total += hit[2]
    return total


def check_policies(policies: Iterable[object]) -> tuple[Policy, ...]:
    """The policies as a tuple, each checked to be a ``Policy`` (at construction)."""
    if isinstance(policies, str | bytes) or (
        type(policies) not in (list, tuple) and conforms(policies, Policy)
    ):
        raise TypeError("guardrails take a list of policies, e.g. guardrails=[TokenBudget(1000)]")
    checked: list[Policy] = []
    for policy in policies:
        if not conforms(policy, Policy):
            raise TypeError(
                f"{short_repr(policy)} is not a guardrail policy (it needs "
                "check(request, store) -> Request)"
            )
        checked.append(cast(Policy, policy))
    return tuple(checked)


def check_store(store: object) -> UsageReader:
    """``store`` if it records usage (``usage`` and ``user_usage``), else a TypeError."""
    reads = (getattr(store, "usage", None), getattr(store, "user_usage", None))
    if not all(callable(read) for read in reads):
        raise TypeError(
            f"guardrails read recorded usage, and {short_repr(store)} has no usage(conv) / "
            "user_usage(user_id): give them an otpmem store"
        )
    return store  # type: ignore[return-value]


def check_guardrails(request: Request, policies: Sequence[Policy], store: UsageReader) -> Request:
    """Run every policy in order (each sees the request the one before returned); return
    the request to send, or raise the first ``PolicyViolation``. Nothing is held: see
    ``admit`` for the check that holds under concurrency."""
    if not policies:
        return request
    return run_policies(request, policies, store)


Run = Callable[[Policy, Request, UsageReader], Request]


def run_policies(
    request: Request, policies: Sequence[Policy], store: UsageReader, run: Run | None = None
) -> Request:
    """Each policy in order over one view of the store, by ``run`` (default: its check)."""
    reads = _Reads(store)
    for policy in policies:
        checked = policy.check(request, reads) if run is None else run(policy, request, reads)
        if not isinstance(checked, Request):
            raise TypeError(f"policy {policy!r} returned {short_repr(checked)}, not a Request")
        request = checked
    return request
