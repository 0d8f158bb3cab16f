"""Garbage for servers: values whose own methods misbehave, and Hypothesis terms built of them.

Each nasty value breaks one thing a server might do with what it was sent: compare it
(``__eq__`` raises, or answers something that is not a bool), hash it, describe it, ask
its truth, or ask a tuple or str subclass its length or items (their methods are the
caller's). Deep values are 100,000 levels: any recursion over them raises RecursionError.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from otpmem.messages import Conv
from otpmem.stores import Fact, Profile


class RaisingEq:
    """``==`` raises (its hash works)."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("this value's __eq__ raises")

    __hash__ = object.__hash__


class RaisingHash:
    """``hash`` raises."""

    def __hash__(self) -> int:
        raise RuntimeError("this value's __hash__ raises")


class RaisingRepr:
    """``repr`` raises."""

    def __repr__(self) -> str:
        raise RuntimeError("this value's __repr__ raises")


class RaisingBool:
    """``==`` answers itself, whose truth raises: what a numpy array's ``==`` does, worse."""

    def __eq__(self, other: object) -> Any:
        return self

    def __bool__(self) -> bool:
        raise RuntimeError("this value's __bool__ raises")

    __hash__ = object.__hash__


class RaisingStr(str):
    """A str whose ``==`` and ``hash`` raise: it passes ``isinstance(x, str)``."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("this str's __eq__ raises")

    def __hash__(self) -> int:
        raise RuntimeError("this str's __hash__ raises")


class RaisingTuple(tuple[Any, ...]):
    """A tuple whose length, items and iteration raise: it passes ``isinstance(x, tuple)``."""

    def __len__(self) -> int:
        raise RuntimeError("this tuple's __len__ raises")

    def __getitem__(self, index: Any) -> Any:
        raise RuntimeError("this tuple's __getitem__ raises")

    def __iter__(self) -> Any:
        raise RuntimeError("this tuple's __iter__ raises")


def deep_list(depth: int = 100_000) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int = 100_000) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"k": value}
    return value


DEEP_LIST, DEEP_DICT = deep_list(), deep_dict()

NASTY: list[Any] = [
    RaisingEq(),
    RaisingHash(),
    RaisingRepr(),
    RaisingBool(),
    RaisingStr("add"),
    RaisingStr("u"),
    RaisingTuple(("add", "c")),
    np.array([1, 2]),
    np.float64("nan"),
    math.nan,
    math.inf,
    DEEP_LIST,
    DEEP_DICT,
]
"""One of each misbehaviour; each is used as it is (the same objects every time)."""

HASHABLE_NASTY: list[Any] = [RaisingEq(), RaisingRepr()]
"""Nasty values a dict can hold as keys (the others cannot be inserted at all)."""


def one_of_these(values: list[Any]) -> st.SearchStrategy[Any]:
    """``sampled_from`` by position: Hypothesis describes a strategy by its values' reprs,
    which these values refuse (or take 100,000 levels to give)."""
    return st.integers(0, len(values) - 1).map(lambda n: values[n])


NASTIES = one_of_these(NASTY)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=6),
    st.binary(max_size=4),
    NASTIES,
    NASTIES,  # twice: a third of the leaves misbehave
)
KEYS = st.one_of(st.text(max_size=4), st.integers(), one_of_these(HASHABLE_NASTY))

TERMS = st.recursive(
    SCALARS,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.tuples(kids),
        st.tuples(kids, kids),
        st.dictionaries(KEYS, kids, max_size=3),
    ),
    max_leaves=6,
)
"""Any term: None, numbers (NaN and the infinities too), text, bytes, the nasty values, and
lists, tuples and dicts of them."""


def requests(operations: list[str], templates: list[Any]) -> st.SearchStrategy[list[Any]]:
    """Garbage for a server that answers ``operations``, a few requests at a time: bare
    terms, its operations with arguments of garbage, and (most often) its well-formed
    requests (``templates``, each a function of one term) with garbage in one place."""
    templated = st.builds(
        lambda make, term: make(term), st.sampled_from(templates), st.one_of(NASTIES, TERMS)
    )
    prefixed = st.builds(
        lambda op, args: (op, *args), st.sampled_from(operations), st.lists(TERMS, max_size=3)
    )
    return st.lists(st.one_of(TERMS, prefixed, templated, templated), min_size=1, max_size=4)


def examples(count: int) -> settings:
    """Modest, derandomized runs: the same examples every time, a few seconds in all."""
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


# -- a store's requests, with garbage in one place ---------------------------------------------

MSG = {"role": "user", "content": "x"}
G = Conv("garbage-user", "garbage")
"""A conversation garbage may write to: never one a test keeps."""

STORE_OPERATIONS = [
    "add",
    "clear",
    "forget_user",
    "import",
    "save_facts",
    "save_profile",
    "delete_profile",
    "request_extraction",
]

STORE_TEMPLATES: list[Callable[[Any], Any]] = [
    lambda g: ("add", g, [MSG]),
    lambda g: ("add", G, g),
    lambda g: ("add", G, [MSG, g]),
    lambda g: ("add", G, [{"role": "user", "content": g}]),
    lambda g: ("add", G, [{"role": g, "content": "x"}]),
    lambda g: ("add", G, [{**MSG, "metadata": {"k": g}}]),
    lambda g: ("add", G, [{"role": "assistant", "content": None, "tool_calls": g}]),
    lambda g: ("add", G, [{"role": "assistant", "content": None, "tool_calls": [g]}]),
    lambda g: (
        "add",
        G,
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": g, "type": g, "function": {"name": "f", "arguments": "{}"}}],
            }
        ],
    ),
    lambda g: ("add", G, [MSG], g, None),
    lambda g: ("add", G, [MSG], None, g),
    lambda g: ("add", Conv(g, "c"), [MSG]),
    lambda g: ("add", Conv("u", g), [MSG]),
    lambda g: ("clear", g),
    lambda g: ("forget_user", g),
    lambda g: ("import", g),
    lambda g: ("import", [g]),
    lambda g: ("import", [(G, g)]),
    lambda g: ("import", [(g, [MSG])]),
    lambda g: ("save_facts", g, [], [], None, 200, False),
    lambda g: ("save_facts", "u", g, [], None, 200, False),
    lambda g: ("save_facts", "u", [g], [], None, 200, False),
    lambda g: ("save_facts", "u", [Fact("u", "k", g)], [], None, 200, False),
    lambda g: ("save_facts", "u", [Fact("u", g, "v")], [], None, 200, False),
    lambda g: ("save_facts", "u", [Fact(g, "k", "v")], [], None, 200, False),
    lambda g: ("save_facts", "u", [], [g], None, 200, False),
    lambda g: ("save_facts", "u", [], [], g, 200, False),
    lambda g: ("save_facts", "u", [], [], (g, 1), 200, False),
    lambda g: ("save_facts", "u", [], [], None, g, False),
    lambda g: ("save_facts", "u", [], [], None, 200, g),
    lambda g: ("save_profile", g),
    lambda g: ("save_profile", Profile(g, "s")),
    lambda g: ("save_profile", Profile("u", g)),
    lambda g: ("save_profile", Profile("u", "s", g)),
    lambda g: ("save_profile", Profile("u", "s", {"k": g})),
    lambda g: ("delete_profile", g),
    lambda g: ("request_extraction", g, 1),
    lambda g: ("request_extraction", Conv("u", "c"), g),
]
