"""Store state stays true: a stateful model of add/keyed add/import/clear/forget_user/reopen.

Hypothesis drives random sequences against a plain dict model, on both stores; after every
step ``count == len(get)`` and the contents equal the model's, including after a LevelDB
reopen. One rule sends two to four operations from as many threads at once: the state after
them must be what one of their orders gives (each operation is atomic), never a mix.
"""

from __future__ import annotations

import copy
import itertools
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from otpmem.messages import Conv
from otpmem.stores import EXPORT_FORMAT, EXPORT_VERSION, LevelDBStore, MemoryStore
from tests.support import WAIT

CONVS = [Conv("alice", "a"), Conv("alice", "b"), Conv("bob", "a"), Conv(None, "a")]
KEYS = ["k1", "k2", "k3"]
State = tuple[dict[Conv, list[dict[str, Any]]], dict[Conv, set[str]]]


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def document(entries: list[tuple[Conv, list[dict[str, Any]]]]) -> dict[str, Any]:
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "conversations": [
            {"user_id": c.user_id, "conversation_id": c.conversation_id, "messages": m}
            for c, m in entries
        ],
    }


def apply(state: State, op: tuple[Any, ...]) -> None:
    """What one operation does to the model: messages, and the keys each conversation holds."""
    messages, keys = state
    kind = op[0]
    if kind == "add":
        _, conv, batch, key = op
        if key is None or key not in keys[conv]:
            messages[conv].extend(batch)
            if key is not None:
                keys[conv].add(key)
    elif kind == "import":
        for conv, batch in op[1]:
            digest = repr(batch)  # the store keys each conversation by its messages' digest
            if batch and digest not in keys[conv]:
                messages[conv].extend(batch)
                keys[conv].add(digest)
    elif kind == "clear":
        messages[op[1]], keys[op[1]] = [], set()
    else:
        for conv in CONVS:
            if conv.user_id == op[1]:
                messages[conv], keys[conv] = [], set()


def perform(store: Any, op: tuple[Any, ...]) -> None:
    """Send one operation to the store."""
    kind = op[0]
    if kind == "add":
        store.add(op[1], op[2], op[3])
    elif kind == "import":
        store.import_(document(op[1]))
    elif kind == "clear":
        store.clear(op[1])
    else:
        store.forget_user(op[1])


class StoreModel(RuleBasedStateMachine):
    """The store against a dict of lists."""

    leveldb = False

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[Conv, list[dict[str, Any]]] = {c: [] for c in CONVS}
        self.keys: dict[Conv, set[str]] = {c: set() for c in CONVS}
        self.imported: list[list[tuple[Conv, list[dict[str, Any]]]]] = []
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
        self._do(("clear", conv))

    @rule(user=st.sampled_from(["alice", "bob"]))
    def forget_user(self, user: str) -> None:
        self._do(("forget_user", user))

    @rule(conv=st.sampled_from(CONVS), key=st.sampled_from(KEYS))
    def keyed_add(self, conv: Conv, key: str) -> None:
        self._do(("add", conv, [self._next()], key))

    @rule(convs=st.lists(st.sampled_from(CONVS), min_size=1, max_size=2, unique=True))
    def import_new(self, convs: list[Conv]) -> None:
        entries = [(conv, [self._next()]) for conv in convs]
        self.imported.append(entries)
        self._do(("import", entries))

    @precondition(lambda self: self.imported)
    @rule(data=st.data())
    def import_again(self, data: st.DataObject) -> None:
        self._do(("import", data.draw(st.sampled_from(self.imported))))

    @rule(data=st.data(), n=st.integers(2, 4))
    def concurrently(self, data: st.DataObject, n: int) -> None:
        """n operations from n threads at once: the result is one of their orders."""
        ops = [data.draw(self._operation()) for _ in range(n)]
        note(f"concurrently: {ops}")
        start = threading.Barrier(n)

        def run(op: tuple[Any, ...]) -> None:
            start.wait(WAIT)
            perform(self.store, op)

        threads = [threading.Thread(target=run, args=(op,)) for op in ops]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        actual = {conv: self.store.get(conv) for conv in CONVS}
        for order in itertools.permutations(ops):
            state: State = (copy.deepcopy(self.model), copy.deepcopy(self.keys))
            for op in order:
                apply(state, op)
            if state[0] == actual:
                self.model, self.keys = state
                return
        raise AssertionError(f"no order of {ops} gives {actual}")

    def _operation(self) -> st.SearchStrategy[tuple[Any, ...]]:
        conv = st.sampled_from(CONVS)
        return st.one_of(
            st.builds(
                lambda c, k: ("add", c, [self._next()], k), conv, st.sampled_from([None, *KEYS])
            ),
            st.builds(lambda c: ("import", [(c, [self._next()])]), conv),
            st.builds(lambda c: ("clear", c), conv),
            st.builds(lambda u: ("forget_user", u), st.sampled_from(["alice", "bob"])),
        )

    def _do(self, op: tuple[Any, ...]) -> None:
        perform(self.store, op)
        apply((self.model, self.keys), op)

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
        self.keys[conv] = set()  # the clear came in either order: it forgot the keys

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
