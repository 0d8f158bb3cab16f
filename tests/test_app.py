"""The application tree: otpmem.start/stop/running, the supervised default store, agents.

Every test that starts the app stops it (``with otpmem.running():``); tests that start an
unsupervised default store stop it themselves.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import otpmem
from otpmem.actors import NoProcess, ServerExited, faults, whereis
from otpmem.agents import AgentHandle
from otpmem.llm import ScriptedModel
from otpmem.messages import Conv
from otpmem.stores import (
    DEFAULT_STORE_NAME,
    LevelDBStoreHandle,
    MemoryStoreHandle,
)
from otpmem.supervisors import SupervisorEvent, SupervisorHandle
from tests.support import WAIT, Trace

ROOT = "otpmem"
AGENTS = "otpmem.agents"
REPO = Path(__file__).resolve().parent.parent


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def counting_model() -> ScriptedModel:
    return ScriptedModel(lambda messages, tools: f"saw:{len(messages)}", usage=False)


def store_pid() -> Any:
    handle = whereis(DEFAULT_STORE_NAME)
    assert handle is not None, "no default store is running"
    return handle.pid


def store_sup(root: SupervisorHandle) -> SupervisorHandle:
    """The supervisor that holds the default store (the root's 'default_store' child)."""
    child = root.child("default_store")
    assert isinstance(child, SupervisorHandle)
    return child


@pytest.fixture
def no_app() -> Iterator[None]:
    """The test starts without an app or default store, and stops any orphan it leaves."""
    assert whereis(ROOT) is None
    assert whereis(DEFAULT_STORE_NAME) is None
    try:
        yield
    finally:
        orphan = whereis(DEFAULT_STORE_NAME)
        if orphan is not None and whereis(ROOT) is None:
            orphan.stop()


# -- the tree --------------------------------------------------------------------------------


def test_tree_is_a_named_one_for_one_root_with_store_then_agents(no_app: None) -> None:
    with otpmem.running() as root:
        assert whereis(ROOT) is not None and whereis(ROOT).pid == root.pid
        children = root.which_children()
        assert [(c.id, c.type, c.status) for c in children] == [
            ("default_store", "supervisor", "running"),
            ("recall_index", "worker", "running"),
            ("agents", "supervisor", "running"),
        ]
        agents_sup = whereis(AGENTS)
        assert agents_sup is not None and children[2].pid == agents_sup.pid
        # The store lives inside the default_store child.
        inner = store_sup(root)
        assert inner.child("store").pid == store_pid()
        assert root.get_childspec("default_store").restart == "permanent"
        # one_for_one: losing the agents supervisor restarts it alone.
        before_store, before_sup = store_pid(), children[0].pid
        faults.kill(agents_sup)
        root.sync()
        after = root.which_children()
        assert [c.id for c in after] == ["default_store", "recall_index", "agents"]
        assert after[2].pid != agents_sup.pid
        assert whereis(AGENTS) is not None and whereis(AGENTS).pid == after[2].pid
        assert after[0].pid == before_sup
        assert store_pid() == before_store
    assert whereis(ROOT) is None
    assert whereis(AGENTS) is None
    assert whereis(DEFAULT_STORE_NAME) is None


def test_default_store_is_a_named_handle_that_follows_restarts(no_app: None) -> None:
    with otpmem.running() as root:
        store = otpmem.default_store()
        assert isinstance(store, MemoryStoreHandle)
        store.add("c1", [user("before")])
        first = store.pid
        faults.kill(whereis(DEFAULT_STORE_NAME))
        store_sup(root).sync()
        store.add("c1", [user("after")])  # the same handle, now reaching the new store
        assert store.pid != first
        assert store.pid == store_pid()
        assert store.get("c1") == [user("before"), user("after")]


def test_supervised_store_restart(no_app: None) -> None:
    """beamai supervised_store_restart_test."""
    with otpmem.running() as root:
        assert otpmem.default_store().pid == otpmem.default_store().pid
        pid = store_pid()
        inner = store_sup(root)
        assert root.which_children()[0].id == "default_store"
        listed = {c.id: c.pid for c in inner.which_children()}
        assert listed["store"] == pid
        faults.kill(whereis(DEFAULT_STORE_NAME))
        inner.sync()
        new_pid = store_pid()
        assert new_pid != pid
        assert {c.id: c.pid for c in inner.which_children()}["store"] == new_pid
        assert otpmem.default_store().pid == new_pid


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "leveldb"])
def test_store_crash_under_the_app_loses_no_acknowledged_message(
    durable: bool, tmp_path: Path, no_app: None
) -> None:
    n_writers = 4
    acked: list[list[str]] = [[] for _ in range(n_writers)]
    progress = threading.Condition()
    done = threading.Event()
    failures: list[BaseException] = []

    def total() -> int:
        return sum(len(a) for a in acked)

    def writer(w: int) -> None:
        store = otpmem.default_store()
        n = 0
        try:
            while not done.is_set():
                text = f"w{w}-{n}"
                while True:
                    try:
                        store.add(f"conv-{w}", [user(text)])
                        break
                    except (NoProcess, ServerExited):
                        continue  # the store is restarting: try again
                with progress:
                    acked[w].append(text)
                    progress.notify_all()
                n += 1
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)
            with progress:
                progress.notify_all()

    def wait_total(count: int) -> None:
        with progress:
            assert progress.wait_for(lambda: total() >= count or failures, WAIT), total()
        assert not failures, failures

    with otpmem.running(data_dir=tmp_path if durable else None) as root:
        # The store's own supervisor restarts it: over a (keeper, store) pair in memory.
        inner = store_sup(root)
        agents_pid = root.child("agents").pid
        pids = [store_pid()]
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_writers)]
        for thread in threads:
            thread.start()
        try:
            wait_total(40)
            faults.kill(whereis(DEFAULT_STORE_NAME))
            inner.sync()
            pids.append(store_pid())
            wait_total(total() + 40)
            faults.crash(whereis(DEFAULT_STORE_NAME))
            inner.sync()
            pids.append(store_pid())
            wait_total(total() + 40)
        finally:
            done.set()
            for thread in threads:
                thread.join(WAIT)
        assert not failures, failures
        assert len(set(pids)) == 3, pids
        assert root.child("agents").pid == agents_pid
        store = otpmem.default_store()
        for w in range(n_writers):
            stored = [m["content"] for m in store.get(f"conv-{w}")]
            # At least once: a write cut by the crash may have landed before its retry.
            unique = list(dict.fromkeys(stored))
            assert unique == acked[w], (w, stored[-5:], acked[w][-5:])


# -- data_dir ----------------------------------------------------------------------------------


def test_data_dir_store_is_leveldb_and_conversations_survive_stop_and_start(
    tmp_path: Path, no_app: None
) -> None:
    with otpmem.running(data_dir=tmp_path):
        assert isinstance(whereis(DEFAULT_STORE_NAME), LevelDBStoreHandle)
        assert isinstance(otpmem.default_store(), LevelDBStoreHandle)
        agent = otpmem.start_agent(
            llm=ScriptedModel(["noted"], usage=False), conversation_id="durable", user_id="u1"
        )
        agent.run("remember me")
        otpmem.default_store().add("plain", [user("kept")])
    assert whereis(DEFAULT_STORE_NAME) is None
    with otpmem.running(data_dir=tmp_path):
        store = otpmem.default_store()
        assert store.get(Conv("u1", "durable")) == [user("remember me"), assistant("noted")]
        assert store.get("plain") == [user("kept")]
        model = counting_model()
        agent = otpmem.start_agent(llm=model, conversation_id="durable", user_id="u1")
        assert agent.run("still there?").content == "saw:3"


# -- start / stop ------------------------------------------------------------------------------


def test_start_twice_raises_and_leaves_the_running_app_alone(no_app: None) -> None:
    with otpmem.running() as root:
        otpmem.default_store().add("c", [user("x")])
        pid = store_pid()
        with pytest.raises(otpmem.AppError):
            otpmem.start()
        assert root.alive
        assert whereis(ROOT) is not None and whereis(ROOT).pid == root.pid
        assert store_pid() == pid
        assert otpmem.default_store().get("c") == [user("x")]


def test_stop_without_app_raises(no_app: None) -> None:
    with pytest.raises(otpmem.AppError):
        otpmem.stop()


def test_start_then_stop_stops_the_whole_tree(no_app: None) -> None:
    root = otpmem.start()
    try:
        assert root.alive
        otpmem.stop()
        assert not root.alive
        assert whereis(ROOT) is None
        assert whereis(AGENTS) is None
        assert whereis(DEFAULT_STORE_NAME) is None
        with pytest.raises(otpmem.AppError):
            otpmem.stop()
    finally:
        if root.alive:
            root.stop()


def test_running_stops_the_app_when_the_body_raises(no_app: None) -> None:
    with pytest.raises(KeyError), otpmem.running() as root:
        raise KeyError("boom")
    assert not root.alive
    assert whereis(ROOT) is None


# -- agents under the app ----------------------------------------------------------------------


def test_start_agent_under_the_app_is_restarted_and_continues_its_conversation(
    no_app: None,
) -> None:
    with otpmem.running():
        agents_sup = whereis(AGENTS)
        assert isinstance(agents_sup, SupervisorHandle)
        agent = otpmem.start_agent(llm=counting_model(), conversation_id="sup-conv")
        assert isinstance(agent, AgentHandle)
        assert [c.pid for c in agents_sup.which_children()] == [agent.pid]
        assert agent.run("one").content == "saw:1"
        trace = Trace()
        agents_sup.subscribe(trace)
        first_pid = agent.pid
        faults.crash(agent)
        trace.wait_kind("restarted")
        children = agents_sup.which_children()
        assert len(children) == 1 and children[0].status == "running"
        again = children[0].handle
        assert isinstance(again, AgentHandle)
        # The handle is the agent's identity: the one held since the start follows too.
        assert again.pid != first_pid and agent.pid == again.pid and agent == again
        assert again.info()["conversation"] == Conv(None, "sup-conv")
        assert again.messages() == [user("one"), assistant("saw:1")]
        assert again.run("two").content == "saw:3"
        # transient: a normal exit is not restarted.
        again.stop()
        trace.wait_for(
            lambda items: any(
                isinstance(e, SupervisorEvent) and e.kind == "exited" and e.pid == again.pid
                for e in items
            )
        )
        agents_sup.sync()
        assert agents_sup.which_children() == []
        assert len(trace.kinds("restarted")) == 1


def test_restarted_agent_keeps_its_generated_conversation(no_app: None) -> None:
    """An agent started without a conversation_id gets one at start; the supervisor's
    restart of that agent must continue that conversation, not open a fresh one."""
    with otpmem.running():
        agents_sup = whereis(AGENTS)
        assert isinstance(agents_sup, SupervisorHandle)
        agent = otpmem.start_agent(llm=counting_model())
        conv = agent.info()["conversation"]
        agent.run("one")
        trace = Trace()
        agents_sup.subscribe(trace)
        faults.crash(agent)
        trace.wait_kind("restarted")
        again = agents_sup.which_children()[0].handle
        assert isinstance(again, AgentHandle)
        assert again.info()["conversation"] == conv
        assert again.messages() == [user("one"), assistant("saw:1")]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"memory": 42}, TypeError),
        ({"memory": {"window": 0}}, ValueError),
        ({"on_busy": "queue"}, ValueError),
        ({"llm": "not a model"}, TypeError),
        ({"bogus": 1}, TypeError),
    ],
    ids=repr,
)
def test_start_agent_with_bad_options_raises_directly(
    options: dict[str, Any], error: type[Exception], no_app: None
) -> None:
    with otpmem.running() as root:
        agents_sup = whereis(AGENTS)
        assert agents_sup is not None
        with pytest.raises(error):
            otpmem.start_agent(**{"llm": ScriptedModel([]), **options})
        assert agents_sup.alive and whereis(AGENTS).pid == agents_sup.pid
        assert agents_sup.which_children() == []
        assert root.alive


def test_running_takes_starts_parameters_fence_included(no_app: None) -> None:
    start = inspect.signature(otpmem.start).parameters
    assert inspect.signature(otpmem.running).parameters == start
    with (
        pytest.raises(ValueError, match="fence needs store='postgres'"),
        otpmem.running(fence=lambda conv: None),
    ):
        pass


def test_start_agent_without_app_raises(no_app: None) -> None:
    with pytest.raises(otpmem.AppError):
        otpmem.start_agent(llm=ScriptedModel([]), memory=False)


def test_shutdown_stops_agents_before_the_store(no_app: None) -> None:
    trace = Trace()
    store_alive_when_agent_stopped: list[bool] = []

    def on_agents_event(event: SupervisorEvent) -> None:
        if event.kind == "terminated":
            store_alive_when_agent_stopped.append(whereis(DEFAULT_STORE_NAME) is not None)
        trace(event)

    with otpmem.running() as root:
        root.subscribe(trace)
        whereis(AGENTS).subscribe(on_agents_event)
        started = [
            otpmem.start_agent(llm=ScriptedModel(["ok"]), conversation_id=f"s{i}") for i in range(3)
        ]
        for agent in started:
            agent.run("hi")
    assert all(not agent.alive for agent in started)
    events = [(e.supervisor, e.kind, e.child_id) for e in trace.items]
    agent_stops = [i for i, e in enumerate(events) if e[:2] == (AGENTS, "terminated")]
    assert len(agent_stops) == 3
    agents_stop = events.index((ROOT, "terminated", "agents"))
    store_stop = events.index((ROOT, "terminated", "default_store"))
    assert max(agent_stops) < agents_stop < store_stop
    assert store_alive_when_agent_stopped == [True, True, True]
    assert events[-1] == (ROOT, "shutdown", None)


# -- the default store without the app -------------------------------------------------------


def test_default_store_without_app_warns_and_starts_an_unsupervised_store(no_app: None) -> None:
    with pytest.warns(UserWarning, match="no application is running") as record:
        store = otpmem.default_store()
    assert record[0].filename == __file__  # the warning points at the caller
    orphan = whereis(DEFAULT_STORE_NAME)
    assert isinstance(orphan, MemoryStoreHandle)
    store.add("c", [user("hi")])
    assert store.get("c") == [user("hi")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert otpmem.default_store().pid == orphan.pid  # the same store, no new warning
    assert whereis(ROOT) is None
    # Unsupervised: nothing restarts it.
    faults.kill(orphan)
    assert whereis(DEFAULT_STORE_NAME) is None


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "leveldb"])
def test_orphan_store_hands_its_conversations_to_the_supervised_store(
    durable: bool, tmp_path: Path, no_app: None
) -> None:
    with pytest.warns(UserWarning):
        orphan = otpmem.default_store()
    orphan.add("c1", [user("a"), assistant("b")])
    orphan.add(Conv("u1", "c2"), [user("c")])
    orphan_pid = store_pid()
    with otpmem.running(data_dir=tmp_path if durable else None) as root:
        assert store_pid() != orphan_pid
        store = otpmem.default_store()
        assert store.get("c1") == [user("a"), assistant("b")]
        assert store.get(Conv("u1", "c2")) == [user("c")]
        assert set(store.conversations()) == {Conv(None, "c1"), Conv("u1", "c2")}
        # The store that holds them is the supervised one.
        if durable:
            assert isinstance(whereis(DEFAULT_STORE_NAME), LevelDBStoreHandle)
        assert store_sup(root).child("store").pid == store_pid()
    if durable:
        with otpmem.running(data_dir=tmp_path):
            assert otpmem.default_store().get(Conv("u1", "c2")) == [user("c")]


# -- a program that starts the app and returns ---------------------------------------------


def test_a_program_that_starts_the_app_and_returns_exits_promptly(tmp_path: Path) -> None:
    program = textwrap.dedent(
        """
        import sys
        import otpmem
        from otpmem.llm import ScriptedModel

        otpmem.start(data_dir=sys.argv[1])
        agent = otpmem.start_agent(llm=ScriptedModel(["hi"]), conversation_id="exit-conv")
        print(agent.run("hello").content, flush=True)
        print("main returns", flush=True)
        """
    )
    check = textwrap.dedent(
        """
        import sys
        import otpmem

        with otpmem.running(data_dir=sys.argv[1]):
            print(len(otpmem.default_store().get("exit-conv")), flush=True)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
    )
    elapsed = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["hi", "main returns"]
    assert elapsed < 15, elapsed
    reread = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
    )
    assert reread.returncode == 0, reread.stderr
    assert reread.stdout.splitlines() == ["2"]
