"""One rule for conversation keys, in every store and every method (issue 9, part 4).

A conversation is a ``Conv`` or a plain ``str`` (``as_conv``). Anything else, a plain tuple
that looks like a Conv included, is refused with the same TypeError everywhere: before,
``MemoryStore.get(("alice", "c"))`` returned alice's messages while ``count`` and
``LevelDBStore.get`` refused the same key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from otpmem.messages import Conv, as_conv
from otpmem.stores import LevelDBStore, MemoryStore
from otpmem.supervisors import Supervisor


class Text(str):
    """A str subclass: equal to, and hashing like, the plain str."""


class Key(NamedTuple):
    """Someone else's named tuple of the same shape as Conv."""

    user_id: str | None
    conversation_id: str


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


ALICE = [msg("alice one"), msg("alice two")]
NOBODY = [msg("nobody")]

WRONG_KEYS: list[Any] = [
    ("alice", "c"),
    (None, "c"),
    ["alice", "c"],
    Key("alice", "c"),
    Text("c"),
]
WRONG_KEY_IDS = ["tuple", "tuple of no user", "list", "foreign namedtuple", "str subclass"]

USES: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda store, key: store.add(key, [msg("x")]),
    "get": lambda store, key: store.get(key),
    "get last=None": lambda store, key: store.get(key, last=None),
    "get last=0": lambda store, key: store.get(key, last=0),
    "get last=1": lambda store, key: store.get(key, last=1),
    "get last=5": lambda store, key: store.get(key, last=5),
    "count": lambda store, key: store.count(key),
    "clear": lambda store, key: store.clear(key),
    "search": lambda store, key: store.search("alice", conv=key),
    "export": lambda store, key: store.export(key),
}


@pytest.fixture(params=["memory", "supervised memory", "leveldb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store of each kind holding alice's conversation "c" and nobody's "c"."""
    stop: Callable[[], None]
    if request.param == "memory":
        handle: Any = MemoryStore.start_link()
        stop = handle.stop
    elif request.param == "supervised memory":
        sup = Supervisor.start_link([MemoryStore.child_spec("keys-memory")])
        handle, stop = MemoryStore.named("keys-memory"), sup.stop
    else:
        handle = LevelDBStore.start_link(tmp_path / "db")
        stop = handle.stop
    handle.add(Conv("alice", "c"), ALICE)
    handle.add("c", NOBODY)
    yield handle
    stop()


@pytest.mark.parametrize("use", list(USES.values()), ids=list(USES))
@pytest.mark.parametrize("key", WRONG_KEYS, ids=WRONG_KEY_IDS)
def test_a_key_that_is_neither_conv_nor_str_is_refused_with_the_one_type_error(
    store: Any, key: Any, use: Callable[[Any, Any], Any]
) -> None:
    with pytest.raises(TypeError) as expected:
        as_conv(key)
    for _ in range(2):  # the second read would take any fast path the first one warmed
        with pytest.raises(TypeError) as raised:
            use(store, key)
        assert str(raised.value) == str(expected.value)
    assert store.get(Conv("alice", "c")) == ALICE
    assert store.get("c") == NOBODY
    assert set(store.conversations()) == {Conv("alice", "c"), Conv(None, "c")}


@pytest.mark.parametrize("last", [None, 0, 1, 5])
@pytest.mark.parametrize(
    ("key", "expected"),
    [(Conv("alice", "c"), ALICE), (Conv(None, "c"), NOBODY), ("c", NOBODY)],
    ids=["Conv", "Conv of no user", "str"],
)
def test_conv_and_str_keys_read_the_same_conversation_everywhere(
    store: Any, key: Any, expected: list[dict[str, Any]], last: int | None
) -> None:
    wanted = expected if last is None else expected[len(expected) - min(last, len(expected)) :]
    for _ in range(2):
        assert store.get(key, last=last) == wanted
    assert store.count(key) == len(expected)


def test_the_type_error_says_what_a_conversation_is() -> None:
    with pytest.raises(TypeError) as raised:
        as_conv(("alice", "c"))
    assert "Conv(user_id, conversation_id) or a str" in str(raised.value)
    assert "('alice', 'c')" in str(raised.value)
