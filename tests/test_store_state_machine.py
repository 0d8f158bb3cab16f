"""Store state stays true: a stateful model of add/clear/forget_user/reopen (issue 10, part 5).

Hypothesis drives random sequences against a plain dict model, on both stores; after every
step ``count == len(get)`` and the contents equal the model's, including after a LevelDB
reopen. Adds race a wipe from a second thread in one of the rules.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore
from tests.support import WAIT

CONVS = [Conv("alice", "a"), Conv("alice", "b"), Conv("bob", "a"), Conv(None, "a")]


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


class StoreModel(RuleBasedStateMachine):
    """The store against a dict of lists."""

    leveldb = False

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[Conv, list[dict[str, Any]]] = {c: [] for c in CONVS}
        self.counter = 0
        self.root = Path(tempfile.mkdtemp(prefix="otpmem-state-"))
        self.store: Any = self._open()

    def _open(self) -> Any:
        if self.leveldb:
            return LevelDBStore.start_link(self.root / "db")
        return MemoryStore.start_link()

    def _next(self) -> dict[str, Any]:
        self.counter += 1
        return msg(str(self.counter))

    @rule(conv=st.sampled_from(CONVS), n=st.integers(1, 3))
    def add(self, conv: Conv, n: int) -> None:
        batch = [self._next() for _ in range(n)]
        self.store.add(conv, batch)
        self.model[conv].extend(batch)

    @rule(conv=st.sampled_from(CONVS))
    def clear(self, conv: Conv) -> None:
        self.store.clear(conv)
        self.model[conv] = []

    @rule(user=st.sampled_from(["alice", "bob"]))
    def forget_user(self, user: str) -> None:
        self.store.forget_user(user)
        for conv in CONVS:
            if conv.user_id == user:
                self.model[conv] = []

    @rule(conv=st.sampled_from(CONVS))
    def wipe_then_add_from_two_threads(self, conv: Conv) -> None:
        """A clear and an add sent together: whichever lands first, the state is one of the
        two orders, never a mix (a stale count, a resurrected message)."""
        after = self._next()
        clearer = threading.Thread(target=self.store.clear, args=(conv,))
        clearer.start()
        self.store.add(conv, [after])
        clearer.join(WAIT)
        stored = self.store.get(conv)
        assert stored in ([], [after])
        self.model[conv] = stored

    @precondition(lambda self: self.leveldb)
    @rule()
    def reopen(self) -> None:
        self.store.stop()
        self.store = self._open()

    @invariant()
    def matches_the_model(self) -> None:
        for conv in CONVS:
            stored = self.store.get(conv)
            assert stored == self.model[conv]
            assert self.store.count(conv) == len(stored)

    def teardown(self) -> None:
        if self.store.alive:
            self.store.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class LevelDBModel(StoreModel):
    leveldb = True


TestMemoryStoreState = StoreModel.TestCase
TestMemoryStoreState.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestLevelDBStoreState = LevelDBModel.TestCase
TestLevelDBStoreState.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)
