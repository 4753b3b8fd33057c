"""The actions as MCP tools, through the official `mcp` client over Streamable HTTP."""

from __future__ import annotations

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .calltest import usage
from .stack import Stack


async def test_mcp_lists_the_echo_tools_and_calls_one_with_the_same_metering(stack: Stack) -> None:
    org = stack.org()
    async with (
        httpx2.AsyncClient(headers=org.headers, timeout=60) as http,
        streamable_http_client(f"{stack.url}/v1/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        assert init.server_info.name == "b3os"
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"echo__noop", "echo__echo", "echo__fail"} <= set(tools)
        assert tools["echo__echo"].input_schema["required"] == ["text"]
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
    used = usage(stack, org)
    assert used["calls"] == 2
    assert used["units"]["actions.tool_call"] == 2
    assert used["units"]["actions.publisher_microusd"] == 100


async def test_mcp_calls_count_against_the_same_limits(stack: Stack) -> None:
    org = stack.org(cap=1)
    async with (
        httpx2.AsyncClient(headers=org.headers, timeout=60) as http,
        streamable_http_client(f"{stack.url}/v1/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("echo__noop", {})
        assert result.is_error
        assert result.content[0].text.startswith("quota_exceeded: ")  # type: ignore[union-attr]
        meta = result.meta or {}
        assert meta["b3os"]["status"] == 429 and meta["b3os"]["error"]["retry_after"] >= 1
