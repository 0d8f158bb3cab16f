"""``otpmem completion SHELL``: the script that completes otpmem's commands, options,
conversation ids and users (read from the store named on the command line)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from .errors import guarded
from .output import line

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_OTPMEM_COMPLETE"


@click.command()
@click.argument("shell", type=click.Choice(SHELLS), help="The shell to complete in.")
@guarded
def completion(shell: str) -> int:
    """Print the shell completion script for bash, zsh or fish.

    \b
    bash:  eval "$(otpmem completion bash)"   (in ~/.bashrc)
    zsh:   eval "$(otpmem completion zsh)"    (in ~/.zshrc)
    fish:  otpmem completion fish > ~/.config/fish/completions/otpmem.fish
    """
    root = click.get_current_context().find_root().command
    completer = get_completion_class(shell)
    assert completer is not None  # every name in SHELLS has one
    line(completer(root, {}, "otpmem", COMPLETE_VAR).source())
    return 0


__all__ = ["COMPLETE_VAR", "SHELLS", "completion"]
