"""``otpmem simulate``: supervised agents under chaos, audited for loss; resumable, and
replayable (``--replay``: another run's parameters and fault schedule, in a new run)."""

from __future__ import annotations

import json
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..simulate import PARAMS, ModelFailed, RunParams, Simulation, SimulationReport, replayable
from . import nodes_options
from .errors import EXIT_FAILED, EXIT_INTERRUPTED, CommandError, guarded
from .output import hint, line, screen, stdout_is_terminal
from .progress import make_progress
from .run_flags import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL_NAME,
    RUN_FLAGS,
    model_info,
    replayed_flags,
    resumed_flags,
)


@contextmanager
def stopping_on_ctrl_c(simulation: Simulation) -> Iterator[None]:
    """The first Ctrl-C ends the run after the turns in flight (then it is audited and can
    be resumed); a second one quits at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def first(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        hint("stopping after the turns in flight (Ctrl-C again to quit at once)")
        simulation.stop()

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def print_report(report: SimulationReport, as_json: bool) -> None:
    """The report on stdout: text (the verdict in colour on a terminal) or JSON."""
    if as_json:
        line(json.dumps(report.as_dict(), indent=2))
        return
    for text in report.lines():
        line(text)
    for text in report.verdict():
        if stdout_is_terminal():
            style = "bold green" if report.ok else "bold red"
            screen().print(text, style=style if not text.startswith(" ") else None, markup=False)
        else:
            line(text)


@click.command()
@click.option(
    "--agents",
    type=click.IntRange(min=1),
    default=20,
    help="Agents, each holding one conversation; they take turns at once.",
)
@click.option("--turns", type=click.IntRange(min=1), default=10, help="Turns per agent.")
@click.option(
    "--data",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="The run's directory (its store, ledger.jsonl and run.json): new or empty, or with "
    "--resume an earlier run's.  [default: a new temporary directory, printed at the start]",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the run in --data (after a crash, kill -9 or Ctrl-C) with the parameters "
    "it was started with, then audit both parts.",
)
@click.option(
    "--replay",
    "replay_dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="RUN",
    help="Run the run in directory RUN again, as a new run in --data (or a new temporary "
    "directory): its parameters and the fault schedule its run.json recorded, so the same "
    "faults at the same turns give the same restarts and audit, at any --workers. LevelDB "
    "runs only.  [default: none]",
)
@click.option(
    "--chaos",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    help="Probability of a fault after each turn: a store kill or crash, an agent kill, or a "
    "crash-on-message plan.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    help="Seed of the chaos: each turn's fault is drawn from it and the turn's agent and "
    "number, so a seed gives the same faults at any --workers.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=8,
    help="Threads driving turns (in each node, with --nodes).",
)
@nodes_options.options
@click.option(
    "--model",
    type=click.Choice(["scripted", "openai"]),
    default="scripted",
    help="scripted: a deterministic offline model; openai: the OpenAI-compatible server at "
    "--base-url.",
)
@click.option(
    "--base-url",
    default=DEFAULT_BASE_URL,
    metavar="URL",
    help="The OpenAI-compatible server, for --model openai.",
)
@click.option(
    "--model-name",
    default=DEFAULT_MODEL_NAME,
    metavar="NAME",
    help="The model to ask, for --model openai.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON; no progress.")
@click.option("--no-progress", is_flag=True, help="No progress bar (or lines) on stderr.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="Also write an HTML report to FILE: plots over time and the audit, one file that "
    "opens without a network (needs plotly: pip install 'otpmem[report]').  [default: none]",
)
@click.option(
    "--kill-self-after",
    type=click.IntRange(min=1),
    default=None,
    metavar="TURNS",
    help="SIGKILL this process after TURNS acknowledged turns: a crash drill, then --resume."
    "  [default: never]",
)
@click.option(
    "--budget-tokens",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="A TokenBudget per conversation: an agent whose conversation has spent N tokens is "
    "refused its next model call, and stops.  [default: no budget]",
)
@click.option(
    "--observe",
    "observe_port",
    type=click.IntRange(0, 65535),
    is_flag=False,
    flag_value=0,
    default=None,
    metavar="[PORT]",
    help="Serve the observer's live page of the run on 127.0.0.1:PORT (a free port if none "
    "is given; its address is printed).  [default: off]",
)
@click.option("--live", is_flag=True, help="Draw the observer's live view on stderr (Rich).")
@guarded
def simulate(
    agents: int,
    turns: int,
    data: Path | None,
    resume: bool,
    replay_dir: Path | None,
    chaos: float,
    seed: int,
    workers: int,
    model: str,
    base_url: str,
    model_name: str,
    as_json: bool,
    no_progress: bool,
    report_path: Path | None,
    kill_self_after: int | None,
    budget_tokens: int | None,
    observe_port: int | None,
    live: bool,
    store: str,
    nodes: int,
    cluster: str,
    lease_seconds: float,
) -> int:
    """Run supervised agents under chaos, then audit every acknowledged message.

    Each acknowledged turn goes to a ledger the store never sees; the audit reads every
    conversation back from the store against it. Exit status: 0 when nothing was lost and
    every turn was done, 1 otherwise, 2 for a usage or environment error, 130 after Ctrl-C.

    \b
    otpmem simulate --agents 20 --turns 10 --chaos 0.05 --data run
    otpmem simulate --data run --resume
    otpmem simulate --replay run --workers 1 --data run-again
    otpmem simulate --store postgres --nodes 2 --chaos 0.1 --data run2
    """
    ctx = click.get_current_context()
    given = {n for n in RUN_FLAGS if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE}
    if resume and data is None:
        raise CommandError("--resume needs --data DIR: the directory of the run to continue")
    if data is not None and data.exists() and not data.is_dir():
        raise CommandError(f"--data {data} is a file; a run needs a directory of its own")
    replayed = _replayed(replay_dir, data, resume)
    if report_path is not None:
        from .html_report import check_available

        check_available()
        if not report_path.parent.is_dir():
            raise CommandError(f"--report {report_path}: {report_path.parent} is not a directory")
    flags: dict[str, Any] = {
        "agents": agents,
        "turns": turns,
        "chaos": chaos,
        "seed": seed,
        "model": model,
        "base_url": base_url,
        "model_name": model_name,
        "store": store,
        "nodes": nodes,
    }
    if resume:
        assert data is not None
        flags = resumed_flags(data, flags, given)
    if replayed is not None:
        assert replay_dir is not None
        flags = replayed_flags(replay_dir, replayed, flags, given)
    nodes_options.check(flags["store"], flags["nodes"], cluster)
    nodes_options.check_in_process(
        flags["store"], budget=budget_tokens, observe=observe_port is not None or live
    )
    client = None
    if flags["model"] == "openai":
        from ..simulate import openai_model
        from .model import probe

        probe(flags["base_url"], hint)  # before anything is created: a dead URL stores nothing
        client = openai_model(flags["base_url"], flags["model_name"], hint)
    if data is None:
        data = Path(tempfile.mkdtemp(prefix="otpmem-sim-"))
        hint(f"running in a new temporary directory: {data}")
    from ..observe import observing  # here: the other commands never load the observer

    progress = make_progress(not no_progress and not as_json and not live, time.monotonic())
    common: dict[str, Any] = {
        "agents": flags["agents"],
        "turns": flags["turns"],
        "data_dir": data,
        "chaos": flags["chaos"],
        "seed": flags["seed"],
        "model": client,
        "resume": resume,
        "workers": workers,
        "kill_self_after": kill_self_after,
        "progress": progress.advance,
        "on_started": progress.start,
        "on_retry": hint,
        "model_info": model_info(flags),
        "budget_tokens": budget_tokens,
    }
    simulation: Simulation
    if nodes_options.kind_of(flags["store"]) == nodes_options.POSTGRES:
        from ..simulate import ClusterSimulation

        stored = RunParams.load(data) if resume else None
        simulation = ClusterSimulation(
            **common,
            nodes=flags["nodes"],
            dsn=nodes_options.dsn_of(flags["store"]),
            namespace=stored.store.get("namespace") if stored is not None else None,
            cluster=cluster,
            lease_ttl=lease_seconds,
        )
    elif replayed is not None and replay_dir is not None:
        replay_of = str(replay_dir.resolve())
        simulation = Simulation(**common, schedule=replayed.schedule, replay_of=replay_of)
    else:
        simulation = Simulation(**common)
    # A run on one node publishes its status for `otpmem observe --attach DATA`, once its
    # directory holds the run (a new run's directory must be empty when it starts).
    publish_to = None if nodes_options.kind_of(flags["store"]) == nodes_options.POSTGRES else data
    run_dir = data
    watched = observing(
        observe_port, live, hint, publish_to, ready=lambda: (run_dir / PARAMS).is_file()
    )
    try:
        with watched as callbacks, stopping_on_ctrl_c(simulation):
            simulation.callbacks = callbacks  # the agents' turns feed the observer's figures
            report = simulation.run()
    except ModelFailed as exc:
        what = "refused a turn" if not exc.error.retryable else "cannot be reached"
        raise CommandError(
            f"the model at {flags['base_url']} (--base-url) {what}: {exc.error}; "
            f"once it answers, continue with: otpmem simulate --data {data} --resume"
        ) from None
    except KeyboardInterrupt:
        hint(f"interrupted; continue with: otpmem simulate --data {data} --resume")
        return EXIT_INTERRUPTED
    finally:
        progress.close()
        if client is not None:
            client.close()
    print_report(report, as_json)
    if report_path is not None:
        from .html_report import write_report

        write_report(report_path, report, simulation.timeline.buckets(end=report.seconds))
        hint(f"report written to {report_path}")
    if report.ok:
        return 0
    return EXIT_INTERRUPTED if report.interrupted and not report.lost else EXIT_FAILED


def _replayed(replay_dir: Path | None, data: Path | None, resume: bool) -> RunParams | None:
    """The run ``--replay`` names (its parameters and schedule), once it can be replayed."""
    if replay_dir is None:
        return None
    if resume:
        raise CommandError(
            "--replay runs another run again as a new run; --resume continues the run in "
            "--data: give one of them"
        )
    replayed = replayable(replay_dir)
    if data is not None and data.exists() and data.resolve() == replay_dir.resolve():
        raise CommandError(
            f"--data {data} is the run --replay runs again; a replay is a new run: give "
            "--data a new or empty directory, or leave it out for a temporary one"
        )
    return replayed


__all__ = ["resumed_flags", "simulate", "stopping_on_ctrl_c"]
