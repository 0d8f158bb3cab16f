"""What a window sends, and why: id-safe windows and rolling summaries over a real store.

Run with ``make demo`` or ``python examples/memory_policy_demo.py``.

1. A naive ``history[-n:]`` cut lands between a tool call and its results: the provider
   would answer 400. ``safe_window`` drops the orphaned results instead.
2. A summarizing pipeline over 30 turns: the summary rolls every few turns, is stored in
   the conversation with its provenance, and is reused in between.
"""

from __future__ import annotations

from typing import Any

from otpmem.memory import DefaultProvider, Pipeline, PipelineProvider, SlidingWindow, Summarization
from otpmem.messages import Conv
from otpmem.stores import MemoryStore


def turn(i: int) -> list[dict[str, Any]]:
    """A user question answered with the help of one tool call."""
    call_id = f"call-{i}"
    return [
        {"role": "user", "content": f"What is the weather in city {i}? Please be brief."},
        {
            "role": "assistant",
            "content": "Let me look that up.",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "weather", "arguments": f'{{"city": {i}}}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": f"city {i}: sunny, {10 + i} C"},
        {"role": "assistant", "content": f"It is sunny in city {i}, {10 + i} degrees."},
    ]


def orphans(messages: list[Any]) -> int:
    """Tool results sent without their call."""
    asked: set[str] = set()
    count = 0
    for message in messages:
        asked |= {c["id"] for c in message.get("tool_calls") or ()}
        if message["role"] == "tool" and message["tool_call_id"] not in asked:
            count += 1
    return count


def window_scene(store: Any) -> None:
    """A naive tail cut against safe_window."""
    conv = Conv("demo", "weather")
    provider = DefaultProvider(store, window=6)
    for i in range(5):
        provider.append(conv, turn(i))
    history = store.get(conv)
    naive = history[-6:]
    safe = provider.prepare(conv, provider.history(conv))
    print("1. a window of 6 over 5 tool-using turns")
    print(
        f"   naive history[-6:]: starts with {naive[0]['role']!r}, {orphans(naive)} orphaned "
        "tool result(s) -> a 400 from the provider"
    )
    print(
        f"   safe_window:        starts with {safe[0]['role']!r}, {orphans(safe)} orphaned, "
        f"{len(safe)} messages sent"
    )


def summary_scene(store: Any) -> None:
    """Rolling summaries over 30 turns."""
    conv = Conv("demo", "long chat")
    provider = PipelineProvider(store, Pipeline([Summarization(12, 4), SlidingWindow(12)]))
    print("2. Summarization(threshold=12, keep_recent=4) over 30 turns")
    for i in range(30):
        # prepare is pure: a summary it rolls is stored with the conversation's next append
        provider.append(conv, turn(i))
        report = provider.explain(conv, provider.history(conv), keep_summary=True)
        if report.summarized:
            start, end = report.summarized
            print(
                f"   turn {i:2}: rolled a summary over messages {start}..{end - 1}; "
                f"sending {len(report.messages)} messages, {report.tokens['sent']} tokens"
            )
    print("   the last report:")
    for line in report.describe().splitlines():
        print(f"     {line}")
    stored = [m for m in store.get(conv) if m.get("metadata", {}).get("summary")]
    print(
        f"   summaries stored in the conversation: {len(stored)}; the newest covers "
        f"{stored[-1]['metadata']['summary']['covers']}"
    )


def main() -> None:
    """Run both scenes on one MemoryStore."""
    store = MemoryStore.start_link()
    try:
        window_scene(store)
        summary_scene(store)
    finally:
        store.stop()


if __name__ == "__main__":
    main()
