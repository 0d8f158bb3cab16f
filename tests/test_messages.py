"""otpmem.messages: every validation rule names its field; frozen messages refuse mutation."""

from __future__ import annotations

import copy
import decimal
import enum
import json
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from otpmem.messages import (
    FIELDS,
    MAX_DEPTH,
    ROLES,
    Conv,
    FrozenDict,
    FrozenList,
    InvalidMessage,
    as_conv,
    check_user_id,
    freeze,
    freeze_batch,
    text_of,
    thaw,
    validate,
    validate_batch,
)


def user(content: Any = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **extra}


def call(call_id: str = "c1", name: str = "lookup", arguments: str = '{"q": 1}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant_calls(*calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls), **extra}


def tool(call_id: Any = "c1", content: Any = "42", **extra: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content, **extra}


def rejects(message: Any, field: str | None, index: int | None = None) -> InvalidMessage:
    """Assert that validate and freeze both reject ``message`` naming ``field``."""
    with pytest.raises(InvalidMessage) as raised:
        freeze(message, index)
    assert raised.value.field == field
    assert raised.value.index == index
    with pytest.raises(InvalidMessage) as again:
        validate(message, index)
    assert (again.value.field, again.value.index) == (field, index)
    return raised.value


# -- valid messages --------------------------------------------------------------------------

VALID = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi"},
    {"role": "user", "content": ""},
    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
    {"role": "user", "content": []},
    {"role": "assistant", "content": "hello"},
    {"role": "assistant", "content": None, "tool_calls": [call()]},
    {"role": "assistant", "content": "ok", "tool_calls": []},
    {"role": "assistant", "tool_calls": [call("a"), call("b")]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {
        "role": "user",
        "content": "hi",
        "name": "alice",
        "metadata": {"ts": 1.5, "tags": ["a", None, True], "n": -(2**63), "m": 2**64 - 1},
    },
]


@pytest.mark.parametrize("message", VALID)
def test_valid_message_is_returned_by_validate_and_frozen_equal(message: dict[str, Any]) -> None:
    assert validate(message) is message
    frozen = freeze(message)
    assert isinstance(frozen, FrozenDict)
    assert frozen == message


def test_every_role_is_accepted() -> None:
    assert set(ROLES) == {"system", "user", "assistant", "tool"}
    for role in ("system", "user", "assistant"):
        assert freeze({"role": role, "content": "x"}) == {"role": role, "content": "x"}
    assert freeze(tool()) == tool()


# -- role ------------------------------------------------------------------------------------


def test_missing_role_names_role() -> None:
    rejects({"content": "hi"}, "role")


@pytest.mark.parametrize("role", ["User", "developer", "", None, 1, ["user"], "user "])
def test_unknown_role_names_role(role: Any) -> None:
    exc = rejects({"role": role, "content": "hi"}, "role")
    assert repr(role) in str(exc)


# -- content ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["system", "user"])
def test_user_and_system_need_content(role: str) -> None:
    rejects({"role": role}, "content")
    rejects({"role": role, "content": None}, "content")


def test_tool_needs_content() -> None:
    rejects({"role": "tool", "tool_call_id": "c1"}, "content")
    rejects(tool(content=None), "content")


def test_assistant_needs_content_or_tool_calls() -> None:
    rejects({"role": "assistant"}, "content")
    rejects({"role": "assistant", "content": None}, "content")
    rejects({"role": "assistant", "content": None, "tool_calls": []}, "content")
    rejects({"role": "assistant", "content": None, "tool_calls": None}, "content")


@pytest.mark.parametrize("content", [1, 1.5, True, {"type": "text"}, ("a",), b"hi"])
def test_content_of_wrong_type_names_content(content: Any) -> None:
    rejects(user(content), "content")
    rejects({"role": "assistant", "content": content}, "content")


@pytest.mark.parametrize(
    "part",
    ["text", None, 3, ["type", "text"], {}, {"text": "hi"}, {"type": None}, {"type": 1}],
)
def test_content_part_needs_a_str_type(part: Any) -> None:
    rejects(user([{"type": "text", "text": "ok"}, part]), "content")


# -- tool_calls ------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["system", "user", "tool"])
def test_tool_calls_only_on_assistant(role: str) -> None:
    message = {"role": role, "content": "x", "tool_calls": [call()]}
    if role == "tool":
        message["tool_call_id"] = "c1"
    rejects(message, "tool_calls")
    message["tool_calls"] = []
    rejects(message, "tool_calls")


@pytest.mark.parametrize("calls", [{"id": "c1"}, "c1", ("c1",), 1])
def test_tool_calls_must_be_a_list(calls: Any) -> None:
    rejects({"role": "assistant", "content": "x", "tool_calls": calls}, "tool_calls")


@pytest.mark.parametrize("item", ["c1", None, ["c1"], 1])
def test_each_tool_call_must_be_a_dict(item: Any) -> None:
    rejects(assistant_calls(call("a"), item), "tool_calls[1]")


@pytest.mark.parametrize("call_id", [None, "", 1, ["c1"]])
def test_tool_call_id_must_be_a_non_empty_str(call_id: Any) -> None:
    bad = call()
    bad["id"] = call_id
    rejects(assistant_calls(bad), "tool_calls[0].id")
    del bad["id"]
    rejects(assistant_calls(call("a"), bad), "tool_calls[1].id")


def test_duplicate_tool_call_ids_name_the_second() -> None:
    exc = rejects(assistant_calls(call("a"), call("b"), call("a")), "tool_calls[2].id")
    assert "'a'" in str(exc)


@pytest.mark.parametrize("kind", [None, "Function", "tool", 1])
def test_tool_call_type_must_be_function(kind: Any) -> None:
    bad = call()
    bad["type"] = kind
    rejects(assistant_calls(bad), "tool_calls[0].type")
    del bad["type"]
    rejects(assistant_calls(bad), "tool_calls[0].type")


@pytest.mark.parametrize("function", [None, "lookup", ["lookup", "{}"], 1])
def test_tool_call_function_must_be_a_dict(function: Any) -> None:
    bad = call()
    bad["function"] = function
    rejects(assistant_calls(bad), "tool_calls[0].function")
    del bad["function"]
    rejects(assistant_calls(bad), "tool_calls[0].function")


@pytest.mark.parametrize("name", [None, "", 1, ["lookup"]])
def test_tool_call_function_name_must_be_a_non_empty_str(name: Any) -> None:
    bad = call()
    bad["function"]["name"] = name
    rejects(assistant_calls(bad), "tool_calls[0].function.name")
    del bad["function"]["name"]
    rejects(assistant_calls(bad), "tool_calls[0].function.name")


@pytest.mark.parametrize("arguments", [None, {"q": 1}, 1, ["q"]])
def test_tool_call_function_arguments_must_be_a_str(arguments: Any) -> None:
    bad = call()
    bad["function"]["arguments"] = arguments
    rejects(assistant_calls(bad), "tool_calls[0].function.arguments")
    del bad["function"]["arguments"]
    rejects(assistant_calls(bad), "tool_calls[0].function.arguments")


def test_empty_arguments_string_is_valid() -> None:
    message = assistant_calls(call(arguments=""))
    assert freeze(message) == message


# -- tool_call_id ----------------------------------------------------------------------------


@pytest.mark.parametrize("call_id", [None, "", 1, ["c1"]])
def test_tool_message_needs_a_non_empty_tool_call_id(call_id: Any) -> None:
    rejects(tool(call_id), "tool_call_id")
    rejects({"role": "tool", "content": "42"}, "tool_call_id")


@pytest.mark.parametrize("role", ["system", "user", "assistant"])
def test_tool_call_id_forbidden_on_other_roles(role: str) -> None:
    rejects({"role": role, "content": "x", "tool_call_id": "c1"}, "tool_call_id")
    rejects({"role": role, "content": "x", "tool_call_id": None}, "tool_call_id")


# -- name, metadata, unknown fields ------------------------------------------------------------


@pytest.mark.parametrize("name", [None, 1, ["alice"], {"n": "alice"}, b"alice"])
def test_name_must_be_a_str(name: Any) -> None:
    rejects(user(name=name), "name")


@pytest.mark.parametrize("metadata", [None, [], "x", 1, (("a", 1),)])
def test_metadata_must_be_a_dict(metadata: Any) -> None:
    rejects(user(metadata=metadata), "metadata")


@pytest.mark.parametrize("key", ["Role", "contents", "extra", "", "id"])
def test_unknown_field_is_named(key: str) -> None:
    assert key not in FIELDS
    exc = rejects(user(**{key: "x"}), key)
    assert "unknown field" in str(exc)


def test_unknown_non_str_field_is_named_by_its_str() -> None:
    message: dict[Any, Any] = user()
    message[1] = "x"
    rejects(message, "1")


def test_unknown_field_is_reported_before_other_faults() -> None:
    rejects({"role": "nobody", "extra": 1}, "extra")


@pytest.mark.parametrize("message", [None, "hi", ["role", "user"], (("role", "user"),), 1])
def test_a_message_must_be_a_dict(message: Any) -> None:
    rejects(message, None)
    rejects(message, None, index=4)


# -- JSON-like values ------------------------------------------------------------------------


class Color(enum.IntEnum):
    RED = 1


class Text(str):
    pass


UNSTORABLE: list[tuple[str, Any]] = [
    ("tuple", (1, 2)),
    ("empty tuple", ()),
    ("bytes", b"x"),
    ("bytearray", bytearray(b"x")),
    ("set", {1}),
    ("frozenset", frozenset()),
    ("object", object()),
    ("complex", 1j),
    ("decimal", decimal.Decimal("1.5")),
    ("int enum", Color.RED),
    ("str subclass", Text("x")),
    ("function", len),
]


@pytest.mark.parametrize("value", [v for _, v in UNSTORABLE], ids=[n for n, _ in UNSTORABLE])
def test_non_json_value_in_metadata_is_rejected(value: Any) -> None:
    exc = rejects(user(metadata={"x": value}), "metadata.x")
    assert "not storable" in str(exc)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_rejected(value: float) -> None:
    rejects(user(metadata={"x": value}), "metadata.x")
    rejects(user(metadata={"x": [1.0, value]}), "metadata.x[1]")


def test_integers_must_fit_in_64_bits() -> None:
    assert freeze(user(metadata={"x": 2**64 - 1, "y": -(2**63)})) is not None
    rejects(user(metadata={"x": 2**64}), "metadata.x")
    rejects(user(metadata={"x": -(2**63) - 1}), "metadata.x")
    rejects(user(metadata={"x": 10**100}), "metadata.x")


def test_bool_and_none_and_float_are_storable() -> None:
    message = user(metadata={"t": True, "f": False, "n": None, "x": 0.1, "z": -0.0})
    assert freeze(message) == message


@pytest.mark.parametrize("key", [1, None, 1.5, ("a",), True, b"k"])
def test_dict_keys_must_be_str(key: Any) -> None:
    exc = rejects(user(metadata={"ok": {key: "v"}}), "metadata.ok")
    assert "keys must be str" in str(exc)
    rejects(user(metadata={key: "v"}), "metadata")


def test_bad_values_are_found_in_content_parts_and_tool_calls() -> None:
    rejects(user([{"type": "text", "text": b"hi"}]), "content[0].text")
    bad = call()
    bad["extra"] = (1,)
    rejects(assistant_calls(bad), "tool_calls[0].extra")
    bad = call()
    bad["function"]["extra"] = {1, 2}
    rejects(assistant_calls(bad), "tool_calls[0].function.extra")


def test_str_subclass_in_a_checked_field_is_rejected() -> None:
    rejects(user(Text("hi")), "content")
    rejects(user(name=Text("alice")), "name")
    rejects(tool(Text("c1")), "tool_call_id")


def nested(levels: int) -> Any:
    """``levels`` lists nested inside each other."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_nesting_up_to_max_depth_is_allowed_and_deeper_is_rejected() -> None:
    # The message is level 1 and metadata level 2, so metadata["x"] holds MAX_DEPTH - 2 levels.
    deepest = user(metadata={"x": nested(MAX_DEPTH - 2)})
    assert freeze(deepest) == deepest
    path = "metadata.x" + "[0]" * (MAX_DEPTH - 2)
    exc = rejects(user(metadata={"x": nested(MAX_DEPTH - 1)}), path)
    assert f"deeper than {MAX_DEPTH}" in str(exc)


def test_very_deep_and_cyclic_values_are_rejected_not_a_recursion_error() -> None:
    with pytest.raises(InvalidMessage):
        freeze(user(metadata={"x": nested(10_000)}))
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(InvalidMessage) as raised:
        freeze(user(metadata=cycle))
    assert raised.value.field is not None
    assert raised.value.field.startswith("metadata.self.self")
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidMessage):
        freeze(user([{"type": "text", "nested": loop}]))


def test_invalid_message_is_a_value_error_with_reason() -> None:
    exc = rejects(tool(""), "tool_call_id", index=3)
    assert isinstance(exc, ValueError)
    assert str(exc).startswith("message 3, field 'tool_call_id': ")
    assert exc.reason in str(exc)


# -- freeze: read-only deep copies ------------------------------------------------------------


def rich() -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi", "extra": {"deep": [1, [2, {"k": "v"}]]}}],
        "tool_calls": [call("a")],
        "name": "bot",
        "metadata": {"tags": ["x", "y"], "score": 0.5, "nested": {"list": [1, 2]}},
    }


def walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def test_freeze_returns_frozen_containers_all_the_way_down() -> None:
    frozen = freeze(rich())
    assert frozen == rich()
    containers = [v for v in walk(frozen) if isinstance(v, dict | list)]
    assert len(containers) == 14
    for value in containers:
        assert isinstance(value, FrozenDict | FrozenList)
    assert type(frozen["metadata"]["tags"]) is FrozenList
    assert type(frozen["tool_calls"][0]["function"]) is FrozenDict


DICT_MUTATIONS: list[tuple[str, Callable[[Any], Any]]] = [
    ("setitem", lambda d: d.__setitem__("role", "user")),
    ("setitem new", lambda d: d.__setitem__("new", 1)),
    ("delitem", lambda d: d.__delitem__("role")),
    ("clear", lambda d: d.clear()),
    ("pop", lambda d: d.pop("role")),
    ("pop default", lambda d: d.pop("missing", None)),
    ("popitem", lambda d: d.popitem()),
    ("setdefault", lambda d: d.setdefault("new", 1)),
    ("update", lambda d: d.update({"role": "user"})),
    ("update kwargs", lambda d: d.update(role="user")),
    ("ior", lambda d: d.__ior__({"role": "user"})),
]

LIST_MUTATIONS: list[tuple[str, Callable[[Any], Any]]] = [
    ("setitem", lambda x: x.__setitem__(0, "z")),
    ("setitem slice", lambda x: x.__setitem__(slice(0, 1), ["z"])),
    ("delitem", lambda x: x.__delitem__(0)),
    ("append", lambda x: x.append("z")),
    ("extend", lambda x: x.extend(["z"])),
    ("insert", lambda x: x.insert(0, "z")),
    ("pop", lambda x: x.pop()),
    ("remove", lambda x: x.remove("x")),
    ("clear", lambda x: x.clear()),
    ("reverse", lambda x: x.reverse()),
    ("sort", lambda x: x.sort()),
    ("iadd", lambda x: x.__iadd__(["z"])),
    ("imul", lambda x: x.__imul__(2)),
]


@pytest.mark.parametrize(
    "mutate", [m for _, m in DICT_MUTATIONS], ids=[n for n, _ in DICT_MUTATIONS]
)
def test_frozen_dicts_refuse_mutation_at_every_level(mutate: Callable[[Any], Any]) -> None:
    frozen = freeze(rich())
    for target in (frozen, frozen["metadata"], frozen["tool_calls"][0]["function"]):
        before = thaw(target)
        with pytest.raises(TypeError, match="read-only"):
            mutate(target)
        assert target == before
    assert frozen == rich()


@pytest.mark.parametrize(
    "mutate", [m for _, m in LIST_MUTATIONS], ids=[n for n, _ in LIST_MUTATIONS]
)
def test_frozen_lists_refuse_mutation_at_every_level(mutate: Callable[[Any], Any]) -> None:
    frozen = freeze(rich())
    for target in (frozen["metadata"]["tags"], frozen["content"], frozen["tool_calls"]):
        before = thaw(target)
        with pytest.raises(TypeError, match="read-only"):
            mutate(target)
        assert target == before
    assert frozen == rich()


def test_augmented_assignment_on_a_frozen_value_raises() -> None:
    frozen = freeze(rich())
    tags = frozen["metadata"]["tags"]
    with pytest.raises(TypeError):
        tags += ["z"]
    meta = frozen["metadata"]
    with pytest.raises(TypeError):
        meta |= {"x": 1}
    assert frozen == rich()


def assert_plain(value: Any) -> None:
    for item in walk(value):
        assert not isinstance(item, FrozenDict | FrozenList)


def test_deepcopy_and_thaw_give_plain_mutable_dicts() -> None:
    frozen = freeze(rich())
    for copied in (copy.deepcopy(frozen), thaw(frozen)):
        assert type(copied) is dict
        assert copied == rich()
        assert_plain(copied)
        copied["metadata"]["tags"].append("z")
        copied["content"][0]["extra"]["deep"][1][1]["k"] = "changed"
        copied["role"] = "user"
        assert frozen == rich()


def test_deepcopy_of_a_structure_holding_frozen_messages() -> None:
    frozen = freeze(rich())
    holder = copy.deepcopy({"messages": [frozen]})
    assert holder == {"messages": [rich()]}
    assert_plain(holder)


def test_shallow_copy_is_a_plain_dict() -> None:
    frozen = freeze(rich())
    shallow = copy.copy(frozen)
    assert type(shallow) is dict
    shallow["role"] = "user"
    assert frozen["role"] == "assistant"
    assert type(copy.copy(frozen["metadata"]["tags"])) is list


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip_gives_a_plain_dict(protocol: int) -> None:
    frozen = freeze(rich())
    loaded = pickle.loads(pickle.dumps(frozen, protocol=protocol))
    assert type(loaded) is dict
    assert loaded == rich()
    assert_plain(loaded)
    loaded["metadata"]["tags"].append("z")
    assert frozen == rich()


def test_json_dumps_a_frozen_message_like_the_original() -> None:
    frozen = freeze(rich())
    assert json.dumps(frozen, sort_keys=True) == json.dumps(rich(), sort_keys=True)
    assert json.loads(json.dumps(frozen)) == rich()


def test_freeze_does_not_alias_the_callers_message() -> None:
    original = rich()
    frozen = freeze(original)
    original["role"] = "user"
    original["metadata"]["tags"].append("z")
    original["metadata"]["nested"]["list"][0] = 99
    original["content"][0]["extra"]["deep"][1][1]["k"] = "changed"
    original["tool_calls"][0]["function"]["name"] = "other"
    del original["name"]
    assert frozen == rich()


def test_validate_does_not_copy_or_change_the_message() -> None:
    original = rich()
    assert validate(original) is original
    assert type(original["metadata"]) is dict
    original["metadata"]["tags"].append("z")  # still the caller's own, mutable


def test_freezing_a_frozen_message_gives_an_equal_frozen_message() -> None:
    frozen = freeze(rich())
    again = freeze(frozen)
    assert isinstance(again, FrozenDict)
    assert again == rich()


# -- batches ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch",
    [user(), "hi", b"hi", 1, None, 1.5, object()],
    ids=["dict", "str", "bytes", "int", "None", "float", "object"],
)
def test_freeze_batch_rejects_non_batches_with_index_none(batch: Any) -> None:
    with pytest.raises(InvalidMessage) as raised:
        freeze_batch(batch)
    assert raised.value.index is None
    assert raised.value.field is None
    with pytest.raises(InvalidMessage) as again:
        validate_batch(batch)
    assert again.value.index is None


def test_third_bad_message_in_a_batch_has_index_2() -> None:
    batch = [user("a"), user("b"), {"role": "user"}]
    with pytest.raises(InvalidMessage) as raised:
        freeze_batch(batch)
    assert (raised.value.index, raised.value.field) == (2, "content")
    assert str(raised.value).startswith("message 2, field 'content'")


def test_first_bad_message_is_reported() -> None:
    batch = [user(), tool(None), {"role": "nobody"}, "junk"]
    with pytest.raises(InvalidMessage) as raised:
        freeze_batch(batch)
    assert (raised.value.index, raised.value.field) == (1, "tool_call_id")


def test_bad_non_dict_item_in_a_batch_has_its_index_and_no_field() -> None:
    with pytest.raises(InvalidMessage) as raised:
        freeze_batch([user(), user(), "junk"])
    assert (raised.value.index, raised.value.field) == (2, None)


def test_freeze_batch_accepts_any_iterable_and_returns_frozen_list() -> None:
    messages = [user("a"), rich(), tool()]
    for batch in (messages, tuple(messages), iter(messages), (m for m in messages)):
        frozen = freeze_batch(batch)
        assert type(frozen) is list
        assert frozen == messages
        assert all(isinstance(m, FrozenDict) for m in frozen)
    assert freeze_batch([]) == []


def test_freeze_batch_accepts_messages_frozen_before() -> None:
    frozen = [freeze(user("a")), freeze(rich())]
    assert freeze_batch(frozen) == [user("a"), rich()]


def test_freeze_batch_validates_a_hand_built_frozendict() -> None:
    # FrozenDict(...) is an ordinary constructor: its type proves nothing about validity.
    with pytest.raises(InvalidMessage) as raised:
        freeze_batch([user(), FrozenDict({"role": "bogus"})])
    assert (raised.value.index, raised.value.field) == (1, "role")


def test_validate_batch_returns_the_callers_messages() -> None:
    messages = [user("a"), tool()]
    result = validate_batch(tuple(messages))
    assert result == messages
    assert all(a is b for a, b in zip(result, messages, strict=True))


# -- Conv, as_conv, check_user_id --------------------------------------------------------------


def test_as_conv_of_a_str_is_an_anonymous_conv() -> None:
    assert as_conv("c1") == Conv(None, "c1")
    assert as_conv("c1").user_id is None
    assert type(as_conv("c1")) is Conv


def test_as_conv_returns_a_valid_conv_unchanged() -> None:
    for conv in (Conv("alice", "c1"), Conv(None, "c1")):
        assert as_conv(conv) is conv


def test_as_conv_rejects_an_empty_str() -> None:
    with pytest.raises(ValueError):
        as_conv("")


@pytest.mark.parametrize("conv", [None, 1, b"c1", ["c1"], ("alice", "c1"), (None, "c1"), Text("c")])
def test_as_conv_rejects_non_str_non_conv(conv: Any) -> None:
    with pytest.raises(TypeError):
        as_conv(conv)


@pytest.mark.parametrize(
    "conv",
    [
        Conv(None, ""),
        Conv(None, None),  # type: ignore[arg-type]
        Conv(None, 1),  # type: ignore[arg-type]
        Conv("", "c1"),
        Conv(1, "c1"),  # type: ignore[arg-type]
        Conv(b"u", "c"),  # type: ignore[arg-type]
    ],
)
def test_as_conv_rejects_a_conv_with_bad_parts(conv: Conv) -> None:
    with pytest.raises(ValueError):
        as_conv(conv)


def test_check_user_id() -> None:
    assert check_user_id(None) is None
    assert check_user_id("alice") == "alice"
    for bad in ("", 1, b"alice", ["alice"]):
        with pytest.raises(ValueError):
            check_user_id(bad)


# -- text_of ---------------------------------------------------------------------------------


def test_text_of_str_content() -> None:
    assert text_of(user("hello")) == "hello"
    assert text_of(user("")) == ""


def test_text_of_parts_joins_text_parts_with_newlines() -> None:
    parts = [
        {"type": "text", "text": "one"},
        {"type": "image_url", "image_url": {"url": "http://x"}},
        {"type": "text", "text": "two"},
        {"type": "text", "text": 3},
        {"type": "text"},
        "loose",
    ]
    assert text_of({"role": "user", "content": parts}) == "one\ntwo"
    assert text_of(freeze(user([{"type": "text", "text": "a"}]))) == "a"
    assert text_of(user([])) == ""


def test_text_of_message_without_text() -> None:
    assert text_of(assistant_calls(call())) == ""
    assert text_of({"role": "user"}) == ""


def test_frozen_messages_are_out_of_the_cyclic_gcs_sight() -> None:
    """A stored message can hold no cycle: a full collection must not walk a store's
    messages (1,000,000 in a MemoryStore made each one take 240 ms)."""
    import gc

    from otpmem.stores import MemoryStore

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    frozen = freeze({"role": "assistant", "content": None, "tool_calls": [call]})
    nested = [frozen, frozen["tool_calls"], frozen["tool_calls"][0]]
    nested.append(frozen["tool_calls"][0]["function"])
    assert [gc.is_tracked(c) for c in nested] == [False] * 4
    copy = thaw(frozen)  # mutable again: may join a cycle, so the GC sees it
    copy["metadata"] = {"self": copy}
    assert gc.is_tracked(copy)

    store = MemoryStore.start_link()
    try:
        gc.collect()
        before = len(gc.get_objects())
        batch = [{"role": "user", "content": f"m{j}"} for j in range(100)]
        for i in range(100):
            store.add(Conv("u", f"c{i}"), batch)
        gc.collect()
        assert len(gc.get_objects()) - before < 1_000, "10,000 messages, each tracked"
    finally:
        store.stop()
