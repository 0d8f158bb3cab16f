"""What a person finds before reading any docs: ``otpmem`` alone prints help, every command
says what it does, every argument and option has help and shows its default, and the
shell completes commands, options, users and conversation ids."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from otpmem import version
from otpmem.cli import cli
from tests.cli_support import otpmem

COMMANDS = ["completion", "export", "fork", "import", "inspect", "observe", "search", "simulate"]


def test_otpmem_alone_prints_help_listing_every_command() -> None:
    result = otpmem()

    assert result.returncode == 0, str(result)
    assert result.stdout.startswith("Usage: otpmem [OPTIONS] [COMMAND] [ARGS]...")
    listed = result.stdout.split("Commands:", 1)[1].splitlines()
    names = [line.split()[0] for line in listed if line.startswith("  ") and line.split()]
    assert names == COMMANDS
    assert all(len(line.split()) > 2 for line in listed if line.startswith("  ")), listed


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_documents_every_argument_and_option(name: str) -> None:
    command = cli.commands[name]
    assert command.help and command.help.split("\n")[0].rstrip().endswith(".")
    for param in command.params:
        assert getattr(param, "help", None), f"{name}: {param.name} has no help"

    result = otpmem(name, "--help")

    assert result.returncode == 0, str(result)
    assert result.stdout.startswith(f"Usage: otpmem {name} ")
    text = " ".join(result.stdout.split())  # help wraps lines: compare words
    for param in command.params:
        if isinstance(param, click.Option) and not param.is_flag and param.name != "help":
            # Either a value Click shows, or a "[default: ...]" the help text states.
            shown = param.default is not None or "[default: " in (param.help or "")
            assert shown, f"{name} {param.opts[0]} shows no default"
            if param.default is not None and not param.required:
                assert f"[default: {param.default}" in text, f"{param.opts[0]}: {text}"


def test_simulate_help_shows_the_base_url_default_and_the_ranges() -> None:
    text = " ".join(otpmem("simulate", "--help").stdout.split())

    assert (
        "--base-url URL The OpenAI-compatible server, for --model openai. [default: "
        "http://localhost:8000/v1]" in text
    )
    assert "[default: 20; x>=1]" in text  # --agents
    assert "[default: 0.0; 0.0<=x<=1.0]" in text  # --chaos


def test_python_dash_m_runs_the_same_command() -> None:
    for module in ("otpmem", "otpmem.cli"):
        result = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"otpmem {version}\n"


def complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash completion offers for the last word of ``words``."""
    parts = words.split(" ")
    result = otpmem(
        env={
            "_OTPMEM_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(parts) - 1),
            **(env or {}),
        }
    )
    assert result.returncode == 0, str(result)
    return [line.split(",", 1)[1] for line in result.stdout.splitlines()]


def test_completion_scripts_for_bash_zsh_and_fish() -> None:
    for shell, marker in [
        ("bash", "complete -o nosort -F"),
        ("zsh", "compdef"),
        ("fish", "complete --no-files --command otpmem"),
    ]:
        result = otpmem("completion", shell)
        assert result.returncode == 0, str(result)
        assert "_OTPMEM_COMPLETE" in result.stdout and marker in result.stdout, result.stdout


def test_the_shell_completes_commands_options_users_and_conversations(store_dir: Path) -> None:
    assert complete("otpmem ins") == ["inspect"]
    assert complete("otpmem simulate --ag") == ["--agents"]
    assert complete(f"otpmem inspect {store_dir} --user ") == ["alice", "bob"]
    assert complete(f"otpmem inspect {store_dir} --user alice c") == ["c1", "c2"]
    assert complete(f"otpmem search {store_dir} x --user bob --conv ") == ["b1"]
