"""`otpmem simulate --model openai` end to end, against an OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from otpmem.cli import main


class _Chat(BaseHTTPRequestHandler):
    """Answers every chat completion with the number of messages it was sent."""

    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).requests.append(body)
        reply = {
            "choices": [
                {
                    "message": {"role": "assistant", "content": f"saw {len(body['messages'])}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Chat.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5.0)


def test_simulate_against_an_openai_compatible_server(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        [
            "simulate", "--agents", "3", "--turns", "4", "--data", str(tmp_path / "run"),
            "--model", "openai", "--base-url", server, "--model-name", "tiny",
            "--no-progress", "--json",
        ]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["ok"] and report["lost"] == 0
    assert report["turns_done"] == 12
    assert len(_Chat.requests) == 12
    assert all(request["model"] == "tiny" for request in _Chat.requests)
    # Every request carries the agent's system prompt first and its growing history.
    assert all(r["messages"][0]["role"] == "system" for r in _Chat.requests)
    assert max(len(r["messages"]) for r in _Chat.requests) == 1 + 2 * 3 + 1
