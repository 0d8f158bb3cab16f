"""Fact extractors: what a conversation's new messages teach about its user.

An extractor returns *decisions* against the facts already known (mem0's set): ``ADD`` a
new key, ``UPDATE`` a known key whose value changed, ``DELETE`` a key the user retracted,
``NONE`` for a known fact confirmed unchanged. ``ModelFactExtractor`` asks a ChatModel
(seed 004's prompt, with the decisions); ``RuleFactExtractor`` matches phrases offline::

    RuleFactExtractor().extract([{"role": "user", "content": "My name is Ann."}], known=[])
    # [Decision("ADD", "name", "Ann", index=0)]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ...llm import ChatModel
from ...messages import short_repr, text_of
from ...stores import Fact
from ...stores.longterm import MAX_FACT_KEY, MAX_FACT_VALUE

ACTIONS = ("ADD", "UPDATE", "DELETE", "NONE")


class ExtractionFailed(RuntimeError):
    """The extractor's answer could not be used: nothing was changed. ``raw`` is the reply."""

    def __init__(self, message: str, raw: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw


@dataclass(frozen=True)
class Decision:
    """What to do with one fact. ``index``: the message (of those given) it came from,
    when known. ``SKIP`` marks an item of the answer that was unusable (``reason`` says
    why): it changes nothing and is reported."""

    action: str
    key: str
    value: str | None = None
    index: int | None = None
    reason: str | None = None


@runtime_checkable
class FactExtractor(Protocol):
    """Turns new messages into decisions against the known facts."""

    def extract(
        self, messages: Sequence[Mapping[str, Any]], known: Sequence[Fact]
    ) -> list[Decision]:
        """Decisions for ``messages``; raise ``ExtractionFailed`` if there is no answer."""


def reconcile(decisions: Iterable[Decision], known: Sequence[Fact]) -> list[Decision]:
    """Decisions made consistent with the known facts: one per key (the last wins), an
    ADD of a known key is an UPDATE (or NONE if the value is the same), an UPDATE of an
    unknown key an ADD, a DELETE of an unknown key nothing; bad keys and values SKIP."""
    values = {f.key: f.value for f in known}
    final: dict[str, Decision] = {}
    skipped: list[Decision] = []
    for decision in decisions:
        if decision.action == "SKIP":
            skipped.append(decision)
            continue
        problem = _problem(decision)
        if problem is not None:
            skipped.append(Decision("SKIP", str(decision.key)[:80], None, decision.index, problem))
            continue
        key = decision.key.strip()
        action, value = decision.action, decision.value
        if action in ("ADD", "UPDATE"):
            if key not in values:
                action = "ADD"
            elif values[key] == value:
                action = "NONE"
            else:
                action = "UPDATE"
        elif action == "DELETE" and key not in values:
            action = "NONE"
        final.pop(key, None)  # a later decision on a key replaces (and follows) an earlier one
        final[key] = Decision(action, key, value, decision.index)
    return [*final.values(), *skipped]


def _problem(decision: Decision) -> str | None:
    if decision.action not in ACTIONS:
        return f"unknown action {short_repr(decision.action)} (one of {', '.join(ACTIONS)})"
    key = decision.key
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_FACT_KEY:
        return f"a fact key is a non-empty str of at most {MAX_FACT_KEY} characters"
    if decision.action in ("ADD", "UPDATE"):
        value = decision.value
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_FACT_VALUE:
            return f"a fact value is a non-empty str of at most {MAX_FACT_VALUE} characters"
    return None


# -- the model's extractor ---------------------------------------------------------------------

EXTRACT_PROMPT = (
    "Extract key facts about the user from the conversation below, and decide for each "
    "what to do with the facts already known. Return a JSON array of objects with "
    '"action", "key" and "value" fields. "action" is one of: "ADD" (a new fact), "UPDATE" '
    '(a known key whose value changed), "DELETE" (a known fact the user retracted; no '
    'value), "NONE" (a known fact confirmed, unchanged). Use snake_case keys and concise '
    "values. Return [] if there is nothing to record."
)
KNOWN_HEADER = "Already known facts (do not re-extract these unless the value changed):"
OUTPUT_RULE = "Output ONLY the JSON array, no other text."


def transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """The user's and the assistant's words as ``role: text`` lines (tool traffic left out)."""
    lines = []
    for message in messages:
        role = message.get("role")
        text = text_of(message).strip()
        if role in ("user", "assistant") and text:
            lines.append(f"{role}: {text}")
    return "\n".join(lines)


def fact_lines(facts: Iterable[Fact]) -> str:
    """``- key: value`` lines."""
    return "\n".join(f"- {f.key}: {f.value}" for f in facts)


def extraction_prompt(
    messages: Sequence[Mapping[str, Any]], known: Sequence[Fact]
) -> list[dict[str, Any]]:
    """The messages sent to the model: seed 004's shape, with mem0's decisions."""
    system = EXTRACT_PROMPT
    if known:
        system += f"\n\n{KNOWN_HEADER}\n{fact_lines(known)}"
    system += f"\n\n{OUTPUT_RULE}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": transcript(messages)},
    ]


_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def parse_json(raw: str | None, kind: type, what: str) -> Any:
    """A JSON value of ``kind`` from a model's text: code fences and prose around the
    first ``[``/``{`` tolerated; anything else is ``ExtractionFailed``."""
    if not isinstance(raw, str) or not raw.strip():
        raise ExtractionFailed(f"the model answered no {what}", raw)
    text = raw.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    opening, closing = ("[", "]") if kind is list else ("{", "}")
    try:
        value = json.loads(text)
    except ValueError:
        start, end = text.find(opening), text.rfind(closing)
        if start < 0 or end <= start:
            raise ExtractionFailed(f"the model's answer is not {what}", raw) from None
        try:
            value = json.loads(text[start : end + 1])
        except ValueError:
            raise ExtractionFailed(f"the model's answer is not {what}", raw) from None
    if not isinstance(value, kind):
        raise ExtractionFailed(f"the model answered a {type(value).__name__}, not {what}", raw)
    return value


def parse_decisions(raw: str | None) -> list[Decision]:
    """Decisions from a model's answer; a non-array is ``ExtractionFailed``, an unusable
    item a ``SKIP`` decision. Seed 004's ``{"key", "value"}`` items (no action) are ADDs."""
    items = parse_json(raw, list, "a JSON array of facts")
    decisions = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            decisions.append(Decision("SKIP", "", None, None, f"not a fact: {short_repr(item)}"))
            continue
        action = str(item.get("action") or "ADD").upper()
        value = item.get("value")
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        decisions.append(Decision(action, item["key"], value if isinstance(value, str) else None))
    return decisions


class ModelFactExtractor:
    """Asks a ChatModel for ADD/UPDATE/DELETE/NONE decisions against the known facts::

    LongTermMemory(store, ModelFactExtractor(OpenAIClient("gpt-4o-mini")))

    A reply that is not a JSON array raises ``ExtractionFailed`` (nothing changes, the
    cursor stays, the messages are tried again next time); an unusable item is skipped
    and reported.
    """

    def __init__(self, llm: ChatModel, **options: Any) -> None:
        if not isinstance(llm, ChatModel):
            raise TypeError(f"ModelFactExtractor needs a ChatModel, got {short_repr(llm)}")
        self.llm = llm
        self.options = options
        # A model call holds its thread: the caller runs it on the blocking pool.
        self.blocks = bool(getattr(llm, "blocks", True))

    def __repr__(self) -> str:
        return f"ModelFactExtractor({self.llm!r})"

    def extract(
        self, messages: Sequence[Mapping[str, Any]], known: Sequence[Fact]
    ) -> list[Decision]:
        """Ask the model; parse its decisions."""
        try:
            response = self.llm.chat(extraction_prompt(messages, known), None, **self.options)
        except Exception as exc:
            raise ExtractionFailed(f"the extraction model failed: {exc}") from exc
        return reconcile(parse_decisions(response.content), known)


# -- the offline extractor ---------------------------------------------------------------------

# A value ends at punctuation or where the next clause starts ("... and I live in ...").
_VALUE = r"(?P<value>[^.!?,;\n]{1,80}?)(?=\s+(?:and|but|so|because|which)\b|[.!?,;\n]|$)"
RULES: tuple[tuple[str, str], ...] = (
    (rf"\bmy name is {_VALUE}", "name"),
    (rf"\bcall me {_VALUE}", "name"),
    (rf"\bi live in {_VALUE}", "location"),
    (rf"\bi(?:'m| am) from {_VALUE}", "location"),
    (rf"\bi moved to {_VALUE}", "location"),
    (rf"\bi prefer {_VALUE}", "preference"),
    (rf"\bi work (?:at|for) {_VALUE}", "employer"),
    (rf"\bi(?:'m| am) allergic to {_VALUE}", "allergy"),
    (rf"\bmy favou?rite (?P<what>[a-z]+) is {_VALUE}", "favorite_{what}"),
)
FORGET = re.compile(r"\bforget my (?P<what>[a-z_ ]{1,40}?)(?:[.!?,;\n]|$)", re.IGNORECASE)


class RuleFactExtractor:
    """Facts from phrases in the user's messages, offline and deterministic: "my name is
    X", "call me X", "I live in X", "I'm from X", "I prefer X", "I work at X", "I'm
    allergic to X", "my favorite K is X"; "forget my K" deletes K. ``rules`` adds
    ``(regex, key)`` pairs (a ``value`` group, and ``{group}`` names in the key)."""

    blocks = False

    def __init__(self, rules: Iterable[tuple[str, str]] = ()) -> None:
        self.rules = [(re.compile(p, re.IGNORECASE), key) for p, key in (*RULES, *rules)]
        for pattern, _ in self.rules:
            if "value" not in pattern.groupindex:
                raise ValueError(f"rule {pattern.pattern!r} needs a (?P<value>...) group")

    def __repr__(self) -> str:
        return f"RuleFactExtractor({len(self.rules)} rules)"

    def extract(
        self, messages: Sequence[Mapping[str, Any]], known: Sequence[Fact]
    ) -> list[Decision]:
        """Decisions from the user's messages, in the order they were said."""
        found: list[tuple[int, int, Decision]] = []
        for index, message in enumerate(messages):
            if message.get("role") != "user":
                continue
            text = text_of(message)
            for pattern, key in self.rules:
                for match in pattern.finditer(text):
                    value = _clean(match.group("value"))
                    if value:
                        name = key.format(**{k: v.lower() for k, v in match.groupdict().items()})
                        found.append((index, match.start(), Decision("ADD", name, value, index)))
            for match in FORGET.finditer(text):
                name = match.group("what").strip().lower().replace(" ", "_")
                found.append((index, match.start(), Decision("DELETE", name, None, index)))
        found.sort(key=lambda item: (item[0], item[1]))
        return reconcile((d for _, _, d in found), known)


def _clean(value: str) -> str:
    words = value.strip().strip("\"'").split()
    return " ".join(words[:8])
