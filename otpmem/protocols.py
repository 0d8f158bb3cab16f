"""``conforms``: ``isinstance`` against a runtime-checkable protocol, at the speed of a class
check.

Python 3.11's protocol ``isinstance`` lists the protocol's members again on every call
(about 7 us), and starting an agent makes four such checks: a fifth of its start-up. A
class's answer is what ``issubclass`` caches, so that is asked first; anything it does not
settle (members set on the instance, data members) gets the full ``isinstance``.
"""

from __future__ import annotations

from typing import Any


def conforms(value: object, protocol: Any) -> bool:
    """``isinstance(value, protocol)`` for a ``@runtime_checkable`` protocol, class answers
    cached."""
    try:
        if issubclass(type(value), protocol):
            return True
    except TypeError:  # a protocol with data members: no class check
        pass
    return isinstance(value, protocol)


__all__ = ["conforms"]
