"""``otpmem simulate --model openai`` end to end, against OpenAI-compatible servers on
loopback: one that answers, none at all, one that drops every chat request, one that
refuses it. The run fails fast and says which URL failed and how."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from otpmem.stores import LevelDBStore
from tests.cli_support import fails_with, ledger_turns, otpmem
from tests.support import loopback, send_json


class _Chat(BaseHTTPRequestHandler):
    """``answer``: replies with the number of messages it was sent; ``drop``: closes the
    connection without a word; ``refuse``: 401. GET (the probe) always answers."""

    behaviour = "answer"
    requests: list[dict[str, Any]] = []

    def do_GET(self) -> None:
        self._send(200, {"data": []})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).requests.append(body)
        if self.behaviour == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if self.behaviour == "refuse":
            self._send(401, {"error": {"message": "invalid api key"}})
            return
        self._send(
            200,
            {
                "choices": [
                    {
                        "message": {"role": "assistant", "content": f"saw {len(body['messages'])}"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            },
        )

    def _send(self, status: int, payload: Any) -> None:
        send_json(self, status, payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    _Chat.requests = []
    _Chat.behaviour = getattr(request, "param", "answer")
    with loopback(_Chat) as url:
        yield url


def openai_args(data: Path, url: str, agents: int = 3, turns: int = 4) -> list[object]:
    return [
        "simulate",
        "--agents",
        agents,
        "--turns",
        turns,
        "--workers",
        agents,
        "--data",
        data,
        "--model",
        "openai",
        "--base-url",
        url,
        "--model-name",
        "tiny",
    ]


def test_simulate_against_an_openai_compatible_server(server: str, tmp_path: Path) -> None:
    result = otpmem(*openai_args(tmp_path / "run", server), "--no-progress", "--json")

    assert result.returncode == 0, str(result)
    report = json.loads(result.stdout)
    assert report["ok"] and report["lost"] == 0
    assert report["turns_done"] == 12
    assert len(_Chat.requests) == 12
    assert all(request["model"] == "tiny" for request in _Chat.requests)
    # Every request carries the agent's system prompt first and its growing history.
    assert all(r["messages"][0]["role"] == "system" for r in _Chat.requests)
    assert max(len(r["messages"]) for r in _Chat.requests) == 1 + 2 * 3 + 1
    kept = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert kept["model"] == {"kind": "openai", "base_url": server, "name": "tiny"}


def test_no_server_at_the_url_fails_in_seconds_naming_it_and_storing_nothing(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    data = tmp_path / "run"

    began = time.monotonic()
    result = otpmem(*openai_args(data, url))
    took = time.monotonic() - began

    assert took < 10.0, str(result)
    message = result.stderr.splitlines()[-1]
    assert message.startswith(
        f"otpmem simulate: cannot reach the model server at {url} (--base-url): cannot connect ("
    )
    assert "Connection refused" in message
    # Each retry was shown as it happened.
    assert "trying again in 0.5 s (attempt 1 of 3)" in result.stderr
    assert "trying again in 1.0 s (attempt 2 of 3)" in result.stderr
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert not data.exists()


@pytest.mark.parametrize("server", ["drop"], indirect=True)
def test_a_server_that_drops_every_turn_stops_the_run_after_a_short_budget(
    server: str, tmp_path: Path
) -> None:
    data = tmp_path / "run"

    began = time.monotonic()
    result = otpmem(*openai_args(data, server), "--no-progress", timeout=60.0)
    took = time.monotonic() - began

    assert result.returncode == 2 and result.stdout == "", str(result)
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(
        f"otpmem simulate: the model at {server} (--base-url) cannot be "
        f"reached: {server}/chat/completions failed after 4 attempt(s)"
    )
    assert last.endswith(f"continue with: otpmem simulate --data {data} --resume")
    # The client's retries, each shown as it happened, then the turns given up.
    assert f"model: {server}/chat/completions: the server closed the connection" in result.stderr
    assert "trying again in 0.5 s" in result.stderr and "trying again in 2.0 s" in result.stderr
    assert "trying the turn again (1 of 3 model failures in a row)" in result.stderr
    assert ledger_turns(data) == set()
    # Three turns failed, each after four attempts; at most the retries already started
    # ran on (one per worker), and nothing more was sent.
    assert 3 * 4 <= len(_Chat.requests) <= 3 * 4 + 2 * 4
    assert took < 30.0
    # Every attempt at a turn reused its turn id: its user message is stored once.
    store = LevelDBStore.start_link(data)
    try:
        assert store.conversations(), "the failed turns stored their user messages"
        for conv in store.conversations():
            users = [m["content"] for m in store.get(conv) if m["role"] == "user"]
            assert len(users) == len(set(users)) <= 1, (conv, users)
    finally:
        store.stop()


@pytest.mark.parametrize("server", ["refuse"], indirect=True)
def test_a_server_that_refuses_the_request_stops_the_run_at_once(
    server: str, tmp_path: Path
) -> None:
    result = otpmem(*openai_args(tmp_path / "run", server, agents=1), "--no-progress")

    fails_with(
        result, 2, f"the model at {server} (--base-url) refused a turn: ", "answered HTTP 401"
    )
    assert len(_Chat.requests) == 1  # a 4xx is not retried
