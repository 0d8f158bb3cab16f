"""The ``otpmem`` command: simulate under chaos, and read what a store holds.

::

    otpmem simulate --agents 20 --turns 10 --chaos 0.05 --seed 1 --data run
    otpmem simulate --data run --resume
    otpmem simulate --replay run --workers 1
    otpmem inspect run [CONV] [--user U] [--last N]
    otpmem export run (CONV [--user U] | --user U | --all) [-o FILE]
    otpmem import run FILE            (FILE may be -, stdin)
    otpmem search run QUERY [--user U] [--conv CONV] [--limit N]
    otpmem fork SOURCE INTO [--at N] [--user U] [--key K] --dir run
    otpmem observe --attach run|DSN [--port P] [--json]
    otpmem completion bash|zsh|fish

One module per command (``simulate_command``, ``read_commands``, ``import_command``,
``completion``); ``run_flags`` what ``run.json`` keeps of simulate's flags, ``errors``
what every failure prints and its exit status, ``output`` where things are written.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from .. import version
from .completion import completion
from .errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, say
from .fork_command import fork
from .import_command import import_
from .observe_command import observe
from .read_commands import export, inspect, search
from .simulate_command import simulate

CONTEXT = {"help_option_names": ["-h", "--help"], "show_default": True, "max_content_width": 100}


@click.group(context_settings=CONTEXT, invoke_without_command=True)
@click.version_option(version, "--version", message="otpmem %(version)s")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Supervised conversation memory for LLM agents, on an OTP-style actor runtime.

    Run `otpmem COMMAND --help` for a command's arguments and options.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


cli.add_command(simulate)
cli.add_command(inspect)
cli.add_command(export)
cli.add_command(import_, name="import")
cli.add_command(search)
cli.add_command(fork)
cli.add_command(observe)
cli.add_command(completion)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        status = cli.main(args=args, prog_name="otpmem", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help())
        return EXIT_OK
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "otpmem"
        say(where, exc.format_message())
        say(where, f"see '{where} --help' for every argument and option")
        return EXIT_USAGE
    except click.ClickException as exc:
        say("otpmem", exc.format_message())
        return exc.exit_code
    except click.exceptions.Abort:
        say("otpmem", "interrupted")
        return EXIT_INTERRUPTED
    return status if isinstance(status, int) else EXIT_OK


__all__ = ["cli", "main"]
