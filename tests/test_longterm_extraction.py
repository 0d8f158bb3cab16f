"""Fact extraction: only the messages after the durable cursor, facts and cursor in one
write, decisions against the known facts, a bad reply changes nothing, the cap reports."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.llm import ScriptedModel
from otpmem.memory import (
    ExtractionFailed,
    LongTermMemory,
    ModelFactExtractor,
    RuleFactExtractor,
)
from otpmem.memory.longterm import Decision, extraction_prompt, parse_decisions
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStore, MemoryStore
from tests.longterm_support import both_stores, user

store_fixture = both_stores()
ANN = Conv("ann", "chat")


class Recording:
    """An extractor that records every message it is given and adds one fact per user
    message (key ``m<position>``): each message must be seen exactly once."""

    blocks = False

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def extract(self, messages: Sequence[Mapping[str, Any]], known: Sequence[Fact]) -> Any:
        with self.lock:
            self.seen.extend(str(m["content"]) for m in messages)
        return [
            Decision("ADD", f"m{m['content']}", "seen", index=i)
            for i, m in enumerate(messages)
            if m["role"] == "user"
        ]


def test_extract_reads_only_what_follows_the_cursor_and_moves_it_with_the_facts(
    store: Any,
) -> None:
    ltm = LongTermMemory(store, RuleFactExtractor())
    store.add(
        ANN,
        [
            user("Hi, my name is Ann and I live in Lyon."),
            {"role": "assistant", "content": "Hi Ann"},
        ],
    )
    report = ltm.extract(ANN)
    assert (report.start, report.end, report.ok) == (0, 2, True)
    assert {f.key: f.value for f in store.get_facts("ann")} == {"name": "Ann", "location": "Lyon"}
    assert store.get_fact("ann", "name").source == (ANN, 0)
    assert store.extraction_cursor(ANN) == 2
    assert ltm.extract(ANN).processed == 0, "nothing new: nothing read, nothing written"
    store.add(ANN, [user("I moved to Paris. Forget my name.")])
    report = ltm.extract(ANN)
    assert (report.start, report.end, report.deleted) == (2, 3, ["name"])
    assert [(f.key, f.value, f.version) for f in store.get_facts("ann")] == [
        ("location", "Paris", 2)
    ]
    assert [f.value for f in store.fact_history("ann", "location")] == ["Lyon"]
    assert store.get_fact("ann", "location").source == (ANN, 2)


def test_the_cursor_survives_a_reopen_so_nothing_is_extracted_twice(tmp_path: Path) -> None:
    path = tmp_path / "db"
    recording = Recording()
    first = LevelDBStore.start_link(path)
    try:
        first.add(ANN, [user("1"), user("2")])
        LongTermMemory(first, recording).extract(ANN)
        first.add(ANN, [user("3")])  # stored, not yet extracted
    finally:
        first.stop()
    again = LevelDBStore.start_link(path)
    try:
        LongTermMemory(again, recording).extract(ANN)
        assert recording.seen == ["1", "2", "3"]
        assert sorted(f.key for f in again.get_facts("ann")) == ["m1", "m2", "m3"]
    finally:
        again.stop()


def test_model_extractor_decides_against_the_known_facts(store: Any) -> None:
    store.save_facts(
        "ann", [Fact("ann", "city", "Lyon"), Fact("ann", "pet", "cat"), Fact("ann", "job", "dev")]
    )
    reply = (
        '```json\n[{"action": "UPDATE", "key": "city", "value": "Paris"},'
        ' {"action": "DELETE", "key": "pet"}, {"action": "NONE", "key": "job", "value": "dev"},'
        ' {"action": "ADD", "key": "tea", "value": "green"}, {"action": "ADD", "value": "x"},'
        ' {"key": "age", "value": 41}]\n```'
    )
    model = ScriptedModel([reply], record=True)
    ltm = LongTermMemory(store, ModelFactExtractor(model))
    store.add(ANN, [user("I moved to Paris, gave my cat away, I drink green tea, I am 41.")])
    report = ltm.extract(ANN)
    assert {f.key: (f.value, f.version) for f in store.get_facts("ann")} == {
        "city": ("Paris", 2), "job": ("dev", 1), "tea": ("green", 1), "age": ("41", 1),
    }  # fmt: skip
    assert report.deleted == ["pet"] and report.unchanged == ["job"]
    assert [d.reason for d in report.skipped] == ["not a fact: {'action': 'ADD', 'value': 'x'}"]
    # The prompt: seed 004's shape, the known facts listed, the transcript as the user turn.
    system, transcript = model.calls[0][0]
    assert system["content"].startswith("Extract key facts about the user")
    assert "Already known facts" in system["content"] and "- city: Lyon" in system["content"]
    assert system["content"].endswith("Output ONLY the JSON array, no other text.")
    assert transcript == user(
        "user: I moved to Paris, gave my cat away, I drink green tea, I am 41."
    )


@pytest.mark.parametrize("bad", ["Sure! Here are the facts: none", '{"key": "a"}', "", "[{"])
def test_a_bad_model_reply_changes_nothing_and_the_messages_are_tried_again(
    store: Any, bad: str
) -> None:
    model = ScriptedModel([bad, '[{"action": "ADD", "key": "city", "value": "Lyon"}]'], record=True)
    ltm = LongTermMemory(store, ModelFactExtractor(model))
    store.add(ANN, [user("I live in Lyon")])
    report = ltm.extract(ANN)
    assert not report.ok and "a JSON array of facts" in (report.error or "")
    assert store.get_facts("ann") == [] and store.extraction_cursor(ANN) == 0
    assert ltm.extract(ANN).ok
    assert store.get_fact("ann", "city").value == "Lyon" and store.extraction_cursor(ANN) == 1
    assert model.calls[0][0] == model.calls[1][0], "the same messages, asked again"


def test_a_model_error_is_reported_not_raised(store: Any) -> None:
    ltm = LongTermMemory(store, ModelFactExtractor(ScriptedModel([])))  # runs out: ModelError
    store.add(ANN, [user("I live in Lyon")])
    report = ltm.extract(ANN)
    assert "extraction model failed" in (report.error or "")
    assert store.extraction_cursor(ANN) == 0


def test_at_the_cap_new_keys_are_refused_and_reported_known_ones_still_update(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ltm = LongTermMemory(store, RuleFactExtractor(), max_facts_per_user=2)
    store.add(ANN, [user("My name is Ann. I live in Lyon.")])
    ltm.extract(ANN)
    store.add(ANN, [user("I prefer tea. I moved to Paris.")])
    report = ltm.extract(ANN)
    assert report.refused == ["preference"] and report.ok
    assert {f.key: f.value for f in store.get_facts("ann")} == {"name": "Ann", "location": "Paris"}
    assert store.extraction_cursor(ANN) == 2
    assert "refused" in caplog.text and "preference" in caplog.text


def test_with_evict_the_least_recently_updated_fact_makes_room(store: Any) -> None:
    ltm = LongTermMemory(store, RuleFactExtractor(), max_facts_per_user=2, evict=True)
    store.add(ANN, [user("My name is Ann.")])
    ltm.extract(ANN)
    store.add(ANN, [user("I live in Lyon.")])
    ltm.extract(ANN)
    store.add(ANN, [user("I prefer tea.")])
    assert ltm.extract(ANN).refused == []
    assert sorted(f.key for f in store.get_facts("ann")) == ["location", "preference"]
    assert [f.value for f in store.fact_history("ann", "name")] == ["Ann"]  # evicted, kept


def test_a_long_conversation_is_extracted_in_batches_up_to_its_end(store: Any) -> None:
    recording = Recording()
    store.add(ANN, [user(str(i)) for i in range(25)])
    report = LongTermMemory(store, recording, batch=10).extract(ANN)
    assert (report.start, report.end) == (0, 25)
    assert recording.seen == [str(i) for i in range(25)]
    assert len(store.get_facts("ann")) == 25


def test_concurrent_extractions_of_one_conversation_see_each_message_once(store: Any) -> None:
    recording = Recording()
    ltm = LongTermMemory(store, recording)
    errors: list[BaseException] = []

    def writer_and_extractor(w: int) -> None:
        try:
            for i in range(10):
                store.add(ANN, [user(f"{w}-{i}")])
                ltm.extract(ANN)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer_and_extractor, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30.0)
    ltm.extract(ANN)
    assert errors == []
    assert sorted(recording.seen) == sorted(f"{w}-{i}" for w in range(4) for i in range(10))
    assert store.extraction_cursor(ANN) == 40


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(st.integers(1, 4), st.just("extract"), st.just("clear")), max_size=20))
def test_every_message_is_extracted_exactly_once_whatever_the_order(steps: list[Any]) -> None:
    store = MemoryStore.start_link()
    try:
        recording = Recording()
        ltm = LongTermMemory(store, recording)
        written: list[str] = []
        expected: list[str] = []
        for step in [*steps, "extract"]:
            if step == "extract":
                ltm.extract(ANN)
                expected.extend(written)
                written = []
            elif step == "clear":
                store.clear(ANN)  # unextracted messages go with it, and the cursor restarts
                written = []
            else:
                batch = [
                    str(len(recording.seen) + len(written) + k) + f"/{id(step)}"
                    for k in range(step)
                ]
                store.add(ANN, [user(text) for text in batch])
                written.extend(batch)
        assert recording.seen == expected
        assert store.extraction_cursor(ANN) == store.count(ANN)
    finally:
        store.stop()


def test_rule_extractor_patterns() -> None:
    rules = RuleFactExtractor()

    def facts(text: str) -> dict[str, str | None]:
        return {d.key: d.value for d in rules.extract([user(text)], [])}

    assert facts("Hi, my name is Ann and I live in Lyon.") == {"name": "Ann", "location": "Lyon"}
    assert facts("Call me Bob. I'm from New York City, NY") == {
        "name": "Bob",
        "location": "New York City",
    }
    assert facts("My favorite color is dark blue! I am allergic to peanuts") == {
        "favorite_color": "dark blue", "allergy": "peanuts",
    }  # fmt: skip
    assert facts("I work at Acme and I prefer tea. Actually I prefer coffee.") == {
        "employer": "Acme", "preference": "coffee",
    }  # fmt: skip
    assert rules.extract([{"role": "assistant", "content": "my name is Bot"}], []) == []
    known = [Fact("ann", "name", "Ann")]
    assert rules.extract([user("my name is Ann")], known) == [Decision("NONE", "name", "Ann", 0)]
    assert rules.extract([user("forget my name")], known) == [Decision("DELETE", "name", None, 0)]
    with pytest.raises(ValueError, match="value"):
        RuleFactExtractor([(r"i am (\w+)", "mood")])


def test_parse_decisions_is_defensive() -> None:
    assert parse_decisions('Here you go: [{"key": "a", "value": "b"}] hope it helps') == [
        Decision("ADD", "a", "b")
    ]
    for bad in (None, "no", "{}", "[1, 2"):
        with pytest.raises(ExtractionFailed):
            parse_decisions(bad)
    assert extraction_prompt([user("x")], [])[0]["content"].count("Already known") == 0


def test_update_profile_saves_the_models_json_and_refuses_a_bad_one(store: Any) -> None:
    store.save_fact(Fact("ann", "city", "Lyon"))
    good = '{"summary": "Ann lives in Lyon.", "metadata": {"city": "Lyon"}}'
    model = ScriptedModel([good, "I think Ann is nice", '{"summary": ""}'], record=True)
    ltm = LongTermMemory(store)
    profile = ltm.update_profile("ann", model)
    assert (profile.summary, dict(profile.metadata)) == ("Ann lives in Lyon.", {"city": "Lyon"})
    assert "- city: Lyon" in model.calls[0][0][0]["content"]
    for _ in range(2):
        with pytest.raises(ExtractionFailed):
            ltm.update_profile("ann", model)
    assert store.get_profile("ann").summary == "Ann lives in Lyon."
    assert "Current profile:\nAnn lives in Lyon." in model.calls[1][0][0]["content"]


def test_bad_long_term_config_is_refused_at_construction(store: Any) -> None:
    with pytest.raises(ValueError, match="trigger must be one of"):
        LongTermMemory(store, RuleFactExtractor(), trigger="sometimes")
    with pytest.raises(ValueError, match="mode must be one of"):
        LongTermMemory(store, RuleFactExtractor(), mode="later")
    with pytest.raises(ValueError, match="give an extractor"):
        LongTermMemory(store, trigger="per_turn")
    with pytest.raises(TypeError, match="FactExtractor"):
        LongTermMemory(store, "rules")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="LongTermStore"):
        LongTermMemory(object(), RuleFactExtractor())
    with pytest.raises(ValueError, match="max_facts_per_user must be an int >= 1"):
        LongTermMemory(store, RuleFactExtractor(), max_facts_per_user=0)
    with pytest.raises(ValueError, match="has no user_id"):
        LongTermMemory(store, RuleFactExtractor()).extract("anonymous")
