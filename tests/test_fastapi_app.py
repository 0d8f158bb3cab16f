"""examples/fastapi_app.py: otpmem as a supervised subsystem of a FastAPI app, through its
lifespan, driven by FastAPI's test client."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from fastapi.testclient import TestClient

from otpmem.actors import faults, whereis
from otpmem.app import APP_NAME
from otpmem.stores import default_store

ROOT = Path(__file__).resolve().parent.parent


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fastapi_app", ROOT / "examples" / "fastapi_app.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tree_lives_exactly_as_long_as_the_app(tmp_path: Path) -> None:
    app = load_example().create_app(str(tmp_path / "data"))
    assert whereis(APP_NAME) is None  # importing and creating the app starts nothing
    with TestClient(app) as client:
        assert whereis(APP_NAME) is not None
        tree = client.get("/health").json()["tree"]
        # Every child of the application's root is up (main's tree may grow more of them).
        assert {"default_store", "agents"} <= set(tree) and all(tree.values())
    assert whereis(APP_NAME) is None


def test_a_retried_request_is_answered_again_and_stored_once(tmp_path: Path) -> None:
    app = load_example().create_app(str(tmp_path / "data"))
    with TestClient(app) as client:
        headers = {"Idempotency-Key": "req-1"}
        first = client.post("/chat/ann/trip", json={"text": "Book Paris"}, headers=headers)
        again = client.post("/chat/ann/trip", json={"text": "Book Paris"}, headers=headers)
        assert first.status_code == again.status_code == 200
        assert first.json() == again.json() == {"answer": "message 1: Book Paris", "stored": 2}
        history = client.get("/history/ann/trip").json()
        assert [m["content"] for m in history] == ["Book Paris", "message 1: Book Paris"]
        assert client.get("/history/bob/trip").json() == []


def test_the_app_rides_out_a_store_crash_and_keeps_the_data_across_restarts(
    tmp_path: Path,
) -> None:
    data = str(tmp_path / "data")
    with TestClient(load_example().create_app(data)) as client:
        client.post("/chat/ann/trip", json={"text": "one"})
        faults.kill(default_store())  # the store's supervisor restarts it
        assert client.post("/chat/ann/trip", json={"text": "two"}).json()["answer"] == (
            "message 3: two"
        )
    with TestClient(load_example().create_app(data)) as client:  # a new process, same disk
        contents = [m["content"] for m in client.get("/history/ann/trip").json()]
        assert contents == ["one", "message 1: one", "two", "message 3: two"]
