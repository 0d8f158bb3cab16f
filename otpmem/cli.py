"""The ``otpmem`` command: simulate under chaos, and read what a store holds.

::

    otpmem simulate --agents 20 --turns 10 --data run --chaos 0.05 --seed 1
    otpmem simulate --data run --resume
    otpmem inspect run [--user U] [CONV]
    otpmem export run (--user U | --all | CONV) [-o FILE]
    otpmem import run FILE
    otpmem search run QUERY [--user U] [--conv CONV]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import version
from .messages import Conv, InvalidMessage
from .stores import LevelDBStore, LevelDBStoreHandle, StoreError

EXIT_LOST = 1
EXIT_USAGE = 2


class CommandError(Exception):
    """A command cannot run; its message is printed as is."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except (
        CommandError,
        StoreError,
        InvalidMessage,
        ValueError,
        FileNotFoundError,
        FileExistsError,
    ) as exc:
        print(f"otpmem {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"otpmem {args.command}: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otpmem", description="Supervised conversation memory for LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"otpmem {version}")
    commands = parser.add_subparsers(dest="command", required=True)

    sim = commands.add_parser("simulate", help="run agents under chaos and audit for loss")
    sim.add_argument("--agents", type=int, default=20, help="agents (default 20)")
    sim.add_argument("--turns", type=int, default=10, help="turns per agent (default 10)")
    sim.add_argument("--data", type=Path, required=True, help="the run's directory")
    sim.add_argument(
        "--chaos",
        type=float,
        default=0.0,
        help="probability of a fault after each turn, 0..1 (default 0)",
    )
    sim.add_argument("--seed", type=int, default=0, help="seed of the chaos (default 0)")
    sim.add_argument("--resume", action="store_true", help="continue an earlier run in --data")
    sim.add_argument("--workers", type=int, default=8, help="driver threads (default 8)")
    sim.add_argument("--model", choices=("scripted", "openai"), default="scripted")
    sim.add_argument(
        "--base-url",
        default="http://localhost:8000/v1",
        help="OpenAI-compatible server for --model openai",
    )
    sim.add_argument("--model-name", default="gpt-4o-mini", help="model for --model openai")
    sim.add_argument("--json", action="store_true", help="print the report as JSON")
    sim.add_argument("--no-progress", action="store_true", help="no progress bar")
    sim.add_argument(
        "--kill-self-after",
        type=int,
        default=None,
        metavar="TURNS",
        help="SIGKILL this process after TURNS acknowledged turns (crash drills)",
    )
    sim.set_defaults(run=_simulate)

    inspect = commands.add_parser("inspect", help="list conversations, or show one")
    inspect.add_argument("data", type=Path)
    inspect.add_argument("conversation", nargs="?")
    inspect.add_argument("--user", default=None)
    inspect.add_argument("--last", type=int, default=None, help="only the newest N messages")
    inspect.set_defaults(run=_inspect)

    export = commands.add_parser("export", help="export conversations as JSON")
    export.add_argument("data", type=Path)
    export.add_argument("conversation", nargs="?")
    export.add_argument("--user", default=None)
    export.add_argument("--all", action="store_true", help="every conversation of every user")
    export.add_argument("-o", "--output", type=Path, default=None)
    export.set_defaults(run=_export)

    imp = commands.add_parser("import", help="import an export file (all or nothing)")
    imp.add_argument("data", type=Path)
    imp.add_argument("file", type=Path)
    imp.set_defaults(run=_import)

    search = commands.add_parser("search", help="search one tenant's messages")
    search.add_argument("data", type=Path)
    search.add_argument("query")
    search.add_argument("--user", default=None)
    search.add_argument("--conv", default=None)
    search.add_argument("--limit", type=int, default=20)
    search.set_defaults(run=_search)
    return parser


@contextmanager
def _open_store(data: Path, create: bool = False) -> Iterator[LevelDBStoreHandle]:
    if not create and not data.exists():
        raise CommandError(f"{data} does not exist")
    store = LevelDBStore.start_link(data, create=create, lock_timeout=1.0)
    try:
        yield store
    finally:
        store.stop()


def _conv(conversation: str | None, user: str | None) -> Conv | None:
    return None if conversation is None else Conv(user, conversation)


def _simulate(args: argparse.Namespace) -> int:
    from .llm import OpenAIClient
    from .simulate import Simulation

    model = None
    if args.model == "openai":
        model = OpenAIClient(args.model_name, base_url=args.base_url)
    simulation = Simulation(
        agents=args.agents,
        turns=args.turns,
        data_dir=args.data,
        chaos=args.chaos,
        seed=args.seed,
        model=model,
        resume=args.resume,
        workers=args.workers,
        kill_self_after=args.kill_self_after,
    )
    bar: Any = None
    if not args.no_progress and not args.json:
        from tqdm import tqdm

        from .simulate import LEDGER, Ledger

        earlier = {(e["conversation"], e["turn"]) for e in Ledger.load(args.data / LEDGER)}
        bar = tqdm(
            total=args.agents * args.turns,
            initial=len(earlier) if args.resume else 0,
            unit="turn",
            desc="simulating",
            file=sys.stderr,
        )
        simulation.progress = bar.update
    try:
        report = simulation.run()
    finally:
        if bar is not None:
            bar.close()
        if model is not None:
            model.close()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print("\n".join(report.lines()))
        if report.ok:
            print("OK: every acknowledged message is in the store, once")
        elif report.lost:
            print("LOST: acknowledged messages are missing from the store")
        elif report.duplicated and report.complete:
            print("DUPLICATED: the store holds messages no acknowledged turn accounts for")
        else:
            print("INCOMPLETE: the run did not finish every turn (see the errors above)")
    return 0 if report.ok else EXIT_LOST


def _inspect(args: argparse.Namespace) -> int:
    with _open_store(args.data) as store:
        conv = _conv(args.conversation, args.user)
        if conv is None:
            convs = store.conversations(args.user)
            for item in convs:
                print(
                    f"{item.user_id or '-'}\t{item.conversation_id}\t{store.count(item)} messages"
                )
            print(f"{len(convs)} conversation(s)")
            return 0
        messages = store.get(conv, last=args.last)
        if not messages and store.count(conv) == 0:
            raise CommandError(
                f"no conversation {conv.conversation_id!r} for user {conv.user_id!r}"
            )
        for message in messages:
            print(json.dumps(message, ensure_ascii=False))
    return 0


def _export(args: argparse.Namespace) -> int:
    conv = _conv(args.conversation, args.user)
    with _open_store(args.data) as store:
        try:
            document = store.export(conv, user_id=None if conv else args.user, all_users=args.all)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    text = json.dumps(document, ensure_ascii=False, indent=1)
    if args.output is None:
        print(text)
    else:
        args.output.write_text(text + "\n", encoding="utf-8")
    return 0


def _import(args: argparse.Namespace) -> int:
    if not args.file.exists():
        raise CommandError(f"{args.file} does not exist")
    try:
        document = json.loads(args.file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CommandError(f"{args.file} is not JSON: {exc}") from None
    with _open_store(args.data, create=True) as store:
        count = store.import_(document)
    print(
        f"imported {count} message(s) in {len(document.get('conversations', []))} conversation(s)"
    )
    return 0


def _search(args: argparse.Namespace) -> int:
    with _open_store(args.data) as store:
        conv = _conv(args.conv, args.user)
        if conv is not None and conv not in store.conversations(args.user):
            raise CommandError(
                f"no conversation {conv.conversation_id!r} for user {conv.user_id!r}"
            )
        try:
            hits = store.search(
                args.query, user_id=args.user, conv=_conv(args.conv, args.user), limit=args.limit
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    for hit in hits:
        text = json.dumps(hit.message.get("content"), ensure_ascii=False)
        where = f"{hit.conv.user_id or '-'}\t{hit.conv.conversation_id}\t#{hit.index}"
        print(f"{hit.score}\t{where}\t{text}")
    print(f"{len(hits)} hit(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
