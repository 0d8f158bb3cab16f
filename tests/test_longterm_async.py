"""mode="async": extractions go through the store's durable job list to a supervised
server; a failing extractor, a killed server and a kill -9 of the whole process lose no
job and repeat none."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import otpmem
from otpmem.actors import faults, whereis
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import LongTermMemory, RuleFactExtractor
from otpmem.memory.longterm import Decision
from otpmem.memory.longterm.server import APP_SUPERVISOR
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStore
from otpmem.supervisors import Supervisor, SupervisorHandle
from tests.longterm_support import both_stores, user
from tests.support import Trace

store_fixture = both_stores()
ANN = Conv("ann", "chat")
WAIT = 10.0


@pytest.fixture
def sup() -> Iterator[SupervisorHandle]:
    supervisor = Supervisor.start_link([], strategy="one_for_one", intensity=5)
    yield supervisor
    if supervisor.alive:
        supervisor.stop()


class PerMessage:
    """One fact per user message (``m<text>`` -> ``tag``); ``fail`` times it raises first;
    ``gate`` (if set) holds the first call until released. Records every message seen."""

    blocks = True

    def __init__(self, tag: str = "v", fail: int = 0, gate: threading.Event | None = None):
        self.tag, self.fail, self.gate = tag, fail, gate
        self.seen = Trace()
        self.calls = 0

    def extract(self, messages: Sequence[Mapping[str, Any]], known: Sequence[Fact]) -> Any:
        self.calls += 1
        for message in messages:
            self.seen(message["content"])
        if self.gate is not None and self.calls == 1:
            self.gate.wait(WAIT)
            raise RuntimeError("this attempt was killed; its answer is never used")
        if self.fail:
            self.fail -= 1
            raise RuntimeError("extractor crashed")
        return [
            Decision("ADD", f"m{m['content']}", self.tag, index=i)
            for i, m in enumerate(messages)
            if m["role"] == "user"
        ]


def test_async_extraction_runs_in_the_supervised_server(store: Any, sup: SupervisorHandle) -> None:
    ltm = LongTermMemory(store, RuleFactExtractor(), trigger="per_turn", mode="async",
                         supervisor=sup)  # fmt: skip
    try:
        assert [c.id for c in sup.which_children()] == [ltm.server.child_id]
        agent = Agent.start_link(
            llm=ScriptedModel(["ok"]),
            memory={"store": store},
            user_id="ann",
            conversation_id="chat",
            long_term_memory=ltm,
        )
        try:
            agent.run("My name is Ann.")
        finally:
            agent.stop()
        assert ltm.flush(WAIT) == {}
        assert store.get_fact("ann", "name").value == "Ann"
        assert store.pending_extractions() == [] and store.extraction_cursor(ANN) == 2
        assert ltm.extract(ANN).queued
    finally:
        ltm.close()
    assert sup.which_children() == []


def test_a_failing_extractor_leaves_the_job_pending_until_a_retry_succeeds(
    store: Any, sup: SupervisorHandle
) -> None:
    extractor = PerMessage(fail=1)
    ltm = LongTermMemory(store, extractor, mode="async", supervisor=sup)  # type: ignore[arg-type]
    try:
        store.add(ANN, [user("a"), user("b")])
        assert ltm.extract(ANN).queued
        failed = ltm.flush(WAIT)
        assert failed == {ANN: "RuntimeError: extractor crashed"}
        assert store.pending_extractions() == [(ANN, 2)], "the job is still there"
        assert store.get_facts("ann") == [] and ltm.server.handle.alive
        ltm.server.retry()
        assert ltm.flush(WAIT) == {}
        assert sorted(f.key for f in store.get_facts("ann")) == ["ma", "mb"]
        assert all(f.version == 1 for f in store.get_facts("ann"))
        assert store.pending_extractions() == []
    finally:
        ltm.close()


def test_a_killed_server_is_restarted_and_finishes_the_job_exactly_once(
    store: Any, sup: SupervisorHandle
) -> None:
    gate = threading.Event()
    extractor = PerMessage(gate=gate)
    ltm = LongTermMemory(store, extractor, mode="async", supervisor=sup)  # type: ignore[arg-type]
    try:
        store.add(ANN, [user("a"), user("b")])
        ltm.extract(ANN)
        extractor.seen.wait_for(lambda seen: seen == ["a", "b"])  # the first attempt is in
        first = ltm.server.handle.pid
        faults.kill(ltm.server.handle)
        gate.set()  # the killed attempt's answer comes back to nobody
        assert ltm.flush(WAIT) == {}
        assert ltm.server.handle.pid != first, "the supervisor started a new server"
        assert extractor.seen.items == ["a", "b", "a", "b"]  # asked again: nothing committed
        facts = store.get_facts("ann")
        assert sorted(f.key for f in facts) == ["ma", "mb"] and all(f.version == 1 for f in facts)
        assert all(store.fact_history("ann", f.key) == [] for f in facts), "none repeated"
        assert store.pending_extractions() == [] and store.extraction_cursor(ANN) == 2
    finally:
        gate.set()
        ltm.close()


CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading
    from otpmem.memory import LongTermMemory
    from otpmem.memory.longterm import Decision
    from otpmem.messages import Conv
    from otpmem.stores import LevelDBStore
    from otpmem.supervisors import Supervisor

    path, convs, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    calls = 0
    all_requested = threading.Event()

    class Tagged:
        blocks = True  # on the blocking pool: it may wait on a threading.Event
        def extract(self, messages, known):
            global calls
            all_requested.wait(30)
            calls += 1
            if calls == kill_at:  # mid-job: after the model, before the write
                print("killing", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return [Decision("ADD", f"m{m['content']}", str(os.getpid()), index=i)
                    for i, m in enumerate(messages)]

    store = LevelDBStore.start_link(path)
    sup = Supervisor.start_link([])
    ltm = LongTermMemory(store, Tagged(), mode="async", supervisor=sup)
    for c in range(convs):
        conv = Conv("ann", f"c{c}")
        store.add(conv, [{"role": "user", "content": f"{c}.{k}"} for k in range(3)])
        ltm.extract(conv)  # durable before it returns
    print("requested", flush=True)
    all_requested.set()
    ltm.flush(60)
    print("not killed?", flush=True)
    """
)


def test_kill_9_of_the_process_loses_no_pending_extraction_and_repeats_none(
    tmp_path: Path,
) -> None:
    path, convs = tmp_path / "db", 8
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(convs), "4"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert child.returncode == -9, child.stdout + child.stderr
    assert "killing" in child.stdout
    store = LevelDBStore.start_link(path)
    try:
        pending = store.pending_extractions()
        done_before = {c.conversation_id for c in store.conversations("ann")} - {
            c.conversation_id for c, _ in pending
        }
        assert len(done_before) == 3 and len(pending) == convs - 3, "3 jobs done, the rest not"
        extractor = PerMessage(tag="second")
        sup = Supervisor.start_link([])
        ltm = LongTermMemory(store, extractor, mode="async", supervisor=sup)  # type: ignore[arg-type]
        try:
            assert ltm.flush(WAIT) == {}
        finally:
            ltm.close()
            sup.stop()
        facts = store.get_facts("ann")
        assert sorted(f.key for f in facts) == sorted(
            f"m{c}.{k}" for c in range(convs) for k in range(3)
        ), "0 lost"
        assert all(f.version == 1 and not store.fact_history("ann", f.key) for f in facts), (
            "0 repeated: no message was extracted (and saved) twice"
        )
        second = {f.key[1:].split(".")[0] for f in facts if f.value == "second"}
        assert second == {c.conversation_id[1:] for c, _ in pending}
        assert sorted(extractor.seen.items) == sorted(
            f"{c.conversation_id[1:]}.{k}" for c, _ in pending for k in range(3)
        ), "the new process read only the pending jobs' messages"
        assert store.pending_extractions() == []
    finally:
        store.stop()


def test_without_a_supervisor_the_server_goes_under_the_running_application(
    tmp_path: Path,
) -> None:
    with otpmem.running():
        store = otpmem.default_store()
        ltm = LongTermMemory(store, RuleFactExtractor(), mode="async")
        try:
            root = whereis(APP_SUPERVISOR)
            assert root is not None
            assert ltm.server.child_id in [c.id for c in root.which_children()]  # type: ignore[attr-defined]
            store.add(ANN, [user("I live in Lyon.")])
            ltm.extract(ANN)
            assert ltm.flush(WAIT) == {}
            assert store.get_fact("ann", "location").value == "Lyon"
        finally:
            ltm.close()
    assert otpmem.app.APP_NAME == APP_SUPERVISOR
