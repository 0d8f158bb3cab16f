"""A clear or forget_user is ordered with the adds that follow it (issue 10, part 5)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors.faults import FaultPlan
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, LevelDBStoreHandle
from tests.support import WAIT


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def queued(store: LevelDBStoreHandle, n: int) -> bool:
    """Wait until ``n`` requests wait in the store's mailbox."""
    done = threading.Event()
    for _ in range(int(WAIT / 0.002)):
        if len(store.resolve().mailbox) >= n:
            return True
        done.wait(0.002)
    return False


@pytest.mark.parametrize(
    "wipe",
    [
        lambda store, conv: store.clear(conv),
        lambda store, conv: store.forget_user(conv.user_id),
    ],
    ids=["clear", "forget_user"],
)
def test_an_add_right_behind_a_wipe_counts_from_nothing(
    tmp_path: Path, wipe: Callable[[LevelDBStoreHandle, Conv], None]
) -> None:
    """The add is handled right after the wipe, before the wipe's batch is on disk: it must
    not read the old count back from disk (it did: count 5 with one message stored, and the
    wrong count survived a reopen)."""
    conv = Conv("alice", "c")
    release = threading.Event()
    plan = FaultPlan().hold_when(lambda m: m == ("flush",), release)
    store = LevelDBStore.start_link(tmp_path / "db", faults=plan)
    try:
        store.add(conv, [msg(str(i)) for i in range(4)])
        threads = [threading.Thread(target=store.flush)]  # holds the server
        threads[0].start()
        assert _held(plan)
        threads.append(threading.Thread(target=wipe, args=(store, conv)))
        threads[1].start()
        assert queued(store, 1)
        threads.append(threading.Thread(target=store.add, args=(conv, [msg("after")])))
        threads[2].start()
        assert queued(store, 2)
        release.set()
        for thread in threads:
            thread.join(WAIT)
        assert store.get(conv) == [msg("after")]
        assert store.count(conv) == 1
    finally:
        release.set()
        store.stop()
    reopened = LevelDBStore.start_link(tmp_path / "db")
    try:
        assert reopened.count(conv) == 1
        assert reopened.get(conv) == [msg("after")]
    finally:
        reopened.stop()


def _held(plan: FaultPlan) -> bool:
    done = threading.Event()
    for _ in range(int(WAIT / 0.002)):
        if plan.count("hold_when"):
            return True
        done.wait(0.002)
    return False
