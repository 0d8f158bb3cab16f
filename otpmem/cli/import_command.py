"""``otpmem import``: append an export document to a store, all or nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..actors import NoProcess, ServerExited
from ..stores import parse_import
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
@guarded
def import_(file: Path, dsn: str | None, namespace: str | None, data: Path | None = None) -> int:
    """Append an export document's conversations to a store, all or nothing.

    The whole document is checked before anything is written: one bad message and nothing
    is stored. DATA may be an existing store, an empty directory or a new one (created,
    and removed again if the import fails); a directory holding anything else is refused.
    With --dsn, the schema --namespace names is created if the server does not hold it.
    Each conversation of the document is stored once, however often it is imported.
    """
    document = read_document(file)
    parsed = parse_import(document)  # every fault found before a directory is made
    with writing(data, dsn, namespace) as store:
        try:
            count = store.import_(document)
        except (ServerExited, NoProcess) as exc:
            # A store that cannot read its own keys crashes on them: that is damage.
            if data is None:
                raise CommandError(f"the store on {where(dsn or '', namespace)} stopped") from exc
            raise store_files.corrupt(data, store_files.error_text(_reason(exc))) from None
    into = data if dsn is None else where(dsn, namespace)
    line(
        f"imported {plural(count, 'message')} in {plural(len(parsed), 'conversation')} into {into}"
    )
    return 0


def _reason(exc: BaseException) -> BaseException:
    reason = getattr(exc, "reason", None)
    return reason if isinstance(reason, BaseException) else exc


__all__ = ["import_", "read_document"]
