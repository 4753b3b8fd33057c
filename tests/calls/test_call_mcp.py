"""The actions as MCP tools, through the official `mcp` client over Streamable HTTP."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from sqlmodel import Session

from api.registry import publishers
from packs.build import build_pack
from packs.signing import public_key_b64

from .calltest import usage
from .stack import ECHO_DIR, Stack, publish

CLIENT = {"name": "t", "version": "0"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT},
}


@asynccontextmanager
async def mcp_session(stack: Stack, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    """The official client's session on the api's `/v1/mcp`, not yet initialized."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(f"{stack.url}/v1/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        yield session


async def test_mcp_lists_the_echo_tools_and_calls_one_with_the_same_metering(stack: Stack) -> None:
    org = stack.org()
    async with mcp_session(stack, org.headers) as session:
        init = await session.initialize()
        assert init.server_info.name == "b3os"
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"echo__noop", "echo__echo", "echo__fail"} <= set(tools)
        assert tools["echo__echo"].input_schema["required"] == ["text"]
        assert tools["echo__echo"].meta == {
            "b3os/ref": "com.example.tools/echo/echo@1",
            "b3os/pin": "com.example.tools/echo/echo@1.0.0",
            "b3os/kind": "vm",
        }
        result = await session.call_tool(
            "echo__echo", {"text": "hi", "file": {"$bytes": "aGVsbG8K", "name": "hello.txt"}}
        )
        assert not result.is_error
        assert result.structured_content == {
            "text": "hi",
            "file": {"$bytes": "aGVsbG8K", "name": "hello.txt", "bytes": 6, "contentType": "text/plain"},
        }
        failed = await session.call_tool("echo__fail", {"mode": "exit", "exitCode": 5})
        assert failed.is_error
        assert failed.content[0].text.startswith("tool_failed (exit): ")  # type: ignore[union-attr]
        bad = await session.call_tool("echo__echo", {"text": 5})
        assert bad.is_error
        assert "input.text: 5 is not of type 'string'" in bad.content[0].text  # type: ignore[union-attr]
        assert (bad.meta or {})["b3os"]["status"] == 400
        assert (bad.meta or {})["b3os"]["error"]["code"] == "invalid_request"
    used = usage(stack, org)
    assert used["calls"] == 2
    assert used["units"]["actions.tool_call"] == 2
    assert used["units"]["actions.publisher_microusd"] == 100


async def test_a_tool_name_once_given_to_a_pack_is_never_given_to_another(stack: Stack) -> None:
    # a rival namespace, first in alphabetical order, publishes a pack of the same name later
    rival = "aaa.rival"
    async with mcp_session(stack, stack.org().headers) as session:  # the api's tool map, before
        await session.initialize()
        assert not any(t.name.startswith(rival) for t in (await session.list_tools()).tools)
    key = Ed25519PrivateKey.generate()
    with Session(stack.engine) as session:
        publishers.set_publisher(session, namespace=rival, org_id=stack.publisher.org_id)  # type: ignore[union-attr]
        publishers.register_signing_key(
            session, namespace=rival, kid=f"{rival}#k1", public_key=public_key_b64(key)
        )
        session.commit()
    root = stack.root / "builds" / "rival-echo"
    shutil.copytree(ECHO_DIR, root)
    manifest = json.loads((root / "b3pack.json").read_text())
    manifest.update(pack=f"{rival}/echo", version="9.0.0", pricing={"model": "free"})
    manifest["publisher"] = {"id": rival, "name": "A rival"}
    (root / "b3pack.json").write_text(json.dumps(manifest))
    build_pack(root, kid=f"{rival}#k1", private_key=key, tool=True)
    publish(stack, stack.publisher, root)  # type: ignore[arg-type]
    stack.wait_installed("node-a", [f"{rival}/echo@9.0.0"])
    async with mcp_session(stack, stack.org().headers) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert (tools["echo__echo"].meta or {})["b3os/ref"] == "com.example.tools/echo/echo@1"
        assert (tools["aaa.rival__echo__echo"].meta or {})["b3os/ref"] == "aaa.rival/echo/echo@9"
        mine = await session.call_tool("echo__echo", {"text": "hi"})
        theirs = await session.call_tool("aaa.rival__echo__echo", {"text": "hi"})
    assert (mine.meta or {})["b3os"]["ref"] == "com.example.tools/echo/echo@1.0.0"
    assert (theirs.meta or {})["b3os"]["ref"] == "aaa.rival/echo/echo@9.0.0"


async def test_mcp_calls_count_against_the_same_limits(stack: Stack) -> None:
    org = stack.org(cap=1)
    async with mcp_session(stack, org.headers) as session:
        await session.initialize()
        result = await session.call_tool("echo__noop", {})
        assert result.is_error
        assert result.content[0].text.startswith("quota_exceeded: ")  # type: ignore[union-attr]
        meta = result.meta or {}
        retry_after = meta["b3os"]["error"]["retry_after"]
        assert meta["b3os"]["status"] == 429 and retry_after >= 1
        assert result.content[0].text.endswith(f" Retry after {retry_after} s.")  # type: ignore[union-attr]


async def test_an_unknown_mcp_tool_is_an_invalid_params_error_and_costs_nothing(stack: Stack) -> None:
    org = stack.org()
    async with mcp_session(stack, org.headers) as session:
        await session.initialize()
        with pytest.raises(MCPError) as raised:
            await session.call_tool("echo__nothing", {})
        assert raised.value.code == -32602
        assert raised.value.message == "Unknown tool: echo__nothing"
    assert usage(stack, org)["calls"] == 0


@pytest.mark.parametrize(
    ("key", "status", "challenge", "message"),
    [
        ("none", 401, "Bearer", "unauthorized: Send an API key as the header Authorization: Bearer <key>."),
        ("wrong", 401, 'Bearer error="invalid_token"', "unauthorized: The API key is not valid."),
        (
            "no scope",
            403,
            'Bearer error="insufficient_scope", scope="actions:call"',
            "forbidden: This key lacks the scope actions:call.",
        ),
    ],
)
async def test_mcp_without_a_usable_key_is_an_auth_error_the_official_client_raises(
    stack: Stack, key: str, status: int, challenge: str, message: str
) -> None:
    headers = {
        "none": {},
        "wrong": {"Authorization": "Bearer b3_not-a-key"},
        "no scope": stack.org(scopes=("routines:read",)).headers,
    }[key]
    async with mcp_session(stack, headers) as session:
        with pytest.raises(MCPError) as raised:
            await session.initialize()
    assert raised.value.message == message
    api_error = raised.value.data["error"]
    assert api_error["code"] == message.split(":")[0]
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        answer = await http.post(f"{stack.url}/v1/mcp", json=INITIALIZE)
    assert answer.status_code == status
    assert answer.headers["WWW-Authenticate"] == challenge
    assert answer.json()["error"]["data"] == {"error": api_error}


async def test_mcp_answers_post_only_since_it_keeps_no_session(stack: Stack) -> None:
    org = stack.org()
    async with httpx2.AsyncClient(headers=org.headers, timeout=60) as http:
        for method in ("GET", "DELETE"):
            answer = await http.request(method, f"{stack.url}/v1/mcp")
            assert answer.status_code == 405 and answer.headers["Allow"] == "POST"
            assert answer.json()["error"]["code"] == "method_not_allowed"
