"""What ``OtpmemSaver`` appends to a store, and how it reads a thread back.

Every ``(thread_id, checkpoint_ns)`` is one conversation of the saver's tenant
(``Conv("langgraph", 'langgraph:checkpoints:["t1",""]')``) and every write to it is one
appended message: an ``assistant`` message whose content says what it is (for
``otpmem inspect``), its payload in ``metadata`` (values in the serializer's bytes, as
``[type, base64]``, since a message holds JSON-like values only):

- a **checkpoint**: ``langgraph_checkpoint = {"id", "parent", "run_id", "checkpoint",
  "metadata"}``, the whole checkpoint (its channel values too, as ``SqliteSaver`` keeps it);
- a task's **writes**: ``langgraph_writes = {"checkpoint", "task", "path", "writes":
  [[channel, idx, type, base64], ...]}``; a regular write of ``(task, idx)`` is kept
  first-come, a special one (error, interrupt, resume) last-come, as LangGraph's savers do;
- a **drop** (``prune(keep_latest)``, ``delete_for_runs``): ``langgraph_dropped = [ids]``;
  those checkpoints and their writes are no longer read. Appending keeps the conversation
  append-only, so a crash in the middle of a prune loses nothing it was to keep.

Each write carries an idempotency key digested from what it holds: a retried put is
stored once, and a checkpoint put again with other content is read as the later one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite, writes_sort_key

from ..messages import short_repr

CONVERSATION_PREFIX = "langgraph:checkpoints:"
CHECKPOINT = "langgraph_checkpoint"
WRITES = "langgraph_writes"
DROPPED = "langgraph_dropped"

Typed = tuple[str, str]
"""A value in the serializer's bytes, as stored: (its type, the bytes in base64)."""


class Stored(NamedTuple):
    """One checkpoint as read back: still encoded, decoded only when it is returned."""

    parent: str | None
    run_id: str | None
    checkpoint: Typed
    metadata: Typed


class Write(NamedTuple):
    """One pending write as read back, its value still encoded."""

    task_id: str
    channel: str
    value: Typed
    task_path: str


class ThreadRecords:
    """One (thread, namespace) conversation, read: its checkpoints and their writes."""

    __slots__ = ("checkpoints", "writes")

    def __init__(self, messages: Sequence[Mapping[str, Any]]) -> None:
        self.checkpoints: dict[str, Stored] = {}
        self.writes: dict[str, dict[tuple[str, int], Write]] = {}
        for message in messages:
            metadata = message.get("metadata")
            if not isinstance(metadata, Mapping):
                continue  # not the saver's: nothing else should write here; read on
            if CHECKPOINT in metadata:
                entry = metadata[CHECKPOINT]
                self.checkpoints[entry["id"]] = Stored(
                    entry["parent"],
                    entry.get("run_id"),
                    _typed(entry["checkpoint"]),
                    _typed(entry["metadata"]),
                )
            elif WRITES in metadata:
                self._add_writes(metadata[WRITES])
            elif DROPPED in metadata:
                for checkpoint_id in metadata[DROPPED]:
                    self.checkpoints.pop(checkpoint_id, None)
                    self.writes.pop(checkpoint_id, None)

    def _add_writes(self, entry: Mapping[str, Any]) -> None:
        kept = self.writes.setdefault(entry["checkpoint"], {})
        task_id, task_path = entry["task"], entry["path"]
        for channel, idx, kind, data in entry["writes"]:
            key = (task_id, idx)
            if idx >= 0 and key in kept:
                continue
            kept[key] = Write(task_id, channel, (kind, data), task_path)

    def latest(self) -> str | None:
        """The newest checkpoint's id (ids are uuid6: they sort by time)."""
        return max(self.checkpoints, default=None)

    def ordered_writes(self, checkpoint_id: str) -> list[Write]:
        """The writes of one checkpoint in ``writes_sort_key`` order, as get_tuple owes them."""
        kept = self.writes.get(checkpoint_id, {})
        return [kept[k] for k in sorted(kept, key=lambda k: writes_sort_key(kept[k][3], *k))]

    def delta_history(
        self, target: str | None, channels: Sequence[str], loads: Callable[[Typed], Any]
    ) -> dict[str, DeltaChannelHistory]:
        """``BaseCheckpointSaver.get_delta_channel_history``'s walk up the parent chain of
        ``target``, over this one read (the default reads the thread again per ancestor)."""
        stored = self.checkpoints.get(target) if target else None
        cursor = stored.parent if stored else None
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        while cursor is not None and remaining and cursor in self.checkpoints:
            for write in reversed(self.ordered_writes(cursor)):
                if write.channel in remaining:
                    collected[write.channel].append(
                        (write.task_id, write.channel, loads(write.value))
                    )
            values = loads(self.checkpoints[cursor].checkpoint)["channel_values"]
            for channel in [c for c in remaining if c in values]:
                seeds[channel] = values[channel]
                remaining.discard(channel)
            cursor = self.checkpoints[cursor].parent
        history: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[channel]))}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            history[channel] = entry
        return history


def checkpoint_message(entry: Mapping[str, Any], step: object, source: object) -> dict[str, Any]:
    """The message that holds one checkpoint."""
    return {
        "role": "assistant",
        "content": f"langgraph checkpoint {entry['id']} (step {step}, {source})",
        "metadata": {CHECKPOINT: dict(entry)},
    }


def writes_message(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The message that holds one task's writes."""
    return {
        "role": "assistant",
        "content": f"langgraph writes of task {entry['task']} at {entry['checkpoint']}",
        "metadata": {WRITES: dict(entry)},
    }


def dropped_message(ids: Sequence[str]) -> dict[str, Any]:
    """The message that drops checkpoints (and their writes) from what is read."""
    return {
        "role": "assistant",
        "content": f"langgraph dropped {len(ids)} checkpoint(s)",
        "metadata": {DROPPED: sorted(ids)},
    }


def idempotency_key(kind: str, entry: object) -> str:
    """A write's idempotency key: what it holds, digested (a retry is the same key)."""
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    return f"langgraph:{kind}:{hashlib.blake2b(text.encode(), digest_size=20).hexdigest()}"


def where(config: RunnableConfig) -> tuple[str, str]:
    """The thread id (as str, like SqliteSaver) and namespace ``config`` names."""
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping) or configurable.get("thread_id") is None:
        raise ValueError(
            "a checkpointer needs config={'configurable': {'thread_id': ...}}, got "
            f"{short_repr(config)}"
        )
    ns = configurable.get("checkpoint_ns") or ""
    if type(ns) is not str:
        raise TypeError(f"checkpoint_ns is a str, got {short_repr(ns)}")
    return str(configurable["thread_id"]), ns


def config_of(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    """The config that names one checkpoint."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _typed(stored: Sequence[str]) -> Typed:
    return (stored[0], stored[1])
