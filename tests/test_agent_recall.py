"""The agent's recall memory forms, as a README reader uses them: ``otpmem.start_agent(...,
memory={"window": n, "recall": True})`` recalls an old fact the window dropped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import otpmem
from otpmem.actors import whereis
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory.recall.default import DEFAULT_INDEX_NAME
from otpmem.stores import DEFAULT_STORE_NAME


class Recorder:
    """A scripted model that keeps what each call was sent."""

    def __init__(self) -> None:
        self.seen: list[list[Any]] = []
        self.model = ScriptedModel(self.reply)

    def reply(self, messages: list[Any]) -> str:
        self.seen.append(list(messages))
        return "ok"

    def last(self) -> list[Any]:
        return [m.get("content") for m in self.seen[-1]]


def chat(agent: Any) -> None:
    agent.run("my locker code is 9182")
    for i in range(6):
        agent.run(f"small talk number {i}")
    agent.run("what is my locker code?")


@pytest.fixture
def app() -> Iterator[None]:
    with otpmem.running():
        yield


def test_window_and_recall_bring_back_what_the_window_dropped(app: None) -> None:
    recalled, windowed = Recorder(), Recorder()
    with_recall = otpmem.start_agent(
        llm=recalled.model, memory={"window": 2, "recall": True}, user_id="ann"
    )
    window_only = otpmem.start_agent(llm=windowed.model, memory={"window": 2}, user_id="bob")
    chat(with_recall)
    chat(window_only)
    assert "my locker code is 9182" in recalled.last()
    assert recalled.last()[-1] == "what is my locker code?"
    # The window stays whole (the answer before the question, and the question), and
    # recall adds at most 5 older messages in front of it.
    assert recalled.last()[-2:] == ["ok", "what is my locker code?"]
    assert len(recalled.last()) <= 2 + 5
    assert "my locker code is 9182" not in windowed.last()
    # Both agents' recall is the application's one index, a child of its tree.
    root = whereis("otpmem")
    assert root is not None
    child = root.child("recall_index")  # type: ignore[attr-defined]
    assert child is not None and whereis(DEFAULT_INDEX_NAME).pid == child.pid


def test_recall_alone_and_recall_off(app: None) -> None:
    on, off = Recorder(), Recorder()
    chat(otpmem.start_agent(llm=on.model, memory={"recall": True}, user_id="cy"))
    chat(otpmem.start_agent(llm=off.model, memory={"window": 2, "recall": False}, user_id="di"))
    assert "my locker code is 9182" in on.last()
    assert "my locker code is 9182" not in off.last()


@pytest.mark.parametrize(
    ("memory", "error"),
    [
        ({"recall": "yes"}, "True or False"),
        ({"window": 0, "recall": True}, "n >= 1"),
        ({"recall": True, "store": None}, "not understood"),
    ],
)
def test_bad_recall_forms_are_refused_at_start(
    app: None, memory: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        otpmem.start_agent(llm=ScriptedModel(["ok"]), memory=memory)


def test_without_an_application_recall_starts_its_index_and_says_so() -> None:
    assert whereis(DEFAULT_INDEX_NAME) is None and whereis(DEFAULT_STORE_NAME) is None
    recorder = Recorder()
    try:
        with pytest.warns(UserWarning, match="unsupervised RecallIndex"):
            agent = Agent.start_link(llm=recorder.model, memory={"recall": True}, user_id="ed")
        try:
            chat(agent)
        finally:
            agent.stop()
        assert "my locker code is 9182" in recorder.last()
    finally:
        for name in (DEFAULT_INDEX_NAME, DEFAULT_STORE_NAME):
            process = whereis(name)
            if process is not None:
                process.stop()
