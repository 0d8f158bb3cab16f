"""``otpmem simulate``'s store and nodes: ``--store leveldb|postgres[=DSN]``, ``--nodes K``,
``--cluster local|ray``, ``--lease-seconds``; what run.json keeps of them, and the checks
that turn a combination that cannot work into one line and exit status 2."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..simulate import RunParams
from .errors import CommandError

F = TypeVar("F", bound=Callable[..., Any])
LEVELDB = "leveldb"
POSTGRES = "postgres"


class StoreParam(click.ParamType[str, Any]):
    """``leveldb``, ``postgres`` (embedded, under --data) or ``postgres=DSN``."""

    name = "STORE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """The value as given, once it names a store."""
        text = str(value)
        kind, sep, dsn = text.partition("=")
        if kind == POSTGRES and dsn:
            try:
                from ..stores.postgres import check_dsn
            except ImportError:  # no psycopg: the run says which extra to install
                return text
            try:
                check_dsn(dsn)
            except ValueError as exc:
                self.fail(f"{exc}", param, ctx)
            return text
        if text == LEVELDB or (kind == POSTGRES and not sep):
            return text
        self.fail(
            f"{text!r}: choose leveldb, postgres (an embedded PostgreSQL under --data) or "
            "postgres=DSN (your server, e.g. postgresql://user@host/db)",
            param,
            ctx,
        )


def options(function: F) -> F:
    """The four options, in the order --help shows them."""
    function = click.option(
        "--lease-seconds",
        type=click.FloatRange(0.2, 3600.0),
        default=2.0,
        help="With --nodes: how long a node's leases last unrenewed, so how long a killed "
        "node's conversations wait before another node takes them over.",
    )(function)
    function = click.option(
        "--cluster",
        type=click.Choice(["local", "ray"]),
        default="local",
        help="Where the nodes run: local subprocesses, or Ray actor processes (a local Ray, "
        "or the cluster RAY_ADDRESS names; needs pip install 'otpmem[cluster]').",
    )(function)
    function = click.option(
        "--nodes",
        type=click.IntRange(1, 64),
        default=1,
        help="OS processes, each an otpmem node with its own tree and a share of the "
        "agents, on one PostgreSQL (needs --store postgres); --chaos also SIGKILLs nodes.",
    )(function)
    function = click.option(
        "--store",
        type=StoreParam(),
        default=LEVELDB,
        help="leveldb (under --data, one process); postgres: an embedded PostgreSQL under "
        "--data; postgres=DSN: your server (the run gets a schema of its own).",
    )(function)
    return function


def kind_of(store: str) -> str:
    """``leveldb`` or ``postgres``."""
    return store.partition("=")[0]


def store_flag(params: RunParams) -> str:
    """The --store a run was started with, as run.json keeps it (a DSN without password)."""
    if params.store.get("kind", LEVELDB) != POSTGRES:
        return LEVELDB
    dsn = params.store.get("dsn", "")
    return f"{POSTGRES}={dsn}" if dsn else POSTGRES


def same_store(given: str, kept: str) -> bool:
    """Whether --store ``given`` names the store run.json keeps as ``kept``."""
    from ..stores.postgres import redact

    return given == kept or redact(given) == kept


def resumed_store(given: str | None, kept: str) -> str:
    """The --store of a resumed run: the one given if it is the run's (with the password
    run.json does not keep), else the kept one, which must then be whole."""
    if given is not None:
        return given
    if "***" in kept:
        if libpq_has_password():
            from ..stores.postgres import unredacted

            return unredacted(kept)  # as the store commands read it
        raise CommandError(
            f"this run's store is {kept}; run.json keeps its DSN without the password: "
            "pass --store postgres=DSN again, with the password, or set PGPASSWORD (or "
            "PGPASSFILE, ~/.pgpass)"
        )
    return kept


def libpq_has_password() -> bool:
    """Whether libpq has somewhere to take a password from: PGPASSWORD or a password file."""
    if os.environ.get("PGPASSWORD"):
        return True
    passfile = os.environ.get("PGPASSFILE") or str(Path.home() / ".pgpass")
    return Path(passfile).is_file()


def check(store: str, nodes: int, cluster: str) -> None:
    """A combination that cannot work is a usage error, before anything is created."""
    if kind_of(store) != POSTGRES:
        if nodes > 1:
            raise CommandError(
                f"--nodes {nodes} needs --store postgres (or postgres=DSN): a LevelDB store "
                "has one opener, so nodes cannot share it"
            )
        if cluster != "local":
            raise CommandError(f"--cluster {cluster} places nodes: it needs --store postgres")
        return
    for module in ("psycopg", "psycopg_pool") + (() if "=" in store else ("pgserver",)):
        if importlib.util.find_spec(module) is None:
            raise CommandError(
                f"--store {kind_of(store)} needs {module}: pip install 'otpmem[postgres]'"
            )
    if cluster == "ray" and importlib.util.find_spec("ray") is None:
        raise CommandError("--cluster ray needs Ray: pip install 'otpmem[cluster]'")


def check_in_process(store: str, *, budget: int | None, observe: bool) -> None:
    """What works only where the agents run in this process: not with --store postgres,
    whose agents run in node processes (not built for them yet: said, not ignored)."""
    if kind_of(store) != POSTGRES:
        return
    for given, flag in ((budget is not None, "--budget-tokens"), (observe, "--observe/--live")):
        if given:
            raise CommandError(
                f"{flag} watches the agents of this process; with --store postgres they run "
                "in node processes, where it is not built yet: drop one of them"
            )


def dsn_of(store: str) -> str | None:
    """The DSN of ``postgres=DSN``; None for the embedded server."""
    return store.partition("=")[2] or None


__all__ = [
    "StoreParam",
    "check",
    "check_in_process",
    "dsn_of",
    "kind_of",
    "options",
    "resumed_store",
    "same_store",
    "store_flag",
]
