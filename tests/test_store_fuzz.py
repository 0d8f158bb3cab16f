"""Fuzzing MemoryStore and LevelDBStore with malformed messages, batches, keys and raw calls.

Properties, on both stores:

- a batch holding any malformed message raises ``InvalidMessage`` naming the first bad index,
  through the handle and through a raw ``store.call(("add", ...))``, and stores nothing;
- a bad conversation key, ``last`` or user id raises ``ValueError``/``TypeError``, storing
  nothing;
- a raw call with garbage either does exactly what it says or raises
  ``ValueError``/``TypeError`` and changes nothing; the store keeps running (same pid);
- a valid batch is read back exactly (equal dicts, same JSON types).

Each store is started once per test function, outside the ``@given`` function that Hypothesis
runs per example, and stopped in ``finally``. Every property counts the malformed inputs it
tried; the per-test minimums add up to at least ``MALFORMED_TOTAL``.
"""

from __future__ import annotations

import collections
import copy
import decimal
import enum
import math
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otpmem.messages import (
    FIELDS,
    MAX_DEPTH,
    ROLES,
    Conv,
    FrozenDict,
    InvalidMessage,
    as_conv,
    freeze,
    freeze_batch,
)
from otpmem.stores import EXPORT_FORMAT, EXPORT_VERSION, LevelDBStore, MemoryStore

STORES = ["memory", "leveldb"]

INVALID_MESSAGE_EXAMPLES = 2000
BAD_BATCH_EXAMPLES = 2000
BAD_KEY_EXAMPLES = 500
RAW_CALL_EXAMPLES = 1000
VALID_BATCH_EXAMPLES = 300
MALFORMED_TOTAL = 10_000
MALFORMED_PER_STORE = (
    INVALID_MESSAGE_EXAMPLES + BAD_BATCH_EXAMPLES + BAD_KEY_EXAMPLES + RAW_CALL_EXAMPLES
)
assert MALFORMED_PER_STORE * len(STORES) >= MALFORMED_TOTAL


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


# -- valid messages ----------------------------------------------------------------------------
# Hypothesis spends ~0.1 ms per choice, so the malformed-input properties break messages taken
# from a varied hand-written pool (one choice) rather than generating each one from scratch;
# fully generated messages are used where the content matters (the valid-batch property).

TEXT = st.text(max_size=6)
NONEMPTY = st.text(min_size=1, max_size=6)
INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
JSON_1 = st.one_of(
    SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(TEXT, SCALARS, max_size=3)
)
JSON = st.one_of(SCALARS, st.lists(JSON_1, max_size=2), st.dictionaries(TEXT, JSON_1, max_size=2))
PART = st.fixed_dictionaries({"type": TEXT}, optional={"text": TEXT, "extra": JSON})
CONTENT = st.one_of(TEXT, st.lists(PART, max_size=3))
OPTIONAL = {"name": TEXT, "metadata": st.dictionaries(TEXT, JSON, max_size=3)}


def tool_call(call_id: str) -> st.SearchStrategy[dict[str, Any]]:
    function = st.fixed_dictionaries({"name": NONEMPTY, "arguments": TEXT})
    return st.fixed_dictionaries(
        {"id": st.just(call_id), "type": st.just("function"), "function": function}
    )


TOOL_CALLS = st.lists(NONEMPTY, min_size=1, max_size=3, unique=True).flatmap(
    lambda ids: st.tuples(*map(tool_call, ids)).map(list)
)
GENERATED_MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user"]), "content": CONTENT}, optional=OPTIONAL
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": CONTENT},
        optional={**OPTIONAL, "tool_calls": TOOL_CALLS | st.builds(list) | st.none()},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "tool_calls": TOOL_CALLS},
        optional={**OPTIONAL, "content": st.none() | CONTENT},
    ),
    st.fixed_dictionaries(
        {"role": st.just("tool"), "tool_call_id": NONEMPTY, "content": CONTENT},
        optional=OPTIONAL,
    ),
)


def fn_call(call_id: str, name: str = "lookup", arguments: str = '{"q": 1}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


VALID_POOL: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "system", "content": "", "name": "policy"},
    {"role": "user", "content": "hi"},
    {"role": "user", "content": "ünïcödé 🙂 \x00 \n\t", "name": "alice"},
    {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]},
    {"role": "user", "content": []},
    {
        "role": "user",
        "content": [{"type": "text", "text": "a", "extra": {"k": [1, {"z": None}]}}],
        "metadata": {"ts": 1.5, "tags": ["x", "y"], "deep": {"a": {"b": [True, False]}}},
    },
    {"role": "user", "content": "big", "metadata": {"max": 2**64 - 1, "min": -(2**63)}},
    {"role": "user", "content": "f", "metadata": {"f": -0.0, "e": 1e308, "t": 5e-324}},
    {"role": "assistant", "content": "hello"},
    {"role": "assistant", "content": None, "tool_calls": [fn_call("c1")]},
    {"role": "assistant", "tool_calls": [fn_call("a"), fn_call("b", "other", "")]},
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "thinking"}],
        "tool_calls": [fn_call("x", "f", "{}"), fn_call("y"), fn_call("z", "g", "[]")],
        "name": "bot",
        "metadata": {"model": "m", "usage": {"in": 10, "out": 3}},
    },
    {"role": "assistant", "content": "ok", "tool_calls": []},
    {"role": "assistant", "content": "ok", "tool_calls": None},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "r"}]},
    {"role": "tool", "tool_call_id": "🙂", "content": "", "name": "lookup", "metadata": {}},
]
for _message in VALID_POOL:
    freeze(_message)  # the pool is valid, or this module fails to import
POOL_MESSAGE = st.sampled_from(VALID_POOL).map(copy.deepcopy)
POOL_CALLS = st.sampled_from(
    [
        [fn_call("a")],
        [fn_call("a"), fn_call("b", "other", "")],
        [fn_call("x", "f", "{}"), fn_call("y"), fn_call("🙂", "g", "[]")],
    ]
).map(copy.deepcopy)
POOL_PARTS = st.sampled_from(
    [
        [],
        [{"type": "text", "text": "a"}],
        [{"type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": ""}],
        [{"type": ""}, {"type": "x", "extra": [1, {"k": None}]}, {"type": "text"}],
    ]
).map(copy.deepcopy)
KEY = st.sampled_from(["k", "", "ü", "role", "type", "0"])
VALID_MESSAGE = st.one_of(POOL_MESSAGE, GENERATED_MESSAGE)
POOL_BATCH = st.lists(POOL_MESSAGE, max_size=5)
VALID_BATCH = st.lists(VALID_MESSAGE, max_size=5)


# -- values no store can hold ------------------------------------------------------------------


class Text(str):
    pass


class Number(int):
    pass


class Real(float):
    pass


class Color(enum.IntEnum):
    RED = 1


def nested_lists(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def nested_dicts(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"d": value}
    return value


def cycle(kind: str) -> Any:
    if kind == "list":
        loop: list[Any] = []
        loop.append(loop)
        return loop
    ring: dict[str, Any] = {}
    ring["self"] = [ring]
    return ring


UNSTORABLE_VALUES: list[Any] = [
    (1,),
    (),
    ("user", "hi"),
    b"",
    b"x",
    bytearray(b"x"),
    {1},
    frozenset(),
    object(),
    types.SimpleNamespace(a=1),
    math.nan,
    math.inf,
    -math.inf,
    2**64,
    -(2**63) - 1,
    10**40,
    1j,
    decimal.Decimal("1.5"),
    Text("x"),
    Text(""),
    Text("user"),
    Number(1),
    Real(1.5),
    Color.RED,
    {1: "a"},
    {None: 1},
    {True: 1},
    {(1,): 1},
    {b"k": 1},
    {1.5: 1},
    {"ok": 1, 2: 2},
    nested_lists(MAX_DEPTH),
    nested_lists(MAX_DEPTH + 10),
    nested_dicts(MAX_DEPTH),
    [1, [2, nested_lists(MAX_DEPTH)]],
    cycle("list"),
    cycle("dict"),
    len,
    range(3),
    Ellipsis,
    int,
]
UNSTORABLE = st.one_of(
    st.sampled_from(UNSTORABLE_VALUES).map(copy.deepcopy),
    st.integers(min_value=2**64),
    st.integers(max_value=-(2**63) - 1),
    st.builds(Text, TEXT),
)
"""Values that are invalid wherever they are put in a message."""

JSON_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    1.5,
    "",
    "x",
    "user",
    [],
    ["x"],
    [None, {"a": []}],
    {},
    {"a": 1},
    {"type": "text"},
]
SMALL_JSON = st.sampled_from(JSON_VALUES).map(copy.deepcopy)
"""Storable values of every JSON type (one choice, where variety of content is not the point)."""
WRONG = st.one_of(SMALL_JSON, UNSTORABLE)
NOT_STR = WRONG.filter(lambda v: type(v) is not str)
NOT_LIST = WRONG.filter(lambda v: not isinstance(v, list))
NOT_DICT = WRONG.filter(lambda v: not isinstance(v, dict))


# -- malformed messages: a valid one, broken in one place ---------------------------------------


def slots(value: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) inside ``value``, the message itself included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield value, key
            yield from slots(item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield value, i
            yield from slots(item)


BOOL = st.booleans()
PICK = st.integers(min_value=0, max_value=1_000)  # an index, taken modulo the length
TOOL_CALL_FAULT = st.sampled_from(
    ["item", "id", "duplicate", "type", "function", "name", "arguments"]
)
BAD_ITEM = st.one_of(TEXT, INTS, st.none(), st.lists(TEXT, max_size=2), UNSTORABLE)
EMPTY_OR_NOT_STR = st.just("") | NOT_STR
NOT_FUNCTION = TEXT.filter(lambda s: s != "function") | NOT_STR
MESSAGE_FAULT = st.sampled_from(
    [
        "not a dict",
        "no role",
        "bad role",
        "unknown field",
        "no content",
        "content type",
        "content part",
        "tool_calls off assistant",
        "tool_calls not a list",
        "tool call",
        "tool_call_id",
        "name",
        "metadata",
        "plant",
    ]
)
NON_DICT_MESSAGE = st.one_of(
    st.none(),
    SCALARS,
    st.lists(SMALL_JSON, max_size=3),
    st.sampled_from(["items list", "items tuple", "mapping proxy", "user dict"]),
    UNSTORABLE.filter(lambda v: not isinstance(v, dict)),
)
BAD_ROLE = st.one_of(
    TEXT.filter(lambda s: s not in ROLES),
    st.sampled_from(["User", "ASSISTANT", " tool", "user\x00", "function"]),
    st.none(),
    INTS,
    st.lists(st.sampled_from(ROLES), max_size=2),
    st.builds(Text, st.sampled_from(ROLES)),
    UNSTORABLE,
)
UNKNOWN_KEY = st.one_of(
    TEXT.filter(lambda s: s not in FIELDS), st.integers(), st.none(), st.booleans()
)
NO_CALLS = st.sampled_from(["drop", "empty", "none"])
BAD_CONTENT = st.one_of(
    st.booleans(), INTS, FLOATS, SMALL_JSON.filter(lambda v: isinstance(v, dict)), UNSTORABLE
)
BAD_PART = st.one_of(
    TEXT,
    INTS,
    st.none(),
    st.lists(SMALL_JSON, max_size=2),
    st.dictionaries(TEXT.filter(lambda s: s != "type"), SMALL_JSON, max_size=2),
    st.fixed_dictionaries({"type": NOT_STR}, optional={"text": TEXT}),
    UNSTORABLE,
)
OTHER_ROLE = st.sampled_from(["system", "user"])
ANY_CALLS = POOL_CALLS | st.builds(list) | SMALL_JSON.filter(lambda v: v is not None)
NOT_LIST_CALLS = NOT_LIST.filter(lambda v: v is not None)
STRAY_CALL_ID = NONEMPTY | st.none() | INTS
WRAPS = st.integers(0, 2)


def pick(draw: st.DrawFn, items: list[Any]) -> Any:
    return items[draw(PICK) % len(items)]


def as_assistant_with_calls(draw: st.DrawFn, m: dict[str, Any]) -> list[dict[str, Any]]:
    m["role"] = "assistant"
    m.pop("tool_call_id", None)
    calls: list[dict[str, Any]] = draw(POOL_CALLS)
    m["tool_calls"] = calls
    return calls


def break_tool_call(draw: st.DrawFn, m: dict[str, Any]) -> None:
    calls = as_assistant_with_calls(draw, m)
    i = draw(PICK) % len(calls)
    call = calls[i]
    fault = draw(TOOL_CALL_FAULT)
    missing = draw(BOOL)
    if fault == "item":
        calls[i] = draw(BAD_ITEM)
    elif fault == "duplicate":
        if len(calls) == 1:
            calls.append(copy.deepcopy(call))
        else:
            calls[(i + 1) % len(calls)]["id"] = call["id"]
    elif fault in ("id", "type", "function") and missing:
        del call[fault]
    elif fault in ("name", "arguments") and missing:
        del call["function"][fault]
    elif fault == "id":
        call["id"] = draw(EMPTY_OR_NOT_STR)
    elif fault == "type":
        call["type"] = draw(NOT_FUNCTION)
    elif fault == "function":
        call["function"] = draw(NOT_DICT)
    elif fault == "name":
        call["function"]["name"] = draw(EMPTY_OR_NOT_STR)
    else:
        call["function"]["arguments"] = draw(NOT_STR)


def not_a_dict(draw: st.DrawFn, m: dict[str, Any]) -> Any:
    thing = draw(NON_DICT_MESSAGE)
    if thing == "items list":
        return list(m.items())
    if thing == "items tuple":
        return tuple(m.items())
    if thing == "mapping proxy":
        return types.MappingProxyType(m)
    if thing == "user dict":
        return collections.UserDict(m)
    return thing


@st.composite
def bad_messages(draw: st.DrawFn) -> Any:
    """A valid message broken in one place (any message a store must refuse)."""
    m: dict[Any, Any] = draw(POOL_MESSAGE)
    role = m["role"]
    fault = draw(MESSAGE_FAULT)
    if fault == "not a dict":
        return not_a_dict(draw, m)
    if fault == "no role":
        del m["role"]
    elif fault == "bad role":
        m["role"] = draw(BAD_ROLE)
    elif fault == "unknown field":
        m[draw(UNKNOWN_KEY)] = draw(SMALL_JSON)
    elif fault == "no content":
        if draw(BOOL):
            m.pop("content", None)
        else:
            m["content"] = None
        if role == "assistant":
            calls = draw(NO_CALLS)
            if calls == "drop":
                m.pop("tool_calls", None)
            else:
                m["tool_calls"] = [] if calls == "empty" else None
    elif fault == "content type":
        m["content"] = draw(BAD_CONTENT)
    elif fault == "content part":
        parts = draw(POOL_PARTS)
        parts.insert(draw(PICK) % (len(parts) + 1), draw(BAD_PART))
        m["content"] = parts
    elif fault == "tool_calls off assistant":
        if role == "assistant":
            m["role"] = draw(OTHER_ROLE)
            if not isinstance(m.get("content"), str | list):
                m["content"] = "x"
        m["tool_calls"] = draw(ANY_CALLS)
    elif fault == "tool_calls not a list":
        as_assistant_with_calls(draw, m)
        m["tool_calls"] = draw(NOT_LIST_CALLS)
    elif fault == "tool call":
        break_tool_call(draw, m)
    elif fault == "tool_call_id":
        if role != "tool":
            m["tool_call_id"] = draw(STRAY_CALL_ID)
        elif draw(BOOL):
            del m["tool_call_id"]
        else:
            m["tool_call_id"] = draw(EMPTY_OR_NOT_STR)
    elif fault == "name":
        m["name"] = draw(NOT_STR)
    elif fault == "metadata":
        m["metadata"] = draw(NOT_DICT)
    else:  # plant a value no store can hold anywhere in the message, or in its metadata
        bad = draw(UNSTORABLE)
        for _ in range(draw(WRAPS)):
            bad = [bad] if draw(BOOL) else {draw(KEY): bad}
        if draw(BOOL):
            container, key = pick(draw, list(slots(m)))
            container[key] = bad
        else:
            m.setdefault("metadata", {})[draw(KEY)] = bad
    return m


BAD_MESSAGE = bad_messages()


# -- batches -----------------------------------------------------------------------------------

CONTAINERS: dict[str, Callable[[list[Any]], Iterable[Any]]] = {
    "list": list,
    "tuple": tuple,
    "iterator": iter,
    "generator": lambda items: (m for m in items),
    "deque": collections.deque,
}
CONTAINER = st.sampled_from(sorted(CONTAINERS))
BATCH_CASE = st.sampled_from(["one bad", "mixed", "not a batch"])
NOT_A_BATCH = st.one_of(
    POOL_MESSAGE,
    SMALL_JSON.filter(lambda v: not isinstance(v, list)),
    TEXT,
    st.binary(max_size=4),
    INTS,
    st.none(),
    FLOATS,
    st.booleans(),
    st.builds(object),
)
MIXED = st.lists(
    st.one_of(POOL_MESSAGE.map(lambda m: (True, m)), BAD_MESSAGE.map(lambda m: (False, m))),
    min_size=1,
    max_size=5,
).filter(lambda xs: not all(ok for ok, _ in xs))


@st.composite
def bad_batches(draw: st.DrawFn) -> tuple[str, Any, int | None]:
    """(container kind, items, index of the first bad message); kind "raw": not a batch."""
    case = draw(BATCH_CASE)
    if case == "not a batch":
        return "raw", draw(NOT_A_BATCH), None
    if case == "one bad":
        items = draw(POOL_BATCH)
        position = draw(PICK) % (len(items) + 1)
        items.insert(position, draw(BAD_MESSAGE))
        first = position
    else:
        flagged = draw(MIXED)
        items = [m for _, m in flagged]
        first = next(i for i, (ok, _) in enumerate(flagged) if not ok)
    return draw(CONTAINER), items, first


BAD_BATCH = bad_batches()


def materialize(kind: str, items: Any) -> Any:
    """A fresh batch each time: an iterator is used up by the first call."""
    return items if kind == "raw" else CONTAINERS[kind](items)


# -- conversation keys -------------------------------------------------------------------------

BASE: dict[Conv, list[dict[str, Any]]] = {
    Conv("u1", "c0"): [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi", "metadata": {"n": 1}},
    ],
    Conv("u1", "c1"): [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
    Conv("u2", "c0"): [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "42"},
    ],
    Conv(None, "c0"): [{"role": "user", "content": "anonymous"}],
}
EMPTY = [Conv("u2", "empty"), Conv(None, "empty")]
TARGETS = [*BASE, *EMPTY]
TARGET = st.one_of(
    st.sampled_from(TARGETS), st.sampled_from(["c0", "empty"])
)  # a str is Conv(None, s)
BAD_CONV = st.one_of(
    st.just(""),
    st.none(),
    st.booleans(),
    INTS,
    st.binary(max_size=4),
    st.lists(TEXT, max_size=2),
    st.tuples(st.none() | NONEMPTY, NONEMPTY),
    st.builds(Text, NONEMPTY),
    st.builds(object),
    st.builds(Conv, st.just("") | INTS | st.binary(max_size=3) | st.lists(TEXT), NONEMPTY),
    st.builds(Conv, st.none() | NONEMPTY, st.just("") | st.none() | INTS | st.binary(max_size=3)),
)
BAD_LAST = st.one_of(
    st.integers(max_value=-1), FLOATS, TEXT, st.booleans(), st.lists(INTS, max_size=1)
)
BAD_USER = st.one_of(st.just(""), INTS, st.binary(max_size=3), st.lists(TEXT, max_size=1))


def canon(value: Any) -> Any:
    """A form of a JSON-like value that compares types too (True != 1, 1 != 1.0)."""
    if isinstance(value, dict):
        return ("dict", sorted((k, canon(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", [canon(v) for v in value])
    return (type(value).__name__, value)


# -- a store and what it should hold -----------------------------------------------------------


class Harness:
    """One store for a whole test function, with a model of what it must hold."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.starts = 0
        self.model: dict[Conv, list[dict[str, Any]]] = {}
        self.store: Any = None
        self.dirty = False
        self.restart()

    def restart(self) -> None:
        self.starts += 1
        if self.kind == "memory":
            self.store = MemoryStore.start_link()
        else:
            self.store = LevelDBStore.start_link(self.tmp_path / f"db{self.starts}", sync=False)
        self.pid = self.store.pid
        self.model = {}
        self.populate()
        self.dirty = False

    def populate(self) -> None:
        for conv, messages in BASE.items():
            self.store.add(conv, messages)
            self.model[conv] = list(messages)

    def stop(self) -> None:
        if self.store.alive:
            self.store.stop()

    def begin(self) -> None:
        """Start an example on a live store whose contents match the model.

        After an example that failed (or a model grown large) the store is wiped and
        refilled with the base data, so that examples stay independent for shrinking.
        """
        if not self.store.alive:
            self.restart()  # the previous example crashed it, and failed
            return
        size = sum(len(messages) for messages in self.model.values())
        if not self.dirty and size <= 200 and len(self.model) <= 40:
            self.dirty = True  # until check() passes at the end of this example
            return
        users = {c.user_id for c in self.store.conversations()}
        for user_id in users - {None}:
            self.store.forget_user(user_id)
        for conv in self.store.conversations():
            self.store.clear(conv)
        self.model = {}
        self.populate()
        self.dirty = True

    def settle(self) -> None:
        """Let queued writes land (a raw call could have queued one before failing)."""
        if self.kind == "leveldb":
            self.store.flush()

    def check(self) -> None:
        """The store is the one started, alive, and holds exactly the model."""
        assert self.store.alive, f"store died: {self.store.exit_reason!r}"
        assert self.store.pid == self.pid
        self.settle()
        held = {c for c, messages in self.model.items() if messages}
        assert set(self.store.conversations()) == held
        for conv in {*TARGETS, *self.model}:
            expected = self.model.get(conv, [])
            assert self.store.count(conv) == len(expected), conv
            assert canon(self.store.get(conv)) == canon(expected), conv
        self.dirty = False

    def append(self, conv: Any, messages: Iterable[Any]) -> None:
        key = as_conv(conv)
        batch = [copy.deepcopy(dict(m)) for m in messages]
        if batch:
            self.model.setdefault(key, []).extend(batch)


def run_on(kind: str, tmp_path: Path, prop: Callable[[Harness], None]) -> None:
    """Run ``prop`` (which runs its Hypothesis examples) on one store, stopped at the end."""
    harness = Harness(kind, tmp_path)
    try:
        prop(harness)
    finally:
        harness.stop()


# -- properties --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
def test_malformed_message_is_rejected_and_nothing_is_stored(kind: str, tmp_path: Path) -> None:
    tried = 0

    def prop(h: Harness) -> None:
        @fuzz(INVALID_MESSAGE_EXAMPLES)
        @given(message=BAD_MESSAGE, conv=TARGET)
        def run(message: Any, conv: Any) -> None:
            nonlocal tried
            h.begin()
            with pytest.raises(InvalidMessage) as raised:
                freeze(message)
            assert raised.value.index is None
            with pytest.raises(InvalidMessage) as raised:
                h.store.add(conv, [message])
            assert raised.value.index == 0
            with pytest.raises(InvalidMessage) as raised:
                h.store.call(("add", conv, [message]))  # the server validates too
            assert raised.value.index == 0
            h.check()
            tried += 1

        run()

    run_on(kind, tmp_path, prop)
    assert tried >= INVALID_MESSAGE_EXAMPLES


@pytest.mark.parametrize("kind", STORES)
def test_batch_with_a_bad_message_is_rejected_whole(kind: str, tmp_path: Path) -> None:
    tried = 0

    def prop(h: Harness) -> None:
        @fuzz(BAD_BATCH_EXAMPLES)
        @given(case=BAD_BATCH, conv=TARGET)
        def run(case: tuple[str, Any, int | None], conv: Any) -> None:
            nonlocal tried
            container, items, first = case
            h.begin()
            with pytest.raises(InvalidMessage) as raised:
                freeze_batch(materialize(container, items))
            assert raised.value.index == first
            with pytest.raises(InvalidMessage) as raised:
                h.store.add(conv, materialize(container, items))
            assert raised.value.index == first
            with pytest.raises(InvalidMessage) as raised:
                h.store.call(("add", conv, materialize(container, items)))
            assert raised.value.index == first
            h.check()
            tried += 1

        run()

    run_on(kind, tmp_path, prop)
    assert tried >= BAD_BATCH_EXAMPLES


@pytest.mark.parametrize("kind", STORES)
def test_bad_conversation_last_or_user_id_is_rejected(kind: str, tmp_path: Path) -> None:
    tried = 0

    def prop(h: Harness) -> None:
        @fuzz(BAD_KEY_EXAMPLES)
        @given(
            conv=BAD_CONV,
            batch=POOL_BATCH,
            target=TARGET,
            last=BAD_LAST,
            user=BAD_USER,
            forget=st.none() | BAD_USER,
        )
        def run(conv: Any, batch: Any, target: Any, last: Any, user: Any, forget: Any) -> None:
            nonlocal tried
            h.begin()
            store = h.store
            calls: list[Callable[[], Any]] = [
                lambda: as_conv(conv),
                lambda: store.add(conv, batch),
                lambda: store.call(("add", conv, batch)),
                lambda: store.get(conv),
                lambda: store.get(conv, last=1),
                lambda: store.count(conv),
                lambda: store.clear(conv),
                lambda: store.call(("clear", conv)),
                lambda: store.get(target, last=last),
                lambda: store.forget_user(forget),
                lambda: store.conversations(user),
            ]
            for call in calls:
                with pytest.raises((ValueError, TypeError)):
                    call()
            h.check()
            tried += 1

        run()

    run_on(kind, tmp_path, prop)
    assert tried >= BAD_KEY_EXAMPLES


COMMAND = st.sampled_from(["add", "clear", "forget_user", "import", "flush", "adopted"])
RAW_KIND = st.one_of(
    COMMAND,
    COMMAND,
    st.sampled_from(["get", "", "ADD", "add ", "stop", "count"]),
    st.builds(Text, COMMAND),
    TEXT,
    st.none(),
    INTS,
    st.binary(max_size=3),
)
BATCH_ARG = st.one_of(
    POOL_BATCH,
    BAD_BATCH.map(lambda case: case[1] if case[0] == "raw" else list(case[1])),
)
CONV_ARG = st.one_of(TARGET, BAD_CONV)
RAW_ARG = st.one_of(
    CONV_ARG,
    BATCH_ARG,
    st.lists(st.tuples(CONV_ARG, BATCH_ARG), max_size=3),
    st.lists(st.lists(CONV_ARG | BATCH_ARG, max_size=3), max_size=2),
    st.sampled_from(["u1", "u2", None]),
    SMALL_JSON,
    UNSTORABLE,
)
RAW_PAYLOAD = st.one_of(
    st.tuples(RAW_KIND),
    st.tuples(RAW_KIND, RAW_ARG),
    st.tuples(RAW_KIND, RAW_ARG, RAW_ARG),
    st.tuples(RAW_KIND, RAW_ARG, RAW_ARG, RAW_ARG),
    st.one_of(
        st.builds(tuple),
        st.lists(RAW_ARG, max_size=3),
        SMALL_JSON,
        UNSTORABLE,
        st.builds(object),
    ),
)
PROBE = {"role": "user", "content": "probe"}


def probe_doc(n: int) -> dict[str, Any]:
    """A document new to the store each time (the same document imported twice is stored
    once)."""
    message = {"role": "user", "content": f"probe {n}"}
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "conversations": [
            {"user_id": c.user_id, "conversation_id": c.conversation_id, "messages": [message]}
            for c in TARGETS
        ],
    }


def expect_raw(h: Harness, payload: Any) -> None:
    """Apply to the model what a raw call that returned normally must have done."""
    kind = payload[0]
    if kind == "add":
        _, key, batch = payload
        h.append(key, freeze_batch(batch))
    elif kind == "clear":
        h.model.pop(as_conv(payload[1]), None)
    elif kind == "forget_user":
        for conv in [c for c in h.model if c.user_id == payload[1]]:
            del h.model[conv]
    elif kind == "import":
        entries = [(as_conv(key), freeze_batch(batch)) for key, batch in payload[1]]
        for key, batch in entries:
            h.append(key, batch)
    else:
        assert kind in ("flush", "adopted"), f"{payload!r} was accepted"


@pytest.mark.parametrize("kind", STORES)
def test_raw_garbage_calls_get_errors_and_the_store_keeps_running(
    kind: str, tmp_path: Path
) -> None:
    tried = 0

    def prop(h: Harness) -> None:
        @fuzz(RAW_CALL_EXAMPLES)
        @given(payload=RAW_PAYLOAD)
        def run(payload: Any) -> None:
            nonlocal tried
            h.begin()
            try:
                h.store.call(payload)
            except (ValueError, TypeError):
                pass  # the caller's mistake: nothing may have changed
            else:
                expect_raw(h, payload)
            h.check()
            # It still works: every conversation takes a write and counts it right.
            document = probe_doc(tried)
            assert h.store.import_(document) == len(TARGETS)
            for entry, conv in zip(document["conversations"], TARGETS, strict=True):
                h.append(conv, [*entry["messages"], PROBE])
            for conv in TARGETS:
                h.store.add(conv, [PROBE])
            h.check()
            tried += 1

        run()

    run_on(kind, tmp_path, prop)
    assert tried >= RAW_CALL_EXAMPLES


VALID_CONV = st.one_of(TARGET, st.builds(Conv, st.none() | NONEMPTY, NONEMPTY), NONEMPTY)


@pytest.mark.parametrize("kind", STORES)
def test_valid_batches_are_stored_exactly(kind: str, tmp_path: Path) -> None:
    stored = 0

    def prop(h: Harness) -> None:
        @fuzz(VALID_BATCH_EXAMPLES)
        @given(
            conv=VALID_CONV,
            batch=VALID_BATCH,
            container=CONTAINER,
            last=st.integers(0, 8),
        )
        def run(conv: Any, batch: list[dict[str, Any]], container: str, last: int) -> None:
            nonlocal stored
            h.begin()
            original = copy.deepcopy(batch)
            h.store.add(conv, CONTAINERS[container](batch))
            assert canon(batch) == canon(original)  # the caller's messages are untouched
            h.append(conv, original)
            for message in batch:  # and remain the caller's: changing them changes no store
                message.clear()
            expected = h.model.get(as_conv(conv), [])
            got = h.store.get(conv)
            assert canon(got) == canon(expected)
            assert all(type(m) is dict or isinstance(m, FrozenDict) for m in got)
            assert canon(h.store.get(conv, last=last)) == canon(expected[-last:] if last else [])
            assert h.store.count(conv) == len(expected)
            h.check()
            stored += len(original)

        run()

    run_on(kind, tmp_path, prop)
    assert stored > VALID_BATCH_EXAMPLES


# -- found by fuzzing: each case on its own ----------------------------------------------------

FORGED = [
    ("unknown role", {"role": "bogus"}),
    ("int dict key", {"role": "user", "content": "x", "metadata": {1: 2}}),
    ("tuple content", {"role": "user", "content": (1, 2)}),
]


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("forged", [m for _, m in FORGED], ids=[n for n, _ in FORGED])
def test_hand_built_frozendict_is_validated_like_any_message(
    kind: str, forged: dict[Any, Any], tmp_path: Path
) -> None:
    # FrozenDict(...) is an ordinary constructor: being one proves nothing about validity.
    h = Harness(kind, tmp_path)
    try:
        with pytest.raises(InvalidMessage):
            h.store.add(Conv("u1", "c0"), [FrozenDict(forged)])
        with pytest.raises(InvalidMessage):
            h.store.call(("add", Conv("u1", "c0"), [FrozenDict(forged)]))
        h.check()
    finally:
        h.stop()


SURROGATES = [
    ("in content", {"role": "user", "content": "\ud800"}),
    ("in a metadata key", {"role": "user", "content": "x", "metadata": {"\udfff": "v"}}),
    ("in a tool call id", {"role": "tool", "tool_call_id": "\udc80", "content": "42"}),
]


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("message", [m for _, m in SURROGATES], ids=[n for n, _ in SURROGATES])
def test_what_validation_accepts_every_store_stores_exactly(
    kind: str, message: dict[str, Any], tmp_path: Path
) -> None:
    # A lone surrogate is a str, but not UTF-8: either validation refuses it (then every
    # store raises InvalidMessage) or every store keeps it and reads it back equal.
    h = Harness(kind, tmp_path)
    try:
        try:
            freeze(message)
        except InvalidMessage:
            with pytest.raises(InvalidMessage):
                h.store.add(Conv("u1", "c0"), [message])
        else:
            h.store.add(Conv("u1", "c0"), [message])
            h.append(Conv("u1", "c0"), [message])
        h.check()
    finally:
        h.stop()
