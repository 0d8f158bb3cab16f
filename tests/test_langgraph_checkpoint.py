"""OtpmemSaver under a real compiled StateGraph: history, resuming from a past checkpoint,
forking, interrupts, and the state surviving a store crash, a LevelDB reopen and another
PostgreSQL handle; concurrent graphs; retried writes stored once; bad input refused."""

from __future__ import annotations

import itertools
import operator
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from otpmem.actors import faults
from otpmem.integrations.langgraph import OtpmemSaver
from otpmem.messages import Conv, validate
from otpmem.stores import LevelDBStore, MemoryStore, PostgresStore
from otpmem.supervisors import Supervisor
from tests.support import WAIT, run_threads


class Steps(TypedDict):
    steps: Annotated[list[str], operator.add]


def build(saver: OtpmemSaver, ran: Counter[str] | None = None, **compile: Any) -> Any:
    """START -> a -> b -> c -> END; each node appends its name (and counts its runs)."""
    ran = Counter() if ran is None else ran

    def node(name: str) -> Any:
        def step(state: Steps) -> dict[str, list[str]]:
            ran[name] += 1
            return {"steps": [name]}

        return step

    builder = StateGraph(Steps)
    for name in "abc":
        builder.add_node(name, node(name))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    graph: CompiledStateGraph[Any, Any, Any, Any] = builder.compile(checkpointer=saver, **compile)
    return graph


def thread(name: str) -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


def test_history_lists_every_super_step_newest_first(store: MemoryStore) -> None:
    graph = build(OtpmemSaver(store))
    assert graph.invoke({"steps": []}, thread("t1")) == {"steps": ["a", "b", "c"]}
    history = list(graph.get_state_history(thread("t1")))
    assert [s.metadata["step"] for s in history] == [3, 2, 1, 0, -1]
    assert [s.next for s in history] == [(), ("c",), ("b",), ("a",), ("__start__",)]
    assert [s.values["steps"] for s in history][:3] == [["a", "b", "c"], ["a", "b"], ["a"]]
    # Each points at the one before it: the chain LangGraph walks back.
    for newer, older in itertools.pairwise(history):
        assert newer.parent_config is not None
        assert (
            newer.parent_config["configurable"]["checkpoint_id"]
            == (older.config["configurable"]["checkpoint_id"])
        )


def test_resuming_from_a_past_checkpoint_replays_only_what_came_after(store: MemoryStore) -> None:
    ran: Counter[str] = Counter()
    graph = build(OtpmemSaver(store), ran)
    graph.invoke({"steps": []}, thread("t1"))
    before_b = next(s for s in graph.get_state_history(thread("t1")) if s.next == ("b",))
    assert graph.invoke(None, before_b.config) == {"steps": ["a", "b", "c"]}
    assert ran == Counter(a=1, b=2, c=2)  # a is not run again: its result is the checkpoint's
    # The replay is a branch of the same thread: a fork of the past checkpoint, then its steps.
    history = list(graph.get_state_history(thread("t1")))
    assert [(s.metadata["source"], s.metadata["step"]) for s in history[:4]] == [
        ("loop", 4),
        ("loop", 3),
        ("fork", 2),
        ("loop", 3),
    ]
    assert history[2].parent_config is not None
    assert (
        history[2].parent_config["configurable"]["checkpoint_id"]
        == (before_b.config["configurable"]["checkpoint_id"])
    )
    assert graph.get_state(thread("t1")).values == {"steps": ["a", "b", "c"]}


def test_forking_a_past_checkpoint_with_update_state(store: MemoryStore) -> None:
    graph = build(OtpmemSaver(store))
    graph.invoke({"steps": []}, thread("t1"))
    original = graph.get_state(thread("t1")).config
    before_b = next(s for s in graph.get_state_history(thread("t1")) if s.next == ("b",))
    forked = graph.update_state(before_b.config, {"steps": ["x"]}, as_node="a")
    assert graph.get_state(forked).next == ("b",)
    assert graph.invoke(None, forked) == {"steps": ["a", "x", "b", "c"]}
    # The original run is still there, reachable by its own checkpoint id.
    assert graph.get_state(original).values == {"steps": ["a", "b", "c"]}
    assert graph.get_state(thread("t1")).values == {"steps": ["a", "x", "b", "c"]}
    assert graph.get_state(before_b.config).values == {"steps": ["a"]}


def transcript(saver: Any) -> list[Any]:
    """Run, replay from before b, fork there, run the fork: what each step shows."""
    ran: Counter[str] = Counter()
    graph = build(saver, ran)
    seen: list[Any] = [graph.invoke({"steps": []}, thread("t1"))]
    before_b = next(s for s in graph.get_state_history(thread("t1")) if s.next == ("b",))
    seen.append(graph.invoke(None, before_b.config))
    forked = graph.update_state(before_b.config, {"steps": ["x"]}, as_node="a")
    seen.append(graph.invoke(None, forked))
    seen.append(dict(ran))
    for snapshot in graph.get_state_history(thread("t1")):
        metadata = snapshot.metadata or {}
        seen.append((metadata["source"], metadata["step"], snapshot.next, snapshot.values))
    return seen


def test_time_travel_shows_what_inmemorysaver_shows(store: MemoryStore) -> None:
    ours = transcript(OtpmemSaver(store))
    assert ours == transcript(InMemorySaver())
    assert len(ours) == 4 + 11  # three results, the run counts, eleven checkpoints


async def test_the_same_graph_runs_async(store: MemoryStore) -> None:
    graph = build(OtpmemSaver(store))
    assert await graph.ainvoke({"steps": []}, thread("t2")) == {"steps": ["a", "b", "c"]}
    history = [s async for s in graph.aget_state_history(thread("t2"))]
    assert [s.metadata["step"] for s in history] == [3, 2, 1, 0, -1]
    before_c = next(s for s in history if s.next == ("c",))
    assert await graph.ainvoke(None, before_c.config) == {"steps": ["a", "b", "c"]}


def test_an_interrupted_thread_survives_a_crash_of_its_supervised_memory_store() -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec("graph-checkpoints")])
    try:
        store = MemoryStore.named("graph-checkpoints")
        ran: Counter[str] = Counter()
        graph = build(OtpmemSaver(store), ran, interrupt_before=["c"])
        assert graph.invoke({"steps": []}, thread("t1")) == {"steps": ["a", "b"]}
        faults.kill(store)
        pair = sup.child("graph-checkpoints")
        assert pair is not None
        pair.sync()  # the store is back, on the table its heir kept
        # A new saver and graph, as a restarted node would build them.
        resumed = build(OtpmemSaver(MemoryStore.named("graph-checkpoints")), ran)
        assert resumed.get_state(thread("t1")).next == ("c",)
        assert resumed.invoke(None, thread("t1")) == {"steps": ["a", "b", "c"]}
        assert ran == Counter(a=1, b=1, c=1)
    finally:
        sup.stop()


def test_an_interrupted_thread_survives_a_leveldb_stop_and_reopen(tmp_path: Path) -> None:
    ran: Counter[str] = Counter()
    store = LevelDBStore.start_link(tmp_path / "db")
    try:
        graph = build(OtpmemSaver(store), ran, interrupt_before=["c"])
        graph.invoke({"steps": []}, thread("t1"))
    finally:
        store.stop()
    store = LevelDBStore.start_link(tmp_path / "db")
    try:
        graph = build(OtpmemSaver(store), ran)
        assert len(list(graph.get_state_history(thread("t1")))) == 4
        assert graph.invoke(None, thread("t1")) == {"steps": ["a", "b", "c"]}
        assert ran == Counter(a=1, b=1, c=1)
    finally:
        store.stop()


def test_another_postgres_handle_on_the_namespace_resumes_the_thread(
    postgres_dsn: str, pg_namespace: str
) -> None:
    ran: Counter[str] = Counter()
    first = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    second = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        build(OtpmemSaver(first), ran, interrupt_before=["c"]).invoke({"steps": []}, thread("t1"))
        graph = build(OtpmemSaver(second), ran)
        assert graph.invoke(None, thread("t1")) == {"steps": ["a", "b", "c"]}
        assert ran == Counter(a=1, b=1, c=1)
        # And the first handle sees what the second wrote.
        assert build(OtpmemSaver(first)).get_state(thread("t1")).next == ()
    finally:
        first.stop()
        second.stop()


def test_graphs_on_eight_threads_at_once_keep_their_own_histories(store: MemoryStore) -> None:
    saver = OtpmemSaver(store)
    graph = build(saver)
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        results[i] = graph.invoke({"steps": [f"start{i}"]}, thread(f"worker-{i}"))

    assert run_threads(8, run, timeout=WAIT * 4) == []
    assert results == {i: {"steps": [f"start{i}", "a", "b", "c"]} for i in range(8)}
    for i in range(8):
        assert len(list(saver.list(thread(f"worker-{i}")))) == 5
    assert len(list(saver.list(None))) == 40


def test_a_retried_put_or_put_writes_is_stored_once(store: MemoryStore) -> None:
    saver = OtpmemSaver(store)
    checkpoint = empty_checkpoint()
    config: RunnableConfig = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    stored = saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
    assert saver.put(config, checkpoint, {"source": "input", "step": -1}, {}) == stored
    saver.put_writes(stored, [("steps", ["a"])], "task-1")
    saver.put_writes(stored, [("steps", ["a"])], "task-1")
    conv = saver.conversation("t1")
    assert store.count(conv) == 2  # one checkpoint, one batch of writes
    assert all(validate(m) for m in store.get(conv))  # otpmem messages like any other
    assert conv == Conv("langgraph", 'langgraph:checkpoints:["t1",""]')
    tup = saver.get_tuple(config)
    assert tup is not None and tup.pending_writes == [("task-1", "steps", ["a"])]


def test_concurrent_writes_to_one_checkpoint_from_threads_are_all_kept(store: MemoryStore) -> None:
    saver = OtpmemSaver(store)
    config: RunnableConfig = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    barrier = threading.Barrier(8, timeout=WAIT)

    def write(i: int) -> None:
        barrier.wait()
        for _ in range(3):  # each retried: stored once still
            saver.put_writes(stored, [("ch", i)], f"task-{i}")

    assert run_threads(8, write, timeout=WAIT * 4) == []
    tup = saver.get_tuple(stored)
    assert tup is not None and tup.pending_writes is not None
    assert sorted(w[2] for w in tup.pending_writes) == list(range(8))


def test_bad_input_is_refused_and_leaves_the_thread_as_it_was(store: MemoryStore) -> None:
    with pytest.raises(TypeError, match="otpmem store"):
        OtpmemSaver({"not": "a store"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="user_id"):
        OtpmemSaver(store, user_id="")
    saver = OtpmemSaver(store)
    graph = build(saver)
    graph.invoke({"steps": []}, thread("t1"))
    before = store.get(saver.conversation("t1"))
    with pytest.raises(ValueError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(ValueError, match="strategy"):
        saver.prune(["t1"], strategy="keep_oldest")
    with pytest.raises(ValueError, match="checkpoint_id"):
        saver.put_writes(thread("t1"), [("ch", 1)], "task")
    with pytest.raises(ValueError, match="limit"):
        list(saver.list(thread("t1"), limit=-1))
    assert store.get(saver.conversation("t1")) == before


def test_prune_keeps_the_latest_and_the_graph_goes_on_from_it(store: MemoryStore) -> None:
    saver = OtpmemSaver(store)
    graph = build(saver, interrupt_before=["c"])
    graph.invoke({"steps": []}, thread("t1"))
    saver.prune(["t1"])
    assert [s.next for s in graph.get_state_history(thread("t1"))] == [("c",)]
    assert graph.invoke(None, thread("t1")) == {"steps": ["a", "b", "c"]}
    saver.delete_thread("t1")
    assert saver.get_tuple(thread("t1")) is None
    assert store.conversations("langgraph") == []


def test_the_newest_checkpoint_is_read_from_the_tail_with_all_its_writes(
    store: MemoryStore,
) -> None:
    saver = OtpmemSaver(store)
    config: RunnableConfig = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    for step in range(40):
        checkpoint = empty_checkpoint()
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {})
        saver.put_writes(config, [("ch", step)], f"task-{step}")
    for task in range(40):  # more writes than the first window holds, after the newest
        saver.put_writes(config, [("many", task)], f"late-{task}")
    newest = saver.get_tuple({"configurable": {"thread_id": "long"}})
    assert newest is not None and newest.metadata["step"] == 39
    assert newest == next(saver.list({"configurable": {"thread_id": "long"}}, limit=1))
    assert newest.pending_writes is not None and len(newest.pending_writes) == 41
    saver.prune(["long"])
    pruned = saver.get_tuple({"configurable": {"thread_id": "long"}})
    assert pruned is not None and pruned.config == newest.config
