"""An observer attached to a node in another process: it reads what the node publishes.

``attach("run")`` reads ``observer-status.json`` from a LevelDB store's directory or a
simulation run's (``Publisher`` writes it there every second); ``attach(dsn, namespace=)``
reads every node of a PostgreSQL run: the leases table (which node holds how many
conversations, live or expired, their progress), the conversations' counts, and the
snapshot rows nodes publish in ``observer_status``. It only reads: files are opened for
reading, and its PostgreSQL session is ``default_transaction_read_only``, so the server
itself refuses any write. Its snapshot has the local ``Observer``'s shape, plus
``attached``: the source and each node's age, so the same page draws it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

from ._publish import STATUS_FILE, STATUS_FORMAT, STATUS_TABLE, schema_name
from ._sampler import Sampler

logger = logging.getLogger("otpmem.observe")

STALE_AFTER = 3.0
"""Intervals after which a node that published nothing since is listed as stale."""
_DSN = re.compile(r"^(postgres(ql)?://|\S+=)", re.IGNORECASE)


class AttachError(ValueError):
    """There is nothing to attach to where the observer was pointed; the message says why."""


def check_namespace(namespace: object) -> str:
    """``namespace`` if it is a plain PostgreSQL schema name, else ``AttachError``."""
    try:
        return schema_name(namespace)
    except ValueError as exc:
        raise AttachError(str(exc)) from None


def is_dsn(target: str) -> bool:
    """Whether ``target`` reads as a PostgreSQL DSN (a URI or ``key=value`` pairs)."""
    return bool(_DSN.match(target))


def _empty_snapshot(now: float) -> dict[str, Any]:
    return {
        "taken_at": now,
        "uptime_s": 0.0,
        "node": {"processes": 0, "schedulers": 0, "mailbox_total": 0},
        "tree": [],
        "processes": [],
        "stores": [],
        "agents": {"running": 0, "turns": 0, "turns_per_s": 0.0, "errors": 0},
        "events": [],
        "restarts_total": 0,
    }


def _node_row(document: dict[str, Any], now: float) -> dict[str, Any]:
    published = float(document.get("published_at") or 0.0)
    interval = float(document.get("interval") or 1.0)
    age = max(0.0, now - published)
    if not document.get("running", True):
        state = "stopped"
    else:
        state = "stale" if age > STALE_AFTER * interval else "live"
    return {
        "node": str(document.get("node")),
        "os_pid": document.get("os_pid"),
        "state": state,
        "age_s": round(age, 1),
    }


def merge(documents: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """One snapshot of every published node: figures summed, trees and rows side by side."""
    merged = _empty_snapshot(now)
    if not documents:
        return merged
    many = len(documents) > 1
    for document in documents:
        snap = document.get("snapshot") or {}
        node = str(document.get("node"))
        for key in ("processes", "mailbox_total"):
            merged["node"][key] += int(snap.get("node", {}).get(key, 0))
        merged["node"]["schedulers"] = max(
            merged["node"]["schedulers"], int(snap.get("node", {}).get("schedulers", 0))
        )
        merged["uptime_s"] = max(merged["uptime_s"], float(snap.get("uptime_s", 0.0)))
        for root in snap.get("tree", []):
            if many:
                root = {**root, "label": f"{node}: {root.get('label')}"}
            merged["tree"].append(root)
        merged["processes"] += [{**p, "node": node} for p in snap.get("processes", [])]
        merged["stores"] += [{**s, "node": node} for s in snap.get("stores", [])]
        merged["events"] += [{**e, "node": node} for e in snap.get("events", [])]
        merged["restarts_total"] += int(snap.get("restarts_total", 0))
        agents = snap.get("agents", {})
        for key in ("running", "turns", "errors"):
            merged["agents"][key] += int(agents.get(key) or 0)
        merged["agents"]["turns_per_s"] += float(agents.get("turns_per_s") or 0.0)
        if not many:
            merged["agents"].update(p50_ms=agents.get("p50_ms"), p99_ms=agents.get("p99_ms"))
    merged["events"].sort(key=lambda e: -float(e.get("t") or 0.0))
    return merged


class Attached(Sampler):
    """The observer of a node in another process (``attach``); read-only, like its page."""

    thread_name = "otpmem-attached"

    def __init__(self, target: str | Path, namespace: str | None = None) -> None:
        text = str(target)
        self.dsn: str | None = None
        self.directory: Path | None = None
        if isinstance(target, str) and is_dsn(target):
            self.dsn = target
            self.namespace = check_namespace(namespace or "otpmem")
            from ..stores.postgres import redact

            self.source = f"PostgreSQL {redact(target)}, schema {self.namespace}"
        else:
            path = Path(text)
            if not path.is_dir():
                raise AttachError(
                    f"--attach {text}: not a directory nor a PostgreSQL DSN; give a node's "
                    "data directory, a simulation run's, or postgresql://..."
                )
            if namespace is not None:
                raise AttachError("--namespace goes with a PostgreSQL DSN, not a directory")
            self.directory = path
            self.namespace = ""
            self.source = str(path)
        self._latest: dict[str, Any] | None = None
        super().__init__()
        self._conn: Any = None

    # -- reading ---------------------------------------------------------------------------

    def _read_files(self) -> list[dict[str, Any]]:
        assert self.directory is not None
        documents = []
        for path in sorted(self.directory.glob("observer-status*.json")):
            try:
                document = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # replaced while read, or not ours: the next sample reads it
            if isinstance(document, dict) and document.get("format") == STATUS_FORMAT:
                documents.append(document)
        return documents

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            import psycopg

            assert self.dsn is not None
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
            # Every statement of this session runs in a read-only transaction: the server
            # refuses a write, whatever this code does.
            conn.execute("SET default_transaction_read_only = on")
            conn.execute("SET statement_timeout = 5000")
            self._conn = conn
        return self._conn

    def _read_postgres(self, snapshot: dict[str, Any]) -> list[dict[str, Any]]:
        from psycopg import sql

        conn = self._connection()
        ns = sql.Identifier(self.namespace)

        def exists(table: str) -> bool:
            row = conn.execute("SELECT to_regclass(%s)", (f"{self.namespace}.{table}",)).fetchone()
            return row is not None and row[0] is not None

        documents: list[dict[str, Any]] = []
        if exists(STATUS_TABLE):
            query = sql.SQL(
                "SELECT node, extract(epoch FROM published_at), status FROM {}.observer_status"
                " ORDER BY node"
            ).format(ns)
            for node, published, status in conn.execute(query):
                document = status if isinstance(status, dict) else json.loads(status)
                document.update(node=node, published_at=float(published))
                documents.append(document)
        leases = []
        if exists("leases"):
            query = sql.SQL(
                "SELECT coalesce(owner, ''), count(*), count(*) FILTER (WHERE expires_at > now()),"
                " coalesce(sum(progress), 0) FROM {}.leases GROUP BY 1 ORDER BY 1"
            ).format(ns)
            for owner, held, live, progress in conn.execute(query):
                leases.append(
                    {"owner": owner, "leases": held, "live": live, "progress": int(progress)}
                )
        snapshot["leases"] = leases
        if exists("conversations"):
            counts = sql.SQL("SELECT count(*), coalesce(sum(count), 0) FROM {}.conversations")
            conversations, messages = conn.execute(counts.format(ns)).fetchone()
            snapshot["database"] = {"conversations": conversations, "messages": int(messages)}
        return documents

    def sample(self) -> dict[str, Any]:
        """Read what the node (or every node) published, now."""
        now = time.time()
        extra: dict[str, Any] = {}
        if self.directory is not None:
            documents = self._read_files()
        else:
            try:
                documents = self._read_postgres(extra)
            except Exception as exc:
                self._close_connection()
                documents = []
                extra["error"] = f"cannot read PostgreSQL: {type(exc).__name__}: {exc}"[:300]
        snapshot = merge(documents, now)
        snapshot.update(extra)
        snapshot["taken_at"] = now
        snapshot["attached"] = {
            "source": self.source,
            "nodes": [_node_row(d, now) for d in documents],
            "hint": None
            if documents
            else f"nothing published yet: a node publishes {STATUS_FILE} (otpmem simulate "
            "does; an application calls otpmem.observe.publish)",
        }
        self._latest = snapshot
        return snapshot

    def latest(self) -> dict[str, Any]:
        """The newest snapshot (read now if there is none yet)."""
        latest = self._latest
        return latest if latest is not None else self.sample()

    def process(self, pid: int) -> dict[str, Any] | None:
        """A process as its node published it (its state and trace are the node's own)."""
        for row in self.latest()["processes"]:
            if row.get("pid") == f"<0.{pid}.0>":
                return {**row, "trace": [], "note": "attached: state and trace stay in the node"}
        return None

    def trace(self, pid: int, on: bool) -> bool:
        """Refused: an attached observer changes nothing in the node it watches."""
        return False

    # -- in the background -----------------------------------------------------------------

    def start(self, interval: float = 1.0) -> Attached:
        """Sample every ``interval`` s on a thread of the observer's own."""
        return super().start(interval)

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Stop reading."""
        self.stop_sampling(10.0)
        self._close_connection()

    def __enter__(self) -> Attached:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def attach(target: str | Path, *, namespace: str | None = None) -> Attached:
    """An observer of the node publishing into directory ``target``, or of every node of
    the PostgreSQL run at DSN ``target`` (schema ``namespace``, ``otpmem`` by default)."""
    return Attached(target, namespace)
