"""LevelDBStore durability: kill -9 of a writing process, reopen, supervised kills.

The kill -9 cases run a real writer in a child interpreter: it prints ``ack <w> <i>`` only
after ``add`` of batch ``i`` returned, the test SIGKILLs it after reading N acks and then
reopens the directory. Every acknowledged batch must be there, whole and in order, and no
batch may be there in part.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors import NoProcess, ServerExited, faults
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, LevelDBStoreHandle
from otpmem.supervisors import ChildSpec, Supervisor
from tests.support import WAIT, LineReader, Trace

ROOT = Path(__file__).resolve().parents[1]
CHILD_WAIT = 20.0  # generous: a child interpreter must import otpmem and plyvel first

# argv: path, writers, parts, shared ("1": every writer appends to one conversation).
WRITER = r"""
import sys, threading
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore

path, writers, parts, shared = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
store = LevelDBStore.start_link(path)
out = threading.Lock()

def conv_of(w):
    return Conv("shared", "all") if shared == "1" else Conv(f"writer{w}", "conv")

def write(w):
    conv = conv_of(w)
    i = 0
    while True:
        store.add(conv, [
            {"role": "user", "content": f"{w}/{i}/{j} " + "x" * 200,
             "metadata": {"writer": w, "batch": i, "part": j}}
            for j in range(parts)
        ])
        with out:
            print(f"ack {w} {i}", flush=True)
        i += 1

with out:
    print("ready", flush=True)
threads = [threading.Thread(target=write, args=(w,), daemon=True) for w in range(writers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


class Child:
    """A child interpreter whose output lines are read by a thread, with deadlines."""

    def __init__(self, program: str, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", program, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=env,
        )
        self.output = LineReader(self.proc, name="child-reader")

    def read_until(self, done: Callable[[str], bool], timeout: float = CHILD_WAIT) -> None:
        """Consume lines until ``done(line)`` holds for one; fail on EOF or timeout."""
        self.output.read_until(done, timeout, "line the test awaits from the child")

    def kill9(self) -> None:
        """SIGKILL the child and reap it."""
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=CHILD_WAIT) == -signal.SIGKILL

    def close(self) -> None:
        self.output.close(CHILD_WAIT)


def run_writer_and_kill(
    path: Path, writers: int, parts: int, shared: bool, enough: Callable[[dict[int, int]], bool]
) -> dict[int, int]:
    """Run the writer until ``enough(acked)``, SIGKILL it; return writer -> batches acked."""
    child = Child(WRITER, str(path), str(writers), str(parts), "1" if shared else "0")
    acked: dict[int, int] = dict.fromkeys(range(writers), 0)

    def on_line(line: str) -> bool:
        if line.startswith("ack "):
            _, w, i = line.split()
            # Batches of one writer are acknowledged in order: i is its (i+1)-th ack.
            assert int(i) == acked[int(w)], f"writer {w} acked {i} out of order"
            acked[int(w)] = int(i) + 1
        return enough(acked)

    try:
        child.read_until(lambda line: line == "ready")
        child.read_until(on_line)
        child.kill9()
    finally:
        child.close()
    return acked


def check_batches(messages: list[dict[str, Any]], writer: int, parts: int) -> int:
    """Assert ``messages`` are whole batches 0..m-1 of ``writer``, in order; return m."""
    got = [
        (m["metadata"]["writer"], m["metadata"]["batch"], m["metadata"]["part"]) for m in messages
    ]
    assert len(got) % parts == 0, f"a partial batch is stored: {got[-parts:]}"
    m = len(got) // parts
    assert got == [(writer, i, j) for i in range(m) for j in range(parts)]
    for msg in messages:
        w, i, j = msg["metadata"]["writer"], msg["metadata"]["batch"], msg["metadata"]["part"]
        assert msg["content"] == f"{w}/{i}/{j} " + "x" * 200
        assert msg["role"] == "user"
    return m


MID_STREAM = random.Random(0x1E7E1DB).randrange(80, 240)


@pytest.mark.parametrize("acks", [1, 7, 50, MID_STREAM], ids=["1", "7", "50", "mid-stream"])
def test_kill_9_keeps_every_acknowledged_batch_whole_and_in_order(
    tmp_path: Path, acks: int, opened: Callable[[Path], LevelDBStoreHandle]
) -> None:
    parts = 5
    path = tmp_path / "db"
    acked = run_writer_and_kill(path, 1, parts, False, lambda a: a[0] >= acks)
    assert acked[0] == acks

    store = opened(path)
    conv = Conv("writer0", "conv")
    messages = store.get(conv)
    batches = check_batches(messages, 0, parts)
    assert batches >= acks, f"{acks} batches acknowledged, {batches} stored"
    assert store.count(conv) == len(messages)
    assert store.get(conv, last=parts) == messages[-parts:]
    assert store.conversations() == [conv]


def test_appends_continue_after_the_last_message_after_a_kill_9(
    tmp_path: Path, opened: Callable[[Path], LevelDBStoreHandle]
) -> None:
    parts = 3
    path = tmp_path / "db"
    run_writer_and_kill(path, 1, parts, False, lambda a: a[0] >= 10)
    conv = Conv("writer0", "conv")

    store = opened(path)
    before = store.get(conv)
    batches = check_batches(before, 0, parts)
    extra = [
        {
            "role": "user",
            "content": f"0/{batches}/{j} " + "x" * 200,
            "metadata": {"writer": 0, "batch": batches, "part": j},
        }
        for j in range(parts)
    ]
    store.add(conv, extra)
    assert store.get(conv) == before + extra
    assert store.count(conv) == len(before) + parts
    store.stop()

    again = opened(path)
    assert check_batches(again.get(conv), 0, parts) == batches + 1
    assert again.count(conv) == len(before) + parts


def test_kill_9_of_concurrent_writers_keeps_each_writers_order(
    tmp_path: Path, opened: Callable[[Path], LevelDBStoreHandle]
) -> None:
    writers, parts = 4, 4
    path = tmp_path / "db"
    acked = run_writer_and_kill(
        path, writers, parts, False, lambda a: sum(a.values()) >= 80 and min(a.values()) >= 3
    )

    store = opened(path)
    convs = [Conv(f"writer{w}", "conv") for w in range(writers)]
    assert sorted(store.conversations()) == sorted(convs)
    for w, conv in enumerate(convs):
        messages = store.get(conv)
        batches = check_batches(messages, w, parts)
        assert batches >= acked[w], f"writer {w}: {acked[w]} acknowledged, {batches} stored"
        assert store.count(conv) == len(messages)


def test_kill_9_of_writers_sharing_one_conversation_keeps_batches_contiguous(
    tmp_path: Path, opened: Callable[[Path], LevelDBStoreHandle]
) -> None:
    writers, parts = 4, 3
    path = tmp_path / "db"
    acked = run_writer_and_kill(
        path, writers, parts, True, lambda a: sum(a.values()) >= 80 and min(a.values()) >= 3
    )

    store = opened(path)
    conv = Conv("shared", "all")
    messages = store.get(conv)
    assert store.count(conv) == len(messages)
    assert len(messages) % parts == 0, "a partial batch is stored"
    per_writer: dict[int, list[dict[str, Any]]] = {w: [] for w in range(writers)}
    for start in range(0, len(messages), parts):
        batch = messages[start : start + parts]
        # One add is one run of consecutive sequence numbers: never interleaved.
        owners = {(m["metadata"]["writer"], m["metadata"]["batch"]) for m in batch}
        assert len(owners) == 1, f"batches interleaved at {start}: {batch}"
        per_writer[batch[0]["metadata"]["writer"]].extend(batch)
    for w in range(writers):
        batches = check_batches(per_writer[w], w, parts)
        assert batches >= acked[w], f"writer {w}: {acked[w]} acknowledged, {batches} stored"


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_survives_restart_history_intact_and_appends_continue(
    tmp_path: Path, opened: Callable[[Path], LevelDBStoreHandle]
) -> None:
    # beamai DETS survives_restart_test: add M1, M2; stop; reopen; [M1, M2]; add M3.
    m1, m2, m3 = msg("M1"), {"role": "assistant", "content": "M2"}, msg("M3")
    store = opened(tmp_path / "db")
    store.add("c", [m1])
    store.add("c", [m2])
    store.stop()

    store = opened(tmp_path / "db")
    assert store.get("c") == [m1, m2]
    store.add("c", [m3])
    assert store.get("c") == [m1, m2, m3]
    store.stop()

    store = opened(tmp_path / "db")
    assert store.get("c") == [m1, m2, m3]
    assert store.count("c") == 3


def test_reopen_restores_every_conversation_with_users_isolated(
    tmp_path: Path, opened: Callable[[Path], LevelDBStoreHandle]
) -> None:
    alice, bob, anon = Conv("alice", "c"), Conv("bob", "c"), "c"
    expected: dict[Conv, list[dict[str, Any]]] = {
        alice: [msg("alice 1"), msg("alice 2")],
        bob: [msg("bob 1")],
        Conv(None, "c"): [msg("nobody 1"), msg("nobody 2"), msg("nobody 3")],
    }
    for user in ("alice", "bob", "carol", None):
        for k in range(10):
            expected[Conv(user, f"conv{k}")] = [msg(f"{user}/{k}/{j}") for j in range(k % 4 + 1)]

    store = opened(tmp_path / "db")
    for conv, messages in expected.items():
        store.add(conv, messages[:1])
    for conv, messages in expected.items():
        if messages[1:]:
            store.add(conv, messages[1:])
    store.stop()

    store = opened(tmp_path / "db")
    assert sorted(store.conversations(), key=repr) == sorted(expected, key=repr)
    for conv, messages in expected.items():
        assert store.get(conv) == messages
        assert store.count(conv) == len(messages)
    assert store.get(alice) == [msg("alice 1"), msg("alice 2")]
    assert store.get(bob) == [msg("bob 1")]
    assert store.get(anon) == [msg("nobody 1"), msg("nobody 2"), msg("nobody 3")]
    assert sorted(store.conversations("alice"), key=repr) == sorted(
        (c for c in expected if c.user_id == "alice"), key=repr
    )
    assert sorted(store.conversations("bob"), key=repr) == sorted(
        (c for c in expected if c.user_id == "bob"), key=repr
    )
    assert store.conversations("dave") == []


def test_get_last_n_among_many_conversations_returns_only_that_conversations_newest(
    tmp_path: Path, opened: Callable[[Path], LevelDBStoreHandle]
) -> None:
    store = opened(tmp_path / "db")
    # Neighbours in key order: prefix-like ids and users on both sides of the target.
    ids = ["a", "ab", "b", "ba", "b\x00", "b0", "bb"]
    users = [None, "u", "u2", "v"]
    for user in users:
        for cid in ids:
            conv = Conv(user, cid)
            store.add(conv, [msg(f"{user}/{cid}/{j}") for j in range(6)])
    target = Conv("u", "b")
    store.add(target, [msg(f"u/b/{j}") for j in range(6, 12)])
    whole = [msg(f"u/b/{j}") for j in range(12)]

    def check(s: LevelDBStoreHandle) -> None:
        assert s.get(target) == whole
        for n in (0, 1, 3, 11, 12, 13, 1000):
            assert s.get(target, last=n) == (whole[-n:] if n else [])
        assert s.get(Conv("u", "ba"), last=2) == [msg("u/ba/4"), msg("u/ba/5")]
        assert s.get(Conv("u2", "b"), last=1) == [msg("u2/b/5")]
        assert s.get("b", last=1) == [msg("None/b/5")]
        assert s.get(Conv("u", "zzz"), last=3) == []

    check(store)
    store.stop()
    check(opened(tmp_path / "db"))


def test_supervised_store_killed_20_times_loses_no_acknowledged_message(
    tmp_path: Path, opened: Callable[[Path], LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    name = "durable-store"
    conv = Conv("alice", "kills")
    events = Trace()
    # lock_timeout=0: a restart that found the directory still locked would fail at once.
    spec = ChildSpec(
        "store", start=lambda: LevelDBStore.start_link(path, name=name, lock_timeout=0)
    )
    sup = Supervisor.start_link([spec], intensity=100, period=60.0, listeners=[events])
    acked = Trace()
    unexpected: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        store = LevelDBStore.named(name)
        attempt = 0
        while not stop.is_set():
            attempt += 1
            batch = [
                {"role": "user", "content": f"{attempt}/{j}", "metadata": {"attempt": attempt}}
                for j in range(2)
            ]
            try:
                store.add(conv, batch)
            except (NoProcess, ServerExited):
                stop.wait(0.001)  # restarting: back off a little, then retry
                continue
            except BaseException as exc:
                unexpected.append(exc)
                acked(None)  # wake the main thread so it fails now, not on a timeout
                return
            acked(attempt)

    thread = threading.Thread(target=writer, name="kill-writer")
    thread.start()
    try:
        seen_pids: set[object] = set()
        for kill in range(20):
            target = len(acked.items) + 5

            def progressed(items: list[Any], target: int = target) -> bool:
                return len(items) >= target or None in items

            acked.wait_for(progressed, WAIT)
            assert not unexpected, unexpected
            before = [a for a in acked.items if a is not None]
            child = sup.child("store")
            assert child is not None
            seen_pids.add(child.pid)
            faults.kill(child)
            sup.sync()
            restarted = sup.child("store")
            assert restarted is not None and restarted.pid not in seen_pids, f"kill {kill}"
            store = LevelDBStore.named(name)
            stored = [m["metadata"]["attempt"] for m in store.get(conv)[::2]]
            assert set(before) <= set(stored), f"kill {kill}: lost {set(before) - set(stored)}"
        stop.set()
        thread.join(WAIT)
        assert not thread.is_alive()
        assert not unexpected, unexpected

        assert not events.kinds("start_failed"), events.kinds("start_failed")
        assert len(events.kinds("restarted")) == 20
        final = [a for a in acked.items if a is not None]
        store = LevelDBStore.named(name)
        messages = store.get(conv)
        assert store.count(conv) == len(messages)
        assert len(messages) % 2 == 0
        attempts = [m["metadata"]["attempt"] for m in messages]
        assert attempts[::2] == attempts[1::2], "a batch is stored in part"
        stored = attempts[::2]
        assert stored == sorted(set(stored)), "stored out of order or twice"
        assert set(final) <= set(stored), f"lost acknowledged attempts {set(final) - set(stored)}"
    finally:
        stop.set()
        thread.join(WAIT)
        sup.stop()

    reopened = opened(path)
    assert [m["metadata"]["attempt"] for m in reopened.get(conv)] == attempts
