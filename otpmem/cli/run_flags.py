"""What ``run.json`` keeps of ``otpmem simulate``'s flags, and the flags of a run that is
continued (``--resume``) or run again (``--replay``): the run's own, where a flag given that
contradicts one is a usage error naming both values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..simulate import PARAMS, RunParams
from . import nodes_options
from .errors import CommandError

DEFAULT_BASE_URL = "http://localhost:8000/v1"
DEFAULT_MODEL_NAME = "gpt-4o-mini"
# The options a run keeps in run.json, by their name in the command's parameters.
RUN_FLAGS = {
    "agents": "--agents",
    "turns": "--turns",
    "chaos": "--chaos",
    "seed": "--seed",
    "model": "--model",
    "base_url": "--base-url",
    "model_name": "--model-name",
    "store": "--store",
    "nodes": "--nodes",
}


def flags_of(params: RunParams) -> dict[str, Any]:
    """The flags that start the run ``params`` describes."""
    return {
        "agents": params.agents,
        "turns": params.turns,
        "chaos": params.chaos,
        "seed": params.seed,
        "model": params.model.get("kind", "scripted"),
        "base_url": params.model.get("base_url", DEFAULT_BASE_URL),
        "model_name": params.model.get("name", DEFAULT_MODEL_NAME),
        "store": nodes_options.store_flag(params),
        "nodes": params.nodes,
    }


def model_info(flags: dict[str, Any]) -> dict[str, str]:
    """The model as run.json keeps it."""
    if flags["model"] == "scripted":
        return {"kind": "scripted"}
    return {"kind": "openai", "base_url": flags["base_url"], "name": flags["model_name"]}


def resumed_flags(data: Path, flags: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """The run's own parameters (from run.json); a flag given that contradicts one is a
    usage error naming both values."""
    stored = RunParams.load(data)
    if stored is None:
        return flags  # a run from before run.json: the flags say what it was
    kept = _kept(
        stored,
        flags,
        given,
        f"(kept in {data / PARAMS}): --resume continues the run as it was started, so drop "
        "the flag, or start a new run in another directory",
    )
    kept["store"] = nodes_options.resumed_store(
        flags["store"] if "store" in given else None, kept["store"]
    )
    return kept


def replayed_flags(
    run_dir: Path, stored: RunParams, flags: dict[str, Any], given: set[str]
) -> dict[str, Any]:
    """The replayed run's parameters (``stored``, from its run.json); a flag given that
    contradicts one is a usage error naming both values."""
    return _kept(
        stored,
        flags,
        given,
        f"(kept in {run_dir / PARAMS}): --replay runs that run again as it was started, so "
        "drop the flag (--workers may differ)",
    )


def _kept(stored: RunParams, flags: dict[str, Any], given: set[str], why: str) -> dict[str, Any]:
    kept = flags_of(stored)

    def differs(name: str) -> bool:
        if name == "store":
            return not nodes_options.same_store(flags[name], kept[name])
        return bool(flags[name] != kept[name])

    conflicts = [
        f"{RUN_FLAGS[name]} {_shown(name, flags[name])} contradicts the run's "
        f"{RUN_FLAGS[name]} {kept[name]}"
        for name in RUN_FLAGS
        if name in given and differs(name)
    ]
    if conflicts:
        raise CommandError("; ".join(conflicts) + " " + why)
    return kept


def _shown(name: str, value: Any) -> Any:
    """A flag's value fit for a message: a DSN's password hidden."""
    if name != "store":
        return value
    from ..stores.postgres import redact

    return redact(str(value))


__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL_NAME",
    "RUN_FLAGS",
    "flags_of",
    "model_info",
    "replayed_flags",
    "resumed_flags",
]
