"""``otpmem observe --attach DIR-or-DSN``: the observer's page of a node in another process.

The node publishes its snapshot every second (``otpmem simulate`` into its run directory;
an application with ``otpmem.observe.publish``); this command only reads it.
"""

from __future__ import annotations

import contextlib
import json
import threading

import click

from .errors import CommandError, guarded
from .output import hint, line

ATTACH_HELP = (
    "The node to watch: its data directory (a LevelDB store's or an `otpmem simulate` run's), "
    "or a PostgreSQL DSN (every node of the run in --namespace).  [default: none: give one]"
)


@click.command(
    epilog="Read-only: files are only read, and the PostgreSQL session is read-only. The page "
    "answers this machine only (its Host header must name loopback or the bound address)."
)
@click.option(
    "--attach", "target", required=True, default=None, metavar="DIR|DSN", help=ATTACH_HELP
)
@click.option(
    "--namespace",
    default=None,
    metavar="SCHEMA",
    help="The run's schema, with a DSN.  [default: otpmem]",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    help="Serve the page on 127.0.0.1:PORT (0: a free port; its address is printed).",
)
@click.option("--host", default="127.0.0.1", help="The address to bind the page to.")
@click.option("--json", "as_json", is_flag=True, help="Print one snapshot as JSON and exit.")
@click.option("--live", is_flag=True, help="Draw the live view on stderr instead of a page.")
@guarded
def observe(
    target: str, namespace: str | None, port: int, host: str, as_json: bool, live: bool
) -> int:
    """Watch a running node from another process: its tree, processes, stores and agents.

    \b
    otpmem observe --attach run
    otpmem observe --attach run --json
    otpmem observe --attach postgresql://localhost/otpmem --namespace otpmem_sim
    """
    from ..observe import AttachError, attach, serve

    try:
        attached = attach(target, namespace=namespace)
    except AttachError as exc:
        raise CommandError(str(exc)) from None
    if as_json:
        with attached:
            line(json.dumps(attached.sample(), default=str, indent=2))
        return 0
    stop = threading.Event()
    if live:
        from ..observe.terminal import watch

        with contextlib.suppress(KeyboardInterrupt):
            watch(attached, stop)  # type: ignore[arg-type]
        return 0
    with serve(port, host, observer=attached, interval=1.0) as page:
        hint(f"observer of {attached.source}: {page.url} (read-only; Ctrl-C ends it)")
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0
