"""LevelDBStore error paths: each a clear error of a named type, stored data untouched."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otpmem.messages import Conv, InvalidMessage
from otpmem.stores import (
    LevelDBStore,
    LevelDBStoreHandle,
    StoreCorrupt,
    StoreLocked,
    StoreUnavailable,
)
from tests.support import LineReader

ROOT = Path(__file__).resolve().parents[1]
CHILD_WAIT = 20.0

# Holds the LevelDB lock of argv[1] until a line arrives on stdin.
HOLDER = r"""
import sys, plyvel
db = plyvel.DB(sys.argv[1], create_if_missing=True)
print("locked", flush=True)
sys.stdin.readline()
db.close()
print("released", flush=True)
"""


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


class Holder:
    """A child interpreter holding a directory's LevelDB lock; lines read with deadlines."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self.output = LineReader(self.proc, name="holder-reader")

    def expect(self, wanted: str) -> None:
        awaited = f"{wanted!r} from the holder"
        self.output.read_until(lambda line: line == wanted, CHILD_WAIT, awaited)

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        self.expect("released")
        assert self.proc.wait(timeout=CHILD_WAIT) == 0

    def close(self) -> None:
        self.output.close(CHILD_WAIT)


def seed(path: Path) -> dict[Conv, list[dict[str, Any]]]:
    """Create a store at ``path`` with a few conversations, stop it, return its content."""
    content = {
        Conv(None, "c"): [msg("one"), msg("two", "assistant")],
        Conv("alice", "c"): [msg("alice")],
    }
    store = LevelDBStore.start_link(path)
    try:
        for conv, messages in content.items():
            store.add(conv, messages)
    finally:
        store.stop()
    return content


def assert_holds(store: LevelDBStoreHandle, content: dict[Conv, list[dict[str, Any]]]) -> None:
    assert sorted(store.conversations(), key=repr) == sorted(content, key=repr)
    for conv, messages in content.items():
        assert store.get(conv) == messages
        assert store.count(conv) == len(messages)


# -- locks -----------------------------------------------------------------------------------


def test_directory_locked_by_another_process_raises_store_locked_naming_the_path(
    tmp_path: Path, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    content = seed(path)
    holder = Holder(path)
    try:
        holder.expect("locked")
        started = time.monotonic()
        with pytest.raises(StoreLocked) as info:
            LevelDBStore.start_link(path, lock_timeout=0.2)
        assert time.monotonic() - started >= 0.2  # it waited for the lock before giving up
        assert str(path) in str(info.value)
        holder.release()
    finally:
        holder.close()
    assert_holds(opened(path, lock_timeout=0.2), content)


def test_lock_released_while_waiting_opens_the_store(
    tmp_path: Path, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    content = seed(path)
    holder = Holder(path)
    results: queue.Queue[LevelDBStoreHandle | BaseException] = queue.Queue()
    try:
        holder.expect("locked")

        def open_waiting() -> None:
            try:
                results.put(LevelDBStore.start_link(path, lock_timeout=CHILD_WAIT))
            except BaseException as exc:
                results.put(exc)

        waiter = threading.Thread(target=open_waiting, name="lock-waiter")
        waiter.start()
        holder.release()
        waiter.join(CHILD_WAIT + 5)
        assert not waiter.is_alive()
    finally:
        holder.close()
    store = results.get_nowait()
    assert isinstance(store, LevelDBStoreHandle), store
    try:
        assert_holds(store, content)
    finally:
        store.stop()


def test_second_store_on_the_same_path_in_one_process_raises_store_locked(
    tmp_path: Path, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    first = opened(path)
    first.add("c", [msg("kept")])
    with pytest.raises(StoreLocked) as info:
        LevelDBStore.start_link(path, lock_timeout=0.2)
    assert str(path) in str(info.value)
    # The first store is unharmed and still serving.
    assert first.alive
    first.add("c", [msg("more")])
    assert first.get("c") == [msg("kept"), msg("more")]
    first.stop()
    assert opened(path, lock_timeout=0.2).get("c") == [msg("kept"), msg("more")]


def test_non_lock_io_error_is_unavailable_even_if_the_path_says_held(tmp_path: Path) -> None:
    # LOCK is a directory: "IO error: <path>/LOCK: Is a directory". That is no lock held by
    # anyone, whatever words the path contains: StoreUnavailable, without waiting.
    for parent in ("plain", "held", "unavailable"):
        path = tmp_path / parent / "db"
        (path / "LOCK").mkdir(parents=True)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as info:
            LevelDBStore.start_link(path, lock_timeout=2.0)
        assert time.monotonic() - started < 1.0, f"{parent}: waited as if locked"
        assert str(path) in str(info.value)
        assert (path / "LOCK").is_dir()


# -- unavailable -----------------------------------------------------------------------------


def test_directory_without_permission_raises_store_unavailable(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        parent = tmp_path / "readonly"
        parent.mkdir(mode=0o500)
        parent.chmod(0o500)
        path = parent / "db"
    else:
        # Permission bits do not stop root: a path under a regular file cannot be created.
        parent = tmp_path / "a-file"
        parent.write_text("not a directory")
        path = parent / "db"
    try:
        with pytest.raises(StoreUnavailable) as info:
            LevelDBStore.start_link(path, lock_timeout=0.2)
    finally:
        if parent.is_dir():
            parent.chmod(0o700)  # let tmp_path be cleaned up
    assert str(path) in str(info.value)
    assert not path.exists()


def test_path_that_is_a_regular_file_raises_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"precious")
    with pytest.raises(StoreUnavailable) as info:
        LevelDBStore.start_link(path, lock_timeout=0.2)
    assert str(path) in str(info.value)
    assert path.read_bytes() == b"precious"


def test_path_under_a_regular_file_raises_store_unavailable(tmp_path: Path) -> None:
    parent = tmp_path / "file"
    parent.write_bytes(b"precious")
    with pytest.raises(StoreUnavailable):
        LevelDBStore.start_link(parent / "sub" / "db", lock_timeout=0.2)
    assert parent.read_bytes() == b"precious"


# -- corrupt ---------------------------------------------------------------------------------


def _manifest(path: Path) -> Path:
    (manifest,) = path.glob("MANIFEST-*")
    return manifest


@pytest.mark.parametrize(
    ("target", "garbage"),
    [
        ("CURRENT", b"\x00\xffgarbage"),
        ("CURRENT", b"MANIFEST-999999\n"),
        ("MANIFEST", b"\xde\xad\xbe\xef" * 1024),
    ],
    ids=["current-binary", "current-dangling", "manifest"],
)
def test_corrupt_directory_raises_store_corrupt_mentioning_repair_db(
    tmp_path: Path, target: str, garbage: bytes, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    content = seed(path)
    victim = path / "CURRENT" if target == "CURRENT" else _manifest(path)
    original = victim.read_bytes()
    victim.write_bytes(garbage)
    files_before = {p.name: p.read_bytes() for p in path.iterdir() if p.name != "LOCK"}

    with pytest.raises(StoreCorrupt) as info:
        LevelDBStore.start_link(path, lock_timeout=0.2)
    assert "repair_db" in str(info.value)
    assert str(path) in str(info.value)
    # Nothing was repaired, rewritten or deleted behind the caller's back.
    files_after = {p.name: p.read_bytes() for p in path.iterdir() if p.name != "LOCK"}
    for name, data in files_before.items():
        if not name.startswith("LOG"):
            assert files_after.get(name) == data, f"{name} was changed"

    # Put the file back: the data was untouched, and the directory is not left locked.
    victim.write_bytes(original)
    assert_holds(opened(path, lock_timeout=0.2), content)


# -- argument types --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"path": 123},
        {"path": None},
        {"path": b"/tmp/bytes-path"},
        {"path": "PATH", "sync": "yes"},
        {"path": "PATH", "sync": 1},
        {"path": "PATH", "lock_timeout": "soon"},
    ],
    ids=["path-int", "path-none", "path-bytes", "sync-str", "sync-int", "lock-timeout-str"],
)
def test_bad_argument_types_raise_type_error_and_create_nothing(
    tmp_path: Path, kwargs: dict[str, Any]
) -> None:
    if kwargs["path"] == "PATH":
        kwargs["path"] = tmp_path / "db"
    with pytest.raises(TypeError):
        LevelDBStore.start_link(**kwargs)
    assert list(tmp_path.iterdir()) == []


# -- bad input through the handle -------------------------------------------------------------


def test_invalid_input_through_the_handle_raises_in_the_caller_and_stores_nothing(
    tmp_path: Path, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    content = seed(path)
    store = opened(path)
    bad: list[tuple[type[BaseException], Callable[[], object]]] = [
        (InvalidMessage, lambda: store.add("c", [msg("ok"), {"role": "robot", "content": "x"}])),
        (InvalidMessage, lambda: store.add("c", [msg("ok"), {"role": "user", "extra": 1}])),
        (InvalidMessage, lambda: store.add("c", [{"role": "user", "content": ("tuple",)}])),
        (InvalidMessage, lambda: store.add("c", [{"role": "user", "content": float("nan")}])),
        (InvalidMessage, lambda: store.add("c", [{"role": "user", "metadata": {1: "x"}}])),
        (InvalidMessage, lambda: store.add("c", "not a list")),  # type: ignore[arg-type]
        (TypeError, lambda: store.add(123, [msg("x")])),  # type: ignore[arg-type]
        (ValueError, lambda: store.add("", [msg("x")])),
        (ValueError, lambda: store.add(Conv("", "c"), [msg("x")])),
        (ValueError, lambda: store.add(Conv("alice", ""), [msg("x")])),
        (ValueError, lambda: store.get("c", last=-1)),
        (ValueError, lambda: store.get("c", last=1.5)),  # type: ignore[arg-type]
        (ValueError, lambda: store.get("c", last=True)),
        (TypeError, lambda: store.get(None)),  # type: ignore[arg-type]
        (TypeError, lambda: store.count(42)),  # type: ignore[arg-type]
        (TypeError, lambda: store.clear(42)),  # type: ignore[arg-type]
        (ValueError, lambda: store.clear("")),
        (ValueError, lambda: store.forget_user(None)),  # type: ignore[arg-type]
        (ValueError, lambda: store.forget_user("")),
        (ValueError, lambda: store.conversations("")),
        (InvalidMessage, lambda: store.import_({"format": "nope"})),
    ]
    for expected, action in bad:
        with pytest.raises(expected):
            action()
        assert store.alive
    assert_holds(store, content)
    with pytest.raises(InvalidMessage) as info:
        store.add("c", [msg("ok"), {"role": "robot"}])
    assert info.value.index == 1 and info.value.field == "role"
    store.stop()
    assert_holds(opened(path), content)


GARBAGE: list[Any] = [
    42,
    None,
    "add",
    (),
    ("nope",),
    ("add",),
    ("add", "c"),
    ("add", "c", "not a list"),
    ("add", 123, [msg("x")]),
    ("add", "c", [{"role": "robot"}]),
    ("add", "c", [msg("x")], "extra"),
    ("clear",),
    ("clear", None),
    ("clear", 42),
    ("forget_user",),
    ("forget_user", 5),
    ("forget_user", None),
    ("forget_user", ""),
    ("import", 5),
    ("import", [(1, 2)]),
]


@pytest.mark.parametrize("garbage", GARBAGE, ids=[repr(g) for g in GARBAGE])
def test_raw_garbage_call_gets_value_or_type_error_and_the_store_keeps_serving(
    tmp_path: Path, garbage: Any, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    content = seed(path)
    store = opened(path)
    outcome: object
    try:
        outcome = store.call(garbage)
    except Exception as exc:
        outcome = exc
    assert store.alive, f"the store died of {garbage!r}: {store.exit_reason!r}"
    assert_holds(store, content)  # garbage never touches the data
    assert isinstance(outcome, ValueError | TypeError), f"{garbage!r} answered {outcome!r}"
    store.add("c", [msg("after")])
    assert store.get("c") == [*content[Conv(None, "c")], msg("after")]


# -- clear deletes exactly one range ----------------------------------------------------------


def test_clear_deletes_exactly_one_conversations_range(
    tmp_path: Path, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    store = opened(path)
    convs = [
        Conv(user, cid)
        for user in (None, "u", "u2", "uu")
        for cid in ("a", "ab", "a\x00", "b", "aa")
    ]
    content = {
        conv: [msg(f"{conv.user_id}/{conv.conversation_id}/{j}") for j in range(3)]
        for conv in convs
    }
    for conv, messages in content.items():
        store.add(conv, messages)

    store.clear(Conv("u", "a"))
    del content[Conv("u", "a")]
    assert store.get(Conv("u", "a")) == []
    assert store.count(Conv("u", "a")) == 0
    assert_holds(store, content)

    store.clear("a")  # the anonymous "a", not u's or u2's
    del content[Conv(None, "a")]
    assert_holds(store, content)

    store.clear(Conv("nobody", "a"))  # absent: a no-op
    assert_holds(store, content)

    # A cleared conversation starts afresh.
    store.add(Conv("u", "a"), [msg("fresh")])
    content[Conv("u", "a")] = [msg("fresh")]
    assert_holds(store, content)
    store.stop()
    assert_holds(opened(path), content)


def test_forget_user_deletes_only_that_user_not_prefix_like_ones(
    tmp_path: Path, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    store = opened(path)
    content = {
        conv: [msg(repr(conv))]
        for conv in (
            Conv("u", "a"),
            Conv("u", "b"),
            Conv("u2", "a"),
            Conv("uu", "a"),
            Conv(None, "u"),
        )
    }
    for conv, messages in content.items():
        store.add(conv, messages)
    store.forget_user("u")
    for conv in (Conv("u", "a"), Conv("u", "b")):
        del content[conv]
    assert store.conversations("u") == []
    assert_holds(store, content)
    store.stop()
    assert_holds(opened(path), content)
