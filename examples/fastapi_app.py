"""otpmem inside a FastAPI app: the supervised tree starts and stops with the app's lifespan.

Each (user, conversation) gets a supervised agent; a request's ``Idempotency-Key`` header is
its turn id, so a client that retries after a timeout or a dropped connection gets the
same answer, and the conversation stores the turn once. Every call is awaited
(``otpmem.aio``): the event loop never blocks on the store or the model.

    pip install 'otpmem[web]' uvicorn
    uvicorn examples.fastapi_app:app            # serve (data in ./fastapi-data)
    python examples/fastapi_app.py              # a self-test with FastAPI's test client
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel

from otpmem import aio
from otpmem.agents import AgentHandle
from otpmem.llm import ChatModel, ScriptedModel
from otpmem.messages import Conv


class Turn(BaseModel):
    """A user's message."""

    text: str


def echo_model() -> ChatModel:
    """An offline model: it says how many messages it was sent."""
    return ScriptedModel(
        lambda messages, tools: f"message {len(messages)}: {messages[-1]['content']}"
    )


def create_app(data_dir: str | None = None, model: ChatModel | None = None) -> FastAPI:
    """The web app; otpmem's tree (LevelDB under ``data_dir``, else in memory) is its lifespan."""
    llm = model or echo_model()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with aio.running(data_dir) as root:
            app.state.root = root
            app.state.starting = asyncio.Lock()
            yield
        # Leaving the block stopped the agents, then the store (newest first).

    app = FastAPI(lifespan=lifespan)

    async def agent_for(user: str, conversation: str) -> aio.AsyncAgent:
        # A named agent: its handle finds the restarted incarnation after a crash.
        name = f"web.{user}.{conversation}"
        async with app.state.starting:
            if not AgentHandle.named(name).alive:
                await aio.start_agent(
                    llm=llm,
                    memory={"window": 20},
                    user_id=user,
                    conversation_id=conversation,
                    name=name,
                )
        return aio.AsyncAgent(AgentHandle.named(name))

    @app.post("/chat/{user}/{conversation}")
    async def chat(
        user: str,
        conversation: str,
        turn: Turn,
        idempotency_key: str | None = Header(default=None),
    ) -> dict[str, Any]:
        agent = await agent_for(user, conversation)
        result = await agent.run(turn.text, turn_id=idempotency_key)
        return {"answer": result.content, "stored": len(result.messages)}

    @app.get("/history/{user}/{conversation}")
    async def history(user: str, conversation: str) -> list[dict[str, Any]]:
        store = await aio.default_store()
        return [dict(m) for m in await store.get(Conv(user, conversation))]

    @app.get("/health")
    async def health() -> dict[str, Any]:
        root = app.state.root
        if not root.alive:
            raise HTTPException(503, "otpmem's tree is down")
        children = await aio.run(root.which_children)
        return {"tree": {str(c.id): c.pid is not None for c in children}}

    return app


app = create_app(os.environ.get("OTPMEM_WEB_DATA", "fastapi-data"))


def self_test() -> int:
    """Start the app with its test client, hold a conversation, retry a turn, stop."""
    from fastapi.testclient import TestClient

    with tempfile.TemporaryDirectory() as data, TestClient(create_app(data)) as client:
        print(client.get("/health").json())
        first = client.post(
            "/chat/ann/trip", json={"text": "Book Paris"}, headers={"Idempotency-Key": "r1"}
        )
        again = client.post(
            "/chat/ann/trip", json={"text": "Book Paris"}, headers={"Idempotency-Key": "r1"}
        )
        print("answer:", first.json()["answer"], "| retried:", again.json()["answer"])
        client.post("/chat/ann/trip", json={"text": "At eight"})
        stored = client.get("/history/ann/trip").json()
        print("stored:", [m["content"] for m in stored])
        ok = len(stored) == 4 and first.json() == again.json()
    print("OK: the retried turn was stored once" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(self_test())
