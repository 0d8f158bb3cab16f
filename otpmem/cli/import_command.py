"""``otpmem import``: append an export document to a store, all or nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..actors import NoProcess, ServerExited
from ..simulate import LEDGER, PARAMS
from ..stores import import_key, parse_import
from ..stores.leveldb import files as store_files
from .errors import CommandError, existing_file, guarded
from .output import line, plural
from .params import StoreCommand, data_argument, dsn_options
from .store_access import where, writing


def read_document(source: Path) -> Any:
    """The JSON document in ``source`` (``-``: stdin)."""
    name = "stdin" if str(source) == "-" else str(source)
    try:
        if str(source) == "-":
            text = sys.stdin.read()
        else:
            text = existing_file(source, "export file").read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(
            f"{name} is not JSON: it is not even UTF-8 text ({exc.reason})"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{name} is not JSON: {exc}") from None


@click.command(cls=StoreCommand)
@data_argument()
@click.argument(
    "file",
    type=click.Path(path_type=Path, allow_dash=True),
    help="The export document (from `otpmem export`); - reads it from stdin.",
)
@dsn_options()
@click.option(
    "--into-run",
    is_flag=True,
    help="Import into a run of `otpmem simulate` anyway: its next audit then counts the "
    "imported messages of its conversations as DUPLICATED (in no acknowledged turn).",
)
@guarded
def import_(
    file: Path,
    dsn: str | None,
    namespace: str | None,
    into_run: bool = False,
    data: Path | None = None,
) -> int:
    """Append an export document's conversations to a store, all or nothing.

    The whole document is checked before anything is written: one bad message and nothing
    is stored. DATA may be an existing store, an empty directory or a new one (created,
    and removed again if the import fails); a directory holding anything else is refused.
    With --dsn, the schema --namespace names is created if the server does not hold it.
    Each conversation of the document is stored once, however often it is imported: the
    line says how many messages were stored and how many skipped, being there already.
    A run of `otpmem simulate` is refused (its audit would fail), unless --into-run.
    """
    document = read_document(file)
    parsed = parse_import(document)  # every fault found before a directory is made
    if data is not None and not into_run:
        _refuse_a_run(data)
    with writing(data, dsn, namespace) as store:
        try:
            # Read before the import: a key already there is a conversation it skips.
            there = [
                bool(batch) and store.key_position(conv, import_key(batch)) is not None
                for conv, batch in parsed
            ]
            store.import_(document)
        except (ServerExited, NoProcess) as exc:
            # A store that cannot read its own keys crashes on them: that is damage.
            if data is None:
                raise CommandError(f"the store on {where(dsn or '', namespace)} stopped") from exc
            raise store_files.corrupt(data, store_files.error_text(_reason(exc))) from None
    skipped = sum(len(batch) for (_, batch), held in zip(parsed, there, strict=True) if held)
    stored = sum(len(batch) for _, batch in parsed) - skipped
    into = data if dsn is None else where(dsn, namespace)
    line(
        f"stored {plural(stored, 'message')}, skipped {skipped} already there, "
        f"from {plural(len(parsed), 'conversation')} into {into}"
    )
    return 0


def _refuse_a_run(data: Path) -> None:
    """A simulation's run directory takes no import: its audit counts every stored message
    against its ledger, so an imported one fails it DUPLICATED."""
    if not data.is_dir():
        return
    if (data / PARAMS).is_file() or any(p.is_file() for p in data.glob("ledger*.jsonl")):
        raise CommandError(
            f"{data} is a run of otpmem simulate ({LEDGER}, {PARAMS}): an import would make "
            "its next audit fail DUPLICATED; import into another store, or pass --into-run"
        )


def _reason(exc: BaseException) -> BaseException:
    reason = getattr(exc, "reason", None)
    return reason if isinstance(reason, BaseException) else exc


__all__ = ["import_", "read_document"]
