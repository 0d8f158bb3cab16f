"""Tools: plain Python functions (or ``Tool`` objects) the model may call.

A function's name, docstring and type hints make its JSON schema::

    def add(a: int, b: int) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b

A tool that raises does not stop the loop: its error goes back to the model as the tool
message (``{"error": {"type": ..., "message": ...}}``), and the model decides what next.

A tool may need a human's approval before it runs (``tool(fn, needs_approval=True)``, or
``@needs_approval`` on the function): an agent then suspends the turn when the model calls
it, and runs it only once ``agent.resume(turn_id, approve=...)`` approves the call; a
refused call's message is ``refusal(...)``. The kernel alone keeps no turn to suspend: its
tool loop raises ``ApprovalRequired`` instead.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from ..messages import short_repr

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
}


@dataclass(frozen=True)
class Tool:
    """A callable the model may invoke: ``fn(**arguments)`` with a JSON-schema ``parameters``."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any] = field(repr=False)
    blocks: bool = True
    """Run on the runtime's blocking pool (a tool may wait on anything); False runs it inline."""
    needs_approval: bool = False
    """An agent runs a call of it only once a human approved it (``agent.resume``)."""

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def run(self, arguments: str | Mapping[str, Any]) -> str:
        """Call the tool with JSON ``arguments``; the result (or the error) as message text."""
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
            if not isinstance(parsed, dict):
                raise TypeError(f"arguments must be a JSON object, got {short_repr(parsed)}")
            value = self.fn(**parsed)
        except Exception as exc:
            return tool_error(exc)
        return encode_result(value)


APPROVAL_MARK = "__otpmem_needs_approval__"


def needs_approval(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a plain function as a tool whose calls wait for a human's approval."""
    if not callable(fn):
        raise TypeError(f"needs_approval marks a function, got {fn!r}")
    setattr(fn, APPROVAL_MARK, True)
    return fn


def refusal(name: str) -> str:
    """The tool-message text of a call the human refused: it did not run."""
    return json.dumps(
        {
            "error": {
                "type": "refused",
                "message": f"a human refused this call of {name}: it did not run",
            }
        }
    )


def tool_error(exc: BaseException, kind: str = "tool_error") -> str:
    """The tool-message text for a failed call."""
    return json.dumps({"error": {"type": kind, "message": f"{type(exc).__name__}: {exc}"}})


def encode_result(value: Any) -> str:
    """A tool's return value as message text: str as is, anything else as JSON (or repr)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _schema(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = get_origin(annotation)
    if origin is Literal:
        return {"enum": list(get_args(annotation))}
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        return (
            _schema(options[0]) if len(options) == 1 else {"anyOf": [_schema(a) for a in options]}
        )
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        args = get_args(annotation)
        return {"type": "array", **({"items": _schema(args[0])} if args else {})}
    if origin in (dict, Mapping) or annotation is dict:
        return {"type": "object"}
    json_type = _JSON_TYPES.get(annotation)
    return {"type": json_type} if json_type else {}


def tool(
    fn: Callable[..., Any] | Tool,
    name: str | None = None,
    description: str | None = None,
    *,
    needs_approval: bool | None = None,
) -> Tool:
    """Build a ``Tool`` from a function: its name, docstring and type hints (and whether
    its calls wait for approval: ``needs_approval``, else the function's mark)."""
    if needs_approval is not None and type(needs_approval) is not bool:
        raise TypeError(f"needs_approval must be a bool, got {short_repr(needs_approval)}")
    if isinstance(fn, Tool):
        if needs_approval is None or needs_approval == fn.needs_approval:
            return fn
        return dataclasses.replace(fn, needs_approval=needs_approval)
    if not callable(fn):
        raise TypeError(f"a tool is a function or a Tool, got {fn!r}")
    if needs_approval is None:
        needs_approval = getattr(fn, APPROVAL_MARK, False) is True
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    properties: dict[str, Any] = {}
    required = []
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        properties[parameter.name] = _schema(hints.get(parameter.name, parameter.annotation))
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    doc = inspect.getdoc(fn) or ""
    return Tool(
        name=name or fn.__name__,
        description=description or doc.split("\n\n")[0].strip(),
        parameters={"type": "object", "properties": properties, "required": required},
        fn=fn,
        needs_approval=needs_approval,
    )


def toolset(tools: Iterable[Callable[..., Any] | Tool]) -> dict[str, Tool]:
    """Tools by name; duplicate names are refused."""
    by_name: dict[str, Tool] = {}
    for item in tools:
        built = tool(item)
        if built.name in by_name:
            raise ValueError(f"two tools are named {built.name!r}")
        by_name[built.name] = built
    return by_name
