"""System and pinned messages survive every window, read in O(pinned + window).

Before the pinned index, a windowed provider read only the tail: a stored system message
vanished from the context once the conversation outgrew the window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack
import plyvel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.actors import faults
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import (
    DefaultProvider,
    Pipeline,
    PipelineProvider,
    SlidingWindow,
    Summarization,
    TokenTruncation,
    safe_window,
)
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, LevelDBStoreHandle, MemoryStore, StoreUnavailable
from otpmem.supervisors import Supervisor

SYSTEM = {"role": "system", "content": "You are terse."}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


@pytest.fixture(params=["memory", "leveldb"])
def any_store(
    request: pytest.FixtureRequest, opened: Callable[..., LevelDBStoreHandle], tmp_path: Path
) -> Iterator[Any]:
    if request.param == "leveldb":
        yield opened(tmp_path / "db")
        return
    store = MemoryStore.start_link()
    try:
        yield store
    finally:
        store.stop()


class Recorder:
    """A scripted model that keeps every list of messages it was sent."""

    def __init__(self) -> None:
        self.sent: list[list[dict[str, Any]]] = []

    def __call__(self, messages: Sequence[Mapping[str, Any]]) -> str:
        self.sent.append([dict(m) for m in messages])
        return f"answer {len(self.sent)}"


def test_a_windowed_agent_keeps_the_stored_system_message_on_every_turn(any_store: Any) -> None:
    recorder = Recorder()
    agent = Agent.start_link(
        llm=ScriptedModel(recorder), memory=DefaultProvider(any_store, window=2), agent_name="w"
    )
    try:
        agent.add_message(SYSTEM)
        for turn in range(6):
            agent.run(f"question {turn}")
    finally:
        agent.stop()
    for turn, sent in enumerate(recorder.sent):
        assert sent[0] == SYSTEM, f"turn {turn} sent {[m['role'] for m in sent]}"
        assert sent[-1] == user(f"question {turn}")
        assert len(sent) <= 3


def test_default_provider_reads_pinned_and_tail_only(any_store: Any) -> None:
    conv = Conv("u", "long")
    any_store.add(conv, [SYSTEM])
    for i in range(50):
        any_store.add(conv, [user(f"q{i}"), assistant(f"a{i}")] * 50)
    provider = DefaultProvider(any_store, window=4)
    history = provider.history(conv)
    assert history == [SYSTEM, user("q49"), assistant("a49"), user("q49"), assistant("a49")]
    assert history.offset == 5001 - 4 - 1  # type: ignore[attr-defined]
    assert provider.prepare(conv, history) == history


def test_pipeline_provider_reads_a_bounded_tail(any_store: Any) -> None:
    conv = Conv("u", "pipeline")
    any_store.add(
        conv, [SYSTEM, *(m for i in range(3000) for m in (user(f"q{i}"), assistant("a")))]
    )
    provider = PipelineProvider(any_store, "default")  # SlidingWindow(last=50)
    history = provider.history(conv)
    assert len(history) <= 1 + 64
    sent = provider.prepare(conv, history)
    assert sent[0] == SYSTEM and sent[-1] == assistant("a") and len(sent) == 51


def test_the_index_survives_a_reopen_and_a_supervised_crash(
    opened: Callable[..., LevelDBStoreHandle], tmp_path: Path
) -> None:
    conv = Conv("u", "c")
    store = opened(tmp_path / "db")
    store.add(conv, [SYSTEM, *(user(f"q{i}") for i in range(20))])
    store.stop()
    store = opened(tmp_path / "db")
    assert store.window(conv, 2).pinned == [(0, SYSTEM)]

    sup = Supervisor.start_link([MemoryStore.child_spec("pinned-crash")])
    try:
        memory = MemoryStore.named("pinned-crash")
        memory.add(conv, [SYSTEM, *(user(f"q{i}") for i in range(20))], idempotency_key="k")
        faults.kill(memory, grace=5.0)
        sup.sync_tree()
        assert memory.window(conv, 2).pinned == [(0, SYSTEM)]
        memory.add(conv, [user("again")], idempotency_key="k")
        assert memory.count(conv) == 21, "the key outlived the crash with the messages"
    finally:
        sup.stop()


def test_a_wave_one_store_gets_its_pinned_index_on_first_open(
    opened: Callable[..., LevelDBStoreHandle], tmp_path: Path
) -> None:
    path = tmp_path / "db"
    conv = Conv("u", "old")
    summary = {"role": "system", "content": "S", "metadata": {"pinned": True, "summary": {}}}
    store = opened(path)
    store.add(conv, [SYSTEM, user("a"), summary, user("b"), {**summary, "content": "S2"}])
    store.add(conv, [user(f"q{i}") for i in range(10)])
    store.stop()
    _downgrade_to_layout_one(path)

    store = opened(path)
    stored = store.window(conv, 3)
    assert stored.pinned == [(0, SYSTEM), (4, {**summary, "content": "S2"})]
    assert (stored.start, stored.total, stored.pinned_before) == (12, 15, 3)
    store.add(conv, [user("new")], idempotency_key="k")
    store.add(conv, [user("new")], idempotency_key="k")
    assert store.count(conv) == 16


def test_a_store_from_a_newer_otpmem_is_refused_untouched(
    opened: Callable[..., LevelDBStoreHandle], tmp_path: Path
) -> None:
    path = tmp_path / "db"
    opened(path).stop()
    db = plyvel.DB(str(path))
    db.put(b"v", b"9")
    db.close()
    with pytest.raises(StoreUnavailable, match="key layout 9, written by a newer otpmem"):
        LevelDBStore.start_link(path)
    db = plyvel.DB(str(path))
    assert db.get(b"v") == b"9"
    db.close()


def _downgrade_to_layout_one(path: Path) -> None:
    """Make the directory look as wave 1 wrote it: messages and two-field meta only."""
    db = plyvel.DB(str(path))
    for key in list(db.iterator(include_value=False)):
        if key[:1] in (b"p", b"k", b"q", b"v"):
            db.delete(key)
        elif key[:1] == b"c":
            db.put(key, msgpack.packb(msgpack.unpackb(db.get(key))[:2]))
    db.close()


# -- the tail read gives what the whole conversation gives ---------------------------------

MESSAGE = st.one_of(
    st.builds(user, st.sampled_from(["q", "why?", "more"])),
    st.builds(assistant, st.sampled_from(["a", "ok"])),
    st.just(SYSTEM),
    st.just({"role": "user", "content": "note", "metadata": {"pinned": True}}),
)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(MESSAGE, min_size=1, max_size=12), min_size=1, max_size=25),
    window=st.integers(1, 12),
    preset=st.sampled_from(["window", "summarize", "tokens"]),
)
def test_tail_reads_prepare_exactly_what_full_reads_prepare(
    batches: list[list[dict[str, Any]]], window: int, preset: str
) -> None:
    store = MemoryStore.start_link()
    try:
        conv = Conv("u", "prop")
        pipelines = {
            "window": lambda: Pipeline([SlidingWindow(window)]),
            "summarize": lambda: Pipeline([Summarization(6, 2), SlidingWindow(window + 3)]),
            "tokens": lambda: Pipeline([TokenTruncation(40 + 10 * window)]),
        }
        tail_reader = PipelineProvider(store, pipelines[preset]())
        full = pipelines[preset]()
        for batch in batches:
            tail_reader.append(conv, batch)
            everything = store.get(conv)
            history = tail_reader.history(conv)
            expected = full.run(everything)
            assert tail_reader.explain(conv, history).messages == expected
            # Roll (and store) the summary the tail reader made, then check that a full
            # read and a tail read still agree on the next turn.
            tail_reader.prepare(conv, history)
            tail_reader.append(conv, [])
            assert DefaultProvider(store, window=window).prepare(
                conv, DefaultProvider(store, window=window).history(conv)
            ) == safe_window(store.get(conv), window)
    finally:
        store.stop()
