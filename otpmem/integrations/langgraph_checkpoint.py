"""``OtpmemSaver``: a LangGraph checkpointer (``BaseCheckpointSaver``) over any otpmem store.

::

    saver = OtpmemSaver(LevelDBStore.start_link("data"))      # or MemoryStore, PostgresStore
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})
    history = list(graph.get_state_history({"configurable": {"thread_id": "t1"}}))

Each thread and namespace is one conversation of the saver's tenant (``user_id="langgraph"``
unless told), each checkpoint and each task's writes one appended message (the layout is in
``langgraph_records``). So the checkpoints live where the store keeps messages: in a
supervised ``MemoryStore``'s table (a crash of the store keeps them), on disk with
``LevelDBStore`` (a reopen finds them), in PostgreSQL for every handle on the namespace.
``delete_thread`` and ``prune(strategy="delete")`` clear the conversations; ``prune
(keep_latest)`` and ``delete_for_runs`` append a drop. The async methods run the sync ones
through ``otpmem.aio``: in a lightweight process, never on the event loop's thread.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import json
import random
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .. import aio
from ..messages import Conv, check_user_id, short_repr
from ..stores import ChatMemory
from .langgraph_records import (
    CONVERSATION_PREFIX,
    ThreadRecords,
    Typed,
    checkpoint_message,
    config_of,
    dropped_message,
    idempotency_key,
    where,
    writes_message,
)

STRATEGIES = ("keep_latest", "delete")
TAIL = 4  # the newest messages get_tuple reads first: a checkpoint and its tasks' writes


class OtpmemSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer kept in an otpmem store, one conversation per thread and
    namespace; ``graph = builder.compile(checkpointer=OtpmemSaver(store))``."""

    def __init__(
        self,
        store: ChatMemory,
        *,
        user_id: str = "langgraph",
        serde: SerializerProtocol | None = None,
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(store, ChatMemory):
            raise TypeError(f"store must be an otpmem store handle, got {short_repr(store)}")
        if check_user_id(user_id) is None:
            raise ValueError("user_id must be a non-empty str: the tenant the threads are kept in")
        if type(timeout) not in (int, float) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {short_repr(timeout)}")
        super().__init__(serde=serde)
        self.store: Any = store
        self.user_id = user_id
        self.timeout = float(timeout)

    def conversation(self, thread_id: str, checkpoint_ns: str = "") -> Conv:
        """The conversation that holds one thread's checkpoints in one namespace."""
        where = json.dumps([thread_id, checkpoint_ns], separators=(",", ":"))
        return Conv(self.user_id, CONVERSATION_PREFIX + where)

    def _held(self, thread_id: str | None = None) -> builtins.list[tuple[str, str, Conv]]:
        """(thread, namespace, conversation) of every thread held, or of one thread."""
        found = []
        for conv in self.store.conversations(self.user_id):
            if not conv.conversation_id.startswith(CONVERSATION_PREFIX):
                continue
            thread, ns = json.loads(conv.conversation_id[len(CONVERSATION_PREFIX) :])
            if thread_id is None or thread == thread_id:
                found.append((thread, ns, conv))
        return found

    def _read(self, conv: Conv) -> ThreadRecords:
        return ThreadRecords(self.store.get(conv))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the newest), or None."""
        thread_id, ns = where(config)
        conv = self.conversation(thread_id, ns)
        checkpoint_id = get_checkpoint_id(config)
        thread, whole = self._read_tail(conv)
        if checkpoint_id and checkpoint_id not in thread.checkpoints and not whole:
            thread = self._read(conv)  # an older checkpoint: a replay, a fork
        checkpoint_id = checkpoint_id or thread.latest()
        if checkpoint_id is None or checkpoint_id not in thread.checkpoints:
            return None
        return self._tuple(thread_id, ns, checkpoint_id, thread)

    def _read_tail(self, conv: Conv) -> tuple[ThreadRecords, bool]:
        """The newest messages, enough to hold the newest checkpoint: what a graph reads on
        every invoke costs the last puts, not the thread's history. Ids grow as they are
        appended and a checkpoint's writes follow it, so the window (grown until it holds a
        checkpoint) holds the newest and its writes. True: it holds the whole thread."""
        window = TAIL
        while True:
            messages = self.store.get(conv, last=window)
            thread = ThreadRecords(messages)
            if thread.checkpoints or len(messages) < window:
                return thread, len(messages) < window
            window *= 4

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, if it names one),
        or of every thread; ``filter`` on their metadata, ``before`` a checkpoint id."""
        if filter is not None and not isinstance(filter, Mapping):
            raise TypeError(f"filter is a dict of metadata values, got {short_repr(filter)}")
        if limit is not None and (type(limit) is not int or limit < 0):
            raise ValueError(f"limit must be None or an int >= 0, got {short_repr(limit)}")
        if config is None:
            held = self._held()
            wanted_id = None
        else:
            thread_id, _ = where(config)
            ns = config["configurable"].get("checkpoint_ns")
            held = [h for h in self._held(thread_id) if ns is None or h[1] == ns]
            wanted_id = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        found = []
        for thread_id, ns, conv in held:
            thread = self._read(conv)
            for checkpoint_id in thread.checkpoints:
                if wanted_id and checkpoint_id != wanted_id:
                    continue
                if before_id and checkpoint_id >= before_id:
                    continue
                found.append((checkpoint_id, thread_id, ns, thread))
        found.sort(key=lambda f: f[0], reverse=True)
        left = limit
        for checkpoint_id, thread_id, ns, thread in found:
            if left is not None and left <= 0:
                return
            if filter:
                metadata = self._loads(thread.checkpoints[checkpoint_id].metadata)
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            if left is not None:
                left -= 1
            yield self._tuple(thread_id, ns, checkpoint_id, thread)

    def _tuple(
        self, thread_id: str, ns: str, checkpoint_id: str, thread: ThreadRecords
    ) -> CheckpointTuple:
        stored = thread.checkpoints[checkpoint_id]
        return CheckpointTuple(
            config=config_of(thread_id, ns, checkpoint_id),
            checkpoint=self._loads(stored.checkpoint),
            metadata=self._loads(stored.metadata),
            parent_config=None
            if stored.parent is None
            else config_of(thread_id, ns, stored.parent),
            pending_writes=[
                (w.task_id, w.channel, self._loads(w.value))
                for w in thread.ordered_writes(checkpoint_id)
            ],
        )

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The base class's walk up the parent chain, over one read of the conversation (the
        default reads it again for every ancestor)."""
        if not channels:
            return {}
        thread_id, ns = where(config)
        thread = self._read(self.conversation(thread_id, ns))
        target = get_checkpoint_id(config) or thread.latest()
        return thread.delta_history(target, channels, self._loads)

    # -- writing ----------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append ``checkpoint`` (whole) to its thread; its config, as LangGraph expects."""
        thread_id, ns = where(config)
        if not isinstance(checkpoint, Mapping) or type(checkpoint.get("id")) is not str:
            raise TypeError(f"a checkpoint is a dict with a str 'id', got {short_repr(checkpoint)}")
        checkpoint_id = checkpoint["id"]
        full = get_checkpoint_metadata(config, metadata)
        run_id = full.get("run_id")
        entry = {
            "id": checkpoint_id,
            "parent": config["configurable"].get("checkpoint_id"),
            "run_id": run_id if isinstance(run_id, str) else None,
            "checkpoint": self._dumps(checkpoint),
            "metadata": self._dumps(full),
        }
        message = checkpoint_message(entry, full.get("step"), full.get("source"))
        self.store.add(
            self.conversation(thread_id, ns),
            [message],
            idempotency_key=idempotency_key("c", entry),
            timeout=self.timeout,
        )
        return config_of(thread_id, ns, checkpoint_id)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a task's writes to the checkpoint ``config`` names (a retry stores once)."""
        thread_id, ns = where(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise ValueError("put_writes needs config['configurable']['checkpoint_id']")
        if type(task_id) is not str or type(task_path) is not str:
            raise TypeError(
                f"task_id and task_path are str, got {short_repr(task_id)}, {short_repr(task_path)}"
            )
        rows = [
            [channel, WRITES_IDX_MAP.get(channel, idx), *self._dumps(value)]
            for idx, (channel, value) in enumerate(writes)
        ]
        if not rows:
            return
        entry = {"checkpoint": checkpoint_id, "task": task_id, "path": task_path, "writes": rows}
        message = writes_message(entry)
        self.store.add(
            self.conversation(thread_id, ns),
            [message],
            idempotency_key=idempotency_key("w", entry),
            timeout=self.timeout,
        )

    def delete_thread(self, thread_id: str) -> None:
        """Clear every conversation of the thread (each namespace's)."""
        for _, _, conv in self._held(str(thread_id)):
            self.store.clear(conv, timeout=self.timeout)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Drop the checkpoints (and their writes) whose metadata names one of ``run_ids``."""
        doomed = {str(r) for r in run_ids}
        if not doomed:
            return
        for _, _, conv in self._held():
            thread = self._read(conv)
            ids = [i for i, s in thread.checkpoints.items() if s.run_id in doomed]
            self._drop(conv, ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append every checkpoint and write of one thread (each namespace) to another."""
        source, target = str(source_thread_id), str(target_thread_id)
        for _, ns, conv in self._held(source):
            messages = self.store.get(conv)
            if not messages:
                continue
            digest = hashlib.blake2b(repr((source, len(messages))).encode(), digest_size=16)
            self.store.add(
                self.conversation(target, ns),
                messages,
                idempotency_key=f"copy:{digest.hexdigest()}",
                timeout=self.timeout,
            )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: drop all but each namespace's newest checkpoint; ``delete``: all."""
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for _, _, conv in self._held(str(thread_id)):
                thread = self._read(conv)
                latest = thread.latest()
                self._drop(conv, [i for i in thread.checkpoints if i != latest])

    def _drop(self, conv: Conv, ids: builtins.list[str]) -> None:
        if not ids:
            return
        message = dropped_message(ids)
        self.store.add(
            conv, [message], idempotency_key=idempotency_key("d", ids), timeout=self.timeout
        )

    def get_next_version(self, current: str | None, channel: None) -> str:
        """InMemorySaver's versions: a zero-padded counter and a random tail, as str."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async: the same calls, run on the runtime's schedulers -----------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``get_tuple``, awaited through ``otpmem.aio``."""
        return await aio.run(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """``list``, awaited through ``otpmem.aio`` (read whole, then yielded)."""

        def listed() -> builtins.list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await aio.run(listed):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``put``, awaited through ``otpmem.aio``."""
        return await aio.run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """``put_writes``, awaited through ``otpmem.aio``."""
        await aio.run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """``delete_thread``, awaited through ``otpmem.aio``."""
        await aio.run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """``delete_for_runs``, awaited through ``otpmem.aio``."""
        await aio.run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """``copy_thread``, awaited through ``otpmem.aio``."""
        await aio.run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``prune``, awaited through ``otpmem.aio``."""
        await aio.run(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """``get_delta_channel_history``, awaited through ``otpmem.aio``."""
        return await aio.run(self.get_delta_channel_history, config=config, channels=channels)

    # -- the serializer's bytes, as text a message may hold --

    def _dumps(self, value: Any) -> builtins.list[str]:
        kind, data = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(data).decode("ascii")]

    def _loads(self, typed: Typed) -> Any:
        kind, data = typed
        return self.serde.loads_typed((kind, base64.b64decode(data)))


__all__ = ["CONVERSATION_PREFIX", "OtpmemSaver"]
