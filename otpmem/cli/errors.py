"""What the command says when it cannot do what was asked: one line, ``otpmem CMD: why``,
and an exit status a script can test. Never a Python traceback for a situation the user
is in (a bad path, a locked or damaged store, a model that is down, a closed pipe).

Exit statuses: 0 done; 1 the run failed (loss, turns not done); 2 a usage or environment
error (bad arguments, files, stores or servers); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..messages import InvalidMessage
from ..stores import StoreError
from .output import errors

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])


class CommandError(Exception):
    """The command cannot run; its message is printed as is, with ``status``."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def say(prog: str, message: str) -> None:
    """Print ``prog: message`` on stderr (bold on a terminal)."""
    errors().print(f"[bold]{_escape(prog)}:[/bold] {_escape(message)}", soft_wrap=True)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def os_error_text(exc: OSError) -> str:
    """``PATH: Permission denied``, not ``[Errno 13] Permission denied: 'PATH'``."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, IsADirectoryError):
        reason = "is a directory, not a file"
    elif isinstance(exc, NotADirectoryError):
        reason = "a part of the path is a file, not a directory"
    name = exc.filename
    return f"{os.fsdecode(name)}: {reason}" if name is not None else reason


def describe(exc: BaseException) -> tuple[str, int] | None:
    """The message and status for an error the user can act on; None for a bug."""
    from ..simulate import ModelFailed, RunRefused

    if isinstance(exc, CommandError):
        return str(exc), exc.status
    if isinstance(exc, StoreError | InvalidMessage | RunRefused | ModelFailed):
        return str(exc), EXIT_USAGE
    if isinstance(exc, OSError):
        return os_error_text(exc), EXIT_USAGE
    return None


def guarded(function: F) -> F:
    """Run a command's body so that every situation the user caused ends in one line and
    an exit status, and a closed stdout (``otpmem inspect run | head``) ends quietly."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        prog = click.get_current_context().command_path
        try:
            status = function(*args, **kwargs)
        except BrokenPipeError:
            _silence_stdout()
            status = EXIT_OK  # the reader had what it wanted
        except KeyboardInterrupt:
            say(prog, "interrupted")
            status = EXIT_INTERRUPTED
        except Exception as exc:
            described = describe(exc)
            if described is None:
                raise  # a bug: its traceback is what a report needs
            message, status = described
            say(prog, message)
        raise click.exceptions.Exit(status or EXIT_OK)

    return wrapper  # type: ignore[return-value]


def _silence_stdout() -> None:
    # Python flushes stdout at exit; into a closed pipe that prints one more error.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def existing_file(path: Path, what: str = "file") -> Path:
    """``path`` if it is a readable file; a CommandError that says what it is otherwise."""
    if not path.exists():
        raise CommandError(f"{path} does not exist")
    if path.is_dir():
        raise CommandError(f"{path} is a directory; name the {what} inside it")
    return path


__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CommandError",
    "describe",
    "existing_file",
    "guarded",
    "os_error_text",
    "say",
]
