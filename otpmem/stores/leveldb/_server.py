"""LevelDBStore: every conversation on disk (plyvel + msgpack), the DETS analogue.

One key per message, ordered by (user, conversation, sequence); see ``keys`` for the
layout. Each ``add`` is one WriteBatch: all of it is stored, or none. With
``sync=True`` (the default) an ``add`` returns only after its batch was fsynced, so an
acknowledged message survives a kill -9 of the process or a power cut; concurrent adds share
one fsync (group commit). ``sync=False`` is several times faster and still survives a
crash of the process (LevelDB replays its log), but not of the machine.

The server owns the database: it opens it in ``init``, assigns sequence numbers and hands
writes to its committer; it closes it on every exit path before its exit is announced, so a
restarted store can open the directory at once, except after a crash or a kill, when the
open database is parked for the next incarnation to adopt (``_open.park``): a restart
then neither waits out a compaction nor replays the log. Reads run on the caller's thread.
This module is that life (opening, closing, parking) and the writes that pause adds
(clears, forgetting a user, long-term records); how an add becomes one WriteBatch is
``_appends``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack

from ...actors import NO_REPLY, GenServer, blocking, is_tagged, on_exit
from ...actors.faults import FaultPlan
from ...messages import Conv, short_repr
from ...supervisors import ChildSpec, SupervisorEvent
from .._base import STORE_INTENSITY, STORE_PERIOD, StoreError, raise_write_crash
from .._client import REQUESTS as STORE_REQUESTS
from .._client import parse_request
from .._holds import ledger_for
from .._longterm_client import LONGTERM_KINDS
from .._supervised import spawn_store, supervised_store
from .._write_rules import CALLER_ERRORS
from ..blocks import is_block_edit, parse_block_edit
from ..longterm import Usage
from ..reservations import Limit, abandoned_hold, is_reservation, parse_reservation
from ..scopes import owner_key
from . import _blocks, _fork, _scopes, keys
from . import _longterm as lt
from ._appends import Appending, KnownConversation, Staged
from ._committer import Committer, Op
from ._handle import READY_TIMEOUT, LevelDBStoreHandle
from ._open import (
    ReadGate,
    adopt,
    directory_identity,
    ensure_layout,
    open_db,
    park,
)

__all__ = ["READY_TIMEOUT", "LevelDBStore", "LevelDBStoreHandle"]

REQUESTS = {**STORE_REQUESTS, "flush": (0,)}  # every write queued so far is on disk


class LevelDBStore(Appending, GenServer):
    """Conversations in a LevelDB directory, restored by reopening it::

    store = LevelDBStore.start_link("data/memory")
    store.add(Conv("alice", "c1"), [{"role": "user", "content": "hi"}])
    store.stop()
    LevelDBStore.start_link("data/memory").get(Conv("alice", "c1"))  # still there
    """

    caller_errors = CALLER_ERRORS
    handle_class = LevelDBStoreHandle
    adds_on_callers = True  # see add_here

    @classmethod
    def start_link(
        cls,
        path: str | os.PathLike[str],
        name: str | None = None,
        sync: bool = True,
        *,
        lock_timeout: float = 5.0,
        create: bool = True,
        faults: FaultPlan | None = None,
        start_timeout: float | None = 30.0,
    ) -> LevelDBStoreHandle:
        """Open (or, unless ``create=False``, create) the store at ``path``, linked to the caller.

        Raises ``StoreLocked`` if another process holds the directory for ``lock_timeout``
        s, ``StoreUnavailable`` if it cannot be created or opened, ``StoreCorrupt`` if it is
        damaged.
        """
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
        if not isinstance(sync, bool):
            raise TypeError(f"sync must be a bool, got {short_repr(sync)}")
        if not isinstance(lock_timeout, int | float) or isinstance(lock_timeout, bool):
            raise TypeError(
                f"lock_timeout must be a number of seconds, got {short_repr(lock_timeout)}"
            )
        handle = spawn_store(
            cls, (os.fspath(path), sync, lock_timeout, create), name, faults, start_timeout
        )
        assert isinstance(handle, LevelDBStoreHandle)
        return handle

    @classmethod
    def child_spec(
        cls,
        path: str | os.PathLike[str],
        name: str,
        child_id: str | None = None,
        *,
        sync: bool = True,
        intensity: int = STORE_INTENSITY,
        period: float = STORE_PERIOD,
        listeners: Iterable[Callable[[SupervisorEvent], None]] = (),
    ) -> ChildSpec:
        """A store named ``name`` at ``path`` under its own supervisor (child ``"store"``).

        Its supervisor absorbs a burst of crashes (``intensity`` restarts in ``period`` s)
        before it gives up, so the supervisor above it counts one restart per burst.
        ``listeners`` hear that supervisor, in every incarnation.
        """
        where = os.fspath(path)
        return supervised_store(
            child_id or name,
            lambda: cls.start_link(where, name=name, sync=sync),
            intensity,
            period,
            listeners,
        )

    def init(self, path: str, sync: bool, lock_timeout: float, create: bool = True) -> None:
        self.path = path
        self.gate = ReadGate()
        adopted = adopt(path)
        if adopted is not None:
            self.db = adopted
        else:
            self.db = open_db(path, lock_timeout, create)
            try:
                blocking(ensure_layout, self.db, path)
            except BaseException:
                self.db.close()
                raise
        self.directory = directory_identity(path)
        # Holds of calls in flight, kept per directory: a restarted server keeps them.
        self.holds = ledger_for(os.path.realpath(path))
        # A crash or a kill parks the open database for the next incarnation; a stop, a
        # shutdown or a failed write (LevelDB keeps failing until reopened) closes it.
        self.keep_open = True
        self.convs: dict[Conv, KnownConversation] = {}
        self.committer = Committer(self.db, sync, self._write_failed, Path(path).name)
        # Threads that are not processes add on their own thread (``add_here``): the ops
        # built under this lock, which the server takes too for anything that reads or
        # changes what an add builds on; clears and long-term writes pause them instead.
        self.write_lock = threading.Lock()
        self.packer = msgpack.Packer(use_bin_type=True)
        self.writes_here = True
        self.closed = False
        on_exit(self._close)

    def _write_failed(self, exc: BaseException) -> None:
        # Sequence numbers were handed out for writes that did not land: restart from disk.
        self.handle.send(("write_failed", exc))

    def _close(self) -> None:
        with self.write_lock:
            self.writes_here, self.closed = False, True
        self.committer.stop()
        self.gate.close()
        if self.keep_open:
            park(self.path, self.db, self.directory)
        else:
            self.db.close()

    def terminate(self, reason: Any) -> None:
        if not isinstance(reason, BaseException):  # normal, or a shutdown: nothing follows
            self.keep_open = False

    def handle_info(self, message: Any) -> Any:
        raise_write_crash(message)
        abandoned = abandoned_hold(message)
        if abandoned is not None:
            self.holds.release(abandoned)
            return None
        if is_tagged(message, "write_failed", 2):
            self.keep_open = False
            raise StoreError(f"LevelDB write failed: {short_repr(message[1])}")
        return super().handle_info(message)

    @contextmanager
    def _adds_paused(self) -> Iterator[None]:
        """No add on a caller's thread in the block: theirs wait in the mailbox."""
        with self.write_lock:
            self.writes_here = False
        try:
            yield
        finally:
            with self.write_lock:
                self.writes_here = not self.closed

    def handle_call(self, message: Any) -> Any:
        if is_reservation(message):
            kind, arg = parse_reservation(message, "LevelDBStore")
            if kind == "release":
                return self.holds.release(arg)
            conv, hold_id, hold, limits, ttl = arg
            return self.holds.reserve(conv, hold_id, hold, limits, ttl, self._recorded)
        if is_block_edit(message):
            edit = parse_block_edit(message)
            return _blocks.edit(self, edit, _scopes.listed(edit[1]))
        kind, arg = parse_request(message, "LevelDBStore", REQUESTS)
        if kind in LONGTERM_KINDS:
            with self._adds_paused():
                return self._longterm(kind, arg)
        if kind == "add":
            staged: Staged = {}
            with self.write_lock:
                ops = self._append_ops(*arg, staged=staged)
                self.committer.submit(ops, self.caller(), staged)
            return NO_REPLY
        if kind == "fork":
            with self._adds_paused():
                return _fork.fork(self, arg)
        if kind == "import":
            staged = {}
            ops = []
            with self.write_lock:
                for conv, batch, key in arg:
                    ops.extend(self._append_ops(conv, batch, key, staged=staged))
                self.committer.submit(ops, self.caller(), staged)
            return NO_REPLY
        if kind == "clear":
            of_conv = (*keys.CONVERSATION_KINDS, *lt.CONVERSATION_KINDS)
            prefixes = [keys.conv_prefix(k, arg) for k in of_conv]
            with self._adds_paused():
                return self._delete_range(prefixes, [arg], [lt.cleared_op(arg)])
        if kind == "forget_user":
            kinds = (*keys.CONVERSATION_KINDS, keys.META)
            prefixes = [keys.user_prefix(k, arg) for k in kinds]
            with self._adds_paused():
                # Listed once adds are paused: a conversation a thread begins until then
                # is cached by now, and its cached count must go with it.
                owned = [c for c in self.convs if c.user_id == arg]
                # The user's scopes are read once every queued write (a scope's first
                # record among them) is on disk.
                blocking(self.committer.flush)
                prefixes += [*lt.iter_user_prefixes(arg), *_scopes.forget_prefixes(self.db, arg)]
                return self._delete_range(prefixes, owned)
        # "flush", the only other request parse_request lets through.
        blocking(self.committer.flush)
        return None

    def _recorded(self, conv: Conv, limit: Limit) -> Usage:
        """What is on disk in a limit's scope, for a reservation: every add whose call
        released its hold was acknowledged, so on disk, before the release."""
        if limit.since is None:  # one point read
            if limit.scope == "user":
                assert conv.user_id is not None  # checked with the limit
                return lt.read_user_usage(self.db, conv.user_id, None)
            return lt.read_usage(self.db, conv, None)
        if limit.scope == "user":  # a window: a scan of the log, off the schedulers
            return blocking(lt.read_user_usage, self.db, conv.user_id, limit.since)
        return blocking(lt.read_usage, self.db, conv, limit.since)

    def _longterm(self, kind: str, arg: Any) -> Any:
        # Facts are read, then written: everything queued must be on disk before the read.
        blocking(self.committer.flush)
        if kind == "save_facts":
            saved, removed, ops = lt.fact_ops(self.db, *arg)
            ops += _scopes.listed(arg[0])
            self.committer.submit(ops, self.caller(), answer=(saved, removed))
            return NO_REPLY
        if kind == "save_profile":
            ops = [lt.profile_op(arg), *_scopes.listed(owner_key(arg.user_id))]
            self.committer.submit(ops, self.caller(), answer=arg)
            return NO_REPLY
        if kind == "delete_profile":
            entry = keys.user_prefix(lt.PROFILE, arg)
            existed = self.db.get(entry) is not None
            self.committer.submit([(entry, None)], self.caller(), answer=existed)
            return NO_REPLY
        if kind == "join_scope":
            self.committer.submit(_scopes.join_ops(self.db, *arg), self.caller())
            return NO_REPLY
        self.committer.submit(lt.job_ops(self.db, *arg), self.caller())
        return NO_REPLY

    def _delete_range(
        self, prefixes: list[bytes], convs: list[Conv], puts: Sequence[Op] = ()
    ) -> Any:
        # Writes still queued would land after a range computed now: write them first.
        blocking(self.committer.flush)
        ops: list[Op] = []
        for prefix in prefixes:
            ops.extend((k, None) for k in self.db.iterator(prefix=prefix, include_value=False))
        for conv in convs:
            ops.append((keys.conv_prefix(keys.META, conv), None))
            self.convs.pop(conv, None)
        ops.extend(puts)
        self.committer.submit(ops, self.caller())
        # And on disk before the next request: an add handled meanwhile would read the
        # conversation's old meta key back from disk (its count, persisted wrong).
        blocking(self.committer.flush)
        return NO_REPLY
