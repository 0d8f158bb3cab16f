"""Typing at no cost: ``conforms`` (a protocol ``isinstance`` at the speed of a class
check), ``signature_mismatches`` (what a protocol's members' signatures say that a value's
do not), and ``parameters_of`` (one function's parameters, taken by others through a
``ParamSpec``).

Python 3.11's protocol ``isinstance`` lists the protocol's members again on every call
(about 7 us), and starting an agent makes four such checks: a fifth of its start-up. A
class's answer is what ``issubclass`` caches, so that is asked first; anything it does not
settle (members set on the instance, data members) gets the full ``isinstance``. Neither
looks past the members' names: ``signature_mismatches`` does, for the tests.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def conforms(value: object, protocol: Any) -> bool:
    """``isinstance(value, protocol)`` for a ``@runtime_checkable`` protocol, class answers
    cached."""
    try:
        if issubclass(type(value), protocol):
            return True
    except TypeError:  # a protocol with data members: no class check
        pass
    return isinstance(value, protocol)


def signature_mismatches(value: object, protocol: type) -> list[str]:
    """How ``value``'s methods differ from ``protocol``'s (``[]``: they take what it says).

    Each method the protocol declares must take the protocol's parameters: the same names
    in the same order, of the same kinds, with the same defaults. It may take more, if
    each of them has a default (or is ``*args`` / ``**kwargs``). Annotations are not
    compared (mypy does that); what ``isinstance`` cannot see is what this checks.
    """
    found: list[str] = []
    for name in _members(protocol):
        method = getattr(value, name, None)
        if not callable(method):
            found.append(f"{name}: missing")
            continue
        wanted = list(inspect.signature(getattr(protocol, name)).parameters.values())[1:]
        try:
            given = list(inspect.signature(method).parameters.values())
        except (TypeError, ValueError):
            found.append(f"{name}: no signature to compare")
            continue
        found += [f"{name}: {problem}" for problem in _differences(wanted, given)]
    return found


def _members(protocol: type) -> list[str]:
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or klass.__name__ in ("Protocol", "Generic"):
            continue
        names |= {n for n, v in vars(klass).items() if callable(v) and not n.startswith("_")}
    return sorted(names)


def _differences(wanted: list[inspect.Parameter], given: list[inspect.Parameter]) -> list[str]:
    problems: list[str] = []
    by_name = {p.name: p for p in given}
    positional = [p for p in given if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for index, param in enumerate(wanted):
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            other = positional[index] if index < len(positional) else None
            if other is None or other.name != param.name:
                problems.append(f"takes {_shown(given)}, not {param.name!r} at place {index}")
                continue
        else:
            other = by_name.get(param.name)
            if other is None:
                problems.append(f"takes {_shown(given)}, without {param.name!r}")
                continue
        if other.kind != param.kind:
            kinds = f"{other.kind.description}, not {param.kind.description}"
            problems.append(f"{param.name!r} is {kinds}")
        elif other.default != param.default:
            defaults = f"{_default(other)}, not {_default(param)}"
            problems.append(f"{param.name!r} defaults to {defaults}")
    names = {p.name for p in wanted}
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    for param in given:
        if param.name not in names and param.kind not in variadic and param.default is param.empty:
            problems.append(f"{param.name!r} is required, and the protocol does not pass it")
    return problems


def _default(parameter: inspect.Parameter) -> str:
    return "nothing" if parameter.default is parameter.empty else repr(parameter.default)


def _shown(parameters: list[inspect.Parameter]) -> str:
    return "(" + ", ".join(str(p.replace(annotation=p.empty)) for p in parameters) + ")"


def parameters_of(source: Callable[P, Any]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Type the decorated function as taking ``source``'s parameters, to pass them on: one
    definition of a parameter list for every function that forwards it, so they cannot
    drift. The function is returned as it is, with ``source``'s signature for ``help``."""

    def typed(fn: Callable[..., R]) -> Callable[P, R]:
        fn.__signature__ = _returning(inspect.signature(source), fn)  # type: ignore[attr-defined]
        return fn

    return typed


def method_parameters_of(
    source: Callable[P, Any],
) -> Callable[[Callable[..., R]], Callable[Concatenate[Any, P], R]]:
    """``parameters_of`` for a method or a classmethod (under ``@classmethod``): ``self``
    or ``cls`` first, then ``source``'s parameters."""

    def typed(fn: Callable[..., R]) -> Callable[Concatenate[Any, P], R]:
        signature = inspect.signature(source)
        first = next(iter(inspect.signature(fn).parameters.values()))
        with_first = signature.replace(parameters=[first, *signature.parameters.values()])
        fn.__signature__ = _returning(with_first, fn)  # type: ignore[attr-defined]
        return fn

    return typed


def _returning(signature: inspect.Signature, fn: Callable[..., Any]) -> inspect.Signature:
    return signature.replace(return_annotation=inspect.signature(fn).return_annotation)


__all__ = ["conforms", "method_parameters_of", "parameters_of", "signature_mismatches"]
