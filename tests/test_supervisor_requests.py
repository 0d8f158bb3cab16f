"""A malformed admin request is the caller's error: SupervisorError, and the tree stays up.

Before issue 9 (part 4) a request of the wrong arity, e.g. ``("which_children", 1)``, reached
its handler and raised TypeError, which crashed the supervisor and every child with it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from otpmem.supervisors import ChildSpec, Supervisor, SupervisorError, SupervisorHandle
from tests.support import Worker, worker_spec


def operations() -> dict[str, int]:
    """Every admin request a Supervisor answers, with how many arguments it takes."""
    return {
        name.removeprefix("_api_"): len(inspect.signature(getattr(Supervisor, name)).parameters) - 1
        for name in dir(Supervisor)
        if name.startswith("_api_")
    }


def test_the_operations_under_test_are_the_documented_admin_api() -> None:
    assert operations() == {
        "count_children": 0,
        "delete_child": 1,
        "get_childspec": 1,
        "info": 0,
        "restart_child": 1,
        "start_child": 1,
        "subscribe": 1,
        "sync": 0,
        "terminate_child": 1,
        "unsubscribe": 1,
        "which_children": 0,
    }


WRONG_ARITIES = [
    (operation, count)
    for operation, arity in sorted(operations().items())
    for count in range(arity + 3)
    if count != arity
]


@pytest.fixture
def sup() -> Iterator[SupervisorHandle]:
    """A supervisor with two running workers."""
    handle = Supervisor.start_link([worker_spec("a"), worker_spec("b")])
    yield handle
    if handle.alive:
        handle.stop()


def children(sup: SupervisorHandle) -> list[tuple[Any, Any]]:
    return [(info.id, info.pid) for info in sup.which_children()]


def assert_refused(sup: SupervisorHandle, request: Any) -> SupervisorError:
    """The request gets SupervisorError; the supervisor and its children run on, same pids."""
    before = children(sup)
    with pytest.raises(SupervisorError) as raised:
        sup.call(request)
    assert sup.alive, f"the supervisor died: {sup.exit_reason!r}"
    assert children(sup) == before
    assert all(info.handle is not None and info.handle.alive for info in sup.which_children())
    return raised.value


@pytest.mark.parametrize(
    ("operation", "count"), WRONG_ARITIES, ids=[f"{op}-{n}" for op, n in WRONG_ARITIES]
)
def test_a_request_of_the_wrong_arity_is_refused_naming_what_it_takes(
    sup: SupervisorHandle, operation: str, count: int
) -> None:
    request = (operation, *(f"arg{i}" for i in range(count)))
    error = assert_refused(sup, request)
    arity = operations()[operation]
    text = str(error)
    assert repr(operation) in text
    assert ("no arguments" if arity == 0 else f"takes {arity} argument") in text
    assert f"got {count}" in text


@pytest.mark.parametrize(
    "request_",
    [42, None, "which_children", ["which_children"], {"op": "sync"}, ()],
    ids=["int", "None", "bare str", "list", "dict", "empty tuple"],
)
def test_a_request_that_is_not_a_tuple_of_operation_and_arguments_is_refused(
    sup: SupervisorHandle, request_: Any
) -> None:
    error = assert_refused(sup, request_)
    assert "not a supervisor request" in str(error)
    assert "(operation, *arguments)" in str(error)


@pytest.mark.parametrize(
    "request_",
    [(1,), (None, "a"), (b"which_children",), (("which_children",),)],
    ids=["int", "None", "bytes", "nested tuple"],
)
def test_a_request_whose_operation_is_not_a_str_is_refused(
    sup: SupervisorHandle, request_: Any
) -> None:
    assert "not a supervisor request" in str(assert_refused(sup, request_))


def test_an_unknown_operation_is_refused_listing_the_known_ones(sup: SupervisorHandle) -> None:
    text = str(assert_refused(sup, ("no_such_op",)))
    assert "'no_such_op'" in text
    assert all(operation in text for operation in operations())


@pytest.mark.parametrize("listener", [42, None, "print"], ids=["int", "None", "str"])
def test_subscribe_refuses_a_listener_that_cannot_be_called(
    sup: SupervisorHandle, listener: Any
) -> None:
    assert "callable" in str(assert_refused(sup, ("subscribe", listener)))


@pytest.mark.parametrize(
    "request_",
    [
        ("which_children", 1),
        ("start_child",),
        ("start_child", ("x",), ("y",)),
        ("terminate_child",),
    ],
    ids=["which_children-1", "start_child-0", "start_child-2", "terminate_child-0"],
)
def test_simple_one_for_one_refuses_wrong_arities_and_keeps_its_children(request_: Any) -> None:
    sup = Supervisor.start_link(
        [ChildSpec("w", start=lambda tag: Worker.start_link(tag))], strategy="simple_one_for_one"
    )
    try:
        sup.start_child(("one",))
        sup.start_child(("two",))
        assert_refused(sup, request_)
    finally:
        sup.stop()


def test_well_formed_requests_still_work_after_malformed_ones(sup: SupervisorHandle) -> None:
    for request in [("which_children", 1), ("terminate_child",), ("start_child", 1, 2)]:
        assert_refused(sup, request)
    sup.terminate_child("a")
    assert sup.restart_child("a") is not None
    assert sup.count_children().active == 2
