"""What a running node publishes for an observer in another process: its snapshot, every
second, where that observer can read it without touching the node or its store.

- Into a directory (a LevelDB store's, a simulation run's): ``observer-status.json``, written
  whole to a temporary file and moved over the old one with ``os.replace``, so a reader sees
  one complete snapshot or the one before, never half a file. LevelDB leaves files it does
  not name alone.
- Into PostgreSQL: one row per node in ``<namespace>.observer_status`` (node, published_at
  by the database's clock, the snapshot as jsonb), so an observer given only the DSN sees
  every node of the run.

When the publisher stops it writes a last snapshot marked ``"running": false``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._source import Observer

logger = logging.getLogger("otpmem.observe")

STATUS_FILE = "observer-status.json"
STATUS_FORMAT = "otpmem.observer.status"
STATUS_TABLE = "observer_status"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
INTERVAL = 1.0

_TABLE = """
CREATE TABLE IF NOT EXISTS {ns}.observer_status (
    node text PRIMARY KEY,
    published_at timestamptz NOT NULL DEFAULT now(),
    status jsonb NOT NULL
)
"""
_UPSERT = """
INSERT INTO {ns}.observer_status (node, published_at, status) VALUES (%s, now(), %s)
ON CONFLICT (node) DO UPDATE SET published_at = now(), status = EXCLUDED.status
"""



def schema_name(namespace: object) -> str:
    """``namespace`` if it is a plain PostgreSQL schema name, else ``ValueError``."""
    if type(namespace) is not str or not _SCHEMA_NAME.match(namespace):
        raise ValueError(
            f"namespace {namespace!r} is not a schema name (lower-case letters, digits and _)"
        )
    return namespace

def node_label() -> str:
    """This node as observers list it: ``host:os-pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def write_status(directory: Path, document: dict[str, Any]) -> Path:
    """Write ``document`` as ``directory/observer-status.json``, atomically."""
    path = directory / STATUS_FILE
    partial = directory / f".{STATUS_FILE}.{os.getpid()}.partial"
    with open(partial, "w", encoding="utf-8") as file:
        json.dump(document, file, default=str, separators=(",", ":"))
    os.replace(partial, path)
    return path


class Publisher:
    """Publishes an ``Observer``'s snapshot every ``interval`` s::

    publisher = observe.publish("run")                      # or publish(dsn=..., namespace=...)
    ...                                                      # otpmem observe --attach run
    publisher.stop()

    ``ready``: publishing waits until it says yes (a run directory that must be empty
    when its run starts gets its status file only once the run has begun).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        dsn: str | None = None,
        namespace: str = "otpmem",
        observer: Observer | None = None,
        interval: float = INTERVAL,
        node: str | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        if (directory is None) == (dsn is None):
            raise ValueError("publish needs exactly one of a directory or a dsn")
        if not isinstance(interval, int | float) or not interval > 0:
            raise ValueError(f"publish: interval must be a number of seconds > 0, got {interval!r}")
        if dsn is not None:
            schema_name(namespace)
        self.directory = None if directory is None else Path(directory)
        self.dsn = dsn
        self.namespace = namespace
        self.node = node or node_label()
        self.interval = float(interval)
        self._owns = observer is None
        self.observer = observer if observer is not None else Observer()
        self._ready = ready
        self._stop = threading.Event()
        self._conn: Any = None
        # One writer at a time: publish_now from the caller's thread and the loop's would
        # write the same partial file, and the second os.replace would find it gone.
        self._writing = threading.Lock()
        self.published = 0
        self._thread = threading.Thread(target=self._loop, name="otpmem-publish", daemon=True)
        self._thread.start()

    def _document(self, running: bool) -> dict[str, Any]:
        return {
            "format": STATUS_FORMAT,
            "version": 1,
            "node": self.node,
            "os_pid": os.getpid(),
            "published_at": time.time(),
            "interval": self.interval,
            "running": running,
            "snapshot": self.observer.sample(),
        }

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self._ready is None or self._ready():
                    self.publish_now()
            except Exception:  # a publisher must outlive what it watches and where it writes
                logger.exception("observer: publishing the node's status failed")
                self._drop_connection()
            self._stop.wait(self.interval)

    def publish_now(self, running: bool = True) -> None:
        """Take a snapshot and publish it now."""
        with self._writing:
            self._publish(running)

    def _publish(self, running: bool) -> None:
        document = self._document(running)
        if self.directory is not None:
            if not self.directory.is_dir():
                return  # not made yet (or gone): nothing is created on the node's behalf
            write_status(self.directory, document)
        else:
            self._write_row(document)
        self.published += 1

    def _write_row(self, document: dict[str, Any]) -> None:
        from psycopg import sql

        if self._conn is None:
            import psycopg

            assert self.dsn is not None
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
            self._conn.execute("SET statement_timeout = 5000")
            self._conn.execute(sql.SQL(_TABLE).format(ns=sql.Identifier(self.namespace)))
        self._conn.execute(
            sql.SQL(_UPSERT).format(ns=sql.Identifier(self.namespace)),
            (self.node, json.dumps(document, default=str)),
        )

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def stop(self) -> None:
        """Stop publishing; a last snapshot says the node stopped."""
        self._stop.set()
        self._thread.join(10.0)
        try:
            if self.published and (self._ready is None or self._ready()):
                self.publish_now(running=False)
        except Exception:
            logger.exception("observer: publishing the node's last status failed")
        self._drop_connection()
        if self._owns:
            self.observer.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def publish(
    directory: str | os.PathLike[str] | None = None,
    *,
    dsn: str | None = None,
    namespace: str = "otpmem",
    observer: Observer | None = None,
    interval: float = INTERVAL,
    ready: Callable[[], bool] | None = None,
) -> Publisher:
    """Publish this node's snapshot every ``interval`` s into ``directory`` or PostgreSQL,
    for ``otpmem observe --attach`` in another process; ``stop()`` the publisher at the end."""
    return Publisher(
        directory, dsn=dsn, namespace=namespace, observer=observer, interval=interval, ready=ready
    )
