"""ScriptedModel records what it was sent only when asked, and then only the last calls."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otpmem.llm import ModelError, ScriptedModel
from otpmem.llm.scripted import RECORD_LAST


def ask(model: ScriptedModel, n: int) -> None:
    """``n`` calls, the i-th sending the one message ``m<i>``."""
    for i in range(n):
        model.chat([{"role": "user", "content": f"m{i}"}])


def sent(model: ScriptedModel) -> list[str]:
    """The content of the one message of each recorded call, oldest first."""
    return [messages[0]["content"] for messages, _ in model.calls]


def test_by_default_a_model_counts_its_calls_and_keeps_none() -> None:
    model = ScriptedModel(lambda messages: "ok")
    ask(model, 50)
    assert model.call_count == 50 and model.record == 0
    assert not hasattr(model, "calls")
    with pytest.raises(AttributeError, match=r"records no calls: make it with record=True"):
        _ = model.calls


def test_record_true_keeps_the_last_thousand_calls() -> None:
    model = ScriptedModel(lambda messages: "ok", record=True)
    ask(model, RECORD_LAST + 5)
    assert RECORD_LAST == 1000 and model.call_count == 1005
    assert sent(model) == [f"m{i}" for i in range(5, 1005)]


def test_calls_is_the_live_record_and_clearing_it_empties_it() -> None:
    model = ScriptedModel(lambda messages: "ok", record=2)
    ask(model, 2)
    model.calls.clear()
    ask(model, 1)
    assert sent(model) == ["m0"] and model.call_count == 3 and model.calls.maxlen == 2


@given(keep=st.integers(min_value=1, max_value=8), made=st.integers(min_value=0, max_value=20))
def test_record_n_keeps_exactly_the_last_n_calls_in_order(keep: int, made: int) -> None:
    model = ScriptedModel(lambda messages: "ok", record=keep)
    ask(model, made)
    assert sent(model) == [f"m{i}" for i in range(max(0, made - keep), made)]
    assert model.call_count == made


def test_running_out_of_replies_says_after_how_many_calls_without_a_record() -> None:
    model = ScriptedModel(["only"])
    ask(model, 1)
    with pytest.raises(ModelError, match=r"ran out of replies after 1 call\(s\)"):
        ask(model, 1)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "yes", None])
def test_a_bad_record_value_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ValueError, match=r"record is True, False or how many calls to keep"):
        ScriptedModel(["x"], record=bad)  # type: ignore[arg-type]
