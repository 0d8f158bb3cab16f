"""The observer in a terminal: the same snapshot as the web page, drawn with Rich.

from otpmem.observe import Observer
from otpmem.observe.terminal import render, watch

console.print(render(Observer().sample()))      # once
watch(observer, stop_event)                     # live, until stop_event is set
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ._source import Observer


def _node_text(node: dict[str, Any]) -> Text:
    text = Text(str(node["label"]), style="bold")
    text.append(f"  {node.get('type') or ''}  {node.get('pid') or 'not running'}", style="dim")
    status = node.get("status", "")
    text.append(f"  {status}", style="green" if status == "running" else "red")
    if "state" in node:
        text.append(f"  {node['state']}, mailbox {node.get('mailbox', 0)}", style="dim")
    if node["kind"] == "supervisor" and "strategy" in node:
        text.append(
            f"  {node['strategy']}, intensity {node['restarts_in_period']}/{node['intensity']}"
            f" in {node['period']} s",
            style="cyan",
        )
    restarts = node.get("restarts", 0)
    text.append(f"  restarts {restarts}", style="bold yellow" if restarts else "dim")
    return text


def _branch(parent: Tree, node: dict[str, Any]) -> None:
    branch = parent.add(_node_text(node))
    for child in node.get("children", ()):
        _branch(branch, child)
    if node.get("more_children"):
        branch.add(Text(f"... and {node['more_children']} more", style="dim"))


def _table(title: str, head: list[str], rows: list[list[Any]]) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    for column in head:
        table.add_column(column)
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    return table


def render(snapshot: dict[str, Any]) -> RenderableType:
    """The snapshot as one Rich renderable: the tree, agents, stores, events, processes."""
    node = snapshot["node"]
    tree = Tree(
        Text(
            f"otpmem node: {node['processes']} processes, {node['schedulers']} schedulers, "
            f"{snapshot['restarts_total']} restarts seen, up {snapshot['uptime_s']} s",
            style="bold",
        )
    )
    for root in snapshot["tree"]:
        _branch(tree, root)
    agents = snapshot["agents"]
    parts: list[RenderableType] = [
        tree,
        _table(
            "Agents",
            ["running", "turns", "turns/s", "p50 ms", "p99 ms", "errors"],
            [
                [
                    agents["running"],
                    agents["turns"],
                    agents["turns_per_s"],
                    agents["p50_ms"],
                    agents["p99_ms"],
                    agents["errors"],
                ]
            ],
        ),
        _table(
            "Stores",
            ["store", "type", "conversations", "messages", "writes/s", "fsyncs", "writes/fsync"],
            [
                [
                    s["name"],
                    s["type"],
                    s.get("conversations"),
                    s.get("messages"),
                    s.get("writes_per_s"),
                    s.get("fsyncs"),
                    s.get("writes_per_fsync"),
                ]
                for s in snapshot["stores"]
            ],
        ),
        _table(
            "Recent supervisor events",
            ["supervisor", "event", "child", "reason"],
            [[e["supervisor"], e["kind"], e["child"], e["reason"]] for e in snapshot["events"][:8]],
        ),
        _table(
            "Busiest processes",
            ["pid", "name", "type", "state", "mailbox"],
            [
                [p["pid"], p["name"], p["type"], p["state"], p["mailbox"]]
                for p in snapshot["processes"][:8]
            ],
        ),
    ]
    return Group(*parts)


LOG_WIDTH = 200
"""Columns of a frame written to a file or a pipe (no terminal to fit: cut at nothing)."""


def watch(
    observer: Observer,
    stop: threading.Event,
    console: Console | None = None,
    interval: float = 0.5,
    log_interval: float = 5.0,
) -> None:
    """Redraw the observer's newest snapshot every ``interval`` s until ``stop`` is set.

    The last frame stays as drawn: by the time ``stop`` is set, what was watched may be
    gone, and the view ends on the node as it last ran. Without a terminal (a log, a
    pipe) nothing can be redrawn: a whole frame is written every ``log_interval`` s, each
    after a line that dates it, and the last one when ``stop`` is set.
    """
    console = console or _stderr_console()
    try:
        if not console.is_terminal:
            _log_frames(observer, stop, console, interval, log_interval)
            return
        with Live(render(observer.sample()), console=console, auto_refresh=False) as live:
            while not stop.wait(interval):
                live.update(render(observer.sample()), refresh=True)
    finally:
        observer.close()


def _log_frames(
    observer: Observer,
    stop: threading.Event,
    console: Console,
    interval: float,
    log_interval: float,
) -> None:
    # Sampled as often as on a terminal, printed every log_interval: the last frame is the
    # node's last sample before the stop, not the empty one after it.
    snapshot = observer.sample()
    printed: dict[str, Any] | None = None
    last = -math.inf
    while True:
        if time.monotonic() - last >= log_interval:
            _print_frame(console, snapshot)
            printed, last = snapshot, time.monotonic()
        if stop.wait(interval):
            break
        snapshot = observer.sample()
    if snapshot is not printed:
        _print_frame(console, snapshot)


def _print_frame(console: Console, snapshot: dict[str, Any]) -> None:
    console.print(Text(f"-- otpmem observer, up {snapshot['uptime_s']} s --"))
    console.print(render(snapshot))


def _stderr_console() -> Console:
    console = Console(stderr=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=True, width=LOG_WIDTH)
    return console
