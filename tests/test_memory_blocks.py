"""Memory blocks: the edit rules and their errors on all three stores, a reopened LevelDB,
racing writers on one team block, and agents editing blocks through tools."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from otpmem.agents import Agent, TurnFailed
from otpmem.llm import ScriptedModel, tool_call
from otpmem.memory import DefaultProvider
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore, Scope
from otpmem.stores.blocks import (
    DEFAULT_BLOCK_LIMIT,
    EDIT_KEYS_KEPT,
    Block,
    BlockLimitExceeded,
    BlockNotFound,
    BlockStore,
    BlockTextNotFound,
)

WAIT = 30.0
TEAM = Scope("ann", team="alpha")


@pytest.fixture
def store(each_store: Any) -> Any:
    """Each of the three stores (conftest's ``each_store``)."""
    return each_store


def test_the_documented_example(store: Any) -> None:
    assert isinstance(store, BlockStore)
    store.set_block(TEAM, "notes", "", limit=2000)
    store.append_block(TEAM, "notes", "ann: owns the parser", key="t1:call_1")
    store.replace_block(TEAM, "notes", "the parser", "the lexer", key="t2:call_1")
    block = store.get_block(TEAM, "notes")
    assert block is not None
    assert (block.value, block.limit, block.version) == ("ann: owns the lexer", 2000, 3)
    assert store.blocks(TEAM) == [block]
    assert store.conversations() == []  # a block is no conversation


def test_append_creates_and_adds_lines_and_a_keyed_edit_applies_once(store: Any) -> None:
    first = store.append_block("ann", "persona", "I am terse.", key="k1")
    assert (first.value, first.limit, first.version) == ("I am terse.", DEFAULT_BLOCK_LIMIT, 1)
    again = store.append_block("ann", "persona", "I am terse.", key="k1")
    assert again == first
    store.append_block("ann", "persona", "I like tea.", key="k2")
    assert store.get_block("ann", "persona").value == "I am terse.\nI like tea."
    store.set_block("ann", "task", "ship it")
    assert [b.label for b in store.blocks("ann")] == ["persona", "task"]
    assert store.blocks("bob") == [] and store.get_block("ann", "nope") is None


def test_refused_edits_name_why_and_leave_the_block_untouched(store: Any) -> None:
    store.set_block(TEAM, "notes", "a b a", limit=10)
    before = store.get_block(TEAM, "notes")
    with pytest.raises(BlockTextNotFound, match="is not in it"):
        store.replace_block(TEAM, "notes", "zzz", "y")
    with pytest.raises(BlockTextNotFound, match="occurs 2 times"):
        store.replace_block(TEAM, "notes", "a", "y")
    with pytest.raises(BlockLimitExceeded, match="limit of 10"):
        store.append_block(TEAM, "notes", "0123456789", key="big")
    with pytest.raises(BlockLimitExceeded):
        store.replace_block(TEAM, "notes", "b", "bbbbbbbbbbbb")
    with pytest.raises(BlockNotFound):
        store.replace_block(TEAM, "missing", "a", "b")
    assert store.get_block(TEAM, "notes") == before
    assert store.get_block(TEAM, "missing") is None
    # A refused keyed edit was not applied, so its key is free for a retry that fits.
    store.set_block(TEAM, "notes", "", limit=20)
    assert store.append_block(TEAM, "notes", "0123456789", key="big").value == "0123456789"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("", "notes", "x"), "owner"),
        ((7, "notes", "x"), "owner"),
        ((TEAM, "a/b", "x"), "label"),
        ((TEAM, "", "x"), "label"),
        ((TEAM, "notes", 3), "text"),
    ],
)
def test_bad_arguments_are_value_errors(store: Any, args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        store.append_block(*args)
    with pytest.raises(ValueError, match="limit"):
        store.set_block(TEAM, "notes", "x", limit=0)
    with pytest.raises(ValueError, match="old text"):
        store.replace_block(TEAM, "notes", "", "x")
    with pytest.raises(ValueError, match="edit key"):
        store.append_block(TEAM, "notes", "x", key="")
    # The server's own door refuses a raw call the same way, and stays up.
    with pytest.raises(ValueError):
        store.call(("block_edit", "append", TEAM, "notes"), WAIT)
    assert store.blocks(TEAM) == []


def test_forget_user_deletes_the_users_own_blocks_and_no_one_elses(store: Any) -> None:
    store.set_block("ann", "persona", "Ann likes tea", limit=100)
    store.set_block("anna", "persona", "Anna likes coffee", limit=100)  # a near-duplicate id
    store.set_block("team:ann", "notes", "the team's", limit=100)
    store.forget_user("ann")
    assert store.blocks("ann") == [] and store.get_block("ann", "persona") is None
    assert [b.value for b in store.blocks("anna")] == ["Anna likes coffee"]
    assert [b.value for b in store.blocks("team:ann")] == ["the team's"]
    store.append_block("ann", "persona", "a new start", key="k1")  # the owner starts afresh
    assert store.get_block("ann", "persona").value == "a new start"


def test_a_block_remembers_its_newest_keys(store: Any) -> None:
    store.set_block(TEAM, "log", "", limit=50_000)
    for n in range(EDIT_KEYS_KEPT + 1):
        store.append_block(TEAM, "log", f"{n}", key=f"k{n}")
    lines = store.get_block(TEAM, "log").value.split("\n")
    assert len(lines) == EDIT_KEYS_KEPT + 1
    store.append_block(TEAM, "log", "again", key=f"k{EDIT_KEYS_KEPT}")  # kept: not applied
    assert store.get_block(TEAM, "log").value.split("\n") == lines


def test_racing_threads_lose_no_append_and_apply_each_once(store: Any) -> None:
    """Four threads append to one team block, each edit sent twice (a retry): every edit
    is in the block exactly once."""
    store.set_block(TEAM, "notes", "", limit=50_000)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(w: int) -> None:
        try:
            start.wait(WAIT)
            for n in range(25):
                for _ in range(2):
                    store.append_block(TEAM, "notes", f"w{w}-{n}", key=f"w{w}:{n}", timeout=WAIT)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(t.is_alive() for t in threads) and errors == []
    block = store.get_block(TEAM, "notes")
    lines = block.value.split("\n")
    assert sorted(lines) == sorted(f"w{w}-{n}" for w in range(4) for n in range(25))
    assert block.version == 1 + 100


def test_leveldb_blocks_outlive_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    store = LevelDBStore.start_link(path)
    store.append_block(TEAM, "notes", "one", key="k1")
    store.set_block("ann", "persona", "terse", limit=100)
    store.stop()
    store = LevelDBStore.start_link(path)
    try:
        assert store.get_block(TEAM, "notes") == Block(
            TEAM, "notes", "one", DEFAULT_BLOCK_LIMIT, 1, store.get_block(TEAM, "notes").updated_at
        )
        assert store.append_block(TEAM, "notes", "one", key="k1").value == "one"  # still known
        assert [b.value for b in store.blocks("ann")] == ["terse"]
    finally:
        store.stop()


# -- agents editing blocks through tools -------------------------------------------------------


class FailsOnce(DefaultProvider):
    """Refuses the first batch of tool results it is asked to store: a turn that dies after
    its tool ran, before the result was stored."""

    failed = False

    def append(self, conv: Any, messages: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.failed and any(m.get("role") == "tool" for m in messages):
            self.failed = True
            raise RuntimeError("the store went away")
        return super().append(conv, messages, *args, **kwargs)


def append_call(call_id: str, block: str, text: str) -> dict[str, Any]:
    """A scripted reply that asks for one append."""
    args = json.dumps({"block": block, "text": text})
    return {"tool_calls": [tool_call(call_id, "core_memory_append", args)]}


def test_a_retried_turn_applies_its_edit_once(store: Any) -> None:
    model = ScriptedModel([append_call("c1", "team:alpha/notes", "ann: parser"), "noted"])
    provider = FailsOnce(store)
    agent = Agent.start_link(
        model, memory=provider, user_id="ann", conversation_id="c", blocks=("team:alpha/notes",)
    )
    try:
        with pytest.raises(TurnFailed, match="went away"):
            agent.run("note it", turn_id="t1")
        assert store.get_block(TEAM, "notes").value == "ann: parser"  # the tool ran
        result = agent.run("note it", turn_id="t1")  # the retry runs the call again
        assert result.content == "noted"
        tool_results = [m for m in result.messages if m.get("role") == "tool"]
        assert "appended" in tool_results[-1]["content"]
        block = store.get_block(TEAM, "notes")
        assert (block.value, block.version) == ("ann: parser", 1)
    finally:
        agent.stop()


def test_an_edit_shows_to_the_other_agents_on_their_next_turn(store: Any) -> None:
    """Ann's writer agent edits the team block and its own persona; her reader agent's next
    call is sent the team block as the writer left it (after its system prompt, never
    stored), not the writer's persona."""
    writer_model = ScriptedModel(
        [
            append_call("c1", "team/notes", "writer: owns the lexer"),
            append_call("c2", "agent/persona", "The writer likes short answers."),
            "done",
        ]
    )
    reader_model = ScriptedModel(["hi", "ok"], record=True)
    blocks = ("agent/persona", "team/notes")
    common = {"memory": {"store": store}, "user_id": "ann", "team": "alpha", "blocks": blocks}
    writer = Agent.start_link(writer_model, agent_id="writer", conversation_id="w", **common)
    reader = Agent.start_link(
        reader_model, agent_id="reader", conversation_id="r", system_prompt="sys", **common
    )
    try:
        reader.run("hello")
        assert "owns the lexer" not in json.dumps(list(reader_model.calls))
        writer.run("take the lexer")
        persona = store.get_block(Scope("ann", agent="writer"), "persona")
        assert persona.value == "The writer likes short answers."
        reader.run("who owns the lexer?")
        sent = reader_model.calls[-1][0]
        assert sent[0] == {"role": "system", "content": "sys"}
        assert "writer: owns the lexer" in sent[2]["content"]  # after the reader's persona
        assert 'name="team/notes"' in sent[2]["content"]
        assert "short answers" not in json.dumps(sent)  # the writer's persona is its own
        assert all(m["role"] != "system" for m in reader.messages())  # never stored
        assert store.scope_conversations(TEAM) == [Conv("ann", "r"), Conv("ann", "w")]
    finally:
        writer.stop()
        reader.stop()


def test_a_team_is_its_users_and_another_users_team_of_that_name_is_another(
    store: Any,
) -> None:
    """Ann's team alpha and Bob's team alpha are two teams: an edit of one never shows in
    the other, whatever the names."""
    ann_model = ScriptedModel([append_call("c1", "team/notes", "ann's secret plan"), "done"])
    bob_model = ScriptedModel(["hi"], record=True)
    options = {"memory": {"store": store}, "team": "alpha", "blocks": ("team/notes",)}
    ann = Agent.start_link(ann_model, user_id="ann", **options)
    bob = Agent.start_link(bob_model, user_id="bob", system_prompt="sys", **options)
    try:
        ann.run("plan")
        bob.run("what is the plan?")
        assert "secret plan" not in json.dumps(list(bob_model.calls))
        assert store.get_block(Scope("bob", team="alpha"), "notes") is None
        assert store.get_block(TEAM, "notes").value == "ann's secret plan"
    finally:
        ann.stop()
        bob.stop()


def test_tools_refuse_clearly_and_the_model_sees_why(store: Any) -> None:
    replace = json.dumps({"block": "team:alpha/notes", "old": "nobody", "new": "x"})
    unknown = json.dumps({"block": "secrets", "text": "x"})
    model = ScriptedModel(
        [
            {"tool_calls": [tool_call("c1", "core_memory_replace", replace)]},
            {"tool_calls": [tool_call("c2", "core_memory_append", unknown)]},
            {"tool_calls": [tool_call("c3", "memory_search", json.dumps({"query": "LEXER"}))]},
            "done",
        ]
    )
    store.set_block(TEAM, "notes", "ann: owns the lexer")
    agent = Agent.start_link(
        model, memory={"store": store}, user_id="ann", blocks=("team:alpha/notes",)
    )
    try:
        results = [m["content"] for m in agent.run("go").messages if m["role"] == "tool"]
        assert "BlockTextNotFound" in results[0] and "is not in it" in results[0]
        assert "no memory block named 'secrets'" in results[1]
        assert json.loads(results[2]) == ["team:alpha/notes: ann: owns the lexer"]
        assert store.get_block(TEAM, "notes").version == 1
    finally:
        agent.stop()


def test_the_blocks_option_is_checked_at_start() -> None:
    model = ScriptedModel(["hi"])
    store = MemoryStore.start_link()
    memory = {"store": store}
    try:
        with pytest.raises(ValueError, match="give the agent a user_id"):
            Agent.start_link(model, memory=memory, blocks=("persona",))
        with pytest.raises(TypeError, match="tuple of block names"):
            Agent.start_link(model, memory=memory, user_id="ann", blocks="persona")
        with pytest.raises(ValueError, match="label"):
            Agent.start_link(model, memory=memory, user_id="ann", blocks=("team:a/",))
        with pytest.raises(ValueError, match="keeps blocks"):
            Agent.start_link(model, memory=None, user_id="ann", blocks=("persona",))
        with pytest.raises(ValueError, match="it has none: give the agent team="):
            Agent.start_link(model, memory=memory, user_id="ann", blocks=("team/notes",))
        with pytest.raises(ValueError, match="agent, run or team"):
            Agent.start_link(model, memory=memory, user_id="ann", blocks=("bob/notes",))
        with pytest.raises(ValueError, match="team must be None or a non-empty str"):
            Agent.start_link(model, memory=memory, user_id="ann", team="")
    finally:
        store.stop()
