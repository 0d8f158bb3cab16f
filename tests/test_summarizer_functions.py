"""A plain function as the summarizer, as PhoenixAI.Store's summarize_fn hook is used: in
the facade's summary kind, in Summarization and its presets, and in an explicit summarize."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from otpmem.memory import FunctionSummarizer, Pipeline, Summarization, as_summarizer
from otpmem.memory.facade import memory


def count_them(messages: Sequence[Mapping[str, Any]], previous: str | None) -> str:
    return f"{previous or ''}+{len(messages)}"


def test_the_summary_kind_takes_a_plain_function() -> None:
    with memory("summary", max_messages=4, summary_threshold=2, summarizer=count_them) as mem:
        mem.add([f"message {i}" for i in range(6)])
        sent = mem.context()
        assert sent[0]["role"] == "system" and "+4" in sent[0]["content"]
        assert sent[0]["metadata"]["summary"]["summarizer"] == "function:count_them"
        assert [m["content"] for m in sent[1:]] == ["message 4", "message 5"]


def test_a_one_argument_function_and_a_lambda_are_summarizers() -> None:
    seen: list[int] = []

    def messages_only(messages: Sequence[Mapping[str, Any]]) -> str:
        seen.append(len(messages))
        return "short"

    assert (
        as_summarizer(messages_only).summarize([{"role": "user", "content": "a"}], "p") == "short"
    )
    assert seen == [1]
    fn = as_summarizer(lambda messages, previous: "both")
    assert isinstance(fn, FunctionSummarizer) and fn.summarize([], None) == "both"
    preset = Pipeline.preset("summarize", summarizer=count_them)
    assert any(isinstance(step, Summarization) for step in preset.strategies)


def test_an_explicit_summarize_takes_a_function() -> None:
    with memory("window", max_messages=50) as mem:
        mem.add([f"m{i}" for i in range(8)])
        summary = mem.summarize(keep_recent=2, summarizer=count_them)
        assert summary is not None and "+6" in summary["content"]


def test_a_function_that_answers_no_text_falls_back_and_a_non_callable_is_refused() -> None:
    with memory(
        "summary", max_messages=4, summary_threshold=2, summarizer=lambda m, p: None
    ) as mem:
        mem.add([f"message {i}" for i in range(6)])
        sent = mem.context()  # the failed summary is dropped, the window still holds
        assert [m["content"] for m in sent][-2:] == ["message 4", "message 5"]
    with pytest.raises(TypeError, match="a summarizer is"):
        Summarization(20, 10, "not a function")  # type: ignore[arg-type]
