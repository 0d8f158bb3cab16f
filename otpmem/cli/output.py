"""Where the command writes, and how: data on stdout, plain enough for pipes (JSON lines,
tab-separated rows); people's things (tables, errors, progress) drawn by Rich when a
terminal is there to see them, and plain text otherwise (Rich strips its styles).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"


@functools.cache
def errors() -> Console:
    """The console on stderr: errors, hints and progress."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


@functools.cache
def screen() -> Console:
    """The console on stdout, for tables when stdout is a terminal."""
    return Console(highlight=False, soft_wrap=True)


def stdout_is_terminal() -> bool:
    """True when a person reads stdout (not a pipe or a file)."""
    return sys.stdout.isatty()


def line(text: str = "") -> None:
    """Write one line of data on stdout, as is."""
    sys.stdout.write(text + "\n")


def hint(text: str) -> None:
    """A hint for the person at the keyboard, on stderr (never mixed into the data)."""
    errors().print(text, markup=False, soft_wrap=True, style="dim")


def rows(headers: Sequence[str], body: Sequence[Sequence[str]]) -> None:
    """A table: drawn on a terminal, tab-separated values (no header) in a pipe."""
    if not stdout_is_terminal():
        for row in body:
            line("\t".join(row))
        return
    from rich.table import Table

    table = Table(*headers, box=None, header_style="bold", pad_edge=False)
    for row in body:
        table.add_row(*row)
    screen().print(table)


def write_text(target: Path | None, text: str) -> None:
    """Write ``text`` to stdout (``None`` or ``-``) or to a file, whole or not at all."""
    if target is None or str(target) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if target.is_dir():
        raise IsADirectoryError(0, "is a directory", os.fspath(target))
    # Through a temporary file beside it: a failure half-way leaves no half a file.
    fd, partial = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(partial, 0o666 & ~_umask())  # mkstemp's 0600 is not what `>` would give
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


__all__ = [
    "errors",
    "hint",
    "line",
    "plural",
    "rows",
    "screen",
    "stdout_is_terminal",
    "write_text",
]
